"""Hostile remotes: oversized documents and objects, zlib bombs with valid hashes, lying sizes.

A remote is a directory (or bucket) anyone with write access can fill; ``clone``, ``fetch`` and
``remote check`` must end every case in success or a typed :class:`ShardscopeError`, within a
memory and time bound, and a failed fetch must leave the local repository as it was. Each seed
copies one valid remote (a pushed labelmap repository, made once) and applies one or two
mutations; a worker process (address space limited, like the dataset fuzzer's) runs the three
operations on it, and the parent kills it past the case's CPU-time limit (or a generous wall-time backstop).

Findings come only from shardscope's code. A mutation whose input an earlier mutation of the case destroyed
(``refs.json`` made 5 GiB, or no longer JSON) is skipped and counted as skipped; anything else that fails
while the worker builds the case, or a worker that dies or stalls before it has, is a *harness error*,
reported apart (the case tested nothing, so the long run exits 2 and the CI tests fail on one).

    python -m tests.fuzz.remotes --minutes 10 [--seed 0]     # the long run
    pytest tests/fuzz/test_fuzz_remotes.py                  # the CI subset (seeded, short)

Kept apart from the dataset fuzzer (``runner.py``, ``hostile.py``) on purpose: its own generator,
its own worker, its own report, so the two evolve without touching each other.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import resource
import shutil
import stat
import sys
import tempfile
import time
import traceback
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from tests.fuzz.workers import worker_context

#: Address space of a worker: an unbounded allocation fails (MemoryError, or an abort we report) instead
#: of taking the machine down; TensorStore and LMDB reserve a lot of address space, hence not lower.
ADDRESS_SPACE_MB = 6144
#: Peak resident memory a case may add to its worker before it is a finding (a bomb's bound is tens of MB).
RSS_GROWTH_MB = 400
#: CPU time (user + system, every thread of the worker, read from ``/proc`` by the parent) a case's clone,
#: fetch and check of one small remote may use before it is a hang. CPU time, not wall time: on a loaded
#: machine (this one is shared, the campaign runs niced) a case waiting for a core is slow, not hung.
CASE_CPU_SECONDS = 60.0
#: Wall time for them: a backstop for a case blocked without spinning, generous for the same reason.
CASE_WALL_SECONDS = 600.0
#: Wall time a worker may take to start (spawn, imports) and build its case: the fuzzer's own time, so going
#: past it is a harness error, never a hang of shardscope.
BUILD_WALL_SECONDS = 600.0
#: A mutation reads no file larger than this: an earlier mutation of the same case may have made it a sparse
#: file of gigabytes, and reading it whole is what the remote must not make *shardscope* do, let alone us.
MAX_MUTATED_FILE_BYTES = 64 << 20


class Unmutable(Exception):
    """What a mutation damages is no longer there to damage: an earlier mutation of the same case truncated,
    grew or garbled it (``refs.json`` made 5 GiB or no longer JSON, say). The mutation is skipped and counted
    as such; it is never a finding, since no product code ran."""


class HarnessError(Exception):
    """The fuzzer itself failed (building a case, or reading the untouched local clone it fetches into):
    reported apart from the findings, which come only from shardscope's own code."""


def _object_path(remote: Path, name: str) -> Path:
    return remote / "objects" / name[:2] / name[2:]


