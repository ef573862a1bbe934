"""A copy of igneous's pinky40 segmentation whose meshes are a two-level unsharded multilod source.

Level 0 is igneous's own mesh of each segment, level 1 the same simplified by zmesh (``lod_scales``
1 and 4 voxels): the bases the level-of-detail tests (core and napari) load surfaces from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from napari_shardscope.core.formats.precomputed.meshes import (
    MULTILOD,
    MeshData,
    MultilodManifest,
    MultilodMeshSource,
    dump_manifest,
)
from tests.realdata import realdata_path

BITS = 16


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


def write_two_level_pinky(base: Path) -> dict[int, int]:
    """Copy pinky40 to ``base`` with a two-level mesh source; returns each segment's level-1 face count."""
    import zmesh

    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.formats.precomputed.meshes import mesh_source_of

    shutil.copytree(realdata_path("igneous_pinky_sharded"), base)
    info = json.loads((base / "info").read_text())
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
    return coarse_faces
