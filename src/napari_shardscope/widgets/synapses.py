"""The selected bodies' synapses as a napari Points layer, pre and post sites coloured apart.

Thin glue over :class:`~napari_shardscope.core.proofreading.synapses.SynapseSource`: when the
checked-out repository has an annotation instance bound to the proofread labelmap, every change of
the controller that can change the answer — the selection, an edit (merge, cleave, split, undo,
redo: the session's revision), a checkout — re-reads the sites of the selected bodies at the
version and gives the layer new data. The layer is placed on the body layer's voxel grid through
:func:`~napari_shardscope.widgets.placement.add_on_grid`, so napari's dims (z step, range, plane
shown) stay the volume's. With no bound instance, or nothing selected, there is no layer.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap import EditEvent
from napari_shardscope.core.proofreading.synapses import SynapsePoints, SynapseSource, WiringWatch
from napari_shardscope.widgets.placement import add_on_grid, on_grid
from napari_shardscope.widgets.workers import NextTurnSync

if TYPE_CHECKING:
    from napari_shardscope.widgets.meshes import SurfaceSession

#: Metadata key marking the synapse layer (value: the version it shows).
SYNAPSE_KEY = "shardscope_synapses"
LAYER_NAME = "synapses"
#: Face colours (RGBA) of the two kinds of site: presynaptic orange-red, postsynaptic cyan.
COLOURS = {"pre": (1.0, 0.35, 0.1, 1.0), "post": (0.0, 0.9, 1.0, 1.0)}
#: Point diameter in voxels of the volume's finest scale (napari scales it with the zoom).
SIZE_VOXELS = 5.0
#: A thin dark rim (a fraction of the diameter): the sites stand out on any body colour.
BORDER, BORDER_COLOUR = 0.15, "#111111"


class SynapseLayer(NextTurnSync):
    """The Points layer of one viewer session's selected bodies' synapses."""

    def __init__(self, session: SurfaceSession) -> None:
        self.session = session
        self.source = SynapseSource(session.controller.session)
        self.layer: Any = None
        #: The last sites shown (``None``: no bound instance or not connected).
        self.points: SynapsePoints | None = None
        self.error = ""
        self._shown: tuple[Any, ...] | None = None
        #: The selected bodies' connections per state, for the wiring words of the next edit.
        self.wiring = WiringWatch(self.source)
        self._unsubscribe = session.controller.subscribe(self._on_state)

    def close(self) -> None:
        self._unsubscribe()

    def _on_state(self, state: Any) -> None:
        """Remember the selection's connections now (the next edit is compared with them); redraw soon.

        Not while a job runs (a split in a worker holds the labelmap's edit lock: reading now would
        freeze the GUI until it ends); the state after the job is read when it ends.
        """
        if state.busy:
            return
        try:
            self.wiring.remember(state.selected)
        except ShardscopeError as exc:
            self.error = f"synapses: {exc}"
        self.schedule()

    def on_edit(self, event: EditEvent) -> None:
        """An edit of the checked-out version: put what it did to the wiring in words (:attr:`WiringWatch.last`)."""
        try:
            self.wiring.edited(event.mutation, self.session.controller.edit_words(event.mutation))
        except ShardscopeError as exc:
            self.wiring.last = ""
            self.error = f"synapses: {exc}"

    def sync(self) -> None:
        """Bring the layer in step with the controller's selection at the checked-out version."""
        viewer = self.session.viewer
        if not hasattr(viewer.window, "_qt_window"):
            return  # the viewer was closed
        c = self.session.controller
        state = c.state
        if state.busy:
            return  # a split in a worker holds the labelmap's edit lock; synced again when it ends
        grid = self.session.grid()
        if self.layer is not None and self.layer not in viewer.layers:
            self.layer, self._shown = None, None  # the user removed it: made again on the next change
        key = (state.version.uuid if state.version else None, state.revision, state.selected, grid)
        if key == self._shown:
            return
        self._shown = key
        try:
            points = self.source.points(state.selected) if grid is not None and state.selected else None
            self.error = ""
        except ShardscopeError as exc:
            points, self.error = None, f"synapses: {exc}"
            c.report(self.error, "warning")
        self.points = points
        if points is None or grid is None:
            self._remove()
            return
        data = np.asarray(points.world, dtype=np.float64).reshape(-1, 3)
        colours = np.asarray([COLOURS[k] for k in points.kinds], dtype=np.float32).reshape(-1, 4)
        features = {"kind": list(points.kinds), "body": points.bodies.astype(np.int64),
                    "annotation": points.ids.astype(np.int64)}
        meta = {SYNAPSE_KEY: points.version}
        if self.layer is not None and not grid.holds(self.layer):
            self._remove()  # the volume was replaced (other geometry): place the layer anew
        if self.layer is None:
            self.layer = add_on_grid(
                viewer, grid, "points", data, name=LAYER_NAME, size=SIZE_VOXELS, face_color=colours,
                border_width=BORDER, border_color=BORDER_COLOUR, features=features, metadata=meta)
            return
        layer = self.layer
        layer.data = on_grid(grid, "points", data)
        layer.features = features
        layer.size = SIZE_VOXELS
        layer.face_color = colours
        layer.border_color = BORDER_COLOUR
        layer.metadata.update(meta)

    def _remove(self) -> None:
        layer, self.layer = self.layer, None
        if layer is not None:
            with contextlib.suppress(ValueError, KeyError):
                self.session.viewer.layers.remove(layer)
