"""Every layer the plugin adds leaves the volume's dims alone: the z step stays one plane, the plane stays put.

napari derives the dims from every layer (the step of an axis is the smallest scale among the layers,
its range the union of their extents), so one layer placed in other units — a body surface in nm at
scale 1 — turned the Right arrow into a 1 nm step, and removing it again moved the view to another
plane. Each test drives a real viewer (Xvfb) as a user does — clicks on buttons, key presses on the
canvas — through every kind of layer the plugin adds (body surfaces and skeletons, the selection and
supervoxel overlays, split seeds, the review's *after* layer, the shard browser's outline and shard
map) and checks the dims against what they were with the volumes alone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import Qt

from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.widgets.canvas import canvas_for
from napari_shardscope.widgets.meshes import SKELETON_KEY, SURFACE_KEY
from napari_shardscope.widgets.session import session_for
from tests.realdata import REALDATA
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_proofreading import (  # noqa: F401  (fixture)
    LEFT,
    Proofread,
    canvas_of,
    dock,
    proofread,
    two_bodies,
)

SHIFT = Qt.KeyboardModifier.ShiftModifier


def dims_of(viewer: Any) -> tuple[tuple[tuple[float, float, float], ...], tuple[int, ...], tuple[float, ...]]:
    """(range, current step, point) of the dims: what the sliders and the arrow keys work with."""
    d = viewer.dims
    return (tuple((float(r.start), float(r.stop), float(r.step)) for r in d.range), tuple(d.current_step),
            tuple(float(p) for p in d.point))


def assert_dims(viewer: Any, want: Any, what: str) -> None:
    assert_range(viewer, want, what)
    got = dims_of(viewer)
    assert got[1] == want[1], f"{what}: the plane changed {want[1]} -> {got[1]}"
    assert got[2] == pytest.approx(want[2]), f"{what}: the point changed {want[2]} -> {got[2]}"


def assert_range(viewer: Any, want: Any, what: str) -> None:
    got = dims_of(viewer)
    assert np.allclose(got[0], want[0]), f"{what}: the dims range/step changed {want[0]} -> {got[0]}"


def right_arrow(viewer: Any, qtbot: Any) -> None:
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_Right)


def select_merge_deselect_undo_keep_the_z_step_and_plane(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    viewer, _panel, _repo, _, c = proofread
    s = session_for(viewer)
    a, b, _va, _vb = two_bodies(c)
    g = c.version.scales[0]  # type: ignore[union-attr]
    z_step = float(g.voxel_size[0])
    assert viewer.dims.range[0].step == pytest.approx(z_step)  # the volume alone: one plane per step
    base = dims_of(viewer)

    def settled() -> bool:
        return not s.surfaces.busy and not s.surfaces._scheduled

    c.select(a)  # the surface and the selection overlay come
    qtbot.waitUntil(lambda: any(la.metadata.get(SURFACE_KEY) == a for la in viewer.layers) and settled(),
                    timeout=60000)
    assert canvas_for(viewer).selection_layer is not None
    assert_dims(viewer, base, "select")
    plane = viewer.dims.current_step[0]
    right_arrow(viewer, qtbot)  # one plane further, as the user presses it
    assert viewer.dims.current_step[0] == plane + 1
    assert viewer.dims.point[0] == pytest.approx(base[2][0] + z_step)
    moved = dims_of(viewer)

    c.add_to_selection(b)
    qtbot.waitUntil(lambda: any(la.metadata.get(SURFACE_KEY) == b for la in viewer.layers) and settled(),
                    timeout=60000)
    assert_dims(viewer, moved, "add to selection")
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_M, SHIFT)  # merge: b's surface goes, a's is remade
    qtbot.waitUntil(lambda: not any(la.metadata.get(SURFACE_KEY) == b for la in viewer.layers) and settled(),
                    timeout=60000)
    assert_dims(viewer, moved, "merge")
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_U, SHIFT)  # undo
    qtbot.waitUntil(settled, timeout=60000)
    assert_dims(viewer, moved, "undo")
    c.set_mode("supervoxels")  # the supervoxel overlay comes
    qtbot.waitUntil(lambda: canvas_for(viewer).supervoxel_layer is not None, timeout=10000)
    assert_dims(viewer, moved, "supervoxel overlay")
    c.set_mode("bodies")
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_X, SHIFT)  # clear the selection: the surfaces go
    qtbot.waitUntil(lambda: not any(SURFACE_KEY in la.metadata for la in viewer.layers) and settled(),
                    timeout=60000)
    assert_dims(viewer, moved, "clear selection")
    right_arrow(viewer, qtbot)
    assert viewer.dims.current_step[0] == plane + 2

    # a to-do "go to" lands on a plane that shows the body
    target = c.go_to("body", a)
    qtbot.waitUntil(settled, timeout=60000)
    z = viewer.dims.current_step[0]
    assert viewer.dims.range[0].step == pytest.approx(z_step)
    assert z == target.focus[0]
    assert (c.version.read_bodies((z, slice(None), slice(None))) == a).any()  # type: ignore[union-attr]


def seeds_review_and_shard_browser_layers_keep_the_dims(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    """In one session, as a user goes on: split seeds, a review's *after* layer, then the shard browser's
    shard map of every scale and the located chunk's outline, each added by clicks as a user adds them."""
    viewer, panel, _repo, _, c = proofread
    a, b, _va, _vb = two_bodies(c)
    base = dims_of(viewer)
    c.select(a)
    qtbot.mouseClick(panel.split_button, LEFT)  # Start split: the seeds layer
    assert panel.seeds_layer is not None
    assert_dims(viewer, base, "split seeds")
    qtbot.mouseClick(panel.cancel_split_button, LEFT)
    assert_dims(viewer, base, "split cancelled")

    # a branch with an edit, reviewed: the review's "after" layer, shown by its toggle button
    root = c.commit("base")
    c.branch("alice")
    c.version.merge(a, [b])  # type: ignore[union-attr]
    c.commit("alice: b into a")
    c.branch(None, root.uuid)
    c.commit("main: nothing new")  # the review compares against a committed version
    review = dock(viewer, "Review branch…")
    review.branch_combo.setCurrentText("alice")
    qtbot.mouseClick(review.review_button, LEFT)
    assert c.last_error == "" and review.tree.topLevelItemCount() > 0
    qtbot.mouseClick(review.toggle_button, LEFT)
    assert review.after_layer is not None and review.after_layer.visible
    assert_dims(viewer, base, "review after layer")

    browser = dock(viewer, "Shard browser")
    browser.layer_combo.setCurrentText("segmentation")
    scales = [browser.scale_combo.itemText(i) for i in range(browser.scale_combo.count())]
    assert len(scales) > 1
    for i, scale in enumerate(scales):  # coarser scales' chunks reach past the volume's last voxel
        browser.scale_combo.setCurrentIndex(i)
        qtbot.mouseClick(browser.map_button, LEFT)
        qtbot.waitUntil(lambda s=scale: browser.shard_map_layer is not None  # type: ignore[misc]
                        and s in browser.shard_map_layer.name and not browser.busy, timeout=20000)
        assert_dims(viewer, base, f"the shard map of {scale}")
    shape = viewer.layers["segmentation"].level_shapes[0]
    browser.scale_combo.setCurrentIndex(0)
    browser.mode_combo.setCurrentText("voxel")
    for voxel in ((20, 30, 100), (0, 0, 0), tuple(int(n) - 1 for n in shape)):  # z, y, x from 0; corners too
        browser.locate_edit.setText(", ".join(str(v) for v in voxel))
        qtbot.mouseClick(browser.locate_button, LEFT)
        assert browser.outline_layer is not None and browser.locate_label.text(), voxel
        assert_range(viewer, base, f"the outline of the chunk of voxel {voxel}")
    plane = viewer.dims.current_step[0]
    right_arrow(viewer, qtbot)  # the arrow still moves one plane
    assert viewer.dims.current_step[0] == min(plane + 1, shape[0] - 1)
    assert viewer.dims.range[0].step == pytest.approx(base[0][0][2])


