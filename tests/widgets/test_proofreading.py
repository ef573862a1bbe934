"""The Proofreading and Versions panels in a real napari viewer (Xvfb), on the synthetic EM sample.

Panels are opened as the Plugins menu opens them (``add_plugin_dock_widget`` through napari.yaml)
and driven as a user drives them — real Qt mouse clicks and key presses on the canvas and on the
buttons — or through the controller they render (the same calls a notebook makes). Only public API:
the panels' widgets and methods, the viewer binding's layers, the controller. Every expectation
comes from the core (a ``LabelmapVersion`` of the same repository through a fresh handle) or from
the sample's own arrays, never from the panel.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from qtpy.QtCore import QPoint, Qt

from napari_shardscope.core.errors import ArgumentError, ConflictError
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.session import create_labelmap_repository
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.napari_plugin.sample import sample_volumes
from napari_shardscope.napari_plugin.viewer import add_volumes
from napari_shardscope.widgets.proofreading import SEEDS_NAME, ProofreadingPanel
from napari_shardscope.widgets.session import session_for
from napari_shardscope.widgets.shard_browser import camera
from napari_shardscope.widgets.versions import KEEP_COLUMN, UNCHOSEN, VersionsPanel
from tests.volume_cases import run_lock, run_tmp, sample  # noqa: F401  (fixture)

Z = 32  # the plane the tests look at
LEFT = Qt.MouseButton.LeftButton


class Proofread(NamedTuple):
    viewer: Any
    panel: ProofreadingPanel
    repo: Path
    dock: Any  # the panel's dock widget (what its × removes)
    c: ProofreadingController


def dock(viewer: Any, name: str) -> Any:
    _, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", name)
    return widget


def proofread_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the repository the Proofreading panel's Create makes over the sample is kept, once per test run
    (:func:`~tests.volume_cases.run_tmp`: the sample it indexes is the run's, shared by the xdist workers).

    :func:`_proofread` writes it on first use with the call Create's worker makes (the same base URL, read
    from the viewer's segmentation layer, and the same agglomeration), closed; each test then opens a copy.
    Creating indexes the base and writes the repository: about 0.5 CPU s more per test than copying and
    opening. What Create does in the panel (the worker, hiding the base layer, its status) is asserted on
    the :func:`created` fixture's repository. (A function, not a fixture: the modules that import
    :func:`proofread` need no second import.)
    """
    return run_tmp(tmp_path_factory) / "proofread-template" / "proofread.repo"


def _proofread(viewer: Any, sample: SampleDataset, tmp_path: Path, qtbot: Any,  # noqa: F811
               template: Path | None) -> Proofread:
    add_volumes(viewer, sample_volumes(sample))
    dock_widget, panel = viewer.window.add_plugin_dock_widget("napari-shardscope", "Proofreading")
    assert isinstance(panel, ProofreadingPanel)
    assert panel.agglo_edit.text() == str(sample.bodies)  # the sample's bodies.json is found next to it
    repo = tmp_path / "proofread.repo"
    if template is None:
        panel.create_repository(repo)
        assert panel.busy  # indexing runs in a worker thread
        qtbot.waitUntil(lambda: not panel.busy and panel.controller.state.connected, timeout=60000)
    else:
        seg = viewer.layers["segmentation"]
        with run_lock(template.with_name("lock")):  # one xdist worker writes it, the other waits and finds it
            if not template.exists():  # written beside it, then renamed: a failed write leaves no half template
                partial = template.with_name(f"{template.name}.partial")
                partial.parent.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(partial, ignore_errors=True)
                create_labelmap_repository(partial, panel.layer_url(seg), name="seg",
                                           agglomeration=panel.agglo_edit.text().strip() or None)
                partial.rename(template)
            shutil.copytree(template, repo)
        panel.open_repository(repo)  # the panel's Open, on a copy of what its Create makes
        seg.visible = False  # as Create leaves it: the body layer shows the same labels
    c = panel.controller
    assert c.state.connected and c is session_for(viewer).controller
    viewer.dims.set_current_step(0, Z)
    return Proofread(viewer, panel, repo, dock_widget, c)


@pytest.fixture
def proofread(make_napari_viewer: Any, sample: SampleDataset, tmp_path: Path,  # noqa: F811
              qtbot: Any, tmp_path_factory: pytest.TempPathFactory) -> Proofread:
    """A viewer with the sample, the Proofreading panel, and a repository over the segmentation: a copy of
    the one Create makes (:func:`proofread_template`), opened in the panel, the base layer hidden."""
    return _proofread(make_napari_viewer(show=True), sample, tmp_path, qtbot, proofread_template(tmp_path_factory))


