"""Benchmark: import a synapse table as the base of an annotation instance: the curve (time, peak RSS, rate).

Run: ``PYTHONPATH=src:. .venv/bin/python bench/annotation_import.py [--rounds 5] [--sizes 1e5,1e6] [--long]
[--add-many 100000] [--before OLD/src] [--date]``

Data: a CAVE-style Parquet table (``id``, ``pre_pt_position`` / ``post_pt_position`` list columns, an
int ``size`` and a float ``score``; pyarrow's default row groups of 1 Mi rows) of ``N`` synapses
uniformly over a 64 x 1024 x 1024 labelmap (a blocky synthetic base, block 64³ as ``create_labelmap``
defaults). Ours: ``create_annotation_instance(repo, name, labelmap="seg", base=table)`` — read a row
group at a time, checked, sorted by block, id and supervoxel in bounded memory, the four tables
written — each round in a new interpreter, so its peak RSS is its own.

Peer: the least an import can do with the same libraries, in the same kind of child: ``pyarrow``
reads the whole table, NumPy computes the sites' ids and blocks and sorts them by id and by block
(no checks, no supervoxels, nothing written). Rounds alternate which runs first. Reported per size:
wall time, CPU time (user + system, every thread), peak RSS, synapses per second, and how long
the main thread waited for a core (``/proc/<pid>/task/*/schedstat``; the machine is shared).
Goal: ≥ 1 M synapses/s. ``--long`` adds 10⁷ synapses (3 rounds).

``--add-many N``: ``add_many`` of N annotations (N/2 synapses) at an open version, paired in this
process with the same call on the previous path (the peer): keys as a list of tuples through
``put_new``, the engines' previous check of a bulk put (``zip(*items)``), cached block reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.blocky_base import write_blocky_base
from bench.common import Row, record, save, spread

from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.core.annotation.base_import import synapse_ids
from napari_shardscope.core.annotation.instance import BASES_DIR
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.versioned import create_repository, open_repository

BENCH = "annotation_import"
SHAPE = (64, 1024, 1024)


def write_table(path: Path, n: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    hi = np.array([SHAPE[2], SHAPE[1], SHAPE[0]])

    def positions() -> pa.Array:
        flat = pa.array((rng.random((n, 3)) * hi).astype(np.int64).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, 3)

    pq.write_table(pa.table({"id": rng.permutation(n).astype(np.int64) + 1, "pre_pt_position": positions(),
                             "post_pt_position": positions(), "size": rng.integers(1, 2000, n),
                             "score": rng.random(n)}), path)


def _waited() -> float:
    """Seconds the threads of this process alive now spent runnable but waiting for a core."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/self/task/{task}/schedstat").read_text().split()[1])
    return total / 1e9


def in_child(*args: str, src: str | None = None) -> dict[str, float]:
    """Run this script with ``--child args`` in a new interpreter: what it measured, and its peak RSS in MiB.

    A new interpreter, not a fork: the parent has TensorStore's threads running (a fork would copy
    their locks held); the child reports its own peak RSS (:func:`_peak_rss_mib`). ``src``: a source
    tree put first on the child's path (``--before``: an earlier version of the package, same run).
    """
    path = ([src] if src else []) + sys.path
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, _usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"child {args} failed ({status})")
    doc: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    print(f"    {'before' if src else args[0]}: " + ", ".join(f"{k} {v:.2f}" for k, v in doc.items()), flush=True)
    return doc


def _measured(fn: Any) -> dict[str, float]:
    # the interpreter's one-time imports (pyarrow, pandas) cost seconds on a cold start whatever the
    # table's size: paid before the clock starts, and stated in the docs
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    from bench.thread_clocks import measure_threads

    w0, t0, c0 = _waited(), time.perf_counter(), time.process_time()
    threads = measure_threads(fn)
    out = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "wait": _waited() - w0}
    out.update(threads)
    out["rss"] = _peak_rss_mib()
    return out


