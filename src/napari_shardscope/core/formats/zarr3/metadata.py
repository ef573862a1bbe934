"""Zarr v3 ``zarr.json``: array and group metadata, chunk key encodings.

Only what locating, listing and validating shards needs is interpreted: shape, data type, the
regular chunk grid, the chunk key encoding, the fill value and the codec list (kept as
:class:`CodecSpec` records that :mod:`.codecs` and :mod:`.sharding` interpret). Anything that
breaks the spec raises :class:`MetadataError` naming the field and the offending value, because a
user staring at a broken dataset needs to know *which* line of ``zarr.json`` to fix; valid metadata
asking for a feature we do not implement (another chunk grid, an extension data type, storage
transformers) raises :class:`UnsupportedFeatureError` naming the feature instead, because there is
nothing to fix in the file.

Groups are parsed just enough to find the arrays under them: the dataset paths of an OME-Zarr
``multiscales`` attribute (``attributes["ome"]["multiscales"]``, NGFF 0.5; a top-level
``attributes["multiscales"]`` is accepted too), and the arrays of inline consolidated metadata.
The rest of the OME metadata (axes, transforms, labels) is :mod:`.ome`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

from napari_shardscope.core.errors import MetadataError, UnsupportedFeatureError
from napari_shardscope.core.formats.budget import check_chunk_budget
from napari_shardscope.core.formats.ome import OmeMultiscale, dataset_path, ome_attributes, parse_multiscale
from napari_shardscope.core.json_document import load_json_object

#: The largest extent or chunk size we accept: what fits an int64 index.
MAX_EXTENT = 2**63 - 1

#: Zarr v3 core data types and their numpy equivalents (byte order is the ``bytes`` codec's job).
DATA_TYPES: dict[str, str] = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "complex64": "complex64",
    "complex128": "complex128",
}

Separator = Literal["/", "."]


@dataclass(frozen=True)
class CodecSpec:
    """One entry of a ``codecs`` list: the codec's name and its configuration object."""

    name: str
    configuration: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object form (``configuration`` omitted when empty, as writers do)."""
        out: dict[str, Any] = {"name": self.name}
        if self.configuration:
            out["configuration"] = _to_plain(self.configuration)
        return out


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """How chunk grid positions become storage keys.

    ``default``: ``"c" + sep + "1" + sep + "2"`` (``"c"`` for a 0-d array), separator ``/``
    unless configured; ``v2``: ``"1" + sep + "2"`` (``"0"`` for a 0-d array), separator ``.``.
    """

    name: Literal["default", "v2"] = "default"
    separator: Separator = "/"

    def encode(self, grid_position: Sequence[int]) -> str:
        """The key, relative to the array's directory, of the chunk at ``grid_position``."""
        parts = [str(int(i)) for i in grid_position]
        if self.name == "default":
            return self.separator.join(["c", *parts])
        return self.separator.join(parts) if parts else "0"

    def decode(self, key: str, ndim: int) -> tuple[int, ...] | None:
        """The grid position a key (relative to the array's directory) names, or ``None``.

        ``None`` for keys that are not chunk keys of this encoding (``zarr.json``, stray files),
        so a listing of the array directory can be filtered through this.
        """
        parts = key.split(self.separator)
        if self.name == "default":
            if parts[0] != "c":
                return None
            parts = parts[1:]
            if ndim == 0:
                return () if not parts else None
        elif ndim == 0:
            return () if parts == ["0"] else None
        if len(parts) != ndim or not all(p.isdigit() and p.isascii() for p in parts):
            return None
        return tuple(int(p) for p in parts)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"separator": self.separator}}


