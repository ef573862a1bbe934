"""Region clones: a proofreader who cloned only a region of interest edits only inside it.

The clone records its region (:func:`~napari_shardscope.core.versioned.remotes.config.region_of`);
every edit is checked before it is written: each body and supervoxel it touches must have voxels
in the region (by the label index, which knows the blocks of every supervoxel), and each overlay
block it rewrites must overlap it. An edit reaching only outside is refused with the label and
the region named, so nothing is pushed that the proofreader never saw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.edits import EditPlan
from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.versioned.remotes.errors import RegionError


def region_box(region: list[list[int]]) -> Box:
    return Box((region[0][0], region[1][0], region[2][0]), (region[0][1], region[1][1], region[2][1]))


def _describe(box: Box) -> str:
    return ",".join(f"{a}:{b}" for a, b in zip(box.lo, box.hi, strict=True))


def check_edit_in_region(config: LabelmapConfig, state: VersionState, plan: EditPlan, region: Box,
                         entry: Callable[[int], SvIndex | None]) -> None:
    """Raise :class:`RegionError` unless every label the edit touches reaches into ``region``."""
    grid = config.grid(0)

    def inside(blocks: Iterable[tuple[int, int, int]]) -> bool:
        return any(not grid.box(b).intersect(region).empty for b in blocks)

    for block in plan.blocks:
        if block.scale == 0 and not inside([block.block]):
            raise RegionError(f"this clone edits only inside region {_describe(region)}; the edit rewrites block "
                              f"{block.block}, outside it")
    labels: list[tuple[str, int, list[int]]] = [("supervoxel", sv, [sv]) for sv in plan.supervoxels]
    with state.lock:
        for body in plan.bodies:
            if body in state.map.parent:
                continue
            members = [int(s) for s in np.asarray(state.map.member_array(body)).tolist()]
            labels.append(("body", body, members))
    for kind, label, svs in labels:
        blocks: list[tuple[int, int, int]] = []
        for sv in svs:
            e = entry(sv)
            if e is not None:
                blocks.extend(e.block_set())
        if blocks and not inside(blocks):
            raise RegionError(f"this clone edits only inside region {_describe(region)}; {kind} {label} lies "
                              f"entirely outside it")
