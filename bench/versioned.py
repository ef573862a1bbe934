"""Benchmark of the versioned store (issue 4): engines, ancestry depth, commits, branches, opening.

Run ``python bench/versioned.py`` (``--quick`` for a smoke run, ``--json`` for machine output).
Every figure is the median of several runs on this machine; values are 28 KB blocks, the size of a
compressed 64³ label block, because the labelmap (issue 5) is the store's main user: it reads
blocks one by one and 1,000 at a time in range scans, and writes them in batches.

Printed, for each engine (LMDB, SQLite WAL):

* raw engine get / 1,000-key scan (no versioning) — the floor;
* get at ancestry depth 0, 10, 100 (the value stored at the root, read at a version 0/10/100
  commits below it; goal: depth 100 ≤ 1.2× depth 0), inside one snapshot and via a Checkout
  (one snapshot per get);
* 1,000-key range scan at depth 0 and 100;
* batched puts (100 blocks per durable transaction), put+commit latency, new version and new
  branch latency;
* opening a repository with 10,000 versions;

and, as the peer, Icechunk (local filesystem storage) write+commit and branch latency on the
same machine, with our/their ratios. No figure here is asserted anywhere: tests never time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from napari_shardscope.core.versioned import Repository, Version, create_repository, open_repository
from napari_shardscope.core.versioned.engine import open_engine

BLOCK = 28 * 1024
N_BLOCKS = 2000
SCAN = 1000
DEPTHS = (0, 10, 100)


def median_of(runs: int, fn: Callable[[], float]) -> float:
    """Median of ``runs`` calls of ``fn`` (each returns seconds per operation)."""
    return statistics.median(fn() for _ in range(runs))


def per_op(fn: Callable[[], object], n: int) -> float:
    """Seconds per call of ``fn`` over ``n`` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def make_blocks(rng: random.Random, count: int = 16) -> list[bytes]:
    return [rng.randbytes(BLOCK) for _ in range(count)]


def block_key(i: int) -> bytes:
    """A labelmap-like block key: class byte, scale, then z, y, x as big-endian integers."""
    z, y, x = i // 400, (i // 20) % 20, i % 20
    return b"\x01\x00" + z.to_bytes(4, "big") + y.to_bytes(4, "big") + x.to_bytes(4, "big")


def bench_raw(engine: str, tmp: Path, blocks: list[bytes], runs: int, rng: random.Random) -> dict[str, float]:
    d = tmp / f"raw-{engine}"
    d.mkdir()
    kv = open_engine(engine, d, create=True)
    keys = [b"blk%06d" % i for i in range(N_BLOCKS)]
    with kv.write() as txn:
        for i, k in enumerate(keys):
            txn.put(k, blocks[i % len(blocks)])
    sample = [rng.choice(keys) for _ in range(1000)]

    def gets() -> float:
        with kv.read() as r:
            it = iter(sample)
            return per_op(lambda: r.get(next(it)), len(sample))

    def scan() -> float:
        with kv.read() as r:
            t0 = time.perf_counter()
            n = sum(1 for _ in r.scan(keys[100], keys[100 + SCAN]))
            assert n == SCAN
            return time.perf_counter() - t0

    out = {"raw_get_us": median_of(runs, gets) * 1e6, "raw_scan_ms": median_of(runs, scan) * 1e3}
    kv.close()
    return out


def build_chain(repo: Repository, blocks: list[bytes]) -> list[Version]:
    """Root with N_BLOCKS blocks, then a chain of 100 committed versions each changing one other key."""
    with repo.write(repo.root) as w:
        w.put_many("seg", ((block_key(i), blocks[i % len(blocks)]) for i in range(N_BLOCKS)))
    chain = [repo.commit(repo.root, "ingest")]
    for depth in range(1, max(DEPTHS) + 1):
        v = repo.new_version(chain[-1])
        with repo.write(v) as w:
            w.put("seg", b"\x02edit" + depth.to_bytes(4, "big"), blocks[depth % len(blocks)])
        chain.append(repo.commit(v, f"edit {depth}"))
    return chain


