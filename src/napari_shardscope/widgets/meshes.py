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
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from qtpy.QtCore import QTimer

from napari_shardscope.core.proofreading.meshes import BodySurface, SurfaceFollower, SurfacePlan
from napari_shardscope.widgets.placement import add_on_grid, on_grid
from napari_shardscope.widgets.workers import GuiProgress, GuiThreadBridge, NextTurnSync

if TYPE_CHECKING:
    import napari
    from napari.layers import Labels

    from napari_shardscope.core.proofreading import ProofreadingController
    from napari_shardscope.widgets.placement import VolumeGrid


class SurfaceSession(Protocol):
    """What the surfaces ask of the viewer session (:class:`~.session.ViewerSession`, which makes them).

    A Protocol, not the class: the session imports this module to make its surfaces.
    """

    controller: ProofreadingController
    body_layer: Labels | None

    @property
    def viewer(self) -> napari.Viewer: ...

    def grid(self) -> VolumeGrid | None: ...

#: Metadata key marking the layers this module owns (value: the body id).
SURFACE_KEY = "shardscope_body_surface"
SKELETON_KEY = "shardscope_body_skeleton"


def surface_name(body: int) -> str:
    return f"body {body} mesh"


def skeleton_name(body: int) -> str:
    return f"body {body} skeleton"


class BodySurfaces(NextTurnSync):
    """The Surface layers of one viewer session's selected bodies."""

    def __init__(self, session: SurfaceSession, *, skeletons: bool = True) -> None:
        self.session = session
        self.follower = SurfaceFollower(session.controller)
        self.skeletons = skeletons
        self.layers: dict[int, Any] = {}
        self.skeleton_layers: dict[int, Any] = {}
        self.error = ""
        self._running: list[Any] = []
        self._again = False

        self._bridge = GuiThreadBridge()
        # Imported here, on the GUI thread: a first import inside the loading thread would take the import lock
        # while napari's own threads start.
        for module in ("DracoPy", "zmesh"):
            with contextlib.suppress(ImportError):  # without them the load reports what is missing
                importlib.import_module(module)
        self._unsubscribe = session.controller.subscribe(lambda _state: self.schedule())
        # The level of detail follows the zoom: a zoom crossing a level boundary plans again (the
        # plan sees the new level in the surfaces' keys); scrolling coalesces into one sync per turn.
        camera = session.viewer.camera
        self.follower.set_zoom(float(camera.zoom))
        camera.events.zoom.connect(self._on_zoom)

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def close(self) -> None:
        self._unsubscribe()
        with contextlib.suppress(RuntimeError, TypeError, ValueError):  # a closed viewer's camera
            self.session.viewer.camera.events.zoom.disconnect(self._on_zoom)

    def _on_zoom(self, _event: Any = None) -> None:
        if self.follower.set_zoom(float(self.session.viewer.camera.zoom)):
            self.schedule()

    # -- following the controller ----------------------------------------------------------------
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
        if plan.load:
            # Removals wait for the load: napari's layer removal runs a full gc.collect() on the GUI
            # thread (~0.5 s per layer with a big heap), so after a merge the merged surface shows first.
            self._start(plan)
        elif plan.remove:
            self._remove(plan.remove)
            self.follower.shown([], plan.remove)

    def _start(self, plan: SurfacePlan) -> None:
        """Load ``plan`` in a daemon thread (not napari's worker pool: on a small machine its few threads
        are the ones a split or an export needs); results come back through a queued signal."""
        pbar = GuiProgress(f"meshing {len(plan.load)} bod{'y' if len(plan.load) == 1 else 'ies'}")
        self._running.append(plan)

        knew_levels = self.follower.lod_scales is not None

        def work() -> None:
            try:
                surfaces = self.follower.load(plan, pbar)
                skeletons = [self.follower.skeleton(s.body) for s in surfaces] if self.skeletons else []
            except BaseException as exc:  # handed to the GUI thread, which reports it
                error = exc
                self._bridge.post(lambda: self._finished(plan, pbar, None, error))
                return
            if not knew_levels and self.follower.lod_scales and self.follower.view_lod() != 0:
                self._again = True  # the levels were learnt in this load: the zoom may want another one
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
        if plan.remove:  # on a later turn, so the updated surfaces are drawn before napari's gc pause
            QTimer.singleShot(20, lambda: self._remove_later(plan.remove))
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

    def _remove_later(self, bodies: tuple[int, ...]) -> None:
        if not self.alive():
            return
        wanted = self.follower.wanted()
        gone = tuple(b for b in bodies if b not in wanted)  # selected again meanwhile: kept
        self._remove(gone)
        self.follower.shown([], gone)

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
        """Add or update the layers, on the volume's voxel grid (widgets/placement.py: the dims stay the volume's)."""
        viewer = self.session.viewer
        grid = self.session.grid()
        if grid is None:
            return
        wanted = self.follower.wanted()
        current = []
        for s in surfaces:
            if wanted.get(s.body) != s.key:
                continue  # stale (the selection or the body changed while it loaded): the next sync reloads
            current.append(s)
            colours = np.tile(self._colour(s.body), (len(s.vertices), 1))
            data = (s.vertices, s.faces)
            layer = self.layers.get(s.body)
            if layer is not None and layer in viewer.layers and grid.holds(layer):
                layer.vertex_colors = None  # colours of the old vertex count would not fit the new data
                layer.data = on_grid(grid, "surface", data)
                layer.vertex_colors = colours
            else:
                self._drop(self.layers, s.body)  # placed on another volume's grid
                self.layers[s.body] = add_on_grid(viewer, grid, "surface", data, name=surface_name(s.body),
                                                  vertex_colors=colours, metadata={SURFACE_KEY: s.body})
        for sk in skeletons:
            want = wanted.get(sk.body) if sk is not None else None
            # a skeleton has one level: it is current while the body's version and supervoxels are
            if sk is None or want is None or (want.version, want.supervoxels) != (sk.key.version, sk.key.supervoxels) \
                    or not len(sk.edges):
                continue
            segments = np.stack([sk.vertices[sk.edges[:, 0]], sk.vertices[sk.edges[:, 1]]], axis=1)
            layer = self.skeleton_layers.get(sk.body)
            if layer is not None and layer in viewer.layers and grid.holds(layer):
                layer.data = on_grid(grid, "vectors", segments)
            else:
                self._drop(self.skeleton_layers, sk.body)
                self.skeleton_layers[sk.body] = add_on_grid(
                    viewer, grid, "vectors", segments, name=skeleton_name(sk.body), edge_color=self._colour(sk.body),
                    edge_width=2, vector_style="line", metadata={SKELETON_KEY: sk.body})
        self.follower.shown(current, [])

    def _drop(self, store: dict[int, Any], body: int) -> None:
        layer = store.pop(body, None)
        viewer = self.session.viewer
        if layer is not None and layer in viewer.layers:
            viewer.layers.remove(layer)