@pytest.fixture
def created(make_napari_viewer: Any, sample: SampleDataset, tmp_path: Path,  # noqa: F811
            qtbot: Any) -> Proofread:
    """:func:`proofread`, the repository made by the panel's Create (indexing in a worker thread)."""
    return _proofread(make_napari_viewer(show=True), sample, tmp_path, qtbot, None)


def two_bodies(c: ProofreadingController) -> tuple[int, int, tuple[int, int, int], tuple[int, int, int]]:
    """The two largest bodies on plane Z and a voxel inside each (scale 0, z y x)."""
    v = c.version
    assert v is not None
    plane = v.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    a, b = (int(i) for i in ids[np.argsort(counts)[::-1][:2]])
    va = tuple(int(x) for x in np.argwhere(plane == a)[len(np.argwhere(plane == a)) // 2])
    vb = tuple(int(x) for x in np.argwhere(plane == b)[len(np.argwhere(plane == b)) // 2])
    return a, b, (Z, va[0], va[1]), (Z, vb[0], vb[1])


def fresh(repo: Path, ref: str) -> Any:
    """The labelmap at ``ref`` read through a new repository handle: what the store holds."""
    r = open_repository(repo)
    return open_labelmap(r, "seg").at(ref)


def world(c: ProofreadingController, voxel: tuple[int, int, int]) -> list[float]:
    g = c.version.scales[0]  # type: ignore[union-attr]
    return [t + x * s for t, x, s in zip(g.translate, voxel, g.voxel_size, strict=True)]


def shown_level0_plane(panel: ProofreadingPanel) -> np.ndarray:
    layer = panel.session.body_layer
    assert layer is not None
    return np.asarray(layer.data[0][Z])


def canvas_of(viewer: Any) -> Any:
    return viewer.window._qt_viewer.canvas.native  # napari's own tests synthesise events here


def conflict_combo(versions: VersionsPanel, key: str) -> Any:
    """The Keep combo box of conflict ``key`` in the conflict list (what a user clicks)."""
    tree = versions.conflict_tree
    for i in range(tree.topLevelItemCount()):
        item = tree.topLevelItem(i)
        if item.data(0, Qt.ItemDataRole.UserRole) == key:  # the row shows "body 12", it records "body:12"
            return tree.itemWidget(item, KEEP_COLUMN)
    raise AssertionError(f"conflict {key} not listed")


@pytest.mark.qt_binding_lane
def test_create_then_click_select_shift_click_merge_undo_redo(created: Proofread, qtbot: Any) -> None:
    """Create in the panel (the fixture: a worker indexes the base), then the clicks and keys of a first edit."""
    viewer, panel, repo, _, c = created
    s = panel.session
    assert s.body_layer is not None and s.body_layer in viewer.layers and s.body_layer.multiscale
    assert not viewer.layers["segmentation"].visible  # the base layer is hidden, never written
    assert "main" in panel.version_label.text() and "open" in panel.version_label.text()
    assert panel.status_label.text().startswith("created")  # the controller's message, shown
    np.testing.assert_array_equal(shown_level0_plane(panel),
                                  fresh(repo, "main").read_bodies((Z, slice(None), slice(None))))
    assert panel.toolTip().count("Shift-") >= 5  # keybindings documented in the tooltip
    a, b, va, vb = two_bodies(c)
    # real mouse clicks on the canvas: centre the view on each body's voxel, click the middle
    canvas = canvas_of(viewer)
    centre = QPoint(canvas.width() // 2, canvas.height() // 2)
    for voxel, mods, expected in ((va, Qt.KeyboardModifier.NoModifier, (a,)),
                                  (vb, Qt.KeyboardModifier.ShiftModifier, (a, b))):
        camera(viewer).center = tuple(world(c, voxel)[1:])
        qtbot.wait(50)
        qtbot.mouseMove(canvas, centre)
        qtbot.mouseClick(canvas, LEFT, modifier=mods, pos=centre)
        qtbot.waitUntil(lambda expected=expected: c.selected == expected, timeout=5000)
    assert [panel.selection_list.item(i).text() for i in range(panel.selection_list.count())] == [str(a), str(b)]
    assert panel.info_labels["id"].text() == str(a)
    # *isolate selected*: the body layer shows only the first selected body, until unchecked
    assert s.body_layer.selected_label == a and not s.body_layer.show_selected_label
    qtbot.mouseClick(panel.isolate_check, LEFT)
    assert panel.isolate_check.isChecked() and s.body_layer.show_selected_label and s.body_layer.selected_label == a
    c.select(b)  # another body selected: the layer isolates it
    assert s.body_layer.selected_label == b and s.body_layer.show_selected_label
    c.select(a)
    c.select(b, add=True)
    assert c.selected == (a, b) and s.body_layer.selected_label == a and s.body_layer.show_selected_label
    qtbot.mouseClick(panel.isolate_check, LEFT)
    assert not panel.isolate_check.isChecked() and not s.body_layer.show_selected_label
    assert panel.merge_button.isEnabled() and not panel.redo_button.isEnabled()
    size_a, size_b = fresh(repo, "main").size(a), fresh(repo, "main").size(b)
    layer = s.body_layer
    arrays_before = list(layer.data)
    # the merge through its key binding, as a user presses it
    qtbot.keyClick(canvas, Qt.Key.Key_M, Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: fresh(repo, "main").body_of(c.version.supervoxel_at(vb)) == a, timeout=5000)
    v = fresh(repo, "main")
    assert v.size(a) == size_a + size_b and not v.exists(b)
    plane = shown_level0_plane(panel)
    assert not (plane == b).any() and plane[vb[1], vb[2]] == a  # the layer shows the merge
    # a merge changes only the map: the body layer keeps its arrays (no chunk re-read, no re-open)
    assert s.body_layer is layer and all(x is y for x, y in zip(layer.data, arrays_before, strict=True))
    assert panel.info_labels["size"].text().startswith(f"{size_a + size_b:,}")
    assert "merge" in panel.info_labels["history"].text()
    assert f"into {a}" in panel.status_label.text()
    qtbot.mouseClick(panel.undo_button, LEFT)
    assert fresh(repo, "main").exists(b)
    assert shown_level0_plane(panel)[vb[1], vb[2]] == b
    assert panel.redo_button.isEnabled()
    qtbot.mouseClick(panel.redo_button, LEFT)
    assert not fresh(repo, "main").exists(b)


def cleave_picked_supervoxels(proofread: Proofread, qtbot: Any) -> None:
    _, panel, repo, _, c = proofread
    v = c.version
    a, _, va, _ = two_bodies(c)
    assert len(v.supervoxels(a)) >= 2
    panel.pick(world(c, va))
    assert c.selected == (a,)
    panel.mode_combo.setCurrentText("supervoxels")  # the combo forwards the mode
    assert c.mode == "supervoxels"
    sv = v.supervoxel_at(va)
    panel.pick(world(c, va))
    assert c.picked == (sv,) and panel.cleave_button.isEnabled() and str(sv) in panel.picked_label.text()
    qtbot.mouseClick(panel.cleave_button, LEFT)
    new = c.selected[1]
    stored = fresh(repo, "main")
    assert stored.body_of(sv) == new and stored.supervoxels(new) == [sv]
    assert shown_level0_plane(panel)[va[1], va[2]] == new
    assert c.selected == (a, new) and c.picked == ()


def split_with_painted_seeds(proofread: Proofread, qtbot: Any) -> None:
    viewer, panel, repo, _, c = proofread
    v = c.version
    a, _, _, _ = two_bodies(c)
    size_before = v.size(a)
    c.select(a)
    qtbot.mouseClick(panel.split_button, LEFT)  # Start split: the seeds layer comes with the pending split
    seeds = panel.seeds_layer
    assert seeds is not None and seeds.name == SEEDS_NAME and not seeds.multiscale and seeds.editable
    assert panel.split_button.text() == "Split" and panel.cancel_split_button.isEnabled()
    assert viewer.layers.selection.active.name == SEEDS_NAME  # (the panel holds napari's proxy of the layer)
    origin = np.asarray(seeds.metadata["split_origin"])
    assert tuple(origin) == c.pending_split.box.lo  # type: ignore[union-attr]
    plane = v.read_bodies((Z, slice(None), slice(None)))
    yx = np.argwhere(plane == a)
    far = yx[np.argmax(((yx - yx[0]) ** 2).sum(axis=1))]
    for label, (y, x) in ((1, yx[0]), (2, far)):  # paint as napari's brush does, in the layer's data
        seeds.paint((Z - origin[0], y - origin[1], x - origin[2]), label, refresh=True)
    groups = panel.collect_seeds()
    assert set(groups) == {1, 2}
    qtbot.mouseClick(panel.split_button, LEFT)  # Split: in a worker thread
    assert panel.busy and not panel.merge_button.isEnabled()
    qtbot.waitUntil(lambda: not panel.busy, timeout=60000)
    assert c.last_error == "" and SEEDS_NAME not in viewer.layers and panel.seeds_layer is None
    assert viewer.layers.selection.active.name == "seg bodies"
    stored = fresh(repo, "main")
    parts = {stored.body_at(tuple(groups[g][0])) for g in (1, 2)}
    assert len(parts) == 2 and a in parts
    assert sum(stored.size(p) for p in parts) == size_before
    shown = shown_level0_plane(panel)
    np.testing.assert_array_equal(shown, stored.read_bodies((Z, slice(None), slice(None))))
    assert set(c.selected) == parts and "split body" in panel.status_label.text()


def committed_version_disables_edits(proofread: Proofread, qtbot: Any) -> None:
    viewer, panel, repo, _, c = proofread
    a, b, _, _ = two_bodies(c)
    c.select(a)
    c.add_to_selection(b)
    versions = dock(viewer, "Versions")
    assert isinstance(versions, VersionsPanel)
    versions.continue_check.setChecked(False)  # commit only: the version stays checked out, read-only
    versions.message_edit.setText("nothing yet")
    qtbot.mouseClick(versions.commit_button, LEFT)
    assert versions.message_edit.text() == "" and not versions.commit_button.isEnabled()
    assert not panel.merge_button.isEnabled()
    assert "committed" in panel.merge_button.toolTip() and "branch" in panel.merge_button.toolTip()
    assert panel.status_label.text() == c.state.edit_block  # why nothing can be edited, shown in the panel
    committed = c.version.uuid  # type: ignore[union-attr]
    before = fresh(repo, committed).mutations()
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_M, Qt.KeyboardModifier.ShiftModifier)  # Shift-M anyway
    assert "committed" in c.last_error and c.last_error in panel.status_label.text()
    assert fresh(repo, committed).mutations() == before


@pytest.mark.qt_binding_lane
def test_versions_panel_commit_branch_checkout_diff(proofread: Proofread, qtbot: Any) -> None:
    viewer, panel, repo, _, c = proofread
    versions = dock(viewer, "Versions")
    a, b, _, vb = two_bodies(c)
    c.version.merge(a, [b])  # an edit made on the version directly (a notebook): the panels follow
    assert versions.tree.topLevelItem(0).text(4) == "1"  # one own edit
    root = c.commit("merged")
    assert open_repository(repo).version(root.uuid).locked
    assert open_repository(repo).version(root.uuid).message == "merged"
    versions.branch_edit.setText("alt")
    qtbot.mouseClick(versions.branch_button, LEFT)
    alt = c.version.version
    r = open_repository(repo)
    assert r.version(alt.uuid).branch == "alt" and not r.version(alt.uuid).locked
    assert r.version(alt.uuid).parents == (root.uuid,)
    assert versions.versions()[0] == alt.uuid and len(versions.versions()) == 2
    assert "●" in versions.tree.topLevelItem(0).text(0)
    new = c.version.cleave(a, [c.version.supervoxel_at(vb)])
    # checkout the committed version by selecting its row and clicking Checkout
    versions.select(root.uuid)
    assert versions.tree.topLevelItem(1).isSelected() and versions.checkout_button.isEnabled()
    qtbot.mouseClick(versions.checkout_button, LEFT)
    assert c.version.uuid == root.uuid
    np.testing.assert_array_equal(shown_level0_plane(panel),
                                  fresh(repo, root.uuid).read_bodies((Z, slice(None), slice(None))))
    assert shown_level0_plane(panel)[vb[1], vb[2]] == a
    assert not panel.merge_button.isEnabled()
    c.checkout("alt")
    assert shown_level0_plane(panel)[vb[1], vb[2]] == new
    # a diff of the two rows, selected as with Ctrl-click
    versions.tree.clearSelection()
    for i in range(2):
        versions.tree.topLevelItem(i).setSelected(True)
    assert c.versions_selected == (alt.uuid, root.uuid) and versions.diff_button.isEnabled()
    qtbot.mouseClick(versions.diff_button, LEFT)
    d = c.last_diff
    assert d is not None and d.relation == "b is an ancestor of a" and d.only_b == ()
    assert [e.mutation.operation for e in d.only_a] == ["cleave"] and new in d.bodies_a
    assert versions.diff_tree.topLevelItemCount() == 1 and versions.diff_label.text() == c.state.diff_summary


def versions_panel_lists_the_newest_versions_of_a_long_history(proofread: Proofread, qtbot: Any) -> None:
    """A long history (written by another handle, in one batch) is listed as its newest versions plus
    the checked-out one, with a line saying how many there are; the viewer keeps its plane."""
    from napari_shardscope.core.proofreading.session import VERSION_ROWS

    viewer, _, repo, _, c = proofread
    root = c.commit("base")
    known = len(open_repository(repo).versions())  # the versions made before: one on a fresh repository
    n = VERSION_ROWS + 50
    with open_repository(repo) as other, other.batch() as b:
        v = b.version(root.uuid)
        for i in range(n):
            v = b.commit(b.new_version(v, "bulk" if i == 0 else None), f"bulk {i}")
        newest = v.uuid
    versions = dock(viewer, "Versions")
    versions.refresh()
    rows = versions.versions()
    assert len(rows) == VERSION_ROWS + 1 and rows[0] == newest and rows[-1] == root.uuid  # the checked-out one last
    assert "●" in versions.tree.topLevelItem(VERSION_ROWS).text(0)
    assert not versions.rows_label.isHidden()
    assert versions.rows_label.text().startswith(f"the newest {VERSION_ROWS + 1:,} of {n + known:,} versions")
    c.checkout(newest)
    assert versions.versions()[0] == newest and "●" in versions.tree.topLevelItem(0).text(0)
    assert len(versions.versions()) == VERSION_ROWS
    assert viewer.dims.current_step[0] == Z


def versions_panel_merges_branches_with_a_choice_per_conflict(proofread: Proofread, qtbot: Any) -> None:
    viewer, panel, repo, _, c = proofread
    versions = dock(viewer, "Versions")
    a, b, va, vb = two_bodies(c)
    root = c.commit("base")
    c.branch("alt")
    c.version.merge(b, [a])  # theirs: a into b
    c.commit("alt: a into b")
    c.branch(None, root.uuid)  # main continues from the base
    c.version.merge(a, [b])  # ours: b into a — the same bodies: a conflict
    c.commit("main: b into a")
    assert versions.theirs_combo.currentText() == "alt" and versions.merge_button.isEnabled()
    qtbot.mouseClick(versions.plan_button, LEFT)
    plan = c.merge_plan
    keys = set(plan.choices)  # type: ignore[union-attr]
    assert keys == {f"body:{a}", f"body:{b}"} and versions.conflict_tree.topLevelItemCount() == 2
    assert "choose keep mine, keep theirs or keep both" in versions.status_label.text()
    with pytest.raises(ConflictError, match="edited on both sides"):  # unresolved: refused, nothing written
        c.merge_branch("alt", resolutions={})
    assert "edited on both sides" in versions.status_label.text()
    assert len(open_repository(repo).versions()) == 3  # base, alt, main: no merge version
    for key in keys:
        conflict_combo(versions, key).setCurrentText("keep theirs")  # the row's Keep box forwards the choice
    assert c.merge_plan.unresolved == ()  # type: ignore[union-attr]
    qtbot.mouseClick(versions.merge_button, LEFT)
    qtbot.waitUntil(lambda: c.idle, timeout=60000)  # the merge runs in a worker
    result_uuid = c.version.uuid
    assert c.last_error == "" and not c.version.version.locked and "merged alt into" in versions.status_label.text()
    assert open_repository(repo).version(result_uuid).parents[1] == open_repository(repo).head("alt").uuid
    stored = fresh(repo, result_uuid)
    assert stored.body_at(va) == b and stored.body_at(vb) == b  # their merge kept, ours reverted
    assert shown_level0_plane(panel)[va[1], va[2]] == b
    assert versions.conflict_tree.topLevelItemCount() == 0


def versions_panel_exports_a_committed_version(proofread: Proofread, qtbot: Any, tmp_path: Path) -> None:
    import tensorstore as ts
    import zarr

    viewer, panel, repo, _, c = proofread
    versions = dock(viewer, "Versions")
    a, b, va, vb = two_bodies(c)
    c.version.merge(a, [b])
    # an open version is refused: the button says why, and a direct call writes nothing
    assert not versions.export_button.isEnabled() and "commit first" in versions.export_button.toolTip()
    with pytest.raises(ArgumentError, match="is open"):
        versions.export(str(tmp_path / "open"))
    assert "is open" in c.last_error and not (tmp_path / "open").exists()
    done = c.commit("merged a and b")
    assert versions.export_button.isEnabled()
    # the button, as a user clicks it: default destination, precomputed, bodies; runs in a worker thread
    active = viewer.layers.selection.active.name
    assert active == panel.session.body_layer.name
    dims = ([tuple(r) for r in viewer.dims.range], viewer.dims.current_step)
    qtbot.mouseClick(versions.export_button, LEFT)
    assert versions.exporting and not versions.export_button.isEnabled()  # the GUI thread is free meanwhile
    qtbot.waitUntil(lambda: c.last_export is not None and not versions.exporting, timeout=120000)
    assert versions.export_button.isEnabled() and c.last_error == ""
    dest = c.default_export_dest(done.uuid)
    assert c.last_export.dest == str(dest) and dest.parent == repo.parent
    expected = fresh(repo, done.uuid)
    for level in range(len(expected.scales)):
        t = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(dest)},
                     "scale_index": level}).result()
        np.testing.assert_array_equal(t[..., 0].read().result().T, expected.read_bodies(..., level))
    assert expected.body_at(va) == expected.body_at(vb) == a
    layer = viewer.layers[f"export {done.short} bodies"]
    assert not layer.visible and layer.multiscale and f"{done.short}" in versions.status_label.text()
    assert "added as layer" in versions.status_label.text()
    assert viewer.layers.selection.active.name == active  # the body layer keeps the clicks
    assert ([tuple(r) for r in viewer.dims.range], viewer.dims.current_step) == dims  # the volume's planes stay
    np.testing.assert_array_equal(np.asarray(layer.data[0][Z]), shown_level0_plane(panel))
    # zarr v3 supervoxels to a chosen directory, without adding a layer
    zdest = tmp_path / "sv.zarr"
    versions.export(str(zdest), ref=done.uuid, fmt="zarr3", labels="supervoxels", show=False)
    qtbot.waitUntil(lambda: c.last_export.dest == str(zdest) and not versions.exporting, timeout=120000)
    group = zarr.open_group(str(zdest), mode="r")
    np.testing.assert_array_equal(group["0"][Z], expected.read_supervoxels((Z, slice(None), slice(None))))
    assert f"export {done.short} supervoxels" not in viewer.layers
    # a destination that already holds a dataset: the worker's typed error is the status line, files untouched
    before = (dest / "info").read_bytes()
    versions.export(str(dest), ref=done.uuid)
    qtbot.waitUntil(lambda: not versions.exporting, timeout=60000)
    assert "already holds a precomputed dataset" in c.last_error and (dest / "info").read_bytes() == before
    assert c.last_error in versions.status_label.text()


def _small_single_scale(tmp_path: Path, sample: SampleDataset) -> Path:  # noqa: F811
    """A single-scale crop of the sample's supervoxels at another voxel size (4, 4, 20 nm)."""
    from napari_shardscope.core.export.precomputed import export_precomputed
    from napari_shardscope.core.export.source import ArraySource
    from napari_shardscope.core.volumes import open_volume

    crop = np.asarray(open_volume(str(sample.segmentation)).levels[0].array[:16, :96, :96].read())
    dest = tmp_path / "small"
    export_precomputed(ArraySource((crop,), ((4.0, 4.0, 20.0),)), str(dest), chunk_size=(32, 32, 16))
    return dest


def test_layers_follow_the_repository_and_stay_read_only(proofread: Proofread, sample: SampleDataset,  # noqa: F811
                                                         tmp_path: Path, qtbot: Any) -> None:
    from napari_shardscope.core.errors import ReadOnlyVolumeError
    from napari_shardscope.core.volumes import open_volume

    viewer, panel, _, _, c = proofread
    dock(viewer, "Versions")
    small = _small_single_scale(tmp_path, sample)
    (base_layer,) = add_volumes(viewer, [open_volume(str(small))])
    with pytest.raises(ReadOnlyVolumeError, match="read-only"):  # napari's paint would write here
        base_layer.data[0:1, 0:1, 0:1] = 7
    # a second repository over a volume of another geometry: the layers take its geometry
    panel.agglo_edit.setText("")  # no agglomeration: every supervoxel its own body
    panel.create_repository(tmp_path / "small.repo", layer=base_layer)
    qtbot.waitUntil(lambda: not panel.busy, timeout=60000)
    layer = panel.session.body_layer
    assert tuple(layer.scale) == (20.0, 4.0, 4.0) and not layer.multiscale and not layer.editable
    assert [ly.name for ly in viewer.layers].count("seg bodies") == 1 and not base_layer.visible
    v = c.version
    np.testing.assert_array_equal(np.asarray(layer.data[3]), v.read_bodies((3, slice(None), slice(None))))
    # a checkout swaps the data of a single-scale layer: napari would make it paintable again
    c.commit("nothing")
    c.branch("alt")
    assert panel.session.body_layer is layer and not layer.editable
    # the user removes the body layer: the next checkout adds both layers again, no stale duplicates
    viewer.layers.remove(layer)
    c.checkout("main")
    names = [ly.name for ly in viewer.layers]
    assert names.count("seg bodies") == 1 and names.count("seg supervoxels") == 1
    assert viewer.layers.selection.active.name == "seg bodies"
    assert panel.is_listening() and panel.session.body_layer is not layer  # clicks go to the new layer


def closing_the_panels_takes_their_keys_and_a_panel_docked_again_finds_the_session(proofread: Proofread,
                                                                                  qtbot: Any) -> None:
    """The dock's × takes the panels' keys and canvas callbacks; docking Proofreading again (each dock gets its
    own proxy of the viewer) finds the same session, which outlived the first panel's proxy."""
    import gc

    viewer, panel, repo, proof_dock, c = proofread
    browser_dock, browser = viewer.window.add_plugin_dock_widget("napari-shardscope", "Shard browser")
    browser.set_cursor_mode(True)
    assert browser.is_listening() and panel.is_listening()
    a, b, _, _ = two_bodies(c)
    c.select(a)
    c.add_to_selection(b)
    for dock_widget in (proof_dock, browser_dock):  # what the dock's × does
        viewer.window.remove_dock_widget(dock_widget)
    assert not browser.is_listening() and not panel.is_listening()
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_M, Qt.KeyboardModifier.ShiftModifier)
    qtbot.wait(100)
    assert fresh(repo, "main").mutations() == []  # Shift-M merges nothing once the panel is gone
    del panel, proof_dock, browser, browser_dock
    gc.collect()
    _, again = viewer.window.add_plugin_dock_widget("napari-shardscope", "Proofreading")
    assert again.controller is c and again.controller.state.connected
    again.controller.select(a)
    again.controller.add_to_selection(b)
    again.controller.merge()
    assert [e.mutation.operation for e in fresh(repo, "main").mutations()] == ["merge"]


