"""The body of each supervoxel a version state resolved, kept across edits that do not touch it.

A supervoxel's body is read through three kinds of record: the explicit page of its id (``e``: a
cleave or a split assigned it), the union-find parent links from its node up to the root (``p``),
and the root's record, which names the set (``r``). Resolving a few hundred partner supervoxels of
a body (what every ``connections(body)`` does) walks all of them each time, ~0.3 ms; kept here, it
is a dict look-up per supervoxel.

An edit (this state's own, or another writer's caught up from the log, :mod:`.catch_up`) names the
records it wrote. A kept answer is stale exactly when the explicit page of its supervoxel, or the
parent link or the record of its root, was written: those entries are dropped, every other one
stays. Why the root suffices: a parent link is only ever added to a root (joined by size); a link
removed or moved below a root (an undo of a merge, a cleave) changes which supervoxels the root's
set holds, and so its root record (voxel and supervoxel counts): an edit that unlinks and writes no
root record at all is not expected, and drops everything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from napari_shardscope.core.labelmap.records import EXPLICIT_PREFIX, PAGE_BITS, PARENT_PREFIX, ROOT_PREFIX, node_of_key

#: Supervoxels kept per state; beyond, the cache starts over (a bound, not an LRU: rarely reached).
BODY_CACHE_SVS = 1 << 17
#: Distinct supervoxels a look-up asks at most to go through the cache (a whole tile's ids are resolved
#: vectorised: one Python step per id would cost more than it saves).
BODY_CACHE_QUERY = 1 << 14


class BodyCache:
    """Supervoxel → node (its explicit or base body) and node → (root, body) at one version state (see the
    module docstring); thread-safe.

    Kept in two steps so an edit that joins or splits sets re-walks only the nodes under the roots it
    wrote: which node a supervoxel belongs to changes only with its explicit page.
    """

    def __init__(self, budget: int = BODY_CACHE_SVS) -> None:
        self._lock = threading.Lock()
        self._budget = budget
        self._node: dict[int, int] = {}
        self._by_page: dict[int, set[int]] = {}
        self._name: dict[int, tuple[int, int]] = {}
        self._by_root: dict[int, set[int]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._node)

    def nodes(self, svs: Sequence[int]) -> list[int | None]:
        """The kept node of each supervoxel (None: not kept)."""
        with self._lock:
            get = self._node.get
            return [get(s) for s in svs]

    def bodies(self, nodes: Sequence[int]) -> list[int | None]:
        """The kept body of each node (None: not kept)."""
        with self._lock:
            name = self._name
            return [None if (hit := name.get(n)) is None else hit[1] for n in nodes]

    def put_nodes(self, svs: Sequence[int], nodes: Sequence[int]) -> None:
        """Keep the nodes of supervoxels just resolved (under the state's lock: no edit came in between)."""
        with self._lock:
            self._make_room(len(svs))
            for s, n in zip(svs, nodes, strict=True):
                if s and n:
                    self._node[s] = n
                    self._by_page.setdefault(s >> PAGE_BITS, set()).add(s)

    def put_bodies(self, nodes: Sequence[int], roots: Sequence[int], bodies: Sequence[int]) -> None:
        """Keep the roots and bodies of nodes just resolved."""
        with self._lock:
            self._make_room(len(nodes))
            for n, r, b in zip(nodes, roots, bodies, strict=True):
                if n and r:
                    self._name[n] = (r, b)
                    self._by_root.setdefault(r, set()).add(n)

    def wrote(self, keys: Iterable[bytes], *, unlinked: bool) -> None:
        """Records an edit wrote: drop the answers they can change (see the module docstring)."""
        keys = list(keys)
        with self._lock:
            if unlinked and not any(len(k) == 9 and k[:1] == ROOT_PREFIX for k in keys):
                self._clear()
                return
            for k in keys:
                kind = k[:1]
                if len(k) != 9 or kind not in (EXPLICIT_PREFIX, PARENT_PREFIX, ROOT_PREFIX):
                    continue
                key = node_of_key(k)
                if kind == EXPLICIT_PREFIX:
                    for s in self._by_page.pop(key, ()):
                        self._node.pop(s, None)
                else:
                    for n in self._by_root.pop(key, ()):
                        self._name.pop(n, None)

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _make_room(self, more: int) -> None:
        if len(self._node) + len(self._name) + more > self._budget:
            self._clear()

    def _clear(self) -> None:
        self._node.clear()
        self._by_page.clear()
        self._name.clear()
        self._by_root.clear()


__all__ = ["BODY_CACHE_QUERY", "BODY_CACHE_SVS", "BodyCache"]