def bench_repo(engine: str, tmp: Path, blocks: list[bytes], runs: int, rng: random.Random) -> dict[str, float]:
    repo = create_repository(tmp / f"repo-{engine}", engine=engine)
    repo.create_instance("seg", "keyvalue")
    chain = build_chain(repo, blocks)
    sample = [block_key(rng.randrange(N_BLOCKS)) for _ in range(1000)]
    out: dict[str, float] = {}
    start, stop = block_key(100), block_key(100 + SCAN)
    it = iter(sample * 1000)

    def gets(version: Version) -> float:
        with repo.read(version) as view:
            return per_op(lambda: view.get("seg", next(it)), len(sample))

    def checkout_gets(version: Version) -> float:
        co = repo.checkout(version)
        return per_op(lambda: co.get("seg", next(it)), 300)

    def scan(version: Version) -> float:
        with repo.read(version) as view:
            t0 = time.perf_counter()
            n = sum(1 for _ in view.scan("seg", start=start, stop=stop))
            assert n == SCAN, n
            return time.perf_counter() - t0

    # Depths are measured in a rotating order inside every run, so drift of a shared machine (and
    # cache warm-up) does not favour one depth.
    samples: dict[str, list[float]] = {}
    for run in range(runs + 1):
        order = DEPTHS[run % len(DEPTHS):] + DEPTHS[:run % len(DEPTHS)]
        for depth in order:
            for name, fn, scale in (("get", gets, 1e6), ("checkout_get", checkout_gets, 1e6),
                                    ("scan", scan, 1e3)):
                value = fn(chain[depth]) * scale
                if run:  # run 0 warms ancestor sets and caches
                    samples.setdefault(f"{name}_depth{depth}_{'ms' if name == 'scan' else 'us'}", []).append(value)
    out.update({k: statistics.median(v) for k, v in samples.items()})

    # Writes: batched puts, put+commit, new version, new branch.
    leaf = repo.new_version(chain[-1])
    counter = iter(range(10**9))

    def batch() -> float:
        t0 = time.perf_counter()
        with repo.write(leaf) as w:
            for _ in range(100):
                w.put("seg", block_key(next(counter) % N_BLOCKS), blocks[0])
        return (time.perf_counter() - t0) / 100

    out["put_batched_us"] = median_of(runs, batch) * 1e6
    out["put_single_ms"] = median_of(runs, lambda: per_op(lambda: _put_one(repo, leaf, blocks[1]), 10)) * 1e3
    commit_times, new_times, branch_times = [], [], []
    current = leaf
    for i in range(max(runs, 5) * 3):
        t0 = time.perf_counter()
        _put_one(repo, current, blocks[i % len(blocks)])
        done = repo.commit(current, f"bench {i}")
        t1 = time.perf_counter()
        current = repo.new_version(done)
        t2 = time.perf_counter()
        repo.new_version(done, f"bench-branch-{i}")
        t3 = time.perf_counter()
        commit_times.append(t1 - t0)
        new_times.append(t2 - t1)
        branch_times.append(t3 - t2)
    out["put_commit_ms"] = statistics.median(commit_times) * 1e3
    out["new_version_ms"] = statistics.median(new_times) * 1e3
    out["new_branch_ms"] = statistics.median(branch_times) * 1e3
    repo.close()
    return out


def _put_one(repo: Repository, version: Version, value: bytes) -> None:
    with repo.write(version) as w:
        w.put("seg", b"\x03one", value)


def bench_open(engine: str, tmp: Path, n_versions: int, runs: int) -> dict[str, float]:
    """Open a repository holding ``n_versions`` versions (built without fsync to save time)."""
    path = tmp / f"many-{engine}"
    t0 = time.perf_counter()
    with create_repository(path, engine=engine, durable=False) as repo:
        repo.create_instance("seg", "keyvalue")
        v = repo.root
        for i in range(n_versions - 1):
            done = repo.commit(v, f"v{i}")
            v = repo.new_version(done, f"side{i}") if i % 10 == 9 else repo.new_version(done)
    build = time.perf_counter() - t0

    def open_once() -> float:
        t = time.perf_counter()
        with open_repository(path) as r:
            assert len(r.versions()) == n_versions
            r.version("main")
        return time.perf_counter() - t

    open_once()
    return {"open_ms": median_of(runs, open_once) * 1e3, "build_s": build}


