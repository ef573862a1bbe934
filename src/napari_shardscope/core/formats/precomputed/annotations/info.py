"""The ``info`` of a precomputed annotation collection (``"@type": "neuroglancer_annotations_v1"``).

Parsed strictly, like a volume ``info``: a wrong member is a :class:`MetadataError` naming its JSON
path and value. What the spec (Neuroglancer's :file:`annotation.rst` and its JSON schema) requires:

* ``dimensions`` (``{name: [scale, unit]}``, the rank is their number), ``lower_bound`` and
  ``upper_bound`` (``rank`` finite numbers; the lower bound is the origin of every spatial grid). An
  upper bound below the lower one is read (the ``neuroglancer`` wheel's writer puts the largest radius
  there for ellipsoids, and Neuroglancer shows such a collection) and reported by ``validate``;
* ``annotation_type``: ``POINT``, ``LINE``, ``AXIS_ALIGNED_BOUNDING_BOX``, ``ELLIPSOID`` or ``POLYLINE``
  (any case, as Neuroglancer reads it; written upper-case, as CloudVolume requires);
* ``properties`` (:mod:`.schema`), ``relationships`` (``id``, ``key``, optional ``sharding``),
  ``by_id`` (``key``, optional ``sharding``) and ``spatial`` levels, coarse to fine (``key``,
  ``grid_shape``, ``chunk_size``, ``limit``, optional ``sharding``).

Each index ``key`` is a path relative to the ``info``'s directory; the spec allows ``..``
components, and a key is accepted when it stays inside the dataset once normalised (a key leaving it
is an :class:`UnsafeMetadataPathError`, so no reader is led out of the dataset). Two indexes may not
share a directory: their files would be indistinguishable. Absent ``properties``, ``relationships``
and ``spatial`` read as empty (as the ``neuroglancer`` wheel's reader does); ``by_id`` is required,
as Neuroglancer requires it.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from napari_shardscope.core.bytestore.containment import key_problem
from napari_shardscope.core.errors import MetadataError, UnsafeMetadataPathError
from napari_shardscope.core.formats.precomputed.annotations.schema import MAX_RELATIONSHIPS as _MAX_RELATIONSHIPS
from napari_shardscope.core.formats.precomputed.annotations.schema import (
    AnnotationSchema,
    parse_annotation_type,
    parse_dimensions,
    parse_properties,
)
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.json_document import load_json_object

ANNOTATION_INFO_TYPE = "neuroglancer_annotations_v1"
#: Most spatial index levels accepted (each level at least halves a chunk dimension: 64 halvings of a
#: float32 extent reach its resolution long before).
MAX_SPATIAL_LEVELS = 64


@dataclass(frozen=True)
class IndexLocation:
    """Where an id-keyed index lives: the ``by_id`` index, or one relationship's (``id`` names it)."""

    key: str
    sharding: ShardingSpec | None = None
    id: str | None = None  # the relationship id; None for by_id

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.id is None else {"id": self.id}
        out["key"] = self.key
        if self.sharding is not None:
            out["sharding"] = self.sharding.to_json()
        return out


@dataclass(frozen=True)
class SpatialLevel:
    """One level of the spatial index: a grid of ``grid_shape`` cells of ``chunk_size`` from ``lower_bound``."""

    key: str
    grid_shape: tuple[int, ...]
    chunk_size: tuple[float, ...]
    limit: int
    sharding: ShardingSpec | None = None

    @property
    def num_cells(self) -> int:
        return math.prod(self.grid_shape)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "grid_shape": list(self.grid_shape),
            "chunk_size": list(self.chunk_size),
            "limit": self.limit,
        }
        if self.sharding is not None:
            out["sharding"] = self.sharding.to_json()
        return out


