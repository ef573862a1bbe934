"""Zarr v2 array metadata (``.zarray``), parsed strictly from the v2 storage specification.

A v2 array stores one JSON document, ``.zarray``, beside its chunks: ``shape``, ``chunks`` (every
chunk has this full shape, edge chunks included, padded with the fill value), ``dtype`` (a NumPy
type string: byte order, kind, size — ``"<u8"``, ``"|u1"``, ``">f4"``), ``compressor`` (a numcodecs
configuration or ``null``), ``fill_value``, ``order`` (``"C"`` or ``"F"``: the memory layout of
the decoded chunk), ``filters`` (``null`` or a list of numcodecs configurations applied before
compression) and ``dimension_separator`` (``"."``, the default, or ``"/"``) naming chunk keys
``"0.3.1"`` or ``"0/3/1"``. User attributes live in ``.zattrs``.

What the field writes and TensorStore reads is supported; what is valid but not implemented
(filters such as ``delta``, structured or object data types, an unknown compressor) is an
:class:`~napari_shardscope.core.errors.UnsupportedFeatureError` naming it, so a user learns
"zarr v2 with the 'delta' filter is not supported" instead of a parse error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from napari_shardscope.core.encoding import COMPRESSORS
from napari_shardscope.core.errors import MetadataError, UnsupportedFeatureError
from napari_shardscope.core.formats.budget import check_chunk_budget

ARRAY_FILE = ".zarray"
GROUP_FILE = ".zgroup"
ATTRIBUTES_FILE = ".zattrs"

#: numcodecs compressors TensorStore's ``zarr`` driver decodes; chunks compressed otherwise are decoded
#: by our own :class:`~.chunk.Zarr2ChunkSource` (every one in :data:`~napari_shardscope.core.encoding.COMPRESSORS`).
VIEWER_COMPRESSORS = ("blosc", "bz2", "gzip", "zlib", "zstd")
#: NumPy kinds of the data types read here: bool, signed and unsigned integers, floats, complex.
NUMERIC_KINDS = "biufc"

Order = Literal["C", "F"]


@dataclass(frozen=True)
class Zarr2ArrayMetadata:
    """One parsed ``.zarray`` (and its ``.zattrs``)."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype[Any]
    compressor: Mapping[str, Any] | None
    fill_value: Any
    order: Order
    dimension_separator: str
    attributes: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def compressor_id(self) -> str | None:
        """The numcodecs id of the compressor (``"blosc"``, ``"zstd"``, …), ``None`` for raw chunks."""
        return None if self.compressor is None else str(self.compressor["id"])

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Chunks per axis."""
        return tuple(math.ceil(s / c) if s else 0 for s, c in zip(self.shape, self.chunks, strict=True))

    @property
    def num_chunks(self) -> int:
        return math.prod(self.grid_shape)

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk: every v2 chunk, edge chunks too, holds the full chunk shape."""
        return math.prod(self.chunks) * self.dtype.itemsize

    def contains_grid_position(self, grid: Sequence[int]) -> bool:
        return len(grid) == self.ndim and all(0 <= g < n for g, n in zip(grid, self.grid_shape, strict=True))

    def grid_position(self, voxel: Sequence[int]) -> tuple[int, ...]:
        """The chunk holding ``voxel`` (array order)."""
        from napari_shardscope.core.errors import ArgumentError

        if len(voxel) != self.ndim:
            raise ArgumentError(f"voxel {list(voxel)} has {len(voxel)} coordinates, the array has {self.ndim} axes")
        if not all(0 <= int(v) < s for v, s in zip(voxel, self.shape, strict=True)):
            raise ArgumentError(f"voxel {list(voxel)} is outside the array's shape {list(self.shape)}")
        return tuple(int(v) // c for v, c in zip(voxel, self.chunks, strict=True))

    def chunk_key(self, grid: Sequence[int]) -> str:
        """The chunk's key relative to the array (``"0.3.1"``; ``"0"`` for a 0-d array)."""
        return self.dimension_separator.join(str(int(g)) for g in grid) if grid else "0"

    def parse_chunk_key(self, key: str) -> tuple[int, ...] | None:
        """The grid position a relative key names, or ``None`` when it is not a chunk key of this array."""
        if self.ndim == 0:
            return () if key == "0" else None
        parts = key.split(self.dimension_separator)
        if len(parts) != self.ndim or not all(p.isascii() and p.isdigit() and (p == "0" or p[0] != "0")
                                              for p in parts):
            return None
        return tuple(int(p) for p in parts)

    def to_json(self) -> dict[str, Any]:
        """The fields ``inspect --json`` shows."""
        return {"shape": list(self.shape), "chunks": list(self.chunks), "dtype": self.dtype.str,
                "compressor": None if self.compressor is None else dict(self.compressor), "order": self.order,
                "dimension_separator": self.dimension_separator, "fill_value": _json_fill(self.fill_value)}


def _json_fill(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _int_list(doc: Mapping[str, Any], name: str, *, key: str, positive: bool) -> tuple[int, ...]:
    value = doc.get(name)
    low = 1 if positive else 0
    if (not isinstance(value, list)
            or any(isinstance(v, bool) or not isinstance(v, int) or v < low or v >= 1 << 62 for v in value)):
        what = "positive" if positive else "non-negative"
        raise MetadataError(f"'{name}' must be a list of {what} integers, got {value!r}", key=key)
    return tuple(int(v) for v in value)


def parse_dtype(value: object, *, key: str) -> np.dtype[Any]:
    """A v2 ``dtype``: a NumPy type string of a numeric kind (structured and object types are unsupported)."""
    if isinstance(value, list):
        raise UnsupportedFeatureError("zarr v2 structured data type", key=key, detail=f"dtype {value!r}")
    if not isinstance(value, str) or len(value) < 2 or value[0] not in "<>|":
        raise MetadataError(f"'dtype' must be a NumPy type string such as '<u8', got {value!r}", key=key)
    try:
        dtype = np.dtype(value)
    except TypeError as exc:
        raise MetadataError(f"'dtype' {value!r} is not a NumPy type string ({exc})", key=key) from exc
    if dtype.kind not in NUMERIC_KINDS:
        raise UnsupportedFeatureError(f"zarr v2 data type {value!r}", key=key,
                                      detail="only bool, integer, float and complex types are read")
    return dtype


def parse_compressor(value: object, *, key: str) -> Mapping[str, Any] | None:
    """``null`` or a numcodecs configuration whose ``id`` is one of :data:`COMPRESSORS`."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("id"), str):
        raise MetadataError(f"'compressor' must be null or an object with a string 'id', got {value!r}", key=key)
    if value["id"] not in COMPRESSORS:
        raise UnsupportedFeatureError(f"zarr v2 compressor {value['id']!r}", key=key,
                                      detail=f"supported: {', '.join(COMPRESSORS)}")
    return dict(value)


def parse_fill_value(value: object, dtype: np.dtype[Any], *, key: str) -> Any:
    """A v2 ``fill_value``: a number, ``"NaN"``/``"Infinity"``/``"-Infinity"`` for floats, or ``null``."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity") and dtype.kind in "fc":
        return float(value.replace("Infinity", "inf"))
    if (dtype.kind == "c" and isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)):
        return complex(value[0], value[1])  # zarr-python writes a complex fill value as [real, imag]
    if isinstance(value, int | float):  # bool is an int
        if dtype.kind == "b" and not isinstance(value, bool) and value not in (0, 1):
            raise MetadataError(f"'fill_value' {value!r} is not a bool", key=key)
        return value
    raise MetadataError(f"'fill_value' must be a number, 'NaN', 'Infinity', '-Infinity' or null for {dtype.str}, "
                        f"got {value!r}", key=key)


