"""Benchmark: export throughput against TensorStore writing the same array directly; 1 vs 2 workers.

Run: ``.venv/bin/python bench/export.py [--repeats 3] [--part volume|labelmap|index|all]``

* ``volume``: an in-memory uint64 segmentation (blocky labels, so gzip does real work); both sides
  write the same sharded precomputed layout (our default sharding spec, raw chunks, gzip data).
* ``labelmap``: the bodies of a committed labelmap version (a merge, a cleave and a supervoxel
  split over a 3-scale sharded base of ~33k supervoxels), every scale, exported through the labelmap's reads, against
  TensorStore writing the same arrays (already in memory) with the same info and sharding.
* ``index``: the base label index of that labelmap: the in-process thread builder
  (``build_base_index`` + ``store_base_index``, 2 threads) against the Dask job
  (``build_label_index``) with 1 and 2 threads, and on a 2-process ``LocalCluster``.

Goal: export ≥ 0.5× TensorStore's throughput. Medians of several runs (interleaved); the machine
is shared.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from napari_shardscope.core.export.precomputed import build_info, export_precomputed
from napari_shardscope.core.export.source import ArraySource
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec

SHAPE = (128, 512, 512)  # z, y, x
# 8 shards of 16 chunks (64^3), so there are several tasks to spread over workers.
SPEC = ShardingSpec(
    preshift_bits=3,
    hash="identity",
    minishard_bits=1,
    shard_bits=3,
    minishard_index_encoding="gzip",
    data_encoding="gzip",
)


def make_labels() -> np.ndarray:
    z, y, x = np.ogrid[0 : SHAPE[0], 0 : SHAPE[1], 0 : SHAPE[2]]
    return (1 + (x // 37) + 11 * (y // 29) + 131 * (z // 17)).astype(np.uint64)


def time_ts(data: np.ndarray, info: dict, dest: Path, concurrency: int) -> float:
    scale = info["scales"][0]
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(dest)},
        "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
        "scale_metadata": {
            "size": scale["size"],
            "resolution": scale["resolution"],
            "encoding": "raw",
            "chunk_size": scale["chunk_sizes"][0],
            "sharding": scale["sharding"],
        },
        "create": True,
        "delete_existing": True,
        "context": {"data_copy_concurrency": {"limit": concurrency}, "file_io_concurrency": {"limit": concurrency}},
    }
    t0 = time.perf_counter()
    store = ts.open(spec).result()
    store[..., 0] = data.T
    return time.perf_counter() - t0


def bench_volume(repeats: int) -> None:
    data = make_labels()
    source = ArraySource((data,), ((8.0, 8.0, 40.0),))
    info = build_info(source, sharding=SPEC)
    mb = data.nbytes / 2**20
    rows: dict[str, list[float]] = {
        "tensorstore (2 threads)": [],
        "shardscope threads x2": [],
        "shardscope threads x1": [],
        "tensorstore (1 thread)": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for r in range(repeats):  # interleaved, so drift hits every row alike
            rows["tensorstore (2 threads)"].append(time_ts(data, info, root / f"ts{r}", 2))
            rows["tensorstore (1 thread)"].append(time_ts(data, info, root / f"ts1{r}", 1))
            for workers in (2, 1):
                dest = root / f"ours{workers}_{r}"
                t0 = time.perf_counter()
                export_precomputed(source, str(dest), num_workers=workers, sharding=SPEC)
                rows[f"shardscope threads x{workers}"].append(time.perf_counter() - t0)
                shutil.rmtree(dest)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"export of a {SHAPE} uint64 segmentation ({mb:.0f} MiB), sharding {info['scales'][0]['sharding']}")
    for name, t in med.items():
        print(f"  {name:26s} {t:7.2f} s  {mb / t:7.1f} MiB/s")
    two = med["tensorstore (2 threads)"] / med["shardscope threads x2"]
    one = med["tensorstore (1 thread)"] / med["shardscope threads x1"]
    print(f"  ratio shardscope/tensorstore (2 workers each): {two:.2f}x  (goal >= 0.5x)")
    print(f"  ratio shardscope/tensorstore (1 worker each):  {one:.2f}x")
    print(f"  shardscope speed-up 2 vs 1 workers: {med['shardscope threads x1'] / med['shardscope threads x2']:.2f}x")


LM_SHAPE = (128, 512, 512)  # z, y, x
LM_FACTORS = ((1, 1, 1), (1, 2, 2), (2, 4, 4))


def make_labelmap(root: Path) -> tuple[object, str]:
    """A labelmap over a blocky 3-scale base with a merge, a cleave and a split, committed; (repo, uuid)."""
    from tests.core.labelmap.volumes import write_precomputed

    from napari_shardscope.core.labelmap import create_labelmap
    from napari_shardscope.core.versioned import create_repository

    z, y, x = np.ogrid[0 : LM_SHAPE[0], 0 : LM_SHAPE[1], 0 : LM_SHAPE[2]]
    base = (1 + (x // 11) + 47 * (y // 13) + 1901 * (z // 7)).astype(np.uint64)
    write_precomputed(root / "seg", base, LM_FACTORS, chunk_xyz=(64, 64, 64), sharded=True)
    repo = create_repository(root / "repo")
    lm = create_labelmap(repo, "seg", root / "seg", block=64)
    v = lm.at("main")
    svs = [int(s) for s in np.unique(base)]
    v.merge(svs[0], [svs[1], svs[2], svs[3]])
    v.cleave(svs[0], [svs[3]])
    target = svs[40]
    pick = np.argwhere(base == target)
    v.split_supervoxel(target, pick[: len(pick) // 2])
    return repo, repo.commit(v.uuid, "bench edits").uuid


def bench_labelmap(root: Path, repo: object, uuid: str, repeats: int) -> None:
    from napari_shardscope.core.export.source import labelmap_source
    from napari_shardscope.core.labelmap import open_labelmap

    source = labelmap_source(repo, "seg", uuid)
    info = build_info(source, sharding=SPEC)  # 8 + 2 + 1 shards: tasks to spread over workers
    v = open_labelmap(repo, "seg").at(uuid)  # type: ignore[arg-type]
    arrays = [np.asarray(v.read_bodies(scale=s)) for s in range(len(LM_FACTORS))]
    mb = sum(a.nbytes for a in arrays) / 2**20
    rows: dict[str, list[float]] = {"tensorstore (2 threads)": [], "shardscope threads x2": [],
                                    "shardscope threads x1": [], "tensorstore (1 thread)": []}

    def ts_all(dest: Path, concurrency: int) -> float:
        t = 0.0
        for s, a in enumerate(arrays):
            one = dict(info, scales=[info["scales"][s]])
            t += time_ts(a, one, dest / str(s), concurrency)
        return t

    export_precomputed(source, str(root / "warm-up"), sharding=SPEC)  # opens the labelmap once, untimed
    shutil.rmtree(root / "warm-up")
    for r in range(repeats):
        rows["tensorstore (2 threads)"].append(ts_all(root / f"lts{r}", 2))
        rows["tensorstore (1 thread)"].append(ts_all(root / f"lts1{r}", 1))
        for workers in (2, 1):
            dest = root / f"lm{workers}_{r}"
            t0 = time.perf_counter()
            report = export_precomputed(source, str(dest), num_workers=workers, sharding=SPEC)
            rows[f"shardscope threads x{workers}"].append(time.perf_counter() - t0)
            shutil.rmtree(dest)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"export of labelmap bodies at a committed version, {LM_SHAPE} base, {len(arrays)} scales ({mb:.0f} MiB), "
          f"{len(report.shards)} shard files (one task each)")
    for name, t in med.items():
        print(f"  {name:26s} {t:7.2f} s  {mb / t:7.1f} MiB/s")
    print(f"  ratio shardscope/tensorstore (2 workers each): "
          f"{med['tensorstore (2 threads)'] / med['shardscope threads x2']:.2f}x  (goal >= 0.5x)")
    print(f"  ratio shardscope/tensorstore (1 worker each):  "
          f"{med['tensorstore (1 thread)'] / med['shardscope threads x1']:.2f}x")
    print(f"  shardscope speed-up 2 vs 1 workers: {med['shardscope threads x1'] / med['shardscope threads x2']:.2f}x")


def bench_index(repo: object, repeats: int) -> None:
    from distributed import Client, LocalCluster

    from napari_shardscope.core.labelmap import open_labelmap
    from napari_shardscope.core.labelmap.index_job import build_label_index
    from napari_shardscope.core.labelmap.label_index import build_base_index, store_base_index

    lm = open_labelmap(repo, "seg")  # type: ignore[arg-type]
    rows: dict[str, list[float]] = {"thread builder (2 threads)": [], "dask job threads x2": [],
                                    "dask job threads x1": [], "dask job LocalCluster 2 procs": []}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for scheduler in (None, client):  # warm-up, untimed: each process opens the base once
            build_label_index(repo, "seg", scheduler=scheduler, overwrite=True)  # type: ignore[arg-type]
        for _ in range(repeats):
            t0 = time.perf_counter()
            built = build_base_index(lambda box: lm.base.read(0, box), lm.config.grid(0), workers=2)
            store_base_index(repo, lm.instance, built)  # type: ignore[arg-type]
            rows["thread builder (2 threads)"].append(time.perf_counter() - t0)
            for workers in (2, 1):
                t0 = time.perf_counter()
                build_label_index(repo, "seg", num_workers=workers, overwrite=True)  # type: ignore[arg-type]
                rows[f"dask job threads x{workers}"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            build_label_index(repo, "seg", scheduler=client, overwrite=True)  # type: ignore[arg-type]
            rows["dask job LocalCluster 2 procs"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in rows.items()}
    mb = int(np.prod(LM_SHAPE)) * 8 / 2**20
    print(f"base label index of a {LM_SHAPE} uint64 base ({mb:.0f} MiB, {len(built.summary.supervoxels)} supervoxels)")
    for name, t in med.items():
        print(f"  {name:30s} {t:7.2f} s  {mb / t:7.1f} MiB/s")
    ratio = med["thread builder (2 threads)"] / med["dask job threads x2"]
    print(f"  ratio dask job x2 / thread builder: {ratio:.2f}x")
    print(f"  dask job speed-up 2 vs 1 workers: {med['dask job threads x1'] / med['dask job threads x2']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=("volume", "labelmap", "index", "all"), default="all")
    args = parser.parse_args()
    if args.part in ("volume", "all"):
        bench_volume(args.repeats)
    if args.part in ("labelmap", "index", "all"):
        with tempfile.TemporaryDirectory() as tmp:
            repo, uuid = make_labelmap(Path(tmp))
            if args.part in ("labelmap", "all"):
                bench_labelmap(Path(tmp), repo, uuid, args.repeats)
            if args.part in ("index", "all"):
                bench_index(repo, args.repeats)
            repo.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
