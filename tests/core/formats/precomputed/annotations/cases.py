"""Annotation batches for the tests: hypothesis strategies over every geometry type, property type and
relationship shape, and a seeded generator for larger batches (writer, cross-checks, benchmarks)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from napari_shardscope.core.formats.precomputed.annotations.schema import (
    ANNOTATION_TYPES,
    PROPERTY_TYPES,
    AnnotationSchema,
    Dimension,
    PropertySpec,
)
from napari_shardscope.core.formats.precomputed.annotations.table import Annotations, make_annotations

DIMENSIONS = (Dimension("x", 4.0, "nm"), Dimension("y", 4.0, "nm"), Dimension("z", 40.0, "nm"))


def _property(draw: Any, index: int) -> PropertySpec:
    ptype = draw(st.sampled_from(sorted(PROPERTY_TYPES)))
    enum = ptype not in ("rgb", "rgba") and draw(st.booleans())
    values = labels = None
    if enum:
        k = draw(st.integers(1, 4))
        values = tuple(range(k)) if ptype != "float32" else tuple(float(v) / 2 for v in range(k))
        labels = tuple(f"label{v}" for v in range(k))
    return PropertySpec(f"p{index}", ptype, draw(st.none() | st.just("a property")), values, labels)


@st.composite
def schemas(draw: Any, types: tuple[str, ...] = ANNOTATION_TYPES) -> AnnotationSchema:
    rank = draw(st.integers(1, 4))
    dims = tuple(Dimension(n, 1.0, "nm") for n in "xyzt"[:rank])
    props = tuple(_property(draw, i) for i in range(draw(st.integers(0, 6))))
    rels = tuple(f"r{i}" for i in range(draw(st.integers(0, 3))))
    return AnnotationSchema(draw(st.sampled_from(types)), dims, props, rels)


def property_values(spec: PropertySpec, n: int, rng: np.random.Generator) -> np.ndarray:
    dtype = spec.dtype.newbyteorder("=")
    shape = (n, spec.components) if spec.components > 1 else (n,)
    if dtype.kind == "f":
        return rng.normal(0, 1000, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(dtype)


def random_batch(schema: AnnotationSchema, n: int, seed: int, *, extent: float = 1000.0,
                 max_related: int = 3, unique_ids: bool = True) -> Annotations:
    """``n`` annotations of ``schema`` inside ``[0, extent)`` (all types), ids unique."""
    rng = np.random.default_rng(seed)
    rank = schema.rank
    ids = rng.choice(1 << 40, n, replace=False).astype(np.uint64) if unique_ids else rng.integers(0, 1 << 62, n)
    geometry: Any
    if schema.annotation_type == "polyline":
        geometry = [rng.random((int(rng.integers(2, 6)), rank)) * extent for _ in range(n)]
    elif schema.annotation_type == "point":
        geometry = rng.random((n, rank)) * extent
    elif schema.annotation_type == "ellipsoid":
        centre = rng.random((n, rank)) * extent * 0.8 + extent * 0.1
        geometry = np.concatenate([centre, rng.random((n, rank)) * extent * 0.05], axis=1)
    else:
        a = rng.random((n, rank)) * extent
        b = np.clip(a + rng.normal(0, extent * 0.05, (n, rank)), 0, extent * 0.999)
        geometry = np.concatenate([a, b], axis=1)
    props = {p.id: property_values(p, n, rng) for p in schema.properties}
    rels = {r: [list(rng.choice(50, int(rng.integers(0, max_related + 1)), replace=False) + 1) for _ in range(n)]
            for r in schema.relationships}
    return make_annotations(schema, ids, geometry, props, rels)


@st.composite
def batches(draw: Any, max_size: int = 20, types: tuple[str, ...] = ANNOTATION_TYPES) -> Annotations:
    schema = draw(schemas(types))
    n = draw(st.integers(0, max_size))
    return random_batch(schema, n, draw(st.integers(0, 2**32 - 1)))


def assert_same(got: Annotations, want: Annotations, *, relationships: bool = True) -> None:
    """Same annotations (by id: order free), geometry bit for bit, every property, and related ids."""
    assert sorted(got.ids.tolist()) == sorted(want.ids.tolist())
    g, w = got.sorted_by_id(), want.sorted_by_id()
    np.testing.assert_array_equal(g.geometry.view(np.uint32), w.geometry.view(np.uint32))
    if w.point_offsets is not None:
        assert g.point_offsets is not None
        np.testing.assert_array_equal(g.point_offsets, w.point_offsets)
    assert set(g.properties) == set(w.properties)
    for name, values in w.properties.items():
        np.testing.assert_array_equal(g.properties[name].view(np.uint8), np.ascontiguousarray(values).view(np.uint8))
    if relationships and w.relationships is not None:
        assert g.relationships is not None
        for name, rel in w.relationships.items():
            assert g.relationships[name].tolists() == rel.tolists(), name