@dataclass(frozen=True)
class ArrayMetadata:
    """A parsed array ``zarr.json``.

    ``fill_value`` keeps its JSON form (``"NaN"``, ``[re, im]`` …) so it round-trips;
    :attr:`fill_scalar` is the numpy value.
    """

    shape: tuple[int, ...]
    data_type: str
    chunk_shape: tuple[int, ...]
    chunk_key_encoding: ChunkKeyEncoding
    fill_value: Any
    codecs: tuple[CodecSpec, ...]
    dimension_names: tuple[str | None, ...] | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype in native byte order."""
        return np.dtype(DATA_TYPES[self.data_type])

    @property
    def fill_scalar(self) -> np.generic:
        return parse_fill_value(self.fill_value, self.data_type)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension (the last ones may be partial)."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True))

    def chunk_key(self, grid_position: Sequence[int]) -> str:
        """Key of a chunk relative to the array's directory."""
        return self.chunk_key_encoding.encode(grid_position)

    def to_json(self) -> dict[str, Any]:
        """The ``zarr.json`` document of this array."""
        out: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(self.chunk_shape)}},
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": _to_plain(self.fill_value),
            "codecs": [c.to_json() for c in self.codecs],
            "attributes": _to_plain(self.attributes),
        }
        if self.dimension_names is not None:
            out["dimension_names"] = list(self.dimension_names)
        return out


@dataclass(frozen=True)
class GroupMetadata:
    """A parsed group ``zarr.json``: its attributes and the arrays it points at.

    :attr:`multiscale` (the OME-Zarr axes and coordinate transforms) is parsed on first use and
    kept, so the viewer's volume spec and the inspector share one parse, while a group whose
    transforms are broken can still be validated shard by shard.
    """

    attributes: Mapping[str, Any]
    multiscale_paths: tuple[str, ...] = ()
    consolidated_array_paths: tuple[str, ...] = ()
    #: The document's key or URL, for messages.
    key: str = field(default="zarr.json", compare=False)

    @property
    def ome(self) -> dict[str, Any]:
        """The OME metadata (:func:`~.ome.ome_attributes`)."""
        return ome_attributes(self.attributes)

    @cached_property
    def multiscale(self) -> OmeMultiscale:
        """The first OME-Zarr multiscale image (MetadataError when it is absent or breaks the spec)."""
        return parse_multiscale(self.ome, key=self.key)


def parse_node_metadata(data: bytes | Mapping[str, Any], *, key: str) -> ArrayMetadata | GroupMetadata:
    """Parse a ``zarr.json`` document that may describe an array or a group."""
    doc = load_json_object(data, key=key)
    _check_zarr_format(doc, key)
    node_type = doc.get("node_type")
    if node_type == "array":
        return parse_array_metadata(doc, key=key)
    if node_type == "group":
        return parse_group_metadata(doc, key=key)
    raise MetadataError(f"node_type must be 'array' or 'group', got {node_type!r}", key=key)


