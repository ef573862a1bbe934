"""Benchmark: browsing — key press to the new plane on screen, stepping through z at a human pace.

Run (needs a display; headless: a virtual one)::

    xvfb-run -a python bench/browse.py [--rounds 5] [--steps 100]

In a real napari viewer (synchronous slicing, so the frame drawn holds the new plane), step through
``--steps`` consecutive z planes at 10 steps per second, as holding an arrow key does, and time each
step from the dims change (what the key binding does) to a rendered frame (``canvas.screenshot()``
draws and reads back the frame). Two layers of the same 512³ uint64 sharded segmentation
(``bench/reader.py`` builds it), each in its own rounds, alternating:

* shardscope: ``open_volume(path)`` with the defaults (a fresh context of the default cache size
  each round, so every round starts cold) added with ``add_volumes``: multiscale, plane prefetch;
* a plain napari Labels layer over the TensorStore array (TensorStore's default context), as a
  user of TensorStore alone would add it.

Figures per round: p50 and p90 of the step latencies; the ratio is plain p90 / ours p90. Goal
(issue 20): ours p90 <= 16 ms while the plain layer pays every cold plane.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, record, save, spread
from reader import bench_dir, build_data

BENCH = "browse"
GOAL_P90_MS = 16.0
PERIOD_S = 0.1  # 10 steps per second


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def step_run(viewer: Any, layer: Any, start: int, steps: int) -> list[float]:
    """Latencies (s) of ``steps`` z steps from ``start``, one every :data:`PERIOD_S`."""
    from qtpy.QtWidgets import QApplication

    canvas = viewer.window._qt_viewer.canvas
    viewer.dims.set_current_step(0, start)
    canvas.screenshot()
    out = []
    for i in range(1, steps + 1):
        t = time.perf_counter()
        viewer.dims.set_current_step(0, start + i)
        canvas.screenshot()
        out.append(time.perf_counter() - t)
        deadline = t + PERIOD_S
        while time.perf_counter() < deadline:  # the user's pace; the GUI stays live meanwhile
            QApplication.processEvents()
            time.sleep(0.002)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    os.environ["NAPARI_ASYNC"] = "0"
    import napari
    import tensorstore as ts

    from napari_shardscope.core.bytestore.context import default_cache_bytes
    from napari_shardscope.core.volumes import make_context, open_volume
    from napari_shardscope.napari_plugin.viewer import add_volumes

    path = build_data(bench_dir())["segmentation"]
    viewer = napari.Viewer(show=True)
    viewer.window.resize(1000, 900)
    ours_p50: list[float] = []
    ours_p90: list[float] = []
    plain_p50: list[float] = []
    plain_p90: list[float] = []
    levels = set()
    for r in range(args.rounds):
        start = 40 + (r * 83) % (512 - args.steps - 50)  # a different stretch of z each round: cold for both
        for who in ("ours", "plain") if r % 2 == 0 else ("plain", "ours"):
            viewer.layers.clear()
            if who == "ours":
                volume = open_volume(path, context=make_context(default_cache_bytes()))
                (layer,) = add_volumes(viewer, [volume])
            else:
                store = ts.open({"driver": "neuroglancer_precomputed", "scale_index": 0,
                                 "kvstore": {"driver": "file", "path": str(path) + "/"}}).result()
                layer = viewer.add_labels(store[..., 0].T, name="plain TensorStore")
            times = step_run(viewer, layer, start, args.steps)
            p50, p90 = percentile(times, 50) * 1e3, percentile(times, 90) * 1e3
            (ours_p50 if who == "ours" else plain_p50).append(p50)
            (ours_p90 if who == "ours" else plain_p90).append(p90)
            if who == "ours":
                levels.add(int(layer.data_level))
            print(f"  round {r} {who:5s}: p50 {p50:6.1f} ms, p90 {p90:6.1f} ms, max {max(times) * 1e3:6.1f} ms")
    viewer.close()
    ratios = [p / o for o, p in zip(ours_p90, plain_p90, strict=True)]
    setting = (f"{args.steps} steps at 10/s, synchronous slicing; ours at multiscale level(s) {sorted(levels)}, "
               "plain layer at full resolution")
    record(Row(BENCH, "z step to rendered frame, p90", "uint64", spread(ours_p90, "{:.1f}") + " ms",
               "plain napari layer over TensorStore", spread(plain_p90, "{:.1f}") + " ms", spread(ratios) + "x",
               f"ours p90 <= {GOAL_P90_MS:.0f} ms", statistics.median(ours_p90) <= GOAL_P90_MS, args.rounds, setting))
    record(Row(BENCH, "z step to rendered frame, p50", "uint64", spread(ours_p50, "{:.1f}") + " ms",
               "plain napari layer over TensorStore", spread(plain_p50, "{:.1f}") + " ms",
               spread([p / o for o, p in zip(ours_p50, plain_p50, strict=True)]) + "x", "-", None, args.rounds,
               setting))
    save(BENCH)


if __name__ == "__main__":
    main()
