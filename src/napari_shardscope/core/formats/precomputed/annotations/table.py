"""A batch of annotations as columns: ids, geometry, properties and relationships as numpy arrays.

Why columns, not one object per annotation: a synapse table has 10⁷–10⁸ rows, and every consumer —
the encoders, the spatial index builder, an import from a CSV or Parquet table, the connectivity of a
version — works on whole columns. A chunk of the multiple-annotation encoding decodes into this shape
with one structured-array view, and the writer encodes from it the same way.

Geometry is float32, one row per annotation: a point's ``rank`` coordinates, or a line's, box's or
ellipsoid's two ``rank``-vectors side by side (``point_a`` then ``point_b``; ``center`` then
``radii``), in the order of the schema's dimensions. Polylines have a variable number of points: their
points are rows of ``geometry`` (``rank`` columns) and ``point_offsets[i]:point_offsets[i + 1]`` are
annotation ``i``'s. Related ids are CSR lists (:class:`Related`); ``relationships`` is ``None`` for a
batch read from an index that does not store them (the spatial and relationship indexes).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.annotations.schema import TWO_VECTOR_TYPES, AnnotationSchema

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class Related:
    """One relationship's related ids: annotation ``i``'s are ``values[offsets[i]:offsets[i + 1]]``."""

    offsets: I64
    values: U64

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def of(self, i: int) -> U64:
        return self.values[int(self.offsets[i]): int(self.offsets[i + 1])]

    @cached_property
    def counts(self) -> I64:
        return np.diff(self.offsets)

    def owners(self) -> I64:
        """For each value, the index of the annotation it belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.counts)

    def take(self, index: I64) -> Related:
        counts = self.counts[index]
        offsets = np.zeros(index.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        starts = self.offsets[:-1][index]
        gather = np.repeat(starts - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
        return Related(offsets, self.values[gather])

    def tolists(self) -> list[list[int]]:
        values = self.values.tolist()
        bounds = self.offsets.tolist()
        return [values[a:b] for a, b in itertools.pairwise(bounds)]

    @staticmethod
    def of_lists(lists: Any, n: int, *, name: str) -> Related:
        """From one list of ids per annotation, or a 1-D array of one id per annotation."""
        if isinstance(lists, np.ndarray) and lists.ndim == 1:
            values = _uint64(lists, f"relationship {name!r}")
            if values.size != n:
                raise ArgumentError(f"relationship {name!r} has {values.size} ids for {n} annotations")
            return Related(np.arange(n + 1, dtype=np.int64), values)
        seqs = list(lists)
        if seqs and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in seqs):
            return Related.of_lists(np.asarray(_uint64(np.asarray(seqs, dtype=object), f"relationship {name!r}")),
                                    n, name=name)
        if not all(isinstance(v, Sequence | np.ndarray) and not isinstance(v, str | bytes) for v in seqs):
            raise ArgumentError(f"relationship {name!r} must be one list of ids per annotation, or one id each")
        if len(seqs) != n:
            raise ArgumentError(f"relationship {name!r} has {len(seqs)} lists for {n} annotations")
        counts = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = [int(v) for s in seqs for v in s]
        return Related(offsets, _uint64(np.asarray(flat, dtype=object) if flat else np.zeros(0, np.uint64),
                                        f"relationship {name!r}"))


@dataclass(frozen=True, eq=False)
class Annotations:
    """Annotations of one collection (see the module docstring for the layout of each array)."""

    schema: AnnotationSchema
    ids: U64
    geometry: F32
    properties: Mapping[str, npt.NDArray[Any]]
    relationships: Mapping[str, Related] | None = None
    point_offsets: I64 | None = None

    def __len__(self) -> int:
        return int(self.ids.size)

    def __repr__(self) -> str:
        return f"Annotations({len(self)} {self.schema.annotation_type}s)"

    # -- geometry ---------------------------------------------------------------------------------------
    def points_of(self, i: int) -> F32:
        """Annotation ``i``'s geometry as ``(k, rank)`` rows (a point: 1, two-vector types: 2, a polyline: k)."""
        rank = self.schema.rank
        if self.point_offsets is not None:
            return self.geometry[int(self.point_offsets[i]): int(self.point_offsets[i + 1])]
        rows: F32 = self.geometry[i].reshape(-1, rank)
        return rows

    def bounds(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Each annotation's bounding box, ``(lower, upper)`` of shape ``(n, rank)`` (inclusive).

        An ellipsoid's box is its centre ± |radii|; a line's and a box's the corner-wise min and max of
        its two points; a polyline's the min and max of its points.
        """
        rank = self.schema.rank
        kind = self.schema.annotation_type
        g = self.geometry.astype(np.float64)
        if kind == "point":
            return g, g.copy()
        if kind == "ellipsoid":
            r = np.abs(g[:, rank:])
            return g[:, :rank] - r, g[:, :rank] + r
        if kind in TWO_VECTOR_TYPES:
            a, b = g[:, :rank], g[:, rank:]
            return np.minimum(a, b), np.maximum(a, b)
        assert self.point_offsets is not None
        n = len(self)
        if n == 0:
            empty = np.zeros((0, rank))
            return empty, empty.copy()
        starts = self.point_offsets[:-1]
        return np.minimum.reduceat(g, starts, axis=0), np.maximum.reduceat(g, starts, axis=0)

    # -- selection --------------------------------------------------------------------------------------
    def take(self, index: npt.ArrayLike) -> Annotations:
        """The annotations at ``index`` (integer positions or a boolean mask), in that order."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        rels = None if self.relationships is None else {k: r.take(idx) for k, r in self.relationships.items()}
        props = {k: v[idx] for k, v in self.properties.items()}
        if self.point_offsets is None:
            return Annotations(self.schema, self.ids[idx], self.geometry[idx], props, rels)
        points = Related(self.point_offsets, np.arange(self.geometry.shape[0], dtype=np.uint64)).take(idx)
        return Annotations(self.schema, self.ids[idx], self.geometry[points.values.astype(np.int64)], props, rels,
                           points.offsets)

    def sorted_by_id(self) -> Annotations:
        return self.take(np.argsort(self.ids, kind="stable"))

    def without_relationships(self) -> Annotations:
        return Annotations(self.schema, self.ids, self.geometry, self.properties, None, self.point_offsets)

    # -- output -----------------------------------------------------------------------------------------
    def row(self, i: int) -> dict[str, Any]:
        """Annotation ``i`` as a JSON-ready record (geometry named as Neuroglancer names it)."""
        pts = self.points_of(i).astype(float).tolist()
        kind = self.schema.annotation_type
        out: dict[str, Any] = {"id": int(self.ids[i]), "type": kind}
        if kind == "point":
            out["point"] = pts[0]
        elif kind == "ellipsoid":
            out["center"], out["radii"] = pts[0], pts[1]
        elif kind == "polyline":
            out["points"] = pts
        else:
            out["point_a"], out["point_b"] = pts[0], pts[1]
        props: dict[str, Any] = {}
        labels: dict[str, str] = {}
        for spec in self.schema.properties:
            value = self.properties[spec.id][i]
            props[spec.id] = value.tolist()
            label = spec.label_of(float(value)) if spec.components == 1 else None
            if label is not None:
                labels[spec.id] = label
        out["properties"] = props
        if labels:
            out["property_labels"] = labels
        if self.relationships is not None:
            out["relationships"] = {k: [int(v) for v in r.of(i)] for k, r in self.relationships.items()}
        return out


def make_annotations(
    schema: AnnotationSchema,
    ids: npt.ArrayLike,
    geometry: npt.ArrayLike | Sequence[npt.ArrayLike],
    properties: Mapping[str, npt.ArrayLike] | None = None,
    relationships: Mapping[str, Related | Sequence[Sequence[int]] | npt.ArrayLike] | None = None,
) -> Annotations:
    """Check and convert columns into :class:`Annotations` (every property and relationship of ``schema``).

    ``geometry`` is ``(n, rank)`` for points, ``(n, 2 * rank)`` or ``(n, 2, rank)`` for the two-vector
    types, and a sequence of ``(k_i, rank)`` arrays (``k_i >= 2``) for polylines. A relationship is a
    :class:`Related`, one list of ids per annotation, or a 1-D array of one id per annotation.

    Raises
    ------
    ArgumentError
        Naming the column that does not fit: a wrong shape, a missing or unknown property or
        relationship, a value the property's type cannot hold, a negative or non-integer id.
    """
    id_arr = _uint64(ids, "ids")
    n = id_arr.size
    rank = schema.rank
    point_offsets: I64 | None = None
    if schema.annotation_type == "polyline":
        parts = [np.asarray(p, dtype=np.float64) for p in geometry]  # type: ignore[union-attr]
        if len(parts) != n:
            raise ArgumentError(f"geometry has {len(parts)} polylines for {n} ids")
        for j, p in enumerate(parts):
            if p.ndim != 2 or p.shape[1] != rank or p.shape[0] < 2:
                raise ArgumentError(f"polyline {j} must be at least 2 points of {rank} coordinates, "
                                    f"got shape {p.shape}")
        counts = np.fromiter((p.shape[0] for p in parts), dtype=np.int64, count=n)
        point_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=point_offsets[1:])
        geo = np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, rank), np.float32)
    else:
        values = schema.geometry_values
        geo = np.asarray(geometry, dtype=np.float32)
        if geo.ndim == 3 and geo.shape[1:] == (2, rank) and values == 2 * rank:
            geo = geo.reshape(geo.shape[0], values)
        if geo.shape != (n, values):
            raise ArgumentError(f"{schema.annotation_type} geometry must have shape ({n}, {values}), got {geo.shape}")
    props: dict[str, npt.NDArray[Any]] = {}
    given = dict(properties or {})
    unknown = sorted(set(given) - {p.id for p in schema.properties})
    if unknown:
        raise ArgumentError(f"unknown properties {unknown}; the schema has {[p.id for p in schema.properties]}")
    for spec in schema.properties:
        if spec.id not in given:
            raise ArgumentError(f"property {spec.id!r} ({spec.type}) has no values")
        props[spec.id] = _property_column(given[spec.id], spec.dtype, spec.components, n, spec.id)
    rels: dict[str, Related] = {}
    given_rels = dict(relationships or {})
    unknown = sorted(set(given_rels) - set(schema.relationships))
    if unknown:
        raise ArgumentError(f"unknown relationships {unknown}; the schema has {list(schema.relationships)}")
    for name in schema.relationships:
        if name not in given_rels:
            raise ArgumentError(f"relationship {name!r} has no related ids (give an empty list per annotation)")
        value = given_rels[name]
        rel = value if isinstance(value, Related) else Related.of_lists(value, n, name=name)
        if len(rel) != n:
            raise ArgumentError(f"relationship {name!r} has {len(rel)} lists for {n} annotations")
        rels[name] = rel
    return Annotations(schema, id_arr, np.ascontiguousarray(geo), props, rels, point_offsets)


