#!/usr/bin/env python
"""Fuzz every entry point of shardscope with damaged and hostile datasets of every format, and every C decoder.

    python scripts/fuzz.py --minutes 30 [--seed 0] [--workers 2] [--report fuzz-report.json]
    python scripts/fuzz.py --cases 500               # a fixed number of cases (per surface) instead of a time
    python scripts/fuzz.py --surfaces decoders --cases 100000 --workers 8
    python scripts/fuzz.py --replay SEED             # one dataset case, in this process, with tracebacks
    python scripts/fuzz.py --replay-decoder SEED     # one decoder case, in a child process
    python scripts/fuzz.py --serve --minutes 5       # hostile HTTP requests against `serve` instead
    python scripts/fuzz.py --serve --replay SEED     # one request and its answer

Two surfaces, run one after the other, each with the same budget (``--cases`` or ``--minutes``):

* ``datasets``: each seed builds one hostile dataset (``tests/fuzz/hostile.py``) and runs it through
  ``open_dataset`` + ``volume_specs``, the inspector (inspect, locate, list_chunks, validate),
  ``open_volumes`` + a small read at every level, the shard browser's tree and two random
  ``shardscope`` command lines (``tests/fuzz/runner.py``), in worker processes;
* ``decoders``: each seed overwrites one header field of a real encoded chunk (compresso,
  compressed_segmentation, blosc, lz4, zstd, gzip, brotli, bz2, xz, Draco) with a hostile value and
  decodes it the way the readers do, in child processes (``tests/fuzz/decoders.py``).

A case that uses more than ``--case-cpu-seconds`` of CPU time (its process's user + system time),
or more than ``--case-wall-seconds`` of wall time (a backstop for a case blocked without spinning),
is a hang: CPU time, so that a loaded machine does not turn slow cases into false hangs. Workers run
under an address-space limit. The report counts cases and outcomes by class, format, mutation,
operation and codec, the peak resident memory of the workers, and lists every finding (an untyped
exception, a hang, a crash, an unbounded allocation, a read outside the dataset root, other voxels
from a decoder that did not raise) with the seed that reproduces it. The exit code is 1 when there
are findings.

With ``--serve``, each seed is one hostile HTTP request (``tests/fuzz/http_hostile.py``) sent to a
``serve`` server over a dataset directory (links out, a FIFO, a sparse file), a labelmap version,
the Neuroglancer client and a relayed remote store: every answer must be well-formed HTTP with a
right ``Content-Length`` and no 5xx (but 501, 505, and 502 from the relay), the server must log no
traceback, and nothing outside the served roots may be opened.

Run it from the repository root with the project importable (``PYTHONPATH=src:.``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: ``tests.fuzz``

from tests.fuzz.decoders import FINDING_OUTCOMES, DecoderChild, Verdict, decoder_case, fuzz_decoders
from tests.fuzz.hostile import build_seeds, make_case
from tests.fuzz.runner import CaseResult, Limits, OutsideWatch, Report, fuzz, run_case

#: Seed datasets are written once per machine here (reused by later runs; delete to rebuild).
DEFAULT_SEED_DIR = Path(tempfile.gettempdir()) / "shardscope-fuzz-seeds"


SURFACES = ("datasets", "decoders")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how_long = p.add_mutually_exclusive_group()
    how_long.add_argument("--minutes", type=float, help="run each surface this long (default 1)")
    how_long.add_argument("--cases", type=int, help="run this many cases on each surface")
    how_long.add_argument("--replay", type=int, metavar="SEED", help="run one dataset case in this process")
    how_long.add_argument("--replay-decoder", type=int, metavar="SEED", help="run one decoder case and print it")
    p.add_argument("--surfaces", default=",".join(SURFACES),
                   help=f"comma-separated surfaces to fuzz (default: {','.join(SURFACES)})")
    p.add_argument("--seed", type=int, default=0, help="first seed (cases use seed, seed+1, …)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (one core each)")
    p.add_argument("--case-cpu-seconds", "--case-seconds", type=float, default=Limits.cpu_seconds,
                   dest="cpu_seconds", help="CPU time limit per case (a case past it is a hang)")
    p.add_argument("--case-wall-seconds", type=float, default=Limits.wall_seconds, dest="wall_seconds",
                   help="wall-time backstop per case (for a case blocked without using the CPU)")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--seed-dir", type=Path, default=DEFAULT_SEED_DIR, help="where the valid seed datasets live")
    p.add_argument("--serve", action="store_true", help="fuzz the `serve` HTTP server with hostile requests")
    args = p.parse_args(argv)
    if args.serve:
        return serve_main(args)
    surfaces = [x.strip() for x in args.surfaces.split(",") if x.strip()]
    unknown = set(surfaces) - set(SURFACES)
    if unknown or not surfaces:
        p.error(f"--surfaces takes {', '.join(SURFACES)}; got {args.surfaces!r}")

    if args.replay_decoder is not None:
        return replay_decoder(args.replay_decoder)
    seeds = build_seeds(args.seed_dir) if "datasets" in surfaces or args.replay is not None else []
    bomb = args.seed_dir / "bomb.gz"
    if args.replay is not None:
        return replay(args.replay, seeds, bomb)

    limits = Limits(cpu_seconds=args.cpu_seconds, wall_seconds=args.wall_seconds)
    minutes = args.minutes if args.minutes is not None or args.cases is not None else 1.0
    stop = args.seed + args.cases if args.cases is not None else None
    doc: dict = {"first_seed": args.seed, "surfaces": surfaces, "workers": args.workers,
                 "limits": {"cpu_seconds": limits.cpu_seconds, "wall_seconds": limits.wall_seconds,
                            "address_space_mb": limits.address_space_mb, "rss_limit_mb": limits.rss_limit_mb}}
    findings = 0
    if "datasets" in surfaces:
        deadline = time.monotonic() + minutes * 60 if minutes is not None else None
        progress = _Progress()
        print(f"fuzz: {len(seeds)} seed datasets, {args.workers} workers, "
              + (f"{minutes} min" if minutes is not None else f"{args.cases} cases") + f" from seed {args.seed}",
              file=sys.stderr)
        report = fuzz(_seeds(args.seed, stop), seeds, bomb, workers=args.workers, limits=limits, deadline=deadline,
                      on_result=progress)
        print(report.summary())
        findings += len(report.findings)
        doc.update(report.to_json())
        doc["last_seed"] = progress.last_seed
        doc["seed_datasets"] = [s.name for s in seeds]
    if "decoders" in surfaces:
        deadline = time.monotonic() + minutes * 60 if minutes is not None else None
        print(f"fuzz: decoder header mutations, {args.workers} workers, "
              + (f"{minutes} min" if minutes is not None else f"{args.cases} cases") + f" from seed {args.seed}",
              file=sys.stderr)
        decoders = fuzz_decoders(_seeds(args.seed, stop), workers=args.workers, deadline=deadline,
                                 cpu_seconds=limits.cpu_seconds, wall_seconds=limits.wall_seconds,
                                 on_case=_DecoderProgress())
        print(decoders.summary())
        findings += len(decoders.findings)
        doc["decoders"] = decoders.to_json()
    if args.report is not None:
        args.report.write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if findings else 0


def _seeds(first: int, stop: int | None) -> range:
    return range(first, stop if stop is not None else 1 << 62)


class _Progress:
    """A line on stderr every 30 s: how many datasets, how fast, how many findings."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()
        self.n = self.findings = 0
        self.last_seed = -1

    def __call__(self, result: CaseResult) -> None:
        self.n += 1
        self.last_seed = max(self.last_seed, result.seed)
        found = result.findings()
        self.findings += len(found)
        for op in found:
            print(f"FINDING seed={result.seed} {op.outcome} in {op.op}: {op.detail[:200]}", file=sys.stderr)
        now = time.monotonic()
        if now - self.last > 30:
            self.last = now
            print(f"fuzz: {self.n} datasets in {now - self.t0:.0f} s ({self.n / (now - self.t0):.1f}/s), "
                  f"{self.findings} findings", file=sys.stderr, flush=True)


