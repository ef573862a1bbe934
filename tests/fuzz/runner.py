"""Run hostile datasets through every entry point in worker processes and sort what comes out.

The rules under test: only :class:`~napari_shardscope.core.errors.ShardscopeError` subclasses leave
an entry point; nothing hangs, crashes the process, allocates without bound or touches a path
outside the dataset root. Each rule has a detector here:

* **untyped** — an operation raised something that is not a ``ShardscopeError`` (or the CLI exited
  70, its code for one): the type, message, traceback and seed are kept;
* **hang** — a case did not finish within ``case_seconds``: the parent kills the worker (the
  operation it was in is known from the worker's last message) and starts a new one;
* **crash** — the worker process died (a segfault or an abort in C++ code);
* **memory** — a ``MemoryError`` (workers run under an address-space limit), or a worker whose peak
  resident memory passed ``rss_limit_mb`` during the case (then it is replaced, so the next case
  starts from a clean peak);
* **generator_error** — building the case failed: a bug of the fuzzer itself, reported so that it
  cannot hide damage it was meant to make;
* **outside_read** — an audit hook saw Python open, list or change a path that resolves (links
  followed) outside the dataset root, or a canary outside the root was read (its access time moved:
  this catches TensorStore's C++ reads, which audit hooks do not see), or the canary's bytes came
  back in returned data or CLI output.

Everything else is an outcome class: ``ok``, ``check_failed`` (validate found problems) or the
typed error's group (``not_found``, ``corrupt``, ``unsupported``, ``argument``, ``store``, …).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from tests.fuzz.hostile import CANARY_MARKER, HostileCase, SeedDataset, canary_reads, make_case

#: Outcome classes that break a rule: each occurrence is a finding.
FINDING_CLASSES = ("untyped", "hang", "crash", "memory", "outside_read", "generator_error")

#: Bounds of the bounded operations (a hostile index may claim 2⁶⁴ chunks; we look at the first few).
MAX_RECORDS = 200
MAX_NODES = 60


@dataclass(frozen=True)
class Limits:
    """What a case may cost before it is a finding."""

    #: Wall time for all the operations on one dataset.
    case_seconds: float = 20.0
    #: Address-space limit of a worker (an unbounded allocation fails with MemoryError instead of
    #: taking the machine down).
    address_space_mb: int = 6144
    #: Peak resident memory a worker may reach; a case that pushes it past this allocated without bound.
    rss_limit_mb: int = 1536


@dataclass
class OpResult:
    """One operation on one dataset and how it ended."""

    op: str
    outcome: str
    detail: str = ""
    trace: str = ""


@dataclass
class CaseResult:
    """Everything that happened to one hostile dataset."""

    seed: int
    base: str
    fmt: str
    mutations: list[str]
    ops: list[OpResult] = field(default_factory=list)
    seconds: float = 0.0

    def findings(self) -> list[OpResult]:
        return [op for op in self.ops if op.outcome in FINDING_CLASSES]


# -- classifying ------------------------------------------------------------------------------------------
def classify(exc: BaseException) -> str:
    """The outcome class of an exception an operation raised."""
    from napari_shardscope.core.errors import ShardscopeError, group_name

    if isinstance(exc, ShardscopeError):
        return group_name(exc)
    if isinstance(exc, MemoryError):
        return "memory"
    return "untyped"


#: CLI exit codes and their outcome classes (``core/errors.py`` is the map; 70 is an internal error).
EXIT_CLASSES = {0: "ok", 1: "check_failed", 2: "argument", 3: "not_found", 4: "corrupt", 5: "unsupported",
                6: "refused_write", 7: "conflict", 8: "store", 9: "other", 70: "untyped"}


# -- the audit hook ---------------------------------------------------------------------------------------
class OutsideWatch:
    """A ``sys.addaudithook`` hook that records file-system events on paths outside the dataset root.

    Active only while operations run (:meth:`watching`). A path counts as outside when, with links
    resolved, it is neither below the root nor below a place Python itself reads while running:
    the interpreter's prefixes and ``sys.path`` entries (lazily imported modules), ``/proc`` and
    ``/sys`` (CPU counts for thread pools), ``/dev/null`` and ``/dev/urandom``.
    """

    EVENTS = frozenset({"open", "os.listdir", "os.scandir", "os.chdir", "os.mkdir", "os.remove", "os.rename",
                        "os.rmdir", "os.symlink", "os.truncate", "os.link", "shutil.copyfile", "shutil.rmtree"})

    def __init__(self) -> None:
        self.root: str | None = None
        self.seen: list[str] = []
        self._local = threading.local()
        allowed = {sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/sys", "/dev/null", "/dev/urandom"}
        allowed.update(p for p in sys.path if p and os.path.isdir(p))
        self.allowed = tuple(sorted({os.path.realpath(p) for p in allowed}))
        sys.addaudithook(self._hook)

    @contextlib.contextmanager
    def watching(self, root: Path) -> Any:
        self.root = os.path.realpath(root)
        self.seen = []
        try:
            yield self
        finally:
            self.root = None

    def _inside(self, real: str, base: str) -> bool:
        return real == base or real.startswith(base.rstrip("/") + "/")

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.root is None or event not in self.EVENTS or getattr(self._local, "busy", False):
            return
        self._local.busy = True
        try:
            for arg in args[:2] if event in ("os.rename", "os.symlink", "os.link", "shutil.copyfile") else args[:1]:
                if isinstance(arg, int) or arg is None:
                    continue
                path = os.fsdecode(arg) if isinstance(arg, (str, bytes, os.PathLike)) else None
                if path is None or (os.path.basename(path).startswith("<") and path.endswith(">")):
                    continue  # linecache's pseudo-files ("<unknown>", "<frozen …>") while a traceback is formatted
                real = os.path.realpath(os.path.abspath(path))
                if self._inside(real, self.root) or any(self._inside(real, a) for a in self.allowed):
                    continue
                self.seen.append(f"{event} {path} -> {real}")
        except Exception:  # an audit hook must never break the operation it watches
            pass
        finally:
            self._local.busy = False


# -- the operations -----------------------------------------------------------------------------------------
def operations(case: HostileCase, rng: random.Random) -> list[tuple[str, Callable[[], Any]]]:
    """The entry points to call on ``case.root``: each returns what it produced (checked for the canary)."""
    import numpy as np

    from napari_shardscope.cli import main
    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.layout import open_layout
    from napari_shardscope.core.volumes import open_volumes
    from tests.fuzz.cliargs import random_argv

    root = str(case.root)
    cache: dict[str, Any] = {}

    def dataset() -> Any:
        if "ds" not in cache:
            cache["ds"] = open_dataset(root)
        return cache["ds"]

    def open_and_specs() -> Any:
        specs = dataset().volume_specs()
        cache["ndim"] = len(specs[0].levels[0].shape) if specs and specs[0].levels else 3
        cache["scales"] = [str(lv.key) for spec in specs for lv in spec.levels]
        return [str(s) for s in specs]

    def scale() -> str | None:
        keys = dataset().inspector().scale_keys()
        return rng.choice([None, *keys]) if keys else None

    def locate() -> Any:
        ins = dataset().inspector()
        n = cache.get("ndim", 3) + rng.choice((0, 0, 0, -1, 1))
        voxel = [rng.choice((0, 1, rng.randrange(80), -1, 2**40)) for _ in range(max(0, n))]
        out = [ins.locate_format_voxel(voxel, scale())]
        if hasattr(ins, "locate_chunk_id"):
            out.append(ins.locate_chunk_id(rng.choice((0, 1, 7, 2**64 - 1)), scale()))
        if hasattr(ins, "locate_segment"):
            out.append(ins.locate_segment(rng.choice((1, 13, 2**63))))
        return out

    def read_regions() -> Any:
        out = []
        for vol in open_volumes(root):
            for level in vol.levels:
                arr = level.array
                index = tuple(_random_slice(rng, n) for n in arr.shape)
                out.append(np.asarray(arr[index]).tobytes())
        return out

    def expand_layout() -> Any:
        tree = open_layout(root)
        pending, seen = list(tree.roots()), []
        while pending and len(seen) < MAX_NODES:
            node = pending.pop(0)
            seen.append(repr(node))
            pending.extend(tree.children(node))
        return seen

    def cli() -> Any:
        argv = random_argv(rng, root, tuple(cache.get("scales", ())))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        return _CliExit(code, argv, out.getvalue() + err.getvalue())

    return [
        ("open_dataset", open_and_specs),
        ("inspect", lambda: dataset().inspector().inspect()),
        ("locate", locate),
        ("list_chunks", lambda: list(itertools.islice(dataset().inspector().list_chunks(scale()), MAX_RECORDS))),
        ("validate", lambda: [str(p) for p in itertools.islice(dataset().inspector().validate(scale()), MAX_RECORDS)]),
        ("read_regions", read_regions),
        ("layout", expand_layout),
        ("cli", cli),
        ("cli", cli),
    ]


@dataclass
class _CliExit:
    code: int
    argv: list[str]
    output: str


def _random_slice(rng: random.Random, n: int) -> slice | int:
    """A small region of an axis of length ``n``: mostly inside, sometimes at or past the edge."""
    if n <= 0:
        return slice(0, 1)
    start = rng.choice((0, rng.randrange(n), max(0, n - 2)))
    if rng.random() < 0.15:
        return rng.choice((start, -1, n - 1))
    return slice(start, min(n, start + rng.randint(1, 8)))


def run_case(case: HostileCase, rng: random.Random, watch: OutsideWatch,
             started: Callable[[str], None] = lambda op: None) -> CaseResult:
    """Every operation on ``case``, each outcome classified; ``started`` is told each operation's name first."""
    result = CaseResult(case.seed, case.base, case.fmt, list(case.mutations))
    t0 = time.monotonic()
    for name, call in operations(case, rng):
        started(name)
        with watch.watching(case.root):
            try:
                produced = call()
                op = _judge_output(name, produced)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                op = OpResult(name, classify(exc), f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"[:500],
                              "" if classify(exc) not in FINDING_CLASSES else traceback.format_exc()[-4000:])
            if watch.seen:
                op = OpResult(name, "outside_read", "; ".join(watch.seen[:5])[:1000], op.detail)
        touched = canary_reads(case)
        if touched:
            op = OpResult(name, "outside_read", f"canary read: {touched[:3]}", op.detail)
            _reset_canary(case)
        result.ops.append(op)
    result.seconds = time.monotonic() - t0
    return result


