"""What every annotation of a collection has: geometry type, coordinate space, properties, relationships.

The part of a ``neuroglancer_annotations_v1`` ``info`` that fixes the *encoding* of one annotation
(Neuroglancer's "precomputed annotation format", :file:`annotation.rst`), separate from where the
indexes are stored (:mod:`.info`): an :class:`~.table.Annotations` batch carries its schema, so a
batch read from one source can be written to another, and the writer needs nothing else.

The binary record of one annotation (the spec's "single annotation encoding" minus the relationship
lists, shared with the "multiple annotation encoding") is, in this order:

* the geometry as float32le: a point's position (``rank`` values); a line's, box's or ellipsoid's two
  vectors (``2 * rank``); a polyline's point count as uint32le, then its points;
* the properties grouped by alignment — every 4-byte type (``uint32``, ``int32``, ``float32``) in
  ``info`` order, then the 2-byte ones, then the 1-byte ones (``uint8``, ``int8``, ``rgb``, ``rgba``) —
  which is the stable sort by alignment Neuroglancer's own serializer does, so no padding is needed
  between them;
* zero padding up to a multiple of 4 bytes.

:class:`RecordLayout` turns that into a numpy structured dtype, so a chunk of ``n`` annotations is
viewed (not parsed) in one call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, cast

import numpy as np

from napari_shardscope.core.errors import ArgumentError, MetadataError

AnnotationType = Literal["point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline"]
#: Every geometry type of the spec, in its order (``polyline`` is the newest).
ANNOTATION_TYPES: tuple[AnnotationType, ...] = ("point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline")
#: Types whose geometry is two ``rank``-vectors (endpoints, corners, or centre and radii).
TWO_VECTOR_TYPES = ("line", "axis_aligned_bounding_box", "ellipsoid")

PropertyType = Literal["uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "rgb", "rgba"]
#: ``type`` → (numpy dtype of one component, components, alignment in the record).
PROPERTY_TYPES: dict[str, tuple[str, int, int]] = {
    "uint32": ("<u4", 1, 4),
    "int32": ("<i4", 1, 4),
    "float32": ("<f4", 1, 4),
    "uint16": ("<u2", 1, 2),
    "int16": ("<i2", 1, 2),
    "uint8": ("u1", 1, 1),
    "int8": ("i1", 1, 1),
    "rgb": ("u1", 3, 1),
    "rgba": ("u1", 4, 1),
}
#: A property id, as the spec (and Neuroglancer's parser) requires.
PROPERTY_ID = re.compile(r"^[a-z][a-zA-Z0-9_]*$")

#: Bounds that keep one record, and the arrays made from a chunk, proportionate to the bytes read.
MAX_RANK = 32
MAX_PROPERTIES = 1024
MAX_RELATIONSHIPS = 1024
MAX_ENUM_VALUES = 1 << 16


@dataclass(frozen=True)
class Dimension:
    """One named dimension of the annotations' coordinate space: ``[scale, unit]`` in ``info``."""

    name: str
    scale: float
    unit: str

    def to_json(self) -> list[Any]:
        return [self.scale, self.unit]


