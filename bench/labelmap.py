"""Benchmark of labelmap proofreading (issue 5): merge/cleave, supervoxel split, overlay reads, version open.

Run ``python bench/labelmap.py`` (``--quick`` for a smoke run, ``--json`` for machine output). Every
figure is a median over several runs on this machine. Printed:

* merge and cleave latency for bodies of 10, 10³ and 10⁶ supervoxels: the core map operation (plan +
  apply on the body map; the design goal is flat and < 1 ms) and the whole edit (checks, one durable
  LMDB transaction with the log record, in-memory update);
* supervoxel split latency for a supervoxel filling a 64³ and a 128³ region (half of it split off;
  4 scales rewritten);
* overlay read overhead: a warm 256² z-plane of an edited version vs the same plane of the base
  alone, the first read of a fresh view after a split (base chunks warm), and the body view;
* opening a version whose ancestry holds 10⁴ mutations (fresh process state: full replay), on one
  version and spread over a chain of 10 committed versions.

The volumes are generated and written with TensorStore into a scratch directory. Tests never time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

from napari_shardscope.core.labelmap import BaseAgglomeration, BodyMap, VoxelMask, create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.reading import Overlay, virtual_array
from napari_shardscope.core.versioned import create_repository


def write_volume(path: Path, data: np.ndarray, levels: int, chunk: int = 64) -> None:
    """Precomputed, mode-downsampled by 2 per axis per level, written with TensorStore."""
    for i in range(levels):
        f = 2**i
        level = data if i == 0 else np.asarray(ts.downsample(ts.array(data), [f, f, f], "mode").read().result())
        size = [int(s) for s in reversed(level.shape)]
        spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path) + "/"},
                "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
                "scale_metadata": {"size": size, "voxel_offset": [0, 0, 0], "resolution": [8.0 * f] * 3,
                                   "chunk_size": [min(chunk, s) for s in size], "encoding": "raw"},
                "create": True, "open": i > 0}
        ts.open(spec).result()[ts.d[:].translate_to[0]].write(level.T[..., np.newaxis]).result()


def median_ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 3)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# -- merge / cleave ---------------------------------------------------------------------------------


def bench_merge_cleave(tmp: Path, side: int, runs: int) -> dict[str, Any]:
    """A volume where every voxel is its own supervoxel; bodies of 10, 10³ and the rest (~10⁶)."""
    n = side**3
    data = np.arange(1, n + 1, dtype=np.uint64).reshape(side, side, side)
    write_volume(tmp / "svs", data, 1)
    sizes = {"10": 10, "1e3": 1000, "1e6": n - 1010 - 8 * runs}
    agglomeration: dict[int, int] = {}
    bodies: dict[str, int] = {}
    start = 1
    for name, size in sizes.items():
        body = start
        bodies[name] = body
        agglomeration.update({sv: body for sv in range(start, start + size)})
        start += size
    singletons = list(range(start, n + 1))  # bodies of one supervoxel, merged in one at a time
    repo = create_repository(tmp / "repo-mc")
    t_create, lm = timed(lambda: create_labelmap(repo, "seg", tmp / "svs", agglomeration=agglomeration))
    v = lm.at("main")
    out: dict[str, Any] = {"supervoxels": n, "create_s": round(t_create, 2), "bodies": {}}
    base = BaseAgglomeration.from_mapping(agglomeration)
    for name, body in bodies.items():
        members = [sv for sv, b in agglomeration.items() if b == body]
        core_merge, core_cleave, full_merge, full_cleave = [], [], [], []
        bm = BodyMap(base=base)
        for i in range(runs):
            other = singletons.pop()
            t0 = time.perf_counter()
            bm.apply(bm.plan_merge(body, [other]))
            core_merge.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            bm.apply(bm.plan_cleave(body, [members[i]], 10**12 + i))
            core_cleave.append(time.perf_counter() - t0)
            other = singletons.pop()
            full_merge.append(timed(lambda o=other, b=body: v.merge(b, [o]))[0])
            full_cleave.append(timed(lambda s=members[-1 - i], b=body: v.cleave(b, [s]))[0])
        out["bodies"][name] = {"size": len(members), "merge_core_ms": median_ms(core_merge),
                               "cleave_core_ms": median_ms(core_cleave), "merge_ms": median_ms(full_merge),
                               "cleave_ms": median_ms(full_cleave)}
    repo.close()
    return out


# -- split and overlay reads --------------------------------------------------------------------------


def bench_split_and_reads(tmp: Path, runs: int) -> dict[str, Any]:
    shape = (128, 256, 256)
    z, y, x = np.indices(shape, dtype=np.uint64)
    data = 1000 + (z // 32) * 64 + (y // 32) * 8 + x // 32  # 32³ cubes
    data[0:64, 0:64, 0:64] = 1  # a supervoxel filling a 64³ region
    data[0:128, 0:128, 128:256] = 2  # one filling a 128³ region
    del z, y, x
    write_volume(tmp / "split", data, 4)
    repo = create_repository(tmp / "repo-split")
    lm = create_labelmap(repo, "seg", tmp / "split")
    v = lm.at("main")
    out: dict[str, Any] = {}
    for sv, lo, edge, name in ((1, (0, 0, 0), 64, "64^3"), (2, (0, 0, 128), 128, "128^3")):
        mask = np.zeros((edge // 2, edge, edge), dtype=bool)
        mask[:] = True
        half = VoxelMask(lo, mask)
        samples = []
        for _ in range(runs):
            samples.append(timed(lambda s=sv, h=half: v.split_supervoxel(s, h))[0])
            v.undo()
        out[f"split_{name}_ms"] = median_ms(samples)
        out[f"split_{name}_voxels"] = int(mask.sum())
    # overlay reads: a split in place, plane 10 crosses its blocks
    v.split_supervoxel(2, VoxelMask((0, 0, 128), np.ones((64, 128, 128), dtype=bool)))
    base_plane = lm.base.stores[0][10]
    sv_arr = v.supervoxel_array(0)
    body_arr = v.body_array(0)
    np.asarray(base_plane.read().result())
    np.asarray(sv_arr[10])
    np.asarray(body_arr[10])
    base_warm = [timed(lambda: base_plane.read().result())[0] for _ in range(runs * 10)]
    overlay_warm = [timed(lambda: np.asarray(sv_arr[10]))[0] for _ in range(runs * 10)]
    bodies_warm = [timed(lambda: np.asarray(body_arr[10]))[0] for _ in range(runs * 10)]
    fresh = []
    for i in range(runs):
        state = lm.state(v.uuid)
        overlay = Overlay(lm.config, state.overlay.counts, lm.fetcher(state.version))
        view = virtual_array(lm.base, overlay, 0)
        fresh.append(timed(lambda a=view, z=20 + i: np.asarray(a[z]))[0])
    base_cold_plane = [timed(lambda z=20 + i: lm.base.stores[0][z].read().result())[0] for i in range(runs)]
    out.update({"plane_base_warm_ms": median_ms(base_warm), "plane_overlay_warm_ms": median_ms(overlay_warm),
                "plane_bodies_warm_ms": median_ms(bodies_warm), "plane_overlay_fresh_view_ms": median_ms(fresh),
                "plane_base_same_planes_ms": median_ms(base_cold_plane)})
    repo.close()
    return out


# -- version open ------------------------------------------------------------------------------------


def bench_open(tmp: Path, mutations: int, runs: int) -> dict[str, Any]:
    side = 32  # 32,768 supervoxels: enough for 7,500 merges of two fresh ones
    data = np.arange(1, side**3 + 1, dtype=np.uint64).reshape(side, side, side)
    write_volume(tmp / "open", data, 1)
    out: dict[str, Any] = {"mutations": mutations}
    for chain in (1, 10):
        repo = create_repository(tmp / f"repo-open-{chain}", durable=False)
        lm = create_labelmap(repo, "seg", tmp / "open")
        per = mutations // chain
        t0 = time.perf_counter()
        version = repo.root
        next_sv = 1
        last = (0, 0)
        for c in range(chain):
            v = lm.at(version)
            for i in range(per):
                if i % 4 == 3:  # a cleave of the supervoxel merged in two edits ago
                    body, sv = last
                    v.cleave(body, [sv])
                else:
                    target, other = next_sv, next_sv + 1
                    next_sv += 2
                    v.merge(target, [other])
                    last = (target, other)
            if c < chain - 1:
                repo.commit(version, f"batch {c}")
                version = repo.new_version(version)
        build = time.perf_counter() - t0
        samples = []
        for _ in range(runs):
            fresh = open_labelmap(repo, "seg")
            fresh.index_summary()  # shared by all versions; loaded once per process
            samples.append(timed(lambda f=fresh, ver=version: f.at(ver))[0])
        out[f"open_chain{chain}_ms"] = median_ms(samples)
        out[f"write_chain{chain}_per_mutation_ms"] = round(1000 * build / mutations, 3)
        assert len(fresh.at(version).mutations()) == per * chain
        repo.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, few runs (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else 7
    side = 40 if args.quick else 100
    mutations = 1000 if args.quick else 10_000
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        tmp = Path(d)
        result = {"merge_cleave": bench_merge_cleave(tmp, side, runs), "split_reads": bench_split_and_reads(tmp, runs),
                  "open": bench_open(tmp, mutations, runs)}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    mc = result["merge_cleave"]
    print(f"merge / cleave ({mc['supervoxels']} supervoxels; labelmap created + indexed in {mc['create_s']} s)")
    print(f"  {'body':>6} {'svs':>9} {'merge core':>11} {'cleave core':>12} {'merge':>9} {'cleave':>9}  (ms, medians)")
    for name, r in mc["bodies"].items():
        print(f"  {name:>6} {r['size']:>9} {r['merge_core_ms']:>11} {r['cleave_core_ms']:>12} {r['merge_ms']:>9} "
              f"{r['cleave_ms']:>9}")
    sr = result["split_reads"]
    print(f"split supervoxel: 64^3 region {sr['split_64^3_ms']} ms ({sr['split_64^3_voxels']} voxels split off), "
          f"128^3 region {sr['split_128^3_ms']} ms ({sr['split_128^3_voxels']} voxels), 4 scales")
    print(f"256x256 z-plane reads (ms): base {sr['plane_base_warm_ms']}, overlay {sr['plane_overlay_warm_ms']} "
          f"({sr['plane_overlay_warm_ms'] / max(sr['plane_base_warm_ms'], 1e-9):.2f}x), bodies "
          f"{sr['plane_bodies_warm_ms']} (warm); fresh overlay view {sr['plane_overlay_fresh_view_ms']} vs base "
          f"{sr['plane_base_same_planes_ms']}")
    op = result["open"]
    print(f"open a version with {op['mutations']} mutations: {op['open_chain1_ms']} ms (one version), "
          f"{op['open_chain10_ms']} ms (10 committed versions); writing them took "
          f"{op['write_chain1_per_mutation_ms']} ms per mutation (non-durable repository)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
