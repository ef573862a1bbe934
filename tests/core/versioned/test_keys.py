"""The key layout: order-preserving escapes, exact prefix and range bounds, round trips."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.versioned import keys as K

tkeys = st.lists(st.sampled_from([0, 1, 2, 0xFE, 0xFF, 0x61]), min_size=1, max_size=6).map(bytes)


@given(a=tkeys, b=tkeys, va=st.integers(0, 2**32 - 1), vb=st.integers(0, 2**32 - 1), ta=st.booleans(),
       tb=st.booleans())
def test_order_is_tkey_then_version_then_flag(a: bytes, b: bytes, va: int, vb: int, ta: bool, tb: bool) -> None:
    ka, kb = K.encode_data_key(7, a, va, ta), K.encode_data_key(7, b, vb, tb)
    assert (ka < kb) == ((a, va, ta) < (b, vb, tb))
    lo, hi = K.stem_range(K.key_stem(7, a))
    assert (lo <= kb < hi) == (a == b)


@given(key=tkeys, vid=st.integers(0, 2**32 - 1), tomb=st.booleans(), iid=st.integers(1, 2**32 - 2))
def test_round_trip(key: bytes, vid: int, tomb: bool, iid: int) -> None:
    raw = K.encode_data_key(iid, key, vid, tomb)
    assert K.decode_data_key(raw) == K.DataKey(iid, key, vid, tomb)
    stem, v, t = K.split_entry(raw)
    assert (K.tkey_of_stem(stem), v, t) == (key, vid, tomb)


@given(key=tkeys, prefix=st.lists(st.sampled_from([0, 1, 0xFF, 0x61]), max_size=3).map(bytes),
       start=st.none() | tkeys, stop=st.none() | tkeys, vid=st.integers(0, 2**32 - 1))
def test_prefix_and_range_bounds_are_exact(key: bytes, prefix: bytes, start: bytes | None, stop: bytes | None,
                                           vid: int) -> None:
    raw = K.encode_data_key(3, key, vid)
    lo, hi = K.prefix_range(3, prefix)
    assert (lo <= raw < hi) == key.startswith(prefix)
    lo, hi = K.tkey_range(3, start, stop)
    inside = (start is None or key >= start) and (stop is None or key < stop)
    assert (lo <= raw < hi) == inside
    other = K.encode_data_key(4, key, vid)
    assert not lo <= other < hi


def test_next_prefix() -> None:
    assert K.next_prefix(b"ab") == b"ac"
    assert K.next_prefix(b"a\xff") == b"b"
    assert K.next_prefix(b"\xff\xff") is None
