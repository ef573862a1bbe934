"""Selected bodies as Surface layers in a real napari viewer (Xvfb), kept true to merge and undo.

Two bases: the synthetic EM sample (no mesh source: supervoxels are meshed from the labels) and a
copy of igneous's pinky40 segmentation whose ``info`` names its meshes and skeletons (supervoxel
meshes and skeletons read from the sources). Expectations come from the core (bounding boxes of
the bodies' voxels, the mesh source's own vertices), never from the widget.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.widgets.meshes import SKELETON_KEY, SURFACE_KEY, surface_name
from napari_shardscope.widgets.session import session_for
from tests.realdata import realdata_path
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_proofreading import Proofread, proofread  # noqa: F401  (fixture)

Z = 32


def surfaces(viewer: Any) -> dict[int, Any]:
    return {layer.metadata[SURFACE_KEY]: layer for layer in viewer.layers if SURFACE_KEY in layer.metadata}


def world_bounds(c: ProofreadingController, body: int) -> tuple[np.ndarray, np.ndarray]:
    """World (z, y, x) box of the body's voxels: first voxel centre − ½ voxel to last voxel centre + ½ voxel."""
    v = c.version
    assert v is not None
    g = v.scales[0]
    box = v.bbox(body)
    vs, tr = np.asarray(g.voxel_size), np.asarray(g.translate)
    return tr + (np.asarray(box.lo) - 0.5) * vs, tr + (np.asarray(box.hi) - 0.5) * vs


def world_vertices(layer: Any) -> np.ndarray:
    """A surface's vertices in world units (the layer holds them in the volume's voxel units, on its grid)."""
    return np.asarray(layer.data[0], dtype=np.float64) * np.asarray(layer.scale) + np.asarray(layer.translate)


def layer_bounds(layer: Any) -> tuple[np.ndarray, np.ndarray]:
    vertices = world_vertices(layer)
    return vertices.min(axis=0), vertices.max(axis=0)


def two_bodies(c: ProofreadingController) -> tuple[int, int]:
    v = c.version
    assert v is not None
    plane = v.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    a, b = (int(i) for i in ids[np.argsort(counts)[::-1][:2]])
    return a, b


