"""Mesh and skeleton readers against CloudVolume's mesh/skeleton API, over the real datasets igneous wrote.

CloudVolume (installed for tests only) decodes the same ids; vertex and face counts and bounds must
agree, every id the sharded sources list must be found, and damaged bytes must give typed errors
naming the key and byte offset.
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.errors import ChunkDecodeError, FormatError, IndexDecodeError, MetadataError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.meshes import (
    LegacyMeshSource,
    MultilodMeshSource,
    decode_legacy_fragment,
    decode_manifest,
    dump_manifest,
    mesh_source_of,
    open_mesh_source,
)
from napari_shardscope.core.formats.precomputed.skeletons import (
    SkeletonInfo,
    VertexAttribute,
    decode_skeleton,
    open_skeleton_source,
)
from tests.realdata import REALDATA, realdata_path

cloudvolume = pytest.importorskip("cloudvolume")

PINKY = REALDATA / "igneous_pinky_sharded"

#: (dataset dir, mesh dir inside it, whether the dataset's own info names the mesh dir)
MESH_SOURCES = [
    ("igneous_pinky_sharded", "mesh_mip_0_err_40.0", True),
    ("noduli_seg_head", "mesh", True),
    ("crantb_mesh_sharded", "", False),
    ("crantb_mesh_unsharded", "", False),
]


def cloudvolume_over(tmp_path: Path, dataset: str, mesh_dir: str, *, skeletons: str | None = None) -> Any:
    """A CloudVolume reading ``dataset``'s meshes: the dataset itself, or (a bare mesh dir) a segmentation
    ``info`` naming a link to it."""
    if mesh_dir:
        return cloudvolume.CloudVolume(f"file://{REALDATA / dataset}", progress=False, mesh_dir=mesh_dir,
                                       skel_dir=skeletons)
    root = tmp_path / f"cv_{dataset}"
    root.mkdir()
    (root / "mesh").symlink_to(REALDATA / dataset)
    info = {"type": "segmentation", "data_type": "uint32", "num_channels": 1, "mesh": "mesh",
            "scales": [{"key": f"s{i}", "resolution": [1, 1, 1], "size": [1, 1, 1], "voxel_offset": [0, 0, 0],
                        "chunk_sizes": [[1, 1, 1]], "encoding": "raw"} for i in range(2)]}  # the mesh info's mip
    (root / "info").write_text(json.dumps(info))
    return cloudvolume.CloudVolume(f"file://{root}", progress=False)


def cv_mesh(cv: Any, segment: int, lod: int = 0) -> Any:
    got = cv.mesh.get(segment, lod=lod)
    return got[segment] if isinstance(got, dict) else got


@pytest.mark.realdata
@pytest.mark.parametrize(("dataset", "mesh_dir", "named"), MESH_SOURCES, ids=[m[0] for m in MESH_SOURCES])
def test_multilod_meshes_equal_cloudvolume(tmp_path: Path, dataset: str, mesh_dir: str, named: bool) -> None:
    store = open_store(REALDATA / dataset)
    src = open_mesh_source(store, mesh_dir)
    assert isinstance(src, MultilodMeshSource)
    if named:  # the one door: the segmentation's info names the same source
        via = mesh_source_of(open_dataset(str(REALDATA / dataset)))
        assert via is not None and via.prefix == mesh_dir
    ids = src.segment_ids()
    assert len(ids) > 0
    cv = cloudvolume_over(tmp_path, dataset, mesh_dir)
    for segment in ids:
        ours = src.mesh(segment)
        theirs = cv_mesh(cv, segment)
        assert ours is not None
        assert ours.vertices.dtype == np.float32 and ours.vertices.shape[1] == 3
        assert ours.faces.dtype == np.uint32 and ours.faces.shape[1] == 3
        assert len(ours.vertices) == len(theirs.vertices), segment
        assert len(ours.faces) == len(theirs.faces), segment
        np.testing.assert_allclose(ours.vertices.min(0), theirs.vertices.min(0), rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(ours.vertices.max(0), theirs.vertices.max(0), rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(ours.vertices, theirs.vertices, rtol=1e-5, atol=1e-3)
        np.testing.assert_array_equal(ours.faces, theirs.faces)
    assert src.mesh(max(ids) + 12345) is None


@pytest.mark.realdata
def test_every_sharded_id_is_found() -> None:
    """Every id of the sharded source's label list (igneous writes ``0.labels.gz`` beside the shard) is read."""
    import gzip

    for dataset, mesh_dir in [("igneous_pinky_sharded", "mesh_mip_0_err_40.0"), ("crantb_mesh_sharded", ""),
                              ("noduli_seg_head", "mesh")]:
        labels = json.loads(gzip.decompress((REALDATA / dataset / mesh_dir / "0.labels.gz").read_bytes()))
        src = open_mesh_source(open_store(REALDATA / dataset), mesh_dir)
        assert sorted(src.segment_ids()) == sorted(labels), dataset
        for segment in labels:
            mesh = src.mesh(segment)
            assert mesh is not None and len(mesh.faces) > 0, (dataset, segment)


