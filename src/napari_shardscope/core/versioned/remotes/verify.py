"""Checking a remote: every object its refs reach exists and verifies, and which versions it holds.

"Every object" is every object a clone or a fetch reads: node, data and unversioned objects, each version's
key listing (what a lazy clone or fetch reads instead of the data) and the history packs (what a fetch
walks). Each is checked the way its reader checks it (hash, framing, record counts), so damage a clone or
fetch would refuse is a problem here too, and a key listing must point where the data objects hold each
value (:mod:`.listing`), or a lazy clone would read other bytes than an eager one.
"""

from __future__ import annotations

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.versioned.node import NodeEntry, NodeLog
from napari_shardscope.core.versioned.remotes import pages
from napari_shardscope.core.versioned.remotes.listing import listing_problems
from napari_shardscope.core.versioned.remotes.pack import (
    data_records_at,
    decode_keys,
    decode_node,
    decode_pack,
    node_content,
)
from napari_shardscope.core.versioned.remotes.store import NodeRef, RemoteStore


def verify_remote(url: str) -> list[str]:
    """Problems of the remote at ``url`` (empty when sound): every object its refs reach must exist and verify.

    Walks the whole history from the root and every branch head, reading (and hash-checking) every
    node, data, key listing and unversioned object, and every history pack the refs list; what a
    crashed push may leave — objects no ref reaches — is not a problem.
    """
    store = RemoteStore(url)
    problems: list[str] = []
    refs, _ = store.read_refs()
    if refs is None:
        return [f"{url}: no refs object"]
    seen: set[str] = set()
    stack = [refs.root, *refs.branches.values()]
    while stack:
        ref = stack.pop()
        if ref.object in seen:
            continue
        seen.add(ref.object)
        try:
            header = decode_node(ref.object, store.get_object(ref.object))
            if header.uuid != ref.node:
                problems.append(f"node object {ref.object} holds {header.uuid}, not {ref.node}")
            placed = [list(data_records_at(name, store.get_object(name), header.instances)) for name in header.data]
            records: list[NodeEntry | NodeLog] = [record for found in placed for record, _ in found]
            node_content(header, records)
            if header.keys is not None:  # a lazy clone or fetch reads this instead of the data, checked alike
                listed = decode_keys(header.keys, store.get_object(header.keys), header)
                node_content(header, listed)
                problems.extend(listing_problems(header, listed, placed))
        except ShardscopeError as exc:  # every typed failure is a finding here, not a reason to stop
            problems.append(f"version {ref.node}: {exc}")
            continue
        stack.extend(NodeRef(p, o) for p, o in header.parents)
    for pack in refs.packs:  # a fetch walks the history through these before any node object
        try:
            decode_pack(pack.name, store.get_object(pack.name, "history pack"))
        except ShardscopeError as exc:
            problems.append(f"history pack {pack.name}: {exc}")
    try:
        store.counter_names()  # a clone reserves ids from these: a damaged or huge ids.json breaks every clone
    except ShardscopeError as exc:
        problems.append(f"id counters: {exc}")
    for name, inst in refs.instances.items():
        if inst.unversioned is not None or inst.pages is not None:
            try:
                pages.verify_pages(store, inst)
            except ShardscopeError as exc:
                problems.append(f"unversioned data of {name}: {exc}")
    return problems


def remote_versions(url: str) -> dict[str, str]:
    """Every version the remote's refs reach: UUID → node object."""
    store = RemoteStore(url)
    refs, _ = store.require_refs()
    out: dict[str, str] = {}
    stack = [refs.root, *refs.branches.values()]
    while stack:
        ref = stack.pop()
        if ref.node in out:
            continue
        out[ref.node] = ref.object
        header = decode_node(ref.object, store.get_object(ref.object))
        stack.extend(NodeRef(p, o) for p, o in header.parents)
    return out