@pytest.mark.qt_binding_lane
def test_select_merge_undo_surfaces_follow(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    """On the sample with the Proofreading panel and a repository over it (tests/widgets/test_proofreading.py's
    fixture: a copy of the repository the panel's Create makes, which that file's Create test covers)."""
    viewer, _, _, _, c = proofread
    meshes = session_for(viewer).surfaces
    a, b = two_bodies(c)
    c.select(a)
    qtbot.waitUntil(lambda: a in surfaces(viewer) and not meshes.busy, timeout=60000)
    layer = surfaces(viewer)[a]
    assert layer.name == surface_name(a)
    lo, hi = layer_bounds(layer)
    want_lo, want_hi = world_bounds(c, a)
    voxel = np.asarray(c.version.scales[0].voxel_size)  # type: ignore[union-attr]
    np.testing.assert_allclose(lo, want_lo, atol=voxel.max())
    np.testing.assert_allclose(hi, want_hi, atol=voxel.max())
    body_layer = session_for(viewer).body_layer
    np.testing.assert_allclose(np.asarray(layer.vertex_colors)[0], np.asarray(body_layer.get_color(a)), atol=1e-6)
    assert viewer.layers.selection.active is body_layer  # clicks still go to the body layer
    faces_a = len(layer.data[1])

    c.add_to_selection(b)
    qtbot.waitUntil(lambda: b in surfaces(viewer) and not meshes.busy, timeout=60000)
    b_lo, b_hi = world_bounds(c, b)
    c.merge()
    qtbot.waitUntil(lambda: b not in surfaces(viewer) and not meshes.busy
                    and len(surfaces(viewer)[a].data[1]) > faces_a, timeout=60000)
    lo, hi = layer_bounds(surfaces(viewer)[a])  # the merged body's surface covers both
    np.testing.assert_allclose(lo, np.minimum(want_lo, b_lo), atol=voxel.max())
    np.testing.assert_allclose(hi, np.maximum(want_hi, b_hi), atol=voxel.max())

    c.undo()
    qtbot.waitUntil(lambda: not meshes.busy and len(surfaces(viewer)[a].data[1]) == faces_a, timeout=60000)
    lo, hi = layer_bounds(surfaces(viewer)[a])
    np.testing.assert_allclose(lo, want_lo, atol=voxel.max())
    np.testing.assert_allclose(hi, want_hi, atol=voxel.max())

    c.clear_selection()
    qtbot.waitUntil(lambda: not surfaces(viewer), timeout=10000)


def test_source_meshes_and_skeletons_of_a_real_base(make_napari_viewer: Any, tmp_path: Path, qtbot: Any) -> None:
    base = tmp_path / "pinky"
    shutil.copytree(realdata_path("igneous_pinky_sharded"), base)
    info = json.loads((base / "info").read_text())
    info["skeletons"] = "skeletons_mip_0"  # igneous wrote them beside the volume; name them as Neuroglancer wants
    (base / "info").write_text(json.dumps(info))
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", base)
    source = lm.mesher().source
    assert source is not None
    skeleton_ids = set(json.loads(__import__("gzip").decompress((base / "skeletons_mip_0" / "0.labels.gz")
                                                                .read_bytes())))
    body = max((i for i in source.segment_ids() if i in skeleton_ids), key=lambda i: len(source.mesh(i).faces))
    expected = source.mesh(body)
    repo.close()

    viewer = make_napari_viewer(show=True)
    s = session_for(viewer)
    c = s.controller
    c.connect(tmp_path / "repo")
    qtbot.waitUntil(lambda: s.body_layer is not None, timeout=30000)
    c.select(body)
    qtbot.waitUntil(lambda: body in surfaces(viewer) and not s.surfaces.busy, timeout=60000)
    layer = surfaces(viewer)[body]
    g = c.version.scales[0]  # type: ignore[union-attr]
    want = expected.vertices[:, ::-1] - 0.5 * np.asarray(g.voxel_size)
    # on the volume's grid, clipped to its outermost voxel centres (widgets/placement.py: the dims stay the volume's)
    first = np.asarray(g.translate, dtype=np.float64)
    want = np.clip(want, first, first + (np.asarray(g.shape) - 1) * np.asarray(g.voxel_size))
    np.testing.assert_allclose(layer.scale, g.voxel_size)
    np.testing.assert_allclose(world_vertices(layer), want, rtol=1e-6, atol=1e-2)
    np.testing.assert_array_equal(np.asarray(layer.data[1]), expected.faces)
    skeletons = [la for la in viewer.layers if SKELETON_KEY in la.metadata]
    assert len(skeletons) == 1 and skeletons[0].metadata[SKELETON_KEY] == body
    assert len(skeletons[0].data) > 0
    viewer.dims.ndisplay = 3
    shot = viewer.screenshot(canvas_only=True, flash=False)  # no flash animation left drawing past the test
    assert shot.ndim == 3 and shot[..., :3].std() > 0  # something drawn in 3-D
    c.clear_selection()
    qtbot.waitUntil(lambda: not surfaces(viewer) and not [la for la in viewer.layers if SKELETON_KEY in la.metadata],
                    timeout=10000)


def test_zooming_out_reloads_a_coarser_level(make_napari_viewer: Any, tmp_path: Path, qtbot: Any) -> None:
    """A two-level multilod base: zooming out past the level boundary swaps the surface for level 1, zooming in back."""
    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.formats.precomputed.meshes import mesh_source_of
    from tests.mesh_lod_base import write_two_level_pinky

    coarse_faces = write_two_level_pinky(tmp_path / "pinky")
    source = mesh_source_of(open_dataset(tmp_path / "pinky"))
    assert source is not None
    body = max(coarse_faces, key=lambda s: len(source.mesh(s).faces))  # type: ignore[union-attr]
    fine_faces = len(source.mesh(body, 0).faces)  # type: ignore[union-attr]
    assert coarse_faces[body] < fine_faces
    repo = create_repository(tmp_path / "repo")
    create_labelmap(repo, "seg", tmp_path / "pinky")
    repo.close()

    viewer = make_napari_viewer(show=True)
    s = session_for(viewer)
    c = s.controller
    c.connect(tmp_path / "repo")
    qtbot.waitUntil(lambda: s.body_layer is not None, timeout=30000)
    viewer.dims.ndisplay = 3
    viewer.camera.zoom = 1.0  # 1 px per nm: a 40 nm voxel is 40 px, the finest level
    c.select(body)
    qtbot.waitUntil(lambda: body in surfaces(viewer) and not s.surfaces.busy
                    and len(surfaces(viewer)[body].data[1]) == fine_faces, timeout=60000)
    viewer.camera.zoom = 0.005  # level 1 (4 voxels of 40 nm) is 0.8 px on screen: the coarse level
    qtbot.waitUntil(lambda: not s.surfaces.busy and len(surfaces(viewer)[body].data[1]) == coarse_faces[body],
                    timeout=60000)
    viewer.camera.zoom = 2.0
    qtbot.waitUntil(lambda: not s.surfaces.busy and len(surfaces(viewer)[body].data[1]) == fine_faces, timeout=60000)
    c.clear_selection()
    qtbot.waitUntil(lambda: not surfaces(viewer), timeout=10000)