@pytest.mark.realdata
def test_lods_selectable_and_coarsest(tmp_path: Path) -> None:
    src = open_mesh_source(open_store(PINKY), "mesh_mip_0_err_40.0")
    segment = src.segment_ids()[0]
    n = src.num_lods(segment)
    assert n >= 1
    coarsest = src.mesh(segment, lod=-1)
    assert coarsest is not None and coarsest.lod == n - 1
    from napari_shardscope.core.errors import ArgumentError

    with pytest.raises(ArgumentError, match="lod"):
        src.mesh(segment, lod=n)


@pytest.mark.realdata
def test_meshes_over_http_equal_local(http_root: Any) -> None:
    root, server = http_root
    shutil.copytree(REALDATA / "crantb_mesh_sharded", root / "sharded")
    shutil.copytree(REALDATA / "crantb_mesh_unsharded", root / "unsharded")
    for name in ("sharded", "unsharded"):
        local = open_mesh_source(open_store(root / name), "")
        remote = open_mesh_source(open_store(f"{server.url}/{name}/"), "")
        for segment in (1, 7, 21):
            a, b = local.mesh(segment), remote.mesh(segment)
            assert a is not None and b is not None
            np.testing.assert_array_equal(a.vertices, b.vertices)
            np.testing.assert_array_equal(a.faces, b.faces)


@pytest.mark.realdata
def test_manifest_round_trip_and_damage() -> None:
    data = (REALDATA / "crantb_mesh_unsharded" / "7.index").read_bytes()
    manifest = decode_manifest(data, key="7.index")
    assert dump_manifest(manifest) == data
    with pytest.raises(IndexDecodeError) as err:
        decode_manifest(data[:-3], key="7.index")
    assert err.value.key == "7.index" and err.value.offset is not None
    with pytest.raises(IndexDecodeError, match="after its last field"):
        decode_manifest(data + b"\0", key="7.index")
    huge = data[:24] + struct.pack("<I", 10**6) + data[28:]
    with pytest.raises(IndexDecodeError, match="levels of detail") as err:
        decode_manifest(huge, key="7.index")
    assert err.value.offset == 24


