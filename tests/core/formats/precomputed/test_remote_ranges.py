"""Remote index reads: requests in flight together, merged only when that costs few extra bytes.

A loopback server with a gate holds every request until the test opens it, so "issued together"
is observed as the number of requests waiting at the gate at once, not as a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import LocalByteStore, open_store, read_ranges
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.shard_reader import COALESCE_GAP, COALESCE_SPAN, coalesce_ranges
from napari_shardscope.core.formats.precomputed.sharding import parse_sharding_spec
from tests.http_range_server import RangeServer
from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume

WAIT_S = 30.0


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Path, RangeServer, threading.Event]]:
    root = tmp_path / "served"
    root.mkdir()
    gate = threading.Event()
    gate.set()
    server = RangeServer(root, gate=gate)
    try:
        yield root, server, gate
    finally:
        server.close()


def wait_for_held(server: RangeServer, n: int) -> int:
    """Wait (bounded) until ``n`` requests wait at the gate; the most seen."""
    deadline = time.monotonic() + WAIT_S
    most = 0
    while time.monotonic() < deadline:
        most = max(most, server.held)
        if most >= n:
            break
        time.sleep(0.01)
    return most


def test_inspect_issues_its_range_requests_together(gated: tuple[Path, RangeServer, threading.Event]) -> None:
    root, server, gate = gated
    write_ts_volume(root / "vol", SHARDING_MURMUR_GZIP, scales=1)
    spec = parse_sharding_spec(SHARDING_MURMUR_GZIP)
    inspector = open_dataset(server.url + "vol").inspector()  # type: ignore[attr-defined]
    local = open_dataset(root / "vol").inspector()  # type: ignore[attr-defined]
    expected = local.inspect()["scales"][0]
    result: dict[str, object] = {}
    gate.clear()
    worker = threading.Thread(target=lambda: result.update(summary=inspector.inspect()), daemon=True)
    worker.start()
    try:
        # every possible shard's index probe is at the server before any is answered
        assert wait_for_held(server, spec.num_shards) >= spec.num_shards
        server.requests.clear()
    finally:
        gate.set()
    worker.join(WAIT_S)
    assert not worker.is_alive()
    summary = result["summary"]
    assert isinstance(summary, dict)
    got = summary["scales"][0]
    assert got["chunks"] == expected["chunks"] > 0
    assert [{k: v for k, v in s.items() if k != "file_size"} for s in got["shards"]] == [
        {k: v for k, v in s.items() if k != "file_size"} for s in expected["shards"]
    ]


def test_inspect_reads_index_bytes_not_whole_shards(tmp_path: Path, http_root: tuple[Path, RangeServer]) -> None:
    """Tiny shards whose indexes lie a few KB apart are not fetched whole to save requests."""
    root, server = http_root
    write_ts_volume(root / "vol", SHARDING_MURMUR_GZIP, scales=1)
    total = sum(p.stat().st_size for p in (root / "vol").rglob("*.shard"))
    inspector = open_dataset(server.url + "vol").inspector()  # type: ignore[attr-defined]
    summary = inspector.inspect()
    local = open_dataset(root / "vol").inspector().inspect()  # type: ignore[attr-defined]
    index_bytes = sum(s["index_bytes"] for s in local["scales"][0]["shards"])
    assert summary["scales"][0]["chunks"] == local["scales"][0]["chunks"]
    # info + probes of every possible shard + the minishard indexes, at most twice their bytes
    assert summary["bytes_read"] <= 2 * index_bytes + 4096 < total
    ranged = [r for r in server.requests if r[0].endswith(".shard")]
    assert ranged and all(rng is not None for _, rng in ranged)


def test_read_ranges_matches_read_range_local_and_remote(tmp_path: Path, http_root: tuple[Path, RangeServer]) -> None:
    root, server = http_root
    data = bytes(range(256)) * 40
    (root / "blob").write_bytes(data)
    requests = [("blob", 0, 10), ("blob", 5000, 5100), ("blob", 10000, 10300), ("missing", 0, 4), ("blob", 7, 7)]
    local = LocalByteStore(root)
    remote = open_store(server.url)
    expected = [local.read_range(k, s, e) for k, s, e in requests]
    assert expected[2] == data[10000:]  # short at the end of the file, like a file read
    assert expected[3] is None
    assert read_ranges(local, requests) == expected
    assert read_ranges(remote, requests) == expected


ranges_strategy = st.lists(
    st.tuples(st.integers(0, 1 << 22), st.integers(1, 1 << 16)), min_size=0, max_size=60
).map(lambda xs: sorted((start, start + size, i) for i, (start, size) in enumerate(xs)))


@given(ranges_strategy)
def test_coalesce_ranges_never_fetches_much_more_than_wanted(ranges: list[tuple[int, int, int]]) -> None:
    disjoint: list[tuple[int, int, int]] = []
    for r in ranges:  # minishard index ranges of one shard do not overlap
        if not disjoint or r[0] >= disjoint[-1][1]:
            disjoint.append(r)
    groups = coalesce_ranges(disjoint)
    assert [r for g in groups for r in g] == disjoint
    for g in groups:
        lo, hi = g[0][0], max(r[1] for r in g)
        wanted = sum(e - s for s, e, _ in g)
        assert hi - lo <= 2 * wanted
        assert len(g) == 1 or hi - lo <= COALESCE_SPAN
        assert all(b[0] - a[1] <= COALESCE_GAP for a, b in pairwise(g))


def test_coalesce_ranges_merges_close_indexes_and_keeps_far_ones_apart() -> None:
    close = [(0, 1000, 0), (1100, 2000, 1), (2050, 3000, 2)]
    assert coalesce_ranges(close) == [close]
    far = [(0, 100, 0), (20_000, 20_100, 1)]  # 20 KB apart: 200x the bytes wanted
    assert coalesce_ranges(far) == [[far[0]], [far[1]]]


def test_own_shards_keep_minishard_indexes_together_one_request_each(
        tmp_path: Path, http_root: tuple[Path, RangeServer]) -> None:
    """Our writer puts every minishard index after the data: a shard's indexes come in one request.

    The chunks are incompressible and larger than the coalescing gap, so with indexes between the
    minishards' data (TensorStore's layout) each index would be its own request.
    """
    import numpy as np

    from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
    from napari_shardscope.core.formats.precomputed.shard_writer import group_by_shard, write_shards
    from napari_shardscope.core.formats.precomputed.sharding import format_shard_name

    root, server = http_root
    spec = parse_sharding_spec(SHARDING_MURMUR_GZIP)
    rng = np.random.default_rng(7)
    ids = list(range(1, 200))
    chunks = {i: rng.integers(0, 256, COALESCE_GAP + 1000, dtype=np.uint8).tobytes() for i in ids}
    write_shards(LocalByteStore(root / "vol"), "s0", spec, chunks)
    by_shard = group_by_shard(spec, ids)
    local = ShardedReader(LocalByteStore(root / "vol"), "s0", spec)
    remote = ShardedReader(open_store(server.url + "vol"), "s0", spec)
    server.requests.clear()
    remote.prefetch_minishards_of(sorted(by_shard))
    for shard, members in by_shard.items():
        name = f"{format_shard_name(spec, shard)}.shard"
        file_reads = [r for p, r in server.requests if p.rsplit("/", 1)[-1] == name]
        assert len(file_reads) == 2, (shard, file_reads)  # the shard index, then all minishard indexes at once
        minis = local.shard_index(shard)
        assert minis is not None
        for m in minis.nonempty_minishards().tolist():
            a, b = local.minishard_index(shard, m), remote.minishard_index(shard, m)
            assert all(np.array_equal(x, y) for x, y in
                       [(a.chunk_ids, b.chunk_ids), (a.starts, b.starts), (a.ends, b.ends)])
        assert sorted(np.concatenate([local.minishard_index(shard, m).chunk_ids for m in
                                      minis.nonempty_minishards().tolist()]).tolist()) == sorted(members)
