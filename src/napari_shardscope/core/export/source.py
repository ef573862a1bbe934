"""What an export reads from: a picklable description that each worker opens for itself.

Dask ships tasks to workers by pickling them; a live TensorStore view or a labelmap version's
virtual view should not travel. A source is therefore a small frozen dataclass (a URL, a repository
path…) whose ``open`` is cached per process, and tasks call :meth:`ExportSource.read` with a box.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError

Box = tuple[slice, ...]


@dataclass(frozen=True)
class LevelGeometry:
    """One scale of a source: array shape (z, y, x), voxel size (x, y, z, nm), offset (x, y, z voxels)."""

    shape: tuple[int, int, int]
    resolution: tuple[float, float, float]
    voxel_offset: tuple[int, int, int] = (0, 0, 0)


@dataclass(frozen=True)
class SourceDescription:
    """Everything an export needs to lay out its output before reading any voxel."""

    kind: Literal["image", "segmentation"]
    dtype: str
    levels: tuple[LevelGeometry, ...]


class ExportSource(Protocol):
    """A picklable source of voxels (z, y, x) at several scales."""

    def describe(self) -> SourceDescription: ...

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        """The voxels of ``box`` (slices along z, y, x) at scale ``level``."""
        ...


@dataclass(frozen=True)
class ArraySource:
    """In-memory arrays (z, y, x), finest first: for tests and small scripts."""

    arrays: tuple[npt.NDArray[Any], ...]
    resolutions: tuple[tuple[float, float, float], ...]
    kind: Literal["image", "segmentation"] = "segmentation"

    def describe(self) -> SourceDescription:
        if len(self.arrays) != len(self.resolutions) or not self.arrays:
            raise ArgumentError("ArraySource needs one resolution per array and at least one array")
        levels = tuple(
            LevelGeometry(tuple(int(s) for s in a.shape), r)  # type: ignore[arg-type]
            for a, r in zip(self.arrays, self.resolutions, strict=True)
        )
        return SourceDescription(self.kind, str(self.arrays[0].dtype), levels)

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        return np.asarray(self.arrays[level][box])


_OPEN_VOLUMES: dict[str, Any] = {}
_OPEN_LOCK = threading.Lock()


@dataclass(frozen=True)
class VolumeSource:
    """Any volume :func:`~napari_shardscope.core.volumes.open_volume` reads (format conversion).

    Only single-channel volumes; the volume is opened once per process.
    """

    url: str
    scales: Sequence[int] | None = field(default=None)

    def _volume(self) -> Any:
        with _OPEN_LOCK:
            vol = _OPEN_VOLUMES.get(self.url)
            if vol is None:
                from napari_shardscope.core.volumes import open_volume

                vol = _OPEN_VOLUMES[self.url] = open_volume(self.url)
        return vol

    def _levels(self) -> list[Any]:
        levels = list(self._volume().levels)
        return [levels[i] for i in self.scales] if self.scales is not None else levels

    def describe(self) -> SourceDescription:
        vol = self._volume()
        if vol.channel_axis is not None or len(vol.axes) != 3:
            raise ArgumentError(f"{self.url}: export handles single-channel z,y,x volumes, got axes {vol.axes}")
        out = []
        for level in self._levels():
            vs = level.voxel_size
            offset = tuple(round(t / v) for t, v in zip(level.translate, vs, strict=True))
            out.append(
                LevelGeometry(
                    tuple(int(s) for s in level.shape),  # type: ignore[arg-type]
                    (float(vs[2]), float(vs[1]), float(vs[0])),
                    (offset[2], offset[1], offset[0]),
                )
            )
        return SourceDescription(vol.kind, str(vol.dtype), tuple(out))

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        return np.asarray(self._levels()[level].array[box].read())
