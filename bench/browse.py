"""Benchmark: browsing — key press to the new plane on screen, stepping through z at a human pace.

Run (needs a display; headless: a virtual one)::

    xvfb-run -a python bench/browse.py [--rounds 5] [--steps 100]

In a real napari viewer step through ``--steps`` consecutive z planes at 10 steps per second, as
holding an arrow key does. Layers over the same 512³ data (``bench/reader.py`` builds it), each in
its own run, the order rotating every round:

* **ours**: ``open_volume(path)`` with the defaults (a fresh context of the default cache size each
  run, so every run starts cold) added with ``add_volumes``: multiscale, plane prefetch,
  synchronous slicing (napari's default);
* **ours, async slicing**: the same, with napari's asynchronous slicing on (what ``shardscope open``
  turns on): the read runs on napari's slicing thread and the frame is drawn when it lands;
* **plain**: a napari Labels layer over the TensorStore array (TensorStore's default context), as a
  user of TensorStore alone would add it;
* **ours, image** and **plain, image**: the same two over the uint8 image volume (napari Image layers,
  which read the plane shown as ``z:z+1``);
* **floor, Labels**: a napari Labels layer over an in-memory NumPy uint64 array of the same planes
  (nothing to read: what napari's slicing, uint64 colormapping, texture upload, draw and
  presentation cost on this machine's renderer);
* **floor, Image**: an in-memory uint8 Image layer of the same planes of the image volume (the
  renderer without the labels colormapping).

What is timed (the primary figure, "key press → frame presented"), the same for every layer:

* start: just before a Right-arrow key press is sent to the canvas widget (``QTest.keyPress``: a
  real ``QKeyEvent`` through vispy's Qt backend and napari's keymap to its repeatable
  "increment dims right" action, the binding a user holds to step; the axis stepped is the last
  slider used, set to z);
* then Qt's own event loop runs as in the application: the key handler steps the dims (with
  synchronous slicing the plane is read and set on the layer inside it), the layer asks for an
  update, Qt paints the canvas;
* the draw counts once it starts with the new slice in place (``layer.loaded``; with async slicing
  a draw of the old plane may come first and does not count); at its end ``glFinish`` drains the GL
  pipeline (the draw done, not just queued: "drawn");
* stop: Qt's ``frameSwapped`` after that draw — Qt has composed the canvas into the window and
  returned from ``swapBuffers`` — followed by another ``glFinish`` ("presented"). That is when the
  user sees the plane. The key release comes after, outside the timed region.

Why no read-back: until this version the clock stopped when ``canvas.screenshot()`` returned. A
screenshot re-renders the scene and reads the whole framebuffer back to the CPU (``glReadPixels``,
4–9 ms per step with software OpenGL here); no user waits for that, and it skips the window
composition and swap a user does wait for. That figure stays as a secondary row ("z step to
screenshot returned", driven by ``dims.set_current_step`` as before) so nothing is hidden.

Checked, outside the timed region: on every 10th step the pixels the X server holds for the
canvas (what was presented, ``QScreen.grabWindow``) are compared with a fresh render of the current
state; they must agree on >= 90% of pixels (napari's notification toast may cover a strip), and
the frame presented one step earlier must agree less (the planes differ). The counts are printed and
the goal row is only met when every sampled frame held its new plane. A breakdown of the median step
is printed per layer: ``key`` (the key event handled, the synchronous read included), ``wait``
(until the draw starts), ``draw`` (+ glFinish), ``present`` (composition and swap).

Zoom-out after browsing (``--part zoom``, also in the default run): step ``--zoom-steps`` planes at 10/s at
the finest level, pause one step period, then zoom out (``camera.zoom`` set, as a few wheel ticks do) to
where napari shows the next coarser level (found once, untimed, before the rounds); timed from the zoom
to the frame presented with that level's slice in place (the same clock, its draw must start with
``data_level == 1`` and the slice loaded). Three multiscale layers, each added afresh (cold) per round,
order rotating, for the uint64 segmentation and the uint8 image: ours (defaults: plane prefetch and the
next coarser level's window prefetched), ours with the link to the coarser level cut (plane prefetch
only: what the zoom-out cost before the coarser-scale prefetch), and a plain napari multiscale Labels
(Image) layer over the three TensorStore scales (same scale and translate). Ratios per round: plain / ours
and no-coarser / ours.

Figures per round: p50 and p90 of the step latencies. Ratios: plain / ours (> 1: we are faster),
floor / ours (how close to the renderer alone; 1.0 is the best possible). Goal (issue 20): ours
p90 <= 16 ms while the plain layer pays every cold plane. When the floor itself is above 16 ms the
goal cannot be met on that machine (software OpenGL); the floor rows say so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Paired, Row, record, record_pair, save, spread
from reader import bench_dir, build_data

BENCH = "browse"
GOAL_P90_MS = 16.0
PERIOD_S = 0.1  # 10 steps per second


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


class FrameClock:
    """Times one key press to the frame that shows its plane, drawn and presented.

    Hooks the vispy canvas's draw event (first and last handler) and the Qt widget's
    ``frameSwapped`` signal. Armed at the key press, a draw counts only when it starts with the
    layer's new slice in place (``layer.loaded``; with async slicing a draw of the old plane can come
    first). At the end of that draw the GL pipeline is drained (``glFinish``: the draw is really done,
    not just queued) and the time noted ("drawn"); the clock stops at the next ``frameSwapped``: Qt
    has composed the window (the canvas's framebuffer into the top-level window) and returned from
    ``swapBuffers`` ("presented"), i.e. what the user sees.
    """

    def __init__(self, canvas: Any) -> None:
        from vispy.gloo import gl

        self._gl = gl
        self.native = canvas.native
        self.scene_canvas = canvas._scene_canvas
        self.layer: Any = None
        self.ready: Any = None  # an extra condition on the layer for a draw to count (e.g. the new level shown)
        self.armed = False
        self.good = False
        self.draw_started = 0.0
        self.drawn = 0.0
        self.presented = 0.0
        self.loop: Any = None
        self.scene_canvas.events.draw.connect(self._draw_started, position="first")
        self.scene_canvas.events.draw.connect(self._draw_done, position="last")
        self.native.frameSwapped.connect(self._swapped)

    def _draw_started(self, event: Any = None) -> None:
        if self.armed and not self.good and self.layer is not None and self.layer.loaded and (
                self.ready is None or self.ready()):
            self.good = True
            self.draw_started = time.perf_counter()

    def _draw_done(self, event: Any = None) -> None:
        if self.armed and self.good and not self.drawn:
            self._gl.glFinish()
            self.drawn = time.perf_counter()

    def _swapped(self) -> None:
        if self.armed and self.drawn and not self.presented:
            self.native.makeCurrent()
            self._gl.glFinish()
            self.presented = time.perf_counter()
            self.armed = False
            if self.loop is not None:
                self.loop.quit()

    def press(self, layer: Any, key: Any, timeout_s: float = 30.0) -> dict[str, float]:
        """Press ``key`` on the canvas as a user does and wait (bounded) until its frame is presented.

        Returns seconds after the press: ``drawn``, ``presented``, and the phases that add up to
        ``presented``: ``key`` (the key event handled: napari's keymap, the dims step and, with
        synchronous slicing, the slice read and set on the layer), ``wait`` (until the draw of the new
        slice starts: Qt's update request, with async slicing the read), ``draw`` (the canvas draw,
        texture upload included, + glFinish) and ``present`` (Qt composes the window and swaps).
        The key is released afterwards, outside the timed region (a held key's auto-repeat sends
        release + press pairs).
        """
        from qtpy.QtTest import QTest

        try:
            return self.act(layer, lambda: QTest.keyPress(self.native, key), timeout_s=timeout_s)
        finally:
            QTest.keyRelease(self.native, key)

    def act(self, layer: Any, action: Any, ready: Any = None, timeout_s: float = 30.0) -> dict[str, float]:
        """Run ``action`` (a key press, a zoom) and wait (bounded) until a frame of ``layer`` is presented with
        its new slice in place and ``ready()`` true; the phases as :meth:`press` (``key``: the action itself)."""
        from qtpy.QtCore import QEventLoop, QTimer

        self.layer, self.ready, self.good, self.draw_started, self.drawn, self.presented = \
            layer, ready, False, 0.0, 0.0, 0.0
        self.armed = True
        t = time.perf_counter()
        action()
        key_done = time.perf_counter()
        if self.armed:
            self.loop = QEventLoop()
            timer = QTimer()
            timer.setSingleShot(True)
            timer.timeout.connect(self.loop.quit)
            timer.start(int(timeout_s * 1e3))
            self.loop.exec()
            timer.stop()
            self.loop = None
        self.armed = False
        self.ready = None
        if not self.presented:
            raise TimeoutError(f"no frame of the new view presented within {timeout_s} s of the action")
        started = max(self.draw_started, key_done)
        return {"drawn": self.drawn - t, "presented": self.presented - t, "key": key_done - t,
                "wait": started - key_done, "draw": self.drawn - started, "present": self.presented - self.drawn}


def grab_presented(canvas: Any) -> np.ndarray:
    """The canvas's pixels as the X server holds them (what was presented, not a re-render)."""
    from napari._qt.utils import QImg2array
    from qtpy.QtCore import QPoint
    from qtpy.QtWidgets import QApplication

    native = canvas.native
    top = native.window()
    pos = native.mapTo(top, QPoint(0, 0))
    pixmap = QApplication.primaryScreen().grabWindow(int(top.winId()), pos.x(), pos.y(),
                                                     native.width(), native.height())
    return QImg2array(pixmap.toImage())[..., :3].copy()


def rendered_now(canvas: Any) -> np.ndarray:
    """A fresh render of the viewer's current state (read back from the canvas's framebuffer)."""
    from napari._qt.utils import QImg2array

    return QImg2array(canvas.screenshot())[..., :3].copy()


def same_fraction(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pixels equal (within 2 levels per channel) in two frames of one size."""
    if a.shape != b.shape:
        return 0.0
    return float(np.mean(np.all(np.abs(a.astype(np.int16) - b.astype(np.int16)) <= 2, axis=-1)))


PHASES = ("key", "wait", "draw", "present")
VERIFY_EVERY = 10  # check the presented frame on every 10th step (outside the timed region)
MATCH = 0.9  # presented vs fresh render: >= 90% of pixels equal (napari's notification toast may cover a strip)


@dataclass
class Verification:
    """Outside the timed region: did the presented frame hold the new plane?"""

    samples: int = 0
    matches: int = 0  # presented frame == a fresh render of the current state
    distinct: int = 0  # ... and the previous step's presented frame differs from that render

    def __str__(self) -> str:
        return (f"presented == fresh render of the new plane on {self.matches}/{self.samples} sampled steps, "
                f"distinguishable from the previous plane's frame on {self.distinct}")


def step_run_keys(viewer: Any, clock: FrameClock, layer: Any, start: int, steps: int,
                  check: Verification) -> dict[str, list[float]]:
    """Key press → frame drawn / presented (s) for ``steps`` z steps from ``start``, one every :data:`PERIOD_S`."""
    from qtpy.QtCore import Qt

    canvas = viewer.window._qt_viewer.canvas
    viewer.dims.last_used = 0  # the axis the arrow keys step (napari: the last slider used)
    viewer.dims.set_current_step(0, start)
    wait_loaded(layer)
    canvas.screenshot()
    pause(time.perf_counter() + PERIOD_S)  # the user looks at the first plane before stepping on
    phases: dict[str, list[float]] = {}
    previous: np.ndarray | None = None
    for i in range(1, steps + 1):
        t = time.perf_counter()
        for name, value in clock.press(layer, Qt.Key_Right).items():  # napari's "increment dims right"
            phases.setdefault(name, []).append(value)
        if viewer.dims.current_step[0] != start + i:
            raise RuntimeError(f"the key press left z at {viewer.dims.current_step[0]}, expected {start + i}")
        if i % VERIFY_EVERY == VERIFY_EVERY - 1:
            previous = grab_presented(canvas)
        elif i % VERIFY_EVERY == 0:
            shown = grab_presented(canvas)
            fresh = rendered_now(canvas)
            check.samples += 1
            if same_fraction(shown, fresh) >= MATCH:
                check.matches += 1
                if previous is not None and same_fraction(previous, fresh) < same_fraction(shown, fresh) - 0.01:
                    check.distinct += 1
            previous = None
        pause(t + PERIOD_S)
    return phases


def step_run_screenshot(viewer: Any, layer: Any, start: int, steps: int) -> list[float]:
    """The previous method: ``dims.set_current_step`` → slice loaded → ``canvas.screenshot()`` returned.

    The screenshot re-renders the scene into the canvas's framebuffer and reads it all back
    (``glReadPixels``); no window composition or swap. Latencies (s), one step every :data:`PERIOD_S`.
    """

    canvas = viewer.window._qt_viewer.canvas
    viewer.dims.set_current_step(0, start)
    wait_loaded(layer)
    canvas.screenshot()
    pause(time.perf_counter() + PERIOD_S)
    out = []
    for i in range(1, steps + 1):
        t = time.perf_counter()
        viewer.dims.set_current_step(0, start + i)
        wait_loaded(layer)
        canvas.screenshot()
        out.append(time.perf_counter() - t)
        pause(t + PERIOD_S)
    return out


def pause(deadline: float) -> None:
    """Wait until ``deadline`` at the user's pace; the GUI stays live meanwhile."""
    from qtpy.QtWidgets import QApplication

    while time.perf_counter() < deadline:
        QApplication.processEvents()
        time.sleep(0.002)


def wait_loaded(layer: Any, timeout: float = 30.0) -> None:
    """Let Qt run until ``layer`` holds its new slice (at once when slicing is synchronous); bounded."""
    from qtpy.QtWidgets import QApplication

    deadline = time.perf_counter() + timeout
    while not layer.loaded and time.perf_counter() < deadline:
        QApplication.processEvents()
        time.sleep(0.0002)


WHO = ("ours", "ours-async", "plain", "floor-labels", "floor-image", "ours-image", "plain-image")


def add_layer(viewer: Any, who: str, paths: dict[str, Path], start: int, steps: int) -> tuple[Any, int]:
    """The layer ``who`` shows, and the z where its stepping starts."""
    import tensorstore as ts

    from napari_shardscope.core.bytestore.context import default_cache_bytes
    from napari_shardscope.core.volumes import make_context, open_volume
    from napari_shardscope.napari_plugin.viewer import add_volumes

    viewer.layers.clear()
    viewer._layer_slicer._force_sync = who != "ours-async"  # what NAPARI_ASYNC sets when the viewer starts
    kind = "image" if who.endswith("image") else "segmentation"
    if who.startswith("ours"):
        volume = open_volume(paths[kind], context=make_context(default_cache_bytes()))
        (layer,) = add_volumes(viewer, [volume])
        return layer, start
    store = ts.open({"driver": "neuroglancer_precomputed", "scale_index": 0,
                     "kvstore": {"driver": "file", "path": str(paths[kind]) + "/"}}).result()[..., 0].T
    if who == "plain":
        return viewer.add_labels(store, name="plain TensorStore"), start
    if who == "plain-image":
        return viewer.add_image(store, name="plain TensorStore", colormap="gray", contrast_limits=(0, 255)), start
    planes = np.asarray(store[start:start + steps + 1].read().result())  # only the planes stepped through
    if who == "floor-image":
        return viewer.add_image(planes, name="in-memory image", colormap="gray", contrast_limits=(0, 255)), 0
    return viewer.add_labels(planes, name="in-memory labels"), 0


ZOOM_WHO = ("ours", "ours-no-coarser", "plain")


def add_multiscale(viewer: Any, who: str, paths: dict[str, Path], kind: str = "segmentation") -> Any:
    """The segmentation (or image) as a multiscale layer: ours (open_volume + add_volumes, a fresh default-size
    context), ours with the coarser-level link cut, or napari's Labels (Image) over TensorStore's scales (its
    default context)."""
    import tensorstore as ts

    from napari_shardscope.core.bytestore.context import default_cache_bytes
    from napari_shardscope.core.volumes import make_context, open_volume
    from napari_shardscope.napari_plugin.layers import volume_layer_data

    viewer.layers.clear()
    viewer._layer_slicer._force_sync = True
    volume = open_volume(paths[kind], context=make_context(default_cache_bytes()))
    if who.startswith("ours"):
        from napari.layers import Layer

        data, kwargs, layer_type = volume_layer_data(volume)  # what add_volumes adds
        if who == "ours-no-coarser":  # cut before the layer's first read
            for shown in data:
                if shown.inner.prefetcher is not None:
                    shown.inner.prefetcher.coarser = None
        layer = Layer.create(data, kwargs, layer_type)
        viewer.add_layer(layer)
        return layer
    stores = [ts.open({"driver": "neuroglancer_precomputed", "scale_index": i,
                       "kvstore": {"driver": "file", "path": str(paths[kind]) + "/"}}).result()[..., 0].T
              for i in range(len(volume.levels))]
    if kind == "image":
        return viewer.add_image(stores, multiscale=True, scale=volume.voxel_size, translate=volume.translate,
                                name="plain TensorStore", colormap="gray", contrast_limits=(0, 255))
    return viewer.add_labels(stores, multiscale=True, scale=volume.voxel_size, translate=volume.translate,
                             name="plain TensorStore")


def zoom_to_level1(viewer: Any, layer: Any) -> float:
    """The camera zoom at which napari shows level 1 of ``layer`` (zoomed out step by step from the reset view)."""
    from qtpy.QtWidgets import QApplication

    viewer.reset_view()
    zoom = viewer.scene.camera.zoom
    for _ in range(60):
        QApplication.processEvents()
        if layer.data_level >= 1:
            break
        zoom *= 0.9
        viewer.scene.camera.zoom = zoom
        pause(time.perf_counter() + 0.02)
    if layer.data_level != 1:
        raise RuntimeError(f"zooming out reached level {layer.data_level}, not the next coarser level 1")
    return zoom


def zoom_run(viewer: Any, clock: FrameClock, layer: Any, start: int, steps: int, zoom: float) -> float:
    """Browse ``steps`` planes from ``start`` at 10/s at the finest level, pause, zoom out to ``zoom``: seconds
    from the zoom to the frame presented with level 1's slice."""
    from qtpy.QtCore import Qt

    viewer.reset_view()
    viewer.dims.last_used = 0
    viewer.dims.set_current_step(0, start)
    wait_loaded(layer)
    pause(time.perf_counter() + PERIOD_S)
    if layer.data_level != 0:
        raise RuntimeError(f"the reset view shows level {layer.data_level}, not the finest")
    for _ in range(steps):
        t = time.perf_counter()
        clock.press(layer, Qt.Key_Right)
        pause(t + PERIOD_S)

    def zoom_out() -> None:
        viewer.scene.camera.zoom = zoom

    out = clock.act(layer, zoom_out, ready=lambda: layer.data_level == 1)["presented"]
    if layer.data_level != 1 or viewer.dims.current_step[0] != start + steps:
        raise RuntimeError("the zoom-out did not end at level 1 on the last plane browsed")
    return out


def bench_zoom(viewer: Any, clock: FrameClock, paths: dict[str, Path], rounds: int, steps: int) -> None:
    setting = (f"{steps} Right-arrow presses at 10/s at the finest level, a pause of one step period, then "
               "camera.zoom set to where napari shows level 1 (of 3); clock: the zoom to Qt's frameSwapped after the "
               "draw of the level-1 slice + glFinish; synchronous slicing; each layer added afresh (cold) per round")
    for kind, dtype in (("segmentation", "uint64"), ("image", "uint8")):
        layer = add_multiscale(viewer, "plain", paths, kind)
        zoom = zoom_to_level1(viewer, layer)
        times: dict[str, list[float]] = {w: [] for w in ZOOM_WHO}
        for r in range(rounds):
            start = 40 + (r * 97) % (512 - steps - 60)  # a different stretch of z each round
            order = ZOOM_WHO[r % len(ZOOM_WHO):] + ZOOM_WHO[:r % len(ZOOM_WHO)]
            for who in order:
                layer = add_multiscale(viewer, who, paths, kind)
                times[who].append(zoom_run(viewer, clock, layer, start, steps, zoom))
                print(f"  round {r} {dtype} zoom-out {who:16s}: {times[who][-1] * 1e3:6.1f} ms", flush=True)
            viewer.layers.clear()
        record_pair(BENCH, "zoom-out after browsing: zoom to frame presented at the next coarser level", dtype,
                    Paired(times["ours"], times["plain"]), "plain napari multiscale layer over TensorStore", None,
                    setting=setting)
        record_pair(BENCH, "zoom-out after browsing, coarser-scale prefetch on vs off", dtype,
                    Paired(times["ours"], times["ours-no-coarser"]),
                    "ours with plane prefetch only (no coarser-level window)", None, setting=setting)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--zoom-steps", type=int, default=20, help="planes browsed before each zoom-out")
    parser.add_argument("--part", choices=("all", "steps", "zoom"), default="all",
                        help="run only the z-stepping or only the zoom-out rows (the other rows of the last run kept)")
    args = parser.parse_args()
    os.environ["NAPARI_ASYNC"] = "0"
    import napari

    paths = build_data(bench_dir())
    viewer = napari.Viewer(show=True)
    viewer.window.resize(1000, 900)
    clock = FrameClock(viewer.window._qt_viewer.canvas)
    if args.part in ("all", "zoom"):
        bench_zoom(viewer, clock, paths, args.rounds, args.zoom_steps)
    if args.part == "zoom":
        viewer.close()
        save(BENCH, partial=True)
        return
    methods = ("presented", "drawn", "screenshot")
    p50 = {m: {w: [] for w in WHO} for m in methods}
    p90 = {m: {w: [] for w in WHO} for m in methods}
    checks = {w: Verification() for w in WHO}
    phase_ms = {w: {name: [] for name in PHASES} for w in WHO}  # per round: the median step's phases
    levels = set()
    for r in range(args.rounds):
        start = 40 + (r * 83) % (512 - args.steps - 50)  # a different stretch of z each round: cold for all
        order = WHO[r % len(WHO):] + WHO[:r % len(WHO)]
        for method in ("keys", "screenshot"):  # each layer added afresh (ours: a new, cold cache) per method
            for who in order:
                layer, first = add_layer(viewer, who, paths, start, args.steps)
                if method == "keys":
                    phases = step_run_keys(viewer, clock, layer, first, args.steps, checks[who])
                    runs = {"presented": phases["presented"], "drawn": phases["drawn"]}
                    for name in PHASES:
                        phase_ms[who][name].append(statistics.median(phases[name]) * 1e3)
                else:
                    runs = {"screenshot": step_run_screenshot(viewer, layer, first, args.steps)}
                for m, times in runs.items():
                    p50[m][who].append(percentile(times, 50) * 1e3)
                    p90[m][who].append(percentile(times, 90) * 1e3)
                if who.startswith("ours"):
                    levels.add(int(layer.data_level))
                times = runs["presented" if method == "keys" else "screenshot"]
                worst = int(np.argmax(times))
                label = "key->presented" if method == "keys" else "step->screenshot"
                extra = f", drawn p90 {p90['drawn'][who][-1]:5.1f} ms" if method == "keys" else ""
                print(f"  round {r} {who:12s} {label:16s}: p50 {percentile(times, 50) * 1e3:6.1f} ms, "
                      f"p90 {percentile(times, 90) * 1e3:6.1f} ms, max {times[worst] * 1e3:6.1f} ms "
                      f"(step {worst + 1}){extra}", flush=True)
                del layer
    viewer.close()
    for who in WHO:
        print(f"  check {who:12s}: {checks[who]}")
    for who in WHO:
        print(f"  phases {who:12s} (median step, median over rounds): " + ", ".join(
            f"{name} {statistics.median(phase_ms[who][name]):.1f} ms" for name in PHASES))
    verified = all(c.samples and c.matches == c.samples for c in checks.values())

    def ratios(peer: str, ours: str, q: dict[str, list[float]]) -> str:
        return spread([p / o for o, p in zip(q[ours], q[peer], strict=True)]) + "x"

    def ms(values: list[float]) -> str:
        return spread(values, "{:.1f}") + " ms"

    setting = (f"{args.steps} Right-arrow key presses at 10/s on the canvas, synchronous slicing; ours at "
               f"multiscale level(s) {sorted(levels)}, others at full resolution; clock stops at Qt's frameSwapped "
               "after the draw of the new slice + glFinish; no read-back")
    check_note = "; frame checked: " + ("the presented frame held the new plane on every sampled step" if verified
                                        else "NOT every sampled presented frame held the new plane")
    floor_ok = statistics.median(p90["presented"]["floor-labels"]) <= GOAL_P90_MS
    goal = f"ours p90 <= {GOAL_P90_MS:.0f} ms" + ("" if floor_ok else " (the renderer floor alone is above it)")
    case = "key press to frame presented"
    pres = p90["presented"], p50["presented"]
    for q, name in zip(pres, ("p90", "p50"), strict=True):
        is90 = name == "p90"
        record(Row(BENCH, f"{case}, {name}", "uint64", ms(q["ours"]), "plain napari layer over TensorStore",
                   ms(q["plain"]), ratios("plain", "ours", q), goal if is90 else "-",
                   (statistics.median(q["ours"]) <= GOAL_P90_MS and verified) if is90 else None,
                   args.rounds, setting + (check_note if is90 else "")))
    for q, name in zip(pres, ("p90", "p50"), strict=True):
        is90 = name == "p90"
        record(Row(BENCH, f"{case}, {name}", "uint8", ms(q["ours-image"]), "plain napari Image layer over TensorStore",
                   ms(q["plain-image"]), ratios("plain-image", "ours-image", q), goal if is90 else "-",
                   (statistics.median(q["ours-image"]) <= GOAL_P90_MS and verified) if is90 else None,
                   args.rounds, setting.replace("ours at", "ours (image) at") + (check_note if is90 else "")))
    for q, name in zip(pres, ("p90", "p50"), strict=True):
        record(Row(BENCH, f"{case}, {name}, against the renderer floor", "uint64", ms(q["ours"]),
                   "floor: napari Labels over in-memory numpy", ms(q["floor-labels"]),
                   ratios("floor-labels", "ours", q), "-", None, args.rounds,
                   "same method; floor/ours, 1.0 = nothing but napari and the renderer"))
    for q, name in zip(pres, ("p90", "p50"), strict=True):
        record(Row(BENCH, f"{case}, {name}, renderer floor", "uint8", ms(q["floor-image"]),
                   "floor: napari Labels over in-memory numpy (uint64)", ms(q["floor-labels"]),
                   ratios("floor-labels", "floor-image", q), "-", None, args.rounds,
                   "same method; ours column: napari Image over in-memory uint8 numpy; nothing read from disk"))
    for q, name in zip(pres, ("p90", "p50"), strict=True):
        record(Row(BENCH, f"{case}, {name}, async slicing", "uint64", ms(q["ours-async"]),
                   "ours, synchronous slicing", ms(q["ours"]), ratios("ours", "ours-async", q), "-", None,
                   args.rounds, "same method, napari async slicing (NAPARI_ASYNC=1)"))
    q = p90["drawn"]
    record(Row(BENCH, "key press to frame drawn (before window composition and swap), p90", "uint64", ms(q["ours"]),
               "floor: napari Labels over in-memory numpy", ms(q["floor-labels"]), ratios("floor-labels", "ours", q),
               "-", None, args.rounds, "same runs; clock stopped at the end of the canvas draw + glFinish; "
               f"plain TensorStore layer {ms(q['plain'])}"))
    shot = p90["screenshot"], p50["screenshot"]
    for q, name in zip(shot, ("p90", "p50"), strict=True):
        record(Row(BENCH, f"z step to screenshot returned (previous method, includes read-back), {name}", "uint64",
                   ms(q["ours"]), "plain napari layer over TensorStore", ms(q["plain"]), ratios("plain", "ours", q),
                   "-", None, args.rounds, "dims.set_current_step → slice loaded → canvas.screenshot() (re-render + "
                   f"glReadPixels of the canvas); floor Labels {ms(q['floor-labels'])}, "
                   f"floor Image {ms(q['floor-image'])}"))
    save(BENCH, partial=args.part != "all")


if __name__ == "__main__":
    main()
