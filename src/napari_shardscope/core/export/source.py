"""What an export reads from: a picklable description that each worker opens for itself.

Dask ships tasks to workers by pickling them; a live TensorStore view or a labelmap version's
virtual view should not travel. A source is therefore a small frozen dataclass (a URL, a repository
path…) that each worker process opens once (:func:`~napari_shardscope.core.jobs.open_once`), and
tasks call :meth:`ExportSource.read` with a box.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, Remedy
from napari_shardscope.core.jobs import open_once
from napari_shardscope.core.labelmap import TYPE_NAME, Labelmap, LabelmapVersion, open_labelmap
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.volumes import Volume, open_volume

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

    def locations(self) -> tuple[str, ...]:
        """Paths or URLs the source reads from: an export refuses a destination overlapping any of them."""
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
        return SourceDescription(self.kind, self.arrays[0].dtype.name, levels)

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        return np.asarray(self.arrays[level][box])

    def locations(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class VolumeSource:
    """Any volume :func:`~napari_shardscope.core.volumes.open_volume` reads (format conversion).

    Only single-channel volumes; the volume is opened once per process.
    """

    url: str
    scales: Sequence[int] | None = field(default=None)

    def __post_init__(self) -> None:
        # A local path made absolute: the volume a process keeps open for exports is found by it, and an export
        # from another working directory (a notebook's next cell, a worker) must not find another volume.
        if "://" not in self.url and "|" not in self.url:
            object.__setattr__(self, "url", os.path.abspath(self.url))

    def _volume(self) -> Volume:
        return open_once(("volume", self.url), lambda: open_volume(self.url))

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
        # the name, not str(): a big-endian '>u2' is 'uint16', the only spelling the output formats know
        return SourceDescription(vol.kind, np.dtype(vol.dtype).name, tuple(out))

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        return np.asarray(self._levels()[level].array[box].read())

    def locations(self) -> tuple[str, ...]:
        return (self.url,)


LabelKind = Literal["bodies", "supervoxels"]


@dataclass(frozen=True)
class LabelmapSource:
    """A labelmap version: body ids (or supervoxel ids) at every scale of its base.

    Use :func:`labelmap_source` to make one: it resolves a branch name to the UUID of its head
    *now*, so an export running while a proofreader keeps editing the branch still writes one
    consistent version. Each worker process opens the repository and labelmap once.

    Attributes
    ----------
    repository
        Path of the repository directory (workers open it read-only).
    instance
        Labelmap instance name.
    version
        Full version UUID.
    labels
        ``"bodies"`` (the proofread segmentation) or ``"supervoxels"`` (the base patched by splits).
    root
        UUID of the repository's root version: with the (absolute) path, what names *this* repository in the
        per-process cache of opened labelmaps, so a repository made again at the same path, or another one at
        the same relative path, is never read through a handle opened on the first.
    """

    repository: str
    instance: str
    version: str
    labels: LabelKind = "bodies"
    root: str = ""

    def _labelmap(self) -> Labelmap:
        return open_once(("labelmap", self.repository, self.root, self.instance),
                         lambda: open_labelmap(open_repository(self.repository), self.instance))

    def describe(self) -> SourceDescription:
        lm = self._labelmap()
        levels = []
        for g in lm.config.scales:
            offset = tuple(round(t / v) for t, v in zip(g.translate, g.voxel_size, strict=True))
            levels.append(LevelGeometry(
                g.shape,
                (float(g.voxel_size[2]), float(g.voxel_size[1]), float(g.voxel_size[0])),
                (int(offset[2]), int(offset[1]), int(offset[0])),
            ))
        return SourceDescription("segmentation", "uint64", tuple(levels))

    def _version(self) -> LabelmapVersion:
        """The version's reader, made once per process (resolving the version per chunk cost the GIL)."""
        lm = self._labelmap()  # first: open_once's lock is not reentrant
        return open_once(("labelmap-version", self.repository, self.root, self.instance, self.version),
                         lambda: lm.at(self.version))

    def read(self, level: int, box: Box) -> npt.NDArray[Any]:
        # past the chunk caches: an export reads each chunk once (see LabelmapVersion.read_once)
        return self._version().read_once(box, level, bodies=self.labels == "bodies")

    def locations(self) -> tuple[str, ...]:
        """The base segmentation (read for every chunk) and the repository (the labelmap's overlay)."""
        return (self._labelmap().config.base, self.repository)


def labelmap_source(repository: str | Any, instance: str, ref: str, *, labels: LabelKind = "bodies",
                    allow_open: bool = False) -> LabelmapSource:
    """The export source of labelmap ``instance`` at version ``ref`` of the repository at ``repository``.

    Only committed versions by default: a committed version never changes, so the export is a
    reproducible snapshot that names its version. ``allow_open`` exports an open version as it is
    when each chunk is read (edits made meanwhile may show in chunks read later).

    Raises
    ------
    ArgumentError
        An unknown ``labels`` kind, or an open version without ``allow_open``.
    """
    if labels not in ("bodies", "supervoxels"):
        raise ArgumentError(f"labels must be 'bodies' or 'supervoxels', got {labels!r}")
    path = os.path.abspath(str(getattr(repository, "path", repository)))  # workers may run in another directory
    repo = open_repository(path)
    try:
        inst = repo.instance(instance)
        if inst.type != TYPE_NAME:
            raise ArgumentError(f"instance {instance!r} is a {inst.type}, not a {TYPE_NAME}")
        v = repo.version(ref)
        root = repo.root.uuid
    finally:
        repo.close()
    if not v.locked and not allow_open:
        allow = Remedy("allow_open")
        raise ArgumentError(f"version {v.short} (branch {v.branch!r}) is open: commit it first for a reproducible "
                            f"export, or pass {allow} to export it as it is now").suggesting(allow)
    return LabelmapSource(path, instance, v.uuid, labels, root)
