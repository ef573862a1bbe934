"""The base supervoxels of union-find nodes, kept per labelmap: they never change, whatever is edited.

A body's members are its nodes' base supervoxels (what the agglomeration lists under each node, or
the node itself when unlisted, among the supervoxels the base label index holds) corrected by the
version's records (supervoxels a node lost or gained). The first part depends only on the base
(agglomeration and label index), which a labelmap never rewrites, so it is computed once per node
and kept: ``supervoxels(body)`` — asked by every connectome query — then costs the body's
corrections and a concatenation, not three paged-table look-ups per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.label_index import BaseIndexReader

U64 = npt.NDArray[np.uint64]
#: Supervoxel ids kept in all (a node's array counts its length, and one for the node).
BASE_MEMBERS_BUDGET = 1 << 22


def base_members_of(agg: AgglomerationSource, index: BaseIndexReader, nodes: Sequence[int]) -> dict[int, U64]:
    """Each node's base supervoxels (sorted): listed under it by the agglomeration, or the node itself when
    unlisted and a base id, kept when the base index holds them."""
    arr = np.asarray(sorted(set(nodes)), dtype=np.uint64)
    listed = agg.members_of(arr)
    own = arr[~agg.listed_mask(arr) & (arr <= np.uint64(index.max_id))]
    svs = np.concatenate([listed, own])
    owner = np.concatenate([agg.lookup(listed), own])
    keep = index.contains(svs) if svs.size else np.zeros(0, dtype=bool)
    svs, owner = svs[keep], owner[keep]
    order = np.lexsort((svs, owner))
    svs, owner = svs[order], owner[order]
    starts = np.searchsorted(owner, arr, side="left")
    ends = np.searchsorted(owner, arr, side="right")
    return {int(n): svs[s:e] for n, s, e in zip(arr.tolist(), starts.tolist(), ends.tolist(), strict=True)}


class BaseMembers:
    """:func:`base_members_of`, kept per node (LRU, bounded by :data:`BASE_MEMBERS_BUDGET` ids); thread-safe."""

    def __init__(self, agg: AgglomerationSource, index: Callable[[], BaseIndexReader],
                 budget: int = BASE_MEMBERS_BUDGET) -> None:
        self._agg = agg
        self._index = index
        self._kept: LruCache[int, U64] = LruCache(budget, weigh=lambda v: v.size + 1, max_weight=budget)

    def union(self, nodes: Sequence[int]) -> U64:
        """The base supervoxels of all ``nodes``, sorted and distinct."""
        unique = list(dict.fromkeys(nodes))
        got = dict(zip(unique, self._kept.get_many(unique), strict=True))
        missing = [n for n, v in got.items() if v is None]
        if missing:
            fresh = base_members_of(self._agg, self._index(), missing)
            got.update(fresh)
            self._kept.put_many(fresh.items())
        parts = [v for v in got.values() if v is not None and v.size]
        if not parts:
            return np.zeros(0, dtype=np.uint64)
        if len(parts) == 1:
            return parts[0].copy()  # the kept array is never handed out
        return np.unique(np.concatenate(parts))


__all__ = ["BASE_MEMBERS_BUDGET", "BaseMembers", "base_members_of"]
