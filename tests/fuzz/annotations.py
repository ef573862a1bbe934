"""Fuzz targets for the precomputed annotation parsers: hostile collections through every annotation entry point.

Seeds are complete collections the writer made (every geometry type, sharded and unsharded, with
numeric, enum and colour properties and relationships). A case copies one and damages it, decided by its
seed alone: ``info`` members replaced (types, ranks, counts, grids, limits, keys, sharding bits, a
property list of 10⁵ entries), index files truncated, extended, overwritten, swapped, their counts set
to lies, replaced by a gzip bomb or by random bytes. Each case then goes through ``open_annotations``,
``get``/``get_many``, ``related``, ``cell``, ``query_box``, ``all``, ``locate_*``, ``validate``, the
inspector, the shard browser's tree and the CLI verbs.

The rules are the suite's (:mod:`tests.fuzz.runner`): only :class:`ShardscopeError` leaves an entry
point, nothing hangs, crashes or allocates without bound (workers run under an address-space limit),
and nothing outside the collection is opened (the runner's audit hook). Cases run in a worker process,
a batch at a time; a case that outlives its time is a hang and the worker is replaced.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationType

#: Operations on one case, and the most records any of them takes from a generator.
MAX_RECORDS = 200
#: Wall time one case may take in a worker before it is a hang.
CASE_SECONDS = 30.0
#: Address space of a worker: an unbounded allocation fails with MemoryError instead of taking the machine.
ADDRESS_SPACE_MB = 4096
#: Outcomes that break a rule.
FINDINGS = ("untyped", "hang", "crash", "memory", "outside_read", "generator_error")

KINDS: tuple[AnnotationType, ...] = ("point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline")


# -- seeds ------------------------------------------------------------------------------------------------------
def build_annotation_seeds(root: Path) -> list[Path]:
    """Write the seed collections under ``root`` (once per session)."""
    from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema, PropertySpec
    from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations
    from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, random_batch

    props = (PropertySpec("score", "float32"), PropertySpec("kind", "uint8", None, (0, 1), ("pre", "post")),
             PropertySpec("color", "rgb"), PropertySpec("depth", "int16"))
    out = []
    for i, kind in enumerate(KINDS):
        schema = AnnotationSchema(kind, DIMENSIONS, props, ("pre", "post"))
        batch = random_batch(schema, 60, 100 + i, max_related=2)
        for sharded in (True, False):
            path = root / f"{kind}-{'sharded' if sharded else 'plain'}"
            write_annotations(path, batch, sharded=sharded, limit=8, shard_bytes=512)
            if not sharded and kind == "point":  # CloudVolume's local layout: NAME.gz
                for file in list((path / "spatial0").iterdir()):
                    file.with_name(file.name + ".gz").write_bytes(gzip.compress(file.read_bytes()))
                    file.unlink()
            out.append(path)
    return out


# -- damage -----------------------------------------------------------------------------------------------------
def _info_mutation(doc: dict[str, Any], rng: random.Random) -> str:
    choices: list[tuple[str, Any]] = [
        ("annotation_type", rng.choice(["POINT", "LINE", "POLYLINE", "ELLIPSOID", "SPHERE", 7, None])),
        ("dimensions", rng.choice([{}, {"x": [1, "nm"]}, {f"d{i}": [1, "nm"] for i in range(40)},
                                   {"x": [0, "nm"], "y": [1, "nm"], "z": [1, "nm"]}])),
        ("lower_bound", rng.choice([[0, 0], [1e308, 0, 0], [float("nan")] * 3, [5000, 5000, 5000]])),
        ("upper_bound", rng.choice([[0, 0, 0], [1e-300] * 3, [2**70, 1, 1], "x"])),
        ("properties", rng.choice([[{"id": f"p{i}", "type": "uint8"} for i in range(100_000)],
                                   [{"id": "score", "type": "float64"}], [], None, [{"id": "a"}],
                                   [{"id": "a", "type": "uint32"}] * 2,
                                   [{"id": "e", "type": "int8", "enum_values": [1e9], "enum_labels": ["x"]}]])),
        ("relationships", rng.choice([[], None, [{"id": "pre", "key": "../../etc"}], [{"id": "x", "key": "by_id"}],
                                      [{"id": "pre", "key": "rel_pre", "sharding": {
                                          "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 64,
                                          "hash": "identity", "minishard_bits": 40, "shard_bits": 24}}]])),
        ("by_id", rng.choice([None, {"key": "/abs"}, {"key": "spatial0"}, {"key": "by_id", "sharding": {
            "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "murmurhash3_x86_128",
            "minishard_bits": 0, "shard_bits": 0}}])),
    ]
    member, value = rng.choice(choices)
    if member == "spatial" or rng.random() < 0.35:
        levels = doc.get("spatial") or []
        if levels:
            level = rng.choice(levels)
            field_, value = rng.choice([("grid_shape", [2**40, 2**40, 1]), ("grid_shape", [1, 1]),
                                        ("chunk_size", [1e-300, 1e-300, 1e-300]), ("limit", 2**62),
                                        ("limit", 0), ("key", "../x"), ("grid_shape", [1, 1, 1])])
            level[field_] = value
            return f"info spatial.{field_} = {json.dumps(value)[:60]}"
    doc[member] = value
    return f"info {member} = {json.dumps(value)[:60]}"


def _file_mutation(path: Path, rng: random.Random, bomb: bytes) -> str:
    data = path.read_bytes()
    kind = rng.choice(["truncate", "extend", "flip", "count", "random", "bomb", "empty", "swap-head"])
    if kind == "truncate" and data:
        cut = rng.randrange(len(data))
        path.write_bytes(data[:cut])
        return f"{path.name}: truncated to {cut}"
    if kind == "extend":
        path.write_bytes(data + bytes(rng.randrange(256) for _ in range(rng.choice((1, 7, 300)))))
        return f"{path.name}: bytes appended"
    if kind == "flip" and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(b))
        return f"{path.name}: bits flipped"
    if kind == "count" and len(data) >= 8:
        value = rng.choice((2**64 - 1, 2**32, len(data), 0, 1))
        offset = rng.choice((0, min(len(data) - 8, rng.randrange(max(1, len(data) - 7)))))
        path.write_bytes(data[:offset] + struct.pack("<Q", value) + data[offset + 8:])
        return f"{path.name}: uint64 at {offset} = {value}"
    if kind == "random":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.choice((3, 64, 4096)))))
        return f"{path.name}: random bytes"
    if kind == "bomb":
        path.write_bytes(bomb)
        return f"{path.name}: gzip bomb"
    if kind == "empty":
        path.write_bytes(b"")
        return f"{path.name}: emptied"
    head = struct.pack("<Q", rng.choice((1, 2**63))) + struct.pack("<I", rng.choice((0, 1, 2**31)))
    path.write_bytes(head + data[len(head):])
    return f"{path.name}: head replaced"


def make_case(seed: int, seeds: list[Path], work: Path, bomb: bytes) -> tuple[Path, list[str]]:
    """A damaged copy of one seed collection, decided by ``seed`` alone."""
    rng = random.Random(seed)
    base = seeds[seed % len(seeds)]
    dest = work / f"case-{seed}"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base, dest)
    mutations = [base.name]
    files = sorted(p for p in dest.rglob("*") if p.is_file() and p.name != "info")
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.3:
            info = dest / "info"
            doc = json.loads(info.read_text())
            mutations.append(_info_mutation(doc, rng))
            info.write_text(json.dumps(doc))
        elif files:
            mutations.append(_file_mutation(rng.choice(files), rng, bomb))
    return dest, mutations


# -- running ----------------------------------------------------------------------------------------------------
def operations(root: Path, rng: random.Random) -> list[tuple[str, Any]]:
    from napari_shardscope.cli import main
    from napari_shardscope.core.formats import open_annotations, open_dataset
    from napari_shardscope.core.formats.precomputed.annotations.validate import validate_annotations
    from napari_shardscope.core.layout import open_layout

    cache: dict[str, Any] = {}

    def source() -> Any:
        if "src" not in cache:
            cache["src"] = open_annotations(root)
        return cache["src"]

    def ids() -> list[int]:
        try:
            return [int(i) for i in source().ids()[:5].tolist()] + [rng.choice((0, 2**64 - 1, 12345))]
        except Exception:
            return [1, 2**64 - 1]

    def reads() -> Any:
        s = source()
        out = [s.get_many(ids()).ids.tolist(), repr(s.get(ids()[0]))]
        for rel in s.schema.relationships:
            out.append(len(s.related(rel, rng.choice((1, 2, 3, 2**63)))))
        for level in range(len(s.info.spatial)):
            out.append(len(s.cell(level, [0] * s.schema.rank)))
        lo, hi = s.info.lower_bound, s.info.upper_bound
        out.append(len(s.query_box(lo, hi, max_level=min(2, len(s.info.spatial) - 1) if s.info.spatial else None)))
        return out

    def everything() -> Any:
        return len(source().all())

    def where() -> Any:
        s = source()
        out = [s.locate_annotation(ids()[0])]
        if s.info.spatial:
            out.append(s.locate_point(list(s.info.lower_bound)))
        return out

    def layout() -> Any:
        tree = open_layout(root)
        pending, seen = list(tree.roots()), list[str]()
        while pending and len(seen) < 60:
            node = pending.pop(0)
            seen.append(repr(node))
            pending.extend(tree.children(node))
        return seen

    def cli(*argv: str) -> Any:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*argv])
        return ("exit", code, argv, err.getvalue()[-1500:])

    path = str(root)
    return [
        ("open", lambda: repr(source())),
        ("read", reads),
        ("all", everything),
        ("locate", where),
        ("validate", lambda: [str(p) for p in _islice(validate_annotations(source()), MAX_RECORDS)]),
        ("inspect", lambda: open_dataset(root).inspector().inspect()),
        ("layout", layout),
        ("cli", lambda: cli("inspect", path, "--json")),
        ("cli", lambda: cli("ls", path, "--json")),
        ("cli", lambda: cli("locate", path, "--point", "0,0,0")),
        ("cli", lambda: cli("locate", path, "--cell", "0,0,0", "--scale", "spatial/spatial0")),
        ("cli", lambda: cli("validate", path, "--json")),
    ]


def _islice(it: Any, n: int) -> list[Any]:
    import itertools

    return list(itertools.islice(it, n))


def run_case(root: Path, seed: int) -> list[dict[str, str]]:
    from tests.fuzz.runner import EXIT_CLASSES, OutsideWatch, classify

    watch = _WATCH[0] if _WATCH else OutsideWatch()
    if not _WATCH:
        _WATCH.append(watch)
    rng = random.Random(seed ^ 0xA11)
    results = []
    for name, call in operations(root, rng):
        with watch.watching(root):
            try:
                produced = call()
                outcome, detail, trace = "ok", "", ""
                if isinstance(produced, tuple) and produced and produced[0] == "exit":
                    outcome = EXIT_CLASSES.get(produced[1], "untyped")
                    detail = f"exit {produced[1]} {produced[2]}"
                    trace = produced[3] if outcome == "untyped" else ""
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                outcome = classify(exc)
                detail = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"[:400]
                trace = traceback.format_exc()[-3000:] if outcome in FINDINGS else ""
        if watch.seen:
            outcome, detail = "outside_read", "; ".join(watch.seen[:3])
        results.append({"op": name, "outcome": outcome, "detail": detail, "trace": trace})
    return results


_WATCH: list[Any] = []


def worker_main() -> None:
    """Read case seeds and directories from stdin, one per line; answer each with one JSON line."""
    import resource

    limit = ADDRESS_SPACE_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import napari_shardscope.cli  # noqa: F401 - before the first case, so its import is no case's time

    print("ready", flush=True)
    for line in sys.stdin:
        seed, path = line.rstrip("\n").split(" ", 1)
        print(json.dumps({"seed": int(seed), "ops": run_case(Path(path), int(seed))}), flush=True)


@dataclass
class Report:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)
    #: (seed collection, mutation kind) of every case: what the run covered.
    pairs: set[tuple[str, str]] = field(default_factory=set)
    findings: list[dict[str, Any]] = field(default_factory=list)


def mutation_kind(mutation: str) -> str:
    """The kind of one of :func:`make_case`'s mutation descriptions (``info``, ``truncated``, ``bits``, ...)."""
    return mutation.split(":")[0].split(" ")[0] if mutation.startswith("info") else \
        mutation.split(": ")[-1].split(" ")[0]