def parse_zarray(doc: Mapping[str, Any], *, key: str,
                 attributes: Mapping[str, Any] | None = None) -> Zarr2ArrayMetadata:
    """Parse a ``.zarray`` document (``key``: its URL, named in every error).

    Raises
    ------
    MetadataError
        For a field that breaks the v2 spec, or a chunk over the memory budget.
    UnsupportedFeatureError
        For valid features not read here: filters, structured/object data types, other compressors.
    """
    if doc.get("zarr_format") != 2:
        raise MetadataError(f"'zarr_format' must be 2, got {doc.get('zarr_format')!r}", key=key)
    shape = _int_list(doc, "shape", key=key, positive=False)
    chunks = _int_list(doc, "chunks", key=key, positive=True)
    if len(chunks) != len(shape):
        raise MetadataError(f"'chunks' {list(chunks)} must have one entry per axis of 'shape' {list(shape)}", key=key)
    dtype = parse_dtype(doc.get("dtype"), key=key)
    check_chunk_budget(chunks, dtype.itemsize, field="'chunks'", key=key)
    compressor = parse_compressor(doc.get("compressor"), key=key)
    filters = doc.get("filters")
    if filters not in (None, []):
        if not isinstance(filters, list):
            raise MetadataError(f"'filters' must be null or a list, got {filters!r}", key=key)
        names = [f.get("id") if isinstance(f, Mapping) else f for f in filters]
        raise UnsupportedFeatureError(f"zarr v2 with the {', '.join(repr(n) for n in names)} filter", key=key)
    order = doc.get("order", "C")
    if order not in ("C", "F"):
        raise MetadataError(f"'order' must be 'C' or 'F', got {order!r}", key=key)
    separator = doc.get("dimension_separator", ".")
    if separator is None:
        separator = "."
    if separator not in (".", "/"):
        raise MetadataError(f"'dimension_separator' must be '.' or '/', got {separator!r}", key=key)
    fill = parse_fill_value(doc.get("fill_value"), dtype, key=key)
    return Zarr2ArrayMetadata(shape, chunks, dtype, compressor, fill, order, separator,
                              dict(attributes or {}))


def array_dimension_names(meta: Zarr2ArrayMetadata) -> tuple[str, ...] | None:
    """Axis names from xarray's ``_ARRAY_DIMENSIONS`` attribute (the v2 convention), when complete."""
    names = meta.attributes.get("_ARRAY_DIMENSIONS")
    if isinstance(names, list) and len(names) == meta.ndim and all(isinstance(n, str) and n for n in names):
        return tuple(names)
    return None
