"""Benchmark: import a synapse table as the base of an annotation instance, against adding the synapses one by one.

Run: ``PYTHONPATH=src:. .venv/bin/python bench/annotation_import.py [--rounds 5] [--synapses 1000000] [--long]``

Data: a CAVE-style Parquet table (``id``, ``pre_pt_position`` / ``post_pt_position`` list columns, an
int ``size`` and a float ``score``) of ``N`` synapses uniformly over a 64 x 1024 x 1024 labelmap (a
blocky synthetic base, block 64³ as ``create_labelmap`` defaults). Ours:
``create_annotation_instance(repo, name, labelmap="seg", base=table)`` — read, checked, sorted by id and
by block, both Parquet tables written — each round in a forked child, so its peak RSS is its own.

Peer: there is no bulk add on the instance, so the peer is what a user has without a base: ``add`` of
the pre and post sites and ``relate`` per synapse, measured on ``--peer-synapses`` (200) synapses per
round and extrapolated linearly to ``N`` (an add is one write transaction; its cost does not fall with
more of them). Goal: ≥ 1 M synapses/s. ``--long`` adds 10⁷ synapses (ours only, 3 rounds).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.blocky_base import write_blocky_base
from bench.common import Row, record, save, spread

from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.core.annotation.base_import import synapse_ids
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.versioned import create_repository, open_repository

BENCH = "annotation_import"
#: CPU seconds (user + system) of each import, as the child measured them: on a shared machine the
#: wall time includes waiting for a core; the CPU time does not.
CPU: list[float] = []
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


def in_child(*args: str) -> tuple[float, float]:
    """Run this script with ``--child args`` in a new process: (the time it prints, its peak RSS in MiB).

    A new interpreter, not a fork: the parent has TensorStore's threads running (a fork would copy
    their locks held), and the child's peak RSS is then its own (``wait4``).
    """
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"child {args} failed ({proc.returncode})")
    lines = out.decode().strip().splitlines()
    cpu = [float(x.split()[1]) for x in lines if x.startswith("cpu ")]
    if cpu:
        CPU.append(cpu[0])
    return float(lines[-1]), usage.ru_maxrss / 1024


def import_once(repo_path: str, name: str, table: str) -> float:
    # the interpreter's one-time imports (pyarrow, and pandas, which pyarrow's writer pulls in) cost seconds
    # on a cold start whatever the table's size: paid before the clock starts, and stated in the docs
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    repo = open_repository(repo_path)
    lm = open_labelmap(repo, "seg")
    t0, c0 = time.perf_counter(), time.process_time()
    inst = create_annotation_instance(repo, name, labelmap=lm, base=table)
    took = time.perf_counter() - t0
    print(f"cpu {time.process_time() - c0}")
    assert inst.base is not None
    return took


def add_once(repo_path: str, name: str, n: int, seed: int) -> float:
    repo = open_repository(repo_path)
    inst = create_annotation_instance(repo, name, labelmap=open_labelmap(repo, "seg"))
    v = inst.at("main")
    rng = np.random.default_rng(seed)
    pre = (rng.random((n, 3)) * np.array(SHAPE)).astype(np.int64).tolist()
    post = (rng.random((n, 3)) * np.array(SHAPE)).astype(np.int64).tolist()
    a_ids, b_ids = synapse_ids(np.arange(n))
    t0 = time.perf_counter()
    for i in range(n):
        props = {"size": i + 1, "score": 0.5}
        a = v.add("pre", pre[i], id=int(a_ids[i]), properties=props)
        b = v.add("post", post[i], id=int(b_ids[i]), properties=props)
        v.relate(a.id, b.id)
    return time.perf_counter() - t0


def bench_import(n: int, rounds: int, peer_n: int, work: Path) -> None:
    table = work / f"syn-{n}.parquet"
    write_table(table, n)
    print(f"  table: {n} synapses, {table.stat().st_size / 2**20:.0f} MiB Parquet")
    ours: list[float] = []
    rss: list[float] = []
    peer: list[float] = []
    for r in range(rounds):
        def run_ours(r: int = r) -> None:
            t, m = in_child("import", str(work / "repo"), f"base{n}-{r}", str(table))
            ours.append(t)
            rss.append(m)

        def run_peer(r: int = r) -> None:
            if peer_n:
                t, _ = in_child("add", str(work / "repo"), f"peer{n}-{r}", str(peer_n), str(r))
                peer.append(t / peer_n * n)

        for step in ((run_ours, run_peer) if r % 2 == 0 else (run_peer, run_ours)):
            step()
    cpu = CPU[-len(ours):]
    uptime = os.getloadavg()[0]
    print(f"  cpu per import: {spread(cpu)} s ({spread([n / c / 1e6 for c in cpu])} M synapses per CPU second); "
          f"load average {uptime:.1f} on {os.cpu_count()} cpus")
    rates = [n / t / 1e6 for t in ours]
    met = min(rates) >= 1.0 if rates else None
    if peer:
        ratios = [p / o for o, p in zip(ours, peer, strict=True)]
        record(Row(BENCH, f"import {n:.0e} synapses (CAVE Parquet)", "-", spread(ours, "{:.2f}") + " s",
                   f"add+relate per synapse ({peer_n} measured, extrapolated)", spread(peer, "{:.0f}") + " s",
                   spread(ratios, "{:.0f}") + "x", ">= 1 M synapses/s", met, rounds,
                   f"{spread(rates)} M synapses/s; {spread([n / c / 1e6 for c in cpu])} M synapses/CPU-s; peak RSS "
                   f"{spread(rss, '{:.0f}')} MiB; load {uptime:.0f} on {os.cpu_count()} cpus"))
    else:
        record(Row(BENCH, f"import {n:.0e} synapses (CAVE Parquet)", "-", spread(ours, "{:.2f}") + " s", "-", "-",
                   "-", ">= 1 M synapses/s", met, rounds,
                   f"{spread(rates)} M synapses/s; {spread([n / c / 1e6 for c in cpu])} M synapses/CPU-s; peak RSS "
                   f"{spread(rss, '{:.0f}')} MiB; load {uptime:.0f} on {os.cpu_count()} cpus"))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        what, *args = sys.argv[2:]
        print(import_once(*args) if what == "import" else add_once(args[0], args[1], int(args[2]), int(args[3])))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--synapses", type=int, default=1_000_000)
    ap.add_argument("--peer-synapses", type=int, default=200)
    ap.add_argument("--long", action="store_true", help="also import 10^7 synapses (ours only, 3 rounds)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-annotation-import-") as tmp:
        work = Path(tmp)
        write_blocky_base(work / "seg", SHAPE, (16, 128, 128), (128, 128, 16), 0)
        repo = create_repository(work / "repo")
        create_labelmap(repo, "seg", work / "seg")
        repo.close()
        bench_import(args.synapses, args.rounds, args.peer_synapses, work)
        if args.long:
            bench_import(10_000_000, 3, 0, work)
    save(BENCH, partial=not args.long)


if __name__ == "__main__":
    main()
