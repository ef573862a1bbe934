"""The Proofreading and Versions panels in a real napari viewer (Xvfb), on the synthetic EM sample.

Panels are opened as the Plugins menu opens them (``add_plugin_dock_widget`` through napari.yaml)
and driven through their public methods and real Qt mouse and key events. Every expectation comes
from the core (a fresh ``LabelmapVersion`` of the same repository) or from the sample's own arrays,
never from the panel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import QPoint, Qt

from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.napari_plugin.sample import sample_volumes
from napari_shardscope.napari_plugin.viewer import add_volumes
from napari_shardscope.widgets.proofreading import SEEDS_NAME, ProofreadingPanel
from napari_shardscope.widgets.session import session_for
from napari_shardscope.widgets.versions import VersionsPanel
from tests.test_volume_support import sample  # noqa: F401  (fixture)

Z = 32  # the plane the tests look at


def dock(viewer: Any, name: str) -> Any:
    _, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", name)
    return widget


@pytest.fixture
def proofread(make_napari_viewer: Any, sample: SampleDataset, tmp_path: Path,  # noqa: F811
              qtbot: Any) -> tuple[Any, ProofreadingPanel, Path]:
    """A viewer with the sample, the Proofreading panel, and a new repository over the segmentation."""
    viewer = make_napari_viewer(show=True)
    add_volumes(viewer, sample_volumes(sample))
    panel = dock(viewer, "Proofreading")
    assert isinstance(panel, ProofreadingPanel)
    assert panel.agglo_edit.text() == str(sample.bodies)  # the sample's bodies.json is found next to it
    repo = tmp_path / "proofread.repo"
    panel.create_repository(repo)
    qtbot.waitUntil(lambda: not panel.busy and panel.session.is_connected, timeout=60000)
    viewer.dims.set_current_step(0, Z)
    return viewer, panel, repo


def two_bodies(panel: ProofreadingPanel) -> tuple[int, int, tuple[int, int, int], tuple[int, int, int]]:
    """The two largest bodies on plane Z and a voxel inside each (scale 0, z y x)."""
    v = panel.session.version
    assert v is not None
    plane = v.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    a, b = (int(i) for i in ids[np.argsort(counts)[::-1][:2]])
    va = tuple(int(c) for c in np.argwhere(plane == a)[len(np.argwhere(plane == a)) // 2])
    vb = tuple(int(c) for c in np.argwhere(plane == b)[len(np.argwhere(plane == b)) // 2])
    return a, b, (Z, va[0], va[1]), (Z, vb[0], vb[1])


def fresh(repo: Path, ref: str) -> Any:
    """The labelmap at ``ref`` read through a new repository handle: what the store holds."""
    r = open_repository(repo)
    return open_labelmap(r, "seg").at(ref)


def world(panel: ProofreadingPanel, voxel: tuple[int, int, int]) -> list[float]:
    g = panel.session.version.scales[0]  # type: ignore[union-attr]
    return [t + c * s for t, c, s in zip(g.translate, voxel, g.voxel_size, strict=True)]


def shown_level0_plane(panel: ProofreadingPanel) -> np.ndarray:
    layer = panel.session.body_layer
    assert layer is not None
    return np.asarray(layer.data[0][Z])


def test_all_three_panels_are_in_the_plugins_menu(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    from tests.test_widget_shard_browser import plugin_menu_titles

    titles = plugin_menu_titles()
    for name in ("Shard browser", "Proofreading", "Versions"):
        assert any(t.startswith(name) for t in titles), (name, titles)


def test_create_shows_bodies_and_hides_base(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    viewer, panel, repo = proofread
    s = panel.session
    assert s.body_layer is not None and s.body_layer in viewer.layers and s.body_layer.multiscale
    assert not viewer.layers["segmentation"].visible  # the base layer is hidden, never written
    assert "main" in panel.version_label.text() and "open" in panel.version_label.text()
    v = fresh(repo, "main")
    np.testing.assert_array_equal(shown_level0_plane(panel), v.read_bodies((Z, slice(None), slice(None))))
    assert panel.toolTip().count("Shift-") >= 5  # keybindings documented in the tooltip


def test_click_select_shift_click_merge_undo_redo(proofread: tuple[Any, ProofreadingPanel, Path], qtbot: Any) -> None:
    viewer, panel, repo = proofread
    a, b, va, vb = two_bodies(panel)
    # real mouse clicks on the canvas: centre the view on each body's voxel, click the middle
    canvas = viewer.window._qt_viewer.canvas.native
    centre = QPoint(canvas.width() // 2, canvas.height() // 2)
    for voxel, mods, expected in ((va, Qt.KeyboardModifier.NoModifier, [a]),
                                  (vb, Qt.KeyboardModifier.ShiftModifier, [a, b])):
        pos = world(panel, voxel)
        from napari_shardscope.widgets.shard_browser import camera

        camera(viewer).center = tuple(pos[1:])
        qtbot.wait(50)
        qtbot.mouseMove(canvas, centre)
        qtbot.mouseClick(canvas, Qt.MouseButton.LeftButton, modifier=mods, pos=centre)
        qtbot.waitUntil(lambda expected=expected: panel.selected == expected, timeout=5000)
    assert panel.info_labels["id"].text() == str(a)
    assert panel.merge_button.isEnabled()
    size_a, size_b = fresh(repo, "main").size(a), fresh(repo, "main").size(b)
    # the merge through its key binding, as a user presses it
    qtbot.keyClick(canvas, Qt.Key.Key_M, Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: fresh(repo, "main").body_of(panel.session.version.supervoxel_at(vb)) == a, timeout=5000)
    v = fresh(repo, "main")
    assert v.size(a) == size_a + size_b and not v.exists(b)
    plane = shown_level0_plane(panel)
    assert not (plane == b).any() and plane[vb[1], vb[2]] == a  # the layer shows the merge
    assert panel.info_labels["size"].text().startswith(f"{size_a + size_b:,}")
    assert "merge" in panel.info_labels["history"].text()
    panel.undo()
    assert fresh(repo, "main").exists(b)
    assert shown_level0_plane(panel)[vb[1], vb[2]] == b
    panel.redo()
    assert not fresh(repo, "main").exists(b)


def test_merge_rereads_no_chunk(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    """A merge changes only the map: the body layer keeps its arrays and shows the merge on refresh."""
    _, panel, _ = proofread
    a, b, _, vb = two_bodies(panel)
    layer = panel.session.body_layer
    arrays_before = list(layer.data)
    shown_level0_plane(panel)  # warm the cache
    panel.select(a)
    panel.select(b, add=True)
    panel.merge_selected()
    assert all(x is y for x, y in zip(layer.data, arrays_before, strict=True))  # no new arrays, no re-open
    assert shown_level0_plane(panel)[vb[1], vb[2]] == a


def test_cleave_picked_supervoxels(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    _, panel, repo = proofread
    v = panel.session.version
    a, _, va, _ = two_bodies(panel)
    svs = v.supervoxels(a)
    assert len(svs) >= 2
    panel.pick(world(panel, va))
    assert panel.selected == [a]
    panel.set_mode("supervoxels")
    sv = v.supervoxel_at(va)
    panel.pick(world(panel, va))
    assert panel.picked == [sv] and panel.cleave_button.isEnabled()
    new = panel.cleave_picked()
    stored = fresh(repo, "main")
    assert stored.body_of(sv) == new and stored.supervoxels(new) == [sv]
    assert shown_level0_plane(panel)[va[1], va[2]] == new
    assert panel.selected == [a, new]


def test_split_with_painted_seeds(proofread: tuple[Any, ProofreadingPanel, Path], qtbot: Any) -> None:
    viewer, panel, repo = proofread
    v = panel.session.version
    a, _, _, _ = two_bodies(panel)
    size_before = v.size(a)
    panel.select(a)
    seeds = panel.start_split()
    assert seeds.name == SEEDS_NAME and not seeds.multiscale and seeds.editable
    origin = np.asarray(seeds.metadata["split_origin"])
    plane = v.read_bodies((Z, slice(None), slice(None)))
    yx = np.argwhere(plane == a)
    far = yx[np.argmax(((yx - yx[0]) ** 2).sum(axis=1))]
    for label, (y, x) in ((1, yx[0]), (2, far)):  # paint as napari's brush does, in the layer's data
        seeds.paint((Z - origin[0], y - origin[1], x - origin[2]), label, refresh=True)
    groups = panel.seed_groups()
    assert set(groups) == {1, 2}
    panel.finish_split()
    qtbot.waitUntil(lambda: not panel.busy, timeout=60000)
    assert panel.last_error == "" and SEEDS_NAME not in viewer.layers
    stored = fresh(repo, "main")
    parts = {stored.body_at(tuple(groups[g][0])) for g in (1, 2)}
    assert len(parts) == 2 and a in parts
    assert sum(stored.size(p) for p in parts) == size_before
    shown = shown_level0_plane(panel)
    np.testing.assert_array_equal(shown, stored.read_bodies((Z, slice(None), slice(None))))
    assert set(panel.selected) == parts


def test_committed_version_disables_edits(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    viewer, panel, repo = proofread
    a, b, _, _ = two_bodies(panel)
    panel.select(a)
    panel.select(b, add=True)
    versions = dock(viewer, "Versions")
    assert isinstance(versions, VersionsPanel)
    versions.commit("nothing yet")
    assert not panel.merge_button.isEnabled()
    assert "committed" in panel.merge_button.toolTip() and "branch" in panel.merge_button.toolTip()
    before = fresh(repo, "main").mutations()
    assert panel.merge_selected.__self__ is panel
    panel._guard(panel.merge_selected)
    assert "committed" in panel.last_error and fresh(repo, "main").mutations() == before


def test_versions_panel_commit_branch_checkout_diff(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    viewer, panel, repo = proofread
    versions = dock(viewer, "Versions")
    session = session_for(viewer)
    a, b, _, vb = two_bodies(panel)
    session.version.merge(a, [b])
    root = versions.commit("merged")
    assert open_repository(repo).version(root.uuid).locked
    assert open_repository(repo).version(root.uuid).message == "merged"
    alt = versions.new_branch("alt")
    r = open_repository(repo)
    assert r.version(alt.uuid).branch == "alt" and not r.version(alt.uuid).locked
    assert r.version(alt.uuid).parents == (root.uuid,)
    assert versions.versions()[0] == alt.uuid and len(versions.versions()) == 2
    assert panel.merge_button.isEnabled() or panel.selected == []  # open again: edits allowed
    new = session.version.cleave(a, [session.version.supervoxel_at(vb)])
    # checkout the committed version: the layer shows its bodies, not the branch's cleave
    versions.select(root.uuid)
    versions.checkout(root.uuid)
    assert session.version.uuid == root.uuid
    np.testing.assert_array_equal(shown_level0_plane(panel),
                                  fresh(repo, root.uuid).read_bodies((Z, slice(None), slice(None))))
    assert shown_level0_plane(panel)[vb[1], vb[2]] == a
    assert not panel.merge_button.isEnabled()
    versions.checkout("alt")
    assert shown_level0_plane(panel)[vb[1], vb[2]] == new
    d = versions.diff(root.uuid, alt.uuid)
    assert d.relation == "a is an ancestor of b" and d.only_a == ()
    assert [e.mutation.operation for e in d.only_b] == ["cleave"] and new in d.bodies_b
    assert versions.diff_tree.topLevelItemCount() == 1


def test_versions_panel_merges_branches_with_a_choice_per_conflict(
        proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    viewer, panel, repo = proofread
    versions = dock(viewer, "Versions")
    session = session_for(viewer)
    a, b, va, vb = two_bodies(panel)
    root = versions.commit("base")
    versions.new_branch("alt")
    session.version.merge(b, [a])  # theirs: a into b
    versions.commit("alt: a into b")
    versions.new_branch(None, root.uuid)  # main continues from the base
    session.version.merge(a, [b])  # ours: b into a — the same bodies: a conflict
    versions.commit("main: b into a")
    assert versions.theirs_combo.currentText() == "alt" and versions.merge_button.isEnabled()
    plan = versions.plan_merge("alt")
    keys = {c.key for c in plan.conflicts}
    assert keys == {f"body:{a}", f"body:{b}"} and versions.conflict_tree.topLevelItemCount() == 2
    versions._guard(lambda: versions.merge("alt", resolutions={}))  # unresolved: refused, nothing written
    assert "edited on both sides" in versions.last_error
    assert len(open_repository(repo).versions()) == 3  # base, alt, main: no merge version
    for key in keys:
        versions.choose(key, "theirs")
    result = versions.merge("alt")
    assert session.version.uuid == result.version.uuid and not result.version.locked
    assert open_repository(repo).version(result.version.uuid).parents[1] == open_repository(repo).head("alt").uuid
    stored = fresh(repo, result.version.uuid)
    assert stored.body_at(va) == b and stored.body_at(vb) == b  # their merge kept, ours reverted
    assert shown_level0_plane(panel)[va[1], va[2]] == b
    assert panel.merge_button.isEnabled() or not panel.selected  # the merge version is open: edits allowed


def test_versions_panel_exports_a_committed_version(proofread: tuple[Any, ProofreadingPanel, Path], qtbot: Any,
                                                    tmp_path: Path) -> None:
    import tensorstore as ts
    import zarr

    viewer, panel, repo = proofread
    versions = dock(viewer, "Versions")
    session = session_for(viewer)
    a, b, va, vb = two_bodies(panel)
    session.version.merge(a, [b])
    # an open version is refused: the button says why, and a direct call writes nothing
    assert not versions.export_button.isEnabled() and "commit first" in versions.export_button.toolTip()
    versions._guard(lambda: versions.export(str(tmp_path / "open")))
    assert "is open" in versions.last_error and not (tmp_path / "open").exists()
    done = versions.commit("merged a and b")
    assert versions.export_button.isEnabled()
    # the button, as a user clicks it: default destination, precomputed, bodies; runs in a worker thread
    active = viewer.layers.selection.active.name
    assert active == session.body_layer.name
    qtbot.mouseClick(versions.export_button, Qt.MouseButton.LeftButton)
    assert versions._exports and not versions.export_button.isEnabled()  # the GUI thread is free meanwhile
    qtbot.waitUntil(lambda: versions.last_export is not None and not versions._exports, timeout=120000)
    assert versions.export_button.isEnabled() and versions.last_error == ""
    dest = versions.default_export_dest(done.uuid)
    assert versions.last_export.dest == str(dest) and dest.parent == repo.parent
    expected = fresh(repo, done.uuid)
    for level in range(len(expected.scales)):
        t = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(dest)},
                     "scale_index": level}).result()
        np.testing.assert_array_equal(t[..., 0].read().result().T, expected.read_bodies(..., level))
    assert expected.body_at(va) == expected.body_at(vb) == a
    layer = viewer.layers[f"export {done.short} bodies"]
    assert not layer.visible and layer.multiscale and f"{done.short}" in versions.status_label.text()
    assert viewer.layers.selection.active.name == active  # the body layer keeps the clicks
    np.testing.assert_array_equal(np.asarray(layer.data[0][Z]), shown_level0_plane(panel))
    # zarr v3 supervoxels to a chosen directory, without adding a layer
    zdest = tmp_path / "sv.zarr"
    versions.export(str(zdest), ref=done.uuid, fmt="zarr3", labels="supervoxels", show=False)
    qtbot.waitUntil(lambda: versions.last_export.dest == str(zdest) and not versions._exports, timeout=120000)
    group = zarr.open_group(str(zdest), mode="r")
    np.testing.assert_array_equal(group["0"][Z], expected.read_supervoxels((Z, slice(None), slice(None))))
    assert f"export {done.short} supervoxels" not in viewer.layers
    # a destination that already holds a dataset: the worker's typed error is the status line, files untouched
    before = (dest / "info").read_bytes()
    versions.export(str(dest), ref=done.uuid)
    qtbot.waitUntil(lambda: not versions._exports, timeout=60000)
    assert "already holds a precomputed dataset" in versions.last_error and (dest / "info").read_bytes() == before


def _small_single_scale(tmp_path: Path, sample: SampleDataset) -> Path:  # noqa: F811
    """A single-scale crop of the sample's supervoxels at another voxel size (4, 4, 20 nm)."""
    from napari_shardscope.core.export.precomputed import export_precomputed
    from napari_shardscope.core.export.source import ArraySource
    from napari_shardscope.core.volumes import open_volume

    crop = np.asarray(open_volume(str(sample.segmentation)).levels[0].array[:16, :96, :96].read())
    dest = tmp_path / "small"
    export_precomputed(ArraySource((crop,), ((4.0, 4.0, 20.0),)), str(dest), chunk_size=(32, 32, 16))
    return dest