def parse_array_metadata(data: bytes | Mapping[str, Any], *, key: str) -> ArrayMetadata:
    """Parse and check an array ``zarr.json``.

    Raises
    ------
    MetadataError
        On any field that breaks the Zarr v3 spec (naming the field and the value).
    UnsupportedFeatureError
        For valid metadata asking for what we do not implement: a chunk grid other than
        ``regular``, a data type outside the core set (or an extension data type object),
        storage transformers.
    """
    doc = load_json_object(data, key=key)
    _check_zarr_format(doc, key)
    if doc.get("node_type") != "array":
        raise MetadataError(f"node_type must be 'array', got {doc.get('node_type')!r}", key=key)
    shape = parse_int_list(doc.get("shape"), "shape", key=key, minimum=0)
    data_type = doc.get("data_type")
    if not isinstance(data_type, str) and not isinstance(data_type, dict):
        raise MetadataError(f"data_type must be a data type name or object, got {data_type!r}", key=key)
    if not isinstance(data_type, str) or data_type not in DATA_TYPES:
        raise UnsupportedFeatureError(f"zarr v3 data_type {data_type!r}", key=key,
                                      detail=f"shardscope reads {', '.join(DATA_TYPES)}")
    chunk_shape = _parse_chunk_grid(doc.get("chunk_grid"), len(shape), key)
    encoding = parse_chunk_key_encoding(doc.get("chunk_key_encoding"), key=key)
    if "fill_value" not in doc:
        raise MetadataError("fill_value is missing", key=key)
    fill_value = doc["fill_value"]
    parse_fill_value(fill_value, data_type, key=key)
    codecs = parse_codec_list(doc.get("codecs"), "codecs", key=key)
    if not codecs:
        raise MetadataError("codecs must list at least one codec (an array -> bytes codec)", key=key)
    _check_budget(chunk_shape, codecs, np.dtype(DATA_TYPES[data_type]).itemsize, key)
    transformers = doc.get("storage_transformers", [])
    if transformers is not None and not isinstance(transformers, list):
        raise MetadataError(f"storage_transformers must be a list, got {transformers!r}", key=key)
    if transformers:
        raise UnsupportedFeatureError(f"zarr v3 storage_transformers {transformers!r}", key=key,
                                      detail="no storage transformer is implemented")
    dimension_names = _parse_dimension_names(doc.get("dimension_names"), len(shape), key)
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict):
        raise MetadataError(f"attributes must be an object, got {attributes!r}", key=key)
    return ArrayMetadata(
        shape=shape,
        data_type=data_type,
        chunk_shape=chunk_shape,
        chunk_key_encoding=encoding,
        fill_value=fill_value,
        codecs=codecs,
        dimension_names=dimension_names,
        attributes=attributes,
    )


