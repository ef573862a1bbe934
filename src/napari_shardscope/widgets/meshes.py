"""Selected bodies as napari Surface layers (and their skeletons as Vectors), loaded off the GUI thread.

Thin glue over :class:`~napari_shardscope.core.proofreading.meshes.SurfaceFollower`: after every
controller change (selection, merge, cleave, split, undo, checkout) the follower's plan says which
body surfaces to load and which to remove; removals happen at once, loads run in a napari worker
thread with napari's progress bar, and the layers are added or given new data on the GUI thread.
A change arriving while a load runs is planned again when it ends. Each surface takes its body's
colour from the body layer.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtCore import QTimer

from napari_shardscope.core.proofreading.meshes import BodySurface, SurfaceFollower, SurfacePlan
from napari_shardscope.widgets.workers import GuiProgress

if TYPE_CHECKING:
    from napari_shardscope.widgets.session import ViewerSession

#: Metadata key marking the layers this module owns (value: the body id).
SURFACE_KEY = "shardscope_body_surface"
SKELETON_KEY = "shardscope_body_skeleton"


def surface_name(body: int) -> str:
    return f"body {body} mesh"


def skeleton_name(body: int) -> str:
    return f"body {body} skeleton"


class BodySurfaces:
    """The Surface layers of one viewer session's selected bodies."""

    def __init__(self, session: ViewerSession, *, skeletons: bool = True) -> None:
        self.session = session
        self.follower = SurfaceFollower(session.controller)
        self.skeletons = skeletons
        self.layers: dict[int, Any] = {}
        self.skeleton_layers: dict[int, Any] = {}
        self.error = ""
        self._running: list[Any] = []
        self._again = False
        self._scheduled = False
        from napari_shardscope.widgets.session import _ToGuiThread

        self._bridge = _ToGuiThread()
        # Imported here, on the GUI thread: a first import inside the loading thread would take the import lock
        # while napari's own threads start.
        for module in ("DracoPy", "zmesh"):
            with contextlib.suppress(ImportError):  # without them the load reports what is missing
                importlib.import_module(module)
        self._unsubscribe = session.controller.subscribe(lambda _state: self.schedule())

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def close(self) -> None:
        self._unsubscribe()

    # -- following the controller ----------------------------------------------------------------
    def schedule(self) -> None:
        """Sync on the next turn of the event loop, once for any number of changes before it.

        Controller changes arrive inside napari's mouse and key callbacks; starting a progress bar or
        adding a layer there would run the event loop inside the callback (napari's mouse generators
        are not re-entrant).
        """
        if not self._scheduled:
            self._scheduled = True
            QTimer.singleShot(0, self._scheduled_sync)

    def _scheduled_sync(self) -> None:
        self._scheduled = False
        self.sync()

    def alive(self) -> bool:
        """Whether the viewer is open and shows a labelmap (a closed viewer's layers are gone)."""
        viewer = self.session.viewer
        layer = self.session.body_layer
        return hasattr(viewer.window, "_qt_window") and layer is not None and layer in viewer.layers

    def sync(self) -> None:
        """Bring the layers in step with the controller (loads go to a worker thread)."""
        if not self.alive():
            return
        self._forget_removed_layers()
        if self._running:
            self._again = True  # planned again when the running load ends
            return
        plan = self.follower.plan()
        if plan.remove:
            self._remove(plan.remove)
            self.follower.shown([], plan.remove)
        if plan.load:
            self._start(SurfacePlan(plan.load, ()))

    def _start(self, plan: SurfacePlan) -> None:
        """Load ``plan`` in a daemon thread (not napari's worker pool: on a small machine its few threads
        are the ones a split or an export needs); results come back through a queued signal."""
        pbar = GuiProgress(f"meshing {len(plan.load)} bod{'y' if len(plan.load) == 1 else 'ies'}")
        self._running.append(plan)

        def work() -> None:
            try:
                surfaces = self.follower.load(plan, pbar)
                skeletons = [self.follower.skeleton(s.body) for s in surfaces] if self.skeletons else []
            except BaseException as exc:  # handed to the GUI thread, which reports it
                error = exc
                self._bridge.post(lambda: self._finished(plan, pbar, None, error))
                return
            self._bridge.post(lambda: self._finished(plan, pbar, (surfaces, skeletons), None))

        threading.Thread(target=work, name="shardscope-meshes", daemon=True).start()

    def _finished(self, plan: SurfacePlan, pbar: GuiProgress, result: tuple[list[BodySurface], list[Any]] | None,
                  exc: BaseException | None) -> None:
        pbar.close()
        if plan in self._running:
            self._running.remove(plan)
        if exc is not None:
            self.error = str(exc)
            if self.alive():
                self.session.controller.report(f"meshes: {exc}", "error")
        elif result is not None:
            self.error = ""
            if self.alive():  # the viewer may have closed while the meshes loaded
                self._show(*result)
        if self._again and self.alive():
            self._again = False
            self.sync()

    # -- layers ----------------------------------------------------------------------------------
    def _forget_removed_layers(self) -> None:
        viewer = self.session.viewer
        for store in (self.layers, self.skeleton_layers):
            for body, layer in list(store.items()):
                if layer not in viewer.layers:
                    del store[body]
                    if store is self.layers:
                        self.follower.shown([], [body])  # the user removed it: shown again if still selected

    def _remove(self, bodies: tuple[int, ...]) -> None:
        viewer = self.session.viewer
        for body in bodies:
            for store in (self.layers, self.skeleton_layers):
                layer = store.pop(body, None)
                if layer is not None and layer in viewer.layers:
                    viewer.layers.remove(layer)

    def _colour(self, body: int) -> np.ndarray:
        layer = self.session.body_layer
        if layer is None:
            return np.array([0.8, 0.8, 0.8, 1.0], dtype=np.float32)
        rgba = np.asarray(layer.get_color(body), dtype=np.float32).reshape(-1)[:4]
        return rgba if rgba.size == 4 else np.array([0.8, 0.8, 0.8, 1.0], dtype=np.float32)

    def _show(self, surfaces: list[BodySurface], skeletons: list[Any]) -> None:
        viewer = self.session.viewer
        wanted = self.follower.wanted()
        current = []
        active = viewer.layers.selection.active  # adding a layer makes it active; the user's choice is kept
        placement = self._placement()
        for s in surfaces:
            if wanted.get(s.body) != s.key:
                continue  # stale (the selection or the body changed while it loaded): the next sync reloads
            current.append(s)
            colours = np.tile(self._colour(s.body), (len(s.vertices), 1))
            data = (s.vertices, s.faces)
            layer = self.layers.get(s.body)
            if layer is not None and layer in viewer.layers:
                layer.vertex_colors = None  # colours of the old vertex count would not fit the new data
                layer.data = data
                layer.vertex_colors = colours
            else:
                layer = viewer.add_surface(data, name=surface_name(s.body), vertex_colors=colours,
                                           metadata={SURFACE_KEY: s.body}, **placement)
                self.layers[s.body] = layer
        for sk in skeletons:
            if sk is None or wanted.get(sk.body) != sk.key or not len(sk.edges):
                continue
            start = sk.vertices[sk.edges[:, 0]]
            vectors = np.stack([start, sk.vertices[sk.edges[:, 1]] - start], axis=1)
            layer = self.skeleton_layers.get(sk.body)
            if layer is not None and layer in viewer.layers:
                layer.data = vectors
            else:
                self.skeleton_layers[sk.body] = viewer.add_vectors(
                    vectors, name=skeleton_name(sk.body), edge_color=self._colour(sk.body), edge_width=2,
                    vector_style="line", metadata={SKELETON_KEY: sk.body}, **placement)
        self.follower.shown(current, [])
        if active is not None and active in viewer.layers and viewer.layers.selection.active is not active:
            viewer.layers.selection.active = active  # clicks keep going where they went (the body layer)

    def _placement(self) -> dict[str, Any]:
        """Axis labels and units of the body layer: layers that disagree on them get separate napari dims."""
        layer = self.session.body_layer
        if layer is None:
            return {}
        out: dict[str, Any] = {"axis_labels": tuple(layer.axis_labels)[-3:]}
        units = getattr(layer, "units", None)
        if units is not None:
            out["units"] = tuple(units)[-3:]
        return out