def test_layers_follow_the_repository_and_stay_read_only(proofread: tuple[Any, ProofreadingPanel, Path],
                                                         sample: SampleDataset, tmp_path: Path,  # noqa: F811
                                                         qtbot: Any) -> None:
    from napari_shardscope.core.errors import ReadOnlyVolumeError
    from napari_shardscope.core.volumes import open_volume

    viewer, panel, _ = proofread
    versions = dock(viewer, "Versions")
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
    v = panel.session.version
    np.testing.assert_array_equal(np.asarray(layer.data[3]), v.read_bodies((3, slice(None), slice(None))))
    # a checkout swaps the data of a single-scale layer: napari would make it paintable again
    versions.commit("nothing")
    versions.new_branch("alt")
    assert panel.session.body_layer is layer and not layer.editable
    # the user removes the body layer: the next checkout adds both layers again, no stale duplicates
    viewer.layers.remove(layer)
    versions.checkout("main")
    names = [ly.name for ly in viewer.layers]
    assert names.count("seg bodies") == 1 and names.count("seg supervoxels") == 1
    assert viewer.layers.selection.active.name == "seg bodies"


def test_closing_the_panels_takes_their_keys_and_callbacks(proofread: tuple[Any, ProofreadingPanel, Path],
                                                           qtbot: Any) -> None:
    viewer, panel, repo = proofread
    browser_dock, browser = viewer.window.add_plugin_dock_widget("napari-shardscope", "Shard browser")
    browser.set_cursor_mode(True)
    assert browser._on_mouse_move in viewer.mouse_move_callbacks
    a, b, _, _ = two_bodies(panel)
    panel.select(a)
    panel.select(b, add=True)
    proof_dock = next(d for d in viewer.window._dock_widgets.values() if d.widget() is panel)
    for dock_widget in (proof_dock, browser_dock):  # what the dock's × does
        viewer.window.remove_dock_widget(dock_widget)
    assert browser._on_mouse_move not in viewer.mouse_move_callbacks
    assert browser._on_mouse_press not in viewer.mouse_drag_callbacks
    assert panel._on_click not in panel.session.body_layer.mouse_drag_callbacks
    canvas = viewer.window._qt_viewer.canvas.native
    qtbot.keyClick(canvas, Qt.Key.Key_M, Qt.KeyboardModifier.ShiftModifier)
    qtbot.wait(100)
    assert fresh(repo, "main").mutations() == []  # Shift-M merges nothing once the panel is gone


