"""The level of detail of body surfaces follows the view's zoom (Qt-free: the follower the napari glue drives).

The base is a copy of igneous's pinky40 segmentation whose mesh directory is rewritten as an
unsharded ``neuroglancer_multilod_draco`` source of two levels: level 0 igneous's own meshes, level
1 the same simplified by zmesh (lod_scales 1 and 4 voxels). Expectations come from the source.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.formats.precomputed.meshes import (
    MULTILOD,
    MeshData,
    MultilodManifest,
    MultilodMeshSource,
    dump_manifest,
)
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.meshes import LOD_PIXEL_ERROR, SurfaceFollower, lod_for_zoom
from napari_shardscope.core.versioned import create_repository

REALDATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "realdata"
BITS = 16


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


def _two_level_manifest(levels: list[MeshData]) -> tuple[bytes, bytes]:
    """Fragment data and manifest of one segment, one fragment per level, quantized over the level-0 box."""
    import DracoPy

    top = float(2**BITS - 1)
    lo = np.min([m.vertices.min(axis=0) for m in levels], axis=0).astype(np.float64)
    extent = np.max([m.vertices.max(axis=0) for m in levels], axis=0) - lo
    extent = np.maximum(extent, 1e-3).astype(np.float32).astype(np.float64)
    lo = lo.astype(np.float32).astype(np.float64)
    data, sizes = [], []
    for lod, m in enumerate(levels):
        span = extent * 2**lod  # level ``lod``'s fragment at position 0 spans chunk_shape * 2**lod
        q = np.clip(np.rint((m.vertices.astype(np.float64) - lo) / span * top), 0, top)
        frag = DracoPy.encode(q.astype(np.float32), m.faces.astype(np.uint32), quantization_bits=BITS,
                              quantization_range=top, quantization_origin=np.zeros(3), compression_level=1,
                              preserve_order=True)
        data.append(bytes(frag))
        sizes.append(np.asarray([len(frag)], np.uint64))
    manifest = MultilodManifest(extent.astype(np.float32), lo.astype(np.float32),
                                np.asarray([1.0, 4.0][: len(levels)], np.float32),
                                np.zeros((len(levels), 3), np.float32),
                                tuple(np.zeros((1, 3), np.uint32) for _ in levels), tuple(sizes))
    return b"".join(data), dump_manifest(manifest)


@pytest.fixture
def two_levels(tmp_path: Path):  # type: ignore[no-untyped-def]
    import zmesh

    base = tmp_path / "pinky"
    shutil.copytree(REALDATA / "igneous_pinky_sharded", base)
    info = json.loads((base / "info").read_text())
    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.formats.precomputed.meshes import mesh_source_of

    source = mesh_source_of(open_dataset(base))
    assert isinstance(source, MultilodMeshSource)
    out = base / "mesh2"
    out.mkdir()
    transform = source.info.transform_matrix()
    coarse_faces = {}
    for sid in source.segment_ids():
        fine = source.mesh(sid)
        assert fine is not None
        if not len(fine.faces):
            continue  # absent from the new source: meshed from the labels if ever shown
        # back to model units (the reader applies the transform), simplified for level 1
        model = ((fine.vertices.astype(np.float64) - transform[:, 3]) / np.diag(transform[:, :3])).astype(np.float32)
        fine_model = MeshData(sid, model, fine.faces)
        lo = model.min(axis=0)
        simple = zmesh.Mesher((1, 1, 1)).simplify(zmesh.Mesh(model - lo, fine.faces, None), reduction_factor=8,
                                                  max_error=2)
        coarse = MeshData(sid, np.asarray(simple.vertices, np.float32) + lo, np.asarray(simple.faces, np.uint32))
        if not np.isfinite(coarse.vertices).all():  # zmesh's simplifier fails on one of igneous's meshes
            coarse = fine_model
        coarse_faces[sid] = len(coarse.faces)
        data, manifest = _two_level_manifest([fine_model, coarse])
        (out / str(sid)).write_bytes(data)
        (out / f"{sid}.index").write_bytes(manifest)
    (out / "info").write_text(json.dumps({"@type": MULTILOD, "vertex_quantization_bits": BITS,
                                          "transform": list(source.info.transform), "lod_scale_multiplier": 1.0}))
    info["mesh"] = "mesh2"
    (base / "info").write_text(json.dumps(info))
    repo = create_repository(tmp_path / "repo")
    create_labelmap(repo, "seg", base)
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