@dataclass(frozen=True)
class PropertySpec:
    """One entry of ``info["properties"]``."""

    id: str
    type: PropertyType
    description: str | None = None
    enum_values: tuple[float, ...] | None = None
    enum_labels: tuple[str, ...] | None = None

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of one component (``uint8`` for ``rgb``/``rgba``)."""
        return np.dtype(PROPERTY_TYPES[self.type][0])

    @property
    def components(self) -> int:
        """Values per annotation: 3 for ``rgb``, 4 for ``rgba``, else 1."""
        return PROPERTY_TYPES[self.type][1]

    @property
    def alignment(self) -> int:
        return PROPERTY_TYPES[self.type][2]

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * self.components

    def label_of(self, value: float) -> str | None:
        """The enum label of ``value`` (``None`` when not an enum value)."""
        if self.enum_values is None or self.enum_labels is None:
            return None
        for v, label in zip(self.enum_values, self.enum_labels, strict=True):
            if v == value:
                return label
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.description is not None:
            out["description"] = self.description
        if self.enum_values is not None and self.enum_labels is not None:
            numeric = [int(v) if self.type != "float32" else float(v) for v in self.enum_values]
            out["enum_values"] = numeric
            out["enum_labels"] = list(self.enum_labels)
        return out


@dataclass(frozen=True)
class RecordLayout:
    """Where the geometry and each property sit in one annotation's record.

    Attributes
    ----------
    geometry_values
        float32 values of a fixed-size geometry (``rank`` or ``2 * rank``); ``0`` for polylines.
    properties
        The numpy structured dtype of the property block (``itemsize`` padded to 4), with one field per
        property named by its id; for a fixed geometry the block follows the geometry.
    dtype
        For fixed-size geometry, the whole record: field ``"geometry"`` then the property fields
        (each at its record offset); ``None`` for polylines, whose records vary in length.
    """

    geometry_values: int
    properties: np.dtype[Any]
    dtype: np.dtype[Any] | None

    @property
    def property_bytes(self) -> int:
        return int(self.properties.itemsize)

    @property
    def record_bytes(self) -> int | None:
        """Bytes of one fixed-size record, ``None`` for polylines."""
        return None if self.dtype is None else int(self.dtype.itemsize)


#: Reserved name of the geometry field in a record dtype (property ids must start lowercase, so
#: they never collide with a name that starts with an underscore).
GEOMETRY_FIELD = "_geometry"


def property_order(properties: Sequence[PropertySpec]) -> list[int]:
    """Indices of ``properties`` in encoding order: stable by alignment, 4-byte types first."""
    return sorted(range(len(properties)), key=lambda i: -properties[i].alignment)


def make_record_layout(annotation_type: AnnotationType, rank: int, properties: Sequence[PropertySpec]) -> RecordLayout:
    """The :class:`RecordLayout` of a collection (see the module docstring for the order)."""
    names: list[str] = []
    formats: list[Any] = []
    offsets: list[int] = []
    pos = 0
    for i in property_order(properties):
        p = properties[i]
        names.append(p.id)
        formats.append((p.dtype.str, (p.components,)) if p.components > 1 else p.dtype.str)
        offsets.append(pos)
        pos += p.nbytes
    size = (pos + 3) // 4 * 4
    block: np.dtype[Any] = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
    if annotation_type == "polyline":
        return RecordLayout(0, block, None)
    values = rank if annotation_type == "point" else 2 * rank
    geometry_bytes = 4 * values
    record: np.dtype[Any] = np.dtype({
        "names": [GEOMETRY_FIELD, *names],
        "formats": [("<f4", (values,)), *formats],
        "offsets": [0, *(geometry_bytes + o for o in offsets)],
        "itemsize": geometry_bytes + size,
    })
    return RecordLayout(values, block, record)


@dataclass(frozen=True)
class AnnotationSchema:
    """Geometry type, coordinate space, properties and relationship names of a collection.

    Everything that fixes how one annotation is encoded; :class:`~.info.AnnotationInfo` adds where
    the indexes are. Relationship names are the ``id`` members of ``info["relationships"]``, in order
    (the order of the related-id lists in the single annotation encoding).
    """

    annotation_type: AnnotationType
    dimensions: tuple[Dimension, ...]
    properties: tuple[PropertySpec, ...] = ()
    relationships: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.annotation_type not in ANNOTATION_TYPES:
            raise ArgumentError(f"annotation_type must be one of {list(ANNOTATION_TYPES)}, "
                                f"got {self.annotation_type!r}")
        if not 1 <= len(self.dimensions) <= MAX_RANK:
            raise ArgumentError(f"an annotation collection has 1 to {MAX_RANK} dimensions, got {len(self.dimensions)}")
        ids = [p.id for p in self.properties]
        if len(set(ids)) != len(ids):
            raise ArgumentError(f"property ids must be unique, got {ids}")
        if len(set(self.relationships)) != len(self.relationships):
            raise ArgumentError(f"relationship ids must be unique, got {list(self.relationships)}")

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    @property
    def dimension_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @cached_property
    def layout(self) -> RecordLayout:
        return make_record_layout(self.annotation_type, self.rank, self.properties)

    @property
    def geometry_values(self) -> int:
        """float32 values of one fixed-size geometry (``rank`` or ``2 * rank``); 0 for polylines."""
        return self.layout.geometry_values

    def in_encoding_order(self) -> AnnotationSchema:
        """The same schema with its properties listed in encoding order (4-byte types, 2-byte, 1-byte).

        Neuroglancer sorts the properties itself, but the ``neuroglancer`` wheel's and CloudVolume's
        readers take the ``info`` order as the encoding order: an ``info`` listed this way reads the
        same in all of them. The encoding is unchanged (it is the same stable sort).
        """
        ordered = tuple(self.properties[i] for i in property_order(self.properties))
        if ordered == self.properties:
            return self
        return AnnotationSchema(self.annotation_type, self.dimensions, ordered, self.relationships)

    def property_spec(self, property_id: str) -> PropertySpec:
        for p in self.properties:
            if p.id == property_id:
                return p
        raise ArgumentError(f"no property {property_id!r}; this collection has {[p.id for p in self.properties]}")

    def relationship_index(self, relationship: str) -> int:
        try:
            return self.relationships.index(relationship)
        except ValueError:
            raise ArgumentError(f"no relationship {relationship!r}; this collection has "
                                f"{list(self.relationships)}") from None

    def dimensions_json(self) -> dict[str, list[Any]]:
        return {d.name: d.to_json() for d in self.dimensions}


# -- parsing the schema's members of an info -----------------------------------------------------------------
def parse_annotation_type(value: object, *, key: str) -> AnnotationType:
    """``annotation_type``, case-insensitive as Neuroglancer reads it (``"POINT"`` or ``"point"``)."""
    if isinstance(value, str) and value.lower() in ANNOTATION_TYPES:
        return cast(AnnotationType, value.lower())
    raise MetadataError(f"annotation_type must be one of {[t.upper() for t in ANNOTATION_TYPES]}, got {value!r}",
                        key=key)


def parse_dimensions(value: object, *, key: str) -> tuple[Dimension, ...]:
    """``dimensions``: ``{name: [scale, unit]}`` in document order (the order is the axis order)."""
    if not isinstance(value, Mapping) or not value:
        raise MetadataError(f"dimensions must be a non-empty JSON object, got {value!r}", key=key)
    if len(value) > MAX_RANK:
        raise MetadataError(f"dimensions has {len(value)} members, more than the {MAX_RANK} supported", key=key)
    out = []
    for name, entry in value.items():
        if (not isinstance(entry, list) or len(entry) != 2 or not _is_number(entry[0])
                or not isinstance(entry[1], str) or not math.isfinite(entry[0]) or entry[0] <= 0):
            raise MetadataError(f"dimensions[{name!r}] must be [positive scale, unit string], got {entry!r}", key=key)
        out.append(Dimension(str(name), float(entry[0]), entry[1]))
    return tuple(out)


def parse_properties(value: object, *, key: str) -> tuple[PropertySpec, ...]:
    """``properties`` (absent: none), each checked as the spec says."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MetadataError(f"properties must be a list, got {type(value).__name__}", key=key)
    if len(value) > MAX_PROPERTIES:
        raise MetadataError(f"properties has {len(value)} entries, more than the {MAX_PROPERTIES} supported", key=key)
    out = [parse_property(p, i, key=key) for i, p in enumerate(value)]
    ids = [p.id for p in out]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise MetadataError(f"properties: id {dup!r} appears more than once", key=key)
    return tuple(out)


