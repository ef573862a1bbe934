"""The level of detail of body surfaces follows the view's zoom (Qt-free: the follower the napari glue drives).

The base is a copy of igneous's pinky40 segmentation whose mesh directory is rewritten as an
unsharded ``neuroglancer_multilod_draco`` source of two levels: level 0 igneous's own meshes, level
1 the same simplified by zmesh (lod_scales 1 and 4 voxels). Expectations come from the source.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.formats.precomputed.meshes import MultilodMeshSource
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.meshes import LOD_PIXEL_ERROR, SurfaceFollower, lod_for_zoom
from napari_shardscope.core.versioned import create_repository
from tests.mesh_lod_base import write_two_level_pinky


def test_lod_for_zoom_picks_the_coarsest_level_under_the_pixel_error() -> None:
    scales = (1.0, 2.0, 4.0, 8.0)
    # 40 nm voxels: at 1 px/nm a voxel covers 40 px: the finest level
    assert lod_for_zoom(scales, 1.0, world_per_unit=40.0) == 0
    # a voxel of 40 nm on 0.05 px/nm is 2 px: level 0 is just fine enough, level 1 (4 px) is not
    assert lod_for_zoom(scales, 0.05, world_per_unit=40.0) == 0
    assert lod_for_zoom(scales, 0.025, world_per_unit=40.0) == 1
    # a voxel far smaller than a pixel: the coarsest level
    assert lod_for_zoom(scales, 1e-4, world_per_unit=40.0) == 3
    assert lod_for_zoom(scales, 0.05, world_per_unit=40.0, max_pixels=16.0) == 3  # 8 × 40 × 0.05 = 16 px
    assert lod_for_zoom(scales, 0.05, world_per_unit=40.0, max_pixels=15.0) == 2
    # no levels, no zoom: the finest
    assert lod_for_zoom((), 1e-4) == 0
    assert lod_for_zoom(scales, 0.0) == 0
    # monotone: zooming out never asks for a finer level
    lods = [lod_for_zoom(scales, z, world_per_unit=8.0) for z in np.geomspace(10, 1e-4, 50)]
    assert lods == sorted(lods) and lods[0] == 0 and lods[-1] == 3
    assert LOD_PIXEL_ERROR > 0


@pytest.fixture
def two_levels(tmp_path: Path):  # type: ignore[no-untyped-def]
    coarse_faces = write_two_level_pinky(tmp_path / "pinky")
    repo = create_repository(tmp_path / "repo")
    create_labelmap(repo, "seg", tmp_path / "pinky")
    repo.close()
    c = ProofreadingController()
    c.connect(tmp_path / "repo")
    yield c, coarse_faces
    c.disconnect()


def test_zoom_crossing_a_level_reloads_the_coarser_mesh(two_levels) -> None:  # type: ignore[no-untyped-def]
    c, coarse_faces = two_levels
    v = c.version
    source = v.labelmap.mesher().source
    assert isinstance(source, MultilodMeshSource)
    body = max(coarse_faces, key=lambda s: len(source.mesh(s).faces))
    assert source.num_lods(body) == 2
    c.select(body)
    f = SurfaceFollower(c)
    f.set_zoom(1.0)  # 1 px per nm: a 40 nm voxel is 40 px, the finest level
    surfaces, _ = f.update()
    assert [s.key.lod for s in surfaces] == [0]
    assert len(surfaces[0].faces) == len(source.mesh(body, 0).faces)
    scales, per_unit = f.lod_scales  # type: ignore[misc]
    assert scales == (1.0, 4.0) and per_unit == 40.0
    assert f.plan().empty  # nothing to do while the zoom stays
    assert not f.set_zoom(0.5)  # level 1 is 4 voxels = 80 px at 0.5 px/nm: still the finest
    assert f.plan().empty
    assert f.set_zoom(0.005)  # 4 voxels of 40 nm = 0.8 px: crossed into level 1
    plan = f.plan()
    assert [(b, k.lod) for b, k in plan.load] == [(body, 1)]
    surfaces, _ = f.update()
    assert len(surfaces[0].faces) == coarse_faces[body] < len(source.mesh(body, 0).faces)
    coarse = source.mesh(body, 1)
    assert coarse is not None
    half_voxel_xyz = 0.5 * np.asarray(v.scales[0].voxel_size[::-1])  # napari centres voxels on their index
    np.testing.assert_allclose(surfaces[0].vertices[:, ::-1] + half_voxel_xyz, coarse.vertices, atol=1e-3)
    assert f.set_zoom(2.0)  # zoomed back in: the finest again
    assert [k.lod for _b, k in f.plan().load] == [0]
