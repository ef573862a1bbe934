"""Cross-checks of the Zarr v3 sharding core against TensorStore and zarr-python, both ways.

* Datasets *they* write: for every inner chunk of the array, the bytes at our ``byte_range``
  (read with plain file I/O, not through our store) decode to what TensorStore returns for that
  region, and chunks we call absent read back as the fill value. Our listing of each shard equals
  TensorStore's own ``zarr3_sharding_indexed`` kvstore listing, byte for byte.
* Datasets *we* write (:func:`write_array`): TensorStore and zarr-python read every voxel back
  identically.
"""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, ChunkKeyEncoding, CodecSpec
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.writer import write_array

SHAPE = (21, 30, 13)  # not a multiple of the shard shape along any axis
SHARD = (8, 16, 8)
INNER = (4, 8, 4)
LE = {"name": "bytes", "configuration": {"endian": "little"}}
BE = {"name": "bytes", "configuration": {"endian": "big"}}
INDEX_CRC = [LE, {"name": "crc32c"}]


def make_data(dtype: str = "uint16", shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """Varied data with empty regions: shard (0,0,0) is all zero (no file), some inner chunks too."""
    rng = np.random.default_rng(7)
    data = rng.integers(1, 60000, size=shape).astype(dtype)
    data[0:8, 0:16, 0:8] = 0  # one whole shard of fill value
    data[8:12, 16:24, :] = 0  # some inner chunks of fill value
    data[16:, :, 5:] = data[16:, :, 5:] // 7  # a little compressible structure
    return data


def sharding(
    codecs: list[dict[str, Any]],
    location: str | None,
    chunk_shape: tuple[int, ...] = INNER,
    index_codecs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "chunk_shape": list(chunk_shape),
        "codecs": codecs,
        "index_codecs": index_codecs if index_codecs is not None else INDEX_CRC,
    }
    if location is not None:
        config["index_location"] = location
    return {"name": "sharding_indexed", "configuration": config}


def ts_write(
    path: Path, data: np.ndarray, codecs: list[dict[str, Any]], key_encoding: dict[str, Any] | None = None
) -> Any:
    metadata: dict[str, Any] = {
        "shape": list(data.shape),
        "data_type": str(data.dtype),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(SHARD)}},
        "codecs": codecs,
    }
    if key_encoding is not None:
        metadata["chunk_key_encoding"] = key_encoding
    arr = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "metadata": metadata}, create=True
    ).result()
    arr[...] = data
    return arr


