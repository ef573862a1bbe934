"""The Proofreading panel: pick bodies with the mouse, merge, cleave, split with painted seeds, undo.

A view of the viewer's :class:`~napari_shardscope.core.proofreading.ProofreadingController`
(:func:`~napari_shardscope.widgets.session.session_for`): it draws the controller's state — the
version, the selection, which actions are enabled and why not, the last message — and forwards
clicks and keys to it. Every action is a controller call a notebook can make (``c.merge()``,
``c.cleave()``, ``c.start_split()``, ``c.undo()``, …). What lives here is only what needs a viewer:

* picking: a click on the body layer maps the cursor to a scale-0 voxel (the controller asks the
  core which body or supervoxel is there — exact whatever level napari shows); a drag (pan)
  selects nothing;
* the selection shown as the body layer's selected label (and, with *isolate*, only that body);
* split seeds painted into a temporary, small, single-scale Labels layer over the region the
  controller's pending split names (multiscale Labels layers are not editable, and napari must
  never write into the store); the layer comes and goes with the pending split;
* keybindings bound on the viewer at run time (napari ignores manifest keybindings), chosen not
  to clash with napari's own (Labels keeps M, E, P, F, L, Z, X, B and the digits);
* long operations (creating a repository, which indexes the base; a split) in worker threads with
  napari's progress, so the viewer never freezes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.proofreading import MODES, ControllerState, PendingSplit
from napari_shardscope.core.proofreading.actions import ACTION_TABLE
from napari_shardscope.core.proofreading.places import default_repository, local_dataset, remember_folder
from napari_shardscope.core.volumes.display import LAYER_METADATA_KEY
from napari_shardscope.widgets.canvas import canvas_for
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.partners import PartnerBox
from napari_shardscope.widgets.placement import add_on_grid
from napari_shardscope.widgets.scrolling import scroll_body
from napari_shardscope.widgets.session import LAYER_KEY, ViewerSession, session_for
from napari_shardscope.widgets.styling import restyle
from napari_shardscope.widgets.workers import start_job

if TYPE_CHECKING:
    import napari
    from napari.layers import Labels

SEEDS_NAME = "split seeds"



def _bound(action: str) -> tuple[str, str, str]:
    """The key binding of a controller action: its key and words from its row of ``ACTION_TABLE``."""
    row = ACTION_TABLE[action]
    return row.key, action, row.text


#: (key, action, what it does): bound on the viewer while the panel is open. The controller's actions
#: come from its table; the others are this panel's (the split toggle) or a view's.
KEYBINDINGS: tuple[tuple[str, str, str], ...] = (
    _bound("merge"),
    _bound("cleave"),
    ("Shift-S", "toggle_split", "start a split (paint seeds 1, 2, …) / split with the painted seeds"),
    _bound("undo"),
    _bound("redo"),
    _bound("clear_selection"),
    ("Shift-T", "toggle_mode", "switch clicks between bodies and supervoxels"),
    ("Shift-D", "toggle_dim", "dim every body but the selected ones (and back)"),
    ("Shift-N", "next_item", "go to the next open item of the to-do list"),
    ("Shift-B", "previous_item", "go back to the previous item of the to-do list"),
)
HELP = """<b>Proofreading</b> the checked-out version of the labelmap.<br>
<b>Click</b> a body to select it, <b>Shift-click</b> to add one (a drag pans, it selects nothing).
In <i>supervoxels</i> mode, clicks pick supervoxels of the selected body for a cleave.<br>
<b>Split</b>: <i>Start split</i> adds a <i>split seeds</i> layer; paint label 1 on one part and 2 (3, …)
on the others, then <i>Split</i>.<br>Keys: """ + "; ".join(f"<b>{k}</b> {what}" for k, _, what in KEYBINDINGS)

_STATUS_COLOURS = {"error": "color: #e06c75", "warning": "color: #d19a66"}


class ProofreadingPanel(QWidget):
    """Dock widget: connect a repository, pick bodies, merge / cleave / split / undo / redo."""

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = viewer = napari_viewer
        self.session: ViewerSession = session_for(viewer)
        self.controller = self.session.controller
        self.canvas = canvas_for(viewer)  # the selection drawn on the canvas, hover text, go-to moves
        self._seeds_layer: Labels | None = None
        self._hooked: Any = None
        self._info_key: tuple[Any, ...] | None = None
        self._suggested: dict[QLineEdit, str] = {}  # what _suggest_paths last put in each field
        self._repo_shown: str | None = None  # the controller's repository the Repository field last showed
        self._build()
        self.setToolTip(HELP)
        self._unsubscribe: Callable[[], None] | None = self.controller.subscribe(self._render)
        self.session.layers_changed.connect(self._on_layers)
        viewer.layers.events.inserted.connect(self._fill_layers)
        viewer.layers.events.removed.connect(self._on_layer_removed)
        self._bind_keys()
        self.teardown = on_removed(self, self._teardown)
        self._fill_layers()
        self._state = self.controller.state
        self._hook_layer()
        self._render(self._state)

    # -- building ---------------------------------------------------------------------------------------
    def _build(self) -> None:
        c = self.controller
        vbox = QVBoxLayout(scroll_body(self))  # scrolls in a short dock instead of overlapping
        conn = QGroupBox("Repository")
        form = QFormLayout(conn)
        self.layer_combo = QComboBox()
        self.layer_combo.setToolTip("the segmentation (supervoxel ids) to proofread")
        self.layer_combo.currentTextChanged.connect(self._suggest_paths)
        form.addRow("Segmentation", self.layer_combo)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("repository directory")
        form.addRow("Repository", self.repo_edit)
        self.agglo_edit = QLineEdit()
        self.agglo_edit.setPlaceholderText("optional supervoxel → body JSON (bodies.json)")
        form.addRow("Agglomeration", self.agglo_edit)
        row = QHBoxLayout()
        self.create_button = QPushButton("Create for layer")
        self.create_button.clicked.connect(
            lambda: c.attempt(lambda: self.create_repository(self.repo_edit.text().strip() or None)))
        self.create_button.setToolTip("a new repository over the chosen labels layer (its file or URL, or the "
                                      "labels themselves, stored inside the repository)")
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("open an existing repository (the directory in the field, or choose one)")
        self.open_button.clicked.connect(self._open_clicked)
        row.addWidget(self.create_button)
        row.addWidget(self.open_button)
        form.addRow(row)
        self.version_label = QLabel("not connected")
        self.version_label.setWordWrap(True)
        form.addRow("Version", self.version_label)
        vbox.addWidget(conn)

        sel = QGroupBox("Selection")
        sv = QVBoxLayout(sel)
        mode_row = QHBoxLayout()
        mode_row.addWidget(QLabel("Click picks"))
        self.mode_combo = QComboBox()
        self.mode_combo.addItems(MODES)
        self.mode_combo.currentTextChanged.connect(lambda text: c.attempt(c.set_mode, text))
        mode_row.addWidget(self.mode_combo)
        self.isolate_check = QCheckBox("isolate selected")
        self.isolate_check.setToolTip("show only the first selected body")
        self.isolate_check.toggled.connect(lambda _on: self._show_selection_on_layer(self._state))
        mode_row.addWidget(self.isolate_check)
        sv.addLayout(mode_row)
        self.selection_list = QListWidget()
        self.selection_list.setMaximumHeight(90)
        sv.addWidget(self.selection_list)
        self.picked_label = QLabel("picked supervoxels: none")
        self.picked_label.setWordWrap(True)
        sv.addWidget(self.picked_label)
        vbox.addWidget(sel)

        act = QGroupBox("Edit")
        grid = QVBoxLayout(act)
        r1, r2 = QHBoxLayout(), QHBoxLayout()
        self.merge_button = QPushButton("Merge")
        self.merge_button.clicked.connect(lambda: c.attempt(c.merge))
        self.cleave_button = QPushButton("Cleave")
        self.cleave_button.clicked.connect(lambda: c.attempt(c.cleave))
        self.split_button = QPushButton("Start split")
        self.split_button.clicked.connect(lambda: c.attempt(self.toggle_split))
        self.cancel_split_button = QPushButton("Cancel split")
        self.cancel_split_button.clicked.connect(lambda: c.attempt(c.cancel_split))
        self.undo_button = QPushButton("Undo")
        self.undo_button.clicked.connect(lambda: c.attempt(c.undo))
        self.redo_button = QPushButton("Redo")
        self.redo_button.clicked.connect(lambda: c.attempt(c.redo))
        for b in (self.merge_button, self.cleave_button, self.split_button):
            r1.addWidget(b)
        for b in (self.cancel_split_button, self.undo_button, self.redo_button):
            r2.addWidget(b)
        grid.addLayout(r1)
        grid.addLayout(r2)
        vbox.addWidget(act)

        info = QGroupBox("Body")
        iform = QFormLayout(info)
        self.info_labels: dict[str, QLabel] = {}
        for key in ("id", "size", "supervoxels", "bounds", "history"):
            lab = QLabel("")
            lab.setWordWrap(True)
            self.info_labels[key] = lab
            iform.addRow(key, lab)
        vbox.addWidget(info)

        self.partner_box = PartnerBox(self)
        self.partner_tree, self.wiring_label = self.partner_box.tree, self.partner_box.wiring_label
        vbox.addWidget(self.partner_box)

        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        vbox.addWidget(self.status_label)
        vbox.addStretch(1)

    def _bind_keys(self) -> None:
        c = self.controller
        actions: dict[str, Callable[[], Any]] = {
            "merge": c.merge, "cleave": c.cleave, "toggle_split": self.toggle_split, "undo": c.undo, "redo": c.redo,
            "clear_selection": c.clear_selection, "toggle_mode": c.toggle_mode,
            "toggle_dim": self.canvas.toggle_dim_others, "next_item": c.todo.next, "previous_item": c.todo.previous}
        for key, name, _ in KEYBINDINGS:
            def handler(_viewer: Any, func: Callable[[], Any] = actions[name]) -> None:
                c.attempt(func)

            self.viewer.bind_key(key, handler, overwrite=True)

    def _unbind_keys(self) -> None:
        for key, _, _ in KEYBINDINGS:
            self.viewer.bind_key(key, None, overwrite=True)

    # -- connecting -------------------------------------------------------------------------------------
    def segmentation_layers(self) -> list[Any]:
        """Layers that can be proofread: our reader's segmentations and any other labels layer.

        A labels layer from another source (napari's own reader, napari-ome-zarr, an array added in a
        notebook) is offered too; the proofreading session's own layers and the split seeds are not.
        """
        from napari.layers import Labels

        out = []
        for layer in self.viewer.layers:
            meta = layer.metadata.get(LAYER_METADATA_KEY) if hasattr(layer, "metadata") else None
            ours = isinstance(meta, dict) and meta.get("kind") == "segmentation" and meta.get("url")
            session_layer = LAYER_KEY in getattr(layer, "metadata", {}) or layer is self._seeds_layer
            if ours or (isinstance(layer, Labels) and not session_layer and layer.name != SEEDS_NAME):
                out.append(layer)
        return out

    @staticmethod
    def layer_url(layer: Any) -> str | None:
        """The path or URL a layer was read from: our reader's URL, else napari's ``layer.source.path``."""
        meta = layer.metadata.get(LAYER_METADATA_KEY) if hasattr(layer, "metadata") else None
        if isinstance(meta, dict) and meta.get("url"):
            return str(meta["url"])
        source = getattr(layer, "source", None)
        path = getattr(source, "path", None)
        return str(path) if path else None

    def _fill_layers(self, *_: Any) -> None:
        """Offer the segmentation layers; the fields follow only a change of the chosen one.

        Layers come and go all the time (surfaces, overlays): refilling must not re-suggest paths over
        the Repository field that shows the connected repository (:meth:`_render_repository`).
        """
        current = self.layer_combo.currentText()
        names = [layer.name for layer in self.segmentation_layers()]
        self.layer_combo.blockSignals(True)
        self.layer_combo.clear()
        self.layer_combo.addItems(names)
        if current in names:
            self.layer_combo.setCurrentText(current)
        self.layer_combo.blockSignals(False)
        if self.layer_combo.currentText() != current:
            self._suggest_paths()

    def _on_layer_removed(self, *_: Any) -> None:
        self._fill_layers()
        if self._seeds_layer is not None and self._seeds_layer not in self.viewer.layers:
            self._seeds_layer = None  # the user removed the seeds layer: the split is off
            self.controller.attempt(self.controller.cancel_split)

    def _suggest_paths(self, *_: Any) -> None:
        """Fill the repository and agglomeration fields for the chosen layer's volume.

        A field the user typed into is kept; one this panel filled for another layer is replaced
        (a bodies.json of one volume must not group another volume's supervoxels).
        """
        layer = self._chosen_layer()
        if layer is None:
            return
        url = self.layer_url(layer)
        where = default_repository(url, layer.name)
        repo = str(where) if where is not None else ""
        local = local_dataset(url)
        bodies = local.parent / "bodies.json" if local is not None else None
        agglo = str(bodies) if bodies is not None and bodies.is_file() else ""
        for edit, value in ((self.repo_edit, repo), (self.agglo_edit, agglo)):
            if edit.text() in ("", self._suggested.get(edit, "")):
                edit.setText(value)
            self._suggested[edit] = value

    def _chosen_layer(self) -> Any:
        name = self.layer_combo.currentText()
        return next((lay for lay in self.segmentation_layers() if lay.name == name), None)

    def create_repository(self, path: str | Path | None = None, layer: Any = None,
                          agglomeration: str | Path | None = None, *, name: str = "seg") -> Any:
        """Create a repository with a labelmap over ``layer``'s segmentation (in a worker).

        Indexing the base reads all of scale 0 once, so it runs off the GUI thread with napari's
        progress; returns the worker (the panel is :attr:`busy` until it is done).
        """
        layer = layer if layer is not None else self._chosen_layer()
        if layer is None:
            raise ArgumentError("no segmentation layer: open a segmentation (File › Open, or shardscope open) "
                                "or add a labels layer")
        agg = agglomeration if agglomeration is not None else (self.agglo_edit.text().strip() or None)
        if path is None:
            path = self._ask_for_place(layer)
        url = self.layer_url(layer)
        meta = layer.metadata.get(LAYER_METADATA_KEY) if hasattr(layer, "metadata") else None
        ours = isinstance(meta, dict) and meta.get("url")
        labels = None if ours else (layer.data[0] if getattr(layer, "multiscale", False) else layer.data)
        job = self.controller.create_job(
            path, url, name=name, agglomeration=agg, labels=labels, labels_name=layer.name,
            voxel_size=tuple(layer.scale[-3:]), translate=tuple(layer.translate[-3:]))
        self.repo_edit.setText(str(path))

        def hide_source(_: Any) -> None:
            if layer in self.viewer.layers and not ours:
                layer.visible = False  # the body layer shows the same labels, edited

        return start_job(job, hide_source)

    def _ask_for_place(self, layer: Any) -> Path | None:
        """No repository directory given: suggest the default place, or (none yet) ask for a folder once."""
        where = default_repository(self.layer_url(layer), layer.name)
        if where is not None:
            self.repo_edit.setText(str(where))
            self._suggested[self.repo_edit] = str(where)  # a suggestion: another layer chosen replaces it
            raise ArgumentError(f"give the new repository's directory (suggested: {where})")
        else:
            folder = QFileDialog.getExistingDirectory(
                self, "Choose a folder for proofreading repositories and exports (asked once)", str(Path.home()))
            if not folder:
                raise ArgumentError("choose where the repository goes (the Repository field)")
            remember_folder(folder)
            where = default_repository(self.layer_url(layer), layer.name)
        return where

    def open_repository(self, path: str | Path, instance: str | None = None) -> None:
        """Open an existing repository and check out its ``main`` branch."""
        self.repo_edit.setText(str(path))
        self.controller.connect(path, instance=instance)

    def _open_clicked(self) -> None:
        path = self.repo_edit.text().strip()
        if not path or not Path(path).exists():
            path = QFileDialog.getExistingDirectory(self, "Open a shardscope repository", path or str(Path.home()))
        if path:
            self.controller.attempt(lambda: self.open_repository(path))

    # -- picking ----------------------------------------------------------------------------------------
    def pick(self, world: Sequence[float], add: bool = False) -> int:
        """Act on a click at ``world`` (z, y, x): select the body there, or pick the supervoxel (by mode)."""
        voxel = self.session.voxel_at(world)
        if voxel is None:
            return 0
        return self.controller.pick_at(voxel, add=add)

    def _on_click(self, layer: Any, event: Any) -> Any:
        """Mouse callback on the body layer: a click selects; a drag (pan) does not."""
        if event.type != "mouse_press" or self.controller.version is None:
            return
        if self.viewer.dims.ndisplay != 2:
            self.controller.report("switch to 2D to pick bodies")
            return
        position, add = list(event.position), "Shift" in event.modifiers
        yield
        moved = False
        while event.type == "mouse_move":
            moved = True
            yield
        if not moved:
            self.controller.attempt(lambda: self.pick(position, add=add))

    def _hook_layer(self) -> None:
        layer = self.session.body_layer
        if layer is self._hooked:
            return
        if self._hooked is not None and self._on_click in self._hooked.mouse_drag_callbacks:
            self._hooked.mouse_drag_callbacks.remove(self._on_click)
        if layer is not None:
            layer.mouse_drag_callbacks.append(self._on_click)
        self._hooked = layer

    def _on_layers(self) -> None:
        """The body layer was added, replaced or given new data: click on it, show the selection on it."""
        self._hook_layer()
        self._show_selection_on_layer(self._state)

    def is_listening(self) -> bool:
        """True while the panel follows the controller or takes clicks on the body layer."""
        layer = self.session.body_layer
        clicks = layer is not None and self._on_click in layer.mouse_drag_callbacks
        return clicks or self.controller.is_subscribed(self._render)

    # -- splitting ----------------------------------------------------------------------------------------
    @property
    def seeds_layer(self) -> Labels | None:
        """The layer split seeds are painted in, while a split is pending."""
        return self._seeds_layer

    def start_split(self) -> Labels | None:
        """Start a split of the first selected body; its seeds layer (label 1 to paint) is returned.

        For a large body only the z plane shown is painted (the controller names the region).
        """
        if self.session.grid() is None:
            raise ArgumentError("the body layer was removed: open the repository again to paint split seeds")
        plane = None
        dims = self.viewer.dims
        if dims.ndim >= 3:
            plane = self.session.world_to_voxel_z(float(dims.point[dims.ndim - 3]))
        self.controller.start_split(plane)
        return self._seeds_layer

    def collect_seeds(self) -> dict[int, np.ndarray]:
        """Hand the painted seeds to the controller; returns group label → scale-0 voxels (n, 3) in the body."""
        layer = self._seeds_layer
        if layer is None:
            raise ArgumentError("start a split first")
        return dict(self.controller.set_painted_seeds(np.asarray(layer.data)).seeds)

    def finish_split(self) -> Any:
        """Split the body by the painted seeds (in a worker); returns the worker."""
        self.collect_seeds()
        return start_job(self.controller.split_job())

    def toggle_split(self) -> Any:
        """Shift-S: start a split, or split with the painted seeds."""
        return self.start_split() if self.controller.pending_split is None else self.finish_split()

    def _sync_seeds_layer(self, pending: PendingSplit | None) -> None:
        """A seeds layer exactly while a split is pending (over the region the controller names)."""
        layer = self._seeds_layer
        meta = layer.metadata if layer is not None else {}
        current = (pending is not None and layer is not None and layer in self.viewer.layers
                   and meta.get("split_body") == pending.body and meta.get("split_version") == pending.version)
        if current:
            return
        if layer is not None:
            self._seeds_layer = None
            if layer in self.viewer.layers:
                self.viewer.layers.remove(layer)
            body_layer = self.session.body_layer
            if pending is None and body_layer is not None and body_layer in self.viewer.layers:
                self.viewer.layers.selection.active = body_layer
        if pending is None:
            return
        grid = self.session.grid()
        if grid is None:
            return  # no body layer to paint over (start_split refuses then)
        lo = pending.box.lo
        seeds = np.zeros(pending.box.shape, dtype=np.uint8)
        layer = add_on_grid(  # on the body layer's voxels from the region's first voxel: the dims stay the volume's
            self.viewer, grid, "labels", seeds, origin=lo, keep_active=False, name=SEEDS_NAME,
            metadata={"split_origin": tuple(lo), "split_body": pending.body, "split_version": pending.version})
        layer.brush_size = 6
        layer.selected_label = 1
        layer.mode = "paint"
        self._seeds_layer = layer
        self.viewer.layers.selection.active = layer

    # -- rendering ----------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """True while a repository is being created or a split runs (edits wait)."""
        return self.controller.busy

    def _render(self, state: ControllerState) -> None:
        self._state = state
        self._render_repository()
        ver = state.version
        if ver is None:
            self.version_label.setText("not connected")
        else:
            lock = "committed (read-only)" if ver.locked else "open"
            self.version_label.setText(f"{ver.short} on branch {ver.branch!r}, {lock}")
        self.mode_combo.blockSignals(True)
        self.mode_combo.setCurrentText(state.mode)
        self.mode_combo.blockSignals(False)
        self.selection_list.clear()
        self.selection_list.addItems([str(b) for b in state.selected])
        self.picked_label.setText("picked supervoxels: " + (", ".join(map(str, state.picked)) or "none"))
        self._sync_seeds_layer(state.pending_split)
        self._show_selection_on_layer(state)
        self._show_info(state)
        self._show_partners(state)
        split_action = "split" if state.pending_split is not None else "start_split"
        self.split_button.setText("Split" if split_action == "split" else "Start split")
        for name, button in (("merge", self.merge_button), ("cleave", self.cleave_button),
                             (split_action, self.split_button), ("cancel_split", self.cancel_split_button),
                             ("undo", self.undo_button), ("redo", self.redo_button)):
            action = state.actions[name]
            button.setEnabled(action.enabled)
            button.setToolTip(action.reason or ACTION_TABLE[name].tip)
        status = state.status
        if status.level != "error" and state.edit_block:
            restyle(self.status_label, _STATUS_COLOURS["warning"])  # why nothing can be edited here
            self.status_label.setText(state.edit_block)
        else:
            restyle(self.status_label, _STATUS_COLOURS.get(status.level, ""))
            self.status_label.setText(status.render())

    def _render_repository(self) -> None:
        """The Repository field (and the Segmentation box) name what the controller is connected to.

        Whoever connected it — this panel, the Versions panel, a notebook's ``c.connect(path)`` or
        ``c.create(...)``, before or after the panel was opened. Rendered when the connection changes,
        so what the user types meanwhile (a place for a new repository) is theirs; the value counts as
        a suggestion, replaced when another segmentation layer is chosen.
        """
        repo = self.controller.session.repo
        path = str(repo.path) if repo is not None and repo.path else None
        if path == self._repo_shown:
            return
        self._repo_shown = path
        if path is None:
            return  # disconnected: the field keeps the path, to open it again
        names = [layer.name for layer in self.segmentation_layers()]
        base = next((layer.name for layer in reversed(self.session.base_layers()) if layer.name in names), None)
        if base is not None and base != self.layer_combo.currentText():
            self.layer_combo.setCurrentText(base)  # suggests that layer's paths: replaced just below
        self.repo_edit.setText(path)
        self._suggested[self.repo_edit] = path

    def _show_selection_on_layer(self, state: ControllerState) -> None:
        """The body layer's selected label and isolate switch, set only when they change.

        napari re-slices the layer (its visible tiles read again through the body map) whenever
        ``show_selected_label`` is set, even to the value it has; the panel renders on every controller
        state (each click, each status line), which re-read the plane each time.
        """
        layer = self.session.body_layer
        if layer is not None and layer in self.viewer.layers:
            if state.selected:
                layer.selected_label = state.selected[0]  # napari ignores an unchanged label itself
            isolate = bool(self.isolate_check.isChecked() and state.selected)
            if layer.show_selected_label != isolate:
                layer.show_selected_label = isolate

    def _show_info(self, state: ControllerState) -> None:
        """The first selected body's id, size, supervoxels, bounds and history (read when it changed)."""
        first = state.selected[0] if state.selected else None
        key = (first, state.revision, state.version.uuid if state.version else None)
        if key == self._info_key:
            return
        self._info_key = key
        labels = self.info_labels
        for lab in labels.values():
            lab.setText("")
        if first is None or state.version is None:
            return
        try:
            info = self.controller.body_info(first)
        except ShardscopeError as exc:
            labels["id"].setText(f"{first} ({exc})")
            return
        labels["id"].setText(str(info.id))
        labels["size"].setText(f"{info.size:,} voxels")
        labels["supervoxels"].setText(str(info.supervoxels))
        labels["bounds"].setText(info.bounds_text)
        labels["history"].setText("<br>".join(
            f"{what} by {user}, {datetime.fromtimestamp(t).strftime('%H:%M:%S')}"
            for what, (_, user, t, _) in zip(info.edits, info.history, strict=True)) or "no edits")

    def _show_partners(self, state: ControllerState) -> None:
        self.partner_box.show_state(state)

    def partner_rows(self) -> list[tuple[str, int, int]]:
        """The partner list as shown: (``"out"``/``"in"``, partner body, synapse count), top row first."""
        return self.partner_box.rows()

    def _teardown(self) -> None:
        """The panel left the viewer: unbind its keys, its click hook and its listeners."""
        self._unbind_keys()
        if self._hooked is not None and self._on_click in self._hooked.mouse_drag_callbacks:
            self._hooked.mouse_drag_callbacks.remove(self._on_click)
        self._hooked = None
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.session.layers_changed.disconnect(self._on_layers)
        self.viewer.layers.events.inserted.disconnect(self._fill_layers)
        self.viewer.layers.events.removed.disconnect(self._on_layer_removed)