def bench_icechunk(tmp: Path, runs: int, rng: random.Random) -> dict[str, Any] | None:
    try:
        import icechunk
        import numpy as np
        import zarr
    except ImportError:
        return None
    storage = icechunk.local_filesystem_storage(str(tmp / "icechunk"))
    repo = icechunk.Repository.create(storage)
    session = repo.writable_session("main")
    group = zarr.group(store=session.store)
    group.create_array("seg", shape=(28 * 1000, 32, 32), chunks=(28, 32, 32), dtype="uint8",
                       compressors=None, fill_value=0)  # 28 x 32 x 32 uint8 = one 28 KB chunk
    snapshot = session.commit("init")
    commit_times, branch_times = [], []
    for i in range(max(runs, 5) * 3):
        data = np.frombuffer(rng.randbytes(BLOCK), dtype="uint8").reshape(28, 32, 32)
        t0 = time.perf_counter()
        session = repo.writable_session("main")
        arr = zarr.open_array(session.store, path="seg", mode="r+")
        arr[28 * i:28 * (i + 1)] = data
        snapshot = session.commit(f"bench {i}")
        t1 = time.perf_counter()
        repo.create_branch(f"branch-{i}", snapshot_id=snapshot)
        t2 = time.perf_counter()
        commit_times.append(t1 - t0)
        branch_times.append(t2 - t1)

    def open_once() -> float:
        t = time.perf_counter()
        icechunk.Repository.open(storage)
        return time.perf_counter() - t

    return {"put_commit_ms": statistics.median(commit_times) * 1e3,
            "new_branch_ms": statistics.median(branch_times) * 1e3,
            "open_ms": median_of(runs, open_once) * 1e3,
            "version": getattr(icechunk, "__version__", "?")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs and 1,000 versions (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument("--engines", default="lmdb,sqlite")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else 7
    n_versions = 1000 if args.quick else 10_000
    rng = random.Random(4)
    blocks = make_blocks(rng)
    results: dict[str, Any] = {"runs": runs, "block_bytes": BLOCK, "versions_opened": n_versions}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-versioned-") as scratch:
        tmp = Path(scratch)
        for engine in args.engines.split(","):
            r: dict[str, float] = {}
            r.update(bench_raw(engine, tmp, blocks, runs, rng))
            r.update(bench_repo(engine, tmp, blocks, runs, rng))
            r.update(bench_open(engine, tmp, n_versions, runs))
            results[engine] = r
            print(f"[{engine} done]", file=sys.stderr)
        peer = bench_icechunk(tmp, runs, rng)
        if peer is not None:
            results["icechunk"] = peer
    if args.json:
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    else:
        report(results, args.engines.split(","))
    return 0


def report(res: dict[str, Any], engines: list[str]) -> None:
    print(f"versioned store benchmark: {res['block_bytes']} B values, median of {res['runs']} runs, "
          f"{os.cpu_count()} CPU(s)")
    rows = [
        ("raw engine get (no versioning)", "raw_get_us", "us"),
        ("get, depth 0 (one snapshot)", "get_depth0_us", "us"),
        ("get, depth 10", "get_depth10_us", "us"),
        ("get, depth 100", "get_depth100_us", "us"),
        ("get via Checkout, depth 0 (snapshot per get)", "checkout_get_depth0_us", "us"),
        ("get via Checkout, depth 10", "checkout_get_depth10_us", "us"),
        ("get via Checkout, depth 100", "checkout_get_depth100_us", "us"),
        ("raw engine 1,000-key scan", "raw_scan_ms", "ms"),
        ("1,000-key scan at depth 0", "scan_depth0_ms", "ms"),
        ("1,000-key scan at depth 10", "scan_depth10_ms", "ms"),
        ("1,000-key scan at depth 100", "scan_depth100_ms", "ms"),
        ("batched put (100 per durable txn), per block", "put_batched_us", "us"),
        ("single put (one durable txn)", "put_single_ms", "ms"),
        ("put + commit", "put_commit_ms", "ms"),
        ("new version (continue branch)", "new_version_ms", "ms"),
        ("new branch", "new_branch_ms", "ms"),
        (f"open a repository with {res['versions_opened']:,} versions", "open_ms", "ms"),
    ]
    print(f"{'':50}" + "".join(f"{e:>14}" for e in engines) + (f"{'sqlite/lmdb':>14}" if len(engines) == 2 else ""))
    for label, key, unit in rows:
        vals = [res[e][key] for e in engines]
        line = f"{label:50}" + "".join(f"{v:>11.{1 if unit == 'us' else 2}f} {unit}" for v in vals)
        if len(engines) == 2:
            line += f"{vals[1] / vals[0]:>13.2f}x"
        print(line)
    print()
    for e in engines:
        r = res[e]
        print(f"{e}: depth 100 / depth 0 get = {r['get_depth100_us'] / r['get_depth0_us']:.2f}x "
              f"(goal <= 1.2), depth 10 / depth 0 = {r['get_depth10_us'] / r['get_depth0_us']:.2f}x; "
              f"versioned get / raw get = {r['get_depth0_us'] / r['raw_get_us']:.2f}x; "
              f"scan depth 100 / depth 0 = {r['scan_depth100_ms'] / r['scan_depth0_ms']:.2f}x; "
              f"versioned scan / raw scan = {r['scan_depth0_ms'] / r['raw_scan_ms']:.2f}x")
    peer = res.get("icechunk")
    if peer is None:
        print("icechunk not installed: no peer figures")
        return
    print(f"\npeer: Icechunk {peer['version']} (local filesystem storage), same machine")
    print(f"{'':50}{'icechunk':>14}" + "".join(f"{e + '/ice':>14}" for e in engines))
    for label, key in [("write one 28 KB chunk + commit", "put_commit_ms"), ("new branch", "new_branch_ms"),
                       ("open repository (~40 snapshots)", "open_ms")]:
        print(f"{label:50}{peer[key]:>11.2f} ms" + "".join(f"{res[e][key] / peer[key]:>13.2f}x" for e in engines))


if __name__ == "__main__":
    sys.exit(main())
