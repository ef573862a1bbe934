"""Round trips of every Zarr v3 encoder/decoder (hypothesis) and spec examples."""

from __future__ import annotations

import json
import math
import struct
from itertools import product
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.errors import ChecksumError, ChunkDecodeError, MetadataError
from napari_shardscope.core.formats.zarr3.codecs import (
    append_crc32c,
    decode_bytes_codec,
    decode_chunk,
    encode_bytes_codec,
    encode_chunk,
    split_codec_chain,
    strip_crc32c,
)
from napari_shardscope.core.formats.zarr3.metadata import (
    DATA_TYPES,
    ArrayMetadata,
    ChunkKeyEncoding,
    CodecSpec,
    parse_array_metadata,
    parse_fill_value,
    parse_group_metadata,
    parse_node_metadata,
)
from napari_shardscope.core.formats.zarr3.sharding import (
    EMPTY,
    ShardIndex,
    decode_shard_array,
    decode_shard_index,
    encode_shard,
    encode_shard_array,
    encode_shard_index,
    find_index_problems,
    parse_sharding_config,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LE = {"name": "bytes", "configuration": {"endian": "little"}}
BE = {"name": "bytes", "configuration": {"endian": "big"}}
BYTES_CODECS = [
    {"name": "gzip", "configuration": {"level": 1}},
    {"name": "zstd", "configuration": {"level": 1, "checksum": True}},
    {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 3, "shuffle": "shuffle", "typesize": 2}},
    {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1, "shuffle": "noshuffle"}},
    {"name": "crc32c"},
]
NUMERIC = [t for t in DATA_TYPES if t != "bool"]


def spec(d: dict[str, Any]) -> CodecSpec:
    return CodecSpec(d["name"], d.get("configuration", {}))


def index_codecs(endian: str, crc: bool) -> list[dict[str, Any]]:
    return [{"name": "bytes", "configuration": {"endian": endian}}] + ([{"name": "crc32c"}] if crc else [])


def sharding_codec(
    inner: tuple[int, ...],
    codecs: list[dict[str, Any]],
    location: str = "end",
    endian: str = "little",
    crc: bool = True,
) -> CodecSpec:
    return CodecSpec(
        "sharding_indexed",
        {
            "chunk_shape": list(inner),
            "codecs": codecs,
            "index_codecs": index_codecs(endian, crc),
            "index_location": location,
        },
    )


# -- metadata ---------------------------------------------------------------------------------


@SETTINGS
@given(
    st.lists(st.integers(0, 10**12), max_size=6),
    st.sampled_from([("default", "/"), ("default", "."), ("v2", "."), ("v2", "/")]),
)
def test_chunk_key_encoding_round_trip(position: list[int], enc: tuple[str, str]) -> None:
    encoding = ChunkKeyEncoding(enc[0], enc[1])  # type: ignore[arg-type]
    key = encoding.encode(position)
    assert encoding.decode(key, len(position)) == tuple(position)
    assert encoding.decode(key + enc[1] + "7", len(position)) is None  # wrong rank
    assert encoding.decode("zarr.json", len(position)) is None


def test_chunk_key_examples() -> None:
    assert ChunkKeyEncoding().encode((1, 2, 3)) == "c/1/2/3"
    assert ChunkKeyEncoding().encode(()) == "c"
    assert ChunkKeyEncoding("default", ".").encode((1, 2)) == "c.1.2"
    assert ChunkKeyEncoding("v2", ".").encode((1, 2, 3)) == "1.2.3"
    assert ChunkKeyEncoding("v2", ".").encode(()) == "0"
    assert ChunkKeyEncoding("v2", "/").encode((4, 5)) == "4/5"


