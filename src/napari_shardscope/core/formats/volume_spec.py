"""What a dataset says about its volumes, as pure data: :class:`VolumeSpec` and :class:`LevelSpec`.

A format package turns its parsed metadata (the same objects its inspector uses) into these
records; :mod:`napari_shardscope.core.volumes` turns a :class:`VolumeSpec` into lazy arrays by
opening each :attr:`LevelSpec.tensorstore` and applying :attr:`LevelSpec.transform`. Nothing here
opens a store or reads a byte, so the viewer, ``inspect --json``, the shard browser and export can
all be shown the same levels, shapes, voxel sizes, translations, axes, dtypes and downsampling
factors: they come from one computation over one parse.

Order and units: every per-axis tuple is in the *presented* order, the order of
:attr:`VolumeSpec.axes` with the slowest axis first (``z, y, x`` or ``c, z, y, x``), whatever the
format stores (precomputed and N5 list x first). Voxel sizes and translations are in nanometres
when the metadata names length units (:attr:`VolumeSpec.unit` ``"nm"``), as written otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError

Kind = Literal["image", "segmentation"]
FormatName = Literal["precomputed", "zarr3", "zarr2", "ome-zarr", "n5"]

#: Default axis names, slowest first, when the metadata names none (the last three are z, y, x).
DEFAULT_AXES = ("t", "c", "z", "y", "x")


@dataclass(frozen=True)
class ArrayTransform:
    """How the array TensorStore opens becomes the presented array: a lazy index transform.

    Attributes
    ----------
    fixed
        ``(dimension, index)`` pairs of the stored array taken away first (precomputed's channel
        dimension of a single-channel volume: ``((3, 0),)``).
    order
        For each presented axis, the stored dimension (numbered after ``fixed`` is applied) it
        shows; ``None`` keeps the stored order. ``(2, 1, 0)`` turns x, y, z into z, y, x.
    """

    fixed: tuple[tuple[int, int], ...] = ()
    order: tuple[int, ...] | None = None

    def presented_shape(self, stored_shape: Sequence[int]) -> tuple[int, ...]:
        """The shape an array of ``stored_shape`` has once transformed."""
        gone = {dim for dim, _ in self.fixed}
        kept = [int(n) for d, n in enumerate(stored_shape) if d not in gone]
        return tuple(kept[i] for i in self.order) if self.order is not None else tuple(kept)

    def to_json(self) -> dict[str, Any]:
        return {"fixed": [list(p) for p in self.fixed], "order": None if self.order is None else list(self.order)}


@dataclass(frozen=True)
class LevelPlacement:
    """One scale's voxel grid and where it sits in the world (presented order).

    Attributes
    ----------
    key
        The format's name for the scale: precomputed ``"8_8_40"``, an OME-Zarr dataset path, N5
        ``"s1"``; ``""`` for a lone zarr v3 array or N5 dataset (as ``inspect`` names it).
    shape
        Voxels per axis.
    dtype
        NumPy dtype name in native byte order (``"uint16"``), as the arrays are read.
    voxel_size
        World size of one voxel per axis (``1.0`` on non-spatial axes).
    translate
        World position of the voxel with index 0 per axis.
    downsampling_factors
        Voxels of the finest scale per voxel of this one, per axis (``1.0`` for the finest).
    """

    key: str
    shape: tuple[int, ...]
    dtype: str
    voxel_size: tuple[float, ...]
    translate: tuple[float, ...]
    downsampling_factors: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "shape": list(self.shape), "dtype": self.dtype,
                "voxel_size": list(self.voxel_size), "translate": list(self.translate),
                "downsampling_factors": list(self.downsampling_factors)}


class ChunkSource(Protocol):
    """A level's chunks decoded by the format's own code, for data no TensorStore driver reads.

    TensorStore decodes voxels on the hot path wherever it can. Some data users have it cannot:
    N5 ``lz4`` blocks and the N5 1.x ``compressionType`` attribute, zarr v2 ``lz4``/``lzma``
    chunks, CloudVolume's ``NAME.gz`` chunk files. For those a format hands out a chunk source,
    and the volumes layer wraps it in TensorStore's ``virtual_chunked`` driver, so the viewer gets
    the same lazy views, shared cache and concurrency as for every other volume. A format may also
    hand out a source for data a driver reads, where its own decoder is faster
    (:class:`DirectChunkSource`: precomputed's raw scales on local disk).

    ``shape``, ``chunk_shape`` and :meth:`read_chunk` are in the source's own axis order (before
    the level's :class:`ArrayTransform`), like the array a TensorStore driver would open.
    """

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    @property
    def chunk_shape(self) -> tuple[int, ...]: ...

    @property
    def fill_value(self) -> Any: ...

    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        """The chunk at ``grid`` (its part inside the array, or the whole chunk), ``None`` when not stored.

        Raises the format's typed errors (``ChunkDecodeError`` naming the key) for damaged bytes.
        """
        ...


@runtime_checkable
class DirectChunkSource(ChunkSource, Protocol):
    """A chunk source that decodes into a buffer it is given: the fast path of data TensorStore also reads.

    Why: where the format's own decoder is faster than TensorStore's driver (precomputed's gzip
    through libdeflate), decoding straight into the destination — TensorStore's chunk buffer on a
    cached read, a reused per-thread buffer on an uncached one — skips the allocation and copy of a
    decoded chunk per read. The volumes layer uses :meth:`decode_into` on both paths
    (:mod:`napari_shardscope.core.volumes.direct`).

    A source may also offer ``prepare_chunks(grids)``: called once before the chunks of an
    uncached read are decoded on the pool, it loads what they share (a sharded scale's minishard
    indexes) in one batch, and raises nothing (damage is raised by the decode that meets it).
    """

    #: How a chunk's bytes are laid out: ``"F"`` first axis fastest (precomputed's x, y, z, c),
    #: ``"C"`` last axis fastest (zarr's). Buffers handed to :meth:`decode_into` are laid out so,
    #: so a chunk decodes into them with no copy.
    memory_order: Literal["C", "F"]

    def decode_into(self, grid: tuple[int, ...], out: npt.NDArray[Any]) -> bool:
        """Decode the chunk at ``grid`` into ``out`` (its extent in the source's order, any memory layout).

        Returns ``False`` (``out`` untouched) when the chunk is not stored: it reads as :attr:`fill_value`.
        Raises the format's typed errors for damaged bytes, as :meth:`read_chunk` does.
        """
        ...


def clipped_extent(grid: Sequence[int], chunk: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of the chunk at ``grid``, clipped at the array's far edges (what a direct source decodes into)."""
    return tuple(min(c, n - g * c) for g, c, n in zip(grid, chunk, shape, strict=True))


def check_decode_target(out: npt.NDArray[Any], extent: tuple[int, ...], what: str) -> None:
    """Refuse a :meth:`DirectChunkSource.decode_into` buffer not shaped as the chunk's ``extent``.

    ``what`` names the chunk in the message (its grid position and where it lives).
    """
    if tuple(out.shape) != extent:
        raise ArgumentError(f"{what} has shape {extent}, not the {tuple(out.shape)} given to decode it into")


@dataclass(frozen=True)
class LevelSpec(LevelPlacement):
    """A :class:`LevelPlacement` plus how to open its voxels.

    Attributes
    ----------
    tensorstore
        The TensorStore spec JSON to open read-only (driver, kvstore and driver options).
    transform
        What turns the opened array into :attr:`shape` order (see :class:`ArrayTransform`).
    chunk_source
        When set, the voxels are read from it (:class:`ChunkSource`) instead of ``tensorstore``'s
        driver; ``tensorstore`` then only says where the data lives.
    """

    tensorstore: Mapping[str, Any]
    transform: ArrayTransform
    chunk_source: ChunkSource | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, placement: LevelPlacement, tensorstore: Mapping[str, Any],
           transform: ArrayTransform | None = None, chunk_source: ChunkSource | None = None) -> LevelSpec:
        """The spec of ``placement``'s level, opened with ``tensorstore`` (or ``chunk_source``) via ``transform``."""
        return cls(placement.key, placement.shape, placement.dtype, placement.voxel_size, placement.translate,
                   placement.downsampling_factors, tensorstore,
                   transform if transform is not None else ArrayTransform(), chunk_source)


@dataclass(frozen=True)
class VolumePlacement:
    """The axes, unit and level placements of one volume: what an inspector reports of it."""

    axes: tuple[str, ...]
    unit: str | None
    levels: tuple[LevelPlacement, ...]

    def level(self, key: str) -> LevelPlacement:
        """The level called ``key`` (KeyError listing the names when absent)."""
        for level in self.levels:
            if level.key == key:
                return level
        raise KeyError(f"no scale {key!r}; scales are {[lv.key for lv in self.levels]}")

    def level_json(self, key: str) -> dict[str, Any] | None:
        """One level as ``inspect --json`` shows it (``None`` when ``key`` is not a level)."""
        for level in self.levels:
            if level.key == key:
                fields = {k: v for k, v in level.to_json().items() if k != "key"}
                return {"axes": list(self.axes), "unit": self.unit, **fields}
        return None


@dataclass(frozen=True)
class ChannelDisplay:
    """How the metadata asks one channel of an image to be shown (OME-Zarr ``omero.channels[i]``).

    Each field is ``None`` (or ``True`` for :attr:`visible`) when the metadata does not say or says
    something unusable, so a viewer falls back to its own default for that field only.

    Attributes
    ----------
    label
        The channel's name (``label``).
    color
        ``"#rrggbb"`` (``color``, six hex digits).
    window
        The display range: ``window.start``/``end``, else ``window.min``/``max``.
    visible
        Whether it is shown at first (``active``).
    """

    label: str | None = None
    color: str | None = None
    window: tuple[float, float] | None = None
    visible: bool = True


@dataclass(frozen=True)
class VolumeSpec:
    """One volume of a dataset, finest scale first, as pure data.

    Attributes
    ----------
    url
        Where the volume is (the dataset's root, or a label image's group).
    name
        A short display name (the last path component, or the OME name).
    format
        ``"precomputed"``, ``"zarr3"``, ``"ome-zarr"`` or ``"n5"``.
    kind
        ``"segmentation"`` (object ids) or ``"image"``.
    axes
        Axis names, slowest first.
    unit
        ``"nm"`` when voxel sizes were converted from named length units, ``None`` otherwise.
    levels
        The scales as the metadata lists them.
    contrast_limits
        The display range of an image, from metadata or the dtype (never from voxels).
    channel_axis
        Index of a channel axis in :attr:`axes`, if any.
    metadata
        The format's raw metadata document, for widgets that want it.
    channels
        How the metadata asks each channel to be shown (OME-Zarr ``omero``), in channel order; empty
        when it says nothing. One entry for an image without a channel axis whose metadata names one.
    """

    url: str
    name: str
    format: FormatName
    kind: Kind
    axes: tuple[str, ...]
    unit: str | None
    levels: tuple[LevelSpec, ...]
    contrast_limits: tuple[float, float] | None = None
    channel_axis: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    channels: tuple[ChannelDisplay, ...] = ()

    @property
    def placement(self) -> VolumePlacement:
        return VolumePlacement(self.axes, self.unit, tuple(self.levels))

    def level(self, key: str) -> LevelSpec:
        """The scale named ``key`` (KeyError listing the names when absent), as ``Volume.level``."""
        for level in self.levels:
            if level.key == key:
                return level
        raise KeyError(f"no scale {key!r}; scales are {[lv.key for lv in self.levels]}")


#: The reader's order of the spatial axes: slowest first, as napari and every array here present them.
SPATIAL_AXES = ("z", "y", "x")


def reader_order(axes: Sequence[str]) -> tuple[int, ...] | None:
    """The permutation presenting ``axes`` in the reader's order, or ``None`` when they already are.

    Axes named ``x`` and ``y`` (and ``z``) go last, as ``z, y, x``; every other axis (``t``, ``c``,
    unnamed) keeps its place before them, in the order written. Datasets whose axes do not name
    both ``x`` and ``y`` are presented as stored. Zarr ``dimension_names``/OME ``axes`` such as
    ``c, x, y, z`` (webKnossos) become ``c, z, y, x``; each presented axis shows stored axis
    ``order[i]``.
    """
    names = [str(a).lower() for a in axes]
    if "x" not in names or "y" not in names or len(set(names)) != len(names):
        return None
    spatial = [names.index(n) for n in SPATIAL_AXES if n in names]
    order = tuple([i for i in range(len(names)) if i not in spatial] + spatial)
    return None if order == tuple(range(len(names))) else order


def permute(values: Sequence[Any], order: Sequence[int] | None) -> tuple[Any, ...]:
    """``values`` in presented order (``order`` from :func:`reader_order`; ``None`` keeps them)."""
    return tuple(values) if order is None else tuple(values[i] for i in order)


def reorder_level(level: LevelPlacement, order: Sequence[int] | None) -> LevelPlacement:
    """``level`` with every per-axis field in presented order."""
    if order is None:
        return level
    return LevelPlacement(level.key, permute(level.shape, order), level.dtype, permute(level.voxel_size, order),
                          permute(level.translate, order), permute(level.downsampling_factors, order))


def reorder_placement(placement: VolumePlacement, order: Sequence[int] | None) -> VolumePlacement:
    """``placement`` (axes and every level) in presented order."""
    if order is None:
        return placement
    return VolumePlacement(permute(placement.axes, order), placement.unit,
                           tuple(reorder_level(level, order) for level in placement.levels))


def lone_array_placement(axes: Sequence[str], shape: Sequence[int], dtype_name: str,
                         key: str = "") -> VolumePlacement:
    """A lone array (zarr v2 or v3, no OME metadata): one scale of unit-sized voxels at the origin,
    unitless, with ``axes`` (stored order) presented in the reader's order."""
    n = len(shape)
    level = LevelPlacement(key, tuple(shape), dtype_name, (1.0,) * n, (0.0,) * n, (1.0,) * n)
    return reorder_placement(VolumePlacement(tuple(axes), None, (level,)), reader_order(axes))


def default_axes(ndim: int) -> tuple[str, ...]:
    """Axis names, slowest first, when the metadata gives none: the last three are z, y, x."""
    if ndim <= len(DEFAULT_AXES):
        return DEFAULT_AXES[len(DEFAULT_AXES) - ndim:]
    return tuple(f"d{i}" for i in range(ndim - 3)) + DEFAULT_AXES[-3:]


def dtype_contrast_limits(dtype: np.dtype[Any]) -> tuple[float, float]:
    """A display range from the dtype alone: its full range for integers, ``(0, 1)`` otherwise.

    Why not the data range: computing it would read the whole volume, which is exactly what a
    lazy reader must never do.
    """
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return float(info.min), float(info.max)
    return 0.0, 1.0


def guess_kind(dtype: np.dtype[Any]) -> Kind:
    """Image or segmentation when the metadata does not say: 32/64-bit integers are labels.

    EM images are 8- or 16-bit (or float); object ids need 32 or 64 bits. Callers can override
    the guess with ``open_volume(url, kind=...)``.
    """
    if dtype.kind in "iu" and dtype.itemsize >= 4:
        return "segmentation"
    return "image"


def image_contrast_limits(kind: Kind, dtype: np.dtype[Any],
                          window: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """An image's display range (``window`` from metadata, else the dtype's); ``None`` for labels."""
    if kind != "image":
        return None
    return window or dtype_contrast_limits(dtype)


def ratios(values: Sequence[float], base: Sequence[float]) -> tuple[float, ...]:
    """``values / base`` per axis (1 where ``base`` is 0): a level's factors from voxel sizes."""
    return tuple(float(v) / float(b) if b else 1.0 for v, b in zip(values, base, strict=True))