def merge_choices_belong_to_the_branch_they_were_made_for(proofread: Proofread, qtbot: Any) -> None:
    viewer, _, repo, _, c = proofread
    versions = dock(viewer, "Versions")
    a, b, _, _ = two_bodies(c)
    root = c.commit("base")
    for name in ("alt", "alt2"):
        c.branch(name, root.uuid)
        c.version.merge(b, [a])
        c.commit(f"{name}: merge")
    c.branch(None, root.uuid)
    c.version.merge(a, [b])
    c.commit("main: merge")
    count = len(open_repository(repo).versions())
    versions.theirs_combo.setCurrentText("alt")
    qtbot.mouseClick(versions.plan_button, LEFT)
    for key in c.merge_plan.choices:  # type: ignore[union-attr]
        conflict_combo(versions, key).setCurrentText("keep theirs")
    versions.theirs_combo.setCurrentText("alt2")  # another branch: alt's choices do not carry over
    assert versions.conflict_tree.topLevelItemCount() == 0 and c.merge_plan is None
    qtbot.mouseClick(versions.merge_button, LEFT)
    qtbot.waitUntil(lambda: c.idle, timeout=60000)  # the merge runs in a worker
    assert "conflicts listed" in c.last_error and versions.conflict_tree.topLevelItemCount() == 2
    assert all(conflict_combo(versions, k).currentText() == UNCHOSEN for k in c.merge_plan.choices)  # type: ignore[union-attr]
    qtbot.mouseClick(versions.merge_button, LEFT)  # listed but no side chosen: still refused
    qtbot.waitUntil(lambda: c.idle, timeout=60000)  # the merge runs in a worker
    assert "edited on both sides" in c.last_error
    assert len(open_repository(repo).versions()) == count  # nothing written
    for key in c.merge_plan.choices:  # type: ignore[union-attr]
        c.choose(key, "ours")
    assert all(conflict_combo(versions, k).currentText() == "keep mine" for k in c.merge_plan.choices)  # type: ignore[union-attr]
    qtbot.mouseClick(versions.merge_button, LEFT)
    qtbot.waitUntil(lambda: c.idle, timeout=60000)  # the merge runs in a worker
    assert c.last_error == ""
    assert open_repository(repo).version(c.version.uuid).parents[1] == open_repository(repo).head("alt2").uuid


