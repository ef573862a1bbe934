"""Benchmark: the connectome of a version — ``connections(body)`` right after a labelmap edit, and a view's box.

Run: ``PYTHONPATH=src:. .venv/bin/python bench/connectome.py [--rounds 5] [--long]``

Data: the sample labelmap (256 x 256 x 64 voxels, its agglomeration), in an LMDB repository, with N
synapses (N ``pre`` and N ``post`` points at random voxels, pre row i linked ``PreSynTo`` post row i)
added with ``add_many``; N = 10⁴ and 10⁶ (``--long`` adds 10⁷). Each round first edits the labelmap
(even rounds merge body B into body A, odd rounds undo that merge), then times, in the same process,
the order alternating:

1. ``connections(A)`` (ours: the synapse index, the body's supervoxels only) vs the peer, a full
   recount (:func:`recount_connectivity`: every record read, every point's body read from the
   voxels) reduced to A's partners — what a tool without an index must do after an edit;
2. a view's box (8 x 128 x 128 voxels): ``in_box`` (the spatial index) vs a scan of every record;
3. ``synapses(A)`` (every site of the body, with its partners' ids and bodies: ours reads the body's
   supervoxels' annotations through the supervoxel index) vs the peer, a full scan: every annotation
   read, every point's body read from the voxels, the body's sites kept. The former path (every
   annotation in the body's blocks) is timed once per size for the record (``--only synapses`` runs
   this case alone).

``connections(A)`` is also timed in CPU seconds of the process and in time spent waiting for a CPU
(the run queue, from ``/proc/self/task/*/schedstat``): on a shared machine the wall time of a query
that never blocks (no file opened, no thread hand-off, no page read from disk per call) is its CPU
time plus that wait. ``--log N`` first makes N labelmap edits (merges of B into A and their undo),
so the labelmap's mutation log is that long when the rounds run.

Goals (issue 29): connections of one body in <= 10 ms at 10⁷ synapses, >= 100x faster than a recount.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import Paired, Row, paired_rounds, record, record_pair, save, timed

import napari_shardscope as ss
from napari_shardscope.core.annotation import add_many, create_annotation_instance
from napari_shardscope.core.annotation import body_sites as B
from napari_shardscope.core.annotation import sv_synapses as C
from napari_shardscope.core.annotation.connectome import _connections_from, recount_connectivity

BENCH = "connectome"
BOX = ((28, 64, 64), (36, 192, 192))


def _run_queue_wait() -> float:
    """Seconds this process's threads have waited for a CPU so far (Linux schedstat; 0 elsewhere)."""
    total = 0
    try:
        for t in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return total / 1e9