def _judge_output(name: str, produced: Any) -> OpResult:
    """An operation that returned: ``ok``, unless its output carries the canary or the CLI said "internal error"."""
    if isinstance(produced, _CliExit):
        outcome = EXIT_CLASSES.get(produced.code, "untyped")
        detail = f"exit {produced.code}: {produced.argv!r}"
        if CANARY_MARKER.decode() in produced.output:
            return OpResult(name, "outside_read", f"canary bytes in CLI output: {produced.argv!r}")
        if outcome == "untyped":
            return OpResult(name, "untyped", detail, produced.output[-2000:])
        return OpResult(name, outcome, detail if outcome != "ok" else "")
    blob = produced if isinstance(produced, (bytes, bytearray)) else None
    pieces = produced if isinstance(produced, list) else [produced]
    for piece in pieces:
        data = piece if isinstance(piece, (bytes, bytearray)) else repr(piece).encode("utf-8", "replace")
        if CANARY_MARKER[:16] in data or (blob is not None and CANARY_MARKER[:16] in blob):
            return OpResult(name, "outside_read", "canary bytes in returned data")
    return OpResult(name, "ok")


def _reset_canary(case: HostileCase) -> None:
    """After a canary read was recorded, age the canary again so the next operation is judged on its own."""
    for path in case.canary_times:
        with contextlib.suppress(OSError):
            st = os.stat(path, follow_symlinks=False)
            os.utime(path, (st.st_mtime - 3600, st.st_mtime), follow_symlinks=False)
            case.canary_times[path] = os.stat(path, follow_symlinks=False).st_atime


