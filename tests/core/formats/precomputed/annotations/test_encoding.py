"""The single and multiple annotation encodings: byte-exact against the spec, round trips, hostile bytes."""

from __future__ import annotations

import contextlib
import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError
from napari_shardscope.core.formats.precomputed.annotations.encoding import (
    decode_multiple,
    decode_single,
    decode_single_many,
    encode_multiple,
    encode_single,
    encode_single_many,
)
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema, PropertySpec
from napari_shardscope.core.formats.precomputed.annotations.table import concatenate, make_annotations
from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, assert_same, batches, random_batch, schemas

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- byte-exact against the spec's text ----------------------------------------------------------------------
def test_properties_are_encoded_by_alignment_then_padded_to_four_bytes() -> None:
    # info order: uint8 a, float32 b, rgb c, int16 d, rgba e; encoding: b (4-byte), d (2-byte), a, c, e (1-byte)
    props = (PropertySpec("a", "uint8"), PropertySpec("b", "float32"), PropertySpec("c", "rgb"),
             PropertySpec("d", "int16"), PropertySpec("e", "rgba"))
    schema = AnnotationSchema("point", DIMENSIONS, props, ("pre", "post"))
    batch = make_annotations(schema, [7], [[1.5, 2.5, 3.5]],
                             {"a": [200], "b": [0.25], "c": [[1, 2, 3]], "d": [-5], "e": [[9, 8, 7, 6]]},
                             {"pre": [[11]], "post": [[12, 2**64 - 1]]})
    record = (struct.pack("<3f", 1.5, 2.5, 3.5) + struct.pack("<f", 0.25) + struct.pack("<h", -5)
              + bytes([200]) + bytes([1, 2, 3]) + bytes([9, 8, 7, 6]) + b"\0\0")  # 22 bytes + 2 of padding
    assert len(record) == 28
    single = record + struct.pack("<IQ", 1, 11) + struct.pack("<IQQ", 2, 12, 2**64 - 1)
    assert encode_single(batch, 0) == single
    assert encode_multiple(batch) == struct.pack("<Q", 1) + record + struct.pack("<Q", 7)
    got = decode_single(single, schema, 7, key="k")
    assert_same(got, batch)


def test_two_vector_types_and_polylines_are_laid_out_as_the_spec_says() -> None:
    line = AnnotationSchema("line", DIMENSIONS, (PropertySpec("w", "uint16"),))
    batch = make_annotations(line, [1], [[[1, 2, 3], [4, 5, 6]]], {"w": [513]})
    assert encode_multiple(batch) == (struct.pack("<Q", 1) + struct.pack("<6f", 1, 2, 3, 4, 5, 6)
                                      + struct.pack("<H", 513) + b"\0\0" + struct.pack("<Q", 1))
    poly = AnnotationSchema("polyline", DIMENSIONS, (PropertySpec("k", "int8"),), ("seg",))
    batch = make_annotations(poly, [3], [np.arange(9).reshape(3, 3)], {"k": [-1]}, {"seg": [[5]]})
    assert encode_single(batch, 0) == (struct.pack("<I", 3) + struct.pack("<9f", *range(9)) + b"\xff\0\0\0"
                                       + struct.pack("<IQ", 1, 5))


# -- round trips ----------------------------------------------------------------------------------------------
@SETTINGS
@given(batches())
def test_multiple_encoding_round_trips(batch) -> None:  # type: ignore[no-untyped-def]
    data = encode_multiple(batch)
    got = decode_multiple(data, batch.schema, key="k")
    assert got.relationships is None
    assert got.ids.tolist() == batch.ids.tolist()  # the order is kept
    assert_same(got, batch, relationships=False)


@SETTINGS
@given(batches())
def test_single_encoding_round_trips_one_at_a_time_and_all_at_once(batch) -> None:  # type: ignore[no-untyped-def]
    buf, starts, ends = encode_single_many(batch)
    for i in range(len(batch)):
        one = decode_single(encode_single(batch, i), batch.schema, int(batch.ids[i]), key="k")
        assert_same(one, batch.take([i]))
        assert buf[int(starts[i]):int(ends[i])].tobytes() == encode_single(batch, i)
    got = decode_single_many(buf.tobytes(), starts, ends, batch.ids, batch.schema, where=lambda i: ("k", 0))
    assert_same(got, batch)


def test_equal_length_records_take_the_fast_path_and_others_the_general_one() -> None:
    schema = AnnotationSchema("point", DIMENSIONS, (PropertySpec("s", "float32"),), ("pre", "post"))
    rng = np.random.default_rng(0)
    n = 1000
    same = make_annotations(schema, np.arange(n), rng.random((n, 3)), {"s": rng.random(n)},
                            {"pre": np.arange(n), "post": np.arange(n) + 5})
    buf, starts, ends = encode_single_many(same)
    assert np.all(np.diff(starts) == 40)  # 16-byte record + (4 + 8) twice: one word matrix
    assert_same(decode_single_many(buf, starts, ends, same.ids, schema, where=lambda i: ("k", 0)), same)
    mixed = random_batch(schema, n, 1)
    buf, starts, ends = encode_single_many(mixed)
    assert len(set(np.diff(ends - starts).tolist())) > 1
    assert_same(decode_single_many(buf, starts, ends, mixed.ids, schema, where=lambda i: ("k", 0)), mixed)
    # the two paths meet: a batch of both kinds concatenated decodes as one
    both = concatenate([same, mixed.take(np.arange(10))])
    buf, starts, ends = encode_single_many(both)
    assert_same(decode_single_many(buf, starts, ends, both.ids, schema, where=lambda i: ("k", 0)), both)


