"""Building the DAG index from a list of versions (an upgrade) and checking it against the DAG (fsck).

Kept apart from :mod:`.dagindex`, whose readers and writer serve every open and edit: these run
once per upgrade or ``repo verify`` and walk every version.
"""

from __future__ import annotations

import numpy as np

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.ancestry import (
    EMPTY,
    PAGE_BITS,
    PAGE_MASK,
    PAGE_SHIFT,
    PageReader,
    write_ancestors,
)
from napari_shardscope.core.versioned.ancestry import read_table as read_ancestor_table
from napari_shardscope.core.versioned.dag import Dag, Version
from napari_shardscope.core.versioned.dagindex import BranchRecord
from napari_shardscope.core.versioned.engines.protocol import ReadTxn, WriteTxn
from napari_shardscope.core.versioned.errors import StoreCorruptError


def build_index(txn: WriteTxn, versions: list[Version]) -> None:
    """Write every format-2 DAG record for ``versions`` (format 1 held only the version records).

    One pass in id order (parents first), sharing ancestor pages as :func:`write_ancestors` does,
    so the cost is O(versions × pages) whatever the shape of the DAG.
    """
    dag = Dag(versions)  # validates parents and ids
    pages = PageReader(txn, limit=1 << 16)
    vid_of = {v.uuid: v.vid for v in versions}
    for v in dag:
        txn.put(K.uuid_key(v.uuid), K.pack_u32(v.vid))
        parents = [vid_of[p] for p in v.parents]
        for pv in parents:
            txn.put(K.child_key(pv, v.vid), b"")
        write_ancestors(txn, v.vid, parents, pages)
    for b in dag.branches():
        rec = BranchRecord(b.name, base=vid_of[b.base], head=vid_of[b.head], length=b.length)
        txn.put(K.branch_key(b.name), rec.encode())


def check_index(txn: ReadTxn, dag: Dag) -> list[str]:
    """Problems of the format-2 records against the full DAG ``dag`` (what ``verify`` adds).

    The ancestor sets are checked page by page against their parents' (a page inherited unchanged,
    same code as every parent, needs no read), so the check costs O(versions × pages), not O(n²).
    """
    problems: list[str] = []
    versions = list(dag)
    want_uuids = {v.uuid.encode("ascii"): v.vid for v in versions}
    got_uuids: dict[bytes, int] = {}
    for key, raw in txn.scan(K.UUID_PREFIX, K.next_prefix(K.UUID_PREFIX)):
        got_uuids[key[len(K.UUID_PREFIX):]] = K.unpack_u32(raw) if len(raw) == 4 else -1
    if got_uuids != want_uuids:
        bad = sorted(set(got_uuids.items()) ^ set(want_uuids.items()))[:3]
        problems.append(f"UUID index disagrees with the version records ({len(bad)}+ entries, e.g. {bad})")
    want_children = {(dag.by_uuid(p).vid, v.vid) for v in versions for p in v.parents if p in dag}
    got_children = {(K.unpack_u32(k[-8:-4]), K.unpack_u32(k[-4:]))
                    for k in txn.scan_keys(K.CHILD_PREFIX, K.next_prefix(K.CHILD_PREFIX))}
    if got_children != want_children:
        problems.append(f"child index disagrees with the version records: {len(got_children - want_children)} "
                        f"extra, {len(want_children - got_children)} missing")
    want_branches = {b.name: (dag.by_uuid(b.base).vid, dag.by_uuid(b.head).vid, b.length) for b in dag.branches()}
    got_branches: dict[str, tuple[int, int, int]] = {}
    for key, raw in txn.scan(K.BRANCH_PREFIX, K.next_prefix(K.BRANCH_PREFIX)):
        try:
            rec = BranchRecord.decode(key[len(K.BRANCH_PREFIX):].decode("utf-8"), raw)
        except (StoreCorruptError, UnicodeDecodeError) as exc:
            problems.append(str(exc))
            continue
        got_branches[rec.name] = (rec.base, rec.head, rec.length)
    for name in sorted(set(want_branches) | set(got_branches)):
        if want_branches.get(name) != got_branches.get(name):
            problems.append(f"branch {name!r}: record {got_branches.get(name)} but the versions say "
                            f"(base, head, length) = {want_branches.get(name)}")
    problems += _check_ancestor_records(txn, dag, versions)
    return problems


def _check_ancestor_records(txn: ReadTxn, dag: Dag, versions: list[Version]) -> list[str]:
    problems: list[str] = []
    pages = PageReader(txn, limit=1 << 16)
    tables: dict[int, list[int]] = {}
    for v in versions:
        try:
            codes = read_ancestor_table(txn, v.vid)
            parents = [dag.by_uuid(p).vid for p in v.parents if p in dag]
            ptables = [tables[p] if p in tables else read_ancestor_table(txn, p) for p in parents]
            own = v.vid >> PAGE_SHIFT
            size = max([own + 1, *(len(t) for t in ptables)])
            if len(codes) != size:
                problems.append(f"version {v.uuid}: ancestor record has {len(codes)} pages, expected {size}")
                continue
            for i in range(size):
                pc = [t[i] if i < len(t) else EMPTY for t in ptables]
                if i != own and pc and len(set(pc)) == 1 and codes[i] == pc[0]:
                    continue
                expected = np.zeros(PAGE_BITS, dtype=np.uint8)
                for content in pages.pages([(c, i) for c in pc]):
                    expected |= np.frombuffer(content, dtype=np.uint8)
                if i == own:
                    expected[v.vid & PAGE_MASK] = 1
                if pages.pages([(codes[i], i)])[0] != expected.tobytes():
                    problems.append(f"version {v.uuid}: ancestor page {i} is not its parents' union plus itself")
                    break
        except StoreCorruptError as exc:
            problems.append(f"version {v.uuid}: {exc}")
            continue
        tables[v.vid] = codes
        if len(tables) > 1 << 14:  # bounded memory: parents are usually recent
            for old in sorted(tables)[: 1 << 13]:
                del tables[old]
    return problems