fill_values = {
    "bool": st.booleans(),
    **{t: st.integers(int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in NUMERIC if t[0] in "iu"},
    **{
        t: st.one_of(st.floats(allow_nan=False, width=int(t[5:])), st.sampled_from(["NaN", "Infinity", "-Infinity"]))
        for t in ("float16", "float32", "float64")
    },
    **{
        t: st.lists(
            st.one_of(st.floats(allow_nan=False, width=int(t[7:]) // 2), st.just("NaN")), min_size=2, max_size=2
        )
        for t in ("complex64", "complex128")
    },
}


@st.composite
def array_metadata(draw: st.DrawFn) -> ArrayMetadata:
    ndim = draw(st.integers(0, 4))
    inner = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    per = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    shard = tuple(i * p for i, p in zip(inner, per, strict=True))
    shape = tuple(draw(st.lists(st.integers(0, 50), min_size=ndim, max_size=ndim)))
    data_type = draw(st.sampled_from(sorted(DATA_TYPES)))
    fill = draw(fill_values[data_type])
    inner_codecs = [LE, *draw(st.lists(st.sampled_from(BYTES_CODECS), max_size=2))]
    codecs = (sharding_codec(inner, inner_codecs, draw(st.sampled_from(["start", "end"]))),)
    encoding = ChunkKeyEncoding(*draw(st.sampled_from([("default", "/"), ("v2", "."), ("default", ".")])))
    names = draw(
        st.one_of(
            st.none(), st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=ndim, max_size=ndim).map(tuple)
        )
    )
    attributes = draw(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
    return ArrayMetadata(shape, data_type, shard, encoding, fill, codecs, names, attributes)


@SETTINGS
@given(array_metadata())
def test_array_metadata_round_trip(meta: ArrayMetadata) -> None:
    text = json.dumps(meta.to_json()).encode()
    parsed = parse_array_metadata(text, key="zarr.json")
    assert parsed == meta
    assert parse_node_metadata(text, key="zarr.json") == meta
    assert parsed.grid_shape == tuple(math.ceil(s / c) for s, c in zip(meta.shape, meta.chunk_shape, strict=True))
    scalar = parsed.fill_scalar
    assert scalar.dtype == np.dtype(meta.data_type)


def test_fill_value_forms() -> None:
    assert np.isnan(parse_fill_value("NaN", "float32"))
    assert parse_fill_value("-Infinity", "float64") == -np.inf
    assert parse_fill_value("0x3f800000", "float32") == 1.0
    assert parse_fill_value("0x3c00", "float16") == 1.0
    assert parse_fill_value([1.5, "NaN"], "complex64").real == 1.5
    assert parse_fill_value(True, "bool") == np.True_
    for bad, dtype in [
        (True, "uint8"),
        (1, "bool"),
        (256, "uint8"),
        ("0x1ffff", "float16"),
        ("nan", "float32"),
        ([1], "complex64"),
        (1e300, "int8"),
    ]:
        with pytest.raises(MetadataError, match="fill_value"):
            parse_fill_value(bad, dtype, key="zarr.json")


def test_group_multiscales_and_consolidated() -> None:
    doc = {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"ome": {"version": "0.5", "multiscales": [{"datasets": [{"path": "0"}, {"path": "1/"}]}]}},
        "consolidated_metadata": {
            "kind": "inline",
            "metadata": {"b": {"node_type": "array"}, "a/x": {"node_type": "array"}, "g": {"node_type": "group"}},
        },
    }
    group = parse_group_metadata(json.dumps(doc).encode(), key="zarr.json")
    assert group.multiscale_paths == ("0", "1")
    assert group.consolidated_array_paths == ("a/x", "b")
    legacy = {"zarr_format": 3, "node_type": "group", "attributes": {"multiscales": [{"datasets": [{"path": "s0"}]}]}}
    assert parse_group_metadata(legacy, key="k").multiscale_paths == ("s0",)
    for datasets in ([], [{"path": "../x"}], [{"nopath": 1}]):
        bad = {"zarr_format": 3, "node_type": "group", "attributes": {"ome": {"multiscales": [{"datasets": datasets}]}}}
        with pytest.raises(MetadataError, match="multiscales"):
            parse_group_metadata(bad, key="zarr.json")


# -- codecs -----------------------------------------------------------------------------------


@st.composite
def chunk_and_chain(draw: st.DrawFn) -> tuple[np.ndarray, list[CodecSpec]]:
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(sorted(DATA_TYPES))))
    raw = draw(st.binary(min_size=math.prod(shape) * dtype.itemsize, max_size=math.prod(shape) * dtype.itemsize))
    array = (
        np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        if dtype.kind != "b"
        else (np.frombuffer(raw, dtype="uint8") % 2).astype(bool).reshape(shape)
    )
    chain: list[CodecSpec] = []
    for _ in range(draw(st.integers(0, 2))):
        chain.append(CodecSpec("transpose", {"order": draw(st.permutations(range(ndim)))}))
    chain.append(spec(draw(st.sampled_from([LE, BE]))))
    chain += [spec(c) for c in draw(st.lists(st.sampled_from(BYTES_CODECS), max_size=3))]
    return array, chain


