"""N5 ``attributes.json``: datasets, and multiscale groups of datasets ``s0``, ``s1``, ….

Axis order
----------
Everything here is in N5's own order, the order of ``dimensions`` in ``attributes.json``: the
*fastest-varying axis first* — x, y, z for a 3-D volume. A block's elements are stored with x
varying fastest, so a block read into numpy in C order has shape ``(z, y, x)``, the reverse
(see :mod:`napari_shardscope.core.formats.n5.block`). TensorStore's ``n5`` driver keeps N5's order for its
array axes, which is why our voxel coordinates and grid positions match TensorStore's indices.

Datasets are parsed as the Java N5 reader does: a group is a dataset when it has ``dimensions`` and
``dataType``; ``blockSize`` defaults to the whole dataset; ``dataType`` is case-insensitive; the
pre-1.0 spelling with a top-level ``compressionType`` string (``"gzip"``) is accepted when there is
no ``compression`` object. Anything else that is wrong raises :class:`MetadataError` naming the
field and the value, because a broken ``attributes.json`` is usually a writer's bug that the user
must find in a pipeline; a compression we do not implement (N5 lets libraries add their own)
raises :class:`~napari_shardscope.core.errors.UnsupportedFeatureError` instead.

Multiscale groups: the one reading of them
------------------------------------------
A group of datasets ``s0``, ``s1``, … as BigDataViewer, n5-viewer, n5-ij/n5-spark and Paintera
write it. This is the only place shardscope interprets one (the viewer's volume spec, ``inspect``
and the shard browser all take :class:`ScaleLevel` from here); where those writers' readers
disagree, the choice is written down:

* **Downsampling factors** of scale *k* (voxels of ``s0`` per voxel of ``sk``, per axis): the
  dataset's own ``downsamplingFactors`` (n5-viewer, BigDataViewer, n5-spark write it on every
  scale); else row *k* of the group's ``scales`` (n5-viewer's group attribute) or, when there is
  none, of the group's ``downsamplingFactors`` (BigDataViewer's setup group) — Neuroglancer reads
  both group tables and lets ``scales`` win when a group has both; else ``1`` for ``s0``; else,
  as a last resort, the rounded ratio of the dimensions.
* **Voxel size** of scale *k* = a base resolution × its factors. The base is the dataset's own
  ``pixelResolution`` / ``resolution``, else the group's, else ``s0``'s own. A scale's own
  ``pixelResolution`` is the *full-resolution* voxel size, not that scale's: n5-ij's
  ``N5SingleScaleMetadataParser`` builds a scale's transform as ``pixelResolution`` ×
  ``downsamplingFactors``, and n5-spark copies ``s0``'s ``pixelResolution`` onto every scale it
  writes. (Taking it as the scale's own voxel size, as this project's viewer once did, made
  ``open`` and ``inspect`` disagree on such scales.)
* **COSEM transforms** (OpenOrganelle): a scale's own ``transform`` (``scale``, ``translate``,
  ``units``, written slowest axis first) is that scale's voxel size and offset, and wins over the
  rules above for that scale.
* **Units**: ``pixelResolution`` is ``{"dimensions": [...], "unit": "nm"}`` (one unit for every
  axis) or a bare list (no unit); ``resolution`` takes its units from the same document's
  ``units`` (a list per axis, as Neuroglancer reads it, or one string for all).
* **Validation** is Neuroglancer's: factors and resolutions are finite positive numbers; a zero,
  a negative or a malformed table raises :class:`MetadataError` (nothing skips a bad entry
  silently), so every reader of the group sees the same levels or the same error.
* N5 has no offset field: every scale starts at the origin. (n5-ij and BigDataViewer add a
  ``(f - 1) / 2`` half-voxel shift to downsampled scales; shardscope's volumes place every format's
  scales at ``voxel_offset * voxel_size`` instead and do not apply it.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import ByteStore, join_key, read_document
from napari_shardscope.core.errors import ArgumentError, MetadataError, NotADatasetError
from napari_shardscope.core.formats.budget import check_chunk_budget
from napari_shardscope.core.formats.n5.compression import Compression, parse_compression
from napari_shardscope.core.json_document import load_json_object

ATTRIBUTES_FILE = "attributes.json"
DATA_TYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float32", "float64")
#: Java's ``int`` bound: N5 block sizes and element counts are Java ints.
MAX_BLOCK_SIDE = (1 << 31) - 1
MAX_DIMENSION = (1 << 63) - 1
#: Probing ``s0``, ``s1``, … stops here at the latest.
MAX_SCALES = 64
#: Bound on factors and resolutions: far beyond any real value, small enough that products stay finite.
MAX_NUMBER = 1e15


@dataclass(frozen=True)
class DatasetAttributes:
    """One N5 dataset's metadata (all tuples in N5 order, x fastest).

    Attributes
    ----------
    dimensions
        Voxels per axis.
    block_size
        Voxels per block per axis (end blocks may be smaller).
    data_type
        One of :data:`DATA_TYPES` (lower case).
    compression
        How block data is compressed.
    path
        The dataset's key prefix in its store (``""`` when the store root is the dataset).
    extra
        The whole ``attributes.json`` document (resolution, factors, user attributes).
    """

    dimensions: tuple[int, ...]
    block_size: tuple[int, ...]
    data_type: str
    compression: Compression
    path: str = ""
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False, repr=False)

    @property
    def ndim(self) -> int:
        return len(self.dimensions)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element type as stored: big-endian (N5 block data is big-endian)."""
        return np.dtype(self.data_type).newbyteorder(">")

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Blocks per axis: ``ceil(dimensions / block_size)``."""
        return tuple(-(-d // b) for d, b in zip(self.dimensions, self.block_size, strict=True))

    @property
    def num_blocks(self) -> int:
        """Blocks in the full grid (a sparse dataset stores fewer)."""
        return math.prod(self.grid_shape)

    def contains_grid_position(self, grid_position: Sequence[int]) -> bool:
        """Whether ``grid_position`` names a block inside the grid."""
        return len(grid_position) == self.ndim and all(
            0 <= int(g) < n for g, n in zip(grid_position, self.grid_shape, strict=True))

    def grid_position(self, voxel: Sequence[int]) -> tuple[int, ...]:
        """The grid position of the block holding ``voxel`` (N5 order, x first).

        Raises
        ------
        ArgumentError
            ``voxel`` has the wrong number of coordinates or lies outside the dataset.
        """
        if len(voxel) != self.ndim:
            raise ArgumentError(f"a voxel of this dataset has {self.ndim} coordinates in N5 order "
                                f"(x first), got {tuple(voxel)}")
        if any(not 0 <= int(v) < d for v, d in zip(voxel, self.dimensions, strict=True)):
            raise ArgumentError(f"voxel {tuple(int(v) for v in voxel)} is outside the dataset's dimensions "
                                f"{self.dimensions} (N5 order, x first)")
        return tuple(int(v) // b for v, b in zip(voxel, self.block_size, strict=True))

    def block_origin(self, grid_position: Sequence[int]) -> tuple[int, ...]:
        """The first voxel of a block."""
        return tuple(int(g) * b for g, b in zip(grid_position, self.block_size, strict=True))

    def block_shape(self, grid_position: Sequence[int]) -> tuple[int, ...]:
        """The block's extent inside the dataset: ``block_size``, cropped at the upper end.

        This is the shape Java N5 writes end blocks with; TensorStore writes them full-size, which
        the spec allows as well ("end-chunks *may* be smaller").
        """
        if not self.contains_grid_position(grid_position):
            raise ArgumentError(f"grid position {tuple(grid_position)} is outside the block grid {self.grid_shape}")
        return tuple(min(b, d - int(g) * b)
                     for g, b, d in zip(grid_position, self.block_size, self.dimensions, strict=True))

    def to_json(self) -> dict[str, Any]:
        """The mandatory dataset attributes, spelled as N5 writes them."""
        return {"dimensions": list(self.dimensions), "blockSize": list(self.block_size),
                "dataType": self.data_type, "compression": self.compression.to_json()}


@dataclass(frozen=True)
class ScaleLevel:
    """One scale of a multiscale group (or the only one of a plain dataset).

    Attributes
    ----------
    key
        The child's name (``"s0"``, ``"s1"``, …), or ``""`` for a dataset that is not in a group.
    attributes
        The scale's dataset attributes (its ``path`` is its key prefix in the store).
    downsampling_factors
        Voxels of ``s0`` per voxel of this scale, per axis (N5 order).
    resolution
        Physical voxel size of this scale (the base resolution × the factors), or ``None``.
    units
        The unit of each axis of ``resolution`` as the metadata names it (``None``: none named).
    translate
        Physical position of voxel 0 in ``units`` (COSEM ``transform.translate``), ``None`` when the
        metadata gives none (N5 has no offset field of its own).
    """

    key: str
    attributes: DatasetAttributes
    downsampling_factors: tuple[float, ...]
    resolution: tuple[float, ...] | None = None
    units: tuple[str, ...] | None = None
    translate: tuple[float, ...] | None = None

    @property
    def unit(self) -> str | None:
        """The unit shared by every axis (``pixelResolution.unit``), ``None`` when axes differ or none is named."""
        if not self.units or any(u != self.units[0] for u in self.units):
            return None
        return self.units[0] or None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "path": self.attributes.path, **self.attributes.to_json(),
                "downsamplingFactors": list(self.downsampling_factors),
                "resolution": None if self.resolution is None else list(self.resolution), "unit": self.unit,
                "units": None if self.units is None else list(self.units),
                "translate": None if self.translate is None else list(self.translate)}


@dataclass(frozen=True)
class Resolution:
    """A ``pixelResolution`` or ``resolution`` attribute: voxel size per axis and the units it is in."""

    values: tuple[float, ...]
    units: tuple[str, ...] | None


# -- documents ---------------------------------------------------------------------------------


def decode_attributes_json(data: bytes, *, key: str | None = None) -> dict[str, Any]:
    """Parse the bytes of an ``attributes.json`` into a dict.

    Raises
    ------
    MetadataError
        Not UTF-8, not JSON (with the byte offset of the syntax error), or not a JSON object.
    """
    return load_json_object(data, key=key or ATTRIBUTES_FILE)


def read_attributes(store: ByteStore, path: str = "") -> dict[str, Any] | None:
    """The ``attributes.json`` of the group or dataset at ``path``, or ``None`` when there is none."""
    key = join_key(path, ATTRIBUTES_FILE)
    data = read_document(store, key)
    return None if data is None else decode_attributes_json(data, key=key)


def write_attributes(store: ByteStore, doc: Mapping[str, Any], path: str = "") -> str:
    """Write ``doc`` as the ``attributes.json`` at ``path`` (atomically); returns its key.

    Pass :meth:`DatasetAttributes.to_json` (plus any extra attributes) to create a dataset.
    """
    key = join_key(path, ATTRIBUTES_FILE)
    store.write(key, json.dumps(dict(doc), indent=1, sort_keys=True).encode("utf-8"))
    return key


def is_dataset(doc: Mapping[str, Any]) -> bool:
    """Whether an attributes document describes a dataset (Java N5: it has dimensions and dataType)."""
    return "dimensions" in doc and "dataType" in doc


def parse_dataset_attributes(doc: Mapping[str, Any], *, path: str = "", key: str | None = None) -> DatasetAttributes:
    """Parse a dataset's ``attributes.json`` document.

    Parameters
    ----------
    doc
        The decoded document.
    path
        The dataset's key prefix in its store.
    key
        The document's key, for messages (default ``<path>/attributes.json``).

    Raises
    ------
    MetadataError
        A missing or malformed field; the message names the field and its value.
    """
    key = key if key is not None else join_key(path, ATTRIBUTES_FILE)
    dims = _int_list(doc, "dimensions", 0, MAX_DIMENSION, key)
    if not dims:
        raise MetadataError("field 'dimensions' must list at least one dimension, got []", key=key)
    if "blockSize" in doc:
        block = _int_list(doc, "blockSize", 1, MAX_BLOCK_SIDE, key)
        if len(block) != len(dims):
            raise MetadataError(f"field 'blockSize' has {len(block)} entries but 'dimensions' has {len(dims)}: "
                                f"{list(block)}", key=key)
    else:  # Java N5: a dataset without blockSize is one block
        block = tuple(min(max(d, 1), MAX_BLOCK_SIDE) for d in dims)
    data_type = doc.get("dataType")
    if not isinstance(data_type, str) or data_type.lower() not in DATA_TYPES:
        raise MetadataError(f"field 'dataType' has unsupported value {data_type!r}; expected one of "
                            f"{list(DATA_TYPES)}", key=key)
    check_chunk_budget(block, np.dtype(data_type.lower()).itemsize, field="field 'blockSize'", key=key)
    if "compression" in doc:
        compression = parse_compression(doc["compression"], key=key)
    elif "compressionType" in doc:  # N5 before 1.0: a bare type name with default parameters
        legacy = doc["compressionType"]
        if not isinstance(legacy, str):
            raise MetadataError(f"field 'compressionType' must be a string, got {legacy!r}", key=key)
        compression = parse_compression({"type": legacy}, key=key, field="compressionType")
    else:
        raise MetadataError("field 'compression' is missing (and no legacy 'compressionType')", key=key)
    return DatasetAttributes(dimensions=dims, block_size=block, data_type=data_type.lower(),
                             compression=compression, path=path, extra=MappingProxyType(dict(doc)))


def _int_list(doc: Mapping[str, Any], name: str, lo: int, hi: int, key: str) -> tuple[int, ...]:
    value = doc.get(name)
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi for v in value):
        raise MetadataError(f"field {name!r} must be a list of integers in [{lo}, {hi}], got {value!r}", key=key)
    return tuple(value)


# -- multiscale groups -------------------------------------------------------------------------


def list_scales(store: ByteStore, path: str = "", group_doc: Mapping[str, Any] | None = None) -> list[ScaleLevel]:
    """The scales at ``path``: a multiscale group's ``s0``, ``s1``, …, or a dataset's single scale.

    Reads only ``attributes.json`` files: the group's (unless ``group_doc`` gives it, already
    read), then ``s0/``, ``s1/``, … until one is missing.

    Parameters
    ----------
    store
        The store holding the group.
    path
        The group (or dataset) key prefix in ``store``.
    group_doc
        The decoded ``attributes.json`` at ``path`` when the caller has it.

    Returns
    -------
    list of ScaleLevel
        Finest first. A plain dataset gives one level with key ``""`` and factors of 1.

    Raises
    ------
    NotADatasetError
        ``path`` is neither a dataset nor a group with an ``s0`` dataset.
    MetadataError
        A malformed document (naming the file, the field and the value).
    UnsupportedFeatureError
        A valid document asking for what we do not read (a compression, a data type).
    """
    if group_doc is None:
        group_doc = read_attributes(store, path)
    if group_doc is not None and is_dataset(group_doc):
        return parse_scales(group_doc, [], path=path)
    level_docs: list[Mapping[str, Any]] = []
    for i in range(MAX_SCALES):
        doc = read_attributes(store, join_key(path, f"s{i}"))
        if doc is None:
            break
        level_docs.append(doc)
    if not level_docs:
        where = path or store.url
        raise NotADatasetError(f"{where}: not an N5 dataset (no 'dimensions'/'dataType' in attributes.json) "
                               "and not a multiscale group (no s0 dataset); point at a dataset or a multiscale "
                               "group inside the N5 container")
    return parse_scales(group_doc or {}, level_docs, path=path)


def parse_scales(group_doc: Mapping[str, Any], level_docs: Sequence[Mapping[str, Any]], *,
                 path: str = "") -> list[ScaleLevel]:
    """The scales described by a group document and its ``sN`` children's documents.

    With no ``level_docs``, ``group_doc`` must itself be a dataset (a single scale, key ``""``).
    The rules are the module docstring's.
    """
    if not level_docs:
        attrs = parse_dataset_attributes(group_doc, path=path)
        key = join_key(path, ATTRIBUTES_FILE)
        ones = tuple(1 for _ in range(attrs.ndim))
        transform = parse_transform(group_doc, attrs.ndim, key)
        if transform is not None:
            return [ScaleLevel("", attrs, ones, transform[0].values, transform[0].units, transform[1])]
        own = parse_resolution(group_doc, attrs.ndim, key)
        return [ScaleLevel("", attrs, ones, *_resolution_fields(own, ones))]
    group_key = join_key(path, ATTRIBUTES_FILE)
    levels: list[ScaleLevel] = []
    s0_resolution: Resolution | None = None
    for i, doc in enumerate(level_docs):
        name = f"s{i}"
        key = join_key(path, name, ATTRIBUTES_FILE)
        if not is_dataset(doc):
            raise MetadataError(f"scale {name} of a multiscale group is not a dataset "
                                "(no 'dimensions'/'dataType')", key=key)
        attrs = parse_dataset_attributes(doc, path=join_key(path, name), key=key)
        if levels and attrs.ndim != levels[0].attributes.ndim:
            raise MetadataError(f"scale {name} has {attrs.ndim} dimensions, s0 has {levels[0].attributes.ndim}",
                                key=key)
        factors = _scale_factors(i, doc, group_doc, attrs, levels[0].attributes if levels else None,
                                 key, group_key)
        transform = parse_transform(doc, attrs.ndim, key)
        if transform is not None:  # COSEM: the scale's own voxel size and offset
            levels.append(ScaleLevel(name, attrs, factors, transform[0].values, transform[0].units, transform[1]))
            continue
        own = parse_resolution(doc, attrs.ndim, key)
        if i == 0:
            s0_resolution = own
        base = own or parse_resolution(group_doc, attrs.ndim, group_key) or s0_resolution
        levels.append(ScaleLevel(name, attrs, factors, *_resolution_fields(base, factors)))
    return levels


def parse_transform(doc: Mapping[str, Any], ndim: int, key: str) -> tuple[Resolution, tuple[float, ...]] | None:
    """A COSEM / OpenOrganelle ``transform`` of a dataset: ``(voxel size and units, offset)``, N5 order.

    COSEM writes ``{"axes": ["z", "y", "x"], "scale": [...], "translate": [...], "units": [...]}`` in
    C order (slowest first), the reverse of N5's ``dimensions``; the values are this scale's own
    voxel size (not a base to multiply by factors) and the position of its voxel 0.
    """
    transform = doc.get("transform")
    if transform is None:
        return None
    if not isinstance(transform, Mapping):
        raise MetadataError(f"field 'transform' must be an object, got {transform!r}", key=key)
    scale = _number_list(transform.get("scale"), "transform.scale", ndim, key)
    translate = transform.get("translate", [0.0] * ndim)
    if (not isinstance(translate, list) or len(translate) != ndim
            or any(isinstance(v, bool) or not isinstance(v, int | float) or not abs(v) <= MAX_NUMBER
                   for v in translate)):
        raise MetadataError(f"field 'transform.translate' must list {ndim} finite numbers, got {translate!r}",
                            key=key)
    units = _units(transform, ndim, key)
    return (Resolution(tuple(reversed(scale)), None if units is None else tuple(reversed(units))),
            tuple(float(v) for v in reversed(translate)))


def _resolution_fields(base: Resolution | None,
                       factors: Sequence[float]) -> tuple[tuple[float, ...] | None, tuple[str, ...] | None]:
    """``(resolution, units)`` of a scale: the base resolution times the scale's factors."""
    if base is None:
        return None, None
    return tuple(r * f for r, f in zip(base.values, factors, strict=True)), base.units


