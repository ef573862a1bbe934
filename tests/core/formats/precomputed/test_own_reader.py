"""Precomputed data TensorStore's driver does not read, read by our own chunk decoders.

* CloudVolume's local layout (``NAME.gz`` chunk files; ``../shared/realdata/cloudvolume_gz``, whose
  README gives the values written) read as zeros before: every consumer now reads the writer's data,
  ``validate`` decodes each file, ``locate`` names the ``.gz`` key.
* ``compresso`` segmentation, unsharded (written by CloudVolume at test time) and sharded (chunks
  encoded with the ``compresso`` package, shards written by our writer and checked by TensorStore's
  shard index reader through the raw encoding of the same spec).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.shard_writer import group_by_shard, write_shard
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.volumes import open_volume
from tests.realdata import REALDATA

CVGZ = REALDATA / "cloudvolume_gz"


def cloudvolume_gz_values() -> np.ndarray:
    """value(x, y, z) = (x*600 + y*20 + z) // 37 + 1000 over the written [40, 30, 20] array, as z, y, x."""
    z, y, x = np.meshgrid(np.arange(20), np.arange(30), np.arange(40), indexing="ij")
    return ((x * 600 + y * 20 + z) // 37 + 1000).astype(np.uint32)


@pytest.mark.realdata
def test_cloudvolume_gz_layout_reads_the_writers_values(tmp_path: Path) -> None:
    vol = open_volume(CVGZ)
    np.testing.assert_array_equal(vol.levels[0].array.read(), cloudvolume_gz_values())
    np.testing.assert_array_equal(vol.levels[0].array[3:9, 20:, 7].read(), cloudvolume_gz_values()[3:9, 20:, 7])
    ins = open_dataset(CVGZ).inspector()
    assert list(ins.validate()) == []
    where = ins.locate_format_voxel([10, 10, 10])
    assert where["present"] and where["chunk_key"] == "8_8_40/3-19_5-21_7-15.gz"

    shutil.copytree(CVGZ, tmp_path / "cv")
    for f in (tmp_path / "cv").rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    damaged = tmp_path / "cv" / "8_8_40" / "3-19_5-21_7-15.gz"
    damaged.write_bytes(damaged.read_bytes()[:-6])
    (problem,) = open_dataset(tmp_path / "cv").inspector().validate()
    assert problem.key == "8_8_40/3-19_5-21_7-15.gz" and "truncated" in problem.message
    with pytest.raises(ChunkDecodeError, match=r"3-19_5-21_7-15\.gz"):
        open_volume(tmp_path / "cv").levels[0].array.read()


def test_compresso_unsharded_written_by_cloudvolume(tmp_path: Path) -> None:
    from cloudvolume import CloudVolume

    rng = np.random.default_rng(4)
    labels = (rng.integers(0, 6, size=(48, 40, 20)) * 1000 + 7).astype(np.uint64)  # x, y, z
    info = CloudVolume.create_new_info(num_channels=1, layer_type="segmentation", data_type="uint64",
                                       encoding="compresso", resolution=[8, 8, 40], voxel_offset=[5, 0, 3],
                                       chunk_size=[16, 16, 8], volume_size=list(labels.shape))
    cv = CloudVolume(f"file://{tmp_path / 'seg'}", info=info, compress=False, progress=False)
    cv.commit_info()
    cv[5:53, 0:40, 3:23] = labels
    vol = open_volume(tmp_path / "seg")
    np.testing.assert_array_equal(vol.levels[0].array.read(), labels.T)
    assert list(open_dataset(tmp_path / "seg").inspector().validate()) == []
    chunk = next((tmp_path / "seg" / "8_8_40").glob("*-*_*-*_*-*"))
    chunk.write_bytes(chunk.read_bytes()[:40])
    (problem,) = open_dataset(tmp_path / "seg").inspector().validate()
    assert problem.key.endswith(chunk.name) and "compresso" in problem.message


def test_compresso_sharded(tmp_path: Path) -> None:
    import compresso

    root = tmp_path / "sharded"
    size, chunk = (32, 32, 16), (16, 16, 8)
    rng = np.random.default_rng(5)
    labels = rng.integers(1, 4, size=size).astype(np.uint32)  # x, y, z
    spec_json = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                 "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip",
                 "data_encoding": "gzip"}
    info = {"@type": "neuroglancer_multiscale_volume", "type": "segmentation", "data_type": "uint32",
            "num_channels": 1, "scales": [{"key": "s0", "size": list(size), "voxel_offset": [0, 0, 0],
                                           "resolution": [4, 4, 40], "chunk_sizes": [list(chunk)],
                                           "encoding": "compresso", "sharding": spec_json}]}
    root.mkdir()
    (root / "info").write_text(json.dumps(info))
    spec: ShardingSpec = parse_sharding_spec(spec_json, key="info")
    scale = open_dataset(root).inspector().source("s0").scale
    assert scale is not None
    chunks: dict[int, bytes] = {}
    for gx in range(2):
        for gy in range(2):
            for gz in range(2):
                block = labels[gx * 16:(gx + 1) * 16, gy * 16:(gy + 1) * 16, gz * 8:(gz + 1) * 8]
                chunks[scale.chunk_id((gx, gy, gz))] = bytes(compresso.compress(np.asfortranarray(block)))
    store = LocalByteStore(root)
    for shard, ids in group_by_shard(spec, list(chunks)).items():
        write_shard(store, "s0", spec, shard, {i: chunks[i] for i in ids})
    vol = open_volume(root)
    np.testing.assert_array_equal(vol.levels[0].array.read(), labels.T)
    assert list(open_dataset(root).inspector().validate()) == []
    # a compresso chunk that does not decode is found inside its shard (its gzip data encoding is fine)
    bad = scale.chunk_id((1, 1, 1))
    chunks[bad] = chunks[bad][:30]
    for shard, ids in group_by_shard(spec, list(chunks)).items():
        write_shard(store, "s0", spec, shard, {i: chunks[i] for i in ids})
    (problem,) = open_dataset(root).inspector().validate()
    assert "compresso" in problem.message
    with pytest.raises(ChunkDecodeError, match="compresso"):
        open_volume(root).levels[0].array.read()