TS_CASES = {
    "end-gzip": ([sharding([LE, {"name": "gzip", "configuration": {"level": 5}}], "end")], None),
    "start-gzip": ([sharding([LE, {"name": "gzip", "configuration": {"level": 1}}], "start")], None),
    "absent-location-zstd-v2keys": (
        [sharding([BE, {"name": "zstd", "configuration": {"level": 3, "checksum": True}}], None)],
        {"name": "v2", "configuration": {"separator": "."}},
    ),
    "transpose-blosc-crc32c-dotkeys": (
        [
            {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
            sharding(
                [
                    LE,
                    {
                        "name": "blosc",
                        "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2},
                    },
                    {"name": "crc32c"},
                ],
                "start",
                chunk_shape=(INNER[2], INNER[0], INNER[1]),
            ),
        ],
        {"name": "default", "configuration": {"separator": "."}},
    ),
    "no-index-crc": ([sharding([LE, {"name": "gzip", "configuration": {"level": 1}}], "end", index_codecs=[BE])], None),
}


def shard_kvstore(path: Path, key: str, reader: Zarr3ArrayReader) -> Any:
    """TensorStore's own view of one shard file as a key-value store of inner chunks."""
    config = reader.sharding
    assert config is not None
    return ts.KvStore.open(
        {
            "driver": "zarr3_sharding_indexed",
            "base": f"file://{path}/{key}",
            "grid_shape": list(config.chunks_per_shard),
            "index_codecs": [c.to_json() for c in config.index_codecs],
            "index_location": config.index_location,
        }
    ).result()


@pytest.mark.parametrize("case", sorted(TS_CASES))
def test_tensorstore_written_byte_ranges_decode_to_tensorstore_values(tmp_path: Path, case: str) -> None:
    codecs, key_encoding = TS_CASES[case]
    data = make_data()
    arr = ts_write(tmp_path, data, codecs, key_encoding)
    inspector = open_dataset(str(tmp_path)).inspector()
    reader = inspector.reader()  # type: ignore[attr-defined]
    assert reader.inner_chunk_shape == INNER
    present = 0
    for grid in product(*(range(n) for n in reader.inner_grid_shape)):
        region = tuple(slice(g * c, min((g + 1) * c, s)) for g, c, s in zip(grid, INNER, SHAPE, strict=True))
        expected = arr[region].read().result()
        loc = reader.locate_inner_chunk(grid)
        if not loc.present:
            assert not expected.any(), f"{grid} said absent but TensorStore has data"
            continue
        present += 1
        start, end = loc.byte_range
        raw = (tmp_path / loc.shard_key).read_bytes()[start:end]  # plain file I/O, not our store
        decoded = reader.decode_inner_chunk(raw, key=loc.shard_key, offset=start)
        assert decoded.shape == INNER
        np.testing.assert_array_equal(decoded[tuple(slice(0, r.stop - r.start) for r in region)], expected)
    assert present > 0
    # Shard (0, 0, 0) is all fill value: TensorStore wrote no file, and we report it absent.
    assert not (tmp_path / reader.shard_key((0, 0, 0))).exists()
    assert not reader.locate_voxel((1, 2, 3)).present
    assert list(inspector.validate()) == []


@pytest.mark.parametrize("case", ["end-gzip", "start-gzip", "transpose-blosc-crc32c-dotkeys"])
def test_listing_matches_tensorstore_shard_kvstore(tmp_path: Path, case: str) -> None:
    codecs, key_encoding = TS_CASES[case]
    ts_write(tmp_path, make_data(), codecs, key_encoding)
    reader = Zarr3ArrayReader(LocalByteStore(tmp_path))
    files = reader.list_shard_files()
    assert len(files) == 3 * 2 * 2 - 1
    for key, shard in files:
        kv = shard_kvstore(tmp_path, key, reader)
        theirs = {}
        for k in kv.list().result():
            index_pos = tuple(int.from_bytes(k[i : i + 4], "big") for i in range(0, len(k), 4))
            theirs[reader.array_position(index_pos)] = bytes(kv.read(k).result().value)
        ours = {}
        blob = (tmp_path / key).read_bytes()
        for loc in reader.list_inner_chunks(shard):
            start, end = loc.byte_range
            ours[loc.inner_chunk_in_shard] = blob[start:end]
        assert ours == theirs


def test_zarr_python_written_index_start_and_end(tmp_path: Path) -> None:
    data = make_data("int32")
    for location in ("start", "end"):
        path = tmp_path / location
        z = zarr.create_array(
            str(path),
            shape=SHAPE,
            dtype="int32",
            chunks=INNER,
            shards={"shape": SHARD, "index_location": location},
            compressors=zarr.codecs.GzipCodec(level=2),
            fill_value=0,
        )
        z[...] = data
        inspector = open_dataset(str(path)).inspector()
        reader = inspector.reader()  # type: ignore[attr-defined]
        assert reader.sharding.index_location == location
        seen = 0
        for rec in inspector.list_chunks():
            start, end = rec["byte_range"]
            raw = (path / rec["shard_key"]).read_bytes()[start:end]
            grid = rec["inner_chunk"]
            region = tuple(slice(g * c, min((g + 1) * c, s)) for g, c, s in zip(grid, INNER, SHAPE, strict=True))
            decoded = reader.decode_inner_chunk(raw, key=rec["shard_key"], offset=start)
            np.testing.assert_array_equal(decoded[tuple(slice(0, r.stop - r.start) for r in region)], z[region])
            seen += 1
        assert seen == inspector.inspect()["scales"][0]["chunks"]
        assert list(inspector.validate()) == []


# -- the other way: we write, they read --------------------------------------------------------


def our_metadata(
    codecs: list[dict[str, Any]], dtype: str = "uint16", fill: Any = 0, key_encoding: ChunkKeyEncoding | None = None
) -> ArrayMetadata:
    return ArrayMetadata(
        shape=SHAPE,
        data_type=dtype,
        chunk_shape=SHARD,
        chunk_key_encoding=key_encoding or ChunkKeyEncoding(),
        fill_value=fill,
        codecs=tuple(CodecSpec(c["name"], c.get("configuration", {})) for c in codecs),
        dimension_names=("z", "y", "x"),
    )


OUR_CASES: dict[str, tuple[list[dict[str, Any]], str, Any, ChunkKeyEncoding | None]] = {
    "end-gzip": ([sharding([LE, {"name": "gzip", "configuration": {"level": 6}}], "end")], "uint16", 0, None),
    "start-gzip": ([sharding([LE, {"name": "gzip", "configuration": {"level": 1}}], "start")], "uint16", 0, None),
    "start-zstd-bigendian-v2keys": (
        [
            sharding(
                [BE, {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
                "start",
                index_codecs=[BE, {"name": "crc32c"}],
            )
        ],
        "uint32",
        0,
        ChunkKeyEncoding("v2", "."),
    ),
    "end-blosc-crc32c-float-nan": (
        [
            sharding(
                [
                    LE,
                    {
                        "name": "blosc",
                        "configuration": {
                            "cname": "zstd",
                            "clevel": 3,
                            "shuffle": "bitshuffle",
                            "typesize": 4,
                            "blocksize": 0,
                        },
                    },
                    {"name": "crc32c"},
                ],
                "end",
            )
        ],
        "float32",
        "NaN",
        None,
    ),
    "transpose-then-sharding": (
        [
            {"name": "transpose", "configuration": {"order": [1, 2, 0]}},
            sharding(
                [LE, {"name": "gzip", "configuration": {"level": 1}}], "end", chunk_shape=(INNER[1], INNER[2], INNER[0])
            ),
        ],
        "int16",
        -1,
        ChunkKeyEncoding("default", "."),
    ),
    "nested-sharding": (
        [sharding([sharding([LE], "start", chunk_shape=(2, 4, 2))], "end")],
        "uint8",
        0,
        None,
    ),
    "unsharded-gzip": ([LE, {"name": "gzip", "configuration": {"level": 1}}], "uint16", 0, None),
}


@pytest.mark.parametrize("case", sorted(OUR_CASES))
def test_shards_we_write_read_back_in_tensorstore_and_zarr_python(tmp_path: Path, case: str) -> None:
    codecs, dtype, fill, key_encoding = OUR_CASES[case]
    data = make_data(dtype)
    if dtype == "float32":
        data = data / 3
        data[0:8, 0:16, 0:8] = np.nan  # a shard of fill value (NaN)
        data[8:12, 0:8, 0:4] = np.nan  # and an inner chunk
    elif fill == -1:
        data[0:8, 0:16, 0:8] = -1
    meta = our_metadata(codecs, dtype, fill, key_encoding)
    keys = write_array(LocalByteStore(tmp_path), "", meta, data)
    assert keys[0] == "zarr.json"
    assert meta.chunk_key((0, 0, 0)) not in keys  # the all-fill shard is not written
    assert json.loads((tmp_path / "zarr.json").read_bytes()) == meta.to_json()

    theirs_ts = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path)}}).result()
    np.testing.assert_array_equal(theirs_ts.read().result(), data)
    theirs_zarr = zarr.open_array(str(tmp_path), mode="r")
    np.testing.assert_array_equal(theirs_zarr[...], data)
    # And our own reader agrees, with a clean validation.
    inspector = open_dataset(str(tmp_path)).inspector()
    assert list(inspector.validate()) == []
    reader = inspector.reader()  # type: ignore[attr-defined]
    for grid in [(0, 0, 0), (1, 1, 1), tuple(n - 1 for n in reader.inner_grid_shape)]:
        chunk = reader.read_inner_chunk(grid)
        region = tuple(
            slice(g * c, min((g + 1) * c, s)) for g, c, s in zip(grid, reader.inner_chunk_shape, SHAPE, strict=True)
        )
        np.testing.assert_array_equal(chunk[tuple(slice(0, r.stop - r.start) for r in region)], data[region])


