"""A labelmap instance's configuration: which base volume, its scales, the overlay block shape.

Stored as the instance's JSON config in the repository, so every process that opens the labelmap
sees the same geometry without re-deriving it (the base's metadata could be unreachable, and a
changed base must be detected rather than silently mixed with overlay blocks cut for the old one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.geometry import BlockGrid, Coord, as_coord
from napari_shardscope.core.volumes.model import Volume

#: 2: the body map as versioned records (1: replayed from the mutation log; ``shardscope repo migrate``).
FORMAT = 2
TYPE_NAME = "labelmap"
#: Overlay block edge (voxels, every axis, every scale): DVID's label block size.
DEFAULT_BLOCK = 64


@dataclass(frozen=True)
class AgglomerationTable:
    """A base agglomeration read where the pipeline wrote it (:mod:`.table_base`), not copied.

    ``forward``/``reverse``: URLs (absolute paths) of the supervoxel → body table and of its
    body-sorted reverse (None: the repository holds a body-sorted copy); ``body``: the forward
    table's body column; ``rows``/``max_id``: the table's rows and largest id when the labelmap was
    created (checked at open; new ids start above ``max_id``).
    """

    forward: str
    reverse: str | None
    body: str
    rows: int
    max_id: int

    def to_json(self) -> dict[str, Any]:
        return {"forward": self.forward, "reverse": self.reverse, "body": self.body, "rows": self.rows,
                "max_id": self.max_id}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AgglomerationTable:
        reverse = d.get("reverse")
        return cls(forward=str(d["forward"]), reverse=None if reverse is None else str(reverse), body=str(d["body"]),
                   rows=int(d["rows"]), max_id=int(d["max_id"]))


@dataclass(frozen=True)
class ScaleGeometry:
    """One scale of the base: key, shape (z, y, x), downsampling factors relative to scale 0.

    ``voxel_size`` and ``translate`` (world units, z, y, x) are kept for viewers placing layers.
    """

    key: str
    shape: Coord
    factors: Coord
    voxel_size: tuple[float, float, float]
    translate: tuple[float, float, float]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "shape": list(self.shape), "factors": list(self.factors),
                "voxel_size": list(self.voxel_size), "translate": list(self.translate)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ScaleGeometry:
        vs = [float(v) for v in d["voxel_size"]]
        tr = [float(v) for v in d["translate"]]
        return cls(str(d["key"]), as_coord(d["shape"]), as_coord(d["factors"]), (vs[0], vs[1], vs[2]),
                   (tr[0], tr[1], tr[2]))


@dataclass(frozen=True)
class LabelmapConfig:
    """Everything fixed when a labelmap is created.

    Attributes
    ----------
    base
        URL or absolute path of the base segmentation (supervoxel ids; never modified).
    block
        Overlay block shape (z, y, x), the same at every scale.
    scales
        The base's scales, finest first.
    id_start
        Smallest id the labelmap may hand out for new bodies and supervoxels (above every id of
        the base and of its agglomeration).
    agglomeration
        True when a base supervoxel → body table is stored with the instance.
    base_dtype
        The base's voxel type (reads always return uint64: new ids may not fit the base's type).
    table
        Where the agglomeration table lives when it is read in place (None: stored with the instance).
    """

    base: str
    block: Coord
    scales: tuple[ScaleGeometry, ...]
    id_start: int
    agglomeration: bool
    base_dtype: str
    table: AgglomerationTable | None = None

    def grid(self, scale: int) -> BlockGrid:
        return BlockGrid(self.scales[scale].shape, self.block)

    @property
    def shape(self) -> Coord:
        return self.scales[0].shape

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "base": self.base, "block": list(self.block),
                "scales": [s.to_json() for s in self.scales], "id_start": self.id_start,
                "agglomeration": self.agglomeration, "base_dtype": self.base_dtype,
                **({"agglomeration_table": self.table.to_json()} if self.table is not None else {})}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], *, name: str = "labelmap") -> LabelmapConfig:
        try:
            if int(d.get("format", 0)) > FORMAT:
                raise LabelmapStateError(f"labelmap {name!r} was written by a newer version (format {d['format']})")
            return cls(base=str(d["base"]), block=as_coord(d["block"]),
                       scales=tuple(ScaleGeometry.from_json(s) for s in d["scales"]),
                       id_start=int(d["id_start"]), agglomeration=bool(d["agglomeration"]),
                       base_dtype=str(d["base_dtype"]),
                       table=AgglomerationTable.from_json(d["agglomeration_table"])
                       if d.get("agglomeration_table") is not None else None)
        except (KeyError, TypeError, ValueError, AttributeError, ArgumentError) as exc:
            raise LabelmapStateError(f"labelmap {name!r} has an unreadable configuration: {exc}") from exc


def normalise_base_url(url: str | os.PathLike[str]) -> str:
    """Local paths become absolute (the repository may be opened from another directory); URLs stay."""
    text = os.fspath(url).strip()
    if not text:
        raise ArgumentError("an empty path is not a base volume")
    if "://" in text:
        return text
    return str(Path(text).expanduser().resolve())


def scales_of(volume: Volume) -> tuple[ScaleGeometry, ...]:
    """Scale geometry of a base segmentation, with integer factors derived from voxel sizes.

    Raises
    ------
    ArgumentError
        When the volume is not a single-channel (z, y, x) integer volume, or a scale's voxel size
        is not a whole multiple of the finest one (mode downsampling needs integer factors).
    """
    if volume.axes != ("z", "y", "x") or volume.channel_axis is not None:
        raise ArgumentError(f"{volume.url}: a labelmap base must be a single-channel (z, y, x) volume, "
                            f"got axes {volume.axes}")
    if volume.dtype.kind not in "iu" or volume.dtype.itemsize > 8:
        raise ArgumentError(f"{volume.url}: a labelmap base must hold integer supervoxel ids, got {volume.dtype}")
    first = volume.levels[0].voxel_size
    out = []
    for level in volume.levels:
        factors = []
        for v, v0, axis in zip(level.voxel_size, first, "zyx", strict=True):
            ratio = float(v) / float(v0)
            f = round(ratio)
            if f < 1 or not math.isclose(ratio, f, rel_tol=1e-6):
                raise ArgumentError(f"{volume.url}: scale {level.key!r} has voxel size {v} along {axis}, "
                                    f"not a whole multiple of the finest scale's {v0}")
            factors.append(f)
        vs, tr = level.voxel_size, level.translate
        out.append(ScaleGeometry(level.key, as_coord(level.shape), as_coord(factors),
                                 (float(vs[0]), float(vs[1]), float(vs[2])),
                                 (float(tr[0]), float(tr[1]), float(tr[2]))))
    return tuple(out)


def check_block(block: int | Sequence[int]) -> Coord:
    """An overlay block shape from an edge length or three lengths (each ≥ 1)."""
    shape = (block, block, block) if isinstance(block, int) else tuple(block)
    coord = as_coord(shape, "block shape")
    if min(coord) < 1:
        raise ArgumentError(f"block shape must be positive, got {coord}")
    return coord


def check_geometry(config: LabelmapConfig, volume: Volume) -> None:
    """Refuse a base whose geometry no longer matches the stored one (overlay blocks would not fit)."""
    now = scales_of(volume)
    if [s.shape for s in now] != [s.shape for s in config.scales]:
        raise LabelmapStateError(
            f"base {config.base} changed since the labelmap was created: scale shapes are now "
            f"{[s.shape for s in now]}, stored {[s.shape for s in config.scales]}"
        )