def test_merge_choices_belong_to_the_branch_they_were_made_for(
        proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    viewer, panel, repo = proofread
    versions = dock(viewer, "Versions")
    session = session_for(viewer)
    a, b, _, _ = two_bodies(panel)
    root = versions.commit("base")
    for name, (target, other) in (("alt", (b, a)), ("alt2", (b, a))):
        versions.new_branch(name, root.uuid)
        session.version.merge(target, [other])
        versions.commit(f"{name}: merge")
    versions.new_branch(None, root.uuid)
    session.version.merge(a, [b])
    versions.commit("main: merge")
    count = len(open_repository(repo).versions())
    versions.theirs_combo.setCurrentText("alt")
    plan = versions.plan_merge("alt")
    for c in plan.conflicts:
        versions.choose(c.key, "theirs")
    versions.theirs_combo.setCurrentText("alt2")  # another branch: alt's choices do not carry over
    assert versions.conflict_tree.topLevelItemCount() == 0
    versions._guard(lambda: versions.merge("alt2"))
    assert "conflict(s) listed" in versions.last_error and versions.conflict_tree.topLevelItemCount() == 2
    versions._guard(lambda: versions.merge("alt2"))  # listed but no side chosen: still refused
    assert "edited on both sides" in versions.last_error
    assert len(open_repository(repo).versions()) == count  # nothing written
    for c in versions.last_plan.conflicts:
        versions.choose(c.key, "ours")
    result = versions.merge("alt2")
    assert open_repository(repo).version(result.version.uuid).parents[1] == open_repository(repo).head("alt2").uuid


def test_locate_and_shard_map_leave_the_body_layer_active(proofread: tuple[Any, ProofreadingPanel, Path],
                                                          qtbot: Any) -> None:
    viewer, panel, _ = proofread
    browser = dock(viewer, "Shard browser")
    browser.layer_combo.setCurrentText("segmentation")
    viewer.layers.selection.active = panel.session.body_layer
    browser.locate_voxel([100, 30, 20])
    assert browser.outline_layer is not None
    assert viewer.layers.selection.active.name == "seg bodies"
    browser.show_shard_map()
    qtbot.waitUntil(lambda: browser.shard_map_layer is not None and not browser.busy, timeout=20000)
    assert viewer.layers.selection.active.name == "seg bodies"


def test_split_seeds_belong_to_their_version(proofread: tuple[Any, ProofreadingPanel, Path]) -> None:
    viewer, panel, _ = proofread
    versions = dock(viewer, "Versions")
    a, _, _, _ = two_bodies(panel)
    root = versions.commit("base")
    versions.new_branch("alt")
    panel.select(a)
    seeds = panel.start_split()
    assert tuple(seeds.units) == tuple(panel.session.body_layer.units)
    assert seeds.metadata["split_version"] == panel.session.version.uuid
    versions.new_branch("other", root.uuid)  # checks out another version: the split is cancelled
    assert SEEDS_NAME not in viewer.layers and panel.seeds_layer is None
    assert "cancelled" in panel.status_label.text()


def test_panel_inputs_give_messages_not_tracebacks(proofread: tuple[Any, ProofreadingPanel, Path],
                                                   sample: SampleDataset, tmp_path: Path,  # noqa: F811
                                                   qtbot: Any) -> None:
    from napari_shardscope.core.volumes import open_volume

    viewer, panel, _ = proofread
    panel.repo_edit.setText("")
    qtbot.mouseClick(panel.create_button, Qt.MouseButton.LeftButton)
    assert "directory" in panel.last_error
    # another segmentation layer in the combo: the fields this panel filled follow it
    small = _small_single_scale(tmp_path, sample)
    (other,) = add_volumes(viewer, [open_volume(str(small))])
    panel.agglo_edit.setText(str(sample.bodies))
    panel._suggested[panel.agglo_edit] = str(sample.bodies)
    panel.layer_combo.setCurrentText(other.name)
    assert panel.repo_edit.text() == str(small.parent / "small.repo")
    assert panel.agglo_edit.text() == ""  # the sample's bodies.json must not group another volume
    panel.agglo_edit.setText("/typed/by/the/user.json")
    panel.layer_combo.setCurrentText("segmentation")
    assert panel.agglo_edit.text() == "/typed/by/the/user.json"
    browser = dock(viewer, "Shard browser")
    browser.layer_combo.setCurrentText("segmentation")
    from napari_shardscope.core.errors import ArgumentError

    with pytest.raises(ArgumentError, match="uint64"):  # what the locate box runs for a typed "-3"
        browser.locate("-3", mode="chunk id")
