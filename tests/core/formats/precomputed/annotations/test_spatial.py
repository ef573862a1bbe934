"""The spatial index: cells and keys, the halving rule, and the spec's sampling rule when building levels."""

from __future__ import annotations

import numpy as np
import pytest

from napari_shardscope.core.formats.precomputed.annotations.info import SpatialLevel, parse_annotation_info
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema
from napari_shardscope.core.formats.precomputed.annotations.spatial import (
    MAX_CELLS_PER_ANNOTATION,
    build_levels,
    cell_bounds,
    cell_chunk_id,
    cell_of_chunk_id,
    cell_ranges,
    next_chunk_size,
    parse_cell_key,
)
from napari_shardscope.core.formats.precomputed.annotations.table import make_annotations
from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, random_batch
from tests.realdata import realdata_path


@pytest.mark.realdata
def test_the_halving_rule_gives_cloudvolumes_levels() -> None:
    # CloudVolume wrote these twelve levels; the rule the spec recommends reproduces every one from the first.
    info = parse_annotation_info(realdata_path("cv_annotation", "info").read_bytes())
    chunk = info.spatial[0].chunk_size
    grid = info.spatial[0].grid_shape
    for level in info.spatial[1:]:
        chunk, factors = next_chunk_size(chunk)
        grid = tuple(g * f for g, f in zip(grid, factors, strict=True))
        assert grid == level.grid_shape
        assert chunk == pytest.approx(level.chunk_size, rel=1e-6)


def test_cells_keys_and_morton_codes() -> None:
    level = SpatialLevel("s", (4, 2, 8), (10.0, 20.0, 5.0), 10)
    assert parse_cell_key("3_1_7", level) == (3, 1, 7)
    assert parse_cell_key("3_1_7.gz", level) == (3, 1, 7)
    for bad in ("4_1_7", "3_1", "03_1_7", "a_b_c", "3_1_7_0"):
        assert parse_cell_key(bad, level) is None
    for cell in [(0, 0, 0), (3, 1, 7), (2, 0, 5)]:
        assert cell_of_chunk_id(level, cell_chunk_id(level, cell)) == cell
    lo, hi = cell_bounds(level, (100.0, 0.0, 0.0), (1, 1, 2))
    assert lo.tolist() == [110, 20, 10] and hi.tolist() == [120, 40, 15]
    first, last = cell_ranges(level, (100.0, 0.0, 0.0), [95, 10, 12], [125, 15, 12])
    assert first.tolist() == [0, 0, 2] and last.tolist() == [2, 0, 2]
    first, last = cell_ranges(level, (100.0, 0.0, 0.0), [500, 0, 0], [600, 1, 1])
    assert np.any(last < first)  # outside the grid: no cell


@pytest.mark.parametrize("kind", ["point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline"])
def test_each_annotation_is_emitted_at_one_level_in_every_cell_it_touches(kind: str) -> None:
    schema = AnnotationSchema(kind, DIMENSIONS)
    batch = random_batch(schema, 3000, 5)
    limit = 100
    levels = build_levels(batch, [0, 0, 0], [1000, 1000, 1000], limit)
    lo, hi = batch.bounds()
    level_of = np.full(len(batch), -1)
    for i, lv in enumerate(levels):
        spec = SpatialLevel("", lv.grid_shape, lv.chunk_size, limit)
        members = np.unique(lv.members)
        assert np.all(level_of[members] == -1)  # one level only
        level_of[members] = i
        for j in range(lv.cells.shape[0]):
            m = lv.members_of(j)
            assert np.unique(m).size == m.size
            c_lo, c_hi = cell_bounds(spec, [0, 0, 0], lv.cells[j])
            assert np.all((hi[m] >= c_lo - 1e-6) & (lo[m] <= c_hi + 1e-6))
        # every annotation of this level is in every cell its box touches (the spec: "intersect")
        first, last = cell_ranges(spec, [0, 0, 0], lo[members], hi[members])
        touched = np.prod(last - first + 1, axis=1)
        assert int(touched.sum()) == lv.members.size
        assert i == 0 or int(touched.max()) <= MAX_CELLS_PER_ANNOTATION  # else it was emitted a level before
    assert np.all(level_of >= 0)  # nothing left out


def test_levels_subsample_by_the_limit_and_the_build_is_reproducible() -> None:
    schema = AnnotationSchema("point", DIMENSIONS)
    batch = random_batch(schema, 20000, 1)
    levels = build_levels(batch, [0, 0, 0], [1000, 1000, 1000], 500)
    assert levels[0].grid_shape == (1, 1, 1)
    # level 0 keeps each point with probability limit / n: about 500 of 20000
    assert 350 < levels[0].members.size < 650
    assert all(lv.max_count < 800 for lv in levels)
    again = build_levels(batch, [0, 0, 0], [1000, 1000, 1000], 500)
    for a, b in zip(levels, again, strict=True):
        np.testing.assert_array_equal(a.members, b.members)
        np.testing.assert_array_equal(a.cells, b.cells)


def test_a_big_box_is_emitted_before_it_would_span_too_many_cells() -> None:
    schema = AnnotationSchema("axis_aligned_bounding_box", DIMENSIONS)
    n = 5000
    rng = np.random.default_rng(3)
    small = rng.random((n, 3)) * 900
    geometry = np.concatenate([small, small + 1], axis=1)
    geometry[0] = [0, 0, 0, 999, 999, 999]  # the whole volume
    batch = make_annotations(schema, np.arange(n), geometry)
    levels = build_levels(batch, [0, 0, 0], [1000, 1000, 1000], 50)
    for lv in levels:
        if 0 in lv.members:
            assert np.count_nonzero(lv.members == 0) <= MAX_CELLS_PER_ANNOTATION
            break
    else:
        raise AssertionError("the big box was never emitted")


def test_duplicated_positions_end_at_the_last_level_instead_of_looping() -> None:
    schema = AnnotationSchema("point", DIMENSIONS)
    batch = make_annotations(schema, np.arange(3000), np.full((3000, 3), 5.0))
    levels = build_levels(batch, [0, 0, 0], [10, 10, 10], 10)
    assert sum(lv.members.size for lv in levels) == 3000
    assert len(levels) <= 64