# -- worker processes ------------------------------------------------------------------------------------
def _worker_main(conn: Connection, seeds: list[SeedDataset], bomb: str | None, limits: Limits,
                 env: dict[str, str]) -> None:
    """A worker: build and run the cases the parent sends, report each operation as it starts."""
    os.environ.update(env)
    limit = limits.address_space_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    work = Path(tempfile.mkdtemp(prefix="shardscope-fuzz-"))
    os.chdir(work)
    watch = OutsideWatch()
    import napari_shardscope.cli  # noqa: F401 - import before the first case so its time is not a case's

    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            seed = int(msg)
            case_dir = work / f"case-{seed}"
            try:
                try:
                    case = make_case(seed, seeds, case_dir, Path(bomb) if bomb else None)
                except Exception:  # a bug of the fuzzer, not of shardscope: reported, and the run goes on
                    result = CaseResult(seed, "?", "?", [], [OpResult("make_case", "generator_error",
                                                                      traceback.format_exc()[-300:],
                                                                      traceback.format_exc()[-4000:])])
                    conn.send(("done", seed, asdict(result)))
                    continue
                conn.send(("case", seed, (case.base, case.fmt, case.mutations)))
                result = run_case(case, random.Random(seed ^ 0x5EED), watch,
                                  lambda op, s=seed: conn.send(("op", s, op)))
            finally:
                shutil.rmtree(case_dir, ignore_errors=True)
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            if peak_mb > limits.rss_limit_mb:
                result.ops.append(OpResult("memory_peak", "memory", f"worker peak RSS {peak_mb:.0f} MiB"))
            conn.send(("done", seed, asdict(result)))
            if peak_mb > limits.rss_limit_mb:
                break  # a fresh worker, so the next case is judged on its own peak
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    seed: int | None = None
    op: str = ""
    since: float = 0.0
    case: tuple[str, str, list[str]] = ("?", "?", [])


