"""Benchmark: process start to the first plane in memory, and the peak memory of that process.

Run: ``python bench/startup.py [--rounds 5]`` (writes ``bench/results/startup.json``).

Each round starts two fresh Python processes, alternating which goes first: one runs
``open_volume(path).levels[0].array[256].read()`` (defaults), the other opens the same 512³ uint64
sharded segmentation with TensorStore (default context) and reads the same z plane. Wall time of the
whole process (interpreter start, imports, open, read) and its peak RSS. Both run with bytecode
caches (:func:`child_env`), as any installed environment has them. Goals (issue 20): time
<= 1.1x TensorStore's, memory <= 2x. Data: ``bench/reader.py`` builds it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, record, save, spread
from reader import bench_dir, build_data

BENCH = "startup"

OURS = ("from napari_shardscope.core.volumes import open_volume\n"
        "import sys\n"
        "open_volume(sys.argv[1]).levels[0].array[256].read()\n")
PEER = ("import sys, tensorstore as ts\n"
        "s = ts.open({'driver': 'neuroglancer_precomputed', 'kvstore': 'file://' + sys.argv[1] + '/'}).result()\n"
        "s[:, :, 256, 0].read().result()\n")
#: The child's own peak RSS in KiB (``VmHWM``; ``ru_maxrss`` would report this parent's peak when it is higher:
#: Linux keeps it across ``fork`` and ``exec``).
REPORT = ("\nprint(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n")


def child_env() -> dict[str, str]:
    """The environment of both processes: bytecode caches on, as in any installed environment.

    A harness exporting ``PYTHONDONTWRITEBYTECODE`` makes every start recompile every module from
    source (numpy's and ours alike: ~80 ms of our open on this machine). The caches go to a private
    prefix, so the shared environment is not written to.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(bench_dir() / "pycache")
    return env


def run(code: str, path: Path) -> tuple[float, int]:
    """Wall seconds of a fresh process running ``code`` and its peak RSS in KiB."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code + REPORT, str(path)], capture_output=True, text=True,
                         check=True, timeout=120, env=child_env())
    return time.perf_counter() - t0, int(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = build_data(bench_dir())["segmentation"]
    run(OURS, path)
    run(PEER, path)  # page cache and bytecode caches warm for both
    ours: list[tuple[float, int]] = []
    peer: list[tuple[float, int]] = []
    for r in range(args.rounds):
        if r % 2 == 0:
            ours.append(run(OURS, path))
            peer.append(run(PEER, path))
        else:
            peer.append(run(PEER, path))
            ours.append(run(OURS, path))
    t_ratio = [p[0] / o[0] for o, p in zip(ours, peer, strict=True)]
    m_ratio = [o[1] / p[1] for o, p in zip(ours, peer, strict=True)]
    record(Row(BENCH, "process start -> first z plane of a 512³ uint64 volume", "uint64",
               spread([o[0] * 1e3 for o in ours], "{:.0f}") + " ms", "TensorStore alone",
               spread([p[0] * 1e3 for p in peer], "{:.0f}") + " ms", spread(t_ratio) + "x",
               "ours <= 1.1x TensorStore (ratio >= 0.91x)", statistics.median(t_ratio) >= 1 / 1.1, args.rounds))
    record(Row(BENCH, "peak memory of that process (ours / TensorStore)", "uint64",
               spread([o[1] / 1024 for o in ours], "{:.0f}") + " MiB", "TensorStore alone",
               spread([p[1] / 1024 for p in peer], "{:.0f}") + " MiB", spread(m_ratio) + "x",
               "<= 2x", statistics.median(m_ratio) <= 2.0, args.rounds))
    save(BENCH)


if __name__ == "__main__":
    main()
