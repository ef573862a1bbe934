"""Fuzz the sorted-table readers: damaged and hostile tables of every format through every entry point.

Each seed copies one valid seed table (Zarr v3 sharded and unsharded, a pipeline's Zarr group, the
sharded lookup, one Parquet file, a directory of Parquet files), damages it (flipped bytes, a file
cut short or grown sparse to a terabyte, a length or count field set to 0, 2³¹, 2⁶³ or 2⁶⁴−1, JSON
fields removed or retyped, a file deleted) and runs ``open_sorted_table``, ``lookup``, ``select``,
a bounded ``range`` and ``iter_pages``, and ``TableAgglomeration.members`` on it, in a worker process
with an address-space limit and a time limit per case. The rules: only ``ShardscopeError`` leaves
an entry point; nothing hangs, crashes or allocates without bound.

    PYTHONPATH=src:. python -m tests.fuzz.tables --cases 500 [--first 0] [--workers 2]
    PYTHONPATH=src:. python -m tests.fuzz.tables --replay SEED      # one case, here, with its traceback
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Seconds one case may take (its every operation) before it counts as a hang.
CASE_SECONDS = 30.0
#: A worker's address-space limit: an unbounded allocation fails with MemoryError instead.
ADDRESS_SPACE_MB = 6144
#: Pages at most iterated by one ``range`` or ``iter_pages`` operation.
MAX_PAGES_ITERATED = 40
HOSTILE_INTS = (0, 1, 255, 1 << 31, (1 << 32) - 1, 1 << 62, (1 << 63) - 1, (1 << 64) - 1)
FINDINGS = ("untyped", "hang", "crash", "memory", "generator_error")
#: A seed option that makes every case of that seed sleep first (the hang detector's own test).
SLEEP_OPTION = "__fuzz_sleep_seconds__"


@dataclass(frozen=True)
class Seed:
    name: str
    path: Path  # the table (a directory, or a .parquet file)
    options: dict[str, Any] = field(default_factory=dict)  # what open_sorted_table needs (a foreign table's columns)


def build_seeds(root: Path) -> list[Seed]:
    """Write the valid seed tables under ``root`` (small: a case copies one)."""
    import zarr

    from napari_shardscope.core.tables import write_sorted_table

    root.mkdir(parents=True, exist_ok=True)
    keys = np.unique(np.random.default_rng(7).integers(1, 1 << 40, 2500, dtype=np.uint64))
    cols: dict[str, np.ndarray] = {"body": keys % 97 + 1, "score": np.linspace(0, 1, keys.size, dtype=np.float32)}
    seeds = []
    for name, url, opts in (("zarr3", "z.zarr", {"format": "zarr3", "shard_pages": 4}),
                            ("zarr3-unsharded", "u.zarr", {"format": "zarr3", "shard_pages": 0}),
                            ("precomputed", "p.sharded", {"format": "precomputed", "shard_pages": 4}),
                            ("parquet", "f.parquet", {"format": "parquet"}),
                            ("parquet-dir", "parts", {"format": "parquet", "file_rows": 800})):
        path = root / url
        if not path.exists():
            write_sorted_table(path, keys, cols, key="sv", page_rows=200, **opts)
        seeds.append(Seed(name, path))
    foreign = root / "foreign.zarr"
    if not foreign.exists():
        g = zarr.open_group(str(foreign), mode="w")
        g.create_array("sv", shape=keys.shape, chunks=(300,), dtype="uint64")[:] = keys
        g.create_array("body", shape=keys.shape, chunks=(250,), dtype="uint64")[:] = cols["body"]
    seeds.append(Seed("zarr-foreign", foreign, {"key": "sv", "values": ["body"]}))
    return seeds


# -- damage ---------------------------------------------------------------------------------------------
def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def _json_damage(rng: random.Random, doc: Any) -> tuple[Any, str]:
    """One hostile edit somewhere in a JSON document."""
    spots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                spots.append((node, k))
                walk(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                spots.append((node, i))
                walk(v)

    walk(doc)
    if not spots:
        return doc, "json-none"
    parent, key = rng.choice(spots)
    what = rng.choice(["int", "neg", "str", "null", "list", "delete", "huge-list"])
    if what == "delete" and isinstance(parent, dict):
        del parent[key]
    elif what == "int":
        parent[key] = rng.choice(HOSTILE_INTS)
    elif what == "neg":
        parent[key] = -rng.choice(HOSTILE_INTS[1:])
    elif what == "str":
        parent[key] = rng.choice(["", "../../etc/passwd", "x" * 1000, "float64", "uint64", "gzip"])
    elif what == "null":
        parent[key] = None
    elif what == "huge-list":
        parent[key] = [1 << 62] * 64
    else:
        parent[key] = [parent[key]]
    return doc, f"json-{what}:{key}"


def damage(rng: random.Random, table: Path) -> list[str]:
    """Apply one to three hostile mutations to the copied table at ``table``; their names."""
    done = []
    for _ in range(rng.randint(1, 3)):
        files = [f for f in _files(table) if f.stat().st_size < 1 << 24]  # not a file grown sparse already
        if not files:
            break
        meta = [f for f in files if f.name in ("zarr.json", "info", "page_directory", "_shardscope_table.json")
                or f.suffix == ".parquet"]
        f = rng.choice(meta if meta and rng.random() < 0.6 else files)
        data = bytearray(f.read_bytes())
        kind = rng.choice(["flip", "truncate", "grow", "int", "json", "delete", "sparse", "zero-tail"])
        rel = f.relative_to(table.parent)
        if kind == "json" and bytes(data[:1]) in (b"{", b"["):
            try:
                doc = json.loads(data)
            except ValueError:
                doc = None
            if doc is not None:
                doc, how = _json_damage(rng, doc)
                f.write_text(json.dumps(doc))
                done.append(f"{how}@{rel}")
                continue
            kind = "flip"
        if kind == "delete":
            f.unlink()
        elif kind == "sparse":
            with f.open("r+b") as fh:
                fh.truncate(1 << 40)  # a terabyte that is not there: must never be read whole
        elif not data:
            f.write_bytes(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))))
        elif kind == "flip":
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            f.write_bytes(bytes(data))
        elif kind == "truncate":
            f.write_bytes(bytes(data[: rng.randrange(len(data))]))
        elif kind == "grow":
            f.write_bytes(bytes(data) + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4096))))
        elif kind == "zero-tail":
            n = rng.randint(1, min(64, len(data)))
            data[-n:] = bytes(n)
            f.write_bytes(bytes(data))
        else:  # a little-endian 4- or 8-byte field set to a hostile value (a length, an offset, a count)
            width = rng.choice([4, 8])
            if len(data) >= width:
                at = rng.randrange(len(data) - width + 1) if rng.random() < 0.5 else max(0, len(data) - 8)
                value = rng.choice(HOSTILE_INTS) & ((1 << (8 * width)) - 1)
                data[at:at + width] = value.to_bytes(width, "little")
                f.write_bytes(bytes(data))
        done.append(f"{kind}@{rel}")
    return done


# -- running --------------------------------------------------------------------------------------------
def operations(path: Path, options: dict[str, Any], rng: random.Random) -> list[tuple[str, Callable[[], Any]]]:
    from napari_shardscope.core.tables import TableAgglomeration, open_sorted_table

    state: dict[str, Any] = {}

    def table() -> Any:
        if "t" not in state:
            state["t"] = open_sorted_table(path, **options)
        return state["t"]

    def keys() -> np.ndarray:
        t = table()
        lo, hi = t.min_key or 0, t.max_key or 100
        picks = [rng.randint(min(lo, hi), max(lo, hi)) for _ in range(50)]
        return np.asarray([*picks, 0, (1 << 64) - 1], dtype=np.uint64)

    def bounded(it: Iterable[Any]) -> int:
        n = 0
        for n, _ in enumerate(it, 1):
            if n >= MAX_PAGES_ITERATED:
                break
        return n

    return [
        ("open", lambda: table()),
        ("lookup", lambda: table().lookup(keys())),
        ("select", lambda: table().select(keys()[:5])),
        ("range", lambda: bounded(table().range(int(keys()[0]), int(keys()[1]) + 1))),
        ("iter_pages", lambda: bounded(table().iter_pages())),
        ("members", lambda: TableAgglomeration(table(), body="body").members_of(np.arange(1, 20))),
    ]


def classify(exc: BaseException) -> str:
    from napari_shardscope.core.errors import ShardscopeError, group_name

    if isinstance(exc, ShardscopeError):
        return group_name(exc)
    if isinstance(exc, MemoryError):
        return "memory"
    return "untyped"


def run_case(seed: int, seeds: list[Seed], work: Path) -> dict[str, Any]:
    """Build case ``seed`` in ``work`` and run every operation on it: ``{"seed", "base", "damage", "ops"}``."""
    rng = random.Random(seed)
    base = seeds[seed % len(seeds)]
    target = work / base.path.name
    try:
        if base.path.is_dir():
            shutil.copytree(base.path, target)
        else:
            shutil.copy2(base.path, target)
        mutations = damage(rng, target)
    except Exception:  # a bug of the fuzzer: reported, never hidden
        return {"seed": seed, "base": base.name, "damage": [],
                "ops": [("make_case", "generator_error", traceback.format_exc()[-2000:])]}
    ops = []
    options = dict(base.options)
    pause = options.pop(SLEEP_OPTION, 0)
    if pause:
        time.sleep(float(pause))
    for name, op in operations(target, options, rng):
        try:
            op()
            ops.append((name, "ok", ""))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            outcome = classify(exc)
            ops.append((name, outcome, f"{type(exc).__name__}: {str(exc)[:300]}"
                        + ("\n" + traceback.format_exc()[-3000:] if outcome in FINDINGS else "")))
            if name == "open":
                break
    return {"seed": seed, "base": base.name, "damage": mutations, "ops": ops}


def _worker(conn: Any, seeds: list[Seed]) -> None:
    limit = ADDRESS_SPACE_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import pyarrow.parquet  # noqa: F401

    import napari_shardscope.core.tables  # noqa: F401  (imported before the first case is timed)

    while True:
        seed = conn.recv()
        if seed is None:
            return
        work = Path(tempfile.mkdtemp(prefix="shardscope-tables-fuzz-"))
        try:
            conn.send(run_case(int(seed), seeds, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)


@dataclass
class Report:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)

    def add(self, result: dict[str, Any]) -> None:
        self.cases += 1
        for name, outcome, detail in result["ops"]:
            self.outcomes[outcome] += 1
            if outcome in FINDINGS:
                self.findings.append({"seed": result["seed"], "base": result["base"], "damage": result["damage"],
                                      "op": name, "outcome": outcome, "detail": detail})

    def summary(self) -> str:
        return f"{self.cases} cases, outcomes {dict(self.outcomes)}, {len(self.findings)} findings"


def fuzz(seeds_range: Iterable[int], seeds: list[Seed], *, workers: int = 2,
         case_seconds: float = CASE_SECONDS) -> Report:
    """Run the cases in ``workers`` spawned processes, each case under a time limit (a hang kills its worker)."""
    ctx = mp.get_context("spawn")
    report = Report()
    todo = list(seeds_range)
    slots: list[tuple[Any, Any, int | None, float]] = []

    def start() -> tuple[Any, Any, int | None, float]:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, seeds), daemon=True)
        proc.start()
        return proc, parent, None, 0.0

    for _ in range(max(1, workers)):
        slots.append(start())
    while todo or any(s[2] is not None for s in slots):
        for i, (proc, conn, seed, since) in enumerate(slots):
            if seed is None:
                if todo:
                    s = todo.pop(0)
                    conn.send(s)
                    slots[i] = (proc, conn, s, time.monotonic())
                continue
            if conn.poll(0.05):
                try:
                    report.add(conn.recv())
                    slots[i] = (proc, conn, None, 0.0)
                except EOFError:
                    report.add({"seed": seed, "base": "?", "damage": [], "ops": [("case", "crash",
                                                                                  f"exit {proc.exitcode}")]})
                    slots[i] = start()
            elif not proc.is_alive():
                report.add({"seed": seed, "base": "?", "damage": [], "ops": [("case", "crash",
                                                                              f"exit {proc.exitcode}")]})
                slots[i] = start()
            elif time.monotonic() - since > case_seconds:
                proc.kill()
                proc.join(10)
                report.add({"seed": seed, "base": "?", "damage": [], "ops": [("case", "hang",
                                                                              f"over {case_seconds} s")]})
                slots[i] = start()
    for proc, conn, _, _ in slots:
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(None)
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--replay", type=int)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="shardscope-tables-seeds-"))
    try:
        seeds = build_seeds(root)
        if args.replay is not None:
            work = root / "replay"
            work.mkdir()
            result = run_case(args.replay, seeds, work)
            print(json.dumps(result, indent=1))
            return int(any(o in FINDINGS for _, o, _ in result["ops"]))
        report = fuzz(range(args.first, args.first + args.cases), seeds, workers=args.workers)
        print(report.summary())
        for f in report.findings[:20]:
            print(json.dumps(f, indent=1))
        return int(bool(report.findings))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
