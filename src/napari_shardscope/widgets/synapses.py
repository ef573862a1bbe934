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
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtCore import QObject, Signal

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap import EditEvent
from napari_shardscope.core.proofreading.synapses import (
    SelectionSynapses,
    SynapsePoints,
    SynapseSource,
    WiringWatch,
)
from napari_shardscope.widgets.placement import add_on_grid, on_grid
from napari_shardscope.widgets.workers import GuiThreadBridge, NextTurnSync

if TYPE_CHECKING:
    from napari_shardscope.widgets.meshes import SurfaceSession

#: Metadata key marking the synapse layer (value: the version it shows).
SYNAPSE_KEY = "shardscope_synapses"
LAYER_NAME = "synapses"
#: Face colours (RGBA) of the two kinds of site: presynaptic orange-red, postsynaptic cyan.
COLOURS = {"pre": (1.0, 0.35, 0.1, 1.0), "post": (0.0, 0.9, 1.0, 1.0)}
#: Point diameter in voxels of the volume's finest scale (napari scales it with the zoom) …
SIZE_VOXELS = 5.0
#: … kept between these diameters in screen pixels: zoomed out a site stays a dot you can see (not a
#: sub-pixel speck), zoomed in it stays a marker (not a disc hiding the membrane it sits on).
SCREEN_PIXELS = (6.0, 40.0)
#: A thin dark rim (a fraction of the diameter): the sites stand out on any body colour.
BORDER, BORDER_COLOUR = 0.15, "#111111"


class SynapseReads(QObject):
    """The Qt side of :class:`SynapseLayer`: ``loaded`` is emitted on the GUI thread after each read is shown."""

    loaded = Signal()


class SynapseLayer(NextTurnSync):
    """The Points layer of one viewer session's selected bodies' synapses.

    The sites and partners are read in a daemon thread (a body with 10⁵ synapses takes seconds):
    the viewer keeps painting, and a read whose selection, edit or version is no longer current
    when it ends is dropped and read again. :attr:`read` holds the last one shown; the Partners box
    listens to :attr:`signals` ``.loaded``.
    """

    def __init__(self, session: SurfaceSession) -> None:
        self.session = session
        self.source = SynapseSource(session.controller.session)
        self.layer: Any = None
        #: The last sites shown (``None``: no bound instance, nothing selected, or not connected).
        self.points: SynapsePoints | None = None
        #: The last read shown (sites and connections of the selected bodies) and its key.
        self.read: SelectionSynapses | None = None
        self.read_key: tuple[Any, ...] | None = None
        self.error = ""
        self.signals = SynapseReads()
        self._shown: tuple[Any, ...] | None = None
        self._loading: tuple[Any, ...] | None = None
        self._bridge = GuiThreadBridge()
        #: The selected bodies' connections per state, for the wiring words of the next edit.
        self.wiring = WiringWatch(self.source)
        self._unsubscribe = session.controller.subscribe(self._on_state)

    def close(self) -> None:
        self._unsubscribe()

    @property
    def pending(self) -> bool:
        """True while a sync is scheduled or a read runs (tests wait for it)."""
        return self._scheduled or self._loading is not None

    @property
    def loading(self) -> bool:
        """True while the selected bodies' synapses are read in the worker thread."""
        return self._loading is not None

    def _on_state(self, state: Any) -> None:
        """Read again soon — not while a job runs (a split in a worker holds the labelmap's edit lock:
        the read would wait for it); the state after the job is read when it ends."""
        if not state.busy:
            self.schedule()

    def on_edit(self, event: EditEvent) -> None:
        """An edit of the checked-out version: put what it did to the wiring in words (:attr:`WiringWatch.last`).

        No words while the selection's connections are still being read: the state before the edit is
        not known whole, and words from part of it would be wrong.
        """
        if self._loading is not None:
            self.wiring.last = ""
            return
        try:
            self.wiring.edited(event.mutation, self.session.controller.edit_words(event.mutation))
        except ShardscopeError as exc:
            self.wiring.last = ""
            self.error = f"synapses: {exc}"

    def _alive(self) -> bool:
        return hasattr(self.session.viewer.window, "_qt_window")  # False once the viewer was closed

    def _key(self) -> tuple[Any, ...]:
        state = self.session.controller.state
        return (state.version.uuid if state.version else None, state.revision, state.selected, self.session.grid())

    def sync(self) -> None:
        """Bring the layer in step with the controller's selection at the checked-out version (reads in a thread)."""
        if not self._alive():
            return
        c = self.session.controller
        state = c.state
        if state.busy:
            return  # a split in a worker holds the labelmap's edit lock; synced again when it ends
        if self.layer is not None and self.layer not in self.session.viewer.layers:
            self.layer, self._shown = None, None  # the user removed it: made again on the next change
        key = self._key()
        if key == self._shown or self._loading is not None:
            return  # shown; or a read runs: when it ends, a changed key is read again
        try:
            read = self.source.reader(state.selected) if state.selected else None
        except ShardscopeError as exc:
            self._fail(key, exc)
            return
        if read is None:
            self._shown, self.read, self.read_key, self.points, self.error = key, None, key, None, ""
            self._remove()
            self.signals.loaded.emit()
            return
        self._loading = key

        def work() -> None:
            try:
                result = read()
            except BaseException as exc:  # handed to the GUI thread, which reports it
                error = exc
                self._bridge.post(lambda: self._finished(key, None, error))
                return
            self._bridge.post(lambda: self._finished(key, result, None))

        threading.Thread(target=work, name="shardscope-synapses", daemon=True).start()

    def _finished(self, key: tuple[Any, ...], result: SelectionSynapses | None, exc: BaseException | None) -> None:
        self._loading = None
        if not self._alive():
            return
        if key != self._key():
            self.sync()  # stale: the selection, an edit or the version changed while it read
            return
        if exc is not None:
            if not isinstance(exc, ShardscopeError):
                raise exc  # a bug: napari's error handler shows it
            self._fail(key, exc)
            return
        assert result is not None
        self._shown, self.read, self.read_key, self.points, self.error = key, result, key, result.points, ""
        self.wiring.keep_read(result)
        self._show(result.points)
        self.signals.loaded.emit()

    def _fail(self, key: tuple[Any, ...], exc: ShardscopeError) -> None:
        self._shown, self.read, self.read_key, self.points = key, None, key, None
        self.error = f"synapses: {exc}"
        self.session.controller.report(self.error, "warning")
        self._remove()
        self.signals.loaded.emit()

    def _show(self, points: SynapsePoints) -> None:
        viewer = self.session.viewer
        grid = self.session.grid()
        if grid is None:
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
            # napari's add_points refuses a colour array of no rows (a reduction over it raises ValueError):
            # bodies without synapses give an empty layer, coloured when it gets points
            colour: dict[str, Any] = {"face_color": colours} if len(colours) else {}
            self.layer = add_on_grid(
                viewer, grid, "points", data, name=LAYER_NAME, size=SIZE_VOXELS, border_width=BORDER,
                border_color=BORDER_COLOUR, features=features, metadata=meta, canvas_size_limits=SCREEN_PIXELS,
                **colour)
            return
        layer = self.layer
        layer.data = on_grid(grid, "points", data)
        layer.features = features
        layer.size = SIZE_VOXELS
        layer.canvas_size_limits = SCREEN_PIXELS
        layer.face_color = colours
        layer.border_color = BORDER_COLOUR
        layer.metadata.update(meta)

    def _remove(self) -> None:
        layer, self.layer = self.layer, None
        if layer is not None:
            with contextlib.suppress(ValueError, KeyError):
                self.session.viewer.layers.remove(layer)