def concatenate(batches: Sequence[Annotations], schema: AnnotationSchema | None = None) -> Annotations:
    """One batch holding every annotation of ``batches`` in order (relationships kept only if all have them)."""
    if not batches:
        if schema is None:
            raise ArgumentError("concatenate needs a schema when there is nothing to concatenate")
        return empty_annotations(schema)
    schema = batches[0].schema if schema is None else schema
    if len(batches) == 1:
        return batches[0]
    ids = np.concatenate([b.ids for b in batches])
    geometry = np.concatenate([b.geometry for b in batches])
    props = {p.id: np.concatenate([b.properties[p.id] for b in batches]) for p in schema.properties}
    rels: dict[str, Related] | None = None
    if all(b.relationships is not None for b in batches):
        rels = {}
        for name in schema.relationships:
            parts = [b.relationships[name] for b in batches if b.relationships is not None]
            rels[name] = _concat_related(parts)
    point_offsets = None
    if schema.annotation_type == "polyline":
        point_offsets = _concat_related(
            [Related(b.point_offsets, np.zeros(0, np.uint64)) for b in batches if b.point_offsets is not None],
            values=False).offsets
    return Annotations(schema, ids, geometry, props, rels, point_offsets)


def _concat_related(parts: Sequence[Related], *, values: bool = True) -> Related:
    counts = np.concatenate([p.counts for p in parts])
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    vals = np.concatenate([p.values for p in parts]) if values else np.zeros(0, np.uint64)
    return Related(offsets, vals)