def locate_and_shard_map_leave_the_body_layer_active(proofread: Proofread, qtbot: Any) -> None:
    viewer, panel, _, _, _ = proofread
    browser = dock(viewer, "Shard browser")
    browser.layer_combo.setCurrentText("segmentation")
    viewer.layers.selection.active = panel.session.body_layer
    browser.locate_voxel([20, 30, 100])  # z, y, x
    assert browser.outline_layer is not None
    assert viewer.layers.selection.active.name == "seg bodies"
    browser.show_shard_map()
    qtbot.waitUntil(lambda: browser.shard_map_layer is not None and not browser.busy, timeout=20000)
    assert viewer.layers.selection.active.name == "seg bodies"


def split_seeds_belong_to_their_version(proofread: Proofread, qtbot: Any) -> None:
    viewer, panel, _, _, c = proofread
    versions = dock(viewer, "Versions")
    a, _, _, _ = two_bodies(c)
    root = c.commit("base")
    c.branch("alt")
    c.select(a)
    seeds = panel.start_split()
    assert seeds is not None and tuple(seeds.units) == tuple(panel.session.body_layer.units)
    assert seeds.metadata["split_version"] == c.version.uuid == c.pending_split.version  # type: ignore[union-attr]
    versions.select(root.uuid)
    versions.branch_edit.setText("other")
    qtbot.mouseClick(versions.branch_button, LEFT)  # checks out another version: the split is cancelled
    assert c.version.version.branch == "other" and c.pending_split is None
    assert SEEDS_NAME not in viewer.layers and panel.seeds_layer is None
    assert "cancelled" in panel.status_label.text()
    # the user removes a seeds layer: the split is cancelled with it
    c.select(a)
    seeds = panel.start_split()
    viewer.layers.remove(seeds)
    assert c.pending_split is None and panel.split_button.text() == "Start split"


