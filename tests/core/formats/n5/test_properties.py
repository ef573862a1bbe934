"""Hypothesis: every N5 encoder/decoder round-trips, and random bytes only ever raise our errors."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import lz4.frame
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.errors import MetadataError, ShardscopeError
from napari_shardscope.core.formats.budget import CHUNK_BUDGET_BYTES
from napari_shardscope.core.formats.n5.attributes import (
    DATA_TYPES,
    decode_attributes_json,
    parse_dataset_attributes,
    parse_scales,
)
from napari_shardscope.core.formats.n5.block import (
    BlockHeader,
    decode_block,
    decode_block_header,
    encode_block,
    encode_block_header,
    encode_varlength_block,
    format_block_path,
    parse_block_path,
)
from napari_shardscope.core.formats.n5.compression import (
    COMPRESSION_TYPES,
    decode_payload,
    encode_payload,
    make_compression,
    parse_compression,
)
from napari_shardscope.core.formats.n5.lz4_stream import compute_xxh32, decode_lz4_stream, encode_lz4_stream
from tests.n5_data import make_attributes

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

compressions = st.one_of(
    st.just({"type": "raw"}),
    st.builds(lambda lvl, z: {"type": "gzip", "level": lvl, "useZlib": z}, st.integers(-1, 9), st.booleans()),
    st.builds(lambda b: {"type": "bzip2", "blockSize": b}, st.integers(1, 9)),
    st.builds(lambda p: {"type": "xz", "preset": p}, st.integers(0, 3)),
    st.builds(lambda b: {"type": "lz4", "blockSize": b}, st.integers(64, 4096)),
    st.builds(lambda c, lvl, s: {"type": "blosc", "cname": c, "clevel": lvl, "shuffle": s},
              st.sampled_from(["blosclz", "lz4", "lz4hc", "zlib", "zstd"]), st.integers(0, 9), st.integers(0, 2)),
    st.builds(lambda lvl: {"type": "zstd", "level": lvl}, st.integers(-5, 9)),
)


@st.composite
def blocks(draw: st.DrawFn) -> tuple[Any, np.ndarray]:
    """A dataset's attributes and one block of it, shape (z, y, x) (end blocks may be smaller)."""
    ndim = draw(st.integers(1, 4))
    block_size = draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim))
    data_type = draw(st.sampled_from(DATA_TYPES))
    attrs = make_attributes([b * 3 for b in block_size], block_size, data_type, draw(compressions))
    shape = tuple(draw(st.integers(1, b)) for b in reversed(block_size))
    raw = draw(st.binary(min_size=attrs.dtype.itemsize * int(np.prod(shape)),
                         max_size=attrs.dtype.itemsize * int(np.prod(shape))))
    return attrs, np.frombuffer(raw, dtype=attrs.dtype).reshape(shape)


@FAST
@given(blocks())
def test_block_round_trip(case: tuple[Any, np.ndarray]) -> None:
    attrs, values = case
    decoded = decode_block(encode_block(values, attrs), attrs)
    assert decoded.header.shape == values.shape[::-1] and decoded.header.mode == 0
    assert decoded.data.tobytes() == values.tobytes()  # bitwise (NaN payloads included)


@FAST
@given(blocks())
def test_varlength_round_trip(case: tuple[Any, np.ndarray]) -> None:
    attrs, values = case
    shape = values.shape[::-1]
    decoded = decode_block(encode_varlength_block(values.ravel(), shape, attrs), attrs)
    assert decoded.header.varlength and decoded.header.shape == shape
    assert decoded.data.tobytes() == values.tobytes()


@FAST
@given(st.sampled_from([0, 1]), st.lists(st.integers(0, (1 << 32) - 1), min_size=0, max_size=8),
       st.integers(0, (1 << 32) - 1))
def test_header_round_trip(mode: int, shape: list[int], count: int) -> None:
    header = BlockHeader(mode, tuple(shape), count if mode == 1 else int(np.prod(shape, dtype=object)))
    data = encode_block_header(header)
    assert len(data) == header.nbytes
    assert decode_block_header(data + b"payload") == header


@FAST
@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=6))
def test_block_path_round_trip(position: list[int]) -> None:
    assert parse_block_path(format_block_path(position), len(position)) == tuple(position)


@FAST
@given(compressions, st.binary(max_size=3000), st.sampled_from([1, 2, 4, 8]))
def test_payload_round_trip(compression: dict[str, Any], data: bytes, itemsize: int) -> None:
    data = data[: len(data) - len(data) % itemsize]
    comp = parse_compression(compression)
    assert decode_payload(encode_payload(data, comp, itemsize), comp, len(data)) == data


