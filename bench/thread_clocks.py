"""Per-thread CPU clocks of this process during a call, and how long its main thread was blocked.

On a 2-core machine an import's wall time is its critical path: the main thread's own CPU, the time it
waits for a core, and the time it is *blocked* (sleeping on a queue, a future, a lock or I/O) waiting for
a helper thread. ``/proc/self/task/<tid>/schedstat`` gives each thread's time on a CPU and time runnable
but waiting for one; blocked time is the rest of the main thread's wall time. Threads end before the call
returns (the table writers are joined), so a monitor samples every task every few milliseconds and keeps
each one's last reading.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

INTERVAL = 0.01


def _read() -> dict[int, tuple[str, int, int]]:
    out: dict[int, tuple[str, int, int]] = {}
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            run, wait, _ = Path(f"/proc/self/task/{task}/schedstat").read_text().split()
            comm = Path(f"/proc/self/task/{task}/comm").read_text().strip()
            out[int(task)] = (comm, int(run), int(wait))
    return out


def _group(comm: str) -> str:
    for prefix in ("base-table", "base-spill", "base-read", "base-supervoxels", "base-index"):
        if comm.startswith(prefix):
            return prefix
    return "other"


def measure_threads(fn: Callable[[], Any]) -> dict[str, float]:
    """Run ``fn``; return the CPU seconds of each thread group that ran during it (``cpu:<group>``), the main
    thread's CPU (``main_cpu``), its wait for a core (``main_queued``) and its blocked time (``main_blocked``)."""
    me = threading.get_native_id()
    start = _read()
    last: dict[int, tuple[str, int, int]] = dict(start)
    stop = threading.Event()

    names: dict[int, str] = {}

    def monitor() -> None:
        while not stop.wait(INTERVAL):
            names.update((t.native_id, t.name) for t in threading.enumerate() if t.native_id is not None)
            last.update(_read())

    mon = threading.Thread(target=monitor, daemon=True, name="bench-clocks")
    mon.start()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    last.update(_read())
    stop.set()
    mon.join()
    mon_id = mon.native_id
    groups: dict[str, float] = defaultdict(float)
    for tid, (comm, run, _) in last.items():
        if tid in (me, mon_id):
            continue
        groups[_group(names.get(tid, comm))] += (run - start.get(tid, (comm, 0, 0))[1]) / 1e9
    _, r1, w1 = last[me]
    _, r0, w0 = start[me]
    out = {f"cpu:{g}": v for g, v in sorted(groups.items())}
    out.update(main_cpu=(r1 - r0) / 1e9, main_queued=(w1 - w0) / 1e9,
               main_blocked=wall - (r1 - r0) / 1e9 - (w1 - w0) / 1e9)
    return out
