#!/usr/bin/env python
"""Fuzz every entry point of shardscope with damaged and hostile datasets of every format.

    python scripts/fuzz.py --minutes 30 [--seed 0] [--workers 2] [--report fuzz-report.json]
    python scripts/fuzz.py --cases 500               # a fixed number of datasets instead of a time
    python scripts/fuzz.py --replay SEED             # one case, in this process, with tracebacks
    python scripts/fuzz.py --serve --minutes 5       # hostile HTTP requests against `serve` instead
    python scripts/fuzz.py --serve --replay SEED     # one request and its answer

Each seed builds one hostile dataset (``tests/fuzz/hostile.py``) and runs it through
``open_dataset`` + ``volume_specs``, the inspector (inspect, locate, list_chunks, validate),
``open_volumes`` + a small read at every level, the shard browser's tree and two random
``shardscope`` command lines (``tests/fuzz/runner.py``), in worker processes with a time limit per
dataset and an address-space limit. The report counts datasets, operations and outcomes by class,
format, mutation and operation, and lists every finding (an untyped exception, a hang, a crash, an
unbounded allocation, a read outside the dataset root) with the seed that reproduces it. The exit
code is 1 when there are findings.

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

from tests.fuzz.hostile import build_seeds, make_case
from tests.fuzz.runner import CaseResult, Limits, OutsideWatch, Report, fuzz, run_case

#: Seed datasets are written once per machine here (reused by later runs; delete to rebuild).
DEFAULT_SEED_DIR = Path(tempfile.gettempdir()) / "shardscope-fuzz-seeds"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how_long = p.add_mutually_exclusive_group()
    how_long.add_argument("--minutes", type=float, help="run for this long (default 1)")
    how_long.add_argument("--cases", type=int, help="run this many datasets")
    how_long.add_argument("--replay", type=int, metavar="SEED", help="run one case in this process and print it")
    p.add_argument("--seed", type=int, default=0, help="first seed (cases use seed, seed+1, …)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--case-seconds", type=float, default=Limits.case_seconds, help="time limit per dataset")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--seed-dir", type=Path, default=DEFAULT_SEED_DIR, help="where the valid seed datasets live")
    p.add_argument("--serve", action="store_true", help="fuzz the `serve` HTTP server with hostile requests")
    args = p.parse_args(argv)
    if args.serve:
        return serve_main(args)

    seeds = build_seeds(args.seed_dir)
    bomb = args.seed_dir / "bomb.gz"
    if args.replay is not None:
        return replay(args.replay, seeds, bomb)

    limits = Limits(case_seconds=args.case_seconds)
    minutes = args.minutes if args.minutes is not None or args.cases is not None else 1.0
    deadline = time.monotonic() + minutes * 60 if minutes is not None else None
    stop = args.seed + args.cases if args.cases is not None else None
    progress = _Progress()
    print(f"fuzz: {len(seeds)} seed datasets, {args.workers} workers, "
          + (f"{minutes} min" if minutes is not None else f"{args.cases} cases") + f" from seed {args.seed}",
          file=sys.stderr)
    report = fuzz(_seeds(args.seed, stop), seeds, bomb, workers=args.workers, limits=limits, deadline=deadline,
                  on_result=progress)
    print(report.summary())
    if args.report is not None:
        doc = report.to_json()
        doc["first_seed"], doc["last_seed"] = args.seed, progress.last_seed
        doc["limits"] = {"case_seconds": limits.case_seconds, "address_space_mb": limits.address_space_mb,
                         "rss_limit_mb": limits.rss_limit_mb}
        doc["seed_datasets"] = [s.name for s in seeds]
        args.report.write_text(json.dumps(doc, indent=1) + "\n")
    return 1 if report.findings else 0


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


def replay(seed: int, seeds: list, bomb: Path) -> int:
    """Build case ``seed`` and run it here (no worker, no time limit), printing every outcome."""
    work = Path(tempfile.mkdtemp(prefix="shardscope-replay-"))
    try:
        case = make_case(seed, seeds, work / "case", bomb)
        print(f"seed {seed}: {case.base} ({case.fmt}), mutations {case.mutations}")
        print(f"dataset: {case.root}")
        report = Report()
        result = run_case(case, random.Random(seed ^ 0x5EED), OutsideWatch(),
                          lambda op: print(f"  -> {op}", flush=True))
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
