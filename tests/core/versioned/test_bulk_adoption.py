"""Adopting many versions in one transaction stores exactly what adopting them one by one stores.

A fetch or a clone adopts its versions ``ADOPT_BATCH`` per transaction, and the DAG writer then
answers from what it wrote in that transaction (versions, UUIDs, branch records, ancestor tables and
pages) instead of reading it back; adopting one version per transaction reads everything back. The
two must leave the same records, byte for byte (the format is unchanged), and read back the same:
ancestors, children, log order, ``repo log``. The history crosses an ancestor page boundary
(``PAGE_BITS`` ids) on a chain, on side branches and at merges, where copy-on-write pages change hands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned import Repository, create_repository, open_keyvalue, open_repository
from napari_shardscope.core.versioned.ancestry import PAGE_BITS, decode_page, encode_page
from napari_shardscope.core.versioned.engines import open_engine
from napari_shardscope.core.versioned.errors import UnknownVersionError
from napari_shardscope.core.versioned.hollow import HollowRef, encode_stub
from napari_shardscope.core.versioned.node import NodeContent
from tests.cli_batch import run_commands
from tests.core.versioned.format1 import engine_of

DAG_PREFIXES = (K.VERSION_PREFIX, K.UUID_PREFIX, K.BRANCH_PREFIX, K.CHILD_PREFIX, K.ANCESTOR_PREFIX,
                K.ANCESTOR_PAGE_PREFIX)


def make_origin(path: Path) -> Repository:
    """A chain past one ancestor page, with branches forking on both sides of the boundary and merges back."""
    repo = create_repository(path, durable=False)
    kv = open_keyvalue(repo, "kv", create=True)
    repo.commit(repo.root, "root")
    forks: list[str] = []
    with repo.batch() as b:
        v = b.version("main")
        for i in range(PAGE_BITS + 150):
            nv = b.new_version(v)
            b.write(nv).put(kv.instance, b"k%d" % (i % 7), b"%d" % i)
            v = b.commit(nv, f"main {i}")
            if i in (5, PAGE_BITS - 40, PAGE_BITS - 3, PAGE_BITS + 20):
                forks.append(v.uuid)
    for n, fork in enumerate(forks):
        with repo.batch() as b:
            side = b.new_version(fork, branch=f"side{n}")
            b.write(side).put(kv.instance, b"side%d" % n, b"x")
            side = b.commit(side, f"side {n}")
            for j in range(3 + n * 20):  # the last sides end past the boundary
                nv = b.new_version(side)
                b.write(nv).put(kv.instance, b"side%d" % n, b"%d" % j)
                side = b.commit(nv, f"side {n}.{j}")
            if n % 2 == 0:  # every other side merges into main (different keys: no conflict)
                head = b.version("main")
                merged = b.merge(head, side).version
                b.commit(merged, f"merge side {n}")
            with_child = b.new_version(side)  # continue the side after the merge too
            b.write(with_child).put(kv.instance, b"after", b"%d" % n)
            b.commit(with_child, f"side {n} after")
    return repo


def dag_records(path: Path) -> dict[bytes, bytes]:
    kv = open_engine(engine_of(path), path, create=False, durable=True)
    try:
        with kv.read() as txn:
            return {k: v for p in DAG_PREFIXES for k, v in txn.scan(p, K.next_prefix(p))}
    finally:
        kv.close()


def engine_dump(path: Path) -> dict[bytes, bytes]:
    """Every key and value the engine holds (data, DAG, hollow records, generation, journal)."""
    kv = open_engine(engine_of(path), path, create=False, durable=True)
    try:
        with kv.read() as txn:
            return dict(txn.scan(b"\x00", None))
    finally:
        kv.close()


def repo_logs(*calls: tuple[Path, tuple[str, ...]]) -> list[list[str]]:
    """``shardscope repo log PATH ARGS --json`` for each call, the version UUIDs each prints.

    The calls run in one child process (``tests/cli_batch.py``: each through the console script's ``main`` on
    real pipes), one interpreter start-up instead of one per call; each call opens its repository anew.
    """
    done = run_commands([["repo", "log", str(path), *args, "--json"] for path, args in calls], timeout=300)
    for proc in done:
        assert proc.returncode == 0, proc.stderr
    return [[json.loads(line)["uuid"] for line in proc.stdout.splitlines() if line.strip()] for proc in done]


@dataclass(frozen=True)
class Origin:
    """What the adoptions adopt: every node of :func:`make_origin`'s history in id order (parents first), and
    its branch heads."""

    nodes: list[NodeContent]
    heads: dict[str, str]


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    """Built once (4,000 commits) for the tests below, which only read its nodes."""
    repo = make_origin(tmp_path_factory.mktemp("bulk-adoption") / "origin")
    try:
        order = sorted(repo.versions(), key=lambda v: v.vid)  # ids ascending: parents first
        return Origin([repo.read_node(v) for v in order], {b.name: b.head for b in repo.branches()})
    finally:
        repo.close()


def test_bulk_adoption_stores_what_one_by_one_adoption_stores(origin: Origin, tmp_path: Path) -> None:
    per_transaction = 1000  # as a fetch does (``ADOPT_BATCH``): the writer's memory starts empty in each
    nodes, heads = origin.nodes, origin.heads
    assert len(nodes) > PAGE_BITS + 150 and len(heads) == 5

    one = create_repository(tmp_path / "one", durable=False, root=nodes[0])
    bulk = create_repository(tmp_path / "bulk", durable=False, root=nodes[0])
    built = create_repository(tmp_path / "built", durable=False, root=nodes[0])
    for repo in (one, bulk, built):
        open_keyvalue(repo, "kv", create=True)
        repo.fill_root(nodes[0])
    for node in nodes[1:]:
        one.adopt_node(node)  # a transaction each: every record read back from the store
    for first in range(1, len(nodes), per_transaction):
        with bulk.batch() as b:
            for node in nodes[first:first + per_transaction]:
                b.adopt_node(node)
    for first in range(1, len(nodes), per_transaction):  # the bulk path: records built in memory, one put
        with built.batch() as b:
            b.adopt_nodes((node, None, None) for node in nodes[first:first + per_transaction])

    for name, head in heads.items():
        assert one.head(name).uuid == bulk.head(name).uuid == head
        assert [v.uuid for v in one.log(name)] == [v.uuid for v in bulk.log(name)]
        assert [v.uuid for v in one.ancestry(name)] == [v.uuid for v in bulk.ancestry(name)]
    versions = one.versions()
    for v in versions[:: 97] + versions[-200:]:
        w = bulk.version(v.uuid)
        assert (w.vid, w.parents, w.branch, w.message) == (v.vid, v.parents, v.branch, v.message)
        children = [c.uuid for c in one.children(v)]
        assert children == [c.uuid for c in bulk.children(w)]
        # An ancestry walks the whole history back (4,000 versions, more than a handle's version cache: a
        # walk decodes only what the cache cannot hold, test_dag_costs.py), compared at every version sampled
        assert [a.uuid for a in one.ancestry(v)] == [a.uuid for a in bulk.ancestry(w)]
    assert bulk.verify() == [] and one.verify() == [] and built.verify() == []
    one.close()
    bulk.close()
    built.close()

    assert dag_records(tmp_path / "one") == dag_records(tmp_path / "bulk")  # same records, same bytes
    assert dag_records(tmp_path / "one") == dag_records(tmp_path / "built")
    assert engine_dump(tmp_path / "bulk") == engine_dump(tmp_path / "built")  # everything, generations too
    # a chain's pages are grown from their parent's runs, not encoded from their bits: they must still be
    # the canonical encoding of their bits (what encode_page gives), and never a full page (coded FULL)
    pages = [(k, v) for k, v in dag_records(tmp_path / "built").items() if k.startswith(K.ANCESTOR_PAGE_PREFIX)]
    assert len(pages) > PAGE_BITS
    for key, raw in pages:
        flags = decode_page(raw)
        assert encode_page(flags) == raw, key
        assert flags != b"\x01" * PAGE_BITS, key
    variants: tuple[tuple[str, ...], ...] = ((), ("side2",), ("--all",))
    logs = repo_logs(*((tmp_path / name, args) for args in variants for name in ("one", "bulk")))
    for i, args in enumerate(variants):
        assert logs[2 * i] == logs[2 * i + 1], args
    with open_repository(tmp_path / "bulk") as repo:
        assert logs[3][0] == repo.head("side2").uuid  # bulk's log of side2 starts at its head


def test_bulk_adoption_of_hollow_versions_stores_what_adopting_them_one_by_one_stores(origin: Origin,
                                                                                       tmp_path: Path) -> None:
    """A lazy clone's adoption (stubs, hollow records, the hollow flag) through the bulk path: the same engine."""
    nodes = origin.nodes
    stubbed = [replace(n, entries=tuple(replace(e, value=None if e.value is None else encode_stub(0, i, len(e.value)))
                                        for i, e in enumerate(n.entries))) for n in nodes]
    where = [HollowRef("origin", (f"{i:064x}",)) for i in range(len(stubbed))]
    paths = {"each": tmp_path / "each", "bulk": tmp_path / "bulk"}
    for how, path in paths.items():
        repo = create_repository(path, durable=False, root=stubbed[0])
        open_keyvalue(repo, "kv", create=True)
        repo.fill_root(stubbed[0], hollow=where[0])
        for first in range(1, len(stubbed), 1000):
            with repo.batch() as b:
                part = range(first, min(first + 1000, len(stubbed)))
                if how == "each":
                    for i in part:
                        b.adopt_node(stubbed[i], hollow=where[i])
                else:
                    b.adopt_nodes((stubbed[i], None, where[i]) for i in part)
        assert repo.lazy and repo.version_count() == len(nodes)
        repo.close()
    each, bulk = engine_dump(paths["each"]), engine_dump(paths["bulk"])
    assert len(each) > 7 * len(nodes)
    assert each == bulk


