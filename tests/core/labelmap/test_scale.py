"""What keeps the labelmap's cost bounded by what is touched: listed chunks, paged tables, a shallow union-find.

* a labelmap over a petavoxel extent (3.8 × 10¹⁰ declared 64³ blocks) with a few stored chunks is
  created, indexed and edited by visiting those chunks only (the previous code visited every declared
  block and never finished);
* paged tables answer ``find``/``select`` exactly like a sorted array, across page boundaries;
* any object with the AgglomerationSource methods is a base agglomeration, copied page by page;
* chained merges in the worst order leave the union-find O(log n) deep;
* a base too large to index on first need names the command that does (``shardscope index``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.labelmap import IndexNotBuiltError, create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.paged import PagedTable, write_table
from napari_shardscope.core.labelmap.records import parent_key
from napari_shardscope.core.versioned import Repository, create_repository, open_repository

PETA = (10_000, 1_000_000, 1_000_000)  # z, y, x: 3.8e10 blocks of 64³


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repository]:
    r = create_repository(tmp_path / "repo")
    yield r
    r.close()


def test_a_petavoxel_extent_is_indexed_by_its_stored_chunks(tmp_path: Path, repo: Repository) -> None:
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "peta")}},
                    create=True, dtype=ts.uint64, shape=list(PETA),
                    chunk_layout=ts.ChunkLayout(chunk_shape=[64, 64, 64])).result()
    rng = np.random.default_rng(4)
    corners = [(0, 0, 0), (64 * 100, 64 * 7000, 64 * 15000), (64 * 155, 64 * 15624, 64 * 3)]
    expected: dict[int, int] = {}
    for i, (z, y, x) in enumerate(corners):
        block = np.full((64, 64, 64), 0, dtype=np.uint64)
        block[:, :32] = 10 + i
        block[:, 32:, : int(rng.integers(1, 64))] = 20 + i
        store[z:z + 64, y:y + 64, x:x + 64].write(block).result()
        for label, n in zip(*np.unique(block, return_counts=True), strict=True):
            if label:
                expected[int(label)] = int(n)
    lm = create_labelmap(repo, "peta", tmp_path / "peta", agglomeration={20: 10, 21: 11}, block=64)
    summary = lm.index_summary()
    assert dict(zip(summary.supervoxels.tolist(), summary.totals.tolist(), strict=True)) == expected
    assert lm.base_index().meta["voxels"] == sum(expected.values())
    v = lm.at("main")
    assert v.supervoxels(10) == [10, 20] and v.size(10) == expected[10] + expected[20]
    z, y, x = corners[1]
    assert v.bbox(11) == v.bbox(11, exact=False).intersect(v.bbox(11))
    assert v.bbox(11).lo[0] == z and v.bbox(11).lo[1] == y and v.bbox(11).hi[1] == y + 64
    v.merge(10, [11, 12])
    assert v.size(10) == sum(expected.values()) - expected[22]
    assert v.body_at((z + 5, y + 5, x + 5)) == 10
    new = v.cleave(10, [21])
    assert v.sparsevol(new).blocks.tolist() == [[z // 64, y // 64, x // 64]]
    again = open_labelmap(repo, "peta").at("main")
    assert again.size(new) == expected[21] and again.body_at((z + 40, y + 40, x)) == new


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 9)), max_size=200), st.integers(1, 7),
       st.lists(st.integers(0, 70), max_size=30))
def test_paged_tables_answer_like_a_sorted_array(rows: list[tuple[int, int]], per_page: int, keys: list[int]) -> None:
    dtype = np.dtype([("k", "<u8"), ("v", "<u8")])
    arr = np.array(sorted(rows), dtype=dtype)
    multi = dict(write_table(b"t", dtype, "k", [arr[:5], arr[5:]], rows_per_page=per_page))
    table = PagedTable(b"t", lambda ks: [multi.get(k) for k in ks])
    want = arr[np.isin(arr["k"], keys)]
    np.testing.assert_array_equal(table.select(keys), want)
    assert table.rows == len(rows)
    first = {}
    for k, v in sorted(rows):
        first.setdefault(k, v)
    uniq = np.array(sorted(first.items()), dtype=dtype)
    single = dict(write_table(b"u", dtype, "k", [uniq], unique=True, rows_per_page=per_page))
    table = PagedTable(b"u", lambda ks: [single.get(k) for k in ks])
    found, got = table.find(keys)
    assert found.tolist() == [k in first for k in keys]
    assert [int(g["v"]) for g, f in zip(got, found, strict=True) if f] == [first[k] for k in keys if k in first]


class EveryThirdJoinsItsNeighbour:
    """A procedural agglomeration (no table in memory): sv 3k+1 and 3k+2 belong to body 3k+3."""

    def __init__(self, top: int) -> None:
        self.top = top

    @property
    def max_id(self) -> int:
        return self.top

    @property
    def listed(self) -> int:
        return sum(1 for s in range(1, self.top + 1) if s % 3)

    def lookup(self, svs: object) -> np.ndarray:
        arr = np.asarray(svs, dtype=np.uint64)
        out = arr.copy()
        listed = (arr % 3 != 0) & (arr <= self.top) & (arr > 0)
        out[listed] = arr[listed] - arr[listed] % 3 + 3
        return out

    def listed_mask(self, svs: object) -> np.ndarray:
        arr = np.asarray(svs, dtype=np.uint64)
        return (arr % 3 != 0) & (arr <= self.top) & (arr > 0)

    def members_of(self, bodies: object) -> np.ndarray:
        b = np.unique(np.asarray(bodies, dtype=np.uint64))
        b = b[(b % 3 == 0) & (b > 0) & (b <= self.top + 2)]
        return np.unique(np.concatenate([b - 2, b - 1])).astype(np.uint64) if b.size else np.zeros(0, np.uint64)

    def iter_pages(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        svs = np.array([s for s in range(1, self.top + 1) if s % 3], dtype=np.uint64)
        for start in range(0, svs.size, 7):
            part = svs[start:start + 7]
            yield part, self.lookup(part)


def test_any_agglomeration_source_is_copied_page_by_page(tmp_path: Path, repo: Repository) -> None:
    from tests.core.labelmap.volumes import write_precomputed

    data = (np.arange(4 * 8 * 8, dtype=np.uint64).reshape(4, 8, 8) % 30) + 1
    write_precomputed(tmp_path / "seg", data, ((1, 1, 1),))
    source = EveryThirdJoinsItsNeighbour(30)
    assert isinstance(source, AgglomerationSource)
    lm = create_labelmap(repo, "seg", tmp_path / "seg", agglomeration=source, block=4)
    v = open_labelmap(repo, "seg").at("main")
    svs = np.unique(data)
    np.testing.assert_array_equal(v.bodies_of(svs), source.lookup(svs))
    assert v.supervoxels(6) == [4, 5, 6] and lm.config.id_start == 31


def test_chained_merges_keep_the_union_find_shallow(tmp_path: Path, repo: Repository) -> None:
    from tests.core.labelmap.volumes import write_precomputed

    data = np.arange(1, 8 * 16 * 16 + 1, dtype=np.uint64).reshape(8, 16, 16)
    write_precomputed(tmp_path / "seg", data, ((1, 1, 1),), chunk_xyz=(16, 16, 8))
    lm = create_labelmap(repo, "seg", tmp_path / "seg", block=8)
    v = lm.at("main")
    body = 1
    for new in range(2, 301):  # the worst order for a forest named by its bodies: the big one into a new one
        v.merge(new, [body])
        body = new
    with repo.read("main") as view:
        def depth(node: int) -> int:
            d = 0
            while (raw := view.get("seg", parent_key(node))) is not None:
                node, d = int.from_bytes(raw, "little"), d + 1
            return d

        assert max(depth(n) for n in range(1, 301)) <= 9  # log2(300)
    assert v.supervoxels(body) == list(range(1, 301)) and v.size(body) == 300
    assert [h.mutation.operation for h in v.history(body)][-3:] == ["merge"] * 3


def test_a_large_base_without_an_index_names_the_job(tmp_path: Path, repo: Repository,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from napari_shardscope.core.labelmap import index_build

    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "z")}}, create=True,
                    dtype=ts.uint64, shape=[16, 16, 16], chunk_layout=ts.ChunkLayout(chunk_shape=[8, 8, 8])).result()
    store.write(np.arange(1, 16**3 + 1, dtype=np.uint64).reshape(16, 16, 16)).result()
    lm = create_labelmap(repo, "z", tmp_path / "z", id_start=10**6, build_index=False, block=8)
    monkeypatch.setattr(index_build, "ON_DEMAND_BLOCKS", 4)  # 8 blocks hold data
    with pytest.raises(IndexNotBuiltError, match="shardscope index"):
        lm.at("main").size(5)
    monkeypatch.undo()
    assert lm.at("main").size(5) == 1  # small enough: indexed on first need


# -- read-once passes keep out of the shared chunk cache ----------------------------------------------------
#: Prints the process's peak resident memory (VmHWM, bytes) on stderr at exit, after running the CLI verb.
PEAK_WRAPPER = (
    "import atexit, re, runpy, sys\n"
    "def peak():\n"
    "    text = open('/proc/self/status').read()\n"
    "    print('VMHWM', int(re.search(r'^VmHWM:\\s+(\\d+) kB', text, re.M).group(1)) << 10, file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['shardscope', *sys.argv[1:]]\n"
    "runpy.run_module('napari_shardscope', run_name='__main__')\n"
)
#: A shared cache large enough to hold every chunk the verbs below read (the default is a fraction of RAM).
BIG_CACHE_MB = "4096"


def write_dense_zarr(path: Path, grid: tuple[int, int, int]) -> int:
    """A zarr v3 uint64 volume of 64³ chunks, every chunk stored (a few supervoxels each); its decoded bytes."""
    shape = [64 * g for g in grid]
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}, create=True,
                    dtype=ts.uint64, shape=shape, chunk_layout=ts.ChunkLayout(chunk_shape=[64, 64, 64])).result()
    cells = (np.arange(64)[:, None, None] // 32 * 4 + np.arange(64)[None, :, None] // 32 * 2
             + np.arange(64)[None, None, :] // 32).astype(np.uint64)
    n = 0
    for z in range(grid[0]):
        for y in range(grid[1]):
            for x in range(grid[2]):
                store[64 * z:64 * z + 64, 64 * y:64 * y + 64, 64 * x:64 * x + 64].write(cells + 1 + 8 * n).result()
                n += 1
    return n * 64**3 * 8


def peak_of(args: list[str], tmp_path: Path) -> int:
    """Run ``shardscope ARGS`` (a fresh process, a shared cache that could hold the whole volume): its VmHWM."""
    import os
    import re
    import subprocess
    import sys

    env = {**os.environ, "SHARDSCOPE_CACHE_MB": BIG_CACHE_MB, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", PEAK_WRAPPER, *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    m = re.search(r"^VMHWM (\d+)$", done.stderr, re.M)
    assert m is not None, done.stderr[-3000:]
    return int(m.group(1))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (VmHWM)")
def test_creating_a_labelmap_keeps_its_reads_out_of_the_shared_cache(tmp_path: Path) -> None:
    """``labelmap create`` reads every stored chunk once to build the index: the chunks must not stay in the
    viewer's chunk cache. A volume of 384 MiB of decoded chunks, with a shared cache that could hold all of
    it, peaks at most a third of that above the create of a 2-chunk volume (it held every chunk before)."""
    small = write_dense_zarr(tmp_path / "small", (1, 1, 2))
    big = write_dense_zarr(tmp_path / "big", (2, 8, 12))
    peaks = {}
    for name in ("small", "big"):
        create_repository(tmp_path / f"repo-{name}").close()
        peaks[name] = peak_of(["labelmap", "create", str(tmp_path / f"repo-{name}"), "seg", str(tmp_path / name)],
                              tmp_path)
    repo = open_repository(tmp_path / "repo-big")
    try:  # the index the create built counts every voxel
        assert open_labelmap(repo, "seg").base_index().meta["voxels"] == big // 8
    finally:
        repo.close()
    assert peaks["big"] - peaks["small"] < (big - small) // 3, {k: v >> 20 for k, v in peaks.items()}
