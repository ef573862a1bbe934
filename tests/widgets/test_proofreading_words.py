"""A proofreading day's words and flow in a real napari viewer (Xvfb): notifications that name bodies,
commit-and-continue, any labels layer as a base, conflicts shown in plain words with a jump to the body.

Panels are docked as the Plugins menu docks them and driven through their buttons (qtbot clicks);
expectations come from the store through a fresh repository handle or from napari's own records
(``notification_manager.records``, the camera), never from the panel's own state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from napari.utils.notifications import NotificationSeverity, notification_manager
from qtpy.QtCore import Qt

from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.imported import IMPORTED_DIR
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.widgets.proofreading import ProofreadingPanel
from napari_shardscope.widgets.versions import KEEP_COLUMN, SHOW_COLUMN, VersionsPanel

LEFT = Qt.MouseButton.LeftButton


def cells() -> np.ndarray:
    """Three bodies in a small labels volume (napari's default signed dtype)."""
    labels = np.zeros((6, 40, 48), dtype=np.int32)
    labels[1:5, 4:18, 4:20] = 3
    labels[1:5, 22:36, 4:20] = 7
    labels[1:5, 4:36, 28:44] = 9
    return labels


def notes(since: int, severity: NotificationSeverity | None = None) -> list[str]:
    return [str(n.message) for n in notification_manager.records[since:] if severity is None or n.severity == severity]


@pytest.fixture
def labels_day(make_napari_viewer: Any, tmp_path: Path, qtbot: Any,
               monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ProofreadingPanel, Path, ProofreadingController]:
    """A viewer with a numpy labels layer (no file) made the base of a new repository from the panel."""
    monkeypatch.setenv("SHARDSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    viewer = make_napari_viewer(show=True)
    viewer.add_labels(cells(), name="cells", scale=(40.0, 8.0, 8.0))
    _, panel = viewer.window.add_plugin_dock_widget("napari-shardscope", "Proofreading")
    assert isinstance(panel, ProofreadingPanel)
    assert panel.layer_combo.currentText() == "cells"  # a plain labels layer is offered for proofreading
    repo = tmp_path / "cells.repo"
    panel.repo_edit.setText(str(repo))
    qtbot.mouseClick(panel.create_button, LEFT)
    c = panel.controller
    qtbot.waitUntil(lambda: c.idle and c.state.connected, timeout=60000)
    return viewer, panel, repo, c


def an_imported_labels_layer_is_merged_committed_and_reopens(labels_day: Any, qtbot: Any) -> None:
    viewer, panel, repo, c = labels_day
    base = repo / IMPORTED_DIR / "cells"
    assert c.version is not None and c.version.labelmap.config.base == str(base) and (base / "zarr.json").is_file()
    assert not viewer.layers["cells"].visible and panel.session.body_layer is not None  # the body layer shows it
    assert panel.session.body_layer.scale.tolist() == [40.0, 8.0, 8.0]
    start = len(notification_manager.records)
    c.select(3)
    c.add_to_selection(7)
    qtbot.mouseClick(panel.merge_button, LEFT)
    assert notes(start, NotificationSeverity.INFO) == ["merged body 7 into 3"]
    versions = viewer.window.add_plugin_dock_widget("napari-shardscope", "Versions")[1]
    assert isinstance(versions, VersionsPanel) and versions.continue_check.isChecked()
    committed = c.version.version
    versions.message_edit.setText("cells 3 and 7 are one")
    qtbot.mouseClick(versions.commit_button, LEFT)
    child = c.version.version
    assert child.uuid != committed.uuid and child.branch == committed.branch == "main" and not child.locked
    assert panel.merge_button.isEnabled() is False and "two or more" in panel.merge_button.toolTip()  # open: edits ok
    said = f'committed {committed.short} ("cells 3 and 7 are one"); now editing {child.short} on main'
    assert notes(start)[-1] == said
    r = open_repository(repo)
    assert r.version(committed.uuid).locked and r.version(child.uuid).parents == (committed.uuid,)
    r.close()
    c.disconnect()
    again = ProofreadingController()  # a later session reopens it: the base lives in the repository
    again.connect(repo)
    assert again.version is not None and again.version.uuid == child.uuid
    assert again.version.body_at((2, 30, 10)) == 3 and again.version.body_at((2, 10, 30)) == 9
    again.disconnect()


def test_notifications_name_bodies_then_a_merge_is_committed_and_reopens(labels_day: Any, qtbot: Any) -> None:
    """Results and refusals are napari notifications naming bodies (a merge undone); then the same bodies merged
    again, committed, and the repository reopened by a later session. The steps (each named for what it checks,
    every assertion kept) share one viewer: building and tearing down a viewer costs about 1 CPU s."""
    results_and_refusals_are_napari_notifications_naming_bodies(labels_day, qtbot)
    an_imported_labels_layer_is_merged_committed_and_reopens(labels_day, qtbot)


def results_and_refusals_are_napari_notifications_naming_bodies(labels_day: Any, qtbot: Any) -> None:
    viewer, panel, repo, c = labels_day
    start = len(notification_manager.records)
    c.select(9)
    qtbot.keyClick(viewer.window._qt_viewer.canvas.native, Qt.Key.Key_M, Qt.KeyboardModifier.ShiftModifier)
    assert notes(start, NotificationSeverity.ERROR) == ["select two or more bodies to merge (Shift-click adds one)"]
    c.add_to_selection(3)
    c.add_to_selection(7)
    c.merge()
    c.undo()
    assert notes(start, NotificationSeverity.INFO) == ["merged 2 bodies (3 and 7) into 9",
                                                      "undid: merge of 3 and 7 into 9"]
    assert "undid: merge of 3 and 7 into 9" in panel.status_label.text()  # the panel's line says the same
    lm = open_labelmap(open_repository(repo), "seg")
    assert lm.at("main").body_of(3) == 3  # undone in the store too


@pytest.mark.qt_binding_lane
def test_a_conflict_in_plain_words_jumps_to_its_body(labels_day: Any, qtbot: Any) -> None:
    viewer, _, repo, c = labels_day
    versions = viewer.window.add_plugin_dock_widget("napari-shardscope", "Versions")[1]
    root = c.commit("base")
    c.branch("alt")
    c.select(9)
    c.add_to_selection(3)
    c.merge()
    c.commit("alt: 3 into 9")
    c.branch(None, root.uuid)
    c.select(9)
    c.add_to_selection(7)
    c.merge()
    c.commit("main: 7 into 9")
    qtbot.mouseClick(versions.plan_button, LEFT)
    tree = versions.conflict_tree
    assert tree.topLevelItemCount() == 1
    row = tree.topLevelItem(0)
    assert [row.text(i) for i in (0, 3, 4)] == ["body 9", "merge of 7 into 9", "merge of 3 into 9"]
    assert versions.conflict_label.text() == "body 9: you did merge of 7 into 9; alt did merge of 3 into 9"
    keep = tree.itemWidget(row, KEEP_COLUMN)
    assert [keep.itemText(i) for i in range(keep.count())][1:] == ["keep mine", "keep theirs", "keep both"]
    viewer.camera.center = (0.0, 0.0)
    qtbot.mouseClick(tree.itemWidget(row, SHOW_COLUMN), LEFT)  # Show
    box = c.version.bbox(9, exact=False)  # type: ignore[union-attr]
    # as every go-to: centred on the box's voxel edges (voxel i spans i ± ½), on a plane that shows body 9
    mid_y, mid_x = [((lo + hi) / 2 - 0.5) * 8.0 for lo, hi in zip(box.lo[1:], box.hi[1:], strict=True)]
    assert viewer.camera.center[-2:] == pytest.approx((mid_y, mid_x)) and c.selected == (9,)
    z = viewer.dims.current_step[0]
    assert (c.version.read_bodies((z, slice(None), slice(None))) == 9).any()  # type: ignore[union-attr]
    keep.setCurrentText("keep both")
    assert c.merge_plan is not None and c.merge_plan.choices == {"body:9": "both"}
    qtbot.mouseClick(versions.merge_button, LEFT)
    qtbot.waitUntil(lambda: c.idle, timeout=60000)
    assert c.last_error == "" and c.state.status.text.startswith("merged alt into main")
    stored = open_labelmap(open_repository(repo), "seg").at(c.version.uuid)  # type: ignore[union-attr]
    assert stored.body_of(3) == stored.body_of(7) == 9  # both sides' merges kept
