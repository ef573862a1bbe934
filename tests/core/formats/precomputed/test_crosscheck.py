"""Cross-checks with TensorStore and CloudVolume, both ways.

They write, we read: the bytes at our ``byte_range`` decode to exactly what TensorStore returns for
that chunk. We write, they read: shard files from our writer read back identically through
TensorStore (volumes) and CloudVolume (volumes and segment-id-keyed shards).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

import napari_shardscope.core.bytestore.remote as remote_module
from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.shard_writer import write_shards
from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids, parse_sharding_spec
from tests.precomputed_data import SHARDING_IDENTITY_RAW, SHARDING_MURMUR_GZIP, write_ts_volume

SPECS = {"murmur-gzip": SHARDING_MURMUR_GZIP, "identity-raw": SHARDING_IDENTITY_RAW}


def _chunk_array(raw: bytes, start: tuple[int, ...], stop: tuple[int, ...], dtype: str) -> np.ndarray:
    shape_xyz = [b - a for a, b in zip(start, stop, strict=True)]
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape_xyz[::-1]).T


@pytest.mark.parametrize("name", sorted(SPECS))
def test_byte_ranges_decode_to_tensorstore_chunks(tmp_path: Path, name: str) -> None:
    path = tmp_path / "vol"
    volumes = write_ts_volume(path, SPECS[name], scales=3)
    store = LocalByteStore(path)
    info = parse_info(store.read("info") or b"")
    assert len(info.scales) == 3
    inspector = PrecomputedInspector(store, info)
    checked = 0
    for level, sc in enumerate(info.scales):
        assert sc.sharding is not None
        ts_store = ts.open(
            {
                "driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "file", "path": str(path)},
                "scale_index": level,
            }
        ).result()
        gx, gy, gz = sc.grid_shape
        assert (gx, gy, gz) == tuple(math.ceil(s / c) for s, c in zip(sc.size, sc.chunk_size, strict=True))
        for pos in np.ndindex(gx, gy, gz):
            loc = inspector.locate_chunk_id(sc.chunk_id(pos), sc.key)
            assert loc["present"] and loc["grid_position"] == list(pos)
            start, end = loc["byte_range"]
            raw = (store.read(loc["shard_file"]) or b"")[start:end]
            if sc.sharding.data_encoding == "gzip":
                raw = gzip.decompress(raw)
            c0, c1 = sc.chunk_bounds(pos)
            expected = ts_store[c0[0] : c1[0], c0[1] : c1[1], c0[2] : c1[2], 0].read().result()
            np.testing.assert_array_equal(_chunk_array(raw, c0, c1, "uint32"), expected)
            np.testing.assert_array_equal(
                expected,
                volumes[level][
                    c0[0] - sc.voxel_offset[0] : c1[0] - sc.voxel_offset[0],
                    c0[1] - sc.voxel_offset[1] : c1[1] - sc.voxel_offset[1],
                    c0[2] - sc.voxel_offset[2] : c1[2] - sc.voxel_offset[2],
                ],
            )
            checked += 1
    assert checked > 20
    assert list(inspector.validate()) == []


def test_voxel_locate_matches_tensorstore_grid(tmp_path: Path) -> None:
    path = tmp_path / "vol"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=1, offset=(-10, 4, 1))
    inspector = open_dataset(path).inspector()
    rec = inspector.locate_format_voxel([-10 + 17, 4 + 33, 1 + 20])
    assert rec["grid_position"] == [1, 2, 2]
    assert rec["present"] is True
    with pytest.raises(Exception, match="outside scale"):
        inspector.locate_format_voxel([-11, 4, 1])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_shards_we_write_read_back_in_tensorstore_and_cloudvolume(tmp_path: Path, name: str) -> None:
    from cloudvolume import CloudVolume

    # A template volume from TensorStore gives us the info; then we replace every shard file with ours.
    path = tmp_path / "vol"
    volumes = write_ts_volume(path, SPECS[name], scales=1, size=(45, 33, 19), offset=(0, 0, 0))
    store = LocalByteStore(path)
    sc = parse_info(store.read("info") or b"").scales[0]
    assert sc.sharding is not None
    for key in list(store.list(sc.key + "/")):
        (path / key).unlink()
    rng = np.random.default_rng(7)
    data = rng.integers(0, 2**31, size=sc.size, dtype=np.uint32)
    chunks = {}
    for pos in np.ndindex(*sc.grid_shape):
        c0, c1 = sc.chunk_bounds(pos)
        chunks[sc.chunk_id(pos)] = np.ascontiguousarray(data[c0[0] : c1[0], c0[1] : c1[1], c0[2] : c1[2]].T).tobytes()
    keys = write_shards(store, sc.key, sc.sharding, chunks)
    assert keys and all(k.endswith(".shard") for k in keys)

    back = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)}}).result()
    np.testing.assert_array_equal(back[..., 0].read().result(), data)
    assert not np.array_equal(volumes[0], data)  # we really replaced TensorStore's shards

    cv = CloudVolume(f"file://{path}", mip=0, progress=False, fill_missing=False)
    np.testing.assert_array_equal(np.asarray(cv[:, :, :])[..., 0], data)
    assert list(open_dataset(path).inspector().validate()) == []


def test_obsolete_index_data_layout_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "vol"
    write_ts_volume(path, SHARDING_MURMUR_GZIP, scales=1)
    store = LocalByteStore(path)
    sc = parse_info(store.read("info") or b"").scales[0]
    assert sc.sharding is not None
    current = ShardedReader(store, sc.key, sc.sharding)
    ids = sc.chunk_ids_of_grid()
    expected = {int(i): current.read_chunk(int(i)) for i in ids}
    n = sc.sharding.shard_index_size
    for shard_file in sorted((path / sc.key).glob("*.shard")):
        blob = shard_file.read_bytes()
        shard_file.with_suffix(".index").write_bytes(blob[:n])
        shard_file.with_suffix(".data").write_bytes(blob[n:])
        shard_file.unlink()
    old = ShardedReader(LocalByteStore(path), sc.key, sc.sharding)
    for cid, value in expected.items():
        assert old.read_chunk(cid) == value
    loc = old.locate(int(ids[0]))
    assert loc.shard_file.endswith(".index + " + loc.shard_file.split(" + ")[0][:-6] + ".data")
    assert list(open_dataset(path).inspector().validate()) == []


def test_cloudvolume_segment_shards_read_by_us_and_ours_by_cloudvolume(tmp_path: Path) -> None:
    from cloudvolume.datasource.precomputed.sharding import ShardingSpecification

    spec_json = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": 0,
        "hash": "murmurhash3_x86_128",
        "minishard_bits": 3,
        "shard_bits": 2,
        "minishard_index_encoding": "gzip",
        "data_encoding": "gzip",
    }
    rng = np.random.default_rng(3)
    labels = sorted({int(v) for v in rng.integers(1, 2**50, size=300, dtype=np.uint64)})
    payload = {label: rng.bytes(int(rng.integers(1, 200))) for label in labels}

    # CloudVolume writes, we read (a skeleton directory keyed by segment id).
    cv_dir = tmp_path / "cv_skel"
    cv_dir.mkdir()
    (cv_dir / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_json}))
    cv_spec = ShardingSpecification.from_dict(spec_json)
    for filename, blob in cv_spec.synthesize_shards(payload, progress=False).items():
        (cv_dir / filename).write_bytes(blob)
    inspector = open_dataset(cv_dir).inspector()
    reader = inspector.reader(inspector.sources[0])
    for label, value in payload.items():
        assert reader.read_chunk(label) == value
    records = list(inspector.list_chunks())
    assert sorted(r["chunk_id"] for r in records) == labels
    assert list(inspector.validate()) == []

    # We write, CloudVolume reads: locations agree exactly.
    ours = tmp_path / "our_skel"
    ours.mkdir()
    (ours / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_json}))
    write_shards(LocalByteStore(ours), "", parse_sharding_spec(spec_json), payload)
    a = assign_chunk_ids(parse_sharding_spec(spec_json), labels)
    for i, label in enumerate(labels[:50]):
        loc = cv_spec.compute_shard_location(label)
        assert int(loc.minishard_number) == int(a.minishard[i])
        assert loc.shard_number == format(int(a.shard[i]), "x")
        blob = (ours / f"{loc.shard_number}.shard").read_bytes()
        # CloudVolume's index decoder on our bytes.
        index = np.frombuffer(blob[: 16 * 8], dtype="<u8").reshape(-1, 2)
        s, e = index[int(loc.minishard_number)] + 16 * 8
        mi = np.frombuffer(gzip.decompress(blob[s:e]), "<u8").reshape(3, -1)
        ids = np.cumsum(mi[0])
        assert label in ids.tolist()


def test_remote_http_reads_only_index_ranges(tmp_path: Path, http_root: tuple[Path, object],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Without coalescing only index bytes are read (coalescing is bounded too: test_remote_ranges.py).
    monkeypatch.setattr(remote_module, "REMOTE_COALESCE_GAP", None)
    root, server = http_root
    write_ts_volume(root / "vol", SHARDING_MURMUR_GZIP, scales=1)
    total = sum(p.stat().st_size for p in (root / "vol").rglob("*.shard"))
    inspector = open_dataset(server.url + "vol").inspector()  # type: ignore[attr-defined]
    local = open_dataset(root / "vol").inspector()
    remote_summary = inspector.inspect()
    local_summary = local.inspect()
    assert remote_summary["scales"][0]["chunks"] == local_summary["scales"][0]["chunks"] > 0
    assert remote_summary["bytes_read"] < total / 20
    ranged = [r for r in server.requests if r[0].endswith(".shard")]  # type: ignore[attr-defined]
    assert ranged and all(rng is not None for _, rng in ranged)
    sc = local.volume.scales[0] if local.volume else None
    assert sc is not None
    cid = sc.chunk_id((1, 1, 1))
    assert inspector.locate_chunk_id(cid) == local.locate_chunk_id(cid)
    assert inspector.reader(inspector.sources[0]).read_chunk(cid) == local.reader(local.sources[0]).read_chunk(cid)
