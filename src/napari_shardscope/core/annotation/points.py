"""Points to supervoxels, many at once: one read per labelmap block the points fall in.

Used by the bulk add (:func:`.instance.add_many`), the connectome's re-resolution of points whose
recorded supervoxel a split retired, and the recount from scratch (:mod:`.connectome`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.labelmap.version import LabelmapVersion

U64 = npt.NDArray[np.uint64]


#: A batch of at least this many points reads its blocks past the chunk caches (each block once).
ONCE_POINTS = 1 << 12


def supervoxels_at(lmv: LabelmapVersion, points: npt.ArrayLike, block: Sequence[int]) -> U64:
    """The supervoxel under each (z, y, x) point: one read per labelmap block the points fall in.

    A large batch (a bulk add) reads each block once past the caches (:meth:`~LabelmapVersion.read_once`),
    so it neither fills the viewer's cache with blocks it never reads again nor pays for doing so.
    """
    pts = np.asarray(points, dtype=np.int64).reshape(-1, 3)
    out = np.zeros(len(pts), dtype=np.uint64)
    if not len(pts):
        return out
    blk = np.asarray(block, dtype=np.int64)
    lmv = lmv.pinned()  # one state for every block read below (not a store probe per block)
    cells = pts // blk
    uniq, inverse = np.unique(cells, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
    for i in range(len(uniq)):
        idx = order[bounds[i]:bounds[i + 1]]
        # the box of the block's points, not the whole block: a few points in a block (a small batch)
        # read (and decode) only the stored chunks under them
        here = pts[idx]
        lo = here.min(axis=0)
        hi = here.max(axis=0) + 1
        box = Box(tuple(int(v) for v in lo), tuple(int(v) for v in hi))  # type: ignore[arg-type]
        data = lmv.read_once(box, bodies=False) if len(pts) >= ONCE_POINTS else lmv.read_supervoxels(box)
        out[idx] = _at(data, here - lo)
    return out


def supervoxels_of_block_runs(lmv: LabelmapVersion, points: npt.ArrayLike, starts: npt.ArrayLike,
                              block: Sequence[int], *, once: bool = False) -> U64:
    """The supervoxel under each point of ``points`` already grouped by labelmap block.

    ``starts``: the index of the first point of each block's run (ascending, the first is 0). The
    import sorts its points by block anyway (for the spatial table), so no ``np.unique`` of the
    points is needed here: one read per block, one fancy-index per run. ``once``: each block is read
    once (an import), past the chunk caches (:meth:`~LabelmapVersion.read_once`): through them, an
    import of a few synapses grew the process by the labelmap's whole decoded size.
    """
    pts = np.asarray(points).reshape(-1, 3)  # int32 or int64: only sliced per block
    out = np.zeros(len(pts), dtype=np.uint64)
    if not len(pts):
        return out
    blk = np.asarray(block, dtype=np.int64)
    shape = np.asarray(lmv.scales[0].shape, dtype=np.int64)
    bounds = np.append(np.asarray(starts, dtype=np.int64), len(pts)).tolist()
    for a, b in itertools.pairwise(bounds):
        lo = (pts[a].astype(np.int64) // blk) * blk
        hi = np.minimum(lo + blk, shape)
        box = Box(tuple(int(v) for v in lo), tuple(int(v) for v in hi))  # type: ignore[arg-type]
        data = lmv.read_once(box, bodies=False) if once else lmv.read_supervoxels(box)
        out[a:b] = _at(data, pts[a:b] - lo.astype(pts.dtype))
    return out


def _at(data: U64, rel: npt.NDArray[np.integer]) -> U64:
    """``data`` at the (z, y, x) rows of ``rel``: one flat gather (a 3-index fancy gather was twice as slow)."""
    _, ny, nx = data.shape
    flat = (rel[:, 0].astype(np.intp) * ny + rel[:, 1]) * nx + rel[:, 2]
    out: U64 = np.ascontiguousarray(data).reshape(-1)[flat]
    return out