class _DecoderProgress:
    """A line on stderr every 30 s for the decoder surface; every finding as it happens."""

    def __init__(self) -> None:
        self.t0 = self.last = time.monotonic()
        self.n = self.findings = 0

    def __call__(self, seed: int, verdict: Verdict) -> None:
        self.n += 1
        if verdict.outcome in FINDING_OUTCOMES:
            self.findings += 1
            print(f"FINDING decoder seed={seed} {verdict.outcome}: {verdict.detail[:200]}", file=sys.stderr)
        now = time.monotonic()
        if now - self.last > 30:
            self.last = now
            print(f"fuzz: {self.n} decoder cases in {now - self.t0:.0f} s ({self.n / (now - self.t0):.0f}/s), "
                  f"{self.findings} findings", file=sys.stderr, flush=True)


def replay_decoder(seed: int) -> int:
    """Build decoder case ``seed``, decode it in a child process, print the verdict."""
    sample, which, value, data = decoder_case(seed)
    child = DecoderChild()
    try:
        verdict = child.judge(sample, data, which.pinned)
    finally:
        child.close()
    print(f"seed {seed}: {sample.name} ({sample.codec}) field {which.name} = {value}: {verdict.outcome} "
          f"{verdict.detail}")
    return 1 if verdict.outcome in FINDING_OUTCOMES else 0


