"""Benchmark: what a ``shardscope`` command line costs before the verb does any work.

Run: ``python bench/cli_startup.py [--rounds 9] [--before REF] [--before-site DIR]`` (writes
``bench/results/cli_startup.json``).

Each round starts fresh Python processes for every command below, once with this checkout's code and
once with the previous implementation — ``REF`` (default: where this branch left ``main``, ``git
merge-base HEAD main``) checked out by ``git worktree add`` into a temporary directory and put first on
``PYTHONPATH`` — alternating which goes first. Per process it records:

* the sum of import time ``python -X importtime`` reports (the cumulative time of every top-level
  import: what the interpreter spent importing modules, the issue-30 goal is < 0.3 s for ``--help``);
* how many modules were imported, and how many of them are ``napari_shardscope``'s;
* in a second process without ``-X importtime`` (which adds its own overhead), the wall time and the
  CPU time (user + system, from ``wait4``) of the whole run. CPU time is the steadier figure on a
  machine shared with other work.

Commands: ``--help``, ``--version``, an argument error (``inspect`` without its PATH: exit 2), a verb's
``--help`` (``labelmap create --help``) and ``inspect PATH`` on a small sharded precomputed volume
(64³ uint64, written into a temp dir first). Both sides run with bytecode caches on (a private
``PYTHONPYCACHEPREFIX``, warmed by one untimed run), as an installed environment has them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIN_ROUNDS, Row, record, save, spread

BENCH = "cli_startup"
ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 0.3  # issue 30: `python -X importtime -m napari_shardscope --help` under 0.3 s of imports


@dataclass(frozen=True)
class Sample:
    import_s: float  # sum of the cumulative time of top-level imports (-X importtime)
    modules: int  # modules imported
    ours: int  # of which napari_shardscope's
    wall_s: float  # wall time of the process (a run without -X importtime)
    cpu_s: float  # user + system CPU time of that process


@dataclass
class Series:
    samples: list[Sample] = field(default_factory=list)

    def values(self, name: str) -> list[float]:
        return [float(getattr(s, name)) for s in self.samples]


def parse_importtime(stderr: str) -> tuple[float, list[str]]:
    """Seconds of import time (the top-level imports' cumulative µs, summed) and the modules imported.

    ``-X importtime`` prints ``import time: self | cumulative | name`` per module, nested imports
    indented under the import that caused them; the top-level lines' cumulative figures add up to
    the whole.
    """
    total_us = 0
    names: list[str] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|", 2)
        names.append(name.strip())
        if not name.startswith("  "):  # one space after the bar; nested imports are indented further
            total_us += int(cumulative)
    return total_us / 1e6, names


def child_env(src: Path, cache: Path, site: Path | None = None) -> dict[str, str]:
    """The environment of a measured process: ``src`` (after ``site``, when given) first on the path,
    bytecode caches on (private)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site else []), str(src)])
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    env.pop("SHARDSCOPE_DEBUG", None)
    return env


def run_once(argv: Sequence[str], env: dict[str, str]) -> Sample:
    """One command line measured twice: with ``-X importtime`` (imports), then plain (wall and CPU time)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "napari_shardscope", *argv],
                          capture_output=True, text=True, env=env, timeout=300)
    import_s, names = parse_importtime(proc.stderr)
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "napari_shardscope", *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    return Sample(import_s, len(names), sum(n.startswith("napari_shardscope") for n in names), wall,
                  usage.ru_utime + usage.ru_stime)


def check_code(argv: Sequence[str], env: dict[str, str], src: Path) -> int:
    """The exit code of ``argv`` (and that ``src``'s code is the one running)."""
    probe = subprocess.run([sys.executable, "-c", "import napari_shardscope; print(napari_shardscope.__file__)"],
                           capture_output=True, text=True, env=env, check=True)
    if not Path(probe.stdout.strip()).is_relative_to(src):
        raise SystemExit(f"PYTHONPATH={src} did not win: napari_shardscope comes from {probe.stdout.strip()}")
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *argv], capture_output=True,
                          env=env, timeout=300).returncode


