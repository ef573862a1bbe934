"""The numpy MurmurHash3_x86_128 against ``mmh3``, and the shard maps it drives against real datasets.

The hash decides which shard and minishard hold a chunk: one wrong bit and every lookup misses.
Outputs are checked against the ``mmh3`` C extension (hypothesis, fixed vectors, block boundaries),
and every chunk id stored in the sharded datasets other software wrote (igneous, CloudVolume,
neuroglancer-scripts) must map back to the shard and minishard whose index lists it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed import sharding as sharding_mod
from napari_shardscope.core.formats.precomputed.chunk_table import ChunkTable
from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector
from napari_shardscope.core.formats.precomputed.shard_index import MinishardIndex
from napari_shardscope.core.formats.precomputed.sharding import (
    assign_chunk_ids,
    murmurhash3_x86_128_low64,
    murmurhash3_x86_128_low64_mmh3,
    parse_sharding_spec,
)
from tests.realdata import realdata_path


def mmh3_low64(value: int) -> int:
    """The spec's definition, straight from mmh3: hash the 8 LE bytes, keep the low 64 bits."""
    return int(mmh3.hash128(value.to_bytes(8, "little"), 0, x64arch=False, signed=False)) & ((1 << 64) - 1)


@pytest.mark.parametrize("value", [0, 1, 2, 255, 256, 1 << 31, (1 << 32) - 1, 1 << 32, 1 << 63, (1 << 64) - 1,
                                   0x0123456789ABCDEF, 864691135293157120])
def test_fixed_vectors_match_mmh3(value: int) -> None:
    got = murmurhash3_x86_128_low64(np.asarray([value], dtype=np.uint64))
    assert got.dtype == np.uint64 and int(got[0]) == mmh3_low64(value)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.uint64, st.integers(0, 300), elements=st.integers(0, (1 << 64) - 1)))
def test_arrays_match_mmh3(values: np.ndarray) -> None:
    np.testing.assert_array_equal(murmurhash3_x86_128_low64(values), murmurhash3_x86_128_low64_mmh3(values))


def test_block_boundaries_and_views_match_mmh3() -> None:
    rng = np.random.default_rng(20)
    block = sharding_mod._BLOCK
    values = rng.integers(0, 1 << 64, size=2 * block + 7, dtype=np.uint64)
    np.testing.assert_array_equal(murmurhash3_x86_128_low64(values), murmurhash3_x86_128_low64_mmh3(values))
    strided = values[1::3]  # a non-contiguous view, and a big-endian copy, hash the same values
    np.testing.assert_array_equal(murmurhash3_x86_128_low64(strided), murmurhash3_x86_128_low64_mmh3(strided))
    big = strided.astype(">u8")
    np.testing.assert_array_equal(murmurhash3_x86_128_low64(big), murmurhash3_x86_128_low64_mmh3(strided))
    assert murmurhash3_x86_128_low64(np.zeros(0, dtype=np.uint64)).shape == (0,)


@settings(max_examples=50, deadline=None)
@given(
    hnp.arrays(np.uint64, st.integers(1, 100), elements=st.integers(0, (1 << 64) - 1)),
    st.integers(0, 64), st.integers(0, 20), st.integers(0, 20),
)
def test_assignment_matches_the_spec_per_id(ids: np.ndarray, preshift: int, mbits: int, sbits: int) -> None:
    spec = parse_sharding_spec({"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": preshift,
                                "hash": "murmurhash3_x86_128", "minishard_bits": mbits, "shard_bits": sbits})
    a = assign_chunk_ids(spec, ids)
    for i, cid in enumerate(ids.tolist()):
        hashed = mmh3_low64(cid >> preshift if preshift < 64 else 0)
        assert int(a.hashed[i]) == hashed
        assert int(a.minishard[i]) == hashed & ((1 << mbits) - 1)
        assert int(a.shard[i]) == (hashed >> mbits) & ((1 << sbits) - 1)


#: Real precomputed datasets with sharded sources (every sharded source of each is checked).
SHARDED_DATASETS = ("igneous_pinky_sharded", "crantb_mesh_sharded", "noduli_seg_head/mesh", "ngscripts_sharded/raw")


@pytest.mark.realdata
@pytest.mark.parametrize("dataset", SHARDED_DATASETS)
def test_real_sharded_datasets_map_every_stored_id_home(dataset: str) -> None:
    ins = open_dataset(realdata_path(dataset)).inspector()
    assert isinstance(ins, PrecomputedInspector)
    sharded = [s for s in ins.sources + ins.segment_sources() if s.sharding is not None]
    assert sharded, f"{dataset} has no sharded source"
    for source in sharded:
        check_every_stored_id_home(ins, source)


