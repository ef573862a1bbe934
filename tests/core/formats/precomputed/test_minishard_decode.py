"""The minishard index decoder against a reference in Python integers: offsets, overflow and past-the-end checks.

The decoder skips its exact overflow checks when the sum of the deltas and sizes is far below 2**64
(issue 20: 256 decodes per inspect); this proves the shortcut changes no answer and no error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.errors import IndexDecodeError
from napari_shardscope.core.formats.precomputed.shard_index import decode_minishard_index
from napari_shardscope.core.formats.precomputed.sharding import parse_sharding_spec

SPEC = parse_sharding_spec({"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                            "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "raw",
                            "data_encoding": "raw"})
U64 = 1 << 64

values = st.one_of(st.integers(0, 1 << 20), st.integers(0, U64 - 1), st.sampled_from([0, 1, (1 << 63) - 1, 1 << 63,
                                                                                      U64 - 1, U64 - 64]))


def reference(deltas: list[int], offsets: list[int], sizes: list[int],
              file_size: int | None) -> tuple[list[int], list[int], list[int]] | str:
    """Exact decoding, or the kind of error the decoder must raise."""
    ids, starts, ends = [], [], []
    cid, pos = 0, SPEC.shard_index_size
    for i, (d, o, n) in enumerate(zip(deltas, offsets, sizes, strict=True)):
        cid = (cid + d) % U64
        pos += o + (sizes[i - 1] if i else 0)
        if pos >= U64 or pos + n >= U64:
            return "overflows"
        ids.append(cid)
        starts.append(pos)
        ends.append(pos + n)
    if file_size is not None and any(e > file_size for e in ends):
        return "runs past the end"
    return ids, starts, ends


@given(st.lists(st.tuples(values, values, values), max_size=20), st.one_of(st.none(), values))
def test_decoder_matches_the_integer_reference(entries: list[tuple[int, int, int]], file_size: int | None) -> None:
    deltas = [e[0] for e in entries]
    offsets = [e[1] for e in entries]
    sizes = [e[2] for e in entries]
    raw = np.array([deltas, offsets, sizes], dtype="<u8").reshape(3, len(entries)).tobytes()
    expected = reference(deltas, offsets, sizes, file_size)
    if isinstance(expected, str):
        with pytest.raises(IndexDecodeError, match=expected):
            decode_minishard_index(raw, SPEC, key="k", offset=100, file_size=file_size)
        return
    got = decode_minishard_index(raw, SPEC, key="k", offset=100, file_size=file_size)
    assert got.chunk_ids.tolist() == expected[0]
    assert got.starts.tolist() == expected[1]
    assert got.ends.tolist() == expected[2]


GZIP_SPEC = parse_sharding_spec({"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                                 "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "gzip",
                                 "data_encoding": "raw"})
parts_strategy = st.lists(st.one_of(
    st.lists(st.tuples(values, values, values), max_size=12).map(
        lambda es: np.array([[e[0] for e in es], [e[1] for e in es], [e[2] for e in es]],
                            dtype="<u8").reshape(3, len(es)).tobytes()),
    st.binary(max_size=40),  # damaged: not a whole number of entries, or not gzip
), max_size=12)


@given(parts_strategy, st.one_of(st.none(), values), st.booleans(), st.sampled_from([None, 3, 1000]))
def test_batch_decoder_answers_exactly_as_one_at_a_time(blobs: list[bytes], file_size: int | None, gzipped: bool,
                                                        max_entries: int | None) -> None:
    from napari_shardscope.core.encoding import encode_bytes
    from napari_shardscope.core.errors import FormatError
    from napari_shardscope.core.formats.precomputed.shard_index import decode_minishard_indexes

    spec = GZIP_SPEC if gzipped else SPEC
    parts = [(encode_bytes(b, "gzip") if gzipped and i % 3 else b, 1000 + 10 * i) for i, b in enumerate(blobs)]
    got = decode_minishard_indexes(parts, spec, key="k", file_size=file_size, max_entries=max_entries)
    assert len(got) == len(parts)
    for (data, offset), value in zip(parts, got, strict=True):
        try:
            one = decode_minishard_index(data, spec, key="k", offset=offset, file_size=file_size,
                                         max_entries=max_entries)
        except FormatError as exc:
            assert isinstance(value, FormatError)
            assert (type(value), str(value), value.offset) == (type(exc), str(exc), exc.offset)
            continue
        assert not isinstance(value, FormatError), value
        for x, y in ((one.chunk_ids, value.chunk_ids), (one.starts, value.starts), (one.ends, value.ends)):
            assert x.dtype == y.dtype == np.uint64 and x.tolist() == y.tolist()