class Clocks:
    """A callable's CPU time and run-queue wait per call, beside the wall time the pairing measures."""

    def __init__(self, fn: object) -> None:
        self.fn = fn
        self.cpu: list[float] = []
        self.wait: list[float] = []
        self.blocked: list[int] = []  # voluntary context switches: a read from disk, a lock, a thread hand-off

    def __call__(self) -> object:
        q0, c0, r0 = _run_queue_wait(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        out = self.fn()  # type: ignore[operator]
        self.cpu.append(time.process_time() - c0)
        self.wait.append(_run_queue_wait() - q0)
        self.blocked.append(resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - r0)
        return out

    def text(self) -> str:
        from bench.common import spread

        return (f"CPU {spread([t * 1e3 for t in self.cpu], '{:.1f}')} ms, waiting for a CPU "
                f"{spread([t * 1e3 for t in self.wait], '{:.1f}')} ms, blocking switches "
                f"{spread([float(x) for x in self.blocked], '{:.0f}')} per call")


def write_synapse_table(path: Path, pts: np.ndarray, n: int) -> None:
    """The synapses of ``pts`` (pre rows 0..n-1, post rows n..2n-1; z, y, x) as a CAVE Parquet table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def positions(rows: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(rows[:, ::-1].astype(np.int64).reshape(-1)), 3)

    pq.write_table(pa.table({"id": np.arange(n, dtype=np.int64), "pre_pt_position": positions(pts[:n]),
                             "post_pt_position": positions(pts[n:])}), path)


def recount_base(v: object, body: int) -> object:
    """The peer over a base: every point's supervoxel read from the voxels (one read per block the
    points fall in), mapped to bodies, the body's synapses counted — vectorised (a recount through
    :func:`recount_connectivity` builds 2·10⁷ Python objects at 10⁷ and does not fit in memory)."""
    from collections import Counter

    from napari_shardscope.core.annotation.connections import Connections, Partner
    from napari_shardscope.core.annotation.points import supervoxels_at

    base = v.instance.base  # type: ignore[attr-defined]
    parts = [np.stack([p.values["z"], p.values["y"], p.values["x"]], axis=1)
             for p in base.records.iter_pages(["z", "y", "x"])]
    zyx = np.concatenate(parts)
    lmv = v.instance.labelmap.at(v.uuid)  # type: ignore[attr-defined]
    bodies = np.asarray(lmv.bodies_of(supervoxels_at(lmv, zyx, v.instance.block)), dtype=np.uint64)  # type: ignore[attr-defined]
    pre, post = bodies[0::2], bodies[1::2]  # ids 2S+1 and 2S+2 are adjacent in id order
    ok = (pre != 0) & (post != 0)
    out = Counter(post[ok & (pre == body)].tolist())
    inc = Counter(pre[ok & (post == body)].tolist())

    def side(c: Counter[int]) -> tuple[Partner, ...]:
        return tuple(Partner(b, k) for b, k in sorted(c.items(), key=lambda t: (-t[1], t[0])))

    return Connections(body, side(out), side(inc))


def scan_synapses(v: object, body: int) -> list[object]:
    """The peer of ``synapses(body)``: every annotation of the version read, every point's body read from
    the voxels (one read per block the points fall in), the body's ``pre``/``post`` sites kept."""
    from napari_shardscope.core.annotation.connections import SynapseSite
    from napari_shardscope.core.annotation.points import supervoxels_at

    every = v.all()  # type: ignore[attr-defined]
    lmv = v.instance.labelmap.at(v.uuid)  # type: ignore[attr-defined]
    pts = np.asarray([a.point for a in every], dtype=np.int64).reshape(-1, 3)
    bodies = lmv.bodies_of(supervoxels_at(lmv, pts, v.instance.block)).tolist()  # type: ignore[attr-defined]
    body_of = {a.id: int(b) for a, b in zip(every, bodies, strict=True)}
    return [SynapseSite(a, body, tuple((r.to, body_of[r.to]) for r in a.relationships
                                       if r.rel in ("PreSynTo", "PostSynTo")))
            for a, b in zip(every, bodies, strict=True) if b == body and a.kind in ("pre", "post")]


def former_synapses(v: object, body: int) -> object:
    """``synapses(body)`` through the body's blocks (what it did before the supervoxel index)."""
    real = B._sites_indexed
    B._sites_indexed = lambda _v: False  # type: ignore[assignment]
    try:
        return v.synapses(body)  # type: ignore[attr-defined]
    finally:
        B._sites_indexed = real  # type: ignore[assignment]


def bench_synapses(v: object, n: int, rounds: int, a: int, b: int, lm: object, where: str) -> None:
    def setup(_r: int) -> None:  # merge B into A, or undo that merge (whatever the state left before)
        lmv = lm.at("main")  # type: ignore[attr-defined]
        if lmv.exists(b):
            lmv.merge(a, [b])
        else:
            lmv.undo()

    def ours() -> object:
        return v.synapses(a)  # type: ignore[attr-defined]

    def peer() -> object:
        return scan_synapses(v, a)

    setup(0)
    if lm.at("main").exists(b):  # type: ignore[attr-defined]
        setup(0)  # A holds B: the merged body
    got = ours()
    assert B._sites_indexed(v) and got == peer()
    former = "not timed (beyond 10⁵ it reads every annotation in the body's blocks: minutes)"
    if n <= 10**5:
        t_former = timed(lambda: former_synapses(v, a))
        assert former_synapses(v, a) == got
        former = f"{t_former:.2f} s (one round, merged)"
    setup(1)
    pair = paired_rounds(ours, peer, rounds, setup=setup)
    record_pair(BENCH, f"synapses(body) after a merge/undo, N={n:,} synapses ({len(got)} sites of A+B "
                f"merged)", "-", pair, "full scan (every annotation read, every point's voxel read)", None,
                setting=f"{where}, body {a} (+{b}); the former path through the body's blocks: {former}")
    print(f"  synapses N={n:,}: ours {[round(x * 1e3, 1) for x in pair.ours]} ms; peer "
          f"{[round(x, 2) for x in pair.peer]} s; former {former}", flush=True)


