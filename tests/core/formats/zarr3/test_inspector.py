"""The Zarr v3 inspector: scales of arrays and OME-Zarr groups, inspect/locate/ls records,
index-only reads (bytes_read), unsharded and 0-d arrays, and remote reads over HTTP ranges."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.zarr3.inspector import Zarr3Inspector, parse_shard_filter
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, ChunkKeyEncoding, CodecSpec
from napari_shardscope.core.formats.zarr3.writer import write_array
from tests.http_range_server import RangeServer

LE = {"name": "bytes", "configuration": {"endian": "little"}}
GZIP = {"name": "gzip", "configuration": {"level": 1}}


def sharded(
    shape: tuple[int, ...],
    shard: tuple[int, ...],
    inner: tuple[int, ...],
    location: str = "end",
    dtype: str = "uint16",
    key_encoding: ChunkKeyEncoding | None = None,
) -> ArrayMetadata:
    codec = CodecSpec(
        "sharding_indexed",
        {
            "chunk_shape": list(inner),
            "codecs": [LE, GZIP],
            "index_codecs": [LE, {"name": "crc32c"}],
            "index_location": location,
        },
    )
    return ArrayMetadata(
        shape,
        dtype,
        shard,
        key_encoding or ChunkKeyEncoding(),
        0,
        (codec,),
        dimension_names=tuple("zyx"[-len(shape) :]) if shape else None,
    )


def ome_group(root: Path, location: str = "end") -> dict[str, np.ndarray]:
    """An OME-Zarr 0.5 style two-level pyramid: s0 (20, 24, 10) and s1 (10, 12, 5)."""
    store = LocalByteStore(root)
    s0 = np.zeros((20, 24, 10), dtype="uint16")
    s0[2:18, 3:20, 1:9] = np.arange(16 * 17 * 8, dtype="uint16").reshape(16, 17, 8) + 1
    s1 = s0[::2, ::2, ::2].copy()
    write_array(store, "s0", sharded(s0.shape, (8, 8, 8), (4, 4, 2), location), s0)
    write_array(store, "s1", sharded(s1.shape, (8, 8, 8), (4, 4, 2), location), s1)
    group = {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {
            "ome": {
                "version": "0.5",
                "multiscales": [
                    {
                        "axes": [{"name": a, "type": "space"} for a in "zyx"],
                        "datasets": [
                            {"path": "s0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1]}]},
                            {"path": "s1", "coordinateTransformations": [{"type": "scale", "scale": [2, 2, 2]}]},
                        ],
                    }
                ],
            }
        },
    }
    (root / "zarr.json").write_text(json.dumps(group))
    return {"s0": s0, "s1": s1}


def test_open_dataset_dispatches_to_zarr3(tmp_path: Path) -> None:
    ome_group(tmp_path)
    inspector = open_dataset(str(tmp_path)).inspector()
    assert isinstance(inspector, Zarr3Inspector)
    assert inspector.format_name == "zarr3"
    assert inspector.scale_keys() == ["s0", "s1"]


def test_inspect_reads_only_index_bytes(tmp_path: Path) -> None:
    ome_group(tmp_path)
    inspector = open_dataset(tmp_path).inspector()
    report = inspector.inspect()
    json.dumps(report)  # JSON-ready
    assert report["format"] == "zarr3" and report["node_type"] == "group"
    s0, s1 = report["scales"]
    assert s0["key"] == "s0" and s0["shape"] == [20, 24, 10] and s0["data_type"] == "uint16"
    assert s0["shard_shape"] == [8, 8, 8] and s0["inner_chunk_shape"] == [4, 4, 2]
    assert s0["chunks_per_shard"] == [2, 2, 4] and s0["shard_grid_shape"] == [3, 3, 2]
    assert s0["index_location"] == "end" and s0["index_size"] == 16 * 16 + 4
    assert s0["codecs"][0]["name"] == "sharding_indexed"
    assert [c["name"] for c in s0["inner_codecs"]] == ["bytes", "gzip"]
    assert s0["dimension_names"] == ["z", "y", "x"]
    # Every shard of s0 touches the non-zero block, so all 18 files exist; s1 has 2x2x1 shards.
    assert s0["shards_present"] == 18 == s0["num_shards"]
    assert s1["shards_present"] == 4 and s1["num_shards"] == 4
    # Counts agree with the listing, and stored bytes with the sum of listed ranges.
    for scale in (s0, s1):
        records = list(inspector.list_chunks(scale["key"]))
        assert scale["chunks"] == len(records)
        assert scale["data_bytes"] == sum(r["nbytes"] for r in records)
        for shard in scale["shards"]:
            assert shard["file_size"] == (tmp_path / shard["file"]).stat().st_size
            assert shard["index_bytes"] == 16 * 16 + 4
    # Bytes read since opening: the zarr.json files and the shard indexes, nothing else.
    meta_bytes = {s: (tmp_path / s / "zarr.json").stat().st_size for s in ("", "s0", "s1")}
    index_bytes = 16 * 16 + 4
    assert report["bytes_read"] == sum(meta_bytes.values()) + (18 + 4) * index_bytes
    assert inspector.inspect()["bytes_read"] == report["bytes_read"]  # metadata and indexes are cached
    fresh = open_dataset(tmp_path).inspector().inspect("s1")
    assert fresh["bytes_read"] == meta_bytes[""] + meta_bytes["s1"] + 4 * index_bytes


def test_locate_and_list_records(tmp_path: Path) -> None:
    data = ome_group(tmp_path, "start")
    inspector = open_dataset(tmp_path).inspector()
    rec = inspector.locate_format_voxel([17, 9, 5])
    assert rec == {
        "scale": "s0",
        "voxel": [17, 9, 5],
        "shard_key": "s0/c/2/1/0",
        "shard": [2, 1, 0],
        "inner_chunk": [4, 2, 2],
        "inner_chunk_in_shard": [0, 0, 2],
        "byte_range": rec["byte_range"],
        "nbytes": rec["nbytes"],
        "present": True,
    }
    start, end = rec["byte_range"]
    assert end - start == rec["nbytes"] and start >= 16 * 16 + 4  # chunks follow a start index
    absent = inspector.locate_format_voxel([19, 23, 9])  # inner chunk [16:20, 20:24, 8:10] is all zero
    assert absent["present"] is False and absent["byte_range"] is None and absent["nbytes"] is None
    assert inspector.locate_format_voxel([1, 1, 1], scale="s1")["shard_key"] == "s1/c/0/0/0"
    # ls filters: a key relative to the array or the store, "i,j,k", or a sequence.
    by_key = list(inspector.list_chunks("s0", shard="c/2/1/0"))
    assert by_key == list(inspector.list_chunks("s0", shard="s0/c/2/1/0"))
    assert by_key == list(inspector.list_chunks("s0", shard="2,1,0"))
    assert by_key == list(inspector.list_chunks("s0", shard=(2, 1, 0), minishard=None))
    # A shard number (as `--shard N`) counts shards in C order over the 3 x 3 x 2 shard grid.
    assert by_key == list(inspector.list_chunks("s0", shard=2 * 6 + 1 * 2 + 0))
    assert by_key == list(inspector.list_chunks("s0", shard="14"))
    assert rec | {"voxel": None} in [r | {"voxel": None} for r in by_key]
    # Every listed chunk holds the data TensorStore-free decoding says it does.
    reader = inspector.reader("s0")
    for r in by_key:
        chunk = reader.read_inner_chunk(r["inner_chunk"])
        lo = [g * c for g, c in zip(r["inner_chunk"], reader.inner_chunk_shape, strict=True)]
        region = tuple(
            slice(a, min(a + c, s)) for a, c, s in zip(lo, reader.inner_chunk_shape, data["s0"].shape, strict=True)
        )
        np.testing.assert_array_equal(chunk[tuple(slice(0, s.stop - s.start) for s in region)], data["s0"][region])


@pytest.mark.parametrize(
    ("call", "kwargs", "match"),
    [
        ("locate_format_voxel", {"voxel": [20, 0, 0]}, "outside the array"),
        ("locate_format_voxel", {"voxel": [1, 2]}, "outside the array"),
        ("locate_format_voxel", {"voxel": [1, "x", 2]}, "integers"),
        ("locate_format_voxel", {"voxel": [1, 2, 3], "scale": "s9"}, "scale 's9' not found"),
        ("list_chunks", {"shard": "9,9,9"}, "outside the shard grid"),
        ("list_chunks", {"shard": "c/x/y"}, "neither a chunk key"),
        ("list_chunks", {"shard": 18}, "shard number 18 is outside the shard grid"),
        ("list_chunks", {"minishard": 3}, "no filter"),
    ],
)
def test_bad_arguments(tmp_path: Path, call: str, kwargs: dict[str, Any], match: str) -> None:
    ome_group(tmp_path)
    inspector = open_dataset(tmp_path).inspector()
    with pytest.raises(ArgumentError, match=match):
        result = getattr(inspector, call)(**kwargs)
        list(result) if call == "list_chunks" else result


def test_root_array_and_v2_keys(tmp_path: Path) -> None:
    meta = sharded((9, 7), (4, 4), (2, 2), key_encoding=ChunkKeyEncoding("v2", "."))
    data = np.arange(63, dtype="uint16").reshape(9, 7)
    write_array(LocalByteStore(tmp_path), "", meta, data)
    assert sorted(p.name for p in tmp_path.iterdir())[:3] == ["0.0", "0.1", "1.0"]
    inspector = open_dataset(tmp_path).inspector()
    assert inspector.scale_keys() == [""]
    assert inspector.locate_format_voxel([8, 6])["shard_key"] == "2.1"
    # 5 x 4 inner chunks hold data; those wholly past the edge of the edge shards are not stored.
    assert len(list(inspector.list_chunks())) == 5 * 4
    assert list(inspector.validate()) == []


def test_consolidated_group(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path), mode="w")
    arr = group.create_array("raw", shape=(6, 6), dtype="uint8", chunks=(2, 3), shards=(4, 6))
    arr[...] = 7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(tmp_path))
    inspector = open_dataset(tmp_path).inspector()
    assert inspector.scale_keys() == ["raw"]
    assert inspector.locate_format_voxel([5, 5]) | {"byte_range": None, "nbytes": None} == {
        "scale": "raw",
        "voxel": [5, 5],
        "shard_key": "raw/c/1/0",
        "shard": [1, 0],
        "inner_chunk": [2, 1],
        "inner_chunk_in_shard": [0, 1],
        "byte_range": None,
        "nbytes": None,
        "present": True,
    }


def test_unsharded_array(tmp_path: Path) -> None:
    meta = ArrayMetadata(
        (10, 10),
        "uint16",
        (4, 4),
        ChunkKeyEncoding(),
        0,
        (CodecSpec("bytes", LE["configuration"]), CodecSpec("gzip", {"level": 1})),
    )
    data = np.arange(100, dtype="uint16").reshape(10, 10)
    write_array(LocalByteStore(tmp_path), "", meta, data)
    inspector = open_dataset(tmp_path).inspector()
    scale = inspector.inspect()["scales"][0]
    # chunk words, as for every unsharded format: an unsharded array has no shards to speak of
    assert scale["sharded"] is False and not any("shard" in k or "index" in k for k in scale if k != "sharded")
    assert scale["chunk_shape"] == [4, 4] and scale["num_chunks"] == scale["chunk_files"] == scale["chunks"] == 9
    rec = inspector.locate_format_voxel([9, 9])
    assert not any("shard" in k for k in rec)
    assert rec["chunk_key"] == "c/2/2" and rec["grid_position"] == [2, 2]
    assert rec["byte_range"] == [0, (tmp_path / "c/2/2").stat().st_size]
    reader = inspector.reader()
    np.testing.assert_array_equal(reader.read_inner_chunk((2, 2))[:2, :2], data[8:, 8:])
    (tmp_path / "c/2/2").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(ChunkDecodeError):
        reader.read_inner_chunk((2, 2))
    assert [(p.key, p.offset) for p in inspector.validate()] == [("c/2/2", 0)]


def test_zero_dimensional_arrays(tmp_path: Path) -> None:
    for name, encoding, key in [("a", ChunkKeyEncoding(), "a/c"), ("b", ChunkKeyEncoding("v2", "."), "b/0")]:
        meta = sharded((), (), (), key_encoding=encoding)
        write_array(LocalByteStore(tmp_path), name, meta, np.array(5, dtype="uint16"))
        (tmp_path / "zarr.json").write_text(
            json.dumps(
                {
                    "zarr_format": 3,
                    "node_type": "group",
                    "attributes": {"ome": {"multiscales": [{"datasets": [{"path": name}]}]}},
                }
            )
        )
        inspector = open_dataset(tmp_path).inspector()
        rec = inspector.locate_format_voxel([])
        assert rec["shard_key"] == key and rec["present"] and rec["inner_chunk"] == []
        assert int(inspector.reader().read_inner_chunk(())) == 5
        assert list(inspector.validate()) == []


@pytest.mark.parametrize("location", ["end", "start"])
def test_remote_over_http_ranges(http_root: tuple[Path, RangeServer], location: str) -> None:
    root, server = http_root
    ome_group(root, location)
    local = open_dataset(root).inspector()
    remote = open_dataset(server.url).inspector()
    assert remote.scale_keys() == ["s0", "s1"]
    report = remote.inspect("s1")
    expected = local.inspect("s1")
    for shard in expected["scales"][0]["shards"]:
        shard["file_size"] = None  # no cheap stat over HTTP
    assert report["scales"] == expected["scales"]
    # Listing is impossible over plain HTTP: the 4 possible shards were probed, index bytes only.
    metadata = (root / "zarr.json").stat().st_size + (root / "s1" / "zarr.json").stat().st_size
    assert report["bytes_read"] == metadata + 4 * (16 * 16 + 4)
    assert remote.locate_format_voxel([17, 9, 5]) == local.locate_format_voxel([17, 9, 5])
    assert list(remote.list_chunks("s1")) == list(local.list_chunks("s1"))
    ranged = [r for p, r in server.requests if "/c/" in p]
    assert ranged and all(r is not None for r in ranged)  # never a whole shard file
    assert list(remote.validate("s1")) == []


def test_shard_numbers_of_a_grid_larger_than_intp(tmp_path: Path) -> None:
    # 2**124 shards: numpy's unravel_index refuses the grid (ValueError); C order still names shard N.
    meta = sharded((2**62, 2**62), (1, 1), (1, 1), dtype="uint8")
    (tmp_path / "zarr.json").write_text(json.dumps(meta.to_json()))
    inspector = open_dataset(tmp_path).inspector()
    reader = inspector.reader()
    assert parse_shard_filter(reader, 2**62 + 5) == (1, 5)
    assert list(inspector.list_chunks(shard=2**62 + 5)) == []
    with pytest.raises(ArgumentError, match="outside the shard grid"):
        parse_shard_filter(reader, 2**124)


@pytest.mark.parametrize("location", ["end", "start"])
def test_remote_inspect_issues_shard_index_reads_together(tmp_path: Path, location: str) -> None:
    """Over plain HTTP every possible shard of s0 (3 x 3 x 2) is probed by its index read, all in flight at once.

    A gate holds every request until the test opens it, so "together" is shard reads reaching the
    server before any is answered; each shard costs one request (the probe's index is the one
    inspect decodes).
    """
    import threading
    import time

    root = tmp_path / "served"
    root.mkdir()
    ome_group(root, location)
    gate = threading.Event()
    gate.set()
    server = RangeServer(root, gate=gate)
    try:
        local = open_dataset(root).inspector().inspect("s0")
        remote = open_dataset(server.url).inspector()
        remote.reader("s0")  # its metadata, read before the gate closes
        server.requests.clear()
        server.arrived.clear()
        gate.clear()
        result: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: result.update(report=remote.inspect("s0")), daemon=True)
        worker.start()
        try:
            # index reads reach the server before any is answered: a sequential reader stops at the
            # first. All 18 usually do; on this loopback server (one thread per connection) a few
            # connections are sometimes not accepted for seconds, so the test asks for more than one.
            deadline = time.monotonic() + 2.0  # well inside the 3 s after which curl retries a held request
            while time.monotonic() < deadline and len({p for p in server.arrived if "/s0/c/" in p}) < 18:
                time.sleep(0.01)
            assert len({p for p in server.arrived if "/s0/c/" in p}) > 1
        finally:
            gate.set()
        worker.join(30.0)
        assert not worker.is_alive()
        for shard in local["scales"][0]["shards"]:
            shard["file_size"] = None  # no cheap stat over HTTP
        assert result["report"]["scales"] == local["scales"]
        shard_reads = [(p, r) for p, r in server.requests if "/s0/c/" in p]
        assert len({p for p, _ in shard_reads}) == 18 and all(r is not None for _, r in shard_reads)
        assert len(shard_reads) <= 18 * 3  # one request per shard (retries of slow connections aside)
    finally:
        server.close()
