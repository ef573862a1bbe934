"""Run hostile datasets through every entry point in worker processes and sort what comes out.

The rules under test: only :class:`~napari_shardscope.core.errors.ShardscopeError` subclasses leave
an entry point; nothing hangs, crashes the process, allocates without bound or touches a path
outside the dataset root. Each rule has a detector here:

* **untyped** — an operation raised something that is not a ``ShardscopeError`` (or the CLI exited
  70, its code for one): the type, message, traceback and seed are kept;
* **hang** — a case used more than ``cpu_seconds`` of CPU time (its worker's user + system time,
  all threads, read from ``/proc``), or more than ``wall_seconds`` of wall time (a backstop for a
  case blocked without spinning, on a FIFO say): the parent kills the worker (the operation it was
  in is known from the worker's last message) and starts a new one. CPU time, not wall time, is
  the measure: on a loaded machine a case that waits for a core is slow, not hung;
* **crash** — the worker process died (a segfault or an abort in C++ code);
* **memory** — a ``MemoryError`` (workers run under an address-space limit), or an operation during
  which the worker's peak resident memory passed ``rss_limit_mb`` (the finding is that operation's;
  the worker is then replaced, so the next case starts from a clean peak). The peak is the
  process's own (``VmHWM``), never ``getrusage``'s ``ru_maxrss``: a spawned worker inherits the
  latter from its parent (Linux keeps it across ``fork`` and ``exec``), so under a pytest process
  that once held 1.7 GiB every case looked like a 1.7 GiB allocation;
* **generator_error** — building the case failed: a bug of the fuzzer itself, reported so that it
  cannot hide damage it was meant to make;
* **outside_read** — an audit hook saw Python open, list or change a path that resolves (links
  followed) outside the dataset root, or a canary outside the root was read (its access time moved:
  this catches TensorStore's C++ reads, which audit hooks do not see), or the canary's bytes came
  back in returned data or CLI output.

* **wrong_data** — a case whose only mutations are header lies a decoder must catch or undo exactly
  (``codec_header`` of compresso, gzip, N5 LZ4 streams) read, without an error, other voxels than
  the unmutated seed holds.

Everything else is an outcome class: ``ok``, ``check_failed`` (validate found problems) or the
typed error's group (``not_found``, ``corrupt``, ``unsupported``, ``argument``, ``store``, …).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import random
import re
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
FINDING_CLASSES = ("untyped", "hang", "crash", "memory", "outside_read", "generator_error", "wrong_data")

#: Bounds of the bounded operations (a hostile index may claim 2⁶⁴ chunks; we look at the first few).
MAX_RECORDS = 200
MAX_NODES = 60


@dataclass(frozen=True)
class Limits:
    """What a case may cost before it is a finding."""

    #: CPU time (user + system, every thread of the worker) for all the operations on one dataset.
    cpu_seconds: float = 20.0
    #: Wall time for them: a backstop for a case that blocks without using the CPU, generous so that a
    #: loaded machine (cases waiting for a core) never makes a slow case look hung.
    wall_seconds: float = 300.0
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
    #: The worker's peak resident memory after the case (MiB; 0 when unknown).
    peak_rss_mb: float = 0.0

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
def operations(case: HostileCase, rng: random.Random,
               regions: list[tuple[int, int, tuple[Any, ...]]] | None = None) -> list[tuple[str, Callable[[], Any]]]:
    """The entry points to call on ``case.root``: each returns what it produced (checked for the canary).

    ``regions`` collects ``(volume, level, index)`` of each region ``read_regions`` read, in order.
    """
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
        for v, vol in enumerate(open_volumes(root)):
            for lv, level in enumerate(vol.levels):
                arr = level.array
                index = tuple(_random_slice(rng, n) for n in arr.shape)
                if regions is not None:
                    regions.append((v, lv, index))
                out.append(np.asarray(arr[index]).tobytes())
        return out

    def expand_layout() -> Any:
        tree = open_layout(root)
        pending, seen = list(tree.roots()), list[str]()
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


#: Environment variable a worker reads for :func:`fuzz`'s ``probe`` (the watchdog's tests).
PROBE_ENV = "SHARDSCOPE_FUZZ_PROBE"


def probe_operation(probe: str) -> tuple[str, Callable[[], Any]]:
    """The operation a probe names: ``busy:S`` (spin the CPU ``S`` seconds), ``sleep:S``, or ``alloc:M``
    (allocate and touch ``M`` MiB, then free them: what an unbounded allocation looks like to the
    peak-memory detector)."""
    kind, _, seconds = probe.partition(":")
    duration = float(seconds or 1)

    def run() -> Any:
        end = time.monotonic() + duration
        if kind == "alloc":
            block = bytearray(int(duration) << 20)
            block[::4096] = b"\x01" * len(range(0, len(block), 4096))  # every page resident
            return len(block)
        if kind == "sleep":
            time.sleep(duration)
            return None
        n = 0
        while time.monotonic() < end:
            n += 1
        return n

    return f"probe_{kind}", run


_EXACT_DETAIL = re.compile(r"@\d+:(\w+)\.")


def promises_exact_reads(case: HostileCase) -> bool:
    """Whether every mutation of ``case`` is a header lie a read must refuse or undo exactly.

    True for ``codec_header`` mutations of the stream kinds in
    :data:`tests.fuzz.decoders.EXACT_STREAM_KINDS` (compresso: each field pinned by another;
    gzip, N5's LZ4 blocks: checksums): a read that does not raise must give the seed's voxels.
    """
    from tests.fuzz.decoders import EXACT_STREAM_KINDS

    kinds = []
    for mutation in case.mutations:
        name, _, detail = mutation.partition(":")
        found = _EXACT_DETAIL.search(detail) if name == "codec_header" else None
        if found is None:
            return False
        kinds.append(found.group(1))
    return bool(kinds) and all(k in EXACT_STREAM_KINDS for k in kinds)


def read_pristine(pristine: Path, regions: list[tuple[int, int, tuple[Any, ...]]]) -> list[bytes]:
    """The same regions read from the unmutated seed dataset (what an exact decoder must give)."""
    import numpy as np

    from napari_shardscope.core.volumes import open_volumes

    volumes = open_volumes(str(pristine))
    return [np.asarray(volumes[v].levels[lv].array[index]).tobytes() for v, lv, index in regions]


def run_case(case: HostileCase, rng: random.Random, watch: OutsideWatch,
             started: Callable[[str], None] = lambda op: None, probe: str | None = None,
             pristine: Path | None = None, rss_limit_mb: float | None = None) -> CaseResult:
    """Every operation on ``case``, each outcome classified; ``started`` is told each operation's name first.

    ``pristine`` is the unmutated seed: when every mutation promises exact reads
    (:func:`promises_exact_reads`), regions read without an error must equal the seed's, else the
    read is a ``wrong_data`` finding (a decoder that did not raise gave other voxels).

    ``rss_limit_mb``: the operation during which this process's peak resident memory
    (:func:`own_peak_rss_mb`) first passes it is a ``memory`` finding, whatever it returned (the
    peak only grows, so the first operation after which it is over the limit is the one that
    allocated). ``result.peak_rss_mb`` is the peak after the case.
    """
    result = CaseResult(case.seed, case.base, case.fmt, list(case.mutations))
    t0 = time.monotonic()
    regions: list[tuple[int, int, tuple[Any, ...]]] = []
    ops = operations(case, rng, regions)
    if probe:
        ops.insert(0, probe_operation(probe))
    exact = pristine is not None and promises_exact_reads(case)
    for name, call in ops:
        started(name)
        produced: Any = None
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
        if exact and name == "read_regions" and op.outcome == "ok" and pristine is not None:
            expected = read_pristine(pristine, regions)
            if produced != expected:
                bad = sum(a != b for a, b in zip(produced, expected, strict=False))
                op = OpResult(name, "wrong_data", f"{bad} of {len(expected)} regions decoded without an error to "
                                                  "other voxels than the seed's")
        peak = own_peak_rss_mb()
        if rss_limit_mb is not None and peak is not None and peak > rss_limit_mb and op.outcome not in FINDING_CLASSES \
                and not any(o.outcome == "memory" for o in result.ops):
            op = OpResult(name, "memory", f"worker peak RSS {peak:.0f} MiB after this operation (limit "
                                          f"{rss_limit_mb:g} MiB); it ended as {op.outcome}", op.detail)
        result.ops.append(op)
    result.seconds = time.monotonic() - t0
    result.peak_rss_mb = round(own_peak_rss_mb() or 0.0, 1)
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


# -- CPU time ----------------------------------------------------------------------------------------------
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (all its threads), from ``/proc``; ``None`` when it is gone.

    Read by the parent, so a worker stuck in C code (which could not report anything) is measured too.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        try:  # pragma: no cover - not Linux: psutil, if it is there
            import psutil

            times = psutil.Process(pid).cpu_times()
            return float(times.user + times.system)
        except Exception:
            return None
    fields = stat[stat.rindex(b")") + 2:].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14 and 15)


def process_peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory of process ``pid`` (``VmHWM``) in MiB; ``None`` when unknown.

    ``VmHWM`` belongs to the process's own address space, which ``exec`` makes new: unlike
    ``getrusage``'s ``ru_maxrss``, it is not inherited from the parent that spawned the process.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def own_peak_rss_mb() -> float | None:
    """This process's own peak resident memory in MiB (see :func:`process_peak_rss_mb`)."""
    return process_peak_rss_mb(os.getpid())


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

    conn.send(("ready", None, None))  # the parent starts a case's clocks from here, not from the spawn
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
                peak = own_peak_rss_mb()
                if peak is not None and peak > limits.rss_limit_mb:  # the fuzzer's own allocation, not a case's
                    result = CaseResult(seed, case.base, case.fmt, list(case.mutations),
                                        [OpResult("make_case", "generator_error",
                                                  f"worker peak RSS {peak:.0f} MiB after building the case "
                                                  f"(limit {limits.rss_limit_mb} MiB)")], peak_rss_mb=peak)
                    conn.send(("done", seed, asdict(result)))
                    break
                pristine = next((s.path for s in seeds if s.name == case.base), None)

                def started(op: str, s: int = seed) -> None:
                    conn.send(("op", s, op))

                result = run_case(case, random.Random(seed ^ 0x5EED), watch, started, probe=env.get(PROBE_ENV),
                                  pristine=pristine, rss_limit_mb=limits.rss_limit_mb)
            finally:
                shutil.rmtree(case_dir, ignore_errors=True)
            conn.send(("done", seed, asdict(result)))
            if result.peak_rss_mb > limits.rss_limit_mb:
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
    cpu_since: float = 0.0
    case: tuple[str, str, list[str]] = ("?", "?", [])
    #: The worker finished its imports (until then only :data:`STARTUP_WALL_SECONDS` bounds it).
    ready: bool = False


#: How long a worker may take to start (spawn and imports) on a loaded machine: not a case's time, so the
#: per-case limits do not apply to it (a 5 s wall-time backstop once reported a slow start as a hang).
STARTUP_WALL_SECONDS = 600.0


class Pool:
    """Worker processes (forks of a preloaded server, :func:`~tests.fuzz.workers.worker_context`: no
    TensorStore thread of the test process is forked) with a watchdog per case."""

    def __init__(self, workers: int, seeds: list[SeedDataset], bomb: Path | None, limits: Limits,
                 probe: str | None = None) -> None:
        from tests.fuzz.workers import worker_context

        self.ctx = worker_context()
        self.n = workers
        self.seeds = seeds
        self.bomb = str(bomb) if bomb else None
        self.limits = limits
        self.probe = probe
        self.workers: list[_Worker] = []

    def _start(self) -> _Worker:
        parent, child = self.ctx.Pipe()
        env = {"SHARDSCOPE_CACHE_MB": "64", "SHARDSCOPE_DEBUG": "0", **({PROBE_ENV: self.probe} if self.probe else {})}
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
                        w.seed, w.op, w.case = nxt, "make_case", ("?", "?", [])
                        self._clock(w)
                        w.conn.send(nxt)
                busy = [w for w in self.workers if w.seed is not None]
                if not busy:
                    return
                ready = wait([w.conn for w in busy], timeout=min(0.5, self.limits.cpu_seconds))
                for w in busy:
                    if w.conn in ready:
                        yield from self._receive(w)
                    if w.seed is not None:
                        hung = self._hung(w)
                        if hung is not None:
                            yield self._lost(w, "hang", hung)
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
        if kind == "ready":
            w.ready = True
            if w.seed is not None:
                self._clock(w)
            return
        if kind == "op":
            w.op = payload
            return
        if kind == "case":  # the limit counts from here: the worker's start-up and our generator are not the case's
            w.case = payload
            self._clock(w)
            return
        result = _result_from_dict(payload)
        w.seed = None
        if result.peak_rss_mb > self.limits.rss_limit_mb:  # the worker exits: replace it
            w.proc.join(timeout=10)
            self._replace(w)
        yield result

    def _clock(self, w: _Worker) -> None:
        """Start the case's clocks: wall time, and the worker's CPU time so far."""
        w.since = time.monotonic()
        w.cpu_since = process_cpu_seconds(w.proc.pid) or 0.0

    def _hung(self, w: _Worker) -> str | None:
        """Why the worker's case counts as hung (CPU limit, or the wall-time backstop), or ``None``."""
        if not w.ready:
            wall = time.monotonic() - w.since
            if wall > STARTUP_WALL_SECONDS:
                return f"the worker did not start (imports) in {wall:.0f} s of wall time"
            return None
        cpu = process_cpu_seconds(w.proc.pid)
        if cpu is not None and cpu - w.cpu_since > self.limits.cpu_seconds:
            return f"{cpu - w.cpu_since:.1f} s of CPU time (limit {self.limits.cpu_seconds:g} s) in {w.op}"
        wall = time.monotonic() - w.since
        if wall > self.limits.wall_seconds:
            return f"no result after {wall:.0f} s of wall time (backstop {self.limits.wall_seconds:g} s) in {w.op}"
        return None

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
        w.proc, w.conn, w.seed, w.op, w.ready = fresh.proc, fresh.conn, None, "", False


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
    #: Cases per seed dataset, and the (format, mutation kind) pairs the cases were (what a run covered).
    by_base: Counter[str] = field(default_factory=Counter)
    format_mutations: set[tuple[str, str]] = field(default_factory=set)
    findings: list[dict[str, Any]] = field(default_factory=list)
    #: The highest peak resident memory a worker reported (MiB).
    peak_rss_mb: float = 0.0

    def add(self, result: CaseResult) -> None:
        self.datasets += 1
        self.peak_rss_mb = max(self.peak_rss_mb, result.peak_rss_mb)
        self.by_base[result.base] += 1
        self.format_mutations.update((result.fmt, m.split(":", 1)[0]) for m in result.mutations)
        for op in result.ops:
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
            "peak_worker_rss_mb": round(self.peak_rss_mb, 1),
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
                 f"{doc['datasets_per_second']} datasets/s, findings {doc['findings']}, "
                 f"peak worker RSS {doc['peak_worker_rss_mb']} MiB",
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
         on_result: Callable[[CaseResult], None] = lambda r: None, probe: str | None = None) -> Report:
    """Run one hostile dataset per seed in ``workers`` processes; the report of the run.

    ``probe`` (tests of the watchdog only) adds an operation before the others: ``busy:S`` spins the
    CPU for ``S`` seconds, ``sleep:S`` sleeps that long.
    """
    report = Report()
    t0 = time.monotonic()
    for result in Pool(workers, seed_datasets, bomb, limits, probe).run(seeds, deadline):
        report.add(result)
        on_result(result)
    report.wall_seconds = time.monotonic() - t0
    return report