def empty_annotations(schema: AnnotationSchema) -> Annotations:
    rank = schema.rank
    width = rank if schema.annotation_type == "polyline" else schema.geometry_values
    props = {p.id: np.zeros((0, p.components) if p.components > 1 else 0, dtype=p.dtype.newbyteorder("="))
             for p in schema.properties}
    rels = {name: Related(np.zeros(1, np.int64), np.zeros(0, np.uint64)) for name in schema.relationships}
    offsets = np.zeros(1, np.int64) if schema.annotation_type == "polyline" else None
    return Annotations(schema, np.zeros(0, np.uint64), np.zeros((0, width), np.float32), props, rels, offsets)


def _uint64(values: object, what: str) -> U64:
    arr = np.asarray(values)
    if arr.dtype == np.uint64:
        return arr.reshape(-1)
    if arr.dtype.kind == "O" or arr.dtype.kind == "f":
        items = arr.reshape(-1).tolist()
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items):
            if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)):
                items = [int(v) for v in items]
            else:
                raise ArgumentError(f"{what} must be integers, got {arr.dtype}")
        if any(int(v) < 0 or int(v) >= 1 << 64 for v in items):
            raise ArgumentError(f"{what} must be in [0, 2**64)")
        return np.asarray(items, dtype=np.uint64).reshape(-1)
    if arr.dtype.kind == "i":
        if arr.size and int(arr.min()) < 0:
            raise ArgumentError(f"{what} must be non-negative, got {int(arr.min())}")
        return arr.astype(np.uint64).reshape(-1)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64).reshape(-1)
    raise ArgumentError(f"{what} must be integers, got dtype {arr.dtype}")


def _property_column(values: npt.ArrayLike, dtype: np.dtype[Any], components: int, n: int,
                     name: str) -> npt.NDArray[Any]:
    arr = np.asarray(values)
    shape = (n, components) if components > 1 else (n,)
    if arr.shape != shape:
        raise ArgumentError(f"property {name!r} must have shape {shape}, got {arr.shape}")
    native = dtype.newbyteorder("=")
    if arr.dtype.kind in "iu" and native.kind in "iu" and arr.size:
        info = np.iinfo(native)
        if int(arr.min()) < info.min or int(arr.max()) > info.max:
            raise ArgumentError(f"property {name!r} has values outside the range of {native.name}")
    elif arr.dtype.kind == "f" and native.kind in "iu" and arr.size and not np.all(arr == np.round(arr)):
        raise ArgumentError(f"property {name!r} ({native.name}) has non-integer values")
    return np.ascontiguousarray(arr.astype(native))
