"""Benchmark: from an edit to the updated display of a 1024 × 1024 view, in a real napari viewer.

Run (the virtual screen must hold a 1024² canvas)::

    xvfb-run -a -s "-screen 0 1920x1500x24" .venv/bin/python bench/proofreading.py [--repeats 7]

A 16 × 1024 × 1024 uint64 supervoxel base (2 scales, sharded precomputed) under a labelmap; the
body layer shows a whole 1024² plane at level 0 (zoom 1). Timed, each to the end of the slice and
a processed paint event:

* **merge** (then its undo): only the body map changes, the layer re-slices visible tiles whose
  supervoxel chunks come from the cache;
* **supervoxel split** (then its undo): overlay blocks change, the layers get new arrays;
* the peer in the same run: napari's own ``layer.refresh()`` of the same view with no edit (the
  cost of re-slicing alone) — our merge adds the store transaction and the log record to it.

Medians of several runs; the machine is shared and noisy. Slicing is synchronous here
(``NAPARI_ASYNC=0``) so the time covers the whole update.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["NAPARI_ASYNC"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from blocky_base import write_blocky_base

SHAPE = (16, 1024, 1024)


def make_base(path: Path) -> np.ndarray:
    """The benchmark's supervoxel base (blocky cells, 2 scales, sharded)."""
    return write_blocky_base(path, SHAPE, (8, 37, 41), (128, 128, 8), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    import napari
    from qtpy.QtWidgets import QApplication

    from napari_shardscope.core.labelmap import create_labelmap
    from napari_shardscope.core.versioned import create_repository
    from napari_shardscope.widgets.session import session_for

    def settle() -> None:
        for _ in range(3):
            QApplication.processEvents()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sv = make_base(root / "base")
        ids = np.unique(sv)
        repo = create_repository(root / "repo")
        create_labelmap(repo, "seg", root / "base", agglomeration={int(s): int(s) // 2 + 1 for s in ids})
        repo.close()
        viewer = napari.Viewer(show=True)
        viewer.window.resize(1800, 1400)
        session = session_for(viewer)
        session.controller.connect(root / "repo")
        layer = session.body_layer
        viewer.dims.set_current_step(0, 4)
        viewer.reset_view()
        settle()
        camera = viewer.scene.camera if hasattr(viewer, "scene") else viewer.camera
        camera.zoom = 1.0 / 8.0  # world units are nm (8 nm voxels): one screen pixel per voxel
        camera.center = (camera.center[0], 512 * 8.0, 512 * 8.0)
        settle()
        canvas = viewer.window._qt_viewer.canvas.native
        print(f"canvas {canvas.width()}x{canvas.height()} px, body layer level {layer.data_level}, "
              f"corner pixels {layer.corner_pixels.tolist()}")
        v = session.controller.version
        plane = v.read_bodies((4, slice(None), slice(None)))
        a, b = int(plane[100, 100]), int(plane[600, 700])
        target = int(v.read_supervoxels((4, 300, 300)))
        voxels = np.argwhere(sv == target)
        half = voxels[: len(voxels) // 2]
        rows: dict[str, list[float]] = {"refresh only (napari, no edit)": [], "merge -> display": [],
                                        "undo merge -> display": [], "supervoxel split -> display": [],
                                        "undo split -> display": []}
        for _ in range(args.repeats + 1):
            t0 = time.perf_counter()
            layer.refresh()
            settle()
            rows["refresh only (napari, no edit)"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            v.merge(a, [b])
            settle()
            rows["merge -> display"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            v.undo()
            settle()
            rows["undo merge -> display"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            v.split_supervoxel(target, half)
            settle()
            rows["supervoxel split -> display"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            v.undo()
            settle()
            rows["undo split -> display"].append(time.perf_counter() - t0)
        assert int(np.asarray(layer.data[0][4])[600, 700]) == b  # after the undo, b is its own body again
        viewer.close()
    med = {k: statistics.median(t[1:]) * 1000 for k, t in rows.items()}  # the first round warms caches
    print(f"edit -> updated display of a {SHAPE[1]}x{SHAPE[2]} view (median of {args.repeats}):")
    for name, ms in med.items():
        print(f"  {name:32s} {ms:8.1f} ms")
    base = med["refresh only (napari, no edit)"]
    print(f"  merge / napari refresh alone: {med['merge -> display'] / base:.2f}x (goal: merge -> display < 100 ms)")


if __name__ == "__main__":
    main()