def _scale_factors(index: int, doc: Mapping[str, Any], group_doc: Mapping[str, Any], attrs: DatasetAttributes,
                   s0: DatasetAttributes | None, key: str, group_key: str) -> tuple[float, ...]:
    """Factors of scale ``index``: its own attribute, the group's table, 1 for s0, else inferred.

    The group's ``scales`` is read before its ``downsamplingFactors`` (Neuroglancer's precedence
    when a group has both). The inference (``round(s0 dimension / this dimension)``) is the last
    resort for groups that carry no factors at all; every writer we know records them.
    """
    if "downsamplingFactors" in doc:
        return _number_list(doc["downsamplingFactors"], "downsamplingFactors", attrs.ndim, key)
    for name in ("scales", "downsamplingFactors"):
        table = group_doc.get(name)
        if table is None:
            continue
        if not isinstance(table, list) or not all(isinstance(row, list) for row in table):
            raise MetadataError(f"field {name!r} must be a list of per-scale lists, got {table!r}", key=group_key)
        if index < len(table):
            return _number_list(table[index], f"{name}[{index}]", attrs.ndim, group_key)
    if s0 is None:
        return tuple(1 for _ in range(attrs.ndim))
    return tuple(max(1, round(d0 / d)) if d else 1 for d0, d in zip(s0.dimensions, attrs.dimensions, strict=True))