@FAST
@given(st.binary(max_size=5000), st.integers(64, 2048))
def test_lz4_stream_round_trip(data: bytes, block_size: int) -> None:
    stream = encode_lz4_stream(data, block_size)
    assert stream.count(b"LZ4Block") >= -(-len(data) // block_size) + 1
    assert decode_lz4_stream(stream, len(data)) == data


@FAST
@given(st.binary(max_size=200), st.integers(0, (1 << 32) - 1))
def test_xxh32_matches_lz4_frame(data: bytes, seed: int) -> None:
    # The LZ4 frame format stores XXH32(content, seed 0) as its content checksum: an independent reference.
    frame = lz4.frame.compress(data, content_checksum=True)
    assert compute_xxh32(data) == struct.unpack("<I", frame[-4:])[0]
    assert 0 <= compute_xxh32(data, seed) < 1 << 32


@FAST
@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=5).flatmap(
    lambda dims: st.tuples(st.just(dims), st.lists(st.integers(1, 10**6), min_size=len(dims), max_size=len(dims)))),
    st.sampled_from(DATA_TYPES), compressions)
def test_attributes_round_trip(geometry: tuple[list[int], list[int]], data_type: str,
                               compression: dict[str, Any]) -> None:
    dims, block = geometry
    doc = {"dimensions": dims, "blockSize": block, "dataType": data_type, "compression": compression}
    if math.prod(block) * np.dtype(data_type).itemsize > CHUNK_BUDGET_BYTES:  # refused before any allocation
        with pytest.raises(MetadataError, match=r"field 'blockSize' .* memory budget"):
            parse_dataset_attributes(doc)
        return
    attrs = parse_dataset_attributes(doc)
    again = parse_dataset_attributes(json.loads(json.dumps(attrs.to_json())))
    assert again == attrs
    assert all(g * b >= d for g, b, d in zip(attrs.grid_shape, block, dims, strict=True))


# -- fuzz: only ShardscopeError subclasses may come out ----------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
int_lists = st.lists(st.integers(-3, 1 << 40), max_size=5)
attribute_docs = st.fixed_dictionaries({}, optional={
    "dimensions": int_lists | json_values,
    "blockSize": int_lists | json_values,
    "dataType": st.sampled_from([*DATA_TYPES, "UINT8", "complex64"]) | json_values,
    "compression": st.fixed_dictionaries({"type": st.sampled_from([*COMPRESSION_TYPES, "lz5"]) | json_values},
                                         optional={k: json_values for k in ("level", "useZlib", "blockSize",
                                                                               "preset", "cname", "clevel", "shuffle")})
    | json_values,
    "compressionType": st.sampled_from(COMPRESSION_TYPES) | json_values,
    "downsamplingFactors": st.lists(st.integers(-1, 4) | st.floats(), max_size=4) | json_values,
    "scales": json_values,
    "pixelResolution": st.fixed_dictionaries({"dimensions": json_values, "unit": json_values}) | json_values,
    "resolution": json_values,
})


def only_our_errors(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except ShardscopeError:
        return None


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_header_and_attributes_json(data: bytes) -> None:
    only_our_errors(decode_block_header, data, key="k")
    only_our_errors(decode_attributes_json, data, key="k")
    only_our_errors(decode_attributes_json, b'{"dimensions": ' + data)
    text = data.decode("latin-1")
    assert parse_block_path(text) is None or format_block_path(parse_block_path(text) or (0,)) == text


@FUZZ
@given(st.sampled_from(COMPRESSION_TYPES), st.binary(max_size=400), st.integers(0, 1 << 40))
def test_fuzz_payload_decoders(kind: str, data: bytes, expected: int) -> None:
    comp = make_compression(kind)
    only_our_errors(decode_payload, data, comp, expected, key="k", offset=16)
    only_our_errors(decode_payload, data, comp, len(data), key="k", offset=16)
    only_our_errors(decode_lz4_stream, b"LZ4Block" + data, expected, key="k")


@FUZZ
@given(st.sampled_from(COMPRESSION_TYPES), st.sampled_from(DATA_TYPES), st.binary(max_size=400),
       st.integers(1, 3))
def test_fuzz_block_decoder(kind: str, data_type: str, data: bytes, ndim: int) -> None:
    attrs = make_attributes([100] * ndim, [10] * ndim, data_type, {"type": kind})
    only_our_errors(decode_block, data, attrs, key="k")
    # A plausible header in front of random data reaches the codecs.
    header = encode_block_header(BlockHeader(0, (10,) * ndim, 10**ndim))
    only_our_errors(decode_block, header + data, attrs, key="k")


@FUZZ
@given(blocks(), st.data())
def test_fuzz_mutated_blocks(case: tuple[Any, np.ndarray], data: st.DataObject) -> None:
    attrs, values = case
    encoded = bytearray(encode_block(values, attrs))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(encoded) - 1))
        encoded[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    only_our_errors(decode_block, bytes(encoded), attrs, key="k")
    only_our_errors(decode_block, bytes(encoded[:cut]), attrs, key="k")


@FUZZ
@given(attribute_docs, st.lists(attribute_docs, max_size=3))
def test_fuzz_attribute_parsers(group: dict[str, Any], levels: list[dict[str, Any]]) -> None:
    attrs = only_our_errors(parse_dataset_attributes, group, path="p")
    if attrs is not None:
        assert attrs.ndim >= 1 and all(b >= 1 for b in attrs.block_size)
    only_our_errors(parse_compression, group.get("compression"))
    scales = only_our_errors(parse_scales, group, levels, path="g")
    if scales:
        json.dumps([s.to_json() for s in scales])