def run(n: int, rounds: int, *, from_base: bool = False, peer_rounds: int | None = None,
        only: str | None = None, log: int = 0) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-connectome-"))
    try:
        sample = ss.ensure_sample_dataset()
        repo = ss.init_repository(tmp / "repo")
        lm = ss.create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)
        rng = np.random.default_rng(7)
        shape = lm.config.scales[0].shape
        pts = np.stack([rng.integers(0, s, 2 * n) for s in shape], axis=1)
        if from_base:
            write_synapse_table(tmp / "syn.parquet", pts, n)
            del pts
            t0, c0 = time.perf_counter(), time.process_time()
            syn = create_annotation_instance(repo, "synapses", labelmap="seg", base=tmp / "syn.parquet")
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            record(Row(BENCH, f"import of {n:,} synapses as the base (synapse index built)", "-",
                       f"{wall:.1f} s wall, {cpu:.1f} s CPU = {n / cpu / 1e6:.2f} M synapses/s of CPU; peak RSS "
                       f"of the bench process {rss:.0f} MiB", "-", "-", "-", "1 M synapses/s", n / wall >= 1e6, 1,
                       f"sample labelmap, LMDB, random points; load {os.getloadavg()[0]:.0f}"))
            v = syn.at("main")
        else:
            syn = create_annotation_instance(repo, "synapses", labelmap="seg")
            v = syn.at("main")
            t0, c0 = time.perf_counter(), time.process_time()
            add_many(v, ["pre"] * n + ["post"] * n, pts,
                     synapses=np.stack([np.arange(n), n + np.arange(n)], axis=1))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            record(Row(BENCH, f"add_many of {2 * n:,} annotations with {n:,} synapses (one transaction)", "-",
                       f"{wall:.1f} s wall, {cpu:.1f} s CPU = {n / cpu / 1e3:.0f} k synapses/s of CPU; peak RSS "
                       f"{rss:.0f} MB", "-", "-", "-", "1 M synapses/s", n / cpu >= 1e6, 1,
                       "sample labelmap, LMDB, random points"))
        lmv = lm.at("main")
        bodies, counts = np.unique(lmv.bodies_of(lmv.read_supervoxels()), return_counts=True)
        big = [int(b) for b in bodies[np.argsort(counts)[::-1]] if b][:2]
        a, b = big

        def setup(r: int) -> None:
            if r % 2 == 0:
                lm.at("main").merge(a, [b])
            else:
                lm.at("main").undo()

        for r in range(log):  # a long labelmap log: merge/undo pairs (their net effect: none)
            setup(r)
        if log % 2:
            setup(1)

        clocks = Clocks(lambda: v.connections(a))

        def ours() -> object:
            return clocks()

        def peer() -> object:
            if from_base:
                return recount_base(v, a)
            return _connections_from(recount_connectivity(v).as_dict(), a)

        where = f"sample labelmap, LMDB, {'imported base' if from_base else 'add_many'}"
        if only == "synapses":
            bench_synapses(v, n, rounds, a, b, lm, where)
            repo.close()
            return
        if from_base and n <= 10**4:  # the vectorised peer agrees with the reference recount
            assert peer() == _connections_from(recount_connectivity(v).as_dict(), a)
        assert v.connections(a) == peer()
        kind = "full recount (vectorised, every point's voxel read)" if from_base else "full recount"
        if peer_rounds is not None and peer_rounds < rounds:  # the peer is too slow to repeat: ours alone
            pair = Paired()
            for r in range(rounds):
                setup(r)
                pair.ours.append(timed(ours))
                if r < peer_rounds:
                    pair.peer.append(timed(peer))
            pair.peer += [statistics_median(pair.peer)] * (rounds - len(pair.peer))
            kind += f" ({peer_rounds} round{'s' if peer_rounds > 1 else ''}, repeated for the ratio)"
        else:
            pair = paired_rounds(ours, peer, rounds, setup=setup)
        clock_text = clocks.text()
        with repo.read(lm.at("main").uuid) as view:
            log_now = view.log_length(lm.instance)
        if not from_base:
            cold = paired_rounds(ours, peer, rounds, setup=lambda r: (setup(r + rounds), C._aggs.clear()))
            record_pair(BENCH, f"connections(body) cold (no aggregate cached: a new process or an annotation "
                        f"edit), N={n:,}", "-", cold, kind, None, setting=f"{where}, body {a}")
        c = v.connections(a)
        goal = 100.0
        met = None
        if n >= 10**7:
            met = statistics_median(pair.ours) <= 0.010 and statistics_median(pair.ratios) >= goal
        record_pair(BENCH, f"connections(body) after a merge/undo, N={n:,} synapses "
                    f"({len(c.outgoing) + len(c.incoming)} partners)", "-", pair, kind, goal,
                    setting=f"{where}, body {a} (+{b}); labelmap log {log_now} records; ours: {clock_text}; "
                            f"load {os.getloadavg()[0]:.0f}", met=met)
        print(f"  N={n:,}: ours {[round(x * 1e3, 1) for x in pair.ours]} ms; peer {[round(x, 2) for x in pair.peer]} s",
              flush=True)
        if only == "connections":  # connections(body) alone (no synapses(body), no box)
            repo.close()
            return
        if n <= 10**6:
            bench_synapses(v, n, rounds if n < 10**6 else min(rounds, 3), a, b, lm, where)
        if n >= 10**6 or from_base:  # the box's peer reads every record: measured at 10^4
            repo.close()
            return
        lo, hi = BOX

        def box_ours() -> object:
            return v.in_box(lo, hi)

        def box_peer() -> object:
            return [x for x in v.all() if all(q <= p < h for q, p, h in zip(lo, x.point, hi, strict=True))]

        assert [x.id for x in box_ours()] == [x.id for x in box_peer()]  # type: ignore[attr-defined]
        pair = paired_rounds(box_ours, box_peer, rounds)
        record_pair(BENCH, f"a view's box 8x128x128, N={n:,} synapses", "-", pair, "scan of every record", None,
                    setting="sample labelmap, LMDB")
        repo.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def statistics_median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--long", action="store_true", help="add N = 10^7")
    p.add_argument("--base", action="store_true",
                   help="build the synapses by importing a Parquet table as the base (the synapse index is "
                        "built at import) instead of add_many; the peer is then a vectorised recount")
    p.add_argument("--only", choices=["synapses", "connections"], default=None, help="measure only this case")
    p.add_argument("--sizes", default=None, help="comma-separated N (overrides the defaults and --long)")
    p.add_argument("--log", type=int, default=0, help="labelmap edits made before the rounds (a long mutation log)")
    args = p.parse_args()
    sizes = [10**4, 10**6] + ([10**7] if args.long else [])
    if args.sizes:
        sizes = [int(float(x)) for x in args.sizes.split(",")]
    for n in sizes:
        if args.base:
            run(n, args.rounds, from_base=True, peer_rounds=1 if n >= 10**7 else None, only=args.only, log=args.log)
        else:
            run(n, args.rounds if n < 10**6 else min(args.rounds, 3), only=args.only, log=args.log)
    print(save(BENCH, partial=args.base or bool(args.sizes) or bool(args.only)))


if __name__ == "__main__":
    main()