# -- hostile bytes ----------------------------------------------------------------------------------------------
POINT = AnnotationSchema("point", DIMENSIONS, (PropertySpec("s", "float32"),), ("pre",))


def test_a_count_that_lies_is_refused_before_anything_is_allocated() -> None:
    data = struct.pack("<Q", 2**63 + 5) + bytes(64)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match=r"annotation count \d+ needs at least") as err:
            decode_multiple(data, POINT, key="spatial0/0_0_0", offset=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert err.value.key == "spatial0/0_0_0" and err.value.offset == 100


@pytest.mark.parametrize(("data", "match", "offset"), [
    (b"\x01\0\0", "no 8-byte count", 0),
    (struct.pack("<Q", 2) + bytes(24 + 10), "needs at least", 0),  # two records and ids need 48
    (struct.pack("<Q", 1) + bytes(24) + b"xx", "2 bytes after its ids", 32),
])
def test_multiple_encoding_damage_is_named_with_its_offset(data: bytes, match: str, offset: int) -> None:
    with pytest.raises(ChunkDecodeError, match=match) as err:
        decode_multiple(data, POINT, key="rel/5")
    assert err.value.offset == offset


@pytest.mark.parametrize(("tail", "match"), [
    (b"", "less than the 20 of a record and its 1 related-id counts"),
    (struct.pack("<I", 3) + struct.pack("<Q", 1), "3 'pre' ids need 24 bytes, 8 remain"),
    (struct.pack("<I", 2**32 - 1), "4294967295 'pre' ids need"),
    (struct.pack("<IQ", 1, 9) + b"?", "1 bytes after its last related id"),
])
def test_single_encoding_damage_is_named(tail: bytes, match: str) -> None:
    record = struct.pack("<4f", 1, 2, 3, 4)
    with pytest.raises(ChunkDecodeError, match=match):
        decode_single(record + tail, POINT, 42, key="by_id/42")


def test_polylines_of_fewer_than_two_points_or_past_the_end_are_refused() -> None:
    poly = AnnotationSchema("polyline", DIMENSIONS)
    for count, match in ((1, "1 points; a polyline has at least 2"), (2**31, "runs past the records")):
        data = struct.pack("<Q", 1) + struct.pack("<I", count) + struct.pack("<6f", *range(6)) + struct.pack("<Q", 1)
        with pytest.raises(ChunkDecodeError, match=match) as err:
            decode_multiple(data, poly, key="k", offset=1000)
        assert err.value.offset == 1008
    with pytest.raises(ChunkDecodeError, match="at least 2"):
        decode_single(struct.pack("<I", 0), poly, 1, key="k")


@SETTINGS
@given(schemas(), st.binary(max_size=300), st.integers(0, 2**64 - 1))
def test_random_bytes_decode_or_raise_a_typed_error(schema: AnnotationSchema, data: bytes, count: int) -> None:
    for blob in (data, struct.pack("<Q", count) + data, struct.pack("<Q", count % 8) + data):
        with contextlib.suppress(ChunkDecodeError):
            decode_multiple(blob, schema, key="k")
        with contextlib.suppress(ChunkDecodeError):
            decode_single(blob, schema, 1, key="k")


def test_columns_that_do_not_fit_the_schema_are_argument_errors() -> None:
    with pytest.raises(ArgumentError, match="shape"):
        make_annotations(POINT, [1, 2], [[1, 2, 3]], {"s": [1, 2]}, {"pre": [[], []]})
    with pytest.raises(ArgumentError, match="has no values"):
        make_annotations(POINT, [1], [[1, 2, 3]], {}, {"pre": [[]]})
    with pytest.raises(ArgumentError, match="outside the range of uint8"):
        make_annotations(AnnotationSchema("point", DIMENSIONS, (PropertySpec("u", "uint8"),)), [1], [[0, 0, 0]],
                         {"u": [256]})
    with pytest.raises(ArgumentError, match="non-negative"):
        make_annotations(POINT, [-1], [[1, 2, 3]], {"s": [1]}, {"pre": [[]]})
    with pytest.raises(ArgumentError, match="at least 2 points"):
        make_annotations(AnnotationSchema("polyline", DIMENSIONS), [1], [np.zeros((1, 3))])
    one_each = make_annotations(POINT, [1, 2], [[1, 2, 3], [4, 5, 6]], {"s": [1, 2]}, {"pre": [5, 6]})
    assert one_each.relationships is not None and one_each.relationships["pre"].tolists() == [[5], [6]]
    with pytest.raises(ArgumentError, match="one list of ids per annotation"):
        make_annotations(POINT, [1, 2], [[1, 2, 3], [4, 5, 6]], {"s": [1, 2]}, {"pre": ["a", "b"]})
