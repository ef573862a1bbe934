"""The Shard browser panel: how a sharded volume is laid out, and where a chunk lives.

A thin view over :class:`napari_shardscope.core.layout.LayoutTree` — every answer it shows
comes from a core call a notebook can make (``open_layout``, ``LayoutTree.expand``,
``locate_voxel``/``locate_chunk``/``locate_segment``/``locate_world``, ``shard_map``, ``validate``,
``locate_problem``). What lives here is only what needs a viewer:

* the tree widget, filled when a row is expanded (the core reads that row's index then, and only
  then), children added in pages so a scale with 10⁴ shards opens at once (:mod:`.layout_tree_view`);
* the chunk outline: a Shapes layer on the volume's voxel grid (its scale and translate), one
  rectangle per displayed plane the chunk covers (napari shows a shape only on the plane it lies
  in, one voxel deep), and the move of the view there (:mod:`.chunk_outline`);
* "locate under cursor": viewer mouse callbacks that map the cursor to the layer's data at the
  level napari is showing, then to the core's world (so a moved layer still picks right);
* the shard map as a Labels layer (value = shard number; background set to a value that never
  occurs, so shard 0 has a colour too);
* validation and the shard map in worker threads (napari's ``create_worker``) with napari's
  progress bar, so the GUI never freezes; problems arrive one by one and are clickable.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtCore import Qt, Signal
from qtpy.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.layout import (
    LayoutNode,
    LayoutTree,
    Located,
    NodePath,
    ShardMap,
    ShardMapBy,
    open_layout,
    parse_position,
)
from napari_shardscope.core.volumes.display import LAYER_METADATA_KEY
from napari_shardscope.widgets.chunk_outline import OUTLINE_NAME, camera, draw_outline, layer_box, move_view
from napari_shardscope.widgets.cursor_locate import CursorLocator
from napari_shardscope.widgets.layout_tree_view import NODE_ROLE, PAGE_SIZE, LayoutTreeView
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.placement import VolumeGrid
from napari_shardscope.widgets.scrolling import scroll_body, wrapping
from napari_shardscope.widgets.shard_map_layer import add_shard_map, shard_map_name
from napari_shardscope.widgets.styling import restyle
from napari_shardscope.widgets.workers import GuiProgress, Stopped, start_worker

if TYPE_CHECKING:
    import napari
    from napari.layers import Layer, Shapes

LOCATE_MODES = ("voxel", "chunk id", "grid position", "segment id")
ALL_SCALES = "(all scales)"

# OUTLINE_NAME, PAGE_SIZE and camera moved with the outline and the tree view; still importable from here.
__all__ = ["HELP", "LOCATE_MODES", "OUTLINE_NAME", "PAGE_SIZE", "ShardBrowser", "camera"]

HELP = """<b>Shard browser</b><br>
Tree: expand a scale to list its shard files, a shard to read its index (minishards with chunk
counts, bytes and compression ratio), a minishard to list its chunks. Click a chunk to outline it.<br>
Locate: a voxel z, y, x from 0 (the layer's own index, as napari shows it under the cursor, whatever
order and offset the format stores: both are shown in the answer), a precomputed chunk id, a chunk-grid
position (z, y, x), or a segment id (meshes/skeletons).<br>
Locate under cursor: moving the mouse shows the chunk under it at the level napari is showing;
clicking outlines it.<br>
Shard map (sharded scales only): a layer colouring every chunk by its shard (or minishard) —
computed from chunk ids, no data is read.<br>
Validate: reads every shard file of the scale in a worker thread; click a problem to go to its chunk."""


class ShardBrowser(QWidget):
    """Dock widget: browse a sharded volume's layout, locate chunks, map shards, validate.

    Parameters
    ----------
    napari_viewer
        The viewer; napari passes it when the widget is opened from the Plugins menu.

    Public methods (what the tests and scripts drive): :meth:`set_layer`, :meth:`expand_path`,
    :meth:`select_path`, :meth:`locate`, :meth:`locate_voxel`, :meth:`locate_chunk`,
    :meth:`locate_segment`, :meth:`show_located`, :meth:`set_cursor_mode`, :meth:`show_shard_map`,
    :meth:`validate`, :meth:`stop`, :meth:`select_problem`.
    """

    #: Emitted from worker threads; Qt queues it to the GUI thread.
    _problem = Signal(object)

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = napari_viewer
        self.layer: Layer | None = None
        self.tree: LayoutTree | None = None
        self.outline_layer: Shapes | None = None
        self.shard_map_layer: Layer | None = None
        self.last_located: Located | None = None
        self.problems: list[Problem] = []
        self.last_error: str | None = None
        self._workers: list[Any] = []
        self._cancel = threading.Event()
        self.cursor_locator = CursorLocator(self.viewer, lambda: (self.tree, self.layer), self._on_hover,
                                            lambda located: self.show_located(located, move=False))
        self._build_ui()
        self._problem.connect(self._on_problem)
        self.viewer.layers.events.inserted.connect(self._refresh_layers)
        self.viewer.layers.events.removed.connect(self._refresh_layers)
        self.teardown = on_removed(self, self._teardown)
        self._refresh_layers()

    # -- UI ------------------------------------------------------------------------------------------
    def _build_ui(self) -> None:
        self.setToolTip(HELP)
        self.setMinimumWidth(440)
        layout = QVBoxLayout(scroll_body(self))  # scrolls in a short dock instead of overlapping
        top = QHBoxLayout()
        top.addWidget(QLabel("Layer:"))
        self.layer_combo = QComboBox()
        self.layer_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.layer_combo.currentIndexChanged.connect(self._on_layer_combo)
        top.addWidget(self.layer_combo)
        self.reload_button = QPushButton("Reload")
        self.reload_button.setToolTip("Forget cached indexes and listings (after the files changed)")
        self.reload_button.clicked.connect(self.reload)
        top.addWidget(self.reload_button)
        layout.addLayout(top)

        self.tree_widget = LayoutTreeView(self._error)  # rows read when expanded, children in pages
        self.tree_widget.itemClicked.connect(self._on_item_clicked)
        self.tree_widget.setMinimumHeight(220)
        layout.addWidget(self.tree_widget, stretch=4)
        self.detail_label = wrapping(QLabel(""))  # a long path wraps in the panel's width, never over the tree
        self.detail_label.setWordWrap(True)
        self.detail_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.detail_label)

        tools = QGroupBox("Locate")
        form = QFormLayout(tools)
        self.scale_combo = QComboBox()
        self.scale_combo.currentIndexChanged.connect(self._update_placeholder)
        form.addRow("Scale:", self.scale_combo)
        row = QHBoxLayout()
        self.mode_combo = QComboBox()
        self.mode_combo.addItems(list(LOCATE_MODES))
        self.mode_combo.currentIndexChanged.connect(self._update_placeholder)
        row.addWidget(self.mode_combo)
        self.locate_edit = QLineEdit()
        self.locate_edit.returnPressed.connect(self._on_locate_clicked)
        row.addWidget(self.locate_edit, stretch=1)
        self.locate_button = QPushButton("Locate")
        self.locate_button.clicked.connect(self._on_locate_clicked)
        row.addWidget(self.locate_button)
        form.addRow(row)
        self.cursor_check = QCheckBox("Locate under cursor (move: show, click: outline)")
        self.cursor_check.toggled.connect(self.set_cursor_mode)
        form.addRow(self.cursor_check)
        self.locate_label = wrapping(QLabel(""))
        self.locate_label.setWordWrap(True)
        self.locate_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow(self.locate_label)
        # shard-only: shown for a sharded scale, hidden for N5, zarr v2 and unsharded zarr v3 / precomputed
        self.map_row = QWidget()
        map_row = QHBoxLayout(self.map_row)
        map_row.setContentsMargins(0, 0, 0, 0)
        self.map_by_combo = QComboBox()
        self.map_by_label = QLabel("Colour chunks by")
        map_row.addWidget(self.map_by_label)
        map_row.addWidget(self.map_by_combo)
        self.map_button = QPushButton("Shard map")
        self.map_button.setToolTip("Add a layer colouring each chunk of the scale by its shard (ids only, no reads)")
        self.map_button.clicked.connect(lambda: self.show_shard_map())
        map_row.addWidget(self.map_button)
        self.map_row.setVisible(False)
        form.addRow(self.map_row)
        layout.addWidget(tools)

        checks = QGroupBox("Validate")
        vbox = QVBoxLayout(checks)
        vrow = QHBoxLayout()
        self.validate_scope = QComboBox()
        vrow.addWidget(self.validate_scope, stretch=1)
        self.validate_button = QPushButton("Validate")
        self.validate_button.clicked.connect(lambda: self.validate(self._validate_choice()))
        vrow.addWidget(self.validate_button)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop)
        vrow.addWidget(self.stop_button)
        vbox.addLayout(vrow)
        self.progress_bar = QProgressBar()
        self.progress_bar.setTextVisible(True)
        self.progress_bar.setFormat("%v / %m")
        self.progress_bar.setValue(0)
        vbox.addWidget(self.progress_bar)
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        vbox.addWidget(self.status_label)
        self.problem_list = QListWidget()
        self.problem_list.setMinimumHeight(80)
        self.problem_list.itemClicked.connect(self._on_problem_clicked)
        vbox.addWidget(self.problem_list, stretch=1)
        layout.addWidget(checks, stretch=1)

    # -- layers and the tree ---------------------------------------------------------------------------
    def _shardscope_layers(self) -> list[Layer]:
        return [layer for layer in self.viewer.layers if LAYER_METADATA_KEY in getattr(layer, "metadata", {})]

    def _refresh_layers(self, event: Any = None) -> None:
        layers = self._shardscope_layers()
        names = [layer.name for layer in layers]
        current = self.layer.name if self.layer is not None and self.layer in layers else None
        self.layer_combo.blockSignals(True)
        self.layer_combo.clear()
        self.layer_combo.addItems(names)
        if current is not None:
            self.layer_combo.setCurrentIndex(names.index(current))
        self.layer_combo.blockSignals(False)
        if current is None:
            self.set_layer(layers[-1] if layers else None)

    def _on_layer_combo(self, index: int) -> None:
        layers = self._shardscope_layers()
        if 0 <= index < len(layers) and layers[index] is not self.layer:
            self.set_layer(layers[index])

    def set_layer(self, layer: Layer | None) -> None:
        """Show the layout of ``layer``'s dataset (a layer opened by this plugin); reads metadata only."""
        self._clear(layer)
        if layer is None:
            self.detail_label.setText("Open a volume (File > Open, or shardscope open PATH) to browse its layout.")
            return
        names = [self.layer_combo.itemText(i) for i in range(self.layer_combo.count())]
        if layer.name in names:
            self.layer_combo.blockSignals(True)
            self.layer_combo.setCurrentIndex(names.index(layer.name))
            self.layer_combo.blockSignals(False)
        meta = layer.metadata[LAYER_METADATA_KEY]
        url = str(meta["url"])
        try:
            tree = open_layout(url, meta.get("volume"))
        except ShardscopeError as exc:
            self._error(f"cannot inspect {url}: {exc}")
            return
        self.set_tree(tree, layer)

    def set_tree(self, tree: LayoutTree, layer: Layer | None = None) -> None:
        """Show ``tree`` (e.g. ``open_layout(url)`` of a dataset with no layer); outlines go with ``layer``."""
        self._clear(layer)
        try:
            roots = tree.roots()
        except ShardscopeError as exc:
            self._error(f"cannot inspect {tree.inspector.store.url}: {exc}")
            return
        self.tree = tree
        self.tree_widget.show_roots(tree, roots)
        scales = tree.spatial_scales()
        self.scale_combo.addItems([s or "(array)" for s in scales])
        self.validate_scope.addItems([ALL_SCALES, *[s or "(array)" for s in scales]])
        self.detail_label.setText(f"{tree.format_title}: {tree.url or tree.inspector.store.url}")
        self._update_placeholder()

    def _clear(self, layer: Layer | None) -> None:
        self.layer = layer
        self.tree = None
        self.cursor_locator.forget()
        self.tree_widget.forget_tree()
        self.scale_combo.clear()
        self.validate_scope.clear()
        self.map_row.setVisible(False)

    def reload(self) -> None:
        """Forget cached indexes and listings and rebuild the tree (after the files changed)."""
        if self.layer is not None:
            self.set_layer(self.layer)
        elif self.tree is not None:
            tree = self.tree
            tree.clear_cache()
            self.set_tree(tree)

    def _scale_keys(self) -> list[str]:
        return self.tree.spatial_scales() if self.tree is not None else []

    def _chosen_scale(self) -> str | None:
        index = self.scale_combo.currentIndex()
        keys = self._scale_keys()
        return keys[index] if 0 <= index < len(keys) else None

    def _validate_choice(self) -> str | None:
        index = self.validate_scope.currentIndex()
        keys = self._scale_keys()
        return keys[index - 1] if 1 <= index <= len(keys) else None

    def _update_placeholder(self, *_: Any) -> None:
        mode = self.mode_combo.currentText()
        text = {"chunk id": "precomputed chunk id (Morton code)", "segment id": "segment id",
                "grid position": "chunk grid position"}.get(mode, "voxel")
        scale = self._chosen_scale()
        if mode in ("voxel", "grid position") and self.tree is not None and scale is not None:
            axes = self.tree.geometry(scale).array_axes  # the reader's order, as everywhere a voxel is typed
            text = f"{text}: {', '.join(axes[-3:])}" + (" from 0" if mode == "voxel" else "")
        self.locate_edit.setPlaceholderText(text)
        self._update_shard_actions(scale)

    def _update_shard_actions(self, scale: str | None) -> None:
        """Offer the shard map only for a sharded scale, by what its shards have (zarr v3: no minishards)."""
        levels = self.tree.shard_map_levels(scale) if self.tree is not None and scale is not None else ()
        current = self.map_by_combo.currentText()
        self.map_by_combo.blockSignals(True)
        self.map_by_combo.clear()
        self.map_by_combo.addItems(list(levels))
        if current in levels:
            self.map_by_combo.setCurrentText(current)
        self.map_by_combo.blockSignals(False)
        self.map_row.setVisible(bool(levels))

    # -- tree items ----------------------------------------------------------------------------------------
    def _on_item_clicked(self, item: QTreeWidgetItem, column: int = 0) -> None:
        if self.tree_widget.show_more(item):
            return
        node = item.data(0, NODE_ROLE)
        if not isinstance(node, LayoutNode):
            return
        self.detail_label.setText(node.detail or node.name)
        if node.kind == "chunk" and self.tree is not None:
            located = self.tree.locate_node(node)
            if located.world_box is not None:
                self.show_located(located, select=False)

    def expand_path(self, path: NodePath) -> QTreeWidgetItem:
        """Expand the tree down to ``path`` (reading the indexes on the way) and return its row."""
        return self.tree_widget.expand_path(path)

    def select_path(self, path: NodePath) -> QTreeWidgetItem:
        """Expand to ``path``, select its row and scroll to it."""
        item = self.expand_path(path)
        self.tree_widget.setCurrentItem(item)
        self.tree_widget.scrollToItem(item)
        return item

    def item_for_path(self, path: NodePath) -> QTreeWidgetItem | None:
        """The row of ``path`` if it has been created (``None`` if its parent was never expanded)."""
        return self.tree_widget.item_for_path(path)

    # -- locate ---------------------------------------------------------------------------------------------
    def _require_tree(self) -> LayoutTree:
        if self.tree is None:
            raise ArgumentError("no dataset is shown: open a volume with napari-shardscope first")
        return self.tree

    def _on_locate_clicked(self) -> None:
        try:
            self.locate(self.locate_edit.text(), self.mode_combo.currentText(), self._chosen_scale())
        except ShardscopeError as exc:
            self._error(str(exc), self.locate_label)

    def locate(self, text: str, mode: str = "voxel", scale: str | None = None) -> Located:
        """Locate what the locate box holds: ``mode`` is one of ``voxel``, ``chunk id``, ``grid position``,
        ``segment id``; the result is outlined, selected in the tree and the view moves there."""
        if mode == "voxel":
            return self.locate_voxel(parse_position(text), scale)
        if mode == "grid position":
            return self.locate_chunk(parse_position(text), scale)
        (value,) = parse_position(text, length=1)
        if mode == "chunk id":
            return self.locate_chunk(value, scale)
        if mode == "segment id":
            found = self.locate_segment(value)
            return found[0]
        raise ArgumentError(f"locate mode must be one of {LOCATE_MODES}, got {mode!r}")

    def locate_voxel(self, voxel: Sequence[int], scale: str | None = None) -> Located:
        """Outline and go to the chunk holding ``voxel`` (z, y, x from 0, the layer's index) at ``scale``."""
        located = self._require_tree().locate_voxel(voxel, scale)
        self.show_located(located)
        return located

    def locate_chunk(self, chunk: int | Sequence[int], scale: str | None = None) -> Located:
        """Outline and go to a chunk given by precomputed id or chunk-grid position (z, y, x)."""
        located = self._require_tree().locate_chunk(chunk, scale)
        self.show_located(located)
        return located

    def locate_segment(self, segment_id: int) -> list[Located]:
        """Select where a segment's meshes/skeletons are stored (they have no place in the volume)."""
        found = self._require_tree().locate_segment(segment_id)
        for located in found[:1]:
            self.show_located(located)
        self.locate_label.setText("\n".join(f.describe() for f in found))
        return found

    def show_located(self, located: Located, *, move: bool = True, select: bool = True) -> None:
        """Outline a located chunk (world coordinates), select its tree row and move the view there."""
        self.last_located = located
        restyle(self.locate_label, "")
        self.locate_label.setText(located.describe())
        if select:
            try:
                self.select_path(located.path)
            except ShardscopeError as exc:  # e.g. a chunk whose shard cannot be listed
                self.detail_label.setText(str(exc))
        if located.world_box is None:
            return
        lo, hi = layer_box(self.layer, located.world_box)
        grid = self._grid()
        self.outline_layer = draw_outline(self.viewer, grid, self.layer, self.outline_layer, lo, hi)
        if move:
            move_view(self.viewer, grid, self.layer, lo, hi)

    def _grid(self) -> VolumeGrid:
        """The volume's grid: the layer's (as napari places it), or the tree's finest scale with no layer."""
        return VolumeGrid.of_layer(self.layer) if self.layer is not None else VolumeGrid.of_layout(self._require_tree())

    # -- cursor mode ---------------------------------------------------------------------------------------
    @property
    def cursor_mode(self) -> bool:
        return self.cursor_locator.enabled

    @property
    def hover(self) -> Located | None:
        """The chunk under the cursor (cursor mode), or the one last clicked."""
        return self.cursor_locator.hover

    def set_cursor_mode(self, enabled: bool) -> None:
        """Turn "locate under cursor" on/off: mouse moves show the chunk, clicks outline it."""
        enabled = bool(enabled)
        if enabled == self.cursor_locator.enabled:
            return
        self.cursor_locator.set_enabled(enabled)
        if self.cursor_check.isChecked() != enabled:
            self.cursor_check.setChecked(enabled)

    def is_listening(self) -> bool:
        """True while the panel's mouse callbacks are on the viewer (cursor mode on, panel not removed)."""
        return self.cursor_locator.is_listening()

    def locate_position(self, position: Sequence[float]) -> Located | None:
        """The chunk under a viewer world position, at the level the layer is showing (``None`` outside)."""
        return self.cursor_locator.locate_position(position)

    def _on_hover(self, located: Located | None) -> None:
        restyle(self.locate_label, "")
        self.locate_label.setText("under cursor: " + located.describe() if located is not None else "")

    # -- shard map -------------------------------------------------------------------------------------------
    def show_shard_map(self, scale: str | None = None, by: ShardMapBy | None = None) -> None:
        """Compute the shard map of ``scale`` in a worker and add it as a Labels layer (:attr:`shard_map_layer`)."""
        tree = self._require_tree()
        scale = scale if scale is not None else self._chosen_scale()
        chosen: ShardMapBy = by if by is not None else ("minishard" if self.map_by_combo.currentText() == "minishard"
                                                       else "shard")
        self.status_label.setText(f"computing the shard map of {scale} ({chosen}) …")
        self._start(lambda: tree.shard_map(scale, chosen), self._on_shard_map, button=self.map_button)

    def _on_shard_map(self, smap: ShardMap) -> None:
        name = shard_map_name(smap)
        try:
            layer = add_shard_map(self.viewer, self._grid(), self.layer, smap, self.shard_map_layer)
        except ArgumentError as exc:
            self._error(str(exc))
            return
        self.shard_map_layer = layer
        if self.outline_layer is not None and self.outline_layer in self.viewer.layers:
            self.viewer.layers.move(self.viewer.layers.index(self.outline_layer), len(self.viewer.layers))
        self.status_label.setText(f"{name}: {int(np.unique(smap.values).size)} of {smap.num_values} "
                                  f"{'shards' if smap.by == 'shard' else 'minishards'} used by "
                                  f"{smap.values.size} chunks")

    # -- validate ----------------------------------------------------------------------------------------------
    def validate(self, scale: str | None = None) -> None:
        """Validate ``scale`` (``None``: all) in a worker; problems fill :attr:`problems` and the list."""
        tree = self._require_tree()
        self.problems.clear()
        self.problem_list.clear()
        self._cancel.clear()
        self.progress_bar.setRange(0, 0)
        # napari's progress bar, mirrored in the panel's; a report after Stop ends the worker
        report = GuiProgress(f"validate {scale or 'all scales'}", stop=self._cancel, on_step=self._on_progress)

        def run() -> int:
            count = 0
            for problem in tree.validate(scale, report):
                if self._cancel.is_set():
                    raise Stopped
                self._problem.emit(problem)
                count += 1
            return count

        self.status_label.setText(f"validating {scale or 'all scales'} …")
        self._start(run, self._on_validated, button=self.validate_button, stoppable=True, progress=report)

    def _on_progress(self, done: int, total: int, what: str) -> None:
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(min(done, max(total, 1)))
        self.status_label.setText(f"validating: {what}")

    def _on_problem(self, problem: Problem) -> None:
        self.problems.append(problem)
        item = QListWidgetItem(str(problem))
        item.setToolTip(str(problem))
        self.problem_list.addItem(item)

    def _on_validated(self, count: int) -> None:
        maximum = max(self.progress_bar.maximum(), 1)
        self.progress_bar.setRange(0, maximum)
        self.progress_bar.setValue(maximum)
        restyle(self.status_label, "")
        self.status_label.setText("no problems found" if count == 0 else f"{count} problem(s): click one to go there")

    def _on_problem_clicked(self, item: QListWidgetItem) -> None:
        self.select_problem(self.problem_list.row(item))

    def select_problem(self, row: int) -> Located | None:
        """Go to the chunk (or shard) problem ``row`` is about; ``None`` when it names no place."""
        if not 0 <= row < len(self.problems) or self.tree is None:
            return None
        self.problem_list.setCurrentRow(row)
        try:
            located = self.tree.locate_problem(self.problems[row])
        except ShardscopeError as exc:
            self._error(str(exc), self.locate_label)
            return None
        if located is None:
            self.locate_label.setText(f"{self.problems[row].key}: not a chunk of this dataset")
            return None
        self.show_located(located)
        return located

    def stop(self) -> None:
        """Ask running workers to stop at their next step."""
        self._cancel.set()

    # -- workers --------------------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Whether a worker (validate, shard map) is still running."""
        return bool(self._workers)

    def _start(self, func: Any, on_done: Any, *, button: QPushButton, stoppable: bool = False,
               progress: GuiProgress | None = None) -> None:
        """Run ``func`` in a worker (the shared :func:`start_worker`) with ``button`` disabled meanwhile.

        Errors come to :meth:`_on_worker_error` (ours shown in the panel, others re-raised to
        napari's handler); ``progress`` (napari's bar) is closed when the worker ends either way.
        """
        button.setEnabled(False)
        if stoppable:
            self.stop_button.setEnabled(True)

        def finished() -> None:
            button.setEnabled(True)
            if stoppable:
                self.stop_button.setEnabled(False)
            if progress is not None:
                progress.close()

        start_worker(func, on_done, self._on_worker_error, running=self._workers, finished=finished)

    def _on_worker_error(self, exc: BaseException) -> None:
        self.progress_bar.setRange(0, 1)
        if isinstance(exc, Stopped):
            restyle(self.status_label, "")
            self.status_label.setText(f"stopped ({len(self.problems)} problem(s) so far)")
            return
        self._error(str(exc))
        if not isinstance(exc, ShardscopeError):
            raise exc

    def _error(self, message: str, label: QLabel | None = None) -> None:
        self.last_error = message
        target = label if label is not None else self.status_label
        restyle(target, "color: #e06c75")
        target.setText(message)

    def _teardown(self) -> None:
        """The panel left the viewer: remove its mouse callbacks and layer-list hooks, stop workers."""
        self.set_cursor_mode(False)
        self.stop()
        self.viewer.layers.events.inserted.disconnect(self._refresh_layers)
        self.viewer.layers.events.removed.disconnect(self._refresh_layers)
