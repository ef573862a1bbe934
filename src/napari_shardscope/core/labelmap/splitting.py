"""Supervoxel splits: relabel the chosen voxels, rewrite only the touched blocks, at every scale.

A split gives the chosen voxels of supervoxel S one new id and the rest of S another (both from
the repository-wide allocator), and retires S. At scale 0 exactly the blocks the label index lists
for S change. At a coarser scale a voxel is the mode of its scale-0 window, so only windows that
hold a changed voxel can change: those are recomputed — with TensorStore's ``mode``, from the
patched scale 0 — and pasted into the coarse blocks, which keeps every other coarse voxel as it
was (whatever method produced the base's pyramid).

Splits that would leave an empty part are refused (the size-0 supervoxels DVID users hit in
dvid#289): no voxel chosen, or all of them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.downsample import downsample_any, downsample_mode
from napari_shardscope.core.labelmap.edits import Workspace
from napari_shardscope.core.labelmap.errors import SplitError, UnknownLabelError
from napari_shardscope.core.labelmap.geometry import Box, Coord, VoxelMask, coarse_box, footprint
from napari_shardscope.core.labelmap.label_index import SvIndex

U64 = npt.NDArray[np.uint64]
Mask = npt.NDArray[np.bool_]


def split_supervoxel(ws: Workspace, sv: int, chosen: VoxelMask) -> tuple[int, int]:
    """Split ``sv`` in ``ws``: ``chosen`` voxels get the first new id, the rest the second.

    Raises
    ------
    UnknownLabelError
        ``sv`` does not exist (never did, or was split already).
    SplitError
        Nothing chosen, everything chosen, or a chosen voxel that is not in ``sv``.
    """
    entry = ws.sv_index(sv)
    if entry is None or not entry.counts.size:
        raise UnknownLabelError(f"supervoxel {sv} does not exist here (never did, or it was split)")
    if chosen.count == 0:
        raise SplitError(f"empty split of supervoxel {sv}: no voxel was selected")
    grid = ws.config.grid(0)
    sel_box = chosen.box
    parts: list[tuple[Coord, U64, Mask, Mask]] = []
    taken = total = 0
    for c in entry.block_set():
        bbox = grid.box(c)
        data = ws.reader.block(0, c)
        is_sv = data == np.uint64(sv)
        pick = np.zeros(is_sv.shape, dtype=bool)
        inter = bbox.intersect(sel_box)
        if not inter.empty:
            pick[inter.relative_to(bbox.lo)] = chosen.mask[inter.relative_to(sel_box.lo)]
        stray = pick & ~is_sv
        if stray.any():
            z, y, x = (int(v) for v in np.argwhere(stray)[0])
            voxel = (bbox.lo[0] + z, bbox.lo[1] + y, bbox.lo[2] + x)
            raise SplitError(f"voxel {voxel} is not in supervoxel {sv} (it holds {int(data[z, y, x])})")
        taken += int(np.count_nonzero(pick))
        total += int(np.count_nonzero(is_sv))
        parts.append((c, data, is_sv, pick))
    if taken != chosen.count:
        raise SplitError(f"voxel {_first_outside(chosen, [p[0] for p in parts], grid.block)} is not in "
                         f"supervoxel {sv} ({chosen.count - taken} selected voxel(s) lie outside its blocks)")
    if taken == total:
        raise SplitError(f"the split would take every voxel ({total}) of supervoxel {sv}, leaving an empty one")
    split_id, remain_id = ws.allocate(2)
    split_counts: dict[Coord, int] = {}
    remain_counts: dict[Coord, int] = {}
    split_boxes: dict[Coord, tuple[int, ...]] = {}
    remain_boxes: dict[Coord, tuple[int, ...]] = {}
    changed: dict[Coord, Mask] = {}
    for c, data, is_sv, pick in parts:
        rest = is_sv & ~pick
        data[pick] = split_id
        data[rest] = remain_id
        ws.reader.pending[(0, c)] = data
        split_counts[c] = int(np.count_nonzero(pick))
        remain_counts[c] = int(np.count_nonzero(is_sv)) - split_counts[c]
        split_boxes[c], remain_boxes[c] = mask_box(pick), mask_box(rest)
        changed[c] = is_sv
    propagate_scales(ws, changed)
    if sv > ws.map.index.max_id:  # a split-made supervoxel has a versioned entry (a base one: unversioned)
        ws.map.put_entry(sv, None)
    ws.map.put_entry(split_id, SvIndex.from_counts(split_counts, split_boxes))
    ws.map.put_entry(remain_id, SvIndex.from_counts(remain_counts, remain_boxes))
    ws.map.split_supervoxel(sv, split_id, remain_id)
    return split_id, remain_id


def mask_box(mask: Mask) -> tuple[int, ...]:
    """The box (lo z, y, x, hi z, y, x) of a block's True voxels, relative to the block (zeros when none)."""
    if not mask.any():
        return (0, 0, 0, 0, 0, 0)
    out: list[int] = []
    his: list[int] = []
    for axis in range(3):
        other = tuple(a for a in range(3) if a != axis)
        hit = np.flatnonzero(mask.any(axis=other))
        out.append(int(hit[0]))
        his.append(int(hit[-1]) + 1)
    return (*out, *his)