@pytest.mark.realdata
def test_locate_segment_finds_cloudvolume_gz_annotation_files() -> None:
    records = open_dataset(REALDATA / "cv_annotation").inspector().locate_segment(3867588737)
    by_id = [r for r in records if r["source"] == "by_id"]
    assert by_id == [{"source": "by_id", "kind": "annotation_by_id", "segment": 3867588737,
                      "key": "by_id/3867588737.gz", "present": True, "sharded": False}]
    related = open_dataset(REALDATA / "cv_annotation").inspector().locate_segment(243895108)
    assert any(r["key"] == "skeleton_id/243895108.gz" and r["present"] for r in related)


def test_cloudvolume_brotli_files(tmp_path: Path) -> None:
    """CloudVolume's ``compress="br"`` stores chunk files as ``NAME.br``."""
    import brotli
    from cloudvolume import CloudVolume

    rng = np.random.default_rng(6)
    image = rng.integers(0, 255, size=(40, 24, 10), dtype=np.uint8)  # x, y, z
    info = CloudVolume.create_new_info(num_channels=1, layer_type="image", data_type="uint8", encoding="raw",
                                       resolution=[4, 4, 40], voxel_offset=[0, 0, 0], chunk_size=[16, 16, 8],
                                       volume_size=list(image.shape))
    cv = CloudVolume(f"file://{tmp_path / 'img'}", info=info, compress="br", progress=False)
    cv.commit_info()
    cv[:, :, :] = image
    assert any(p.suffix == ".br" for p in (tmp_path / "img" / "4_4_40").iterdir())
    np.testing.assert_array_equal(open_volume(tmp_path / "img").levels[0].array.read(), image.T)
    assert list(open_dataset(tmp_path / "img").inspector().validate()) == []
    bomb = next((tmp_path / "img" / "4_4_40").glob("*.br"))
    bomb.write_bytes(brotli.compress(b"\0" * (64 << 20)))  # 64 MiB where a chunk holds 2 KiB
    (problem,) = open_dataset(tmp_path / "img").inspector().validate()
    assert "brotli data decodes to more than" in problem.message
    with pytest.raises(ChunkDecodeError, match="brotli"):
        open_volume(tmp_path / "img").levels[0].array.read()