def _check_budget(chunk_shape: tuple[int, ...], codecs: tuple[CodecSpec, ...], itemsize: int, key: str) -> None:
    """One decoded chunk, and a shard's index, within the memory budget.

    With ``sharding_indexed`` the chunk grid's chunk is a shard, which may legitimately be far
    larger than memory: readers allocate one inner chunk at a time, plus the shard index
    (16 bytes per inner chunk), so those are what is checked.
    """
    inner = codecs[0].configuration.get("chunk_shape") if codecs[0].name == "sharding_indexed" else None
    if not (isinstance(inner, list) and len(inner) == len(chunk_shape) and all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in inner)):
        check_chunk_budget(chunk_shape, itemsize, field="chunk_grid chunk_shape", key=key)
        return  # (a malformed inner chunk_shape is reported by the sharding codec's parser)
    check_chunk_budget(inner, itemsize, field="sharding_indexed chunk_shape", key=key)
    per_shard = [-(-s // c) for s, c in zip(chunk_shape, inner, strict=True)]
    check_chunk_budget(per_shard, 16, field="shard index of chunks per shard", key=key)


def parse_group_metadata(data: bytes | Mapping[str, Any], *, key: str) -> GroupMetadata:
    """Parse a group ``zarr.json`` and collect the array paths it points at."""
    doc = load_json_object(data, key=key)
    _check_zarr_format(doc, key)
    if doc.get("node_type") != "group":
        raise MetadataError(f"node_type must be 'group', got {doc.get('node_type')!r}", key=key)
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict):
        raise MetadataError(f"attributes must be an object, got {attributes!r}", key=key)
    return GroupMetadata(
        attributes=attributes,
        multiscale_paths=_multiscale_paths(attributes, key),
        consolidated_array_paths=_consolidated_array_paths(doc.get("consolidated_metadata"), key),
        key=key,
    )


def parse_int_list(value: Any, name: str, *, key: str, minimum: int) -> tuple[int, ...]:
    """A JSON list of integers ``>= minimum`` (bools and floats rejected), as a tuple."""
    if not isinstance(value, list):
        raise MetadataError(f"{name} must be a list of integers, got {value!r}", key=key)
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > MAX_EXTENT:
            raise MetadataError(f"{name} must hold integers in [{minimum}, 2**63-1], got {v!r} in {value!r}", key=key)
    return tuple(value)


def parse_codec_list(value: Any, name: str, *, key: str) -> tuple[CodecSpec, ...]:
    """A ``codecs`` list: objects with ``name`` and optional ``configuration``, or bare names."""
    if not isinstance(value, list):
        raise MetadataError(f"{name} must be a list of codecs, got {value!r}", key=key)
    return tuple(parse_codec(item, name, key=key) for item in value)


def parse_codec(item: Any, name: str, *, key: str) -> CodecSpec:
    """One codec entry (``{"name": …, "configuration": {…}}`` or the short form ``"name"``)."""
    if isinstance(item, str):
        return CodecSpec(item)
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise MetadataError(f"{name} entry must be an object with a string 'name', got {item!r}", key=key)
    config = item.get("configuration", {})
    if not isinstance(config, dict):
        raise MetadataError(f"{name} entry {item['name']!r}: configuration must be an object, got {config!r}", key=key)
    return CodecSpec(item["name"], config)


def parse_chunk_key_encoding(value: Any, *, key: str) -> ChunkKeyEncoding:
    """The ``chunk_key_encoding`` object (``default`` or ``v2``, with an optional separator)."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict):
        raise MetadataError(f"chunk_key_encoding must be an object, got {value!r}", key=key)
    name = value.get("name")
    if name not in ("default", "v2"):
        raise MetadataError(f"chunk_key_encoding name must be 'default' or 'v2', got {name!r}", key=key)
    config = value.get("configuration", {})
    if not isinstance(config, dict):
        raise MetadataError(f"chunk_key_encoding configuration must be an object, got {config!r}", key=key)
    separator = config.get("separator", "/" if name == "default" else ".")
    if separator not in ("/", "."):
        raise MetadataError(f"chunk_key_encoding separator must be '/' or '.', got {separator!r}", key=key)
    return ChunkKeyEncoding(name, separator)


def parse_fill_value(value: Any, data_type: str, *, key: str | None = None) -> np.generic:
    """The numpy scalar a JSON ``fill_value`` denotes for ``data_type``.

    Accepts the spec's forms: ``true``/``false`` for bool, integers, numbers or ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"`` and ``"0x…"`` bit patterns for floats, ``[re, im]`` pairs
    for complex types.
    """
    if data_type not in DATA_TYPES:
        raise MetadataError(f"data_type {data_type!r} is not supported", key=key)
    dtype = np.dtype(DATA_TYPES[data_type])
    bad = MetadataError(f"fill_value {value!r} is not a valid {data_type} value", key=key)
    if dtype.kind == "b":
        if not isinstance(value, bool):
            raise bad
        return np.bool_(value)
    if dtype.kind in "iu":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise bad
        return dtype.type(value)  # type: ignore[no-any-return]
    if dtype.kind == "f":
        return _parse_float(value, dtype, bad)
    # complex: a pair of float values
    if not isinstance(value, list) or len(value) != 2:
        raise bad
    part = np.dtype(f"float{dtype.itemsize * 4}")
    re, im = (_parse_float(v, part, bad) for v in value)
    return dtype.type(complex(float(re), float(im)))  # type: ignore[no-any-return]


def _parse_float(value: Any, dtype: np.dtype[Any], bad: MetadataError) -> np.generic:
    specials = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
    if isinstance(value, str):
        if value in specials:
            return dtype.type(specials[value])  # type: ignore[no-any-return]
        if value.startswith("0x"):
            try:
                bits = int(value[2:], 16)
            except ValueError:
                raise bad from None
            if bits >= 2 ** (8 * dtype.itemsize):
                raise bad
            return np.frombuffer(bits.to_bytes(dtype.itemsize, "little"), dtype.newbyteorder("<"))[0]  # type: ignore[no-any-return]
        raise bad
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad
    try:
        return dtype.type(value)  # type: ignore[no-any-return]
    except OverflowError:
        raise bad from None


def _check_zarr_format(doc: Mapping[str, Any], key: str) -> None:
    if doc.get("zarr_format") != 3:
        raise MetadataError(f"zarr_format must be 3, got {doc.get('zarr_format')!r}", key=key)


def _parse_chunk_grid(value: Any, ndim: int, key: str) -> tuple[int, ...]:
    if not isinstance(value, dict):
        raise MetadataError(f"chunk_grid must be an object, got {value!r}", key=key)
    name = value.get("name")
    if not isinstance(name, str):
        raise MetadataError(f"chunk_grid name must be a string, got {name!r}", key=key)
    if name != "regular":
        raise UnsupportedFeatureError(f"zarr v3 chunk_grid {name!r}", key=key, detail="only 'regular' grids are read")
    config = value.get("configuration")
    if not isinstance(config, dict):
        raise MetadataError(f"chunk_grid configuration must be an object, got {config!r}", key=key)
    chunk_shape = parse_int_list(config.get("chunk_shape"), "chunk_grid chunk_shape", key=key, minimum=1)
    if len(chunk_shape) != ndim:
        raise MetadataError(
            f"chunk_grid chunk_shape {list(chunk_shape)} has {len(chunk_shape)} dimensions, shape has {ndim}",
            key=key,
        )
    return chunk_shape


def _parse_dimension_names(value: Any, ndim: int, key: str) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != ndim or not all(v is None or isinstance(v, str) for v in value):
        raise MetadataError(f"dimension_names must be {ndim} strings or nulls, got {value!r}", key=key)
    return tuple(value)


def _multiscale_paths(attributes: Mapping[str, Any], key: str) -> tuple[str, ...]:
    multiscales = ome_attributes(attributes).get("multiscales")
    if multiscales is None:
        return ()
    if not isinstance(multiscales, list) or not multiscales or not isinstance(multiscales[0], dict):
        raise MetadataError(f"multiscales must be a non-empty list of objects, got {multiscales!r}", key=key)
    datasets = multiscales[0].get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise MetadataError(f"multiscales datasets must be a non-empty list, got {datasets!r}", key=key)
    return tuple(
        dataset_path(ds.get("path") if isinstance(ds, dict) else ds, f"multiscales[0].datasets[{i}]", key=key)
        for i, ds in enumerate(datasets)
    )


def _consolidated_array_paths(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, dict) or not isinstance(value.get("metadata"), dict):
        return ()
    return tuple(
        sorted(
            path.strip("/")
            for path, node in value["metadata"].items()
            if isinstance(path, str) and isinstance(node, dict) and node.get("node_type") == "array"
        )
    )


def _to_plain(value: Any) -> Any:
    """A JSON-ready deep copy (mappings to dicts, tuples to lists)."""
    if isinstance(value, Mapping):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    return value


#: Room codecs may add over a chunk's raw bytes, per stored (inner) chunk and once per file.
CODEC_SLACK_BYTES = 1 << 10
FILE_SLACK_BYTES = 1 << 16


def max_chunk_file_bytes(meta: ArrayMetadata) -> int:
    """Most bytes a stored chunk file (or shard file) of the array can take by the spec.

    Twice the raw bytes (compressors add well under 1%), plus per inner chunk its 16-byte index
    entry and some framing. Checked before a file is read whole, by validation and before
    TensorStore reads a local array, so a sparse terabyte file costs a ``stat``, not an allocation.
    """
    raw = math.prod(meta.chunk_shape) * meta.dtype.itemsize
    inner = 1
    for codec in meta.codecs:
        shape = codec.configuration.get("chunk_shape") if codec.name == "sharding_indexed" else None
        if isinstance(shape, Sequence) and len(shape) == len(meta.chunk_shape) \
                and all(isinstance(c, int) and c > 0 for c in shape):
            inner = math.prod(-(-s // c) for s, c in zip(meta.chunk_shape, shape, strict=True))
    return 2 * raw + inner * (16 + CODEC_SLACK_BYTES) + FILE_SLACK_BYTES
