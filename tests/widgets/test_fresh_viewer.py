"""A viewer just opened, as a user or a notebook opens it: go-to fits the canvas as laid out, panels tell the truth.

* Go-to right after the viewer and its docks were opened: napari lays the docks out on a later turn of
  the event loop, narrowing the canvas after the camera was fitted; the body must still be in view, at
  the canvas's final size (checked through the camera and in the pixels of a screenshot).
* A restart (a new viewer over the same repository): the Navigate panel's to-do list shows the items of
  the list its box names, without picking it again.
* A controller connected from Python (what examples/proofreading.ipynb does): the Proofreading panel's
  Repository field names that repository, whether the panel was opened before or after.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import Qt

from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.navigation import body_target
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.napari_plugin.sample import sample_volumes
from napari_shardscope.napari_plugin.viewer import add_volumes
from napari_shardscope.widgets.canvas import canvas_for
from napari_shardscope.widgets.navigator import NavigatorPanel
from napari_shardscope.widgets.proofreading import ProofreadingPanel
from napari_shardscope.widgets.session import session_for
from napari_shardscope.widgets.shard_browser import camera
from tests.volume_cases import sample  # noqa: F401  (fixture)

Z = 32
LEFT = Qt.MouseButton.LeftButton


@pytest.fixture(scope="module")
def repo_template(sample: SampleDataset, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """A repository over the sample's segmentation, made through the core (no viewer), once for this file:
    making it indexes the base (about 0.5 CPU s more than a copy); each test gets a copy (:func:`repo`)."""
    path = tmp_path_factory.mktemp("fresh-viewer") / "proofread.repo"
    r = create_repository(path)
    create_labelmap(r, "seg", sample.segmentation, agglomeration=sample.bodies)
    r.close()
    return path


@pytest.fixture
def repo(repo_template: Path, tmp_path: Path) -> Path:
    """A copy of :func:`repo_template` of this test's own: the tests write to it (to-do statuses, edits)."""
    path = tmp_path / "proofread.repo"
    shutil.copytree(repo_template, path)
    return path


def largest_body(c: ProofreadingController) -> int:
    v = c.version
    assert v is not None
    plane = v.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    return int(ids[np.argmax(counts)])


def widest_on_its_plane(c: ProofreadingController) -> int:
    """Of the 15 largest bodies on plane Z, the widest on the plane a go-to shows, for the box it is fitted by.

    Go-to fits the body's box (its blocks over every plane) and shows its focus plane: the body that is
    wide on that plane for its box is the one a fit to a wider canvas than the one shown cuts.
    """
    v = c.version
    assert v is not None
    plane = v.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[plane != 0], return_counts=True)

    def width(body: int) -> float:
        t = body_target(v, body)
        xs = np.nonzero(v.read_bodies((t.focus[0], slice(None), slice(None))) == body)[1]
        return float(xs.max() - xs.min() + 1) / max(t.box.hi[1] - t.box.lo[1], t.box.hi[2] - t.box.lo[2])

    return max((int(i) for i in ids[np.argsort(counts)[::-1][:15]]), key=width)


def dock(viewer: Any, name: str) -> Any:
    _, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", name)
    return widget


def screen_box(viewer: Any, lo: Any, hi: Any) -> tuple[np.ndarray, np.ndarray]:
    """The (y, x) canvas pixels of a world box's corners in the 2-D view (camera centre and zoom)."""
    cam = camera(viewer)
    h, w = viewer.canvas.size
    centre = np.asarray(cam.center[-2:], dtype=float)
    half = np.asarray([h, w], dtype=float) / 2
    return ((np.asarray(lo[-2:]) - centre) * cam.zoom + half, (np.asarray(hi[-2:]) - centre) * cam.zoom + half)