def propagate_scales(ws: Workspace, changed: dict[Coord, Mask]) -> None:
    """Recompute, at every coarser scale, the voxels whose scale-0 window holds a changed voxel.

    ``changed`` maps scale-0 blocks (already rewritten in ``ws.reader.pending``) to the mask of
    their changed voxels.
    """
    cfg = ws.config
    grid0 = cfg.grid(0)
    shape0 = cfg.scales[0].shape
    for scale in range(1, len(cfg.scales)):
        f = cfg.scales[scale].factors
        shape = cfg.scales[scale].shape
        grid = cfg.grid(scale)
        for c in changed:
            region = coarse_box(grid0.box(c), f, shape)
            if region.empty:
                continue
            fp = footprint(region, f, shape0)
            touched = downsample_any(_changed_in(fp, changed, grid0.box), f)[_crop(region)]
            if not touched.any():
                continue
            mode = downsample_mode(ws.reader.read(0, fp), f)[_crop(region)]
            for cs in grid.blocks_in(region):
                bbox = grid.box(cs)
                inter = bbox.intersect(region)
                where = touched[inter.relative_to(region.lo)]
                if not where.any():
                    continue
                block = ws.reader.block(scale, cs)
                target = block[inter.relative_to(bbox.lo)]
                target[where] = mode[inter.relative_to(region.lo)][where]
                ws.reader.pending[(scale, cs)] = block


def _changed_in(box: Box, changed: dict[Coord, Mask], block_box: Callable[[Coord], Box]) -> Mask:
    """The changed-voxel mask over ``box`` assembled from the per-block masks."""
    out = np.zeros(box.shape, dtype=bool)
    for c, mask in changed.items():
        bbox = block_box(c)
        inter = bbox.intersect(box)
        if not inter.empty:
            out[inter.relative_to(box.lo)] = mask[inter.relative_to(bbox.lo)]
    return out


def _crop(region: Box) -> tuple[slice, slice, slice]:
    """The leading part of a downsampled footprint that ``region`` covers."""
    s = region.shape
    return (slice(0, s[0]), slice(0, s[1]), slice(0, s[2]))


def _first_outside(chosen: VoxelMask, blocks: list[Coord], block: Coord) -> Coord:
    inside = set(blocks)
    for z, y, x in chosen.coordinates():
        c = (int(z) // block[0], int(y) // block[1], int(x) // block[2])
        if c not in inside:
            return (int(z), int(y), int(x))
    return chosen.offset  # pragma: no cover - only called when one exists