@pytest.mark.qt_binding_lane
def test_surfaces_overlays_seeds_review_and_shard_browser_layers_keep_the_dims(proofread: Proofread,  # noqa: F811
                                                                              qtbot: Any) -> None:
    """One session as a user goes on: select, merge, deselect and undo (surfaces and overlays come and go),
    then split seeds, a review's *after* layer and the shard browser's layers. The two steps (each named for
    what it checks, every assertion kept) share one viewer: building and tearing down the viewer and its
    layers costs about 1.5 CPU s; the second step takes its dims baseline where the first left the view."""
    select_merge_deselect_undo_keep_the_z_step_and_plane(proofread, qtbot)
    seeds_review_and_shard_browser_layers_keep_the_dims(proofread, qtbot)


def test_a_partial_last_chunk_does_not_lengthen_the_slider(make_napari_viewer: Any, tmp_path: Path,
                                                           qtbot: Any) -> None:
    """A volume whose size is no multiple of its chunks (y 40 and x 36 voxels in chunks of 16): the shard map of
    each scale and the outline of a last, partial chunk leave the dims as the volume alone made them."""
    from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

    write_precomputed(tmp_path / "seg", voronoi_supervoxels((12, 40, 36), 8, seed=5), ((1, 1, 1), (1, 2, 2)),
                      chunk_xyz=(16, 16, 4), sharded=True)
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(tmp_path / "seg"), plugin="napari-shardscope")
    viewer.dims.set_current_step(0, 5)
    base = dims_of(viewer)
    browser = dock(viewer, "Shard browser")
    browser.layer_combo.setCurrentText(layer.name)
    for i in range(browser.scale_combo.count()):
        scale = browser.scale_combo.itemText(i)
        browser.scale_combo.setCurrentIndex(i)
        qtbot.mouseClick(browser.map_button, LEFT)
        qtbot.waitUntil(lambda s=scale: browser.shard_map_layer is not None  # type: ignore[misc]
                        and s in browser.shard_map_layer.name and not browser.busy, timeout=20000)
        assert_dims(viewer, base, f"the shard map of {scale}")
        # each voxel shows the shard of the chunk holding it (the corner voxels of the partial chunks too),
        # from the sharding hash of the chunk's id (chunks of 16 x, 16 y, 4 z voxels of the scale), at every
        # level napari may draw (level 1 halves y and x), each level exactly the volume's level's shape
        assert browser.tree is not None
        smap = browser.shard_map_layer
        assert smap is not None and smap.multiscale and len(smap.data) == len(layer.data)
        assert [tuple(d.shape) for d in smap.data] == [tuple(s) for s in layer.level_shapes]
        source = browser.tree.inspector.source(scale)  # type: ignore[attr-defined]
        f = (1, 1, 1) if i == 0 else (1, 2, 2)
        for z, y, x in ((0, 0, 0), (11, 39, 35), (5, 33, 20), (7, 10, 34), (3, 31, 31)):
            grid = (x // f[2] // 16, y // f[1] // 16, z // f[0] // 4)
            want = int(assign_chunk_ids(source.sharding, [source.scale.chunk_id(grid)]).shard[0])
            assert int(smap.data[0][z, y, x]) == want, (scale, (z, y, x))
            assert int(smap.data[1][z, y // 2, x // 2]) == want, (scale, "level 1", (z, y, x))
            assert int(np.asarray(smap.data[0][z])[y, x]) == want  # a plane, as napari slices it
        viewer.dims.set_current_step(0, 5)
    browser.scale_combo.setCurrentIndex(0)
    browser.mode_combo.setCurrentText("voxel")
    browser.locate_edit.setText("11, 39, 35")  # the last voxel: a chunk 8 × 4 voxels of its 16 × 16
    qtbot.mouseClick(browser.locate_button, LEFT)
    assert browser.outline_layer is not None
    assert_range(viewer, base, "the outline of the last chunk")


@pytest.mark.realdata
def test_source_meshes_and_skeletons_of_a_real_base_keep_the_dims(make_napari_viewer: Any, tmp_path: Path,
                                                                  qtbot: Any) -> None:
    """Meshes and skeletons read from a real base's sources (igneous's pinky40, meshed in nm)."""
    base = tmp_path / "pinky"
    shutil.copytree(REALDATA / "igneous_pinky_sharded", base)
    info = json.loads((base / "info").read_text())
    info["skeletons"] = "skeletons_mip_0"
    (base / "info").write_text(json.dumps(info))
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", base)
    source = lm.mesher().source
    assert source is not None
    body = max(source.segment_ids(), key=lambda i: len(source.mesh(i).faces))
    repo.close()

    viewer = make_napari_viewer(show=True)
    s = session_for(viewer)
    c = s.controller
    c.connect(tmp_path / "repo")
    qtbot.waitUntil(lambda: s.body_layer is not None, timeout=30000)
    viewer.dims.set_current_step(0, 3)
    base_dims = dims_of(viewer)
    g = c.version.scales[0]  # type: ignore[union-attr]
    assert viewer.dims.range[0].step == pytest.approx(g.voxel_size[0])
    c.select(body)
    qtbot.waitUntil(lambda: any(SURFACE_KEY in la.metadata for la in viewer.layers)
                    and any(SKELETON_KEY in la.metadata for la in viewer.layers) and not s.surfaces.busy,
                    timeout=60000)
    assert_dims(viewer, base_dims, "source mesh and skeleton")
    qtbot.keyClick(canvas_of(viewer), Qt.Key.Key_Right)
    assert viewer.dims.current_step[0] == 4
    c.clear_selection()
    qtbot.waitUntil(lambda: not any(SURFACE_KEY in la.metadata for la in viewer.layers), timeout=10000)
    assert viewer.dims.current_step[0] == 4
    assert viewer.dims.range[0].step == pytest.approx(g.voxel_size[0])