@pytest.mark.qt_binding_lane
def test_go_to_in_a_fresh_viewer_fits_the_canvas_as_laid_out(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                                             repo: Path, qtbot: Any) -> None:
    viewer = make_napari_viewer(show=True)
    add_volumes(viewer, sample_volumes(sample))
    dock(viewer, "Proofreading")
    nav = dock(viewer, "Navigate")
    assert isinstance(nav, NavigatorPanel)
    c = session_for(viewer).controller
    c.connect(repo)
    a = widest_on_its_plane(c)
    nav.goto_edit.setText(str(a))
    at_go_to = viewer.canvas.size
    qtbot.mouseClick(nav.goto_button, LEFT)  # before napari laid the docks out
    assert c.selected == (a,)
    qt_canvas = viewer.window._qt_viewer.canvas.native
    # the docks are laid out on a later turn of the event loop: the canvas narrows under the fitted camera
    qtbot.waitUntil(lambda: viewer.canvas.size != at_go_to, timeout=20000)
    qtbot.waitUntil(lambda: viewer.canvas.size == (qt_canvas.height(), qt_canvas.width()), timeout=20000)
    h, w = viewer.canvas.size
    assert w < at_go_to[1]  # the scenario: the camera was fitted to a wider canvas than the one shown
    s = session_for(viewer)
    qtbot.waitUntil(lambda: not s.surfaces.busy and bool(s.surfaces.layers), timeout=60000)

    v = c.version
    assert v is not None
    g = v.scales[0]
    target = canvas_for(viewer).last_target
    assert target is not None and target.label == a
    lo, hi = target.world_box(g)
    top_left, bottom_right = screen_box(viewer, lo, hi)
    assert (top_left >= -0.5).all() and (bottom_right <= np.asarray([h, w]) + 0.5).all(), \
        f"the body's box {top_left}..{bottom_right} is not inside the {h}x{w} canvas"
    assert (bottom_right - top_left).max() >= 0.5 * min(h, w)  # and fills it

    # in the pixels: the selection overlay alone (the outline of body a on the plane shown), not cut by an edge
    z = viewer.dims.current_step[0]
    assert z == target.focus[0]
    on_plane = np.argwhere(v.read_bodies((z, slice(None), slice(None))) == a)
    yx0, size = np.asarray(g.translate[1:]), np.asarray(g.voxel_size[1:])
    first, last = screen_box(viewer, yx0 + (on_plane.min(axis=0) - 0.5) * size,
                             yx0 + (on_plane.max(axis=0) + 0.5) * size)
    overlay = canvas_for(viewer).selection_layer
    assert overlay is not None
    for layer in viewer.layers:
        layer.visible = layer is overlay
    qtbot.wait(50)
    shot = np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3].astype(int)
    assert shot.shape[:2] == (h, w)
    drawn = np.argwhere(shot.max(axis=2) > 60)
    assert len(drawn) > 50, "the selected body's outline is not drawn"
    assert drawn.min(axis=0).min() > 2 and (drawn.max(axis=0) < np.asarray([h, w]) - 3).all(), \
        "the selected body's outline runs into the canvas edge: the body is partly off screen"
    # what is drawn is where the camera says the body's voxels are (a few pixels of outline width)
    np.testing.assert_allclose(drawn.min(axis=0), first, atol=4)
    np.testing.assert_allclose(drawn.max(axis=0), last, atol=4)


def test_a_restart_shows_the_todo_items_of_the_list_named(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                                          repo: Path, tmp_path: Path, qtbot: Any) -> None:
    first = make_napari_viewer(show=True)
    add_volumes(first, sample_volumes(sample))
    nav = dock(first, "Navigate")
    c = session_for(first).controller
    c.connect(repo)
    a = largest_body(c)
    todo = tmp_path / "assigned.csv"
    todo.write_text(f"body\n{a}\n{a}\n")
    nav.load(todo)
    qtbot.mouseClick(nav.next_button, LEFT)
    qtbot.mouseClick(nav.done_button, LEFT)
    c.disconnect()
    first.close()

    viewer = make_napari_viewer(show=True)  # the restart: a new viewer, panel and controller
    add_volumes(viewer, sample_volumes(sample))
    nav = dock(viewer, "Navigate")
    proof = dock(viewer, "Proofreading")
    assert isinstance(proof, ProofreadingPanel)
    proof.repo_edit.setText(str(repo))
    qtbot.mouseClick(proof.open_button, LEFT)
    assert session_for(viewer).controller.state.connected
    assert nav.list_combo.currentText() == "assigned"
    assert nav.items_list.count() == 2  # the items of the list the box names, without picking it again
    assert nav.items_list.item(0).text().startswith("✓") and nav.items_list.item(1).text().startswith("○")
    assert "1 of 2" in nav.progress_label.text()
    qtbot.mouseClick(nav.next_button, LEFT)  # Next goes on where the list was left
    assert nav.items_list.currentRow() == 1


def test_the_repository_field_names_the_repository_a_notebook_connected(make_napari_viewer: Any,
                                                                       sample: SampleDataset,  # noqa: F811
                                                                       repo: Path, tmp_path: Path) -> None:
    viewer = make_napari_viewer(show=True)
    add_volumes(viewer, sample_volumes(sample))
    c = session_for(viewer).controller
    made = tmp_path / "notebook" / "proofread.repo"
    c.create(made, str(sample.segmentation), name="seg", agglomeration=sample.bodies)  # as the notebook does
    panel = dock(viewer, "Proofreading")  # opened after the notebook connected
    assert isinstance(panel, ProofreadingPanel)
    assert panel.repo_edit.text() == str(made)
    assert panel.layer_combo.currentText() == "segmentation"  # the base of what is proofread
    assert panel.version_label.text().startswith(c.version.version.short)  # type: ignore[union-attr]

    c.disconnect()
    c.connect(repo)  # the panel open, the notebook connects another repository
    assert panel.repo_edit.text() == str(repo)
    c.select(largest_body(c))  # layers come (overlays, surfaces): the field keeps naming the repository
    panel.layer_combo.setCurrentText("segmentation")
    assert panel.repo_edit.text() == str(repo)
