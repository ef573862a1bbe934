"""Selection you can see, go-to, the to-do list and the keys, in a real napari viewer (Xvfb) on the EM sample.

The highlight is checked in rendered pixels (``viewer.screenshot(canvas_only=True, flash=False)``, mapped back to
the voxels they show through the camera), go-to through the camera and the dims, the to-do list by
closing the repository and opening it again (statuses read from the repository, not from the panel),
and the keys by real key presses on the canvas. Expected values come from the core (a fresh
``LabelmapVersion``, the label index), never from the panels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import QPoint, Qt

from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.highlight import FIRST
from napari_shardscope.core.proofreading.todo import INSTANCE
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.widgets.canvas import DIMMED_OPACITY, canvas_for
from napari_shardscope.widgets.navigator import NavigatorPanel
from napari_shardscope.widgets.shard_browser import camera
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_proofreading import (  # noqa: F401  (fixture)
    Proofread,
    Z,
    canvas_of,
    created,
    fresh,
    proofread,
    two_bodies,
    world,
)

SHIFT = Qt.KeyboardModifier.ShiftModifier


def navigator(viewer: Any) -> NavigatorPanel:
    _, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", "Navigate")
    assert isinstance(widget, NavigatorPanel)
    return widget


def roomy(viewer: Any, qtbot: Any) -> None:
    """Give the window the screen's width, so the canvas keeps its size from one screenshot to the next.

    At its minimum width (three docks beside the canvas) the window grows by itself when a widget's
    minimum grows (the dims slider's, after a step): a later screenshot was 23 px wider than an earlier.
    """
    viewer.window.resize(1280, 960)
    qt = viewer.window._qt_viewer
    qtbot.waitUntil(lambda: qt.width() >= qt.minimumSizeHint().width() + 100, timeout=10000)


def shot(viewer: Any, qtbot: Any) -> np.ndarray:
    qtbot.wait(30)
    return np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3].astype(int)


def pixel_voxels(viewer: Any, c: ProofreadingController, rows: np.ndarray, cols: np.ndarray,
                 shape: tuple[int, ...]) -> np.ndarray:
    """The scale-0 (y, x) voxel each canvas pixel shows on plane Z (2-D view, camera centre and zoom)."""
    cam = camera(viewer)
    cy, cx = cam.center[-2:]
    g = c.version.scales[0]  # type: ignore[union-attr]
    wy = cy + (rows + 0.5 - shape[0] / 2) / cam.zoom
    wx = cx + (cols + 0.5 - shape[1] / 2) / cam.zoom
    return np.stack([np.round((wy - g.translate[1]) / g.voxel_size[1]),
                     np.round((wx - g.translate[2]) / g.voxel_size[2])], axis=1).astype(int)


def focus_on(viewer: Any, c: ProofreadingController, voxel: tuple[int, int, int], zoom: float = 1.2) -> None:
    viewer.dims.set_point(0, world(c, voxel)[0])
    camera(viewer).center = tuple(world(c, voxel)[1:])
    camera(viewer).zoom = zoom


def test_selected_bodies_are_drawn_on_the_canvas_in_2d_and_3d(created: Proofread, qtbot: Any) -> None:  # noqa: F811
    # `created`, not `proofread`: the shots compared here need one canvas size. After the panel's Create the
    # docks are already as wide as selecting makes them; after its Open (a shorter status line) selecting
    # widened the docks between the two shots (the canvas went from 543 to 498 px wide).
    viewer, _, _, _, c = created
    roomy(viewer, qtbot)
    a, _b, va, _ = two_bodies(c)
    plane = c.version.read_bodies((Z, slice(None), slice(None)))  # type: ignore[union-attr]
    focus_on(viewer, c, va)
    viewer.layers["image"].visible = False
    before = shot(viewer, qtbot)
    c.select(a)
    after = shot(viewer, qtbot)
    assert before.shape == after.shape
    rows, cols = np.nonzero(np.any(before != after, axis=2))
    assert len(rows) > 50  # the outline of the selected body is drawn
    vox = pixel_voxels(viewer, c, rows, cols, before.shape)
    inside = (vox >= 0).all(axis=1) & (vox[:, 0] < plane.shape[0]) & (vox[:, 1] < plane.shape[1])
    near_a = np.zeros(plane.shape, dtype=bool)
    ys, xs = np.nonzero(plane == a)
    for dy in range(-2, 3):  # the outline is a couple of screen pixels wide around the body's edge
        for dx in range(-2, 3):
            near_a[np.clip(ys + dy, 0, plane.shape[0] - 1), np.clip(xs + dx, 0, plane.shape[1] - 1)] = True
    hits = near_a[vox[inside, 0], vox[inside, 1]]
    assert inside.all() and hits.mean() > 0.97, hits.mean()  # every changed pixel is on body a's outline
    # the overlay's values are the core's: body a at the first-selected value, nothing else
    overlay = canvas_for(viewer).selection_layer
    assert overlay is not None and overlay in viewer.layers
    np.testing.assert_array_equal(np.asarray(overlay.data[0][Z]) == FIRST, plane == a)

    # 3-D: the selected body is drawn too (filled: napari draws no contours in 3-D)
    c.clear_selection()
    viewer.dims.ndisplay = 3
    before3 = shot(viewer, qtbot)
    c.select(a)
    after3 = shot(viewer, qtbot)
    assert before3.shape == after3.shape and np.any(before3 != after3)
    assert overlay.contour == 0


def dim_the_others_and_supervoxel_boundaries(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    viewer, panel, repo, _, c = proofread
    a, _b, va, _vb = two_bodies(c)
    nav = navigator(viewer)
    roomy(viewer, qtbot)
    focus_on(viewer, c, va, zoom=1.0)
    c.select(a)
    body_layer = panel.session.body_layer
    assert body_layer is not None
    normal = shot(viewer, qtbot)
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_D, SHIFT)  # the key, as a user presses it
    assert nav.dim_check.isChecked() and body_layer.opacity == pytest.approx(DIMMED_OPACITY)
    dimmed = shot(viewer, qtbot)
    # a pixel deep inside body b (not selected) fades; one deep inside body a stays strong (filled highlight)
    from scipy import ndimage

    plane = c.version.read_bodies((Z, slice(None), slice(None)))  # type: ignore[union-attr]
    canvas_shape = normal.shape
    rows, cols = np.mgrid[0:canvas_shape[0]:4, 0:canvas_shape[1]:4]
    vox = pixel_voxels(viewer, c, rows.ravel(), cols.ravel(), canvas_shape)
    ok = (vox >= 0).all(axis=1) & (vox[:, 0] < plane.shape[0]) & (vox[:, 1] < plane.shape[1])
    deep_a = ndimage.binary_erosion(plane == a, iterations=3)
    deep_others = ndimage.binary_erosion((plane != a) & (plane != 0), iterations=3)
    in_a = np.zeros(len(vox), dtype=bool)
    in_o = np.zeros(len(vox), dtype=bool)
    in_a[ok] = deep_a[vox[ok, 0], vox[ok, 1]]
    in_o[ok] = deep_others[vox[ok, 0], vox[ok, 1]]
    assert in_a.sum() > 10 and in_o.sum() > 10
    r, cc = rows.ravel(), cols.ravel()
    strength = np.abs(dimmed[r, cc] - normal[r, cc]).sum(axis=1)
    assert np.median(strength[in_o]) > 10  # other bodies changed (faded)
    yellow = dimmed[r[in_a], cc[in_a]]
    assert np.median(yellow[:, 0] - yellow[:, 2]) > 60  # body a is tinted yellow (red high, blue low)
    qtbot.mouseClick(nav.dim_check, Qt.MouseButton.LeftButton)
    assert not nav.dim_check.isChecked() and body_layer.opacity > DIMMED_OPACITY

    # supervoxel mode (Shift-T): the supervoxel boundaries inside the selected body are drawn
    assert canvas_for(viewer).supervoxel_layer is None  # made the first time supervoxel mode shows a selection
    before = shot(viewer, qtbot)
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_T, SHIFT)
    svs_layer = canvas_for(viewer).supervoxel_layer
    assert svs_layer is not None
    assert c.mode == "supervoxels" and svs_layer.visible and svs_layer.contour >= 1
    after = shot(viewer, qtbot)
    assert before.shape == after.shape and np.any(before != after)
    shown = np.unique(np.asarray(svs_layer.data[0][Z]))
    members = set(fresh(repo, "main").supervoxels(a))
    assert set(shown.tolist()) - {0} <= members and len(set(shown.tolist()) - {0}) >= 2
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_T, SHIFT)
    assert c.mode == "bodies" and not svs_layer.visible


def hover_shows_body_supervoxel_size_and_last_edit(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    viewer, panel, repo, _, c = proofread
    a, b, va, _vb = two_bodies(c)
    nav = navigator(viewer)
    c.select(a)
    c.add_to_selection(b)
    c.merge()
    focus_on(viewer, c, va)
    canvas = canvas_of(viewer)
    centre = QPoint(canvas.width() // 2, canvas.height() // 2)
    qtbot.mouseMove(canvas, centre - QPoint(1, 0))
    qtbot.mouseMove(canvas, centre)
    qtbot.waitUntil(lambda: canvas_for(viewer).hover is not None and canvas_for(viewer).hover.body == a,
                    timeout=5000)
    hover = canvas_for(viewer).hover
    v = fresh(repo, "main")
    voxel = panel.session.voxel_at(viewer.cursor.position)
    assert voxel is not None and hover is not None
    assert hover.supervoxel == v.supervoxel_at(voxel) and hover.size == v.size(a)
    assert hover.last_edit.startswith("merge by")
    assert f"body {a}" in nav.hover_label.text() and f"{v.size(a):,} voxels" in nav.hover_label.text()
    # napari's own status bar shows it too (the body layer's features for the body under the cursor)
    qtbot.waitUntil(lambda: "supervoxel" in str(viewer.status), timeout=5000)
    assert str(hover.supervoxel) in str(viewer.status) and "last edit" in str(viewer.status)

    # 3-D: the body the cursor's ray meets first (no supervoxel: napari picks at the level it shows)
    viewer.dims.ndisplay = 3
    camera(viewer).zoom = 1.0
    for dx in (2, 0):
        qtbot.mouseMove(canvas, centre - QPoint(dx, 0))
    qtbot.waitUntil(lambda: canvas_for(viewer).hover is not None and canvas_for(viewer).hover.supervoxel == 0,
                    timeout=5000)
    ray = canvas_for(viewer).hover
    assert ray is not None and ray.body != 0 and ray.size == fresh(repo, "main").size(ray.body)
    assert f"body {ray.body}" in nav.hover_label.text()


def go_to_centres_and_zooms_on_the_label_index_box(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    viewer, panel, repo, _, c = proofread
    a, b, _va, vb = two_bodies(c)
    nav = navigator(viewer)
    camera(viewer).zoom = 0.2
    v = fresh(repo, "main")
    g = v.scales[0]
    nav.goto_edit.setText(str(a))
    qtbot.mouseClick(nav.goto_button, Qt.MouseButton.LeftButton)
    assert c.selected == (a,)
    box = v.bbox(a, exact=False)  # the label index's block bounds
    cy = g.translate[1] + ((box.lo[1] + box.hi[1]) / 2 - 0.5) * g.voxel_size[1]
    cx = g.translate[2] + ((box.lo[2] + box.hi[2]) / 2 - 0.5) * g.voxel_size[2]
    assert camera(viewer).center[-2:] == pytest.approx((cy, cx))
    z_world = viewer.dims.point[0]
    z = round((z_world - g.translate[0]) / g.voxel_size[0])
    assert box.lo[0] <= z < box.hi[0]
    assert (v.read_bodies((z, slice(None), slice(None))) == a).any()  # the plane shown holds body a
    h, w = viewer.canvas.size
    extent_y = (box.hi[1] - box.lo[1]) * g.voxel_size[1]
    extent_x = (box.hi[2] - box.lo[2]) * g.voxel_size[2]
    zoom = camera(viewer).zoom
    assert extent_y * zoom <= h and extent_x * zoom <= w  # the whole box is in view
    assert extent_y * zoom >= 0.5 * h or extent_x * zoom >= 0.5 * w  # and fills it
    assert "went to body" in panel.status_label.text()

    sv = v.supervoxels(b)[0]
    nav.go_to(f"sv {sv}")
    assert c.selected == (b,)
    z = round((viewer.dims.point[0] - g.translate[0]) / g.voxel_size[0])
    assert (v.read_supervoxels((z, slice(None), slice(None))) == sv).any()

    nav.go_to(f"{vb[0]}, {vb[1]}, {vb[2]}")  # a voxel, z y x
    assert camera(viewer).center[-2:] == pytest.approx(tuple(world(c, vb)[1:]), abs=g.voxel_size[1])
    assert viewer.dims.point[0] == pytest.approx(world(c, vb)[0])
    assert c.selected == (b,)

    nav.goto_edit.setText("body 999999999")  # a typo is a message, not a traceback
    qtbot.keyClick(nav.goto_edit, Qt.Key.Key_Return)
    assert "does not exist" in c.last_error


def todo_list_walk_and_statuses_survive_a_restart(proofread: Proofread, qtbot: Any, tmp_path: Path) -> None:  # noqa: F811
    """A CSV list walked with keys and buttons, its statuses kept across a restart; then a Neu3 task list (JSON)
    and a committed version, which takes no status."""
    viewer, panel, repo, _, c = proofread
    a, b, _va, vb = two_bodies(c)
    nav = navigator(viewer)
    todo = tmp_path / "assigned.csv"
    todo.write_text(f"body,z,y,x,note\n{a},,,,check the branch\n{b},,,,\n,{vb[0]},{vb[1]},{vb[2]},a point\n")
    nav.load(todo)
    assert nav.list_combo.currentText() == "assigned" and nav.items_list.count() == 3
    canvas = canvas_of(viewer)
    qtbot.keyClick(canvas, Qt.Key.Key_N, SHIFT)  # next item: body a
    assert c.selected == (a,) and nav.items_list.currentRow() == 0
    nav.note_edit.setText("tip fixed")
    qtbot.mouseClick(nav.done_button, Qt.MouseButton.LeftButton)  # done, then the next open item (b)
    assert c.selected == (b,) and nav.items_list.currentRow() == 1
    qtbot.mouseClick(nav.skip_button, Qt.MouseButton.LeftButton)
    assert nav.items_list.currentRow() == 2  # the point: the view is on its plane, centred on it
    assert viewer.dims.point[0] == pytest.approx(world(c, vb)[0])
    qtbot.keyClick(canvas, Qt.Key.Key_B, SHIFT)  # previous
    assert nav.items_list.currentRow() == 1 and c.selected == (b,)
    assert "2 of 3" in nav.progress_label.text()

    # what the repository holds (a fresh handle): the list and the statuses, in the keyvalue instance
    r = open_repository(repo)
    try:
        assert INSTANCE in [i.name for i in r.instances()]
    finally:
        r.close()

    # restart: close the repository, open it again in the panel — and in a fresh controller
    c.disconnect()
    assert nav.items_list.count() == 0
    panel.open_repository(repo)
    assert nav.list_combo.findText("assigned") >= 0
    c.todo.open("assigned")
    statuses = [(e.status, e.note) for e in c.todo.entries]
    assert statuses == [("done", "tip fixed"), ("skipped", ""), ("open", "")]
    assert nav.items_list.item(0).text().startswith("✓") and "tip fixed" in nav.items_list.item(0).text()
    c.disconnect()
    other = ProofreadingController()
    other.connect(repo)
    other.todo.open("assigned")
    assert [(e.status, e.note) for e in other.todo.entries] == statuses
    assert other.todo.entries[0].item.text == "check the branch"
    other.disconnect()

    # the user opens the repository again and loads a Neu3 task list (JSON), then commits the version
    panel.open_repository(repo)
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"file type": "Neu3 task list", "file version": 1, "task list": [
        {"task type": "body review", "body ID": a},
        {"task type": "merge review", "body point 1": [vb[2], vb[1], vb[0]]}]}))  # Neu3 points are x, y, z
    nav.load(tasks)
    assert nav.list_combo.currentText() == "tasks"
    assert [e.item.kind for e in c.todo.entries] == ["body", "point"]
    assert c.todo.entries[1].item.value == vb
    c.commit("reviewed")  # a committed version takes no status: a message says where to go on
    assert c.attempt(c.todo.next) is not None
    assert c.attempt(c.todo.mark, "done") is None and "committed" in c.last_error
    bad = tmp_path / "bad.csv"
    bad.write_text("body\nnot-a-number\n")
    assert c.attempt(nav.load, bad) is None and "bad.csv line 2" in c.last_error


def shortcuts_trigger_the_actions_and_are_listed(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    viewer, panel, repo, _, c = proofread
    a, b, _va, _vb = two_bodies(c)
    nav = navigator(viewer)
    canvas = canvas_of(viewer)
    c.select(a)
    c.add_to_selection(b)
    qtbot.keyClick(canvas, Qt.Key.Key_M, SHIFT)
    assert not fresh(repo, "main").exists(b)
    qtbot.keyClick(canvas, Qt.Key.Key_U, SHIFT)
    assert fresh(repo, "main").exists(b)
    qtbot.keyClick(canvas, Qt.Key.Key_R, SHIFT)
    assert not fresh(repo, "main").exists(b)
    qtbot.keyClick(canvas, Qt.Key.Key_T, SHIFT)
    assert c.mode == "supervoxels"
    qtbot.keyClick(canvas, Qt.Key.Key_X, SHIFT)
    assert c.selected == ()
    qtbot.keyClick(canvas, Qt.Key.Key_N, SHIFT)  # no list yet: a message, no traceback
    assert "load a to-do list" in c.last_error
    for key in ("Shift-M", "Shift-C", "Shift-S", "Shift-U", "Shift-R", "Shift-T", "Shift-D", "Shift-N", "Shift-B"):
        assert key in panel.toolTip() and key in nav.toolTip()
    readme = (Path(__file__).resolve().parents[2] / "docs" / "proofread.md").read_text()  # the key table users read
    for key in ("Shift-T", "Shift-D", "Shift-N", "Shift-B"):
        assert key in readme


# -- user stories ----------------------------------------------------------------------------------------------
# Each story runs steps (the functions above, each named for what it checks, every assertion kept) one after the
# other on one viewer and repository, each starting where the previous one left off: one viewer per story, not per
# step (building and tearing down the viewer, the sample's layers and the body layers costs about 1.5 CPU s).
# Every step finds its bodies (the two largest of plane Z) in the repository as it finds it.


def test_dim_the_others_go_to_then_walk_a_todo_list(proofread: Proofread, qtbot: Any,  # noqa: F811
                                                    tmp_path: Path) -> None:
    """Dim the other bodies and show supervoxel boundaries; go to bodies, supervoxels and voxels; then walk a
    to-do list whose statuses survive a restart."""
    dim_the_others_and_supervoxel_boundaries(proofread, qtbot)
    go_to_centres_and_zooms_on_the_label_index_box(proofread, qtbot)
    todo_list_walk_and_statuses_survive_a_restart(proofread, qtbot, tmp_path)


@pytest.mark.qt_binding_lane
def test_hover_after_a_merge_then_the_shortcuts(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    """Hover over a merged body (2-D and 3-D) for its supervoxel, size and last edit; then every shortcut key."""
    hover_shows_body_supervoxel_size_and_last_edit(proofread, qtbot)
    shortcuts_trigger_the_actions_and_are_listed(proofread, qtbot)
