"""The "Review branch…" panel: a branch's changed bodies like a pull request, conflicts resolved per body.

A view of :class:`~napari_shardscope.core.proofreading.review.BranchReviewer` over the viewer's
controller: the bodies the branch changed against the checked-out committed version (before and
after voxel counts; conflicts — bodies both sides edited — first and highlighted, with a Keep box
of mine / theirs / both), the two edit histories of the selected row in plain words, a Before/After
toggle (a layer of the branch head over the body layer), Go to (centre the view on the body), and
Accept (the merge version, checked out) followed by Commit; ``shardscope push`` sends it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from qtpy.QtCore import Qt
from qtpy.QtGui import QBrush, QColor
from qtpy.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.proofreading import ControllerState
from napari_shardscope.core.proofreading.review import KEEPS, BranchReviewer, Keep, ReviewRow
from napari_shardscope.widgets.canvas import canvas_for
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.placement import add_on_grid
from napari_shardscope.widgets.session import ViewerSession, keep_read_only, session_for
from napari_shardscope.widgets.styling import restyle

if TYPE_CHECKING:
    import napari

UNCHOSEN = "keep…"
CONFLICT_COLOUR = QColor("#8b3a3a")
KEY_ROLE = Qt.ItemDataRole.UserRole
AFTER_LAYER = "review: after"


class ReviewPanel(QWidget):
    """Dock widget: review a branch against the checked-out version, choose per conflict, accept, commit."""

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = napari_viewer
        self.session: ViewerSession = session_for(napari_viewer)
        self.controller = self.session.controller
        self.reviewer = BranchReviewer(self.controller)
        self.after_layer: Any = None
        self._keeps: dict[str, QComboBox] = {}
        self._build()
        self._unsubscribe: Callable[[], None] | None = self.controller.subscribe(self._render)
        self.teardown = on_removed(self, self._teardown)
        self._render(self.controller.state)

    def _teardown(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _build(self) -> None:
        c = self.controller
        vbox = QVBoxLayout(self)
        row = QHBoxLayout()
        self.branch_combo = QComboBox()
        self.branch_combo.setEditable(True)
        self.branch_combo.setToolTip("the branch to review (e.g. origin/alice after a fetch)")
        self.review_button = QPushButton("Review")
        self.review_button.setToolTip("list the bodies the branch changed against the checked-out committed version")
        self.review_button.clicked.connect(lambda: self.open(self.branch_combo.currentText()))
        row.addWidget(self.branch_combo, 1)
        row.addWidget(self.review_button)
        vbox.addLayout(row)

        self.tree = QTreeWidget()
        self.tree.setColumnCount(4)
        self.tree.setHeaderLabels(["Body", "Before", "After", "Keep"])
        self.tree.setRootIsDecorated(False)
        self.tree.setMinimumHeight(140)
        self.tree.currentItemChanged.connect(lambda item, _prev: self._show_history(item))
        self.tree.itemDoubleClicked.connect(lambda item, _col: c.attempt(self.go_to, item.data(0, KEY_ROLE)))
        vbox.addWidget(self.tree, 2)

        self.history_label = QTextBrowser()  # both edit histories of the selected row, in plain words
        self.history_label.setMinimumHeight(70)
        vbox.addWidget(self.history_label, 1)

        nav = QHBoxLayout()
        self.go_button = QPushButton("Go to")
        self.go_button.setToolTip("centre the view on the selected body (double-click a row does too)")
        self.go_button.clicked.connect(lambda: c.attempt(self.go_to, self._current_key()))
        self.toggle_button = QPushButton("Show after")
        self.toggle_button.setCheckable(True)
        self.toggle_button.setToolTip("toggle between the checked-out version (before) and the branch (after)")
        self.toggle_button.toggled.connect(lambda on: c.attempt(self.show_after, on))
        self.accept_button = QPushButton("Accept")
        self.accept_button.setToolTip("write the merge version with the side kept for each conflict (then Commit)")
        self.accept_button.clicked.connect(lambda: c.attempt(self.accept))
        nav.addWidget(self.go_button)
        nav.addWidget(self.toggle_button)
        nav.addWidget(self.accept_button)
        vbox.addLayout(nav)

        crow = QHBoxLayout()
        self.message_edit = QLineEdit()
        self.message_edit.setPlaceholderText("commit message for the merge version")
        self.commit_button = QPushButton("Commit")
        self.commit_button.setToolTip("commit the merge version; `shardscope push` then sends it")
        self.commit_button.clicked.connect(self._commit_clicked)
        crow.addWidget(self.message_edit, 1)
        crow.addWidget(self.commit_button)
        vbox.addLayout(crow)

        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        vbox.addWidget(self.status_label)

    # -- actions (what a user's clicks call; a notebook may call them too) ------------------------------
    def open(self, branch: str) -> None:
        """Review ``branch``: fill the list (conflicts first, highlighted)."""
        if self.controller.attempt(self.reviewer.open, branch) is not None:
            self.show_after(False)
            self._fill()

    def keep(self, key: str | int, keep: Keep | None) -> None:
        """Choose the side of conflict ``key`` as its Keep box does."""
        self.controller.attempt(self.reviewer.keep, key, keep)

    def go_to(self, key: str | int) -> None:
        """Centre and zoom the view on a body of the review, as the Navigate panel's go-to does."""
        target = self.controller.attempt(self.reviewer.target, key)
        if target is not None:
            canvas_for(self.viewer).move_to(target)

    def show_after(self, on: bool) -> None:
        """Show the branch head (after) over the body layer, or hide it (before)."""
        if on:
            v = self.reviewer.after()
            arrays = v.body_arrays()
            g = v.scales[0]
            data = arrays if len(arrays) > 1 else arrays[0]
            grid = self.session.grid()
            if grid is None or tuple(grid.shape) != tuple(g.shape):
                raise ArgumentError("open the repository's body layer first: the branch is shown over it")
            if self.after_layer is None or self.after_layer not in self.viewer.layers \
                    or not grid.holds(self.after_layer):
                self.after_layer = add_on_grid(self.viewer, grid, "labels", data, name=AFTER_LAYER,
                                               multiscale=len(arrays) > 1)  # on the body layer's grid: its dims
                keep_read_only(self.after_layer)
            else:
                self.after_layer.data = data
            self.after_layer.visible = True
            if self.session.body_layer is not None and self.session.body_layer in self.viewer.layers:
                self.viewer.layers.selection.active = self.session.body_layer
        elif self.after_layer is not None and self.after_layer in self.viewer.layers:
            self.after_layer.visible = False
        self.toggle_button.blockSignals(True)
        self.toggle_button.setChecked(on)
        self.toggle_button.setText("Show before" if on else "Show after")
        self.toggle_button.blockSignals(False)

    def accept(self) -> None:
        self.reviewer.accept()
        self.show_after(False)
        self._fill()

    def _commit_clicked(self) -> None:
        text = self.message_edit.text().strip() or f"merged {self.branch_combo.currentText()} after review"
        if self.controller.attempt(self.controller.commit, text) is not None:
            self.message_edit.clear()

    # -- what the list shows (the tests read these) -----------------------------------------------------
    def rows(self) -> list[ReviewRow]:
        return self.reviewer.rows()

    def item(self, key: str) -> QTreeWidgetItem:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None and item.data(0, KEY_ROLE) == key:
                return item
        raise KeyError(key)

    def keep_box(self, key: str) -> QComboBox:
        return self._keeps[key]

    def is_highlighted(self, key: str) -> bool:
        return bool(self.item(key).background(0).color() == CONFLICT_COLOUR)

    def _current_key(self) -> str:
        item = self.tree.currentItem()
        return "" if item is None else str(item.data(0, KEY_ROLE))

    # -- rendering --------------------------------------------------------------------------------------
    def _fill(self) -> None:
        self.tree.clear()
        self._keeps = {}
        c = self.controller
        for r in self.reviewer.rows():
            b = r.body
            before = "" if b is None else ("absent" if b.before is None else str(b.before))
            after = "" if b is None else ("absent" if b.after is None else str(b.after))
            item = QTreeWidgetItem([("⚠ " if r.conflict else "") + r.title, before, after, ""])
            item.setData(0, KEY_ROLE, r.key)
            if r.conflict:
                for col in range(4):
                    item.setBackground(col, QBrush(CONFLICT_COLOUR))
                item.setToolTip(0, "both sides edited this: keep mine, theirs or both")
            self.tree.addTopLevelItem(item)
            if r.conflict:
                combo = QComboBox()
                combo.addItems([UNCHOSEN, *KEEPS])
                combo.setCurrentText(r.keep or UNCHOSEN)
                combo.currentTextChanged.connect(
                    lambda text, key=r.key: c.attempt(self.reviewer.keep, key, None if text == UNCHOSEN else text))
                self.tree.setItemWidget(item, 3, combo)
                self._keeps[r.key] = combo
        for col in range(3):
            self.tree.resizeColumnToContents(col)
        if self.tree.topLevelItemCount():
            self.tree.setCurrentItem(self.tree.topLevelItem(0))
        else:
            self.history_label.setText("")

    def _show_history(self, item: QTreeWidgetItem | None) -> None:
        if item is None:
            self.history_label.setText("")
            return
        key = str(item.data(0, KEY_ROLE))
        row = next((r for r in self.reviewer.rows() if r.key == key), None)
        if row is None or row.body is None:
            self.history_label.setText(f"{key.replace(':', ' ')}: split on both sides")
            return
        b = row.body
        lines = [f"<b>body {b.body}</b>" + (" — <b>conflict</b>: both sides edited it" if row.conflict else "")]
        lines += [f"theirs (branch): {e}" for e in b.branch_edits]
        lines += [f"mine (checked out): {e}" for e in b.target_edits]
        self.history_label.setHtml("<br>".join(lines))

    def _render(self, state: ControllerState) -> None:
        names = [self.branch_combo.itemText(i) for i in range(self.branch_combo.count())]
        if names != list(state.merge_candidates):
            text = self.branch_combo.currentText()
            self.branch_combo.blockSignals(True)
            self.branch_combo.clear()
            self.branch_combo.addItems(list(state.merge_candidates))
            if text:
                self.branch_combo.setCurrentText(text)
            self.branch_combo.blockSignals(False)
        plan = state.merge_plan
        for key, combo in self._keeps.items():
            side = None if plan is None else plan.choices.get(key)
            text = {"ours": "mine", "theirs": "theirs", "both": "both"}.get(side or "", UNCHOSEN)
            if combo.currentText() != text:
                combo.blockSignals(True)
                combo.setCurrentText(text)
                combo.blockSignals(False)
        reviewing = self.reviewer.review is not None
        for button in (self.go_button, self.toggle_button, self.accept_button):
            button.setEnabled(reviewing)
        self.review_button.setEnabled(state.actions["plan_merge"].enabled)
        self.review_button.setToolTip(state.actions["plan_merge"].reason or "list the bodies the branch changed")
        self.commit_button.setEnabled(state.actions["commit"].enabled)
        restyle(self.status_label, "color: #e06c75" if state.status.level == "error" else "")
        self.status_label.setText(state.status.render())
