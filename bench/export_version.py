"""Benchmark: exporting a proofread labelmap version, and building the base label index on Dask.

Run: ``.venv/bin/python bench/export_version.py [--repeats 3]``

* **Export of a version.** A 64 × 512 × 512 uint64 supervoxel base (2 scales, sharded precomputed)
  under a labelmap with an agglomeration and a few edits (merge, cleave, supervoxel split),
  committed. ``export_precomputed(labelmap_source(...))`` writes body ids at every scale; the peer
  is TensorStore writing the very same arrays (read from the labelmap beforehand, so the peer does
  no reading) with the same sharding spec. Our side *includes* reading the base, patching the
  overlay and mapping to bodies. Goal ≥ 0.5×. Also 1 vs 2 workers.
* **Bulk label index.** The thread-pool builder the GUI uses on first need vs the Dask job
  (``build_label_index``) on the threaded scheduler with 1 and 2 workers.

Medians of several interleaved runs; the machine is shared and noisy.
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

from blocky_base import write_blocky_base

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from napari_shardscope.core.export.precomputed import build_info, export_precomputed
from napari_shardscope.core.export.source import labelmap_source
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.index_job import build_label_index
from napari_shardscope.core.labelmap.label_index import build_base_index
from napari_shardscope.core.labelmap.reading import BaseSource
from napari_shardscope.core.versioned import create_repository, open_repository
from napari_shardscope.core.volumes import open_volume

SHAPE = (64, 512, 512)  # z, y, x


def make_base(path: Path) -> np.ndarray:
    """The benchmark's supervoxel base (blocky cells, 2 scales, sharded)."""
    return write_blocky_base(path, SHAPE, (11, 19, 23), (64, 64, 64), 3)


def write_ts(arrays: list[np.ndarray], info: dict, dest: Path) -> float:
    """TensorStore writing ``arrays`` (one per scale) with the export's own info, 2 threads."""
    t0 = time.perf_counter()
    for i, (data, scale) in enumerate(zip(arrays, info["scales"], strict=True)):
        spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(dest)},
                "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
                "scale_metadata": {"size": scale["size"], "resolution": scale["resolution"], "encoding": "raw",
                                   "chunk_size": scale["chunk_sizes"][0], "sharding": scale["sharding"]},
                "create": True, "open": i > 0,
                "context": {"data_copy_concurrency": {"limit": 2}, "file_io_concurrency": {"limit": 2}}}
        ts.open(spec).result()[..., 0].write(data.T).result()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sv = make_base(root / "base")
        ids = np.unique(sv)
        repo = create_repository(root / "repo")
        lm = create_labelmap(repo, "seg", root / "base", agglomeration={int(s): int(s) // 4 + 1 for s in ids})
        v = lm.at("main")
        bodies = sorted({int(s) // 4 + 1 for s in ids[:64]})
        v.merge(bodies[0], bodies[1:6])
        v.cleave(bodies[0], [int(ids[5])])
        target = int(ids[40])
        v.split_supervoxel(target, np.argwhere(sv == target)[:500])
        committed = repo.commit(v.uuid, "edits")
        source = labelmap_source(repo, "seg", committed.uuid)
        info = build_info(source, chunk_size=(64, 64, 64))
        arrays = [lm.at(committed.uuid).read_bodies(scale=s) for s in range(len(info["scales"]))]
        mb = sum(a.nbytes for a in arrays) / 2**20
        rows: dict[str, list[float]] = {"tensorstore write (2 threads)": [], "shardscope export x2": [],
                                        "shardscope export x1": []}
        for r in range(args.repeats):
            rows["tensorstore write (2 threads)"].append(write_ts(arrays, info, root / f"ts{r}"))
            for workers in (2, 1):
                dest = root / f"ours{workers}_{r}"
                t0 = time.perf_counter()
                export_precomputed(source, str(dest), num_workers=workers)
                rows[f"shardscope export x{workers}"].append(time.perf_counter() - t0)
                shutil.rmtree(dest)
            shutil.rmtree(root / f"ts{r}")
        med = {k: statistics.median(t) for k, t in rows.items()}
        print(f"export of a committed labelmap version, bodies at {len(arrays)} scales ({mb:.0f} MiB uint64)")
        for name, t in med.items():
            print(f"  {name:32s} {t:7.2f} s  {mb / t:7.1f} MiB/s")
        print(f"  ratio export (2 workers) / tensorstore writing the arrays: "
              f"{med['tensorstore write (2 threads)'] / med['shardscope export x2']:.2f}x  (goal >= 0.5x)")
        print(f"  export speed-up 2 vs 1 workers: {med['shardscope export x1'] / med['shardscope export x2']:.2f}x")

        base = BaseSource(open_volume(str(root / "base"), kind="segmentation"))
        grid = lm.config.grid(0)
        idx: dict[str, list[float]] = {"thread pool (2 threads)": [], "dask job x2": [], "dask job x1": []}
        repo.close()
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            build_base_index(lambda box: base.read(0, box), grid, workers=2)
            idx["thread pool (2 threads)"].append(time.perf_counter() - t0)
            for workers in (2, 1):
                t0 = time.perf_counter()
                build_label_index(str(root / "repo"), "seg", num_workers=workers, overwrite=True)
                idx[f"dask job x{workers}"].append(time.perf_counter() - t0)
        med = {k: statistics.median(t) for k, t in idx.items()}
        base_mb = sv.nbytes / 2**20
        print(f"base label index of {SHAPE} ({base_mb:.0f} MiB uint64, {len(ids)} supervoxels; the dask job "
              f"includes storing it)")
        for name, t in med.items():
            print(f"  {name:32s} {t:7.2f} s  {base_mb / t:7.1f} MiB/s")
        print(f"  ratio dask job x2 / thread pool: {med['thread pool (2 threads)'] / med['dask job x2']:.2f}x; "
              f"dask 2 vs 1 workers: {med['dask job x1'] / med['dask job x2']:.2f}x")
        # the stored index is still the labelmap's: a size query works after the rebuilds
        with open_repository(root / "repo") as again:
            assert open_labelmap(again, "seg").at(committed.uuid).size(bodies[0]) > 0


if __name__ == "__main__":
    main()
