"""Shard browser fixes of issue 15: the outline lives on the volume's voxel grid; a damaged chunk is visited safely.

Real napari viewer under Xvfb; expectations from the sample's geometry (8 × 8 × 40 nm voxels) and the core's
layout records, not from the panel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import Qt

from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.napari_plugin.sample import sample_volumes
from napari_shardscope.napari_plugin.shown import DamagedChunkWarning
from napari_shardscope.napari_plugin.viewer import add_volumes
from napari_shardscope.widgets.shard_browser import OUTLINE_NAME, ShardBrowser
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.damage import damaged_copy

VOXEL_NM_ZYX = (40.0, 8.0, 8.0)


def open_panel(viewer: Any) -> ShardBrowser:
    _, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", "Shard browser")
    assert isinstance(widget, ShardBrowser)
    return widget


def test_locate_outline_has_the_volumes_voxel_size(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                                   qtbot: Any) -> None:
    viewer = make_napari_viewer(show=True)
    add_volumes(viewer, sample_volumes(sample))
    browser = open_panel(viewer)
    browser.set_layer(viewer.layers["segmentation"])
    found = browser.locate("20, 30, 100", "voxel", "8_8_40")  # z, y, x from 0
    outline = viewer.layers[OUTLINE_NAME]
    np.testing.assert_allclose(outline.scale, VOXEL_NM_ZYX)
    np.testing.assert_allclose(outline.scale, viewer.layers["segmentation"].scale)
    # every rectangle lies on one z plane of the volume and spans the chunk's y/x corners in the world
    assert found.world_box is not None
    lo, hi = (np.asarray(b, dtype=float) for b in found.world_box)
    volume = viewer.layers["segmentation"]  # edges past the volume's outermost voxel centres are clipped to them
    first = np.asarray(volume.translate, dtype=float)
    last = first + (np.asarray(volume.level_shapes[0]) - 1) * np.asarray(volume.scale, dtype=float)
    lo_clip, hi_clip = np.clip(lo, first, last), np.clip(hi, first, last)
    for rect in outline.data:
        world = np.asarray([outline.data_to_world(v) for v in rect])
        assert np.all(world[:, 0] == world[0, 0]) and lo[0] < world[0, 0] < hi[0]
        np.testing.assert_allclose(world[:, 1:].min(axis=0), lo_clip[1:])
        np.testing.assert_allclose(world[:, 1:].max(axis=0), hi_clip[1:])
    # the outline is drawn on the plane the view moved to (with scale 1 it fell between the volume's planes)
    z_world = viewer.dims.point[0]
    assert lo[0] < z_world < hi[0]
    viewer.screenshot(canvas_only=True, flash=False)  # the docked panel has settled the canvas size
    shown = viewer.screenshot(canvas_only=True, flash=False)
    outline.visible = False
    hidden = viewer.screenshot(canvas_only=True, flash=False)
    assert shown.shape == hidden.shape and np.any(shown != hidden)


@pytest.mark.qt_binding_lane
def test_clicking_a_problem_on_a_damaged_chunk_goes_there_without_error(
        make_napari_viewer: Any, sample: SampleDataset, tmp_path: Path, qtbot: Any) -> None:  # noqa: F811
    copy, bad = damaged_copy(sample, tmp_path)

    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(copy), plugin="napari-shardscope")
    assert layer.visible  # the layer stays shown: napari reads the damaged chunk when the view moves there
    browser = open_panel(viewer)
    browser.set_layer(layer)
    browser.validate("8_8_40")
    qtbot.waitUntil(lambda: not browser.busy, timeout=60000)
    assert browser.problems
    item = browser.problem_list.item(0)
    rect = browser.problem_list.visualItemRect(item)
    with pytest.warns(DamagedChunkWarning, match="drawn as background"):  # napari shows it as a notification
        qtbot.mouseClick(browser.problem_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.wait(200)
    found = browser.last_located
    assert found is not None and found.node.chunk_id == bad.node.chunk_id
    assert bad.world_box is not None
    lo, hi = bad.world_box
    assert lo[0] < viewer.dims.point[0] < hi[0]  # the view went to the damaged chunk's planes
    viewer.screenshot(canvas_only=True, flash=False)  # napari draws the plane with the damaged chunk
