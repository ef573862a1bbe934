"""Hostile remotes: oversized documents and objects, zlib bombs with valid hashes, lying sizes.

A remote is a directory (or bucket) anyone with write access can fill; ``clone``, ``fetch`` and
``remote check`` must end every case in success or a typed :class:`ShardscopeError`, within a
memory and time bound, and a failed fetch must leave the local repository as it was. Each seed
copies one valid remote (a pushed labelmap repository, made once) and applies one or two
mutations; a worker process (address space limited, like the dataset fuzzer's) runs the three
operations on it, and the parent kills it at the case's time limit.

    python -m tests.fuzz.remotes --minutes 10 [--seed 0]     # the long run
    pytest tests/fuzz/test_fuzz_remotes.py                  # the CI subset (seeded, short)

Kept apart from the dataset fuzzer (``runner.py``, ``hostile.py``) on purpose: its own generator,
its own worker, its own report, so the two evolve without touching each other.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Address space of a worker: an unbounded allocation fails (MemoryError, or an abort we report) instead
#: of taking the machine down; TensorStore and LMDB reserve a lot of address space, hence not lower.
ADDRESS_SPACE_MB = 6144
#: Peak resident memory a case may add to its worker before it is a finding (a bomb's bound is tens of MB).
RSS_GROWTH_MB = 400
#: Wall time per case (clone, fetch and check of one small remote).
CASE_SECONDS = 60.0


def _object_path(remote: Path, name: str) -> Path:
    return remote / "objects" / name[:2] / name[2:]


def _put(remote: Path, data: bytes) -> str:
    name = hashlib.sha256(data).hexdigest()
    path = _object_path(remote, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return name


def _refs(remote: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((remote / "refs.json").read_bytes())
    return doc


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


def huge_object(remote: Path, rng: random.Random) -> None:
    objects = sorted(p for p in (remote / "objects").rglob("*") if p.is_file())
    os.truncate(rng.choice(objects), rng.choice([(256 << 20) + 1, 5 << 30]))


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
    targets = [remote / "refs.json", *sorted(p for p in (remote / "objects").rglob("*") if p.is_file())]
    path = rng.choice(targets)
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


MUTATIONS: list[tuple[str, Callable[[Path, random.Random], None]]] = [
    ("huge_refs", huge_refs), ("huge_ids", huge_ids), ("huge_object", huge_object), ("bomb_data", bomb_data),
    ("bomb_node", bomb_node), ("bomb_unversioned", bomb_unversioned), ("lying_counts", lying_counts),
    ("lying_keys", lying_keys), ("flipped_bytes", flipped_bytes),
]


# -- the valid seed ------------------------------------------------------------------------------------------

def build_seed(root: Path) -> Path:
    """A valid remote (main with two edits and a keyvalue), and a clone of it to fetch into; made once."""
    done = root / "seed-ready"
    if done.exists():
        return root
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

@dataclass
class RemoteCaseResult:
    seed: int
    mutations: list[str]
    outcomes: dict[str, str] = field(default_factory=dict)  # operation -> ok | typed class | finding
    findings: list[str] = field(default_factory=list)


def make_remote_case(seed: int, seed_root: Path, work: Path) -> list[str]:
    """Copy the seed remote and its clone into ``work`` and damage the remote; the mutations applied."""
    rng = random.Random(seed)
    shutil.copytree(seed_root / "remote", work / "remote")
    shutil.copytree(seed_root / "clone", work / "clone", symlinks=True)
    config = work / "clone" / "remotes.json"  # the copy fetches from the damaged copy, not the seed
    doc = json.loads(config.read_text())
    doc["remotes"]["origin"]["url"] = str(work / "remote")
    config.write_text(json.dumps(doc))
    applied = []
    # the first mutation cycles with the seed, so any len(MUTATIONS) consecutive seeds cover them all
    picks = [seed % len(MUTATIONS)] + ([rng.randrange(len(MUTATIONS))] if rng.random() < 0.3 else [])
    for pick in picks:
        name, mutate = MUTATIONS[pick]
        try:
            mutate(work / "remote", rng)
        except (FileNotFoundError, KeyError, IndexError):
            continue  # an earlier mutation removed what this one damages
        applied.append(name)
    return applied


def run_remote_case(work: Path) -> dict[str, str]:
    """clone, fetch (into a copy of a clone) and check the damaged remote; the outcome of each."""
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
    with open_repository(work / "clone") as repo:
        before = ([v.uuid for v in repo.versions()], repo.branches(), R.load_state(repo, "origin").to_json())
        attempt("fetch", lambda: R.fetch(repo, "origin"))
        after = ([v.uuid for v in repo.versions()], repo.branches(), R.load_state(repo, "origin").to_json())
        if outcomes["fetch"] != "ok" and after != before and not outcomes["fetch"].startswith("FINDING"):
            outcomes["fetch"] = f"FINDING partial: a refused fetch ({outcomes['fetch']}) changed the repository"
    attempt("check", lambda: verify_remote(remote))
    return outcomes


def _worker(conn: Any, seed: int, seed_root: str, work: str) -> None:
    limit = ADDRESS_SPACE_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mutations = make_remote_case(seed, Path(seed_root), Path(work))
    conn.send(("mutations", mutations))
    conn.send(("outcomes", run_remote_case(Path(work))))


def fuzz_remotes(seeds: Iterable[int], seed_root: Path, *,
                 case_seconds: float = CASE_SECONDS) -> list[RemoteCaseResult]:
    """Run each seed's case in its own spawned worker (one at a time); a result per seed."""
    build_seed(seed_root)
    ctx = multiprocessing.get_context("spawn")
    results = []
    for seed in seeds:
        work = Path(tempfile.mkdtemp(prefix="shardscope-fuzz-remote-"))
        result = RemoteCaseResult(seed, [])
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(child, seed, str(seed_root), str(work)), daemon=True)
        proc.start()
        child.close()
        deadline = time.monotonic() + case_seconds
        try:
            while time.monotonic() < deadline and parent.poll(max(0.0, deadline - time.monotonic())):
                kind, value = parent.recv()
                if kind == "mutations":
                    result.mutations = value
                else:
                    result.outcomes = value
                    break
        except EOFError:
            pass
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(30)
            result.findings.append(f"hang: no outcome within {case_seconds} s")
        elif not result.outcomes:
            result.findings.append(f"crash: the worker exited with {proc.exitcode} and no outcome")
        result.findings += [f"{op}: {o}" for op, o in result.outcomes.items() if o.startswith("FINDING")]
        shutil.rmtree(work, ignore_errors=True)
        results.append(result)
    return results


def summary(results: list[RemoteCaseResult]) -> str:
    by_mutation = Counter(m for r in results for m in r.mutations)
    outcomes = Counter(o.split(":")[0] for r in results for o in r.outcomes.values())
    findings = [f"seed={r.seed} {r.mutations}: {f[:300]}" for r in results for f in r.findings]
    return "\n".join([f"{len(results)} hostile remotes; mutations {dict(by_mutation)}; outcomes {dict(outcomes)}",
                      f"{len(findings)} finding(s)", *findings])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seed-dir", type=Path, default=Path(tempfile.gettempdir()) / "shardscope-fuzz-remote-seed")
    args = p.parse_args(argv)
    deadline = time.monotonic() + args.minutes * 60
    results: list[RemoteCaseResult] = []
    seed = args.seed
    while time.monotonic() < deadline:
        results += fuzz_remotes([seed], args.seed_dir)
        seed += 1
    print(summary(results))
    return 1 if any(r.findings for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