@SETTINGS
@given(chunk_and_chain())
def test_chunk_codec_chain_round_trip(case: tuple[np.ndarray, list[CodecSpec]]) -> None:
    array, codecs = case
    chain = split_codec_chain(codecs, array.ndim, array.dtype, key="k")
    data = encode_chunk(array, chain)
    decoded = decode_chunk(data, chain, array.shape, array.dtype, array.dtype.type(0), key="k", offset=5)
    assert decoded.shape == array.shape and decoded.dtype == array.dtype
    assert decoded.tobytes() == array.tobytes()  # bitwise, so NaN payloads count too


@SETTINGS
@given(st.binary(max_size=2000), st.sampled_from(BYTES_CODECS))
def test_bytes_codec_round_trip(data: bytes, codec: dict[str, Any]) -> None:
    c = spec(codec)
    if codec["name"] == "blosc" and len(data) % int(codec["configuration"].get("typesize", 1)):
        data = data[: len(data) - len(data) % 2]
    assert decode_bytes_codec(encode_bytes_codec(data, c), c, key="k") == data


@SETTINGS
@given(st.binary(max_size=500))
def test_crc32c_codec(data: bytes) -> None:
    stored = append_crc32c(data)
    assert stored[-4:] == struct.pack("<I", crc32c.crc32c(data))
    assert strip_crc32c(stored, key="k") == data
    bad = bytearray(stored)
    bad[0 if data else -1] ^= 1
    with pytest.raises(ChecksumError) as err:
        strip_crc32c(bytes(bad), key="k", offset=100)
    assert err.value.key == "k" and err.value.offset == 100 + len(data)


def test_transpose_layout_matches_the_spec() -> None:
    """transpose order [1, 0] stores the array's transpose in C order."""
    a = np.arange(6, dtype="uint8").reshape(2, 3)
    chain = split_codec_chain([CodecSpec("transpose", {"order": [1, 0]}), spec(LE)], 2, a.dtype, key="k")
    assert encode_chunk(a, chain) == bytes([0, 3, 1, 4, 2, 5])


def test_bytes_codec_wrong_length() -> None:
    chain = split_codec_chain([spec(LE)], 1, np.dtype("uint16"), key="k")
    with pytest.raises(ChunkDecodeError, match="5 bytes do not hold") as err:
        decode_chunk(b"12345", chain, (3,), np.dtype("uint16"), np.uint16(0), key="k", offset=9)
    assert err.value.offset == 9


# -- the shard index and whole shards ---------------------------------------------------------


def test_index_size_matches_the_spec_example() -> None:
    """ZEP 2: shard [64, 64], inner [32, 32], little endian + crc32c → 16 * 4 + 4 = 68 bytes."""
    config = parse_sharding_config(sharding_codec((32, 32), [LE]), (64, 64), np.dtype("uint8"), key="k")
    assert config.chunks_per_shard == (2, 2) and config.index_size == 68
    assert (
        parse_sharding_config(
            sharding_codec((32, 32), [LE], crc=False), (64, 64), np.dtype("uint8"), key="k"
        ).index_size
        == 64
    )
    absent = CodecSpec("sharding_indexed", {"chunk_shape": [32, 32], "codecs": [LE], "index_codecs": [LE]})
    assert parse_sharding_config(absent, (64, 64), np.dtype("uint8"), key="k").index_location == "end"


@st.composite
def shard_indexes(draw: st.DrawFn) -> tuple[ShardIndex, Any]:
    cps = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    n = math.prod(cps)
    entry = st.one_of(st.tuples(st.integers(0, 2**63), st.integers(0, 2**40)), st.just((EMPTY, EMPTY)))
    entries = draw(st.lists(entry, min_size=n, max_size=n))
    offsets = np.array([e[0] for e in entries], dtype=np.uint64).reshape(cps)
    nbytes = np.array([e[1] for e in entries], dtype=np.uint64).reshape(cps)
    config = parse_sharding_config(
        sharding_codec(
            tuple(1 for _ in cps),
            [LE],
            draw(st.sampled_from(["start", "end"])),
            draw(st.sampled_from(["little", "big"])),
            draw(st.booleans()),
        ),
        cps,
        np.dtype("uint8"),
        key="k",
    )
    return ShardIndex(offsets, nbytes), config


