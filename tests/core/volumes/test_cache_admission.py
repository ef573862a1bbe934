"""Cache admission for a script's reads: chunks enter the cache on their second read, not their first.

Observed with TensorStore's own counters and the cache's contents (no timing): the first read of a
chunk-aligned box leaves the chunk cache as it was, the second fills it, the third hits it; the
values are TensorStore's every time. A viewer's levels (with prefetch) read through the cache.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.volumes import make_context, open_volume
from napari_shardscope.core.volumes.lazy import CacheAdmission

ts = pytest.importorskip("tensorstore")

SHAPE = (96, 64, 64)  # z, y, x


def _metric(name: str) -> int:
    found = ts.experimental_collect_matching_metrics(name)
    return sum(v["value"] for m in found for v in m["values"])


def _expected() -> np.ndarray:
    return (np.arange(np.prod(SHAPE), dtype=np.uint64) % 977).reshape(SHAPE)


@pytest.fixture
def volume_path(tmp_path: Path) -> Path:
    ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/v",
             "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
             "scale_metadata": {"size": [64, 64, 96], "resolution": [8, 8, 8], "chunk_size": [32, 32, 32],
                                "encoding": "raw"}, "create": True}).result()[..., 0].write(_expected().T).result()
    return tmp_path / "v"


def _cached_hit(level_store: object, z: int) -> bool:
    """Whether reading plane ``z`` straight from the level's (cached) TensorStore misses no chunk."""
    misses = _metric("/tensorstore/cache/miss_count")
    level_store[z, :, :].read().result()  # type: ignore[index]
    return _metric("/tensorstore/cache/miss_count") == misses


def test_first_read_skips_the_cache_second_fills_it(volume_path: Path) -> None:
    level = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    expected = _expected()
    np.testing.assert_array_equal(np.asarray(level[40]), expected[40])  # first touch of chunk layer 1
    assert not _cached_hit(level.store, 41)  # nothing of layer 1 was kept
    fresh = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    np.testing.assert_array_equal(fresh[33].read(), expected[33])  # first touch: uncached twin
    np.testing.assert_array_equal(fresh[34].read(), expected[34])  # second touch: through the cache
    assert _cached_hit(fresh.store, 35)  # the layer is now cached
    np.testing.assert_array_equal(fresh[35].read(), expected[35])


def test_boxes_are_chunk_aligned_and_other_keys_take_the_cache(volume_path: Path) -> None:
    admission = CacheAdmission(object(), (32, 32, 32))
    assert admission._box((40, slice(0, 64, 1), slice(0, 64, 1))) == ((1, 2), (0, 2), (0, 2))
    assert admission._box((slice(30, 34, 1), slice(0, 10, 1), 63)) == ((0, 2), (0, 1), (1, 2))
    assert admission._box((None, 1, slice(0, 3, 1), slice(0, 3, 1))) is None  # a new axis
    assert admission._box((np.array([1, 2]), slice(0, 3, 1), slice(0, 3, 1))) is None  # an index array


def test_viewer_levels_read_through_the_cache(volume_path: Path) -> None:
    level = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    viewer_level = level.with_prefetch()
    np.testing.assert_array_equal(np.asarray(viewer_level[70]), _expected()[70])
    assert viewer_level.prefetcher is not None
    viewer_level.prefetcher.wait()
    assert _cached_hit(level.store, 71)  # the plane's own chunk layer stays cached
    viewer_level.prefetcher.close()


def test_values_match_across_many_reads_and_views(volume_path: Path) -> None:
    level = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    expected = _expected()
    rng = np.random.default_rng(7)
    for _ in range(20):
        z0 = int(rng.integers(0, 90))
        y0, x0 = (int(v) for v in rng.integers(0, 60, size=2))
        view = level[z0 : z0 + 6, y0:, x0 : x0 + 3]
        np.testing.assert_array_equal(np.asarray(view), expected[z0 : z0 + 6, y0:, x0 : x0 + 3])
        np.testing.assert_array_equal(np.asarray(view[2]), expected[z0 + 2, y0:, x0 : x0 + 3])


def test_views_of_a_viewer_level_indexed_again_read_through_the_cache(volume_path: Path) -> None:
    """napari indexes a level's plane view a second time (the visible region): that read keeps the cache."""
    level = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    viewer_level = level.with_prefetch()
    region = viewer_level[70][:, :32]
    np.testing.assert_array_equal(np.asarray(region), _expected()[70, :, :32])
    misses = _metric("/tensorstore/cache/miss_count")
    level.store[71, :, :32].read().result()
    assert _metric("/tensorstore/cache/miss_count") == misses
    assert viewer_level.prefetcher is not None
    viewer_level.prefetcher.close()