def panel_inputs_give_messages_not_tracebacks(proofread: Proofread, sample: SampleDataset,  # noqa: F811
                                              tmp_path: Path, qtbot: Any) -> None:
    from napari_shardscope.core.volumes import open_volume

    viewer, panel, _, _, c = proofread
    panel.repo_edit.setText("")
    qtbot.mouseClick(panel.create_button, LEFT)
    assert "directory" in c.last_error and "directory" in panel.status_label.text()
    # another segmentation layer in the combo: the fields this panel filled follow it
    small = _small_single_scale(tmp_path, sample)
    (other,) = add_volumes(viewer, [open_volume(str(small))])
    assert panel.agglo_edit.text() == str(sample.bodies)  # filled by the panel for the sample
    panel.layer_combo.setCurrentText(other.name)
    assert panel.repo_edit.text() == str(small.parent / "small.shardscope" / "small.repo")  # beside the data
    assert panel.agglo_edit.text() == ""  # the sample's bodies.json must not group another volume
    panel.agglo_edit.setText("/typed/by/the/user.json")
    panel.layer_combo.setCurrentText("segmentation")
    assert panel.agglo_edit.text() == "/typed/by/the/user.json"
    browser = dock(viewer, "Shard browser")
    browser.layer_combo.setCurrentText("segmentation")
    with pytest.raises(ArgumentError, match="uint64"):  # what the locate box runs for a typed "-3"
        browser.locate("-3", mode="chunk id")