def _put(remote: Path, data: bytes) -> str:
    name = hashlib.sha256(data).hexdigest()
    path = _object_path(remote, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return name


def _readable(path: Path) -> bytes:
    """The bytes of ``path``, or :class:`Unmutable` when an earlier mutation left nothing sane to read."""
    try:
        st = path.lstat()
    except FileNotFoundError as exc:
        raise Unmutable(f"{path.name} is gone") from exc
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MUTATED_FILE_BYTES:
        raise Unmutable(f"{path.name} is not a regular file of at most {MAX_MUTATED_FILE_BYTES} bytes")
    return path.read_bytes()


def _refs(remote: Path) -> dict[str, Any]:
    """The remote's refs document, if it still has the shape of the seed's (what every mutation relies on)."""
    try:
        doc: Any = json.loads(_readable(remote / "refs.json"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Unmutable(f"refs.json no longer parses ({type(exc).__name__})") from exc
    main = doc.get("branches", {}).get("main") if isinstance(doc, dict) and isinstance(doc.get("branches"), dict) \
        else None
    if not (isinstance(main, dict) and isinstance(main.get("node"), str) and isinstance(main.get("object"), str)
            and type(doc.get("seq")) is int and isinstance(doc.get("instances"), dict) and doc["instances"]
            and all(isinstance(v, dict) for v in doc["instances"].values())):
        raise Unmutable("refs.json parses but no longer has the seed's shape (branches.main, seq, instances)")
    checked: dict[str, Any] = doc
    return checked


def _write_refs(remote: Path, doc: dict[str, Any]) -> None:
    doc["seq"] = int(doc["seq"]) + 1
    (remote / "refs.json").write_text(json.dumps(doc))


def _bomb_stream(rng: random.Random) -> bytes:
    """A zlib stream of 64-600 MiB of one byte value, made 1 MiB at a time (a few hundred KB)."""
    packer = zlib.compressobj(9)
    block = bytes([rng.choice([0, 0x45, 0xFF])]) * (1 << 20)
    return b"".join(packer.compress(block) for _ in range(rng.randint(64, 600))) + packer.flush()


def _main_node(remote: Path) -> tuple[str, str]:
    ref = _refs(remote)["branches"]["main"]
    return str(ref["node"]), str(ref["object"])


def _on_top(remote: Path, data: list[str], entries: int, node_magic_payload: bytes | None = None) -> None:
    """A new version on ``main`` naming ``data`` objects (or a crafted node object), refs moved to it."""
    from napari_shardscope.core.versioned.remotes import pack as P

    parent, pobj = _main_node(remote)
    if node_magic_payload is None:
        header = {"uuid": "e" * 32, "parents": [[parent, pobj]], "branch": "main", "message": "hostile",
                  "created": 1.0, "committed": 2.0, "notes": [], "instances": ["seg", "notes"], "data": data,
                  "entries": entries, "logs": 0}
        node_magic_payload = P.NODE_MAGIC + zlib.compress(json.dumps(header).encode())
    name = _put(remote, node_magic_payload)
    doc = _refs(remote)
    doc["branches"]["main"] = {"node": "e" * 32, "object": name}
    _write_refs(remote, doc)


# -- mutations: each takes (remote directory, rng) ------------------------------------------------------

def huge_refs(remote: Path, rng: random.Random) -> None:
    os.truncate(remote / "refs.json", rng.choice([(16 << 20) + 1, 1 << 30, 5 << 30]))


def huge_ids(remote: Path, rng: random.Random) -> None:
    if not (remote / "ids.json").exists():
        (remote / "ids.json").write_text('{"seq": 1, "writer": "w", "counters": {"x": 5}}')
    os.truncate(remote / "ids.json", rng.choice([(16 << 20) + 1, 5 << 30]))


def _objects(remote: Path) -> list[Path]:
    """The remote's object files, sorted so that the seed decides (truncating one needs no read of it)."""
    objects = sorted(p for p in (remote / "objects").rglob("*") if p.is_file() and not p.is_symlink())
    if not objects:
        raise Unmutable("the remote holds no object files")
    return objects


def huge_object(remote: Path, rng: random.Random) -> None:
    os.truncate(rng.choice(_objects(remote)), rng.choice([(256 << 20) + 1, 5 << 30]))


def bomb_data(remote: Path, rng: random.Random) -> None:
    from napari_shardscope.core.versioned.remotes import pack as P

    _on_top(remote, [_put(remote, P.DATA_MAGIC + _bomb_stream(rng))], rng.choice([0, 1, 10**9]))


def bomb_node(remote: Path, rng: random.Random) -> None:
    from napari_shardscope.core.versioned.remotes import pack as P

    _on_top(remote, [], 0, P.NODE_MAGIC + _bomb_stream(rng))


def bomb_unversioned(remote: Path, rng: random.Random) -> None:
    from napari_shardscope.core.versioned.remotes import pack as P

    doc = _refs(remote)
    inst = rng.choice(sorted(doc["instances"]))
    doc["instances"][inst]["unversioned"] = _put(remote, P.KV_MAGIC + _bomb_stream(rng))
    doc["instances"][inst]["keys"] = rng.choice([1, 10**12])
    _write_refs(remote, doc)


def lying_counts(remote: Path, rng: random.Random) -> None:
    """A node (valid hash) declaring other record counts than its data holds, or a data object whose
    record lengths claim more bytes than it has."""
    from napari_shardscope.core.versioned.remotes import pack as P

    if rng.random() < 0.5:
        body = b"E" + rng.randbytes(2) + (rng.choice([2**32 - 1, 1 << 30, 7])).to_bytes(4, "big") + rng.randbytes(20)
        _on_top(remote, [_put(remote, P.DATA_MAGIC + zlib.compress(body))], 1)
    else:
        _on_top(remote, [], rng.choice([1, 2**62, -1]))


def lying_keys(remote: Path, rng: random.Random) -> None:
    doc = _refs(remote)
    for inst in doc["instances"].values():
        inst["keys"] = rng.choice([2**63, 10**9, -5])
    _write_refs(remote, doc)


def flipped_bytes(remote: Path, rng: random.Random) -> None:
    path = rng.choice([remote / "refs.json", *_objects(remote)])
    data = bytearray(_readable(path))  # a 5 GiB object or refs.json from an earlier mutation: skipped
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def lying_listing(remote: Path, rng: random.Random) -> None:
    """The head's key listing one byte off after its first value, everything hashed and linked as a writer with a
    bug would leave it: every hash holds, only the listed ranges are wrong."""
    from napari_shardscope.core.errors import ShardscopeError
    from tests.core.versioned.remotes.helpers import shift_head_listing

    try:
        shift_head_listing(str(remote))
    except (ShardscopeError, AssertionError, StopIteration) as exc:  # an earlier mutation left no sound head
        raise Unmutable(f"the head's listing could not be re-written ({type(exc).__name__})") from exc


Mutation = tuple[str, Callable[[Path, random.Random], None]]
#: The mutations of seeds below :data:`GENERATION_2` (the campaigns' seeds): never edited, so a seed a test or
#: the campaign table names still builds the case it named.
MUTATIONS: list[Mutation] = [
    ("huge_refs", huge_refs), ("huge_ids", huge_ids), ("huge_object", huge_object), ("bomb_data", bomb_data),
    ("bomb_node", bomb_node), ("bomb_unversioned", bomb_unversioned), ("lying_counts", lying_counts),
    ("lying_keys", lying_keys), ("flipped_bytes", flipped_bytes),
]
#: Seeds from here on pick from :data:`MUTATIONS` and the mutations added since (2026-12-05: ``lying_listing``).
GENERATION_2 = 6_000_000
MUTATIONS_2: list[Mutation] = [*MUTATIONS, ("lying_listing", lying_listing)]


def mutations_of(seed: int) -> list[Mutation]:
    """The mutations seed ``seed`` picks from (its generation's)."""
    return MUTATIONS if seed < GENERATION_2 else MUTATIONS_2


# -- the valid seed ------------------------------------------------------------------------------------------

#: What the valid remote's version UUIDs and clock are drawn from (:func:`build_seed`).
WORLD_SEED = 20261205
WORLD_EPOCH = 1_765_000_000.0


def build_seed(root: Path) -> Path:
    """A valid remote (main with two edits and a keyvalue), and a clone of it to fetch into; made once.

    Made the same, byte for byte, wherever and whenever it is built: version UUIDs come from a seeded
    generator and the clock reads a fixed epoch plus a millisecond per call while it is built. With UUIDs and
    times of the day, every object's name and bytes changed from one build to the next, so a mutation that
    picks "the third object" or "byte 1,234" damaged a different thing each run: a seed did not name a case,
    and a test asserting what a named seed's case does failed now and then (seed 5400161's flipped bytes once
    landed where nothing reads them). Only ``refs.json`` still differs between two builds: it names the base
    volume by its absolute path.
    """
    done = root / "seed-ready"
    if done.exists():
        return root
    ids = random.Random(WORLD_SEED)
    ticks = itertools.count()
    with mock.patch("uuid.uuid4", lambda: uuid.UUID(int=ids.getrandbits(128), version=4)), \
            mock.patch("time.time", lambda: WORLD_EPOCH + next(ticks) / 1000):
        return _build_seed(root, done)


def _build_seed(root: Path, done: Path) -> Path:
    from napari_shardscope.core.versioned import remotes as R
    from tests.core.versioned.remotes.helpers import edit, make_repo, write_base

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    write_base(root / "seg")
    repo = make_repo(root / "a", root / "seg")
    R.add_remote(repo, "origin", str(root / "remote"))
    R.push(repo)
    # fetches go into copies of this clone; SQLite, because LMDB reserves more address space than a worker has
    R.clone(str(root / "remote"), root / "clone", engine="sqlite")
    rng = __import__("numpy").random.default_rng(3)
    for kind in ("merge", "cleave"):
        edit(repo, kind, rng)
    R.push(repo)
    repo.close()
    done.write_text("ok")
    return root


# -- one case -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuiltCase:
    """The mutations a case applied, and those skipped because an earlier one destroyed their input."""

    applied: list[str]
    skipped: list[str]


@dataclass
class RemoteCaseResult:
    seed: int
    mutations: list[str] = field(default_factory=list)
    #: Mutations not applied: their input was gone or garbled by an earlier mutation of the case.
    skipped: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)  # operation -> ok | typed class | finding
    #: Only shardscope's own code produces these: an untyped error, a crash or hang after the case was
    #: built, a memory bound passed, a refused fetch that changed the repository, a partial clone.
    findings: list[str] = field(default_factory=list)
    #: The fuzzer's own failures (building the case, or the untouched local clone): never findings.
    harness_errors: list[str] = field(default_factory=list)
    #: The worker's peak resident memory (VmHWM, MiB); 0 when it was not learned.
    peak_rss_mb: float = 0.0


def make_remote_case(seed: int, seed_root: Path, work: Path) -> BuiltCase:
    """Copy the seed remote and its clone into ``work`` and damage the remote; the mutations applied."""
    rng = random.Random(seed)
    shutil.copytree(seed_root / "remote", work / "remote")
    shutil.copytree(seed_root / "clone", work / "clone", symlinks=True)
    config = work / "clone" / "remotes.json"  # the copy fetches from the damaged copy, not the seed
    doc = json.loads(config.read_text())
    doc["remotes"]["origin"]["url"] = str(work / "remote")
    config.write_text(json.dumps(doc))
    applied, skipped = [], []
    # the first mutation cycles with the seed, so any len(pool) consecutive seeds cover them all
    pool = mutations_of(seed)
    picks = [seed % len(pool)] + ([rng.randrange(len(pool))] if rng.random() < 0.3 else [])
    for pick in picks:
        name, mutate = pool[pick]
        try:
            mutate(work / "remote", rng)
        except Unmutable:  # an earlier mutation destroyed what this one damages; any other error is a bug of ours
            skipped.append(name)
            continue
        applied.append(name)
    return BuiltCase(applied, skipped)


def _repo_state(repo: Any) -> tuple[Any, ...]:
    from napari_shardscope.core.versioned import remotes as R

    return [v.uuid for v in repo.versions()], repo.branches(), R.load_state(repo, "origin").to_json()


def _every_value(path: Path) -> dict[tuple[str, str, bytes], bytes | None]:
    """Every value each branch head of the repository at ``path`` reads (lazy values downloaded as read)."""
    from napari_shardscope.core.versioned import open_repository

    repo = open_repository(path)
    try:
        out: dict[tuple[str, str, bytes], bytes | None] = {}
        for branch in repo.branches():
            with repo.read(branch.name) as view:
                for inst in repo.instances():
                    out.update(((branch.name, inst.name, k), view.get(inst.name, k)) for k in view.keys(inst.name))
        return out
    finally:
        repo.close()


def run_remote_case(work: Path) -> dict[str, str]:
    """clone, read, fetch (into a copy of a clone) and check the damaged remote; the outcome of each.

    A lazy clone that succeeded is read whole (``read``: every value of every branch head, downloaded as read)
    and compared with a prefetching clone's values (``prefetch``): a lazy read that returns other values than
    the data objects hold is a finding (``lazy_differs``), where a typed refusal is an outcome.

    ``check`` is ``ok`` for a remote :func:`verify_remote` calls sound and ``problems_found`` when it lists
    problems. Clones are lazy, so a clone may succeed on a remote check faults (a damaged object of an old
    version is read only when that version is); the other way round is a finding: a typed refusal by
    clone or fetch of a remote that check called sound means check missed the damage.

    Every call into shardscope is guarded and its outcome recorded; the one step that is the harness's (opening
    the untouched copy of the seed's clone before the fetch) raises :class:`HarnessError` instead.
    """
    from napari_shardscope.core.errors import ShardscopeError
    from napari_shardscope.core.versioned import open_repository
    from napari_shardscope.core.versioned import remotes as R
    from napari_shardscope.core.versioned.remotes.verify import verify_remote

    remote = str(work / "remote")
    outcomes: dict[str, str] = {}
    from tests.fuzz.runner import own_peak_rss_mb

    # The worker's own peak (VmHWM), not ru_maxrss: a spawned worker inherits its parent's ru_maxrss, and
    # under a parent that once held more than this case allocates the growth would read 0.
    base_rss = own_peak_rss_mb() or 0.0

    def attempt(op: str, fn: Callable[[], object]) -> None:
        try:
            fn()
            outcomes[op] = "ok"
        except ShardscopeError as exc:
            outcomes[op] = type(exc).__name__
        except BaseException as exc:
            outcomes[op] = f"FINDING untyped {type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
        grown = (own_peak_rss_mb() or 0.0) - base_rss
        if grown > RSS_GROWTH_MB:
            outcomes[op] = f"FINDING memory: peak RSS grew {grown:.0f} MiB in {op} ({outcomes[op][:80]})"

    attempt("clone", lambda: R.clone(remote, work / "cloned", engine="sqlite"))
    if outcomes["clone"] != "ok" and (work / "cloned").exists():
        outcomes["clone"] = "FINDING partial: a failed clone left its destination"
    if outcomes["clone"] == "ok":
        values: dict[str, dict[tuple[str, str, bytes], bytes | None]] = {}
        attempt("read", lambda: values.update(lazy=_every_value(work / "cloned")))
        attempt("prefetch", lambda: (R.clone(remote, work / "eager", engine="sqlite", prefetch=True),
                                     values.update(eager=_every_value(work / "eager"))))
        if len(values) == 2 and values["lazy"] != values["eager"]:
            differ = sorted(k for k in values["lazy"].keys() | values["eager"].keys()
                            if values["lazy"].get(k) != values["eager"].get(k))
            outcomes["read"] = (f"FINDING lazy_differs: a lazy clone read other values than a prefetching one "
                                f"({len(differ)} keys, e.g. {differ[:2]})")
    try:  # a copy of the seed's clone, which no mutation touches: failing here tests nothing hostile
        repo = open_repository(work / "clone")
        before = _repo_state(repo)
    except BaseException as exc:
        raise HarnessError(f"the untouched local clone did not open: {type(exc).__name__}: {exc}") from exc
    try:
        attempt("fetch", lambda: R.fetch(repo, "origin"))
        after = _repo_state(repo)
        if outcomes["fetch"] != "ok" and after != before and not outcomes["fetch"].startswith("FINDING"):
            outcomes["fetch"] = f"FINDING partial: a refused fetch ({outcomes['fetch']}) changed the repository"
    except BaseException as exc:
        outcomes["fetch"] = (f"FINDING unreadable: after fetch ({outcomes.get('fetch', '?')[:80]}) the repository "
                             f"no longer reads: {type(exc).__name__}: {exc}")
    finally:
        try:
            repo.close()
        except BaseException as exc:
            outcomes["fetch"] = f"FINDING close: after fetch the repository did not close: {type(exc).__name__}: {exc}"
    problems: list[str] = []
    attempt("check", lambda: problems.extend(verify_remote(remote)))
    if outcomes["check"] == "ok" and problems:
        outcomes["check"] = "problems_found"  # `remote check` reports them and exits non-zero
    refused = {op: o for op, o in outcomes.items() if op != "check" and o not in ("ok", "problems_found")
               and not o.startswith("FINDING")}
    if outcomes["check"] == "ok" and refused:  # a sound remote per check, yet clone or fetch refused it
        outcomes["check"] = f"FINDING check_missed: remote check found nothing, but {refused} refused the remote"
    return outcomes


def _worker(conn: Any, seed: int, seed_root: str, work: str) -> None:
    """Build the case (the harness's part), say so, then run it (shardscope's part) and send the outcomes.

    The parent tells the two parts apart by the ``built`` message: whatever goes wrong before it (an error,
    a death, a slow start) is the fuzzer's, and only what happens after it can be a finding.
    """
    limit = ADDRESS_SPACE_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        import napari_shardscope.core.versioned.remotes.verify  # noqa: F401 - imports are not the case's time

        case = make_remote_case(seed, Path(seed_root), Path(work))
    except BaseException:
        conn.send(("harness_error", f"building the case: {traceback.format_exc()[-1500:]}"))
        return
    conn.send(("built", case.applied, case.skipped))
    from tests.fuzz.runner import own_peak_rss_mb

    try:
        outcomes = run_remote_case(Path(work))
    except BaseException:
        conn.send(("harness_error", f"running the case: {traceback.format_exc()[-1500:]}"))
        return
    conn.send(("outcomes", outcomes, own_peak_rss_mb() or 0.0))


def _watch(proc: Any, conn: Any, result: RemoteCaseResult, *, cpu_seconds: float, wall_seconds: float,
           build_seconds: float) -> bool:
    """Read the worker's messages into ``result`` until it is done; whether the case was built."""
    from tests.fuzz.runner import process_cpu_seconds, process_peak_rss_mb

    started = time.monotonic()
    built_at: float | None = None
    cpu_at_build = 0.0
    while True:
        if conn.poll(0.5):
            try:
                kind, *value = conn.recv()
            except EOFError:
                return built_at is not None  # the worker is gone; the caller judges how it ended
            if kind == "built":
                result.mutations, result.skipped = value
                built_at, cpu_at_build = time.monotonic(), process_cpu_seconds(proc.pid) or 0.0
            elif kind == "harness_error":
                result.harness_errors.append(value[0])
                return built_at is not None
            else:
                result.outcomes, result.peak_rss_mb = value
                return True
            continue
        if not proc.is_alive() and not conn.poll(0):
            return built_at is not None
        now = time.monotonic()
        if built_at is None:
            if now - started > build_seconds:
                proc.kill()
                result.harness_errors.append(f"the worker did not build the case in {build_seconds:g} s of wall time")
                return False
            continue
        cpu = (process_cpu_seconds(proc.pid) or cpu_at_build) - cpu_at_build
        if cpu > cpu_seconds or now - built_at > wall_seconds:
            result.peak_rss_mb = process_peak_rss_mb(proc.pid) or 0.0
            proc.kill()
            result.findings.append(f"hang: {cpu:.1f} s of CPU time (limit {cpu_seconds:g} s), {now - built_at:.0f} s "
                                   f"of wall time (backstop {wall_seconds:g} s) without an outcome")
            return True


def fuzz_remotes(seeds: Iterable[int], seed_root: Path, *, cpu_seconds: float = CASE_CPU_SECONDS,
                 wall_seconds: float = CASE_WALL_SECONDS,
                 build_seconds: float = BUILD_WALL_SECONDS) -> list[RemoteCaseResult]:
    """Run each seed's case in its own worker process (one at a time); a result per seed.

    Workers come from :func:`~tests.fuzz.workers.worker_context`: forks of a server that imported what a
    case runs, so a case no longer pays a fresh interpreter's imports (17.4 -> 11.0 CPU s for this file's tests).
    """
    build_seed(seed_root)
    ctx = worker_context()
    results = []
    for seed in seeds:
        work = Path(tempfile.mkdtemp(prefix="shardscope-fuzz-remote-"))
        result = RemoteCaseResult(seed)
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(child, seed, str(seed_root), str(work)), daemon=True)
        proc.start()
        child.close()
        try:
            built = _watch(proc, parent, result, cpu_seconds=cpu_seconds, wall_seconds=wall_seconds,
                           build_seconds=build_seconds)
        finally:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join(30)
            parent.close()
        if not result.outcomes and not result.harness_errors and not result.findings:
            if built:  # only shardscope's code ran after the case was built
                result.findings.append(f"crash: the worker exited with {proc.exitcode} and no outcome")
            else:
                result.harness_errors.append(f"the worker exited with {proc.exitcode} before building the case")
        result.findings += [f"{op}: {o}" for op, o in result.outcomes.items() if o.startswith("FINDING")]
        shutil.rmtree(work, ignore_errors=True)
        results.append(result)
    return results


def summary(results: list[RemoteCaseResult], wall_seconds: float | None = None) -> str:
    """Counts over a run (as the campaign table reports them), then every finding and harness error."""
    applied = Counter(m for r in results for m in r.mutations)
    skipped = Counter(m for r in results for m in r.skipped)
    outcomes = Counter(o.split(":")[0] for r in results for o in r.outcomes.values())
    findings = [f"seed={r.seed} {r.mutations}: {f[:300]}" for r in results for f in r.findings]
    harness = [f"seed={r.seed}: {e[-300:]}" for r in results for e in r.harness_errors]
    wall = f" in {wall_seconds:.0f} s" if wall_seconds is not None else ""
    return "\n".join([
        f"{len(results)} hostile remotes, {sum(outcomes.values())} operations{wall}; "
        f"peak worker RSS {max((r.peak_rss_mb for r in results), default=0.0):.0f} MiB",
        f"outcomes {dict(outcomes.most_common())}",
        f"mutations applied {dict(applied.most_common())}; "
        f"skipped {sum(skipped.values())} {dict(skipped.most_common())} (an earlier mutation destroyed their input)",
        f"{len(findings)} finding(s)", *findings,
        f"{len(harness)} harness error(s) (the fuzzer's own; not findings, but the case tested nothing)", *harness])


def main(argv: list[str] | None = None) -> int:
    """Run seeds from ``--seed`` on until ``--minutes`` pass: exit 1 on a finding, 2 on harness errors only."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seed-dir", type=Path, default=Path(tempfile.gettempdir()) / "shardscope-fuzz-remote-seed")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60
    results: list[RemoteCaseResult] = []
    seed = args.seed
    while time.monotonic() < deadline:
        (result,) = fuzz_remotes([seed], args.seed_dir)
        results.append(result)
        print(f"seed={seed} {result.mutations} skipped={result.skipped} "
              f"{ {op: o.split(':')[0] for op, o in result.outcomes.items()} } findings={len(result.findings)} "
              f"harness_errors={len(result.harness_errors)} rss={result.peak_rss_mb:.0f}", file=sys.stderr, flush=True)
        seed += 1
    print(summary(results, time.monotonic() - t0))
    if any(r.findings for r in results):
        return 1
    return 2 if any(r.harness_errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
