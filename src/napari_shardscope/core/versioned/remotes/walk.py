"""Ref negotiation: which versions a fetch needs, found by walking the remote's history from its branch
heads down to versions this repository already has (no listing of the remote needed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field

from napari_shardscope.core.versioned.errors import StoreCorruptError
from napari_shardscope.core.versioned.remotes.endpoints import has_version
from napari_shardscope.core.versioned.remotes.history import PackedHistory
from napari_shardscope.core.versioned.remotes.pack import NodeHeader, decode_node
from napari_shardscope.core.versioned.remotes.store import NodeRef
from napari_shardscope.core.versioned.repository import Repository


@dataclass
class Walk:
    """What a walk found: node object and header of each version to fetch, and their order (parents first)."""

    headers: dict[str, tuple[str, NodeHeader]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


def walk_missing(repo: Repository, history: PackedHistory, starts: Iterable[NodeRef],
                 known: MutableMapping[str, str]) -> Walk:
    """Node headers the remote has and this repository lacks, parents first.

    Node objects come from the remote's history packs (newest first, :mod:`.history`), so a walk of
    any length costs a few requests; a version no pack holds is read on its own.
    """
    walk = Walk()
    done: set[str] = set()
    here = _local_versions(repo)
    stack: list[tuple[str, str, bool]] = [(r.node, r.object, False) for r in starts]
    while stack:
        uuid, obj, expanded = stack.pop()
        if uuid in done:
            continue
        if expanded:
            walk.order.append(uuid)
            done.add(uuid)
            continue
        if uuid in walk.headers:  # met again before its ancestors were all walked: it is its own ancestor
            raise StoreCorruptError(f"{history.url}: version {uuid} is its own ancestor (node object {obj}): "
                                    f"the remote's history is not a DAG")
        if here(uuid):
            known[uuid] = obj
            done.add(uuid)
            continue
        header = decode_node(obj, history.get(obj, "version record"))
        if header.uuid != uuid:
            raise StoreCorruptError(f"{history.url}: node object {obj} holds version {header.uuid}, not {uuid}")
        walk.headers[uuid] = (obj, header)
        stack.append((uuid, obj, True))
        for parent, pobj in reversed(header.parents):
            if parent not in done:
                stack.append((parent, pobj, False))
    return walk


#: Up to this many local versions, a walk reads their UUIDs once instead of one look-up per walked version.
WALK_LOCAL_SET = 4096


def _local_versions(repo: Repository) -> Callable[[str], bool]:
    """Whether a (full) UUID is a local version: a set for a small repository (a clone walks its whole
    history against one root), else a look-up each (a fetch of k versions into a long history)."""
    if repo.version_count() <= WALK_LOCAL_SET:
        return {v.uuid for v in repo.versions()}.__contains__
    return lambda uuid: has_version(repo, uuid)
