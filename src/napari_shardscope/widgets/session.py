"""The viewer binding of proofreading: napari layers that follow a Qt-free controller.

Proofreading state — repository, checked-out version, selection, pending split, messages — lives in
:class:`~napari_shardscope.core.proofreading.ProofreadingController` (core, no Qt), so a notebook,
the tests and both panels drive one object. What needs napari lives here, one binding per viewer
(found with :func:`session_for`; the Proofreading and Versions panels share it):

* the layers: body ids at the checked-out version (the supervoxel array mapped through the live
  body map inside the lazy read, so a merge or cleave is shown by ``layer.refresh()`` with no chunk
  read again) and, hidden, the supervoxel ids; the base segmentation layer is hidden, never written;
* swapping or replacing them on a checkout, refreshing them after an edit;
* keeping them read-only (napari must never write into a lazy view of the store);
* the thread hop: edits may run in worker threads; the session hands their news to
  ``dispatch``, which queues it on the GUI thread (a queued Qt signal).

Notebook use::

    c = session_for(viewer).controller
    c.create("proofread.repo", segmentation_url, agglomeration="bodies.json")   # or c.connect(path)
    c.select(a); c.add_to_selection(b); c.merge(); c.commit("merged a and b")
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np
from psygnal import Signal

from napari_shardscope.core.labelmap import EditEvent, LabelmapVersion
from napari_shardscope.core.proofreading import (
    ControllerState,
    ProofreadingController,
    ProofreadingSession,
    SessionEvent,
    Status,
)
from napari_shardscope.widgets.placement import VolumeGrid
from napari_shardscope.widgets.workers import GuiThreadBridge

if TYPE_CHECKING:
    import napari
    from napari.layers import Labels

#: Layer metadata key naming the session's layers (not ``"shardscope"``: those are base volumes).
LAYER_KEY = "shardscope_proofreading"


class ViewerSession:
    """Per viewer: the controller, and the body and supervoxel layers that show its checked-out version."""

    #: Emitted after the body/supervoxel layers were added, replaced or given new data.
    layers_changed = Signal()

    def __init__(self, viewer: napari.Viewer) -> None:
        self._viewer = weakref.ref(viewer)
        self._bridge = GuiThreadBridge()
        session = ProofreadingSession(dispatch=self._bridge.post)
        session.subscribe(self._on_session)  # before the controller's: panels see the new layers
        self.controller = ProofreadingController(session)
        self._told: Status | None = self.controller.status
        self.controller.subscribe(self._notify)
        self.body_layer: Labels | None = None
        self.supervoxel_layer: Labels | None = None
        self._layout: tuple[Any, ...] | None = None  # what the layers show: labelmap and geometry
        from napari_shardscope.widgets.meshes import BodySurfaces

        #: The selected bodies' meshes as Surface layers (widgets/meshes.py), following the controller.
        self.surfaces = BodySurfaces(self)
        from napari_shardscope.widgets.synapses import SynapseLayer

        #: The selected bodies' synapses as a Points layer (widgets/synapses.py), when the repository has them.
        self.synapses = SynapseLayer(self)
        self.layers_changed.connect(self.synapses.schedule)  # the volume replaced: placed on its grid again
        #: The selection overlays, hover and go-to of this viewer: the ``CanvasBinding`` ``canvas_for`` makes
        #: (widgets/canvas.py, which imports this module: so not named in its type here, which would be a cycle).
        self.canvas: object | None = None

    def _notify(self, state: ControllerState) -> None:
        """Each new result or refusal once as a napari notification (the panels keep it in their status line).

        Messages of work starting ("merging alt …") are left to the progress bar of the work itself.
        """
        status = state.status
        if status is self._told or not status.text:
            return
        self._told = status
        from napari.utils.notifications import show_error, show_info, show_warning

        show = {"ok": show_info, "warning": show_warning, "error": show_error}.get(status.level)
        if show is not None:
            show(status.text)

    @property
    def viewer(self) -> napari.Viewer:
        viewer = self._viewer()
        if viewer is None:  # pragma: no cover - the session dies with its viewer
            raise RuntimeError("the viewer of this session was closed")
        return viewer

    # -- following the session ------------------------------------------------------------------
    def _on_session(self, event: SessionEvent) -> None:
        version = self.controller.session.version
        if version is None:
            return  # disconnected: the layers stay until the user removes them
        if event.kind in ("connected", "checkout"):
            self.synapses.wiring.last = ""
            self._show(version)
        elif event.kind == "edited" and event.edit is not None and event.edit.version == version.uuid:
            self.refresh(event.edit)
            self.synapses.on_edit(event.edit)  # before the controller's listeners: the panel shows the words

    def refresh(self, event: EditEvent | None = None) -> None:
        """Show the checked-out version's current state after an edit.

        Merges and cleaves change only the body map, which the body arrays apply at read time: a
        ``refresh()`` re-slices the visible tiles, whose supervoxel chunks come from the cache.
        Splits rewrite overlay blocks: the layers get the version's new arrays (chunks the split
        did not touch are still served from the cache).
        """
        version = self.controller.session.version
        if version is None:
            return
        if event is None or event.blocks_changed or not self._layer_alive(self.body_layer):
            self._show(version)
        else:
            assert self.body_layer is not None
            self.body_layer.refresh()

    # -- picking --------------------------------------------------------------------------------
    def voxel_at(self, world: Sequence[float]) -> tuple[int, int, int] | None:
        """The scale-0 voxel (z, y, x) under a world position, or ``None`` outside the volume."""
        layer, version = self.body_layer, self.controller.session.version
        if layer is None or version is None:
            return None
        data = np.asarray(layer.world_to_data(list(world)), dtype=float)[-3:]
        voxel = np.floor(data + 0.5).astype(int)
        if np.any(voxel < 0) or np.any(voxel >= np.asarray(version.scales[0].shape)):
            return None
        return (int(voxel[0]), int(voxel[1]), int(voxel[2]))

    def world_to_voxel_z(self, world_z: float) -> int:
        """The scale-0 z index of a world z coordinate (the plane a split of a large body covers)."""
        version = self.controller.session.version
        if version is None:
            return 0
        g = version.scales[0]
        return round((world_z - g.translate[0]) / g.voxel_size[0])

    # -- layers ---------------------------------------------------------------------------------
    def grid(self) -> VolumeGrid | None:
        """The voxel grid of the volume shown (the body layer's): where every other layer of the plugin goes.

        Layers placed on it leave napari's dims — steps, range, the plane shown — the volume's
        (widgets/placement.py); ``None`` while no body layer is shown.
        """
        layer = self.body_layer
        return VolumeGrid.of_layer(layer) if layer is not None and self._layer_alive(layer) else None

    def _layer_alive(self, layer: Labels | None) -> TypeGuard[Labels]:
        return layer is not None and layer in self.viewer.layers

    def _show(self, v: LabelmapVersion) -> None:
        """Point the body and supervoxel layers at ``v``'s arrays (adding them when needed).

        A checkout of another version of the same labelmap swaps the layers' data, which keeps
        the user's layer settings. Anything else — the first version shown, another repository or
        labelmap (other geometry), or one of the two layers removed by the user — replaces both
        layers, so a layer never shows one volume placed with another's scale and translate.
        """
        repo = self.controller.session.repo
        bodies, svs = v.body_arrays(), v.supervoxel_arrays()
        # "controller": the Qt-free controller, for code that must not import widgets (napari_plugin's
        # "Show in Neuroglancer" reads its labelmap and selected bodies)
        meta = {LAYER_KEY: {"controller": self.controller,
                            "repository": str(repo.path) if repo is not None and repo.path else None,
                            "labelmap": v.labelmap.name, "version": v.uuid}}
        geometry = v.scales[0]
        layout = (meta[LAYER_KEY]["repository"], v.labelmap.name, tuple(geometry.voxel_size),
                  tuple(geometry.translate), len(bodies))
        alive = self._layer_alive(self.body_layer) and self._layer_alive(self.supervoxel_layer)
        if alive and layout == self._layout:
            assert self.body_layer is not None and self.supervoxel_layer is not None
            self.supervoxel_layer.data = _data(svs)
            self.body_layer.data = _data(bodies)
            for layer in (self.supervoxel_layer, self.body_layer):  # keep_read_only undoes napari's editable
                layer.metadata.update(meta)
            self.layers_changed.emit()
            return
        for old in (self.supervoxel_layer, self.body_layer):
            if self._layer_alive(old):
                self.viewer.layers.remove(old)
        common: dict[str, Any] = {"scale": geometry.voxel_size, "translate": geometry.translate,
                                  "multiscale": len(bodies) > 1, "axis_labels": ("z", "y", "x")}
        name = v.labelmap.name
        base = self._hide_base_layers(v)
        if base is not None and getattr(base, "units", None) is not None:
            common["units"] = tuple(base.units)[-3:]  # the same world units as the base's layer
        # napari attaches add_labels to ViewerModel at import (setattr), unseen by mypy
        self.supervoxel_layer = self.viewer.add_labels(  # type: ignore[attr-defined]
            _data(svs), name=f"{name} supervoxels", visible=False, metadata=dict(meta), **common)
        self.body_layer = self.viewer.add_labels(  # type: ignore[attr-defined]
            _data(bodies), name=f"{name} bodies", metadata=dict(meta), **common)
        for layer in (self.supervoxel_layer, self.body_layer):
            keep_read_only(layer)  # napari must never write into a lazy view of the store
        self._layout = layout
        self.viewer.layers.selection.active = self.body_layer
        self.layers_changed.emit()

    def _hide_base_layers(self, v: LabelmapVersion) -> Any:
        """Hide the base segmentation's own layer (the body layer shows the same voxels, edited); return it."""
        found = self.base_layers(v)
        for layer in found:
            layer.visible = False
        return found[-1] if found else None

    def base_layers(self, v: LabelmapVersion | None = None) -> list[Any]:
        """The viewer's layers of the base segmentation of ``v`` (default: the checked-out version)."""
        v = v if v is not None else self.controller.session.version
        if v is None:
            return []
        base = v.labelmap.config.base.rstrip("/")
        found = []
        for layer in self.viewer.layers:
            meta = layer.metadata.get("shardscope") if hasattr(layer, "metadata") else None
            if isinstance(meta, dict) and str(meta.get("url", "")).rstrip("/") in (base, base.removeprefix("file://")):
                found.append(layer)
        return found


def keep_read_only(layer: Any) -> None:
    """Make a Labels layer over a lazy store view read-only for good.

    napari re-derives ``editable`` (``not multiscale``) whenever a layer's data is set, so a
    single-scale layer would become paintable again after a checkout; the paint stroke would then
    fail inside napari. Re-assert it on every change.
    """
    layer.editable = False

    def again(_: Any = None) -> None:
        if layer.editable:
            layer.editable = False

    layer.events.editable.connect(again)


def _data(arrays: list[Any]) -> Any:
    return arrays if len(arrays) > 1 else arrays[0]


_SESSIONS: weakref.WeakKeyDictionary[Any, ViewerSession] = weakref.WeakKeyDictionary()


def session_for(viewer: napari.Viewer) -> ViewerSession:
    """The proofreading binding of ``viewer`` (made on first call; both panels share it).

    napari hands each docked widget its own public-only proxy of the viewer; the binding is kept for
    the viewer behind the proxy, so a panel docked again after another was closed (and its proxy
    collected) finds the same session instead of a fresh, disconnected one.
    """
    real = getattr(viewer, "__wrapped__", viewer)
    session = _SESSIONS.get(real)
    if session is None:
        session = _SESSIONS[real] = ViewerSession(real)
        _forget_when_closed(real)
    return session


def _forget_when_closed(viewer: napari.Viewer) -> None:
    """Drop ``viewer``'s session when its window is destroyed (closed), so the closed viewer can be freed.

    The session is a value of a weak-keyed dictionary, yet it leads back to its key: the controller holds the
    panels' listeners, each panel holds (a proxy of) the viewer. Such an entry never expires, and every closed
    viewer with a panel stayed in memory for good with its layers, panels, repository handles and chunk caches
    (about 20,000 objects each, which every later full garbage collection walked again). Only a weak reference
    to the viewer is kept here; without a Qt window (no GUI) the entry lives as long as the process, as before.
    """
    key = weakref.ref(viewer)

    def forget(*_: Any) -> None:
        closed = key()
        if closed is not None:
            _SESSIONS.pop(closed, None)

    with contextlib.suppress(AttributeError):  # a viewer without a Qt window
        viewer.window._qt_window.destroyed.connect(forget)
