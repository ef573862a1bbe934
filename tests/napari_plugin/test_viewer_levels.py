"""A volume in a real napari viewer: which levels it opens, z steps find the next chunk layer cached,
a zoom-out after browsing finds the coarser level's window cached, a level that cannot be opened is
drawn empty and reported, and recovers.

Real ``make_napari_viewer`` under Xvfb (pytest-xvfb); counted through level state, the prefetcher's
read count and TensorStore's cache counters, never timings.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import make_context, open_volume
from napari_shardscope.napari_plugin.shown import DamagedChunkWarning
from napari_shardscope.napari_plugin.viewer import add_volumes
from tests.volume_cases import sample  # noqa: F401  (fixture)

ts = pytest.importorskip("tensorstore")


def _misses() -> int:
    found = ts.experimental_collect_matching_metrics("/tensorstore/cache/miss_count")
    return sum(v["value"] for m in found for v in m["values"])


def test_adding_a_volume_opens_only_the_levels_napari_reads(make_napari_viewer: Any,
                                                            sample: SampleDataset) -> None:  # noqa: F811
    viewer = make_napari_viewer()
    vol = open_volume(sample.segmentation, context=make_context(64 << 20))
    assert len(vol.levels) == 4 and not any(lv.array.is_open for lv in vol.levels)
    (layer,) = add_volumes(viewer, [vol])
    opened = [lv.array.is_open for lv in vol.levels]
    # napari slices the level it shows and takes the thumbnail from the coarsest; the level below the shown one
    # is opened only by the prefetch worker (to warm a zoom-out), when the viewer pauses: the others stay shut
    assert opened[layer.data_level] and opened[-1] and opened[2] is False
    assert layer.data_level == 0 and np.asarray(layer._slice.image.raw).any()
    prefetcher = layer.data[0].inner.prefetcher
    prefetcher.wait()
    assert [lv.array.is_open for lv in vol.levels] == [True, True, False, True]
    prefetcher.close()


@pytest.mark.qt_binding_lane
def test_z_steps_in_the_viewer_find_the_next_chunk_layer_cached(make_napari_viewer: Any,
                                                                sample: SampleDataset) -> None:  # noqa: F811
    """Steps inside a chunk layer prefetch the next one, so the step into it reads nothing.

    A Labels layer reads the plane shown as ``z``, an Image layer as ``z:z+1``: both are prefetched around.
    Both kinds in one viewer, one after the other (the first one's layer removed and its reads stopped).
    """
    viewer = make_napari_viewer()
    for kind in ("segmentation", "image"):
        viewer.layers.clear()
        z_steps_find_the_next_chunk_layer_cached(viewer, getattr(sample, kind), kind)


def z_steps_find_the_next_chunk_layer_cached(viewer: Any, path: Path, kind: str) -> None:
    vol = open_volume(path, context=make_context(256 << 20))
    (layer,) = add_volumes(viewer, [vol])
    assert layer._type_string == ("labels" if kind == "segmentation" else "image")
    prefetcher = layer.data[0].inner.prefetcher  # the shown level's
    assert prefetcher is not None and layer.data_level == 0, kind
    for other in layer.data[1:]:  # the cache counters then count only the shown level's reads
        other.inner.prefetcher.close()
    expected = np.asarray(open_volume(path).levels[0].array[0:17])
    for z in range(3, 8):  # inside chunk layer 0 (8 planes per chunk)
        viewer.dims.set_current_step(0, z)
        np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), expected[z], err_msg=kind)
    prefetcher.wait()
    assert prefetcher.reads >= 1, kind
    misses = _misses()
    viewer.dims.set_current_step(0, 8)  # into chunk layer 1: already decoded
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), expected[8], err_msg=kind)
    assert _misses() == misses, kind
    prefetcher.close()


def test_a_zoom_out_after_browsing_finds_the_coarser_level_cached(make_napari_viewer: Any,
                                                                  sample: SampleDataset) -> None:  # noqa: F811
    """Browse z at the finest level, zoom out until napari shows the next level: its plane is already decoded.

    The control (the link to the coarser level cut) misses the cache on the same zoom-out. Both in one viewer,
    one after the other: each volume is opened anew (a cache of its own) and added to the emptied viewer, which
    napari then fits to it again (reset_view on a first layer), so each starts at the same zoom.
    """
    viewer = make_napari_viewer(show=True)  # napari picks the level when the canvas draws
    for linked in (True, False):
        viewer.layers.clear()
        zoom_out_finds_the_coarser_level_cached(viewer, sample, linked)


def zoom_out_finds_the_coarser_level_cached(viewer: Any, sample: SampleDataset, linked: bool) -> None:  # noqa: F811
    from qtpy.QtWidgets import QApplication

    vol = open_volume(sample.segmentation, context=make_context(256 << 20))
    (layer,) = add_volumes(viewer, [vol])
    prefetcher = layer.data[0].inner.prefetcher
    assert prefetcher is not None and layer.data_level == 0, linked
    for other in layer.data[1:]:  # the cache counters then count only what the zoom-out itself reads
        other.inner.prefetcher.close()
    prefetcher.wait()  # what adding the layer started (the first plane's coarser window included)
    if not linked:
        prefetcher.coarser = None
    before = prefetcher.coarser_reads
    for z in (17, 18, 19, 20):  # into chunk layer 2 (8 planes each): a coarser window not read yet
        viewer.dims.set_current_step(0, z)
    prefetcher.wait()
    assert (prefetcher.coarser_reads > before) == linked
    misses = _misses()
    zoom = viewer.camera.zoom
    for _ in range(40):  # zoom out step by step until napari switches to level 1 (bounded)
        if layer.data_level != 0:
            break
        zoom *= 0.8
        viewer.camera.zoom = zoom
        for _ in range(5):
            QApplication.processEvents()
    assert layer.data_level == 1, linked
    expected = np.asarray(open_volume(sample.segmentation).levels[1].array[20])
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), expected[tuple(
        slice(int(lo), int(hi) + 1) for lo, hi in zip(*layer.corner_pixels[:, 1:], strict=True))])
    assert (_misses() == misses) == linked
    prefetcher.close()


def test_a_level_that_cannot_open_is_drawn_empty_then_recovers(make_napari_viewer: Any, tmp_path: Path) -> None:
    # a level TensorStore's driver opens (precomputed's local raw scales and plain local zarr v3 arrays
    # are decoded here from the metadata parsed at open_volume, so their levels open without reading it again)
    from tests.volume_cases import write_zarr2_array

    root = write_zarr2_array(tmp_path).path
    vol = open_volume(root, context=make_context(64 << 20))
    info = (root / ".zarray").read_bytes()
    (root / ".zarray").unlink()  # the level's TensorStore open now fails
    viewer = make_napari_viewer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (layer,) = add_volumes(viewer, [vol])
    reports = [str(w.message) for w in caught if issubclass(w.category, DamagedChunkWarning)]
    assert reports and all("drawn as background" in r for r in reports)
    assert not np.asarray(layer._slice.image.raw).any() and not vol.levels[0].array.is_open
    (root / ".zarray").write_bytes(info)
    layer.refresh()
    expected = np.asarray(open_volume(root).levels[0].array[int(viewer.dims.current_step[0])])
    np.testing.assert_array_equal(np.asarray(layer._slice.image.raw), expected)


def test_slicing_is_asynchronous_by_default_only_when_a_volume_is_remote(sample: SampleDataset) -> None:  # noqa: F811
    import dataclasses

    from napari_shardscope.napari_plugin.viewer import slicing_mode

    local = open_volume(sample.segmentation)
    remote = dataclasses.replace(local, url="https://example.org/seg")
    assert slicing_mode([local], None) is False and slicing_mode([local, remote], None) is True
    assert slicing_mode([remote], False) is False and slicing_mode([local], True) is True
