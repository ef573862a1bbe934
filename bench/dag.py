"""Benchmark: a versioned repository with 10 … 10⁵ versions — opening it, reading at its head, ``repo log``.

Run: ``PYTHONPATH=src:. python bench/dag.py [--max 100000] [--rounds 3] [--no-peer]`` (writes
``bench/results/dag.json``; the repositories are built once under the sample cache, ~1 GB at 10⁵).

For each size n (10, 10², …, ``--max``) and two DAG shapes, a repository is generated through the
repository's own write path, many versions per transaction (:meth:`Repository.batch`, one
transaction per 1,000 versions, not durable while generating, synced at the end):

* ``chain``: one branch, every version committed, each writing the key ``edit``;
* ``branchy``: main plus 8 side branches taking versions in turn (so their ids interleave), one of
  them merged into main every 64 versions (policy ``ours``) and started again from main's head under
  a new name (so every ~512 versions a side branch is merged and a new one begins: 10⁵ versions hold
  ~1,500 merges and ~1,500 branches), each version writing ``edit``.

The root holds the key ``root``. Each point is then measured in fresh processes (median of
``--rounds``, alternating with the peer):

* *open + head + read*: ``open_repository``, resolve ``main`` (its head), read ``root`` and
  ``edit`` there — timed inside the process, plus the process's peak RSS (interpreter and imports
  included); then, in the same process, ``repo.log("main", limit=20)`` (the peer: ``ancestry()[:20]``,
  the only walk it had);
* *repo log --limit 20*: the whole CLI process, ``shardscope repo log REPO --limit 20 --json``.

The peer is the previous implementation (git ``0a4bfea``, checked out with ``git worktree add`` into a
temporary directory and imported through its own ``PYTHONPATH``) on a format-1 copy of the same
repository (the format-2 records removed, as ``tests/core/versioned/format1.py`` does). Its ``repo
log`` had no ``--limit``: its figure is ``repo log REPO --json`` (what a user had to run). A peer
process that takes longer than ``--peer-timeout`` is recorded as timed out. Goals (issue 28): open +
head + read ≤ 1 s and ≤ 500 MB at every point; ``log --limit`` cost independent of the history.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from common import Row, record, save, spread  # noqa: E402
from napari_shardscope.core.sample_data import sample_cache_dir  # noqa: E402

BENCH = "dag"
PEER_COMMIT = "0a4bfea"
BATCH = 1000
BRANCHES = 8
MERGE_EVERY = 64
SHAPES = ("chain", "branchy")
GENERATOR_VERSION = 1
BRANCHY_VERSION = 2  # bump when the branchy generator changes

#: Peak RSS of this process image: ``VmHWM`` is per address space, so it starts afresh at ``exec``, unlike
#: ``getrusage``'s ``ru_maxrss``, which a child inherits from its parent (this script, after generating).
PEAK_RSS = """
def peak_rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
"""

OPEN = PEAK_RSS + """
import json, sys, time
t0 = time.perf_counter()
from napari_shardscope.core.versioned import open_repository
t1 = time.perf_counter()
repo = open_repository(sys.argv[1])
head = repo.version("main")
with repo.read(head) as view:
    got = (view.get("kv", b"root"), view.get("kv", b"edit"))
t2 = time.perf_counter()
assert got[0] == b"root" and got[1] is not None, got
rss = peak_rss_kb()
# the walk `repo log` makes: ours reads 20 versions; the previous library only had the whole ancestry
logged = list(repo.log("main", limit=20)) if hasattr(repo, "log") else repo.ancestry("main")[:20]
t3 = time.perf_counter()
# a chain's head has every version as ancestor; branchy's main has only what was merged into it
assert 0 < len(logged) <= min(20, int(sys.argv[2])) and logged[0].uuid == head.uuid, len(logged)
import napari_shardscope
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "rss_kb": rss, "log_s": t3 - t2,
                  "module": napari_shardscope.__file__}))
"""

LOG = PEAK_RSS + """
import json, os, sys, time
t0 = time.perf_counter()
from napari_shardscope.cli import main
sys.stdout = open(os.devnull, "w")
code = main(sys.argv[1:])
sys.stderr.write(json.dumps({"code": code, "s": time.perf_counter() - t0,
                             "rss_kb": peak_rss_kb()}) + "\\n")
