"""The canvas side of proofreading: the selection drawn on the volume, hover text, the view moved by go-to.

One binding per viewer (:func:`canvas_for`; the Proofreading and Navigate panels share it). What
it draws comes from the Qt-free core (:mod:`napari_shardscope.core.proofreading.highlight`,
:mod:`~napari_shardscope.core.proofreading.navigation`); what lives here needs napari:

* two overlay Labels layers over the body layer, made on demand (the first selection; supervoxel
  mode) and reused while the volume stays, lazy like it (a selection change is a re-slice of cached
  chunks): *selection* — the first selected body yellow, the others cyan, picked
  supervoxels magenta; outlined in 2-D, filled in 3-D (napari draws no contours in 3-D) — and
  *selected supervoxels* — the supervoxel boundaries within the selected bodies, shown in
  supervoxel mode;
* *dim the others*: the body layer faded, the selection filled, so only the selection stands out;
* hover: body and supervoxel id, size and last edit of what is under the cursor, in napari's
  status bar (as the body layer's features for the body there) and in :attr:`hover`; in 3-D the
  body the cursor's ray meets first (napari's pick), without a supervoxel;
* go-to: the camera centred on the target's box and zoomed to fit it, the dims on its plane.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from psygnal import Signal
from qtpy.QtCore import QTimer

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.proofreading import ControllerState
from napari_shardscope.core.proofreading.highlight import (
    FIRST,
    OTHER,
    PICKED,
    HoverCache,
    HoverInfo,
    ShownSelection,
    selection_arrays,
    supervoxel_arrays,
)
from napari_shardscope.core.proofreading.navigation import NavTarget
from napari_shardscope.widgets.chunk_outline import camera
from napari_shardscope.widgets.placement import VolumeGrid, add_on_grid
from napari_shardscope.widgets.session import LAYER_KEY, ViewerSession, keep_read_only, session_for

if TYPE_CHECKING:
    import napari
    from napari.layers import Labels

#: Overlay colours (RGBA): the body merged into / cleaved / split, the other selected bodies, picked supervoxels.
#: Keyed like napari's DirectLabelColormap (label or None, its default) so it merges into one.
COLOURS: dict[int | None, tuple[float, float, float, float]] = {
    FIRST: (1.0, 0.85, 0.0, 1.0), OTHER: (0.0, 0.9, 1.0, 1.0), PICKED: (1.0, 0.1, 0.9, 1.0)}
#: Body layer opacity while the others are dimmed.
DIMMED_OPACITY = 0.15
#: Outline width (screen-independent: data pixels of the level shown) of the selection in 2-D.
CONTOUR = 2
#: Suffix of overlay layers left hidden when the body layer moved to another volume.
RETIRED = " (previous volume)"
#: The target's box fills this fraction of the canvas after a go-to.
FIT = 0.8


class CanvasBinding:
    """Per viewer: selection overlays, the dim toggle, hover text and go-to camera moves."""

    #: Emitted with the :class:`HoverInfo` under the cursor (``None`` off the volume).
    hovered = Signal(object)
    #: Emitted after the dim toggle changed (its new value).
    dimmed = Signal(bool)

    def __init__(self, session: ViewerSession) -> None:
        self.session = session
        self.controller = session.controller
        self._viewer = weakref.ref(session.viewer)
        self.shown = ShownSelection()
        self.selection_layer: Labels | None = None
        self.supervoxel_layer: Labels | None = None
        self._layers_for: Any = None
        self._dim = False
        self._body_opacity: float | None = None
        self._hover_cache = HoverCache()
        self.hover: HoverInfo | None = None
        self._hover_key: tuple[Any, ...] | None = None
        self.last_target: NavTarget | None = None
        #: The last go-to's target and the camera it set (centre, zoom, displayed axes): refitted when the
        #: canvas changes size while the camera is still there.
        self._fitted: tuple[NavTarget, tuple[float, ...], float, tuple[int, ...]] | None = None
        self._revision = -1
        self._rebuild_pending = False
        self._shown_for: tuple[Any, str] | None = None
        session.layers_changed.connect(self._on_layers)
        self.controller.subscribe(self._render)
        self.controller.on_navigate(self.move_to)
        viewer = session.viewer
        viewer.dims.events.ndisplay.connect(self._on_ndisplay, position="first")  # styled before napari slices
        viewer.mouse_move_callbacks.append(self._on_mouse_move)
        canvas = getattr(viewer, "canvas", None)  # napari 0.9's canvas model (its size follows the Qt widget)
        if canvas is not None and hasattr(getattr(canvas, "events", None), "size"):
            canvas.events.size.connect(self._on_canvas_size)
        self._rebuild()

    @property
    def viewer(self) -> napari.Viewer:
        return self.session.viewer

    # -- overlays -------------------------------------------------------------------------------------
    def _alive(self, layer: Any) -> bool:
        return layer is not None and layer in self.viewer.layers

    def _on_layers(self) -> None:
        """The body layer was added or given new data: point the overlays at the same version — soon.

        The session tells this from inside its own layer changes (a layer removed, another added); removing
        and adding the overlays there too, nested in napari's layer-list events, crashed Mesa's OpenGL in
        the next draw. The overlays follow from the event loop, once per burst of changes.
        """
        if not self._shows_current():
            self._hide_overlays()  # their arrays may read a repository the session just closed
        if not self._rebuild_pending:
            self._rebuild_pending = True
            QTimer.singleShot(0, self._rebuild)

    def _current(self) -> tuple[Any, str] | None:
        version = self.controller.version
        return None if version is None else (self.controller.session.repo, version.uuid)

    def _shows_current(self) -> bool:
        """The overlays' arrays are those of the checked-out version of the open repository."""
        return self._shown_for is not None and self._shown_for == self._current()

    def _hide_overlays(self) -> None:
        for layer in (self.selection_layer, self.supervoxel_layer):
            if self._alive(layer) and layer is not None and layer.visible:
                layer.visible = False

    def _rebuild(self) -> None:
        self._rebuild_pending = False
        if self._viewer() is None:
            return
        body = self.session.body_layer
        version = self.controller.version
        if body is None or version is None or not self._alive(body):
            return
        sel = selection_arrays(version, self.shown)
        data_sel: Any = sel if len(sel) > 1 else sel[0]
        same = (self._alive(self.selection_layer) and self.selection_layer is not None
                and bool(self.selection_layer.multiscale) == bool(body.multiscale)
                and tuple(self.selection_layer.scale) == tuple(body.scale)
                and tuple(self.selection_layer.translate) == tuple(body.translate)
                and self.selection_layer.level_shapes[0].tolist() == list(body.level_shapes[0]))
        if same:
            assert self.selection_layer is not None
            self.selection_layer.data = data_sel
            self.selection_layer.visible = True
            if self._alive(self.supervoxel_layer):
                assert self.supervoxel_layer is not None
                svs = supervoxel_arrays(version, self.shown)
                self.supervoxel_layer.data = svs if len(svs) > 1 else svs[0]
            self._keep_on_top(body)
        else:
            self._retire_overlays()  # the new ones come with the next selection (see _render)
        self._layers_for = body
        self._shown_for = self._current()
        self._revision = -1  # draw the new arrays
        self._render(self.controller.state)

    def _keep_on_top(self, body: Labels) -> None:
        """The overlays just above the body layer (a new body layer is added on top of them)."""
        layers = self.viewer.layers
        for layer in (self.supervoxel_layer, self.selection_layer):
            if layer is not None and layers.index(layer) < layers.index(body):
                layers.move(layers.index(layer), layers.index(body) + 1)

    def _retire_overlays(self) -> None:
        """Overlays of another volume: hidden and renamed, not removed.

        napari 0.9 on Mesa's OpenGL (llvmpipe, what CI runs) crashed in a later draw when these Labels
        layers were removed while the session replaced its own (it passed without them); hidden layers
        are neither sliced nor drawn, and the user may delete them.
        """
        for layer in (self.selection_layer, self.supervoxel_layer):
            if self._alive(layer) and layer is not None:
                layer.visible = False
                if not layer.name.endswith(RETIRED):
                    layer.name = f"{layer.name}{RETIRED}"
        self.selection_layer = self.supervoxel_layer = None

    def _add_overlay(self, body: Labels, data: Any, **kwargs: Any) -> Labels:
        """An overlay Labels layer on the body layer's voxel grid (its dims; the body layer stays active)."""
        layer: Labels = add_on_grid(self.viewer, VolumeGrid.of_layer(body), "labels", data,
                                    multiscale=bool(body.multiscale), metadata={LAYER_KEY: {"overlay": True}}, **kwargs)
        keep_read_only(layer)
        return layer

    def _add_selection_layer(self, body: Labels, data_sel: Any) -> None:
        """The selection overlay over ``body``: made with the first selection, reused while the volume stays.

        Made on demand (not with the body layer) and never removed (see :meth:`_retire_overlays`): on
        Mesa's OpenGL, napari 0.9 crashed in a later draw when Labels layers came and went while the
        session replaced its own; the fewer layer changes there, the fewer chances.
        """
        from napari.utils.colormaps import DirectLabelColormap

        colours: dict[int | None, Any] = {0: (0, 0, 0, 0), None: (0, 0, 0, 0), **COLOURS}
        name = body.name.removesuffix(" bodies")
        self.selection_layer = self._add_overlay(body, data_sel, name=f"{name} selection", opacity=0.9,
                                                 colormap=DirectLabelColormap(color_dict=colours))
        self._style()

    def _add_supervoxel_layer(self) -> None:
        """The supervoxel boundaries overlay, made the first time supervoxel mode shows a selection.

        Made on demand, not with the selection overlay: one Labels layer fewer for napari to draw
        and, on Mesa's OpenGL, one fewer in the layer changes that crashed a later draw.
        """
        body, version = self.session.body_layer, self.controller.version
        if body is None or version is None or not self._alive(body):
            return
        svs = supervoxel_arrays(version, self.shown)
        name = body.name.removesuffix(" bodies")
        self.supervoxel_layer = self._add_overlay(body, svs if len(svs) > 1 else svs[0],
                                                  name=f"{name} selected supervoxels", opacity=1.0)
        self._style()

    def _style(self) -> None:
        """Outline in 2-D (filled while the others are dimmed, and in 3-D); supervoxel contours in 2-D."""
        three_d = self.viewer.dims.ndisplay == 3
        if self._alive(self.selection_layer):
            assert self.selection_layer is not None
            self.selection_layer.contour = 0 if (three_d or self._dim) else CONTOUR
            self.selection_layer.opacity = 0.55 if (self._dim and not three_d) else 0.9
            # in 3-D the overlay's surface is the body's own: drawn without the depth test it shows (through
            # whatever hides it, which is what a highlight is for)
            self.selection_layer.blending = "translucent_no_depth" if three_d else "translucent"
        if self._alive(self.supervoxel_layer):
            assert self.supervoxel_layer is not None
            self.supervoxel_layer.contour = 0 if three_d else 1

    def _on_ndisplay(self, *_: Any) -> None:
        self._style()
        body = self.session.body_layer
        if self.viewer.dims.ndisplay == 3 and body is not None and self._alive(body) and len(body.features):
            # napari 0.9 computes a 3-D status of a Labels layer with features through a ray it may not have
            # yet (a TypeError in its status bar): the hover text stays in the Navigate panel in 3-D
            body.features = {}
            self._hover_key = None

    def _render(self, state: ControllerState) -> None:
        """Follow the selection, the picked supervoxels and the click mode."""
        if not self._shows_current():
            self._hide_overlays()  # disconnected, or another repository: never read a closed one
            return
        changed = self.shown.update(state.selected, state.picked)
        if state.revision != self._revision:  # an edit (an undo too) changed which supervoxels a body holds
            self._revision = state.revision
            changed = True
        body = self.session.body_layer
        if (state.selected or state.picked) and not self._alive(self.selection_layer) and body is not None:
            version = self.controller.version
            assert version is not None
            sel_arrays = selection_arrays(version, self.shown)
            self._add_selection_layer(body, sel_arrays if len(sel_arrays) > 1 else sel_arrays[0])
        want = state.mode == "supervoxels" and bool(state.selected)
        if want and not self._alive(self.supervoxel_layer):
            self._add_supervoxel_layer()
        sel, svs = self.selection_layer, self.supervoxel_layer
        if self._alive(svs):
            assert svs is not None
            if svs.visible != want:
                svs.visible = want
            elif changed and want:
                svs.refresh()
        if changed and self._alive(sel):
            assert sel is not None
            sel.refresh()

    def refresh(self) -> None:
        """Re-draw the overlays (after an edit changed which supervoxels a body holds)."""
        if not self._shows_current():
            return
        for layer in (self.selection_layer, self.supervoxel_layer):
            if self._alive(layer) and layer is not None and layer.visible:
                layer.refresh()

    # -- dimming --------------------------------------------------------------------------------------
    @property
    def dim_others(self) -> bool:
        return self._dim

    def set_dim_others(self, on: bool) -> None:
        """Fade every body but the selected ones (the body layer's opacity; the selection filled)."""
        on = bool(on)
        body = self.session.body_layer
        if on == self._dim:
            return
        self._dim = on
        if body is not None and self._alive(body):
            if on:
                self._body_opacity = float(body.opacity)
                body.opacity = DIMMED_OPACITY
            else:
                body.opacity = self._body_opacity if self._body_opacity is not None else 0.7
        self._style()
        self.dimmed.emit(on)

    def toggle_dim_others(self) -> bool:
        self.set_dim_others(not self._dim)
        return self._dim

    # -- hover ----------------------------------------------------------------------------------------
    def describe_at(self, world: Sequence[float]) -> HoverInfo | None:
        """What is at a world position (2-D: the plane shown), or ``None`` off the volume."""
        version = self.controller.version
        voxel = self.session.voxel_at(world)
        if version is None or voxel is None:
            return None
        return self._hover_cache.describe(version, voxel, self.controller.session.revision)

    def describe_ray(self, event: Any) -> HoverInfo | None:
        """3-D: the body the cursor's ray meets first (napari's pick at the level shown; no supervoxel)."""
        version, body = self.controller.version, self.session.body_layer
        if version is None or body is None or not self._alive(body):
            return None
        value = body.get_value(event.position, view_direction=event.view_direction,
                               dims_displayed=event.dims_displayed, world=True)
        label = value[1] if isinstance(value, tuple) else value
        if label is None:
            return None
        return self._hover_cache.describe_body(version, int(label), self.controller.session.revision)

    def _on_mouse_move(self, viewer: Any, event: Any) -> None:
        if self.controller.version is None:
            return
        try:
            info = self.describe_at(event.position) if viewer.dims.ndisplay == 2 else self.describe_ray(event)
        except ShardscopeError:
            info = None
        self.show_hover(info)

    def show_hover(self, info: HoverInfo | None) -> None:
        """Publish hover text: the panel's label, and napari's status bar (the body layer's features)."""
        key = None if info is None else (info.body, info.supervoxel, info.size, info.last_edit)
        if key == self._hover_key:
            return
        self._hover_key = key
        self.hover = info
        body = self.session.body_layer
        in_2d = self.viewer.dims.ndisplay == 2  # napari 0.9's status of a 3-D Labels layer with features fails
        if info is not None and info.body and body is not None and self._alive(body) and in_2d:
            body.features = info.features()  # napari's status bar: "…: 12; supervoxel: 345, size: …"
            if self.viewer.layers.selection.active is body:
                self.viewer.update_status_from_cursor()  # napari computed it before the features were set
        self.hovered.emit(info)

    # -- go to --------------------------------------------------------------------------------------
    def move_to(self, target: NavTarget) -> None:
        """Centre the view on ``target``'s box, zoomed to fit it, on the plane of its focus voxel.

        The zoom fits the canvas as it is now; the canvas may still change size after this — in a viewer
        just opened napari lays its docks out on a later turn of the event loop (a 1,075 px wide canvas
        became 669 px), and a dock opened or the window resized does it too. Until the user moves the
        camera, each new canvas size fits the target again (:meth:`_on_canvas_size`).
        """
        version = self.controller.version
        if version is None:
            return
        self.last_target = target
        g = version.scales[0]
        focus = np.asarray(target.world_focus(g))
        viewer = self.viewer
        offset = viewer.dims.ndim - 3
        displayed = [d - offset for d in viewer.dims.displayed if d >= offset]
        for axis in range(3):
            if axis not in displayed:
                viewer.dims.set_point(axis + offset, float(focus[axis]))
        self._fit(target)
        self.refresh()

    def _fit(self, target: NavTarget) -> None:
        """Camera centre and zoom that show ``target``'s box in the canvas's current size; remembered."""
        version = self.controller.version
        if version is None:
            return
        lo, hi = (np.asarray(b) for b in target.world_box(version.scales[0]))
        viewer = self.viewer
        offset = viewer.dims.ndim - 3
        displayed = [d - offset for d in viewer.dims.displayed if d >= offset]
        cam = camera(viewer)
        centre = (lo + hi) / 2
        cam.center = tuple(float(centre[d]) for d in displayed)
        size = self._canvas_size()
        extent = np.maximum(hi - lo, 1e-9)
        shown = displayed[-2:]
        cam.zoom = float(FIT * min(size[0] / extent[shown[0]], size[1] / extent[shown[1]]))
        self._fitted = (target, tuple(float(c) for c in cam.center), float(cam.zoom), tuple(viewer.dims.displayed))

    def _canvas_size(self) -> tuple[int, int]:
        canvas = getattr(self.viewer, "canvas", None)
        size = getattr(canvas, "size", None)
        return (int(size[0]), int(size[1])) if size else (600, 800)

    def _on_canvas_size(self, _event: Any = None) -> None:
        """The canvas changed size: fit the last go-to's target again, unless the user moved the camera since."""
        if self._fitted is None or self._viewer() is None:
            return
        target, centre, zoom, displayed = self._fitted
        cam = camera(self.viewer)
        same = (tuple(self.viewer.dims.displayed) == displayed and bool(np.isclose(float(cam.zoom), zoom, rtol=1e-9))
                and np.allclose(np.asarray(cam.center, dtype=float), centre))
        if not same or self.controller.version is None:
            self._fitted = None  # the user zoomed, panned or changed the view: the camera is theirs
            return
        self._fit(target)


def canvas_for(viewer: napari.Viewer) -> CanvasBinding:
    """The canvas binding of ``viewer`` (made on first call; the panels share it).

    Kept on the viewer's session, which it lives and dies with. (A dictionary weakly keyed by the session
    kept every binding, its session and closed viewer for good: the binding itself holds its key.)
    """
    session = session_for(viewer)
    binding = session.canvas
    if not isinstance(binding, CanvasBinding):
        binding = session.canvas = CanvasBinding(session)
    return binding