@pytest.mark.realdata
def test_damaged_fragment_names_key_and_offset(tmp_path: Path) -> None:
    d = tmp_path / "m"
    shutil.copytree(REALDATA / "crantb_mesh_unsharded", d)
    blob = bytearray((d / "7").read_bytes())
    blob[: len(blob) // 2] = b"\xff" * (len(blob) // 2)
    (d / "7").write_bytes(bytes(blob))
    src = open_mesh_source(open_store(d), "")
    with pytest.raises(ChunkDecodeError) as err:
        src.mesh(7)
    assert err.value.key is not None and err.value.key.endswith("/7") and err.value.offset is not None
    (d / "8").write_bytes((d / "8").read_bytes()[:10])
    with pytest.raises(ChunkDecodeError, match="truncated"):
        src.mesh(8)


def test_mesh_info_errors(tmp_path: Path) -> None:
    (tmp_path / "info").write_text(json.dumps({"@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 7}))
    with pytest.raises(MetadataError, match="vertex_quantization_bits"):
        open_mesh_source(open_store(tmp_path), "")
    (tmp_path / "info").write_text(json.dumps({"@type": "neuroglancer_multilod_draco", "vertex_quantization_bits": 16,
                                               "transform": [1, 2]}))
    with pytest.raises(MetadataError, match="transform"):
        open_mesh_source(open_store(tmp_path), "")


# -- legacy meshes, written by CloudVolume -----------------------------------------------------------


def _legacy_dataset(tmp_path: Path) -> tuple[Path, dict[int, Any]]:
    """A segmentation with legacy meshes CloudVolume wrote (its default local layout: ``NAME.gz``)."""
    import zmesh
    from cloudvolume.mesh import Mesh

    labels = np.zeros((40, 30, 20), dtype=np.uint32)
    labels[5:20, 5:25, 3:15] = 7
    labels[22:35, 8:20, 5:18] = 9
    info = cloudvolume.CloudVolume.create_new_info(1, "segmentation", "uint32", "raw", [4, 4, 40], [0, 0, 0],
                                                   list(labels.shape), mesh="mesh", chunk_size=[20, 15, 10])
    cv = cloudvolume.CloudVolume(f"file://{tmp_path / 'seg'}", info=info, progress=False)
    cv.commit_info()
    cv[:, :, :] = labels
    mesher = zmesh.Mesher((4, 4, 40))
    mesher.mesh(labels)
    meshes = {}
    for label in (7, 9):
        m = mesher.get(label, normals=False)
        meshes[label] = Mesh(m.vertices, m.faces, segid=label)
    cv.mesh.put(list(meshes.values()))
    return tmp_path / "seg", meshes


def test_legacy_meshes_equal_cloudvolume(tmp_path: Path) -> None:
    root, written = _legacy_dataset(tmp_path)
    src = mesh_source_of(open_dataset(str(root)))
    assert isinstance(src, LegacyMeshSource)
    assert src.segment_ids() == [7, 9]
    cv = cloudvolume.CloudVolume(f"file://{root}", progress=False)
    for segment in (7, 9):
        ours = src.mesh(segment)
        assert ours is not None
        theirs = cv.mesh.get(segment, remove_duplicate_vertices=False, fuse=False)
        theirs = theirs[segment] if isinstance(theirs, dict) else theirs
        assert len(ours.vertices) == len(theirs.vertices) == len(written[segment].vertices)
        assert len(ours.faces) == len(theirs.faces)
        np.testing.assert_allclose(ours.vertices.min(0), theirs.vertices.min(0), atol=1e-3)
        np.testing.assert_allclose(ours.vertices.max(0), theirs.vertices.max(0), atol=1e-3)
    assert src.mesh(8) is None


def test_legacy_manifest_refuses_escaping_names(tmp_path: Path) -> None:
    (tmp_path / "info").write_text(json.dumps({"@type": "neuroglancer_legacy_mesh"}))
    (tmp_path / "5:0").write_text(json.dumps({"fragments": ["../../etc/passwd"]}))
    with pytest.raises(MetadataError, match="leaves"):
        open_mesh_source(open_store(tmp_path), "").mesh(5)
    (tmp_path / "6:0").write_text(json.dumps({"fragments": ["6:0:frag"]}))
    (tmp_path / "6:0:frag").write_bytes(struct.pack("<I", 3) + b"\0" * 36 + struct.pack("<3I", 0, 1, 5))
    with pytest.raises(ChunkDecodeError, match="vertex 5") as err:
        open_mesh_source(open_store(tmp_path), "").mesh(6)
    assert err.value.offset == 40


# -- skeletons ----------------------------------------------------------------------------------------


@pytest.mark.realdata
def test_skeletons_equal_cloudvolume() -> None:
    src = open_skeleton_source(open_store(PINKY), "skeletons_mip_0")
    ids = src.segment_ids()
    assert len(ids) == 98
    cv = cloudvolume.CloudVolume(f"file://{PINKY}", progress=False, skel_dir="skeletons_mip_0")
    for segment in ids:
        ours = src.skeleton(segment)
        theirs = cv.skeleton.get(segment)
        assert ours is not None
        np.testing.assert_allclose(ours.vertices, theirs.vertices, rtol=1e-6)
        np.testing.assert_array_equal(ours.edges, theirs.edges)
        np.testing.assert_allclose(ours.attributes["radius"][:, 0], theirs.radius, rtol=1e-6)
    assert src.skeleton(1) is None


def test_damaged_skeleton(tmp_path: Path) -> None:
    (tmp_path / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons"}))
    (tmp_path / "3").write_bytes(struct.pack("<II", 2, 1) + b"\0" * 24 + struct.pack("<II", 0, 4))
    with pytest.raises(ChunkDecodeError, match="edge 0") as err:
        open_skeleton_source(open_store(tmp_path), "").skeleton(3)
    assert err.value.offset == 32
    (tmp_path / "4").write_bytes(struct.pack("<II", 100, 0))
    with pytest.raises(ChunkDecodeError, match="truncated"):
        open_skeleton_source(open_store(tmp_path), "").skeleton(4)


# -- hostile bytes: typed errors only -------------------------------------------------------------------

@functools.cache
def real_manifest() -> bytes:
    """A manifest igneous wrote (read on first use, never at import)."""
    return realdata_path("crantb_mesh_unsharded", "7.index").read_bytes()


@pytest.mark.realdata
@given(st.binary(max_size=256), st.integers(0, 1 << 16), st.binary(max_size=8))
def test_damaged_manifests_give_typed_errors(noise: bytes, cut: int, insert: bytes) -> None:
    manifest = real_manifest()
    cut %= len(manifest) + 1
    for data in (noise, manifest[:cut] + insert + manifest[cut + len(insert):]):
        try:
            m = decode_manifest(data, key="k")
        except IndexDecodeError as exc:
            assert exc.key == "k" and exc.offset is not None
        else:
            assert m.num_lods == len(m.fragment_sizes) == len(m.fragment_positions)


@given(st.binary(max_size=512))
def test_random_legacy_fragments_and_skeletons_give_typed_errors(data: bytes) -> None:
    try:
        v, f = decode_legacy_fragment(data, key="k")
        assert f.size == 0 or int(f.max()) < len(v)
    except FormatError as exc:
        assert exc.key == "k"
    info = SkeletonInfo(vertex_attributes=(VertexAttribute("radius", "float32", 1),))
    try:
        sk = decode_skeleton(data, info, 1, key="k")
        assert sk.edges.size == 0 or int(sk.edges.max()) < len(sk.vertices)
    except FormatError as exc:
        assert exc.key == "k"


# -- validate: a multilod shard's fragments lie just before the manifest the index points at ----------------
def _tetrahedron(segment: int, shift: float) -> Any:
    from napari_shardscope.core.formats.precomputed.meshes import MeshData

    vertices = np.asarray([[0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10]], np.float32) + shift
    faces = np.asarray([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], np.uint32)
    return MeshData(segment, vertices, faces, 0)


def _mesh_dir(tmp_path: Path, shard: bytes) -> Path:
    from napari_shardscope.core.formats.precomputed.mesh_writer import mesh_info

    d = tmp_path / "meshes"
    d.mkdir(exist_ok=True)
    (d / "info").write_text(json.dumps(mesh_info(MESH_SPEC)))
    (d / "0.shard").write_bytes(shard)
    return d


def _problems(path: Path) -> list[str]:
    return [p.message for p in open_dataset(path).inspector().validate()]


MESH_IDS = (3, 5, 9)


def _encoded() -> dict[int, tuple[bytes, bytes]]:
    from napari_shardscope.core.formats.precomputed.mesh_writer import encode_multilod_mesh

    return {sid: encode_multilod_mesh(_tetrahedron(sid, float(sid))) for sid in MESH_IDS}


def _spec() -> Any:
    from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec

    return ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=0, shard_bits=0,
                        minishard_index_encoding="raw", data_encoding="raw")


MESH_SPEC = _spec()


def test_validate_counts_the_fragments_before_each_manifest(tmp_path: Path) -> None:
    from napari_shardscope.core.formats.precomputed.mesh_writer import encode_mesh_shard

    path = _mesh_dir(tmp_path, encode_mesh_shard(MESH_SPEC, _encoded(), shard=0))
    assert _problems(path) == []
    assert open_mesh_source(open_store(path), "").mesh(5) is not None  # and it reads


def test_validate_reports_bytes_no_manifest_counts(tmp_path: Path) -> None:
    from napari_shardscope.core.formats.precomputed.mesh_writer import encode_mesh_shard

    encoded = _encoded()
    fragments, manifest = encoded[5]
    encoded[5] = (b"JUNK" + fragments, manifest)  # 4 bytes before segment 5's fragments that its manifest omits
    problems = _problems(_mesh_dir(tmp_path, encode_mesh_shard(MESH_SPEC, encoded, shard=0)))
    assert len(problems) == 1 and problems[0].startswith("4 bytes") and "belong to no index entry" in problems[0]


def test_validate_reports_a_manifest_claiming_more_fragment_bytes_than_precede_it(tmp_path: Path) -> None:
    from napari_shardscope.core.formats.precomputed.mesh_writer import encode_mesh_shard

    encoded = _encoded()
    encoded[3] = (b"", encoded[3][1])  # the first manifest counts fragments that are not there
    problems = _problems(_mesh_dir(tmp_path, encode_mesh_shard(MESH_SPEC, encoded, shard=0)))
    assert any("segment 3" in p and "fragment bytes" in p and "shard index" in p for p in problems), problems

    encoded = _encoded()
    encoded[9] = (b"", encoded[9][1])  # the last manifest's fragments would be segment 5's manifest and fragments
    problems = _problems(_mesh_dir(tmp_path, encode_mesh_shard(MESH_SPEC, encoded, shard=0)))
    assert any("fragments of segment 9" in p and "overlaps" in p for p in problems), problems


def test_validate_reports_a_manifest_that_does_not_decode(tmp_path: Path) -> None:
    from napari_shardscope.core.formats.precomputed.mesh_writer import encode_mesh_shard

    encoded = _encoded()
    encoded[5] = (encoded[5][0], encoded[5][1][:-3])
    problems = _problems(_mesh_dir(tmp_path, encode_mesh_shard(MESH_SPEC, encoded, shard=0)))
    assert any(p.startswith("chunk 5: ") and "manifest" in p for p in problems), problems
