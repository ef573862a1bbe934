"""A labels array with no file of its own as the base of a repository: stored inside the repository.

A proofreader may want to proofread a segmentation napari holds only in memory — a numpy array in
a notebook, a labels layer painted or computed in the session, a file napari's own reader opened
that shardscope cannot read (a TIFF). A labelmap's base must be a volume every process can open
again, so such an array is written once into the repository directory, ``<repo>/bases/<name>``, as
an OME-Zarr 0.5 group of one sharded Zarr v3 array (chunked: a later session reads only the chunks
it shows), with the layer's voxel size and offset. The labelmap records that path as its base like
any other; the repository reopens on its own, and the base is never written again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.source import Box, LevelGeometry, SourceDescription
from napari_shardscope.core.progress import Progress

#: Directory of a repository holding the bases imported into it.
IMPORTED_DIR = "bases"


@dataclass(frozen=True)
class ImportedLabels:
    """One in-memory labels array (z, y, x) as an export source, placed by voxel size and offset."""

    array: npt.NDArray[Any] = field(repr=False)
    resolution: tuple[float, float, float]  # x, y, z
    voxel_offset: tuple[int, int, int] = (0, 0, 0)  # x, y, z voxels

    def describe(self) -> SourceDescription:
        shape = tuple(int(s) for s in self.array.shape)
        return SourceDescription("segmentation", self.array.dtype.name,
                                 (LevelGeometry((shape[0], shape[1], shape[2]), self.resolution, self.voxel_offset),))

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        return np.asarray(self.array[box])

    def locations(self) -> tuple[str, ...]:
        return ()


def safe_name(name: str) -> str:
    """A directory name from a layer name (``"cells [1]"`` → ``"cells-1"``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "labels"


def labels_array(data: Any) -> npt.NDArray[Any]:
    """``data`` (any array-like: numpy, dask, a napari layer's data) as a 3-D non-negative integer array.

    A 2-D array becomes one z plane; booleans become 0/1.

    Raises
    ------
    ArgumentError
        Not 2-D or 3-D, not integers, or holding negative ids (a supervoxel id is a uint64).
    """
    arr = np.asarray(data)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.uint8)
    if arr.ndim == 2:
        arr = arr[np.newaxis]
    if arr.ndim != 3:
        raise ArgumentError(f"labels to proofread must be 2-D or 3-D (z, y, x), got shape {arr.shape}")
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize > 8:
        raise ArgumentError(f"labels to proofread must hold integer ids, got {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise ArgumentError(f"labels to proofread must be non-negative ids, found {int(arr.min())}")
    return arr


def import_labels(repository: str | os.PathLike[str], name: str, data: Any, *,
                  voxel_size: Sequence[float] = (1.0, 1.0, 1.0), translate: Sequence[float] = (0.0, 0.0, 0.0),
                  progress: Progress | None = None) -> str:
    """Write ``data`` into ``<repository>/bases/<name>`` and return that path (the labelmap's base).

    ``voxel_size`` and ``translate`` are the layer's (z, y, x, world units); the offset is kept in
    whole voxels.
    """
    from napari_shardscope.core.export.zarr3 import export_zarr3

    arr = labels_array(data)
    vs = [float(v) for v in list(voxel_size)[-3:]]
    tr = [float(t) for t in list(translate)[-3:]]
    vs, tr = [1.0] * (3 - len(vs)) + vs, [0.0] * (3 - len(tr)) + tr  # a 2-D layer: one plane of unit depth
    if len(vs) != 3 or len(tr) != 3 or min(vs) <= 0:
        raise ArgumentError(f"voxel size must be 3 positive numbers (z, y, x), got {tuple(voxel_size)}")
    offset = [round(t / v) for t, v in zip(tr, vs, strict=True)]
    if min(offset) < 0:
        raise ArgumentError(f"a labels layer placed before the origin (translate {tuple(tr)}) cannot be a base")
    dest = Path(repository) / IMPORTED_DIR / safe_name(name)
    source = ImportedLabels(arr, (vs[2], vs[1], vs[0]), (offset[2], offset[1], offset[0]))
    export_zarr3(source, str(dest), progress=progress)
    return str(dest)