def replay(seed: int, seeds: list, bomb: Path) -> int:
    """Build case ``seed`` and run it here (no worker, no time limit), printing every outcome."""
    work = Path(tempfile.mkdtemp(prefix="shardscope-replay-"))
    try:
        case = make_case(seed, seeds, work / "case", bomb)
        print(f"seed {seed}: {case.base} ({case.fmt}), mutations {case.mutations}")
        print(f"dataset: {case.root}")
        report = Report()
        pristine = next((s.path for s in seeds if s.name == case.base), None)
        result = run_case(case, random.Random(seed ^ 0x5EED), OutsideWatch(),
                          lambda op: print(f"  -> {op}", flush=True), pristine=pristine)
        report.add(result)
        for op in result.ops:
            print(f"  {op.op:13} {op.outcome:13} {op.detail}")
            if op.trace:
                print(op.trace)
        if os.environ.get("SHARDSCOPE_FUZZ_KEEP"):
            print(f"kept {work}")
            return 1 if report.findings else 0
    finally:
        if not os.environ.get("SHARDSCOPE_FUZZ_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    return 1 if report.findings else 0


def serve_main(args: argparse.Namespace) -> int:
    """``--serve``: hostile HTTP requests against a running server, in this process (one request at a time)."""
    from tests.fuzz.http_hostile import HttpReport, build_world, fuzz_http, replay_http

    work = Path(tempfile.mkdtemp(prefix="shardscope-http-fuzz-"))
    world = build_world(work)
    try:
        if args.replay is not None:
            print(replay_http(args.replay, world))
            return 0
        minutes = args.minutes if args.minutes is not None or args.cases is not None else 1.0
        deadline = time.monotonic() + minutes * 60 if minutes is not None else None
        stop = args.seed + args.cases if args.cases is not None else 1 << 62
        report = HttpReport()
        watch = OutsideWatch()
        first = args.seed
        while first < stop and (deadline is None or time.monotonic() < deadline):
            batch = range(first, min(stop, first + 1000))
            fuzz_http(batch, world, watch, report)
            first = batch.stop
            print(f"fuzz --serve: {report.summary()}", file=sys.stderr, flush=True)
        for f in report.findings[:50]:
            print(f"FINDING seed={f['seed']} status={f['status']}: {f['problem']}\n  {f['request'][:300]!r}")
        print(report.summary())
        if args.report is not None:
            args.report.write_text(json.dumps({"requests": report.requests, "first_seed": args.seed,
                                               "last_seed": first - 1, "findings": report.findings,
                                               "statuses": {str(k): v for k, v in report.statuses.items()}},
                                              indent=1) + "\n")
        return 1 if report.findings else 0
    finally:
        world.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
