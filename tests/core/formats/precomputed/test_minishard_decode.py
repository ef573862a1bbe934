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
