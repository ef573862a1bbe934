"""Plane prefetch: after a plane is read, the neighbouring chunk layers are already in the cache.

Measured with TensorStore's own cache counters (no timing): a step into the next chunk layer hits
the cache with prefetch and misses without it; a window the view has left is dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.volumes import make_context, open_volume
from napari_shardscope.core.volumes.prefetch import PlanePrefetcher

ts = pytest.importorskip("tensorstore")


def _metric(name: str) -> int:
    found = ts.experimental_collect_matching_metrics(name)
    return sum(v["value"] for m in found for v in m["values"])


@pytest.fixture
def volume_path(tmp_path: Path) -> Path:
    data = (np.arange(96 * 64 * 64, dtype=np.uint64) % 977).reshape(96, 64, 64)  # z, y, x
    ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/v",
             "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
             "scale_metadata": {"size": [64, 64, 96], "resolution": [8, 8, 8], "chunk_size": [32, 32, 32],
                                "encoding": "raw"}, "create": True}).result()[..., 0].write(data.T).result()
    return tmp_path / "v"


def test_targets_are_the_neighbouring_chunk_layers() -> None:
    class Shape:
        shape = (96, 64, 64)

    p = PlanePrefetcher(Shape(), 32)
    assert p.targets(0) == [32]
    assert p.targets(40) == [64, 31]
    assert p.targets(95) == [63]


@pytest.mark.parametrize("prefetch", [True, False])
def test_step_into_the_next_chunk_layer_hits_the_cache(volume_path: Path, prefetch: bool) -> None:
    level = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    arr = level.with_prefetch() if prefetch else level
    expected = (np.arange(96 * 64 * 64, dtype=np.uint64) % 977).reshape(96, 64, 64)
    np.testing.assert_array_equal(np.asarray(arr[31, :, :]), expected[31])  # reads chunk layer 0
    if prefetch:
        assert arr.prefetcher is not None
        arr.prefetcher.wait()
        assert arr.prefetcher.reads == 1  # layer 1 (plane 32); there is no layer before 0
    misses = _metric("/tensorstore/cache/miss_count")
    # the step into layer 1, read through the level's TensorStore (same cache) so it prefetches nothing
    # itself (a script's first read of a box skips the cache: test_cache_admission.py)
    np.testing.assert_array_equal(level.store[32, :, :].read().result(), expected[32])
    assert (_metric("/tensorstore/cache/miss_count") == misses) == prefetch
    if prefetch:
        arr.prefetcher.close()


def test_a_window_the_view_left_is_cancelled(volume_path: Path) -> None:
    arr = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array.with_prefetch()
    p = arr.prefetcher
    assert p is not None
    for z in (5, 40, 70, 10):  # fast jumps: only the last window's reads may stay pending
        np.asarray(arr[z, :, :])
    p.wait()
    assert not p._pending
    np.asarray(arr[3:5, :, :])  # a slab, not a plane: no prefetch
    assert p.reads <= 6
    p.close()


def test_napari_indexing_box_then_plane_prefetches_in_level_coordinates(volume_path: Path) -> None:
    """napari indexes a level with the visible box first and takes the plane of that view later."""
    level = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array
    arr = level.with_prefetch()
    expected = (np.arange(96 * 64 * 64, dtype=np.uint64) % 977).reshape(96, 64, 64)
    box = arr[10:90, 8:40, 0:64]  # the visible region: nothing read, nothing prefetched
    np.testing.assert_array_equal(np.asarray(box[21]), expected[31, 8:40])  # plane 31 of the level
    p = arr.prefetcher
    assert p is not None
    p.wait()
    assert p.reads == 1
    np.asarray(box[20])  # same chunk layer, same window: not read again
    p.wait()
    assert p.reads == 1
    misses = _metric("/tensorstore/cache/miss_count")
    np.testing.assert_array_equal(level.store[32, 8:40, 0:64].read().result(), expected[32, 8:40])
    assert _metric("/tensorstore/cache/miss_count") == misses  # the prefetch read the level's rows 8:40
    p.close()


def test_shift_index_and_bands() -> None:
    from napari_shardscope.core.volumes.lazy import shift_index

    assert shift_index((3, slice(0, 5, 1), slice(2, 4, 2)), (10, 8, 0)) == (13, slice(8, 13, 1), slice(2, 4, 2))
    assert shift_index((3, None, slice(0, 5, 1)), (1, 2)) is None
    assert shift_index((np.array([1, 2]), slice(0, 5, 1)), (1, 2)) is None

    class Shape:
        shape = (96, 64, 64)

    p = PlanePrefetcher(Shape(), (32, 16, 16))
    assert [b[1] for b in p.bands((40, slice(0, 64, 1), slice(0, 64, 1)))] == [
        slice(0, 16, 1), slice(16, 32, 1), slice(32, 48, 1), slice(48, 64, 1)]
    assert [b[1] for b in p.bands((40, slice(8, 40, 1), slice(0, 64, 1)))] == [
        slice(8, 16, 1), slice(16, 32, 1), slice(32, 40, 1)]
    assert PlanePrefetcher(Shape(), 32).bands((40, slice(0, 64, 1), slice(0, 64, 1))) == [
        (40, slice(0, 64, 1), slice(0, 64, 1))]


def test_leaving_a_window_drops_its_prefetch_at_once(volume_path: Path) -> None:
    arr = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array.with_prefetch()
    p = arr.prefetcher
    assert p is not None
    np.asarray(arr[5, :, :])  # prefetches the first plane of chunk layer 1 (z 32)
    before = set(p._pending)
    np.asarray(arr[70, :, :])  # chunk layer 2: wants only the last plane of layer 1 (z 63)
    assert not before & set(p._pending) and {k[0] for k in p._pending} <= {63}
    p.wait()
    p.close()


def test_chunk_shape_asked_by_two_threads_at_once() -> None:
    """Two reads finishing together both ask for the chunk depth of a level opened by the first read.

    The second thread is held (a trace function, no timing) right after it saw the chunk function
    still unset and before it called it, while the first thread asks and clears it: the second must
    still get the depth, not call ``None``.
    """
    import sys
    import threading

    class Shape:
        shape = (96, 64, 64)

    p = PlanePrefetcher(Shape(), lambda: (32, 32, 32))
    first_done = threading.Event()
    at_call = threading.Event()
    results: list[object] = []

    lines = [0]

    def hold(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call":
            return hold if frame.f_code.co_name == "chunk" else None
        if event == "line":
            lines[0] += 1
            if lines[0] == 2:  # the first line after ``if self._chunk_of is not None`` found it set
                at_call.set()
                first_done.wait(10)
        return hold

    def second() -> None:
        sys.settrace(hold)
        try:
            results.append(p.chunk)
        except Exception as exc:  # the defect: TypeError, 'NoneType' object is not callable
            results.append(exc)
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=second)
    thread.start()
    assert at_call.wait(10)
    assert p.chunk == 32
    first_done.set()
    thread.join(10)
    assert results == [32]



def test_a_one_plane_slice_prefetches_like_the_plane(volume_path: Path) -> None:
    """napari's Image layers read the plane shown as ``z:z+1``; a thicker slab prefetches nothing."""
    arr = open_volume(volume_path, context=make_context(256 << 20)).levels[0].array.with_prefetch()
    p = arr.prefetcher
    assert p is not None
    np.asarray(arr[40:41, :, :])
    assert {k[0] for k in p._pending} <= {64, 31}
    p.wait()
    assert p.reads == 2  # the first plane of chunk layer 2 and the last of layer 0
    np.asarray(arr[50:52, :, :])
    p.wait()
    assert p.reads == 2
    p.close()