class Pool:
    """Worker processes (spawned: no TensorStore threads are forked) with a watchdog per case."""

    def __init__(self, workers: int, seeds: list[SeedDataset], bomb: Path | None, limits: Limits) -> None:
        self.ctx = mp.get_context("spawn")
        self.n = workers
        self.seeds = seeds
        self.bomb = str(bomb) if bomb else None
        self.limits = limits
        self.workers: list[_Worker] = []

    def _start(self) -> _Worker:
        parent, child = self.ctx.Pipe()
        env = {"SHARDSCOPE_CACHE_MB": "64", "SHARDSCOPE_DEBUG": "0"}
        proc = self.ctx.Process(target=_worker_main, args=(child, self.seeds, self.bomb, self.limits, env),
                                daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    def run(self, seeds: Iterable[int], deadline: float | None = None) -> Iterable[CaseResult]:
        """Run a case per seed; yield each result (hangs and crashes as results too) as it ends."""
        todo = iter(seeds)
        self.workers = [self._start() for _ in range(self.n)]
        exhausted = False
        try:
            while True:
                for w in self.workers:
                    if w.seed is None and not exhausted:
                        if deadline is not None and time.monotonic() > deadline:
                            exhausted = True
                            continue
                        nxt = next(todo, None)
                        if nxt is None:
                            exhausted = True
                            continue
                        w.seed, w.op, w.since, w.case = nxt, "make_case", time.monotonic(), ("?", "?", [])
                        w.conn.send(nxt)
                busy = [w for w in self.workers if w.seed is not None]
                if not busy:
                    return
                ready = wait([w.conn for w in busy], timeout=min(0.5, self.limits.case_seconds))
                for w in busy:
                    if w.conn in ready:
                        yield from self._receive(w)
                    if w.seed is not None and time.monotonic() - w.since > self.limits.case_seconds:
                        yield self._lost(w, "hang", f"no result after {self.limits.case_seconds:g} s in {w.op}")
        finally:
            for w in self.workers:
                with contextlib.suppress(Exception):
                    w.conn.send(None)
            for w in self.workers:
                w.proc.join(timeout=5)
                if w.proc.is_alive():
                    w.proc.kill()

    def _receive(self, w: _Worker) -> Iterable[CaseResult]:
        try:
            kind, _seed, payload = w.conn.recv()
        except (EOFError, OSError):
            w.proc.join(timeout=5)
            yield self._lost(w, "crash", f"worker died (exit code {w.proc.exitcode}) in {w.op}")
            return
        if kind == "op":
            w.op = payload
            return
        if kind == "case":  # the limit counts from here: the worker's start-up and our generator are not the case's
            w.case = payload
            w.since = time.monotonic()
            return
        result = _result_from_dict(payload)
        w.seed = None
        if any(op.op == "memory_peak" for op in result.ops):  # the worker exits: replace it
            w.proc.join(timeout=10)
            self._replace(w)
        yield result

    def _lost(self, w: _Worker, outcome: str, detail: str) -> CaseResult:
        assert w.seed is not None
        w.proc.kill()
        w.proc.join(timeout=5)
        base, fmt, mutations = w.case
        result = CaseResult(w.seed, base, fmt, list(mutations), [OpResult(w.op, outcome, detail)])
        self._replace(w)
        return result

    def _replace(self, w: _Worker) -> None:
        fresh = self._start()
        w.proc, w.conn, w.seed, w.op = fresh.proc, fresh.conn, None, ""


def _result_from_dict(d: dict[str, Any]) -> CaseResult:
    ops = [OpResult(**op) for op in d.pop("ops")]
    return CaseResult(**d, ops=ops)


# -- the report -------------------------------------------------------------------------------------------
@dataclass
class Report:
    """Counts over a run, and every finding with the seed that reproduces it."""

    started: float = field(default_factory=time.time)
    wall_seconds: float = 0.0
    datasets: int = 0
    operations: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    by_format: dict[str, Counter[str]] = field(default_factory=dict)
    by_mutation: dict[str, Counter[str]] = field(default_factory=dict)
    by_operation: dict[str, Counter[str]] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: CaseResult) -> None:
        self.datasets += 1
        for op in result.ops:
            if op.op != "memory_peak":
                self.operations += 1
            self.outcomes[op.outcome] += 1
            self.by_format.setdefault(result.fmt, Counter())[op.outcome] += 1
            self.by_operation.setdefault(op.op, Counter())[op.outcome] += 1
            for kind in {m.split(":", 1)[0] for m in result.mutations}:
                self.by_mutation.setdefault(kind, Counter())[op.outcome] += 1
            if op.outcome in FINDING_CLASSES:
                self.findings.append({"seed": result.seed, "class": op.outcome, "op": op.op, "base": result.base,
                                      "mutations": result.mutations, "detail": op.detail, "trace": op.trace})

    def to_json(self, max_findings: int = 200) -> dict[str, Any]:
        rate = self.datasets / self.wall_seconds if self.wall_seconds else 0.0
        return {
            "datasets": self.datasets, "operations": self.operations, "wall_seconds": round(self.wall_seconds, 1),
            "datasets_per_second": round(rate, 2),
            "findings": len(self.findings),
            "outcomes": dict(self.outcomes.most_common()),
            "findings_by_class": {c: self.outcomes.get(c, 0) for c in FINDING_CLASSES},
            "by_format": {k: dict(v.most_common()) for k, v in sorted(self.by_format.items())},
            "by_operation": {k: dict(v.most_common()) for k, v in sorted(self.by_operation.items())},
            "by_mutation": {k: dict(v.most_common()) for k, v in sorted(self.by_mutation.items())},
            "finding_list": self.findings[:max_findings],
        }

    def summary(self) -> str:
        doc = self.to_json(max_findings=0)
        lines = [f"datasets {doc['datasets']}, operations {doc['operations']}, wall {doc['wall_seconds']} s, "
                 f"{doc['datasets_per_second']} datasets/s, findings {doc['findings']}",
                 "outcomes: " + json.dumps(doc["outcomes"]),
                 "findings by class: " + json.dumps(doc["findings_by_class"])]
        for title in ("by_format", "by_operation", "by_mutation"):
            lines.append(f"{title}:")
            lines.extend(f"  {k:14} {json.dumps(v)}" for k, v in doc[title].items())
        for f in self.findings[:50]:
            lines.append(f"FINDING seed={f['seed']} {f['class']} in {f['op']} ({f['base']}, {f['mutations']}): "
                         f"{f['detail'][:300]}")
        return "\n".join(lines)


def fuzz(seeds: Iterable[int], seed_datasets: list[SeedDataset], bomb: Path | None, *, workers: int = 2,
         limits: Limits = Limits(), deadline: float | None = None,
         on_result: Callable[[CaseResult], None] = lambda r: None) -> Report:
    """Run one hostile dataset per seed in ``workers`` processes; the report of the run."""
    report = Report()
    t0 = time.monotonic()
    for result in Pool(workers, seed_datasets, bomb, limits).run(seeds, deadline):
        report.add(result)
        on_result(result)
    report.wall_seconds = time.monotonic() - t0
    return report