"""


def data_dir() -> Path:
    return sample_cache_dir() / f"bench-dag-v{GENERATOR_VERSION}"


# -- generating -----------------------------------------------------------------------------------


def generate(path: Path, n: int, shape: str) -> dict[str, float]:
    """A repository of ``n`` versions of ``shape`` at ``path``; returns facts about it (sizes, seconds)."""
    import napari_shardscope.core.versioned.keys as K
    from napari_shardscope.core.versioned import create_repository, open_keyvalue

    t0 = time.perf_counter()
    with create_repository(path, durable=False) as repo:
        kv = open_keyvalue(repo, "kv", create=True)
        kv.put("main", "root", b"root")
        repo.commit("main", "root")
        main: Any = repo.root
        sides: dict[int, tuple[str, Any]] = {}  # slot -> (branch name, head)
        made, k = 1, 0
        while made < n:
            with repo.batch() as b:
                for _ in range(min(BATCH, n - made)):
                    slot = 0 if shape == "chain" else k % (BRANCHES + 1)
                    merge_slot = (k // MERGE_EVERY) % BRANCHES + 1
                    if shape == "branchy" and k % MERGE_EVERY == 0 and merge_slot in sides:
                        # merge a side branch into main; its slot starts a new branch from main later
                        v = b.merge(main, sides.pop(merge_slot)[1], policy="ours").version
                        slot = 0
                    elif slot == 0:
                        v = b.new_version(main)
                    elif slot in sides:
                        v = b.new_version(sides[slot][1])
                    else:
                        v = b.new_version(main, f"b{slot}.{k}")
                    b.write(v).put(kv.instance, b"edit", b"%d" % k)
                    done = b.commit(v, f"{shape} {k}")
                    if slot == 0:
                        main = done
                    else:
                        sides[slot] = (done.branch, done)
                    made += 1
                    k += 1
        seconds = time.perf_counter() - t0
        assert repo.version_count() == n
        with repo._engine.read() as txn:  # the sizes of the ancestor records, for the docs
            anc = sum(len(key) + len(val) for p in (K.ANCESTOR_PREFIX, K.ANCESTOR_PAGE_PREFIX)
                      for key, val in txn.scan(p, K.next_prefix(p)))
    store = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    return {"seconds": seconds, "ancestor_bytes": anc, "store_bytes": store}


def format1_copy(src: Path, dest: Path) -> None:
    from tests.core.versioned.format1 import downgrade_to_format_1

    shutil.copytree(src, dest)
    downgrade_to_format_1(dest)


def build(sizes: list[int], peer: bool) -> dict[str, dict[str, float]]:
    root = data_dir()
    root.mkdir(parents=True, exist_ok=True)
    facts_path = root / "facts.json"
    facts: dict[str, dict[str, float]] = json.loads(facts_path.read_text()) if facts_path.exists() else {}
    for shape in SHAPES:
        for n in sizes:
            name = f"{shape}-{n}" if shape == "chain" else f"{shape}{BRANCHY_VERSION}-{n}"
            path = root / name
            if name not in facts or not path.exists():
                shutil.rmtree(path, ignore_errors=True)
                facts[name] = generate(path, n, shape)
                facts_path.write_text(json.dumps(facts, indent=1))
                print(f"generated {name}: {facts[name]['seconds']:.1f} s, ancestor records "
                      f"{facts[name]['ancestor_bytes'] / 1e6:.2f} MB, store {facts[name]['store_bytes'] / 1e6:.1f} MB",
                      flush=True)
            old = root / f"{name}.format1"
            if peer and not old.exists():
                format1_copy(path, old)
    return facts


# -- measuring -------------------------------------------------------------------------------------


def env_for(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(src)
    env["PYTHONPYCACHEPREFIX"] = str(data_dir() / f"pycache-{src.parent.name}")
    return env


def run_open(src: Path, path: Path, timeout: float) -> dict[str, float] | None:
    try:
        done = subprocess.run([sys.executable, "-c", OPEN, str(path), path.name.split("-")[-1].split(".")[0]],
                              capture_output=True, text=True,
                              timeout=timeout, env=env_for(src))
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise RuntimeError(f"{src}: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.splitlines()[-1])
    assert str(src) in out["module"], (src, out["module"])  # the implementation we meant
    return out  # type: ignore[no-any-return]


def run_log(src: Path, path: Path, argv: list[str], timeout: float) -> dict[str, float] | None:
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", LOG, "repo", "log", str(path), *argv], capture_output=True,
                              text=True, timeout=timeout, env=env_for(src))
    except subprocess.TimeoutExpired:
        return None
    out = json.loads(done.stderr.splitlines()[-1])
    if out["code"] != 0:
        raise RuntimeError(f"{src}: repo log exited {out['code']}: {done.stderr[-2000:]}")
    out["wall"] = time.perf_counter() - t0
    return out  # type: ignore[no-any-return]


def fmt(values: list[float | None], scale: float, unit: str, digits: str = "{:.0f}") -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "timed out"
    text = spread([v * scale for v in got], digits) + f" {unit}"
    return text if len(got) == len(values) else f"{text} ({len(values) - len(got)} timed out)"


def ratio(ours: list[float | None], peer: list[float | None]) -> str:
    pairs = [(o, p) for o, p in zip(ours, peer, strict=True) if o is not None and p is not None]
    return spread([p / o for o, p in pairs]) + "x" if pairs else "-"


def measure(sizes: list[int], shapes: list[str], rounds: int, peer_src: Path | None, peer_timeout: float,
            facts: dict[str, dict[str, float]]) -> None:
    ours_src = ROOT / "src"
    root = data_dir()
    for shape in shapes:
        for n in sizes:
            name = f"{shape}-{n}" if shape == "chain" else f"{shape}{BRANCHY_VERSION}-{n}"
            path, old = root / name, root / f"{name}.format1"
            run_open(ours_src, path, 600)  # warm the page cache and bytecode caches
            if peer_src is not None:
                run_open(peer_src, old, peer_timeout)
            o_open, p_open, o_log, p_log = [], [], [], []
            for r in range(rounds):
                order = [0, 1] if r % 2 == 0 else [1, 0]
                for who in order:
                    if who == 0:
                        o_open.append(run_open(ours_src, path, 600))
                        o_log.append(run_log(ours_src, path, ["--limit", "20", "--json"], 600))
                    elif peer_src is not None:
                        p_open.append(run_open(peer_src, old, peer_timeout))
                        p_log.append(run_log(peer_src, old, ["--json"], peer_timeout))
            if peer_src is None:
                p_open, p_log = [None] * rounds, [None] * rounds
            peer_name = f"previous ({PEER_COMMIT})" if peer_src is not None else "not run"
            setting = f"{shape}, {n:,} versions, lmdb; fresh process per round"
            open_o = [x["open_s"] if x else None for x in o_open]
            open_p = [x["open_s"] if x else None for x in p_open]
            rss_o = [x["rss_kb"] if x else None for x in o_open]
            rss_p = [x["rss_kb"] if x else None for x in p_open]
            med_open = statistics.median(v for v in open_o if v is not None)
            med_rss = statistics.median(v for v in rss_o if v is not None)
            record(Row(BENCH, f"{shape} 10^{len(str(n)) - 1}: open + head + read 2 keys (in process)", "-",
                       fmt(open_o, 1e3, "ms", "{:.1f}"), peer_name, fmt(open_p, 1e3, "ms", "{:.1f}"),
                       ratio(open_o, open_p), "<= 1 s", med_open <= 1.0, rounds, setting))
            record(Row(BENCH, f"{shape} 10^{len(str(n)) - 1}: peak RSS of that process", "-",
                       fmt(rss_o, 1 / 1024, "MiB"), peer_name, fmt(rss_p, 1 / 1024, "MiB"),
                       ratio([1 / v if v else None for v in rss_o], [1 / v if v else None for v in rss_p]),
                       "<= 500 MB", med_rss * 1024 <= 500e6, rounds, setting))
            inlog_o = [x["log_s"] if x else None for x in o_open]
            inlog_p = [x["log_s"] if x else None for x in p_open]
            record(Row(BENCH, f"{shape} 10^{len(str(n)) - 1}: log of 20 versions from the head (in process)", "-",
                       fmt(inlog_o, 1e3, "ms", "{:.1f}"),
                       f"{peer_name}: ancestry()[:20]" if peer_src else peer_name, fmt(inlog_p, 1e3, "ms", "{:.1f}"),
                       ratio(inlog_o, inlog_p), "O(limit), not O(history)", None, rounds, setting))
            log_o = [x["wall"] if x else None for x in o_log]
            log_p = [x["wall"] if x else None for x in p_log]
            record(Row(BENCH, f"{shape} 10^{len(str(n)) - 1}: `repo log --limit 20 --json` (whole CLI process)", "-",
                       fmt(log_o, 1e3, "ms"), f"{peer_name}: `repo log --json` (no --limit)" if peer_src else peer_name,
                       fmt(log_p, 1e3, "ms"), ratio(log_o, log_p), "O(limit), not O(history)", None, rounds,
                       setting))
    for shape in shapes:
        n = max(sizes)
        f = facts[f"{shape}-{n}" if shape == "chain" else f"{shape}{BRANCHY_VERSION}-{n}"]
        record(Row(BENCH, f"{shape} 10^{len(str(n)) - 1}: on-disk ancestor sets (all versions) / whole store", "-",
                   f"{f['ancestor_bytes'] / 1e6:.2f} MB / {f['store_bytes'] / 1e6:.0f} MB", "a bitmap per version",
                   f"{n * n / 8 / 1e6:.1f} MB", "-", "small", None, 1,
                   f"generated in {f['seconds']:.0f} s through Repository.batch"))


def peer_checkout(where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), PEER_COMMIT], check=True,
                   capture_output=True, text=True, timeout=120)
    return where / "src"


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the peer's worktree
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--peer-timeout", type=float, default=300.0)
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help="comma-separated DAG shapes to measure (default: all; a subset keeps the others' "
                             "rows in the results file)")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    if not shapes or any(s not in SHAPES for s in shapes):
        parser.error(f"--shapes takes {', '.join(SHAPES)}")
    sizes = [10**k for k in range(1, 7) if 10**k <= args.max]
    facts = build(sizes, not args.no_peer)
    tmp = Path(tempfile.mkdtemp(prefix="bench-dag-peer-"))
    peer_src = None if args.no_peer else peer_checkout(tmp / "peer")
    try:
        measure(sizes, shapes, args.rounds, peer_src, args.peer_timeout, facts)
    finally:
        if peer_src is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "peer")],
                           capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    save(BENCH, partial=set(shapes) != set(SHAPES))


if __name__ == "__main__":
    main()
