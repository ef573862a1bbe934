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
from napari_shardscope.core.versioned.engines import open_engine

BLOCK = 28 * 1024
N_BLOCKS = 2000
SCAN = 1000
DEPTHS = (0, 10, 100)


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


class EngineBench:
    """One engine's stores (a raw engine and a repository with a 100-commit chain) and one-run probes."""

    def __init__(self, engine: str, tmp: Path, blocks: list[bytes], rng: random.Random) -> None:
        self.engine = engine
        self.blocks = blocks
        d = tmp / f"raw-{engine}"
        d.mkdir()
        self.raw = open_engine(engine, d, create=True)
        self.raw_keys = [b"blk%06d" % i for i in range(N_BLOCKS)]
        with self.raw.write() as txn:
            for i, k in enumerate(self.raw_keys):
                txn.put(k, blocks[i % len(blocks)])
        self.raw_sample = [rng.choice(self.raw_keys) for _ in range(3000)]
        self.repo = create_repository(tmp / f"repo-{engine}", engine=engine)
        self.repo.create_instance("seg", "keyvalue")
        self.chain = build_chain(self.repo, blocks)
        self.sample = [block_key(rng.randrange(N_BLOCKS)) for _ in range(3000)]
        self.leaf = self.repo.new_version(self.chain[-1])
        self.counter = 0
        self.run = 0

    def close(self) -> None:
        self.raw.close()
        self.repo.close()

    def measure(self) -> dict[str, float]:
        """Every figure once (seconds → µs or ms as named)."""
        out: dict[str, float] = {}
        repo, sample = self.repo, self.sample
        with self.raw.read() as r:
            it = iter(self.raw_sample)
            out["raw_get_us"] = per_op(lambda: r.get(next(it)), len(self.raw_sample)) * 1e6
            t0 = time.perf_counter()
            assert sum(1 for _ in r.scan(self.raw_keys[100], self.raw_keys[100 + SCAN])) == SCAN
            out["raw_scan_ms"] = (time.perf_counter() - t0) * 1e3
        start, stop = block_key(100), block_key(100 + SCAN)
        # Depths in a rotating order, so drift of a shared machine favours none of them.
        order = DEPTHS[self.run % len(DEPTHS):] + DEPTHS[:self.run % len(DEPTHS)]
        self.run += 1
        for depth in order:
            version = self.chain[depth]
            with repo.read(version) as view:
                it = iter(sample)
                out[f"get_depth{depth}_us"] = per_op(lambda view=view, it=it: view.get("seg", next(it)),
                                                     len(sample)) * 1e6
                t0 = time.perf_counter()
                assert sum(1 for _ in view.scan("seg", start=start, stop=stop)) == SCAN
                out[f"scan_depth{depth}_ms"] = (time.perf_counter() - t0) * 1e3
            co = repo.checkout(version)
            it = iter(sample)
            out[f"checkout_get_depth{depth}_us"] = per_op(lambda co=co, it=it: co.get("seg", next(it)), 1000) * 1e6

        t0 = time.perf_counter()
        with repo.write(self.leaf) as w:
            for _ in range(100):
                self.counter += 1
                w.put("seg", block_key(self.counter % N_BLOCKS), self.blocks[0])
        out["put_batched_us"] = (time.perf_counter() - t0) / 100 * 1e6
        out["put_single_ms"] = per_op(lambda: _put_one(repo, self.leaf, self.blocks[1]), 5) * 1e3
        commits, news, branches = [], [], []
        for i in range(3):
            t0 = time.perf_counter()
            _put_one(repo, self.leaf, self.blocks[i % len(self.blocks)])
            done = repo.commit(self.leaf, "bench")
            t1 = time.perf_counter()
            self.leaf = repo.new_version(done)
            t2 = time.perf_counter()
            repo.new_version(done, f"bench-branch-{self.run}-{i}")
            t3 = time.perf_counter()
            commits.append(t1 - t0)
            news.append(t2 - t1)
            branches.append(t3 - t2)
        out["put_commit_ms"] = statistics.median(commits) * 1e3
        out["new_version_ms"] = statistics.median(news) * 1e3
        out["new_branch_ms"] = statistics.median(branches) * 1e3
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


def _put_one(repo: Repository, version: Version, value: bytes) -> None:
    with repo.write(version) as w:
        w.put("seg", b"\x03one", value)