def parse_property(obj: object, index: int, *, key: str) -> PropertySpec:
    where = f"properties[{index}]"
    if not isinstance(obj, Mapping):
        raise MetadataError(f"{where} must be a JSON object, got {obj!r}", key=key)
    pid = obj.get("id")
    if not isinstance(pid, str) or PROPERTY_ID.match(pid) is None:
        raise MetadataError(f"{where}.id must match {PROPERTY_ID.pattern}, got {pid!r}", key=key)
    ptype = obj.get("type")
    if ptype not in PROPERTY_TYPES:
        raise MetadataError(f"{where}.type must be one of {list(PROPERTY_TYPES)}, got {ptype!r}", key=key)
    description = obj.get("description")
    if description is not None and not isinstance(description, str):
        raise MetadataError(f"{where}.description must be a string, got {description!r}", key=key)
    values, labels = obj.get("enum_values"), obj.get("enum_labels")
    if (values is None) != (labels is None):
        raise MetadataError(f"{where}: enum_values and enum_labels go together (one is missing)", key=key)
    enum_values: tuple[float, ...] | None = None
    enum_labels: tuple[str, ...] | None = None
    if values is not None:
        if ptype in ("rgb", "rgba"):
            raise MetadataError(f"{where}: enum_values apply to numeric properties, not {ptype}", key=key)
        if not isinstance(values, list) or not isinstance(labels, list) or len(values) != len(labels):
            raise MetadataError(f"{where}: enum_values and enum_labels must be lists of one length", key=key)
        if len(values) > MAX_ENUM_VALUES:
            raise MetadataError(f"{where}: {len(values)} enum values, more than {MAX_ENUM_VALUES}", key=key)
        spec_dtype = np.dtype(PROPERTY_TYPES[cast(str, ptype)][0])
        for j, v in enumerate(values):
            if not _fits(v, spec_dtype):
                raise MetadataError(f"{where}.enum_values[{j}] {v!r} is not a {ptype} value", key=key)
        if not all(isinstance(label, str) for label in labels):
            raise MetadataError(f"{where}.enum_labels must be strings", key=key)
        enum_values = tuple(float(v) if ptype == "float32" else int(v) for v in values)
        enum_labels = tuple(labels)
    return PropertySpec(pid, cast(PropertyType, ptype), description, enum_values, enum_labels)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fits(value: object, dtype: np.dtype[Any]) -> bool:
    """Whether a JSON number is a value of ``dtype`` (an integer in range, or any finite float for float32)."""
    if not _is_number(value):
        return False
    number = cast(float, value)
    if dtype.kind == "f":
        return math.isfinite(number)
    if isinstance(number, float) and not number.is_integer():
        return False
    info = np.iinfo(dtype)
    return info.min <= int(number) <= info.max
