"""Region clones: a proofreader who cloned only a region of interest edits only inside it.

The clone records its region (read through :mod:`.id_reservation`);
every edit is checked before it is written: each body and supervoxel it touches must have voxels
in the region (by the label index, which knows the blocks of every supervoxel), and each overlay
block it rewrites must overlap it. An edit reaching only outside is refused with the label and
the region named, so nothing is pushed that the proofreader never saw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.edits import EditPlan
from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.recordmap import MapReader
from napari_shardscope.core.versioned.errors import RegionError


def region_box(region: list[list[int]]) -> Box:
    return Box((region[0][0], region[1][0], region[2][0]), (region[0][1], region[1][1], region[2][1]))


def _describe(box: Box) -> str:
    return ",".join(f"{a}:{b}" for a, b in zip(box.lo, box.hi, strict=True))


def check_edit_in_region(config: LabelmapConfig, reader: MapReader, plan: EditPlan, region: Box,
                         entry: Callable[[int], SvIndex | None]) -> None:
    """Raise :class:`RegionError` unless every label the edit touches reaches into ``region``."""
    grid = config.grid(0)

    edge = np.asarray(grid.block, dtype=np.int64)
    first = np.asarray(region.lo, dtype=np.int64) // edge
    stop = -(-np.asarray(region.hi, dtype=np.int64) // edge)

    def inside(blocks: Iterable[tuple[int, int, int]] | npt.NDArray[np.int64]) -> bool:
        arr = np.asarray(list(blocks) if not isinstance(blocks, np.ndarray) else blocks, dtype=np.int64).reshape(-1, 3)
        return bool(np.any(np.all((arr >= first) & (arr < stop), axis=1))) and not region.empty

    for block in plan.blocks:
        if block.scale == 0 and not inside([block.block]):
            raise RegionError(f"this clone edits only inside region {_describe(region)}; the edit rewrites block "
                              f"{block.block}, outside it")
    for sv in plan.supervoxels:
        e = entry(sv)
        if e is not None and e.counts.size and not inside(e.block_set()):
            raise RegionError(f"this clone edits only inside region {_describe(region)}; supervoxel {sv} lies "
                              f"entirely outside it")
    for body in plan.bodies:
        root, info = reader.resolve(body)
        if info.name != body or info.svs <= 0:  # merged away, or made by this very edit
            continue
        blocks, _ = reader.node_blocks(reader.ring(root))
        if blocks.size and not inside(blocks):
            raise RegionError(f"this clone edits only inside region {_describe(region)}; body {body} lies "
                              f"entirely outside it")
