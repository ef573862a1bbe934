"""Overlay label blocks round-trip exactly; damaged bytes give only our errors."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_shardscope.core.errors import ChunkDecodeError, ShardscopeError
from napari_shardscope.core.labelmap.block_codec import decode_label_block, encode_label_block


@given(
    hnp.arrays(
        np.uint64,
        hnp.array_shapes(min_dims=1, max_dims=4, max_side=9),
        elements=st.sampled_from([0, 1, 7, 2**40 + 3, 2**64 - 2]),
    )
)
def test_round_trip_few_labels(block: np.ndarray) -> None:
    out = decode_label_block(encode_label_block(block))
    assert out.dtype == np.uint64 and out.shape == block.shape
    np.testing.assert_array_equal(out, block)


@given(hnp.arrays(np.uint64, st.just((7, 11, 13)), elements=st.integers(0, 2**64 - 1)))
def test_round_trip_many_labels(block: np.ndarray) -> None:
    np.testing.assert_array_equal(decode_label_block(encode_label_block(block)), block)


def test_real_block_is_small() -> None:
    z, y, x = np.mgrid[0:64, 0:64, 0:64]
    block = (1_000_000 + (x // 20) + 4 * (y // 24) + 16 * (z // 30)).astype(np.uint64)
    blob = encode_label_block(block)
    assert len(blob) < 30_000 < block.nbytes
    np.testing.assert_array_equal(decode_label_block(blob), block)


def test_damage_is_reported() -> None:
    blob = encode_label_block(np.arange(27, dtype=np.uint64).reshape(3, 3, 3))
    for bad in (blob[:5], b"XXXX" + blob[4:], blob[:-3], blob[:30] + b"\0" * 10):
        try:
            decode_label_block(bad, key="block/0/1/2/3")
        except ChunkDecodeError as exc:
            assert "block/0/1/2/3" in str(exc)
        else:  # pragma: no cover
            raise AssertionError("damaged block decoded")


@given(st.binary(max_size=300))
def test_fuzz(blob: bytes) -> None:
    with contextlib.suppress(ShardscopeError):
        decode_label_block(blob)
