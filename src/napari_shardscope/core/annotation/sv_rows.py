"""An imported base's synapse-index rows kept per supervoxel: the base never changes, so neither do they.

``connections(body)`` over a base reads the index rows of the body's supervoxels on every call (after
every labelmap edit the body's supervoxels are the same ones, or the sum of two bodies'). Reading
them from the table's pages costs a page-directory search, a search per page and a gather per column
(~0.2 ms for a handful of supervoxels); kept per supervoxel (bounded, least recently used dropped),
a body's rows are a concatenation of what it asked before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cache import LruCache

U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Rows = tuple[U64, U64, U8, I64]  # sv, partner sv, direction (0 out, 1 in), count
#: Index rows kept in all (each ~17 bytes: ~17 MB), plus one per supervoxel kept.
KEPT_ROWS = 1 << 20


def _empty() -> Rows:
    return (np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint8), np.zeros(0, np.int64))


class SvRows:
    """Rows of supervoxels read through ``read`` (rows sorted by supervoxel), kept per supervoxel; thread-safe."""

    def __init__(self, read: Callable[[U64], Rows], budget: int = KEPT_ROWS) -> None:
        self._read = read
        self._kept: LruCache[int, Rows] = LruCache(budget, weigh=lambda r: r[0].size + 1, max_weight=budget)

    def rows(self, svs: U64) -> Rows:
        """The rows of ``svs`` (distinct), grouped by supervoxel in the order asked."""
        ids = svs.tolist()
        got = self._kept.get_many(ids)
        missing = [s for s, r in zip(ids, got, strict=True) if r is None]
        if missing:
            fresh = self._split(np.asarray(sorted(missing), dtype=np.uint64))
            self._kept.put_many(fresh.items())
            got = [fresh[s] if r is None else r for s, r in zip(ids, got, strict=True)]
        parts = [r for r in got if r is not None and r[0].size]
        if not parts:
            return _empty()
        if len(parts) == 1:
            return parts[0]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]))

    def _split(self, svs: U64) -> dict[int, Rows]:
        keys, partner, direction, count = self._read(svs)
        lo = np.searchsorted(keys, svs, side="left").tolist()
        hi = np.searchsorted(keys, svs, side="right").tolist()
        # copies: a kept row set must not hold a whole page's arrays alive through a view
        return {s: (keys[a:b].copy(), partner[a:b].copy(), direction[a:b].copy(), count[a:b].copy())
                for s, a, b in zip(svs.tolist(), lo, hi, strict=True)}


__all__ = ["KEPT_ROWS", "SvRows"]
