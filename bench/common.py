"""What every benchmark here shares: paired rounds, per-round ratios, and the results table.

Rules (issue 20): defaults as users get them (any non-default is stated in the row's ``setting``),
uint64 and uint8 where the data type matters, equal compression on both sides of a write, the peer
measured in the same process and round by round, the ratio computed per round, and the median
[min–max] over at least five rounds, printed with the goal.

Each script records its rows with :func:`record`; they land in ``bench/results/<script>.json``
(replaced per script run), and ``python bench/table.py`` renders them all into ``bench/README.md``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MIN_ROUNDS = 5


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """``median [min–max]`` of ``values``."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@dataclass
class Paired:
    """Times of ours and the peer, one pair per round, and the per-round ratio (peer time / our time)."""

    ours: list[float] = field(default_factory=list)
    peer: list[float] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        return [p / o for o, p in zip(self.ours, self.peer, strict=True)]


def paired_rounds(
    ours: Callable[[], Any],
    peer: Callable[[], Any],
    rounds: int,
    *,
    setup: Callable[[int], Any] | None = None,
) -> Paired:
    """Run ``ours`` and ``peer`` once per round, alternating which goes first (drift hits both alike)."""
    out = Paired()
    for r in range(rounds):
        if setup is not None:
            setup(r)
        if r % 2 == 0:
            out.ours.append(timed(ours))
            out.peer.append(timed(peer))
        else:
            out.peer.append(timed(peer))
            out.ours.append(timed(ours))
    return out


@dataclass(frozen=True)
class Row:
    bench: str  # the script
    case: str  # what is measured
    dtype: str  # uint64, uint8, or "-"
    ours: str  # median [min–max] with unit
    peer_name: str
    peer: str
    ratio: str  # median [min–max] of the per-round ratios (> 1: ours better), or "-"
    goal: str
    met: bool | None  # None: no goal to judge
    rounds: int
    setting: str = "defaults"


_rows: dict[str, list[Row]] = {}


def record(row: Row) -> None:
    """Print the row and keep it for :func:`save`."""
    verdict = "" if row.met is None else ("  MET" if row.met else "  NOT MET")
    print(f"  {row.case} [{row.dtype}]: ours {row.ours} | {row.peer_name} {row.peer} | ratio {row.ratio} "
          f"| goal {row.goal}{verdict} | {row.rounds} rounds, {row.setting}")
    _rows.setdefault(row.bench, []).append(row)


def rate(n: float, times: Sequence[float], unit: str, scale: float = 1e6) -> str:
    """``n / t`` for each time as median [min–max] (e.g. millions of ids per second)."""
    return spread([n / t / scale for t in times]) + f" {unit}"


def record_pair(bench: str, case: str, dtype: str, pair: Paired, peer_name: str, goal_ratio: float | None,
                *, unit: str = "ms", scale: float = 1e3, setting: str = "defaults", goal_text: str | None = None,
                higher_is_better_goal: bool = True, met: bool | None = None) -> Row:
    """Record a paired time measurement: ratio = peer time / our time per round; goal on the median ratio."""
    fmt = "{:.1f}" if scale == 1e3 else "{:.2f}"
    ratios = pair.ratios
    med = statistics.median(ratios)
    if goal_ratio is not None and met is None:
        met = med >= goal_ratio if higher_is_better_goal else med <= goal_ratio
    row = Row(bench, case, dtype, spread([t * scale for t in pair.ours], fmt) + f" {unit}", peer_name,
              spread([t * scale for t in pair.peer], fmt) + f" {unit}", spread(ratios) + "x",
              goal_text or (f"ratio >= {goal_ratio}x" if goal_ratio is not None else "-"), met, len(ratios), setting)
    record(row)
    return row


def save(bench: str, *, partial: bool = False) -> Path:
    """Write this script's rows to ``bench/results/<bench>.json`` (replacing the previous run's).

    ``partial``: this run measured only some cases; the previous file's rows of other cases are kept
    (in their place), so one part of a long script can be rerun alone.
    """
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{bench}.json"
    rows = [asdict(r) for r in _rows.get(bench, [])]
    if partial and path.exists():
        fresh = {(r["case"], r["dtype"], r["peer_name"]): r for r in rows}
        old = json.loads(path.read_text()).get("rows", [])
        merged = [fresh.pop((r["case"], r["dtype"], r["peer_name"]), r) for r in old]
        rows = merged + list(fresh.values())
    doc = {
        "bench": bench,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}",
        "rows": rows,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}; "
          "render the table with: python bench/table.py")
    return path