def covering_seeds(candidates: Iterable[int], seeds: list[Path], work: Path) -> list[int]:
    """A small set of ``candidates`` whose cases reach every (seed collection, mutation kind) pair theirs reach
    together (:func:`tests.fuzz.ci_seeds.greedy_cover`): how the CI run's seeds were chosen."""
    from tests.fuzz.ci_seeds import greedy_cover

    bomb = gzip.compress(bytes(64 << 20))
    classes: dict[int, set[tuple[str, ...]]] = {}
    for seed in candidates:
        case, mutations = make_case(seed, seeds, work, bomb)
        classes[seed] = {(mutations[0], mutation_kind(m)) for m in mutations[1:]}
        shutil.rmtree(case, ignore_errors=True)
    return greedy_cover(classes)


def fuzz_annotations(case_seeds: Iterable[int], seeds: list[Path], work: Path) -> Report:
    """Build and run every case in a worker process (replaced after a hang or a crash)."""
    bomb = gzip.compress(bytes(64 << 20))  # 64 MiB of zeros in about 64 KB
    report = Report()
    pending = list(case_seeds)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    while pending:
        proc = subprocess.Popen([sys.executable, "-c", "from tests.fuzz.annotations import worker_main; "
                                 "worker_main()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=repo, env=env)
        assert proc.stdin is not None and proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the fuzz worker did not start")
        while pending:
            seed = pending.pop(0)
            try:
                case, mutations = make_case(seed, seeds, work, bomb)
            except Exception as exc:
                report.findings.append({"seed": seed, "class": "generator_error", "detail": repr(exc)})
                continue
            report.cases += 1
            for m in mutations[1:]:
                report.mutations[mutation_kind(m)] += 1
                report.pairs.add((mutations[0], mutation_kind(m)))
            proc.stdin.write(f"{seed} {case}\n")
            proc.stdin.flush()
            answer = _read_line(proc, CASE_SECONDS)
            if answer is None:
                alive = proc.poll() is None
                proc.kill()
                proc.wait(30)
                report.findings.append({"seed": seed, "class": "hang" if alive else "crash",
                                        "detail": f"{mutations}", "op": "?"})
                shutil.rmtree(case, ignore_errors=True)
                break  # a new worker for the rest
            for op in json.loads(answer)["ops"]:
                report.outcomes[op["outcome"]] += 1
                if op["outcome"] in FINDINGS:
                    report.findings.append({"seed": seed, "class": op["outcome"], "op": op["op"],
                                            "detail": f"{op['detail']} | {mutations}", "trace": op["trace"]})
            shutil.rmtree(case, ignore_errors=True)
        else:
            proc.stdin.close()
            proc.wait(60)
    return report


def _read_line(proc: subprocess.Popen[str], seconds: float) -> str | None:
    """The worker's next line, or ``None`` when it gives none within ``seconds`` (hung or dead)."""
    import selectors

    assert proc.stdout is not None
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if sel.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                line = proc.stdout.readline()
                return line or None
            if proc.poll() is not None:
                return None
    return None