def test_an_error_in_a_bulk_adoption_leaves_what_one_by_one_adoption_leaves(tmp_path: Path) -> None:
    """A node that cannot be adopted, the error handled inside the batch: the versions before it are whole."""
    origin = create_repository(tmp_path / "origin", durable=False)
    kv = open_keyvalue(origin, "kv", create=True)
    origin.commit(origin.root, "root")
    for i in range(6):
        v = origin.new_version("main")
        with origin.write(v) as w:
            w.put(kv.instance, b"k%d" % i, b"%d" % i)
        origin.commit(v, f"v{i}")
    nodes = [origin.read_node(v) for v in sorted(origin.versions(), key=lambda v: v.vid)]
    origin.close()
    orphan = replace(nodes[5], parents=("f" * 32,))  # its parent is nowhere: refused
    wanted = [*nodes[1:4], orphan, nodes[4]]
    for how in ("each", "bulk"):
        repo = create_repository(tmp_path / how, durable=False, root=nodes[0])
        open_keyvalue(repo, "kv", create=True)
        repo.fill_root(nodes[0])
        with repo.batch() as b:
            try:
                if how == "each":
                    for node in wanted:
                        b.adopt_node(node)
                else:
                    b.adopt_nodes((node, None, None) for node in wanted)
            except UnknownVersionError:
                pass
        assert repo.version_count() == 4 and repo.verify() == []
        assert open_keyvalue(repo, "kv").get(nodes[3].uuid, "k2") == b"2"
        repo.close()
    assert engine_dump(tmp_path / "each") == engine_dump(tmp_path / "bulk")