@dataclass(frozen=True)
class AnnotationInfo:
    """A parsed annotation ``info``: the :class:`AnnotationSchema` and where its indexes are."""

    schema: AnnotationSchema
    lower_bound: tuple[float, ...]
    upper_bound: tuple[float, ...]
    by_id: IndexLocation
    relationships: tuple[IndexLocation, ...] = ()
    spatial: tuple[SpatialLevel, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def rank(self) -> int:
        return self.schema.rank

    def relationship(self, name: str) -> IndexLocation:
        """The index of relationship ``name`` (ArgumentError naming the relationships otherwise)."""
        return self.relationships[self.schema.relationship_index(name)]

    def to_json(self) -> dict[str, Any]:
        """The ``info`` document (members in the spec's order; the type upper-case as CloudVolume needs)."""
        return {
            "@type": ANNOTATION_INFO_TYPE,
            "dimensions": self.schema.dimensions_json(),
            "lower_bound": list(self.lower_bound),
            "upper_bound": list(self.upper_bound),
            "annotation_type": self.schema.annotation_type.upper(),
            "properties": [p.to_json() for p in self.schema.properties],
            "relationships": [r.to_json() for r in self.relationships],
            "by_id": self.by_id.to_json(),
            "spatial": [s.to_json() for s in self.spatial],
        }


def is_annotation_info(doc: Mapping[str, Any]) -> bool:
    return doc.get("@type") == ANNOTATION_INFO_TYPE


def parse_annotation_info(data: bytes | str | Mapping[str, Any], *, key: str = "info") -> AnnotationInfo:
    """Parse and check an annotation ``info`` (bytes, text or an already decoded object).

    Raises
    ------
    MetadataError
        For JSON that is not an object, a wrong ``@type`` or any member that breaks the spec (its
        JSON path and value in the message).
    UnsafeMetadataPathError
        For an index ``key`` that leads outside the dataset.
    """
    obj = load_json_object(data, key=key)
    if obj.get("@type") != ANNOTATION_INFO_TYPE:
        raise MetadataError(f'"@type" must be "{ANNOTATION_INFO_TYPE}", got {obj.get("@type")!r}', key=key)
    dimensions = parse_dimensions(obj.get("dimensions"), key=key)
    rank = len(dimensions)
    lower = _vector(obj.get("lower_bound"), rank, "lower_bound", key=key)
    upper = _vector(obj.get("upper_bound"), rank, "upper_bound", key=key)
    annotation_type = parse_annotation_type(obj.get("annotation_type"), key=key)
    properties = parse_properties(obj.get("properties"), key=key)

    by_id_obj = obj.get("by_id")
    if not isinstance(by_id_obj, Mapping):
        raise MetadataError(f"by_id must be a JSON object with a key, got {by_id_obj!r}", key=key)
    by_id = IndexLocation(_index_key(by_id_obj.get("key"), "by_id.key", key=key),
                          _sharding(by_id_obj.get("sharding"), "by_id.sharding", key=key))

    rels_obj = obj.get("relationships")
    rels_obj = [] if rels_obj is None else rels_obj
    if not isinstance(rels_obj, list):
        raise MetadataError(f"relationships must be a list, got {type(rels_obj).__name__}", key=key)
    if len(rels_obj) > _MAX_RELATIONSHIPS:
        raise MetadataError(f"relationships has {len(rels_obj)} entries, more than {_MAX_RELATIONSHIPS}", key=key)
    relationships = []
    for i, rel in enumerate(rels_obj):
        where = f"relationships[{i}]"
        if not isinstance(rel, Mapping) or not isinstance(rel.get("id"), str) or not rel["id"]:
            raise MetadataError(f"{where} must be a JSON object with a non-empty string id, got {rel!r}", key=key)
        relationships.append(IndexLocation(_index_key(rel.get("key"), f"{where}.key", key=key),
                                           _sharding(rel.get("sharding"), f"{where}.sharding", key=key), rel["id"]))
    names = [r.id for r in relationships]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise MetadataError(f"relationships: id {dup!r} appears more than once", key=key)

    spatial_obj = obj.get("spatial")
    spatial_obj = [] if spatial_obj is None else spatial_obj
    if not isinstance(spatial_obj, list):
        raise MetadataError(f"spatial must be a list, got {type(spatial_obj).__name__}", key=key)
    if len(spatial_obj) > MAX_SPATIAL_LEVELS:
        raise MetadataError(f"spatial has {len(spatial_obj)} levels, more than {MAX_SPATIAL_LEVELS}", key=key)
    spatial = tuple(_spatial_level(level, i, rank, key=key) for i, level in enumerate(spatial_obj))

    keys = [by_id.key, *(r.key for r in relationships), *(s.key for s in spatial)]
    shared = next((k for k in keys if keys.count(k) > 1), None)
    if shared is not None:
        raise MetadataError(f"two indexes share the directory {shared!r}: their files could not be told apart",
                            key=key)
    schema = AnnotationSchema(annotation_type, dimensions, properties, tuple(r.id or "" for r in relationships))
    return AnnotationInfo(schema, lower, upper, by_id, tuple(relationships), spatial, obj)


def _vector(value: object, rank: int, where: str, *, key: str) -> tuple[float, ...]:
    if (not isinstance(value, list) or len(value) != rank
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise MetadataError(f"{where} must be a list of {rank} finite numbers, got {value!r}", key=key)
    return tuple(float(v) for v in value)


def normalise_key(value: str) -> str | None:
    """An index key with ``.`` and ``..`` components resolved, ``None`` when it leaves the dataset."""
    if value.startswith("/") or "\\" in value or "\x00" in value:
        return None
    norm = posixpath.normpath(value)
    if norm in (".", "") or norm == ".." or norm.startswith("../"):
        return None
    return norm


def _index_key(value: object, where: str, *, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise MetadataError(f"{where} must be a non-empty string, got {value!r}", key=key)
    norm = normalise_key(value)
    if norm is None or key_problem(norm) is not None:
        raise UnsafeMetadataPathError(f"{where} {value!r} leads outside the dataset: it must be a directory inside it",
                                      key=key)
    return norm


def _sharding(value: object, where: str, *, key: str) -> ShardingSpec | None:
    return None if value is None else parse_sharding_spec(value, key=key, where=where)


def _spatial_level(obj: object, index: int, rank: int, *, key: str) -> SpatialLevel:
    where = f"spatial[{index}]"
    if not isinstance(obj, Mapping):
        raise MetadataError(f"{where} must be a JSON object, got {obj!r}", key=key)
    grid = obj.get("grid_shape")
    if (not isinstance(grid, list) or len(grid) != rank
            or not all(isinstance(g, int) and not isinstance(g, bool) and 1 <= g < 1 << 62 for g in grid)):
        raise MetadataError(f"{where}.grid_shape must be {rank} positive integers, got {grid!r}", key=key)
    size = obj.get("chunk_size")
    if (not isinstance(size, list) or len(size) != rank
            or not all(isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c) and c > 0
                       for c in size)):
        raise MetadataError(f"{where}.chunk_size must be {rank} positive numbers, got {size!r}", key=key)
    limit = obj.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise MetadataError(f"{where}.limit must be a positive integer, got {limit!r}", key=key)
    sharding = _sharding(obj.get("sharding"), f"{where}.sharding", key=key)
    if sharding is not None and sum(bits_per_dimension(grid)) > 64:
        raise MetadataError(f"{where}: a sharded level's cells are keyed by compressed Morton code, and grid_shape "
                            f"{grid} needs more than 64 bits", key=key)
    return SpatialLevel(_index_key(obj.get("key"), f"{where}.key", key=key), tuple(grid),
                        tuple(float(c) for c in size), limit, sharding)