@SETTINGS
@given(shard_indexes())
def test_shard_index_round_trip(case: tuple[ShardIndex, Any]) -> None:
    index, config = case
    data = encode_shard_index(index, config)
    assert len(data) == config.index_size
    back = decode_shard_index(data, config, key="k")
    np.testing.assert_array_equal(back.offsets, index.offsets)
    np.testing.assert_array_equal(back.nbytes, index.nbytes)
    assert back.chunks_per_shard == config.chunks_per_shard
    # The layout is exactly (offset, nbytes) pairs in C order, then the crc32c.
    order = "<" if config.index_endian == "little" else ">"
    flat = np.frombuffer(data[: 16 * config.num_chunks], f"{order}u8").reshape(-1, 2)
    np.testing.assert_array_equal(flat[:, 0], index.offsets.ravel())
    if config.index_checksum:
        assert data[-4:] == struct.pack("<I", crc32c.crc32c(data[:-4]))


@st.composite
def shard_arrays(draw: st.DrawFn) -> tuple[np.ndarray, Any]:
    ndim = draw(st.integers(1, 3))
    inner = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    per = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    shard = tuple(i * p for i, p in zip(inner, per, strict=True))
    values = draw(st.lists(st.integers(0, 3), min_size=math.prod(shard), max_size=math.prod(shard)))
    array = np.array(values, dtype="int16").reshape(shard)
    codecs = [draw(st.sampled_from([LE, BE])), *draw(st.lists(st.sampled_from(BYTES_CODECS), max_size=2))]
    if draw(st.booleans()):  # nested sharding, its inner chunks 1 thick along axis 0
        codecs = [sharding_codec((1, *inner[1:]), codecs, draw(st.sampled_from(["start", "end"]))).to_json()]
    config = parse_sharding_config(
        sharding_codec(
            inner,
            codecs,
            draw(st.sampled_from(["start", "end"])),
            draw(st.sampled_from(["little", "big"])),
            draw(st.booleans()),
        ),
        shard,
        array.dtype,
        key="k",
    )
    return array, config


@SETTINGS
@given(shard_arrays())
def test_shard_round_trip(case: tuple[np.ndarray, Any]) -> None:
    array, config = case
    data = encode_shard_array(array, config, np.int16(0))
    back = decode_shard_array(data, config, array.shape, array.dtype, np.int16(0), key="k")
    np.testing.assert_array_equal(back, array)
    lo = 0 if config.index_location == "start" else len(data) - config.index_size
    index = decode_shard_index(data[lo : lo + config.index_size], config, key="k")
    assert find_index_problems(index, config, len(data)) == []
    # Inner chunks that are all fill value are not stored.
    for pos in product(*(range(n) for n in config.chunks_per_shard)):
        sel = tuple(slice(p * c, (p + 1) * c) for p, c in zip(pos, config.chunk_shape, strict=True))
        assert (index.byte_range(pos) is None) == (not array[sel].any())


def test_chunks_in_any_order_and_gaps_are_valid() -> None:
    """The spec leaves the order of chunk data free and allows unused space between chunks."""
    config = parse_sharding_config(sharding_codec((2,), [LE]), (6,), np.dtype("uint8"), key="k")
    chunks = {(0,): b"\x01\x02", (1,): b"\x03\x04", (2,): b"\x05\x06"}
    body = b"junk" + chunks[(2,)] + b"..." + chunks[(0,)] + chunks[(1,)]
    index = ShardIndex.empty((3,))
    index.offsets[:] = [4 + 2 + 3, 4 + 2 + 3 + 2, 4]
    index.nbytes[:] = 2
    data = body + encode_shard_index(index, config)
    assert find_index_problems(index, config, len(data)) == []
    out = decode_shard_array(data, config, (6,), np.dtype("uint8"), np.uint8(0), key="k")
    assert out.tolist() == [1, 2, 3, 4, 5, 6]
    assert encode_shard(chunks, config)[:6] == b"\x01\x02\x03\x04\x05\x06"
