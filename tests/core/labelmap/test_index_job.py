"""The base label index as a Dask job: byte-identical to the thread-built index, on threads and on a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.index_job import build_label_index
from napari_shardscope.core.labelmap.label_index import combine_counts, count_block
from napari_shardscope.core.versioned import create_repository, open_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("idx") / "seg"
    data = voronoi_supervoxels((10, 36, 40), 20, seed=5)
    write_precomputed(path, data, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 16, 4), sharded=True)
    return path, data


def stored_index(path: Path) -> list[tuple[bytes, bytes]]:
    with open_repository(path) as repo:
        return repo.scan_unversioned("seg", b"index/")


def make(tmp_path: Path, name: str, base: Path, *, build: bool) -> Path:
    repo = create_repository(tmp_path / name)
    create_labelmap(repo, "seg", base, id_start=10**6, build_index=build, block=8)
    repo.close()
    return tmp_path / name


def test_dask_index_equals_thread_index_and_is_correct(base: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    threads = make(tmp_path, "threads", base[0], build=True)  # the in-process thread pool, at creation
    dask = make(tmp_path, "dask", base[0], build=False)
    seen: list[tuple[int, int]] = []
    built = build_label_index(str(dask), "seg", blocks_per_task=3, progress=lambda d, t, w: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] > 1
    assert stored_index(dask) == stored_index(threads)
    ids, counts = np.unique(base[1], return_counts=True)
    np.testing.assert_array_equal(built.summary.supervoxels, ids)
    np.testing.assert_array_equal(built.summary.totals, counts)
    with open_repository(dask) as repo:  # the labelmap uses it: sizes from the index
        v = open_labelmap(repo, "seg").at("main")
        assert v.supervoxel_size(int(ids[3])) == int(counts[3])


def test_local_cluster_builds_the_same_index(base: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    threads = make(tmp_path, "threads", base[0], build=True)
    cluster_repo = make(tmp_path, "cluster", base[0], build=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        build_label_index(str(cluster_repo), "seg", scheduler=client, blocks_per_task=4)
    assert stored_index(cluster_repo) == stored_index(threads)


def test_rebuild_refused_without_force_and_cli(base: tuple[Path, np.ndarray], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path, "cli", base[0], build=False)
    assert run(["labelmap", "index", str(path), "seg", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["built"] and out["supervoxels"] == len(np.unique(base[1])) and out["voxels"] == base[1].size
    before = stored_index(path)
    with pytest.raises(ArgumentError, match="already has"):
        build_label_index(str(path), "seg")
    assert run(["labelmap", "index", str(path), "seg", "--json"]) == 0  # reports the stored index, builds nothing
    assert json.loads(capsys.readouterr().out)["built"] is False
    assert run(["labelmap", "index", str(path), "seg", "--overwrite", "--quiet", "--scheduler", "sync"]) == 0
    assert stored_index(path) == before
    assert run(["labelmap", "index", str(path), "nope"]) == 3  # no such labelmap
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize(("blocks_per_task", "ranges", "id_start"), [(1, 7, 10**6), (5, 3, 10**6), (64, 9, 1500)])
def test_range_partitioned_combination_stores_the_same_bytes(base: tuple[Path, np.ndarray], tmp_path: Path,
                                                             blocks_per_task: int, ranges: int, id_start: int) -> None:
    """However the bricks and supervoxel-id ranges are cut (ids past id_start land in the last range), same bytes."""
    threads = make(tmp_path, "threads", base[0], build=True)
    repo = create_repository(tmp_path / "ranged")
    # id_start 1500 lies below most base ids (allowed while the index is deferred): they share the last range
    create_labelmap(repo, "seg", base[0], id_start=id_start, build_index=False, block=8)
    repo.close()
    report = build_label_index(str(tmp_path / "ranged"), "seg", blocks_per_task=blocks_per_task, ranges=ranges)
    assert report.ranges == ranges and report.to_json()["supervoxels"] == len(np.unique(base[1]))
    assert stored_index(tmp_path / "ranged") == stored_index(threads)


@pytest.mark.parametrize("scheduler", [None, "threads", "sync"])
def test_local_scheduler_combines_in_memory_to_the_same_bytes(base: tuple[Path, np.ndarray], tmp_path: Path,
                                                              scheduler: str | None) -> None:
    """A local scheduler keeps the counts in memory (one combination, no scratch file), same bytes as threads."""
    threads = make(tmp_path, "threads", base[0], build=True)
    local = make(tmp_path, "local", base[0], build=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    seen: list[str] = []
    report = build_label_index(str(local), "seg", scheduler=scheduler, blocks_per_task=2, scratch=scratch,
                               progress=lambda d, t, w: seen.append(w))
    assert report.ranges == 1 and seen.count("combine ranges") == 1
    assert stored_index(local) == stored_index(threads)
    assert list(scratch.iterdir()) == []  # nothing left behind


def test_interrupted_rebuild_leaves_the_old_index(base: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    """A rebuild stores in one transaction: failing at the last range leaves the previous index, damage and all;
    a complete rebuild repairs it."""
    from napari_shardscope.core.labelmap.label_index import SV_TABLE
    from napari_shardscope.core.labelmap.paged import page_key

    path = make(tmp_path, "atomic", base[0], build=True)
    good = stored_index(path)
    with open_repository(path) as repo:  # the first page of the per-supervoxel table (the first id range's)
        repo.put_unversioned("seg", [(page_key(SV_TABLE, 0), b"damaged!")])
        with pytest.raises(Exception, match="not a table page"):
            from napari_shardscope.core.labelmap import open_labelmap as _open

            _open(repo, "seg").at("main").supervoxel_size(int(np.unique(base[1])[1]))
    damaged = stored_index(path)
    assert damaged != good

    def fail_at_the_last_range(done: int, total: int, what: str) -> None:
        if what == "combine ranges" and done == total - 1:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        build_label_index(str(path), "seg", overwrite=True, ranges=4, progress=fail_at_the_last_range)
    assert stored_index(path) == damaged
    build_label_index(str(path), "seg", overwrite=True, ranges=4)
    assert stored_index(path) == good


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5),
                          st.integers(1, 2**40)), max_size=60), st.booleans())
def test_stored_tables_give_back_every_entry_and_body(rows: list[tuple[int, int, int, int, int]],
                                                       grouped: bool) -> None:
    """Counts stored as paged tables read back per supervoxel (entries, totals) and per body (rows, summaries)."""
    from napari_shardscope.core.labelmap.agglomeration import MappingSource
    from napari_shardscope.core.labelmap.label_index import BaseIndexReader, index_items

    parts = [((z, y, x), np.asarray([sv], dtype=np.uint64), np.asarray([n], dtype=np.int64))
             for sv, z, y, x, n in {(r[0], r[1], r[2], r[3]): r for r in rows}.values()]
    built = combine_counts(parts)
    agg = MappingSource.from_mapping({sv: 100 + sv % 3 for sv in range(1, 41) if sv % 2}) if grouped else None
    store = dict(index_items([built], agg))
    meta = json.loads(store[b"index/meta"])
    index = BaseIndexReader(lambda keys: [store.get(k) for k in keys], meta)
    assert meta["supervoxels"] == built.summary.supervoxels.size and index.max_id == built.summary.max_id
    for sv in range(0, 42):
        mine = built.labels == sv
        entry = index.entry(sv)
        if not mine.any():
            assert entry is None and not index.contains([sv])[0]
            continue
        assert entry is not None
        np.testing.assert_array_equal(entry.blocks, built.blocks[mine])
        np.testing.assert_array_equal(entry.counts, built.counts[mine])
        assert int(index.totals([sv])[1][0]) == int(built.counts[mine].sum())
    body_of = {int(s): int(agg.lookup(np.asarray([s], np.uint64))[0]) if agg else int(s) for s in built.labels}
    for body in sorted(set(body_of.values())):
        svs = [s for s, b in body_of.items() if b == body]
        mine = np.isin(built.labels, svs)
        want: dict[tuple[int, int, int], int] = {}
        for c, n in zip(built.blocks[mine].tolist(), built.counts[mine].tolist(), strict=True):
            want[tuple(c)] = want.get(tuple(c), 0) + n
        got = index.body_rows([body])
        assert {(int(r["z"]), int(r["y"]), int(r["x"])): int(r["n"]) for r in got} == want
        found, summary = index.body_summaries([body])
        assert found[0] and int(summary["voxels"][0]) == sum(want.values()) and int(summary["svs"][0]) == len(svs)
        lo = np.asarray(list(want)).min(0)
        assert (int(summary["z0"][0]), int(summary["y0"][0]), int(summary["x0"][0])) == tuple(int(v) for v in lo)


@given(st.integers(0, 2**32), st.sampled_from([(1, 1, 1), (4, 4, 4), (3, 5, 7), (8, 8, 16)]), st.integers(1, 40),
       st.integers(1, 12))
def test_counting_by_runs_equals_np_unique(seed: int, shape: tuple[int, int, int], labels: int, run: int) -> None:
    """Blocks of long runs (counted run by run) and of noise (counted voxel by voxel) give np.unique's counts."""
    rng = np.random.default_rng(seed)
    data = np.repeat(rng.integers(0, labels, size=-(-int(np.prod(shape)) // run), dtype=np.uint64), run)
    data = data[: int(np.prod(shape))].reshape(shape)
    _, got_labels, got_counts = count_block((0, 0, 0), data)
    want_labels, want_counts = np.unique(data, return_counts=True)
    keep = want_labels != 0
    np.testing.assert_array_equal(got_labels, want_labels[keep])
    np.testing.assert_array_equal(got_counts, want_counts[keep])
    assert got_labels.dtype == np.uint64 and got_counts.dtype == np.int64
    _, strided, _ = count_block((0, 0, 0), data[:, ::-1, :].transpose(2, 1, 0))  # a strided view reads the same
    np.testing.assert_array_equal(strided, got_labels)