def _peak_rss_mib() -> float:
    """This process's peak RSS (``VmHWM``): not ``wait4``'s ``ru_maxrss``, which Linux carries over from the
    parent a child was forked from (the parent's 1.1 GB of benchmark data showed as every child's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def import_once(repo_path: str, name: str, table: str) -> dict[str, float]:
    repo = open_repository(repo_path)
    lm = open_labelmap(repo, "seg")

    def run() -> None:
        inst = create_annotation_instance(repo, name, labelmap=lm, base=table)
        assert inst.base is not None

    out = _measured(run)
    shutil.rmtree(Path(repo_path) / BASES_DIR / name, ignore_errors=True)  # the disk of the next rounds
    return out


def read_and_sort_once(table: str) -> dict[str, float]:
    """The peer: pyarrow reads the table whole; NumPy orders the sites by id and by block. Nothing else."""
    import pyarrow.parquet as pq

    def run() -> None:
        t = pq.read_table(table)
        sid = t.column("id").to_numpy().astype(np.uint64)
        pre = t.column("pre_pt_position").combine_chunks().flatten().to_numpy().reshape(-1, 3)
        post = t.column("post_pt_position").combine_chunks().flatten().to_numpy().reshape(-1, 3)
        size, score = t.column("size").to_numpy(), t.column("score").to_numpy()
        del t
        ids = np.empty(2 * sid.size, np.uint64)
        ids[0::2], ids[1::2] = synapse_ids(sid)
        xyz = np.empty((2 * sid.size, 3), np.int64)
        xyz[0::2], xyz[1::2] = pre, post
        by_id = np.argsort(ids)
        cells = xyz[:, ::-1] // 64
        lin = (cells[:, 0] * 16 + cells[:, 1]) * 16 + cells[:, 2]
        by_block = np.argsort(lin, kind="stable")
        assert by_id.size == by_block.size == 2 * size.size == 2 * score.size

    return _measured(run)


def bench_import(n: int, rounds: int, work: Path, before: str | None = None) -> None:
    table = work / f"syn-{n}.parquet"
    write_table(table, n)
    print(f"  table: {n} synapses, {table.stat().st_size / 2**20:.0f} MiB Parquet")
    ours: list[dict[str, float]] = []
    peer: list[dict[str, float]] = []
    old: list[dict[str, float]] = []
    loads: list[float] = []
    for r in range(rounds):
        steps = [lambda r=r: ours.append(in_child("import", str(work / "repo"), f"base{n}-{r}", str(table))),
                 lambda: peer.append(in_child("sort", str(table)))]
        if before:
            steps.append(lambda r=r: old.append(in_child("import", str(work / "repo"), f"old{n}-{r}", str(table),
                                                         src=before)))
        for step in steps if r % 2 == 0 else steps[::-1]:
            step()
            loads.append(os.getloadavg()[0])
    load = float(np.median(loads))

    def col(rows: list[dict[str, float]], key: str) -> list[float]:
        return [x[key] for x in rows]

    rates = [n / t / 1e6 for t in col(ours, "wall")]
    record(Row(BENCH, f"import {n:.0e} synapses (CAVE Parquet)", "-", spread(col(ours, "wall")) + " s",
               "pyarrow read + numpy sorts (no checks, no supervoxels, no writes)",
               spread(col(peer, "wall")) + " s",
               spread([p["wall"] / o["wall"] for o, p in zip(ours, peer, strict=True)]) + "x",
               ">= 1 M synapses/s", min(rates) >= 1.0, rounds,
               f"{spread(rates)} M synapses/s; CPU {spread(col(ours, 'cpu'))} s "
               f"({spread([n / c / 1e6 for c in col(ours, 'cpu')])} M synapses/CPU-s); main thread waited for a "
               f"core {spread(col(ours, 'wait'))} s; peak RSS {spread(col(ours, 'rss'), '{:.0f}')} MiB (peer "
               f"{spread(col(peer, 'rss'), '{:.0f}')} MiB, CPU {spread(col(peer, 'cpu'))} s); load {load:.1f} on "
               f"{os.cpu_count()} cpus"))
    if before:
        record(Row(BENCH, f"import {n:.0e} synapses (CAVE Parquet), this tree vs --before", "-",
                   spread(col(ours, "wall")) + " s", f"--before {before}", spread(col(old, "wall")) + " s",
                   spread([b["wall"] / o["wall"] for o, b in zip(ours, old, strict=True)]) + "x", "-", None, rounds,
                   f"CPU ours {spread(col(ours, 'cpu'))} s, before {spread(col(old, 'cpu'))} s; waited for a core "
                   f"ours {spread(col(ours, 'wait'))} s, before {spread(col(old, 'wait'))} s; peak RSS ours "
                   f"{spread(col(ours, 'rss'), '{:.0f}')} MiB, before {spread(col(old, 'rss'), '{:.0f}')} MiB; "
                   f"load {load:.1f} (median over the rounds' steps)"))


def _previous_check_items(items: Sequence[tuple[bytes, bytes]]) -> None:
    """The engines' check of a bulk put before this change (``zip(*items)``), for the add_many peer."""
    if not items:
        return
    keys, values = zip(*items, strict=True)
    if not (set(map(type, keys)) == {bytes} and all(keys) and set(map(type, values)) == {bytes}):
        raise ValueError("bad items")