def write_volume(path: Path) -> Path:
    """A 64³ uint64 sharded precomputed segmentation (2 scales): small, so ``inspect`` measures the CLI."""
    from blocky_base import write_blocky_base

    write_blocky_base(path, (64, 64, 64), (8, 16, 16), (32, 32, 32), shard_bits=1)
    return path


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help=f"fresh processes per command and side (>= {MIN_ROUNDS})")
    parser.add_argument("--before", default=None, help="git ref of the previous implementation "
                        "(default: git merge-base HEAD main)")
    parser.add_argument("--before-site", type=Path, default=None, help="a directory put first on the previous "
                        "side's path (packages of other versions, e.g. pip install --no-deps --target DIR "
                        "ml_dtypes==0.7.0)")
    args = parser.parse_args()
    before = args.before or git("merge-base", "HEAD", "main")
    before_sha = git("rev-parse", "--short", before)
    after_sha = git("rev-parse", "--short", "HEAD") + ("+changes" if git("status", "--porcelain", "src") else "")
    with tempfile.TemporaryDirectory(prefix="shardscope-cli-startup-") as tmp_name:
        tmp = Path(tmp_name)
        old = tmp / "before"
        git("worktree", "add", "--detach", str(old), before)
        try:
            volume = write_volume(tmp / "volume")
            sides = {"after": child_env(ROOT / "src", tmp / "pycache-after"),
                     "before": child_env(old / "src", tmp / "pycache-before", args.before_site)}
            commands: list[tuple[str, list[str]]] = [
                ("shardscope --help", ["--help"]),
                ("shardscope --version", ["--version"]),
                ("argument error (inspect without PATH, exit 2)", ["inspect"]),
                ("a verb's help: labelmap create --help", ["labelmap", "create", "--help"]),
                ("shardscope inspect PATH (64³ uint64 sharded precomputed)", ["inspect", str(volume)]),
            ]
            for case, argv in commands:
                codes = {side: check_code(argv, env, ROOT / "src" if side == "after" else old / "src")
                         for side, env in sides.items()}
                if codes["after"] != codes["before"]:
                    raise SystemExit(f"{case}: exit {codes['after']} now, {codes['before']} before")
                for env in sides.values():
                    run_once(argv, env)  # bytecode caches and page cache warm
                series = {"after": Series(), "before": Series()}
                for r in range(args.rounds):
                    order = ("after", "before") if r % 2 == 0 else ("before", "after")
                    for side in order:
                        series[side].samples.append(run_once(argv, sides[side]))
                peer_name = f"previous implementation ({before_sha})" + (
                    f" with {', '.join(sorted(p.name for p in args.before_site.glob('*.dist-info')))}"
                    if args.before_site else "")
                report(case, series["after"], series["before"], peer_name,
                       args.rounds, f"this checkout ({after_sha})", goal=case == "shardscope --help")
        finally:
            git("worktree", "remove", "--force", str(old))
    save(BENCH)


def report(case: str, ours: Series, peer: Series, peer_name: str, rounds: int, setting: str, *, goal: bool) -> None:
    """Four rows per command: import time (the goal's figure), CPU time, wall time, modules imported."""
    def row(what: str, name: str, unit: str, scale: float, fmt: str, goal_text: str = "-",
            met: bool | None = None) -> None:
        o = [v * scale for v in ours.values(name)]
        p = [v * scale for v in peer.values(name)]
        ratios = [b / a if a else float("inf") for a, b in zip(o, p, strict=True)]
        record(Row(BENCH, f"{case}: {what}", "-", spread(o, fmt) + unit, peer_name, spread(p, fmt) + unit,
                   spread(ratios) + "x", goal_text, met, rounds, setting))

    imports = ours.values("import_s")
    row("import time (-X importtime, sum)", "import_s", " ms", 1e3, "{:.0f}",
        f"< {GOAL_S * 1e3:.0f} ms" if goal else "-", statistics.median(imports) < GOAL_S if goal else None)
    row("CPU time of the process (user+sys)", "cpu_s", " ms", 1e3, "{:.0f}")
    row("wall time of the process", "wall_s", " ms", 1e3, "{:.0f}")
    row("modules imported (napari_shardscope's)", "ours", "", 1, "{:.0f}")
    row("modules imported (all)", "modules", "", 1, "{:.0f}")


if __name__ == "__main__":
    main()