def build_many(engine: str, tmp: Path, n_versions: int) -> Path:
    """A repository with ``n_versions`` versions, every tenth starting a branch (built without fsync)."""
    path = tmp / f"many-{engine}"
    with create_repository(path, engine=engine, durable=False) as repo:
        repo.create_instance("seg", "keyvalue")
        v = repo.root
        for i in range(n_versions - 1):
            done = repo.commit(v, f"v{i}")
            v = repo.new_version(done, f"side{i}") if i % 10 == 9 else repo.new_version(done)
    return path


def time_open(path: Path, n_versions: int) -> float:
    t = time.perf_counter()
    with open_repository(path) as r:
        assert len(r.versions()) == n_versions
        r.version("main")
    return time.perf_counter() - t


class IcechunkBench:
    """The peer: Icechunk on local filesystem storage, one 28 KB chunk per commit."""

    def __init__(self, tmp: Path, rng: random.Random) -> None:
        import icechunk
        import numpy as np
        import zarr

        self.icechunk, self.np, self.zarr, self.rng = icechunk, np, zarr, rng
        self.version = getattr(icechunk, "__version__", "?")
        self.storage = icechunk.local_filesystem_storage(str(tmp / "icechunk"))
        self.repo = icechunk.Repository.create(self.storage)
        session = self.repo.writable_session("main")
        zarr.group(store=session.store).create_array(
            "seg", shape=(28 * 10_000, 32, 32), chunks=(28, 32, 32), dtype="uint8", compressors=None,
            fill_value=0)  # a 28 x 32 x 32 uint8 chunk is 28 KB
        session.commit("init")
        self.i = 0

    def measure(self) -> dict[str, float]:
        commits, branches = [], []
        for _ in range(3):
            data = self.np.frombuffer(self.rng.randbytes(BLOCK), dtype="uint8").reshape(28, 32, 32)
            t0 = time.perf_counter()
            session = self.repo.writable_session("main")
            arr = self.zarr.open_array(session.store, path="seg", mode="r+")
            arr[28 * self.i:28 * (self.i + 1)] = data
            snapshot = session.commit(f"bench {self.i}")
            t1 = time.perf_counter()
            self.repo.create_branch(f"branch-{self.i}", snapshot_id=snapshot)
            t2 = time.perf_counter()
            self.i += 1
            commits.append(t1 - t0)
            branches.append(t2 - t1)
        t0 = time.perf_counter()
        self.icechunk.Repository.open(self.storage)
        opened = time.perf_counter() - t0
        return {"put_commit_ms": statistics.median(commits) * 1e3,
                "new_branch_ms": statistics.median(branches) * 1e3, "open_ms": opened * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs and 1,000 versions (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    parser.add_argument("--engines", default="lmdb,sqlite")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else 9
    n_versions = 1000 if args.quick else 10_000
    engines = args.engines.split(",")
    rng = random.Random(4)
    blocks = make_blocks(rng)
    results: dict[str, Any] = {"runs": runs, "block_bytes": BLOCK, "versions_opened": n_versions}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-versioned-") as scratch:
        tmp = Path(scratch)
        benches: dict[str, Any] = {e: EngineBench(e, tmp, blocks, rng) for e in engines}
        try:
            benches["icechunk"] = IcechunkBench(tmp, rng)
        except ImportError:
            print("icechunk not installed: no peer figures", file=sys.stderr)
        many = {e: build_many(e, tmp, n_versions) for e in engines}
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in benches}
        names = list(benches)
        # Runs outermost, engines (and the peer) interleaved in a rotating order inside each run, so
        # a busy neighbour on a shared machine slows all of them alike and the ratios stay fair.
        for run in range(runs + 1):
            for name in names[run % len(names):] + names[:run % len(names)]:
                figures = benches[name].measure()
                if name in many:
                    figures["open_ms"] = time_open(many[name], n_versions) * 1e3
                if run:  # run 0 warms caches and ancestor sets
                    for key, value in figures.items():
                        samples[name].setdefault(key, []).append(value)
        for bench in benches.values():
            if isinstance(bench, EngineBench):
                bench.close()
        for name, figs in samples.items():
            results[name] = {k: statistics.median(v) for k, v in figs.items()}
        if "icechunk" in benches:
            results["icechunk"]["version"] = benches["icechunk"].version
    if args.json:
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    else:
        report(results, engines)
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
                       ("open repository", "open_ms")]:
        print(f"{label:50}{peer[key]:>11.2f} ms" + "".join(f"{res[e][key] / peer[key]:>13.2f}x" for e in engines))


if __name__ == "__main__":
    sys.exit(main())
