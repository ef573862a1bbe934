"""Benchmark: export throughput against TensorStore writing the same array directly; 1 vs 2 workers.

Run: ``.venv/bin/python bench/export.py [--repeats 3]``

The source is an in-memory uint64 segmentation (blocky labels, so gzip does real work); both sides
write the same sharded precomputed layout (our default sharding spec, raw chunks, gzip data). Goal:
our export ≥ 0.5× TensorStore's throughput. Medians of several runs; the machine is shared.
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
from napari_shardscope.core.precomputed.sharding import ShardingSpec

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
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
        for r in range(args.repeats):  # interleaved, so drift hits every row alike
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


if __name__ == "__main__":
    main()
