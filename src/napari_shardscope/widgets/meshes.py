"""Selected bodies as napari Surface layers (and their skeletons as Vectors), loaded off the GUI thread.

Thin glue over :class:`~napari_shardscope.core.proofreading.meshes.SurfaceFollower`: after every
controller change (selection, merge, cleave, split, undo, checkout) the follower's plan says which
body surfaces to load and which to remove; removals happen at once, loads run in a napari worker
thread with napari's progress bar, and the layers are added or given new data on the GUI thread.
A change arriving while a load runs is planned again when it ends. Each surface takes its body's
colour from the body layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.proofreading.meshes import BodySurface, SurfaceFollower, SurfacePlan
from napari_shardscope.widgets.workers import GuiProgress, start_worker

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
        self._unsubscribe = session.controller.subscribe(lambda _state: self.sync())

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def close(self) -> None:
        self._unsubscribe()

    # -- following the controller ----------------------------------------------------------------
    def sync(self) -> None:
        """Bring the layers in step with the controller (loads go to a worker thread)."""
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
        pbar = GuiProgress(f"meshing {len(plan.load)} bod{'y' if len(plan.load) == 1 else 'ies'}")

        def work() -> tuple[list[BodySurface], list[Any]]:
            surfaces = self.follower.load(plan, pbar)
            skeletons = [self.follower.skeleton(s.body) for s in surfaces] if self.skeletons else []
            return surfaces, skeletons

        def done(result: tuple[list[BodySurface], list[Any]]) -> None:
            surfaces, skeletons = result
            self.error = ""
            self._show(surfaces, skeletons)

        def failed(exc: BaseException) -> None:
            self.error = str(exc)
            self.session.controller.report(f"meshes: {exc}", "error")
            if not isinstance(exc, ShardscopeError):
                raise exc

        def finished() -> None:
            pbar.close()
            if self._again:
                self._again = False
                self.sync()

        start_worker(work, done, failed, running=self._running, finished=finished)

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
                                           metadata={SURFACE_KEY: s.body})
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
                    vector_style="line", metadata={SKELETON_KEY: sk.body})
        self.follower.shown(current, [])
        active = self.session.body_layer
        if active is not None and active in viewer.layers:
            viewer.layers.selection.active = active  # clicks keep going to the body layer