def check_every_stored_id_home(ins: PrecomputedInspector, source: Any) -> None:
    """Every chunk id a shard stores hashes home to that shard and minishard, and locate finds its bytes."""
    assert source.sharding is not None
    reader = ins.reader(source)
    seen = 0
    for shard in reader.existing_shards():
        index = reader.shard_index(shard)
        assert index is not None
        for m in index.nonempty_minishards().tolist():
            mi = reader.minishard_index(shard, int(m))
            a = assign_chunk_ids(source.sharding, mi.chunk_ids)
            assert set(a.shard.tolist()) == {shard} and set(a.minishard.tolist()) == {int(m)}
            shifted = mi.chunk_ids >> np.uint64(source.sharding.preshift_bits)
            if source.sharding.hash == "murmurhash3_x86_128":
                np.testing.assert_array_equal(a.hashed, murmurhash3_x86_128_low64_mmh3(shifted))
            # locate finds each stored id at the byte range its minishard index gives
            starts, ends, present = reader.locate_arrays(a.chunk_ids, a.shard, a.minishard)
            assert present.all()
            np.testing.assert_array_equal(starts, mi.starts)
            np.testing.assert_array_equal(ends, mi.ends)
            seen += len(mi)
    assert seen > 0


K = 7  # the test's stand-in for the hash: id % K is the group an id belongs to


def _reference_lookup(tables: dict[int, MinishardIndex], ids: np.ndarray) -> tuple:
    """Per id: the first entry (storage order) with that id in the minishard of its own group."""
    starts, ends, present = [], [], []
    for cid in ids.tolist():
        ix = tables.get(cid % K)
        hits = [] if ix is None else np.flatnonzero(ix.chunk_ids == np.uint64(cid)).tolist()
        present.append(bool(hits))
        starts.append(int(ix.starts[hits[0]]) if hits else 0)
        ends.append(int(ix.ends[hits[0]]) if hits else 0)
    return starts, ends, present


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, K - 1), st.lists(st.integers(0, 60), max_size=30), max_size=8),
       st.lists(st.integers(0, 70), max_size=200))
def test_chunk_table_finds_what_a_per_minishard_search_finds(groups: dict, queries: list) -> None:
    """Duplicates, ids listed in another group's minishard, absent ids: the table agrees with a scan."""
    tables = {}
    for n, (g, ids) in enumerate(sorted(groups.items())):
        k = len(ids)
        starts = np.arange(k, dtype=np.uint64) * np.uint64(10) + np.uint64(1000 * n)
        tables[g] = MinishardIndex(np.asarray(ids, dtype=np.uint64), starts, starts + np.uint64(3))
    table = ChunkTable(list(tables), list(tables.values()), lambda ids: ids % np.uint64(K))
    q_ids = np.asarray(queries, dtype=np.uint64)
    s, e, p = table.lookup(q_ids)
    rs, re_, rp = _reference_lookup(tables, q_ids)
    assert p.tolist() == rp and s.tolist() == rs and e.tolist() == re_


def test_locate_arrays_agrees_with_locate_many_on_a_written_shard(tmp_path: Path) -> None:
    from napari_shardscope.core.bytestore import LocalByteStore
    from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
    from napari_shardscope.core.formats.precomputed.shard_writer import write_shards

    spec = parse_sharding_spec({"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1,
                                "hash": "murmurhash3_x86_128", "minishard_bits": 3, "shard_bits": 2,
                                "minishard_index_encoding": "gzip", "data_encoding": "gzip"})
    stored = {int(i): bytes([i % 251]) * (i % 17 + 1) for i in range(0, 3000, 3)}
    write_shards(LocalByteStore(tmp_path), "s", spec, stored)
    reader = ShardedReader(LocalByteStore(tmp_path), "s", spec)
    ids = np.arange(0, 3100, dtype=np.uint64)
    a = assign_chunk_ids(spec, ids)
    starts, ends, present = reader.locate_arrays(a.chunk_ids, a.shard, a.minishard)
    assert present.tolist() == [int(i) in stored for i in ids.tolist()]
    for cid in (0, 3, 2997, 1500):
        loc = reader.locate(cid)
        assert loc.byte_range == (int(starts[cid]), int(ends[cid]))
        assert reader.read_chunk(cid) == stored[cid]