# -- user stories ----------------------------------------------------------------------------------------------
# Each story below runs steps (the functions above, each named for what it checks, every assertion kept) one
# after the other on one viewer and repository, in an order in which each step starts where a user's previous
# step left off. One viewer per story instead of one per step: the viewer, the sample's layers and the body
# layers cost about 1.5 CPU s per test to build and tear down, more than most steps. Every step computes what it
# works on (the two largest bodies of plane Z, the checked-out version) from the repository as it finds it.


def test_cleave_split_seeds_of_a_version_then_commit_refuses_edits(proofread: Proofread, qtbot: Any) -> None:
    """Cleave picked supervoxels; back in body mode, split a body with painted seeds; seeds belong to the
    version they were painted on; commit without continuing, and edits are refused."""
    cleave_picked_supervoxels(proofread, qtbot)
    proofread.panel.mode_combo.setCurrentText("bodies")  # a split is of a whole body
    assert proofread.c.mode == "bodies"
    split_with_painted_seeds(proofread, qtbot)
    split_seeds_belong_to_their_version(proofread, qtbot)
    committed_version_disables_edits(proofread, qtbot)


def test_merge_branches_with_a_choice_per_conflict_then_export(proofread: Proofread, qtbot: Any,
                                                               tmp_path: Path) -> None:
    """Merge two branches choosing a side per conflict, then edit the result, commit it and export it."""
    versions_panel_merges_branches_with_a_choice_per_conflict(proofread, qtbot)
    versions_panel_exports_a_committed_version(proofread, qtbot, tmp_path)


def test_merge_choices_per_branch_then_a_long_history(proofread: Proofread, qtbot: Any) -> None:
    """Choices made for one branch's merge do not carry over to another's; then another handle writes a long
    history over the result, which the Versions panel lists as its newest versions."""
    merge_choices_belong_to_the_branch_they_were_made_for(proofread, qtbot)
    versions_panel_lists_the_newest_versions_of_a_long_history(proofread, qtbot)


def test_shard_browser_beside_proofreading_then_closing_the_panels(proofread: Proofread, sample: SampleDataset,  # noqa: F811
                                                                   tmp_path: Path, qtbot: Any) -> None:
    """The Shard browser's locate and shard map leave the body layer active; wrong inputs in either panel give
    messages; closing both panels takes their keys, and Proofreading docked again finds the session."""
    locate_and_shard_map_leave_the_body_layer_active(proofread, qtbot)
    panel_inputs_give_messages_not_tracebacks(proofread, sample, tmp_path, qtbot)
    closing_the_panels_takes_their_keys_and_a_panel_docked_again_finds_the_session(proofread, qtbot)
