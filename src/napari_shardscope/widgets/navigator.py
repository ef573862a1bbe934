"""The Navigate panel: go to a body, a supervoxel or a voxel; walk a to-do list; see what is under the cursor.

A thin view: going somewhere is ``controller.go_to(text)`` (core/proofreading/navigation.py picks
the box and the plane from the label index), the to-do list is ``controller.todo`` (a
:class:`~napari_shardscope.core.proofreading.todo.Worklist` whose statuses are kept in the
repository), the camera move, the selection overlays, the dim toggle and the hover text are the
viewer's :class:`~napari_shardscope.widgets.canvas.CanvasBinding`. A notebook does the same with
``c.go_to("body 12")``, ``c.todo.load("assigned.csv")``, ``c.todo.next()``, ``c.todo.mark("done")``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qtpy.QtCore import Qt
from qtpy.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from napari_shardscope.core.proofreading.highlight import HoverInfo
from napari_shardscope.core.proofreading.todo import ItemStatus, WorklistState
from napari_shardscope.widgets.canvas import canvas_for
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.proofreading import KEYBINDINGS
from napari_shardscope.widgets.scrolling import scroll_body
from napari_shardscope.widgets.session import session_for

if TYPE_CHECKING:
    import napari

STATUS_MARKS = {"open": "○", "done": "✓", "skipped": "↷"}

HELP = """<b>Navigate</b><br>
<b>Go to</b>: a body id (<i>12</i>), a supervoxel (<i>sv 345</i>) or a voxel as z, y, x (<i>30, 140, 88</i>);
the view centres on it, zoomed to its extent, and the body is selected.<br>
<b>To-do list</b>: load a CSV (a column of body ids, or columns body / supervoxel / z, y, x / note) or a
JSON (a list of ids or objects, or a Neu3 task list); Next / Previous go to the items; Done, Skip and the
note are saved in the repository at the checked-out version (they survive a restart).<br>
<b>Dim the others</b>: fade every body but the selected ones.<br>Keys: """ + "; ".join(
    f"<b>{k}</b> {what}" for k, _, what in KEYBINDINGS)


class NavigatorPanel(QWidget):
    """Dock widget: go to, to-do list, dim toggle, hover text."""

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = napari_viewer
        self.session = session_for(napari_viewer)
        self.controller = c = self.session.controller
        self.canvas = canvas_for(napari_viewer)
        self._build()
        self.setToolTip(HELP)
        self._unsubscribe: list[Callable[[], Any]] = [c.todo.subscribe(self._render_todo)]
        self.canvas.hovered.connect(self._render_hover)
        self.canvas.dimmed.connect(self._render_dim)
        self.teardown = on_removed(self, self._teardown)
        self._render_todo(c.todo.state)

    # -- building -------------------------------------------------------------------------------------
    def _build(self) -> None:
        c = self.controller
        vbox = QVBoxLayout(scroll_body(self))  # scrolls in a short dock instead of overlapping
        go = QGroupBox("Go to")
        gl = QVBoxLayout(go)
        row = QHBoxLayout()
        self.goto_edit = QLineEdit()
        self.goto_edit.setPlaceholderText("body id, sv ID, or z, y, x")
        self.goto_edit.setToolTip("a body id (12), a supervoxel (sv 345) or a scale-0 voxel as z, y, x")
        self.goto_edit.returnPressed.connect(self._go_clicked)
        self.goto_button = QPushButton("Go")
        self.goto_button.clicked.connect(self._go_clicked)
        row.addWidget(self.goto_edit, stretch=1)
        row.addWidget(self.goto_button)
        gl.addLayout(row)
        self.dim_check = QCheckBox("dim the others (Shift-D)")
        self.dim_check.setToolTip("fade every body but the selected ones")
        self.dim_check.toggled.connect(self.canvas.set_dim_others)
        gl.addWidget(self.dim_check)
        self.hover_label = QLabel("under the cursor: —")
        self.hover_label.setWordWrap(True)
        self.hover_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.hover_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        gl.addWidget(self.hover_label)
        vbox.addWidget(go)

        todo = QGroupBox("To-do list")
        tl = QVBoxLayout(todo)
        row = QHBoxLayout()
        self.list_combo = QComboBox()
        self.list_combo.setToolTip("the to-do lists kept in this repository")
        self.list_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.list_combo.activated.connect(self._list_chosen)
        self.load_button = QPushButton("Load…")
        self.load_button.setToolTip("read a CSV or JSON of body ids, supervoxels or points into the repository")
        self.load_button.clicked.connect(self._load_clicked)
        row.addWidget(self.list_combo, stretch=1)
        row.addWidget(self.load_button)
        tl.addLayout(row)
        self.progress_label = QLabel("no list")
        tl.addWidget(self.progress_label)
        self.items_list = QListWidget()
        self.items_list.setMinimumHeight(120)
        self.items_list.itemActivated.connect(lambda item: c.attempt(c.todo.go, self.items_list.row(item)))
        self.items_list.itemClicked.connect(lambda item: c.attempt(c.todo.go, self.items_list.row(item)))
        tl.addWidget(self.items_list, stretch=1)
        r1 = QHBoxLayout()
        self.prev_button = QPushButton("◀ Previous")
        self.prev_button.setToolTip("the item before (Shift-B)")
        self.prev_button.clicked.connect(lambda: c.attempt(c.todo.previous))
        self.next_button = QPushButton("Next ▶")
        self.next_button.setToolTip("the next open item (Shift-N)")
        self.next_button.clicked.connect(lambda: c.attempt(c.todo.next))
        r1.addWidget(self.prev_button)
        r1.addWidget(self.next_button)
        tl.addLayout(r1)
        r2 = QHBoxLayout()
        self.done_button = QPushButton("Done")
        self.done_button.setToolTip("mark the current item done (saved in the repository), then go to the next")
        self.done_button.clicked.connect(lambda: c.attempt(self.mark_and_next, "done"))
        self.skip_button = QPushButton("Skip")
        self.skip_button.setToolTip("mark the current item skipped, then go to the next")
        self.skip_button.clicked.connect(lambda: c.attempt(self.mark_and_next, "skipped"))
        r2.addWidget(self.done_button)
        r2.addWidget(self.skip_button)
        tl.addLayout(r2)
        self.note_edit = QLineEdit()
        self.note_edit.setPlaceholderText("note on the current item (Enter saves)")
        self.note_edit.returnPressed.connect(lambda: c.attempt(c.todo.set_note, self.note_edit.text()))
        tl.addWidget(self.note_edit)
        vbox.addWidget(todo, stretch=1)

        self.keys_label = QLabel("Keys: " + ", ".join(f"{k} {name.replace('_', ' ')}" for k, name, _ in KEYBINDINGS))
        self.keys_label.setWordWrap(True)
        self.keys_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.keys_label.setToolTip(HELP)
        vbox.addWidget(self.keys_label)

    # -- actions ----------------------------------------------------------------------------------------
    def go_to(self, text: str) -> Any:
        """Go to what ``text`` names (as typed in the box)."""
        self.goto_edit.setText(text)
        return self.controller.go_to(text)

    def _go_clicked(self) -> None:
        self.controller.attempt(self.controller.go_to, self.goto_edit.text())

    def load(self, path: str | Path, name: str | None = None) -> str:
        """Read a to-do file into the repository and open it."""
        return self.controller.todo.load(path, name)

    def _load_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load a to-do list", str(Path.home()),
                                              "To-do lists (*.csv *.json *.txt);;All files (*)")
        if path:
            self.controller.attempt(self.load, path)

    def _list_chosen(self, index: int) -> None:
        name = self.list_combo.itemText(index)
        if name and name != self.controller.todo.name:
            self.controller.attempt(self.controller.todo.open, name)

    def mark_and_next(self, status: ItemStatus) -> None:
        """Done / Skip: save the status (and the note typed) of the current item, then go to the next open one."""
        todo = self.controller.todo
        note = self.note_edit.text()
        current = todo.current
        todo.mark(status, note if current is None or note != current.note else None)
        if any(e.status == "open" for e in todo.entries[todo.state.current + 1:]):
            todo.next()

    # -- rendering -------------------------------------------------------------------------------------
    def _render_todo(self, state: WorklistState) -> None:
        self.list_combo.blockSignals(True)
        self.list_combo.clear()
        self.list_combo.addItems(list(state.lists))
        if state.name is not None:
            self.list_combo.setCurrentText(state.name)
        self.list_combo.blockSignals(False)
        self.items_list.clear()
        for e in state.entries:
            text = f"{STATUS_MARKS[e.status]} {e.index + 1}. {e.item.describe()}"
            if e.note:
                text += f" — note: {e.note}"
            item = QListWidgetItem(text)
            item.setToolTip(f"{e.status}" + (f" by {e.user}" if e.user else "") + (f": {e.note}" if e.note else ""))
            self.items_list.addItem(item)
        if 0 <= state.current < len(state.entries):
            self.items_list.setCurrentRow(state.current)
            self.items_list.scrollToItem(self.items_list.item(state.current))
            entry = state.entries[state.current]
            self.note_edit.setText(entry.note)
        else:
            self.note_edit.clear()
        n = len(state.entries)
        self.progress_label.setText(f"{state.name}: {state.done} of {n} done or skipped" if state.name
                                    else "no list: Load… a CSV or JSON of body ids or points")
        has = bool(state.name and n)
        for b in (self.prev_button, self.next_button, self.done_button, self.skip_button):
            b.setEnabled(has)

    def _render_hover(self, info: HoverInfo | None) -> None:
        self.hover_label.setText("under the cursor: " + (info.text() if info is not None else "—"))

    def _render_dim(self, on: bool) -> None:
        if self.dim_check.isChecked() != on:
            self.dim_check.blockSignals(True)
            self.dim_check.setChecked(on)
            self.dim_check.blockSignals(False)

    def _teardown(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        self.canvas.hovered.disconnect(self._render_hover)
        self.canvas.dimmed.disconnect(self._render_dim)