def _previous_put_new_rows(self: Any, instance: Any, keys: Any, values: Any, *, fresh: bool = False) -> int:
    """The peer's bulk put: the keys as a list of ``(key, value)`` tuples through ``put_new`` (which sorts the
    tuples), as ``add_many`` handed them before (the splitting of the byte rows is what it did too)."""
    from napari_shardscope.core.versioned.key_rows import row_bytes

    rows = row_bytes(np.asarray(keys, dtype=np.uint8))
    vals = [b""] * len(rows) if values is None else list(values)
    return int(self.put_new(instance, list(zip(rows, vals, strict=True)), fresh=fresh))


def bench_add_many(n: int, rounds: int, work: Path) -> None:
    """``add_many`` of ``n`` annotations, ours against the previous engine check and cached block reads."""
    from napari_shardscope.core.annotation import points
    from napari_shardscope.core.annotation.instance import add_many
    from napari_shardscope.core.versioned.engines import lmdb, memory, sqlite
    from napari_shardscope.core.versioned.view import VersionWriter

    repo = open_repository(work / "repo")
    lm = open_labelmap(repo, "seg")
    rng = np.random.default_rng(3)
    pts = (rng.random((n, 3)) * np.array(SHAPE)).astype(np.int64)
    kinds = ["pre", "post"] * (n // 2)
    pairs = np.stack([np.arange(0, n - 1, 2), np.arange(1, n, 2)], axis=1)
    ours: list[float] = []
    peer: list[float] = []

    def one(name: str, previous: bool) -> float:
        v = create_annotation_instance(repo, name, labelmap=lm).at("main")
        saved = (lmdb.check_items, memory.check_items, sqlite.check_items, points.ONCE_POINTS,
                 VersionWriter.put_new_rows)
        if previous:
            lmdb.check_items = memory.check_items = sqlite.check_items = _previous_check_items  # type: ignore[assignment]
            points.ONCE_POINTS = 1 << 62
            VersionWriter.put_new_rows = _previous_put_new_rows  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            add_many(v, kinds[:n], pts, synapses=pairs)
            return time.perf_counter() - t0
        finally:
            (lmdb.check_items, memory.check_items, sqlite.check_items, points.ONCE_POINTS,
             VersionWriter.put_new_rows) = saved  # type: ignore[method-assign]

    for r in range(rounds):
        steps = [lambda r=r: ours.append(one(f"am-ours-{r}", False)),
                 lambda r=r: peer.append(one(f"am-peer-{r}", True))]
        for step in steps if r % 2 == 0 else steps[::-1]:
            step()
    record(Row(BENCH, f"add_many {n:.0e} annotations ({n // 2} synapses)", "-", spread(ours) + " s",
               "previous path (tuples through put_new, zip(*items) check, cached block reads)",
               spread(peer) + " s",
               spread([p / o for o, p in zip(ours, peer, strict=True)]) + "x", "far above 25 k/s", None, rounds,
               f"{spread([n / t / 1e3 for t in ours], '{:.0f}')} k annotations/s (peer "
               f"{spread([n / t / 1e3 for t in peer], '{:.0f}')} k/s); load {os.getloadavg()[0]:.1f}"))
    repo.close()


def bench_add_vs_single(n: int, rounds: int, work: Path, bulk: int) -> None:
    """``add_many`` of ``n`` synapses (2n annotations) against adding and relating them one by one.

    The peer is what a caller without a bulk path does: ``add`` per annotation and ``relate`` per
    synapse, one transaction each (3n transactions). Same points, same process, alternating order, each
    side into a fresh instance. Wall (``perf_counter``) and CPU (``process_time``) per call; the ratio is
    of annotations per CPU-second (the machine is shared: wall is mostly waiting for a core). ``bulk``:
    also ``add_many`` of that many synapses alone, its throughput at a size where the per-call costs vanish.
    """
    from napari_shardscope.core.annotation.instance import add_many

    repo = open_repository(work / "repo")
    lm = open_labelmap(repo, "seg")
    rng = np.random.default_rng(5)

    def data(m: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        pts = (rng.random((2 * m, 3)) * np.array(SHAPE)).astype(np.int64)
        return ["pre"] * m + ["post"] * m, pts, np.stack([np.arange(m), m + np.arange(m)], axis=1)

    kinds, pts, pairs = data(n)
    clocks: dict[str, list[tuple[float, float]]] = {"bulk": [], "single": []}

    def timed_cpu(fn: Any) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - t0, time.process_time() - c0

    def bulk_side(r: int) -> None:
        v = create_annotation_instance(repo, f"avs-bulk-{r}", labelmap=lm).at("main")
        clocks["bulk"].append(timed_cpu(lambda: add_many(v, kinds, pts, synapses=pairs)))

    def single_side(r: int) -> None:
        v = create_annotation_instance(repo, f"avs-single-{r}", labelmap=lm).at("main")

        def one_by_one() -> None:
            ids = [v.add(k, tuple(int(c) for c in p)).id for k, p in zip(kinds, pts, strict=True)]
            for a, b in pairs.tolist():
                v.relate(ids[a], ids[b])

        clocks["single"].append(timed_cpu(one_by_one))

    load0 = Path("/proc/loadavg").read_text().split()[:3]
    for r in range(rounds):
        for side in (bulk_side, single_side) if r % 2 == 0 else (single_side, bulk_side):
            side(r)
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    m = 2 * n
    b_wall, b_cpu = ([x[i] for x in clocks["bulk"]] for i in (0, 1))
    s_wall, s_cpu = ([x[i] for x in clocks["single"]] for i in (0, 1))
    record(Row(BENCH, f"add_many of {n} synapses ({m} annotations) vs one by one (add + relate)", "-",
               f"wall {spread(b_wall, '{:.3f}')} s, CPU {spread(b_cpu, '{:.3f}')} s = "
               f"{spread([m / c / 1e3 for c in b_cpu], '{:.1f}')} k annotations/CPU-s",
               "add per annotation, relate per synapse (one transaction each)",
               f"wall {spread(s_wall)} s, CPU {spread(s_cpu)} s = "
               f"{spread([m / c / 1e3 for c in s_cpu], '{:.2f}')} k annotations/CPU-s",
               f"CPU {spread([s / b for b, s in zip(b_cpu, s_cpu, strict=True)], '{:.0f}')}x, wall "
               f"{spread([s / b for b, s in zip(b_wall, s_wall, strict=True)], '{:.0f}')}x",
               ">= 10x (an order of magnitude)", min(s / b for b, s in zip(b_cpu, s_cpu, strict=True)) >= 10, rounds,
               f"sample {SHAPE} blocky labelmap, LMDB; loadavg {' '.join(load0)} -> {' '.join(load1)}"))
    if bulk:
        big = data(bulk)
        runs = []
        for r in range(min(rounds, 3)):
            v = create_annotation_instance(repo, f"avs-big-{r}", labelmap=lm).at("main")
            runs.append(timed_cpu(lambda v=v: add_many(v, big[0], big[1], synapses=big[2])))
        record(Row(BENCH, f"add_many of {bulk} synapses ({2 * bulk} annotations), alone", "-",
                   f"wall {spread([x[0] for x in runs])} s, CPU {spread([x[1] for x in runs])} s = "
                   f"{spread([2 * bulk / x[1] / 1e3 for x in runs], '{:.0f}')} k annotations/CPU-s", "-", "-", "-",
                   "-", None, len(runs), f"loadavg {Path('/proc/loadavg').read_text().split()[0]}"))
    repo.close()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        what, *args = sys.argv[2:]
        out = import_once(*args) if what == "import" else read_and_sort_once(args[0])
        print(json.dumps(out))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="1e5,1e6", help="synapse counts, comma-separated")
    ap.add_argument("--long", action="store_true", help="also import 10^7 synapses (3 rounds)")
    ap.add_argument("--add-many", type=int, default=0, help="also time add_many of this many annotations")
    ap.add_argument("--add-vs-single", type=int, default=0,
                    help="also pair add_many of this many synapses with adding them one by one")
    ap.add_argument("--add-bulk", type=int, default=0,
                    help="with --add-vs-single: also add_many of this many synapses alone")
    ap.add_argument("--before", default=None, metavar="SRC",
                    help="also import with the package at this source tree (e.g. `git archive` of an earlier "
                         "commit's src/), interleaved in the same rounds: before and after under the same load")
    ap.add_argument("--date", action="store_true", help="also save the results as <bench>-<UTC date>.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-annotation-import-") as tmp:
        work = Path(tmp)
        write_blocky_base(work / "seg", SHAPE, (16, 128, 128), (128, 128, 16), 0)
        repo = create_repository(work / "repo")
        create_labelmap(repo, "seg", work / "seg")
        repo.close()
        for n in (int(float(x)) for x in args.sizes.split(",") if x):
            bench_import(n, args.rounds, work, args.before)
        if args.long:
            bench_import(10_000_000, 3, work, args.before)
        if args.add_many:
            bench_add_many(args.add_many, args.rounds, work)
        if args.add_vs_single:
            bench_add_vs_single(args.add_vs_single, args.rounds, work, args.add_bulk)
    path = save(BENCH, partial=not args.long)
    if args.date:
        dated = path.with_name(f"{BENCH}-{time.strftime('%Y-%m-%d', time.gmtime())}.json")
        shutil.copyfile(path, dated)
        print(f"copied to {dated}")


if __name__ == "__main__":
    main()
