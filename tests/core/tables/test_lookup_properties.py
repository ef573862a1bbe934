"""Every backend answers like ``np.searchsorted`` on the whole table: random tables, random keys, page edges.

Hypothesis draws a table (unique keys, or repeated keys for a body → supervoxels table), a page
size (1 row up to larger than the table, so pages are cut anywhere) and keys to look up: present
keys, missing keys, the first and last key of pages, 0 and 2⁶⁴−1. Each backend is written through
``write_sorted_table`` and read back through ``open_sorted_table`` — memory, Zarr v3 sharded and
unsharded, the sharded lookup, one Parquet file and a directory of Parquet files — and its
``lookup``, ``select``, ``range`` and ``iter_pages`` must equal the same questions asked of the
whole table held in numpy.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.tables import memory_table, open_sorted_table, write_sorted_table

pytest.importorskip("pyarrow")

U64_MAX = (1 << 64) - 1
BACKENDS: dict[str, dict[str, Any]] = {
    "memory": {},
    "zarr3-sharded": {"format": "zarr3", "shard_pages": 4},
    "zarr3": {"format": "zarr3", "shard_pages": 0, "compression": "none"},
    "precomputed": {"format": "precomputed", "shard_pages": 4},
    "parquet-file": {"format": "parquet"},
    "parquet-dir": {"format": "parquet", "file_rows": None},
}
_counter = itertools.count()


def make_table(kind: str, root: Path, keys: np.ndarray, values: dict[str, np.ndarray], page_rows: int,
               unique: bool) -> Any:
    if kind == "memory":
        return memory_table(keys, values, key="sv", unique=unique, page_rows=page_rows)
    opts = dict(BACKENDS[kind])
    if kind == "parquet-dir":
        opts["file_rows"] = page_rows * 3  # several files, each of several row groups
    name = f"t{next(_counter)}" + (".parquet" if kind == "parquet-file" else "")
    url = root / name
    write_sorted_table(url, keys, values, page_rows=page_rows, key="sv", unique=unique, **opts)
    return open_sorted_table(url)


@st.composite
def tables(draw: st.DrawFn) -> tuple[np.ndarray, dict[str, np.ndarray], int, bool, np.ndarray]:
    unique = draw(st.booleans())
    n = draw(st.integers(0, 300))
    wide = draw(st.booleans())
    hi = U64_MAX if wide else 2000
    if unique:
        keys = np.unique(np.asarray(draw(st.lists(st.integers(0, hi), min_size=n, max_size=n)), dtype=np.uint64))
    else:  # keys repeat (a body's supervoxels), possibly across page boundaries
        base = draw(st.lists(st.integers(0, hi), min_size=1, max_size=20))
        reps = draw(st.lists(st.integers(1, 30), min_size=len(base), max_size=len(base)))
        keys = np.sort(np.repeat(np.asarray(base, dtype=np.uint64), reps))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = {"body": rng.integers(0, 1 << 62, keys.size, dtype=np.uint64),
              "score": rng.random(keys.size).astype(np.float32)}
    page_rows = draw(st.integers(1, max(1, keys.size + 5)))
    edges = keys[::page_rows].tolist() + keys[page_rows - 1::page_rows].tolist() if keys.size else []
    asked = draw(st.lists(st.one_of(st.sampled_from(keys.tolist() or [0]), st.integers(0, hi),
                                    st.sampled_from([0, U64_MAX, *edges[:20]])), max_size=60))
    return keys, values, page_rows, unique, np.asarray(asked, dtype=np.uint64)


def expected_lookup(keys: np.ndarray, values: dict[str, np.ndarray], asked: np.ndarray
                    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    pos = np.searchsorted(keys, asked, side="left")
    ok = pos < keys.size
    found = np.zeros(asked.size, dtype=bool)
    found[ok] = keys[pos[ok]] == asked[ok]
    out = {}
    for name, col in values.items():
        v = np.zeros(asked.size, dtype=col.dtype)
        v[found] = col[pos[found]]
        out[name] = v
    return out, found


@pytest.mark.parametrize("kind", list(BACKENDS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=tables())
def test_lookup_select_range_match_numpy(kind: str, case: Any, tmp_path: Path) -> None:
    keys, values, page_rows, unique, asked = case
    root = tmp_path / kind
    root.mkdir(exist_ok=True)
    try:
        table = make_table(kind, root, keys, values, page_rows, unique)
        assert table.num_rows == keys.size
        assert table.max_key == (int(keys[-1]) if keys.size else None)
        assert table.min_key == (int(keys[0]) if keys.size else None)
        # lookup: the first row of each key, in the caller's order and shape
        got, found = table.lookup(asked.reshape(-1, 1) if asked.size % 2 == 0 else asked)
        want, want_found = expected_lookup(keys, values, asked)
        np.testing.assert_array_equal(found, want_found)
        for name in values:
            np.testing.assert_array_equal(got[name], want[name])
        # a second lookup is served from the page cache and answers the same
        again, found2 = table.lookup(asked, ["score"])
        np.testing.assert_array_equal(found2, want_found)
        np.testing.assert_array_equal(again["score"], want["score"])
        # select: every row of the keys asked, in key order
        sk, sv = table.select(asked)
        mask = np.isin(keys, asked)
        np.testing.assert_array_equal(sk, keys[mask])
        np.testing.assert_array_equal(sv["body"], values["body"][mask])
        # range [lo, hi)
        if asked.size >= 2:
            lo, hi = sorted(int(x) for x in asked[:2])
            parts = list(table.range(lo, hi))
            rk = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
            sel = (keys >= np.uint64(lo)) & (keys < np.uint64(hi)) if hi <= U64_MAX else keys >= np.uint64(lo)
            np.testing.assert_array_equal(rk, keys[sel])
            rb = np.concatenate([p[1]["body"] for p in parts]) if parts else np.zeros(0, np.uint64)
            np.testing.assert_array_equal(rb, values["body"][sel])
        everything = list(table.range(0, 1 << 64))
        ek = np.concatenate([p[0] for p in everything]) if everything else np.zeros(0, np.uint64)
        np.testing.assert_array_equal(ek, keys)
        pages = list(table.iter_pages())
        assert sum(len(p) for p in pages) == keys.size
        assert all(len(p) <= page_rows for p in pages)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_lookup_keeps_the_callers_shape_and_order(tmp_path: Path) -> None:
    keys = np.arange(1, 1001, dtype=np.uint64) * 7
    table = make_table("zarr3-sharded", tmp_path, keys, {"body": keys // 3}, 64, True)
    asked = np.array([[7, 8], [7000, 14]], dtype=np.uint64)
    got, found = table.lookup(asked)
    assert found.tolist() == [True, False, True, True]
    assert got["body"].tolist() == [2, 0, 2333, 4]


def test_small_batches_bound_what_one_call_holds(tmp_path: Path) -> None:
    """A lookup over more pages than one batch may hold still answers every key (pages in several batches)."""
    keys = np.arange(0, 50_000, dtype=np.uint64) * 3
    write_sorted_table(tmp_path / "t", keys, {"body": keys + 1}, page_rows=500, key="sv")
    table = open_sorted_table(tmp_path / "t", batch_bytes=1, cache_bytes=1)
    asked = keys[::97]
    got, found = table.lookup(asked)
    assert found.all()
    np.testing.assert_array_equal(got["body"], asked + 1)
    assert table.cached_bytes <= 500 * 16 + 200  # the cache keeps at most one page over its bound
