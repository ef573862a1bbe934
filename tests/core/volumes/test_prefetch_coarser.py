"""Coarser-scale prefetch: browsing one level warms the window of the next coarser level a zoom-out shows.

Counted with TensorStore's cache counters and the prefetcher's read counts (no timing): after plane
reads of the finest level, reading the coarser level's plane over the zoomed-out window misses the
cache with the link and hits it without; the coarser level opens on a prefetch worker, never the
reading thread; a window the view has left is dropped; the candidate planes and the window follow
napari's choice of plane (``round(z0 / f)``) and a zoom-out by the level factor.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.sample_data import write_precomputed_pyramid
from napari_shardscope.core.volumes import make_context, open_volume
from napari_shardscope.core.volumes import prefetch as prefetch_module
from napari_shardscope.core.volumes.deferred import DeferredStore
from napari_shardscope.core.volumes.lazy import LazyArray
from napari_shardscope.core.volumes.prefetch import PlanePrefetcher, link_coarser

ts = pytest.importorskip("tensorstore")


def _misses() -> int:
    found = ts.experimental_collect_matching_metrics("/tensorstore/cache/miss_count")
    return sum(v["value"] for m in found for v in m["values"])


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """128 x 128 x 128 uint64 (z, y, x), three scales (2x each), 16³ chunks, sharded gzip.

    The labels are 4³ blocks, each its own id (every chunk distinct): what the tests compare is which
    chunks are read, not the values. (The earlier ``arange // 7 % 1009`` is a worst case for the gzip
    level TensorStore writes at: 2.2 CPU s for the pyramid's 512 finest chunks, this 0.3.)
    """
    root = tmp_path_factory.mktemp("pyr") / "seg"
    z, y, x = np.indices((128, 128, 128), dtype=np.uint64) // 4
    data = z * 1024 + y * 32 + x
    write_precomputed_pyramid(root, data, "segmentation", (8, 8, 8), ((1, 1, 1), (2, 2, 2), (4, 4, 4)), (16, 16, 16),
                              context=make_context(0))
    return root


class _Shape:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape


def test_coarser_view_follows_napari_plane_choice_and_a_zoom_out() -> None:
    fine = PlanePrefetcher(_Shape((128, 128, 128)), (16, 16, 16))
    coarse = PlanePrefetcher(_Shape((64, 64, 64)), (16, 16, 16))
    assert fine.coarser_view(40, (slice(0, 128, 1), slice(0, 128, 1))) is None  # not linked
    link_coarser([fine, coarse, None])
    assert fine.coarser is coarse and coarse.coarser is None
    # plane 40 of the finest level: napari shows round(40 / 2) = 20 of the coarser one
    planes, window = fine.coarser_view(40, (slice(32, 64, 1), slice(16, 48, 1)))  # type: ignore[misc]
    assert 20 in planes and set(planes) <= {20, 21}
    # a zoom-out by 2 shows twice the area around the same centre: 32 coarse pixels around (24, 16)
    assert window == (slice(8, 40, 1), slice(0, 32, 1))
    # the whole plane stays the whole (coarser) plane, clipped to the level
    _, window = fine.coarser_view(127, (slice(0, 128, 1), slice(0, 128, 1)))  # type: ignore[misc]
    assert window == (slice(0, 64, 1), slice(0, 64, 1))
    planes, _ = fine.coarser_view(127, (slice(0, 128, 1), slice(0, 128, 1)))  # type: ignore[misc]
    assert max(planes) == 63  # never past the level
    # a level not downsampled in z keeps the plane
    flat = PlanePrefetcher(_Shape((128, 64, 64)), (16, 16, 16))
    link_coarser([fine, flat])
    assert fine.coarser_view(41, (slice(0, 128, 1), slice(0, 128, 1)))[0] == (41,)  # type: ignore[index]
    assert fine.coarser_view(41, (slice(0, 128, 2), slice(0, 128, 1))) is None  # strided: not a view


@pytest.mark.parametrize("linked", [True, False])
def test_browsing_warms_the_zoomed_out_window_of_the_coarser_level(pyramid: Path, linked: bool) -> None:
    vol = open_volume(pyramid, context=make_context(256 << 20))
    fine, coarse = (vol.levels[0].array.with_prefetch(), vol.levels[1].array.with_prefetch())
    if linked:
        link_coarser([fine.prefetcher, coarse.prefetcher])
    expected = np.asarray(open_volume(pyramid).levels[1].array[25, 0:64, 0:64])
    view = fine[:, 32:96, 32:96]  # napari's box, then the plane
    np.asarray(view[50])
    p = fine.prefetcher
    assert p is not None
    p.wait()
    assert p.coarser_reads == (1 if linked else 0)
    assert not coarse.is_open or linked  # only the link opens the coarser level
    misses = _misses()
    # the zoom-out: plane round(50 / 2) = 25 of the coarser level, 64 pixels around the centre (32, 32)
    np.testing.assert_array_equal(coarse.store[25, 0:64, 0:64].read().result(), expected)
    assert (_misses() == misses) == linked
    p.close()


def test_the_coarser_level_opens_on_a_prefetch_worker(pyramid: Path) -> None:
    vol = open_volume(pyramid, context=make_context(256 << 20))
    opened_by: list[str] = []
    level1 = vol.levels[1].array

    def opener() -> Any:
        opened_by.append(threading.current_thread().name)
        return level1.store

    deferred = DeferredStore(opener, shape=level1.shape, dtype=level1.dtype, where="level 1")
    coarse = LazyArray(deferred).with_prefetch()
    fine = vol.levels[0].array.with_prefetch()
    link_coarser([fine.prefetcher, coarse.prefetcher])
    np.asarray(fine[70, :, :])
    assert fine.prefetcher is not None
    fine.prefetcher.wait()
    assert opened_by and all(name.startswith("shardscope-prefetch") for name in opened_by), opened_by
    assert threading.current_thread().name not in opened_by
    fine.prefetcher.close()


def test_a_coarser_window_the_view_left_is_cancelled_and_one_is_read_once(pyramid: Path) -> None:
    vol = open_volume(pyramid, context=make_context(256 << 20))
    fine, coarse = (vol.levels[0].array.with_prefetch(), vol.levels[1].array.with_prefetch())
    link_coarser([fine.prefetcher, coarse.prefetcher])
    p = fine.prefetcher
    assert p is not None
    for z in (5, 60, 100, 20):  # fast jumps across coarser chunk layers
        np.asarray(fine[z, :, :])
    pending = {k for k in p._pending if k[0] == "coarser"}
    assert all(10 in k[1] for k in pending), pending  # only the last view's coarser window may be pending
    p.wait()
    reads = p.coarser_reads
    assert 1 <= reads <= 4
    for z in (20, 21, 22, 23):  # the same coarser chunk layer and window: not read again
        np.asarray(fine[z, :, :])
        p.wait()
    assert p.coarser_reads == reads
    p.close()


def test_a_zoom_to_another_level_cancels_the_prefetches_of_the_level_left(
        pyramid: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a pause of a second before any band starts: the reads below come well within it even on a loaded
    # machine, so what the assertions see is the cancelling, not a race with a band that started early
    monkeypatch.setattr(prefetch_module, "QUIET_S", 1.0)
    monkeypatch.setattr(prefetch_module, "MAX_DEFER_S", 3.0)
    vol = open_volume(pyramid, context=make_context(256 << 20))
    levels = [lv.array.with_prefetch() for lv in vol.levels]
    link_coarser([a.prefetcher for a in levels])
    fine, mid, coarsest = (a.prefetcher for a in levels)
    assert fine is not None and mid is not None and coarsest is not None
    np.asarray(levels[0][40, :, :])  # the view at the finest level: its neighbours and a coarser window queued
    assert fine._pending
    np.asarray(levels[2][10, :, :])  # napari's thumbnail read of the coarsest level leaves them alone
    assert fine._pending
    np.asarray(levels[1][20, :, :])  # zoomed out: the finest level's prefetches are left behind at once
    assert not fine._pending
    fine.wait()
    mid.wait()
    # none ran to the end: each band waits for a pause first (one plane at most, were this thread stalled > 1 s)
    assert fine.reads <= 1 and fine.coarser_reads == 0
    assert mid.reads >= 1  # the level shown now prefetches as before
    for p in (fine, mid, coarsest):
        p.close()