def test_tensorstore_reads_a_single_shard_we_encode_by_hand(tmp_path: Path) -> None:
    """Index and chunks assembled with the low-level encoders, one shard, both index locations."""
    from napari_shardscope.core.formats.zarr3.codecs import encode_chunk, split_codec_chain
    from napari_shardscope.core.formats.zarr3.sharding import encode_shard, parse_sharding_config

    data = np.arange(8 * 16 * 8, dtype="uint16").reshape(8, 16, 8)
    for location in ("start", "end"):
        root = tmp_path / location
        codecs = [sharding([LE, {"name": "gzip", "configuration": {"level": 1}}], location)]
        meta = our_metadata(codecs)
        meta = ArrayMetadata(
            shape=SHARD,
            data_type="uint16",
            chunk_shape=SHARD,
            chunk_key_encoding=meta.chunk_key_encoding,
            fill_value=0,
            codecs=meta.codecs,
        )
        config = parse_sharding_config(meta.codecs[0], SHARD, meta.dtype, key="zarr.json")
        inner_chain = split_codec_chain(
            [CodecSpec("bytes", {"endian": "little"}), CodecSpec("gzip", {"level": 1})], 3, meta.dtype, key="x"
        )
        chunks = {}
        for pos in product(*(range(n) for n in config.chunks_per_shard)):
            if pos == (1, 0, 1):
                continue  # leave one inner chunk empty
            sel = tuple(slice(p * c, (p + 1) * c) for p, c in zip(pos, INNER, strict=True))
            chunks[pos] = encode_chunk(data[sel], inner_chain)
        root.mkdir()
        (root / "zarr.json").write_text(json.dumps(meta.to_json()))
        (root / "c" / "0" / "0").mkdir(parents=True)
        (root / "c" / "0" / "0" / "0").write_bytes(encode_shard(chunks, config))
        expected = data.copy()
        expected[4:8, 0:8, 4:8] = 0
        got = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root)}}).result().read().result()
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(zarr.open_array(str(root), mode="r")[...], expected)


def test_pre_spec_transpose_order_letters_read_as_tensorstore_reads_them() -> None:
    """zarrita wrote ``"order": "F"``; the viewer (TensorStore) read it while ``inspect`` refused it."""

    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.volumes import open_volume
    from tests.realdata import realdata_path

    path = realdata_path("ng_zarrita_v3", "data.zarr", "3d.chunked.mixed.i2.F")
    viewer = open_volume(path).levels[0].array.read()
    reader = open_dataset(path).inspector().reader("")
    ours = np.concatenate([reader.read_inner_chunk((0, 0, z)) for z in range(3)], axis=2)
    np.testing.assert_array_equal(ours, viewer)
    assert list(open_dataset(path).inspector().validate()) == []
