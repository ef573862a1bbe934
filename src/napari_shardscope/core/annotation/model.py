"""Point annotations (DVID's ``annotation`` elements) and the codec of their versioned records.

An annotation is a point in the bound labelmap's scale-0 voxel space (z, y, x) with a kind
(``pre`` / ``post`` synaptic sites, or a generic ``point``), tags, typed properties and
relationships to other annotations. Relationships are stored on *both* ends, as DVID does
(``PreSynTo`` on the pre site, ``PostSynTo`` on the post site), so reading one annotation tells
all its partners, and deleting one rewrites only its partners' records.

The stored record adds one derived field, the supervoxel under the point when the record was
written. Supervoxel ids are never reused and a supervoxel's voxels never change while it exists
(a split retires it and makes two new ids), so "the recorded supervoxel exists at this version"
proves the point lies in it: a query by body maps recorded supervoxels through the version's body
map and reads voxels only for records whose supervoxel a later split retired.

Record wire format (little-endian): u8 format (1), u8 kind, i64 z, y, x, u64 supervoxel, u32 length
of a JSON tail (``{"tags": [...], "props": {...}, "rels": [[rel, id], ...]}``, empty members
left out; length 0 when all are empty), then the tail.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from napari_shardscope.core.annotation.errors import AnnotationArgumentError, AnnotationRecordError
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.json_document import load_json

Kind = Literal["pre", "post", "point"]
KINDS: tuple[str, ...] = ("pre", "post", "point")
Relation = Literal["PreSynTo", "PostSynTo", "ConvergentTo", "GroupedWith"]
#: Each relation and what the other end stores (DVID's relationship names).
INVERSE: dict[str, str] = {"PreSynTo": "PostSynTo", "PostSynTo": "PreSynTo", "ConvergentTo": "ConvergentTo",
                           "GroupedWith": "GroupedWith"}
PropertyValue = str | int | float | bool
MAX_ID = 2**64 - 1
#: Limits that keep one record small (a record is read whole by every query that touches it).
MAX_TAGS = 64
MAX_TAG_BYTES = 256
MAX_PROPERTIES = 64
MAX_RELATIONSHIPS = 4096
MAX_TAIL = 1 << 20
Point = tuple[int, int, int]

_HEAD = struct.Struct("<BB3qQI")
_FORMAT = 1


@dataclass(frozen=True)
class Relationship:
    """A directed link from the annotation holding it to annotation ``to`` (``rel``: DVID's name)."""

    rel: str
    to: int


@dataclass(frozen=True)
class Annotation:
    """One point annotation at a version.

    Attributes
    ----------
    id
        Unique in the instance (uint64, > 0), chosen by the caller or handed out by the instance.
    kind
        ``"pre"``, ``"post"`` (synaptic sites) or ``"point"``.
    point
        (z, y, x) voxel of the bound labelmap's scale 0.
    tags
        Sorted, distinct labels (no NUL character).
    properties
        Name → str, int, float or bool.
    relationships
        Sorted links to other annotations (stored on both ends).
    """

    id: int
    kind: str
    point: Point
    tags: tuple[str, ...] = ()
    properties: Mapping[str, PropertyValue] = field(default_factory=dict, hash=False)
    relationships: tuple[Relationship, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "point": list(self.point), "tags": list(self.tags),
                "properties": dict(self.properties),
                "relationships": [{"rel": r.rel, "to": r.to} for r in self.relationships]}


@dataclass(frozen=True)
class Stored:
    """A record as stored: the annotation and the supervoxel under its point when it was written."""

    annotation: Annotation
    supervoxel: int

    def with_annotation(self, a: Annotation) -> Stored:
        return replace(self, annotation=a)


def check_id(value: object, what: str = "annotation id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
        raise AnnotationArgumentError(f"{what} must be an integer in 1..2**64-1, got {value!r}")
    return value


def check_kind(value: object) -> str:
    if value not in KINDS:
        raise AnnotationArgumentError(f"annotation kind must be one of {', '.join(KINDS)}, got {value!r}")
    return str(value)


def check_point(value: object, shape: tuple[int, int, int]) -> Point:
    """A (z, y, x) voxel inside ``shape`` (the labelmap's scale 0): a point's body is read there."""
    try:
        items = list(value)  # type: ignore[call-overload]
    except TypeError:
        items = []
    if len(items) != 3 or any(isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) for v in items):
        raise AnnotationArgumentError(f"a point is three integer voxel coordinates (z, y, x), got {value!r}")
    z, y, x = (int(v) for v in items)
    if not all(0 <= c < s for c, s in zip((z, y, x), shape, strict=True)):
        raise AnnotationArgumentError(f"point {(z, y, x)} is outside the labelmap's scale-0 shape {shape} (z, y, x)")
    return z, y, x


def check_tags(tags: Iterable[str]) -> tuple[str, ...]:
    if isinstance(tags, str):
        raise AnnotationArgumentError("tags must be a collection of strings, not one string")
    out = set()
    for t in tags:
        if not isinstance(t, str) or not t or "\x00" in t or len(t.encode("utf-8")) > MAX_TAG_BYTES:
            raise AnnotationArgumentError(f"a tag is a non-empty string of at most {MAX_TAG_BYTES} UTF-8 bytes "
                                          f"without NUL, got {t!r}")
        out.add(t)
    if len(out) > MAX_TAGS:
        raise AnnotationArgumentError(f"at most {MAX_TAGS} tags per annotation, got {len(out)}")
    return tuple(sorted(out))


def check_properties(props: Mapping[str, Any]) -> dict[str, PropertyValue]:
    if not isinstance(props, Mapping):
        raise AnnotationArgumentError(f"properties must be a mapping of names to values, got {type(props).__name__}")
    if len(props) > MAX_PROPERTIES:
        raise AnnotationArgumentError(f"at most {MAX_PROPERTIES} properties per annotation, got {len(props)}")
    out: dict[str, PropertyValue] = {}
    for k, v in props.items():
        if not isinstance(k, str) or not k:
            raise AnnotationArgumentError(f"property names are non-empty strings, got {k!r}")
        if not isinstance(v, str | int | float | bool) or (isinstance(v, float) and not math.isfinite(v)):
            raise AnnotationArgumentError(f"property {k!r}: values are str, int, finite float or bool, got {v!r}")
        out[k] = v
    return dict(sorted(out.items()))


def check_relation(rel: object) -> str:
    if rel not in INVERSE:
        raise AnnotationArgumentError(f"relationship must be one of {', '.join(INVERSE)}, got {rel!r}")
    return str(rel)


def make_annotation(aid: int, kind: str, point: Point, tags: Iterable[str] = (),
                    properties: Mapping[str, Any] | None = None,
                    relationships: Iterable[Relationship] = ()) -> Annotation:
    rels = tuple(sorted(set(relationships), key=lambda r: (r.to, r.rel)))
    if len(rels) > MAX_RELATIONSHIPS:
        raise AnnotationArgumentError(f"annotation {aid}: at most {MAX_RELATIONSHIPS} relationships")
    return Annotation(aid, kind, point, check_tags(tags), check_properties(properties or {}), rels)


def encode_record(s: Stored) -> bytes:
    a = s.annotation
    tail: dict[str, Any] = {}
    if a.tags:
        tail["tags"] = list(a.tags)
    if a.properties:
        tail["props"] = dict(a.properties)
    if a.relationships:
        tail["rels"] = [[r.rel, r.to] for r in a.relationships]
    text = json.dumps(tail, separators=(",", ":"), sort_keys=True).encode() if tail else b""
    return _HEAD.pack(_FORMAT, KINDS.index(a.kind), *a.point, s.supervoxel, len(text)) + text


def _record_head(raw: bytes, *, key: str) -> tuple[int, int, int, int, int, int]:
    """``(kind, z, y, x, supervoxel, tail length)`` of a stored record's fixed head, checked against its size."""
    if len(raw) < _HEAD.size:
        raise AnnotationRecordError(f"annotation record of {len(raw)} bytes is truncated", key=key, offset=len(raw))
    fmt, kind, z, y, x, sv, n = _HEAD.unpack_from(raw, 0)
    if fmt != _FORMAT or kind >= len(KINDS):
        raise AnnotationRecordError(f"unknown record format {fmt} or kind {kind}", key=key, offset=0)
    if n > MAX_TAIL or _HEAD.size + n != len(raw):
        raise AnnotationRecordError(f"record tail says {n} bytes, {len(raw) - _HEAD.size} follow", key=key,
                                    offset=_HEAD.size - 4)
    return kind, z, y, x, sv, n


def record_point(raw: bytes, *, key: str) -> Point:
    """The point of a stored record, read from its fixed head: the checks of :func:`decode_record`
    but the tail's (its JSON is not parsed), for queries that drop most records by their point."""
    _kind, z, y, x, _sv, _n = _record_head(raw, key=key)
    return (z, y, x)


def decode_record(aid: int, raw: bytes, *, key: str) -> Stored:
    """Inverse of :func:`encode_record`; anything malformed raises :class:`AnnotationRecordError`."""
    kind, z, y, x, sv, n = _record_head(raw, key=key)
    tail: dict[str, Any] = {}
    if n:
        try:
            tail = load_json(raw[_HEAD.size:], key=key, max_depth=4)
            if not isinstance(tail, dict):
                raise ValueError("not an object")
            rels = [Relationship(check_relation(r), check_id(t)) for r, t in tail.get("rels", [])]
            a = make_annotation(aid, KINDS[kind], (z, y, x), tail.get("tags", []), tail.get("props", {}), rels)
        except (ValueError, TypeError, AnnotationArgumentError, MetadataError) as exc:
            raise AnnotationRecordError(f"malformed record tail ({exc})", key=key, offset=_HEAD.size) from exc
    else:
        a = Annotation(aid, KINDS[kind], (z, y, x))
    return Stored(a, int(sv))