def _number_list(value: Any, name: str, ndim: int, key: str) -> tuple[float, ...]:
    """``ndim`` positive finite numbers (bounded, so products of factors and resolutions stay finite)."""
    if not isinstance(value, list) or len(value) != ndim or not all(_is_positive_number(v) for v in value):
        raise MetadataError(f"field {name!r} must list {ndim} positive numbers up to {MAX_NUMBER:g}, got {value!r}",
                            key=key)
    return tuple(value)


def _is_positive_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 < value <= MAX_NUMBER


def parse_resolution(doc: Mapping[str, Any], ndim: int, key: str) -> Resolution | None:
    """``pixelResolution`` (object or list) or ``resolution`` (+ ``units``) of a document, or ``None``.

    Raises
    ------
    MetadataError
        For a value that is not ``ndim`` positive numbers, or units that are neither a string nor
        ``ndim`` strings.
    """
    if "pixelResolution" in doc:
        value = doc["pixelResolution"]
        if isinstance(value, Mapping):
            unit = value.get("unit")
            if unit is not None and not isinstance(unit, str):
                raise MetadataError(f"field 'pixelResolution.unit' must be a string, got {unit!r}", key=key)
            dims = _number_list(value.get("dimensions"), "pixelResolution.dimensions", ndim, key)
            return Resolution(dims, None if unit is None else (unit,) * ndim)
        return Resolution(_number_list(value, "pixelResolution", ndim, key), None)
    if "resolution" in doc:
        return Resolution(_number_list(doc["resolution"], "resolution", ndim, key), _units(doc, ndim, key))
    return None


def _units(doc: Mapping[str, Any], ndim: int, key: str) -> tuple[str, ...] | None:
    units = doc.get("units")
    if units is None:
        return None
    if isinstance(units, str):
        return (units,) * ndim
    if not isinstance(units, list) or len(units) != ndim or not all(isinstance(u, str) for u in units):
        raise MetadataError(f"field 'units' must be a unit name or {ndim} unit names, got {units!r}", key=key)
    return tuple(units)


#: Compressions TensorStore's ``n5`` driver decodes; blocks compressed otherwise (``lz4``) are read by
#: :class:`~.volume.N5ChunkSource`, as are datasets written before N5 1.0 (``compressionType``) or
#: without ``blockSize``.
TENSORSTORE_COMPRESSIONS = ("raw", "gzip", "bzip2", "xz", "blosc", "zstd")


def needs_own_reader(attributes: DatasetAttributes) -> bool:
    """Whether TensorStore's ``n5`` driver cannot read this dataset (so :class:`~.volume.N5ChunkSource` does)."""
    extra = attributes.extra
    return (attributes.compression.type not in TENSORSTORE_COMPRESSIONS or "compression" not in extra
            or "blockSize" not in extra)
