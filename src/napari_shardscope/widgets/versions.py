"""The Versions panel: the DAG of versions, commit, new branch, checkout, what changed, merge, export.

A view of the viewer's :class:`~napari_shardscope.core.proofreading.ProofreadingController`: it
draws the version list, the conflicts of a checked branch merge with the side chosen for each, the
last diff, which actions are possible (and why not) and the last message, and forwards clicks to
the controller (``c.checkout``, ``c.commit``, ``c.branch``, ``c.diff``, ``c.plan_branch_merge``,
``c.choose``, ``c.merge_branch``, ``c.export_job`` — calls a notebook makes the same way). The DAG is
a list, newest first, with each version's parents, so merges and branch points read like
``git log --graph`` without drawing: short UUID, branch, lock state, message, own edit count, time.
The checked-out version is marked and bold; a checkout switches the layers (the viewer binding does
that, for both panels). Only the newest versions are listed (``session.VERSION_ROWS``, plus the
checked-out one), so the panel stays quick with a history of 10⁵ versions; a line under the list
says so. Only the export's worker thread and the layer it opens need napari here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from qtpy.QtCore import Qt
from qtpy.QtGui import QFont
from qtpy.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from napari_shardscope.core.export.precomputed import ExportReport
from napari_shardscope.core.proofreading import ControllerState, MergePlanState
from napari_shardscope.core.proofreading.actions import ACTION_TABLE
from napari_shardscope.core.proofreading.session import ExportFormat, LabelKind
from napari_shardscope.core.proofreading.wording import (
    SIDE_WORDS,
    conflict_body,
    describe_conflicts,
    describe_undo,
    edit_phrase,
    id_list,
)
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.scrolling import scroll_body
from napari_shardscope.widgets.session import ViewerSession, session_for
from napari_shardscope.widgets.styling import restyle
from napari_shardscope.widgets.workers import start_job

if TYPE_CHECKING:
    import napari

UNCHOSEN = "choose…"
#: The Keep box of a conflict: what it shows → the side the controller records.
KEEP_CHOICES = {words: side for side, words in SIDE_WORDS.items()}
#: Columns of the conflict list holding the Keep box and the Show button.
KEEP_COLUMN, SHOW_COLUMN = 1, 2
#: What the Export button adds to the action's words (the action itself: ``ACTION_TABLE["export"]``).
EXPORT_TIP = (f"{ACTION_TABLE['export'].text}, every scale, in a worker with napari's progress bar; "
              "the result opens as a hidden layer")
COLUMNS = ("Version", "Branch", "State", "Message", "Edits", "Parents", "Created")
UUID_ROLE = Qt.ItemDataRole.UserRole
#: Tooltips of enabled buttons where this panel does more than the action's words say (the others: the
#: action's row in ``ACTION_TABLE``; a disabled button shows the controller's reason).
_PANEL_TIPS = {
    "checkout": f"{ACTION_TABLE['checkout'].text} in the layers (double-click a row does too)",
    "export": EXPORT_TIP,
}


class VersionsPanel(QWidget):
    """Dock widget: the versions of the controller's repository and what to do with them."""

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = napari_viewer
        self.session: ViewerSession = session_for(napari_viewer)
        self.controller = self.session.controller
        self._rows_revision: int | None = None
        self._plan_shown: MergePlanState | None = None
        self._diff_shown: Any = None
        self._choices: dict[str, QComboBox] = {}  # conflict key -> its combo box in the conflict list
        self._build()
        self._unsubscribe: Callable[[], None] | None = self.controller.subscribe(self._render)
        self.teardown = on_removed(self, self._teardown)
        self.refresh()

    def _teardown(self) -> None:
        """The panel left the viewer: stop following the controller."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _build(self) -> None:
        c = self.controller
        vbox = QVBoxLayout(scroll_body(self))  # scrolls in a short dock instead of overlapping
        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setRootIsDecorated(False)
        self.tree.setMinimumHeight(150)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.itemDoubleClicked.connect(lambda item, _col: c.attempt(c.checkout, item.data(0, UUID_ROLE)))
        self.tree.itemSelectionChanged.connect(
            lambda: c.attempt(c.select_versions, *[str(i.data(0, UUID_ROLE)) for i in self.tree.selectedItems()]))
        vbox.addWidget(self.tree, 2)
        self.rows_label = QLabel("")  # says so when the list shows only the newest versions of a long history
        self.rows_label.setWordWrap(True)
        self.rows_label.setVisible(False)
        vbox.addWidget(self.rows_label)

        row = QHBoxLayout()
        self.checkout_button = QPushButton("Checkout")
        self.checkout_button.clicked.connect(lambda: c.attempt(c.checkout))
        self.diff_button = QPushButton("Diff")
        self.diff_button.clicked.connect(lambda: c.attempt(c.diff))
        row.addWidget(self.checkout_button)
        row.addWidget(self.diff_button)
        vbox.addLayout(row)

        self.message_edit, self.commit_button = _text_and_button(
            vbox, "Commit the checked-out version", "commit message", "Commit", self._commit_clicked)
        self.continue_check = QCheckBox("then go on editing (a new version after it, same branch)")
        self.continue_check.setChecked(True)
        self.continue_check.setToolTip("commit locks the version; with this, a fresh open version follows it at once")
        vbox.addWidget(self.continue_check)
        self.branch_edit, self.branch_button = _text_and_button(
            vbox, "New version after the selected committed version", "new branch name (empty: same branch)",
            "New version", self._branch_clicked)

        merge_box = QGroupBox("Merge a branch into the checked-out (committed) version")
        mv = QVBoxLayout(merge_box)
        mrow = QHBoxLayout()
        self.theirs_combo = QComboBox()
        self.theirs_combo.setToolTip("their branch (its head is merged)")
        self.theirs_combo.currentTextChanged.connect(lambda text: c.attempt(c.set_merge_theirs, text))
        self.plan_button = QPushButton("Check")
        self.plan_button.clicked.connect(lambda: c.attempt(c.plan_branch_merge, self.theirs_combo.currentText()))
        self.merge_button = QPushButton("Merge")
        self.merge_button.clicked.connect(lambda: c.attempt(self.merge_branch, self.theirs_combo.currentText()))
        mrow.addWidget(self.theirs_combo, 1)
        mrow.addWidget(self.plan_button)
        mrow.addWidget(self.merge_button)
        mv.addLayout(mrow)
        self.conflict_tree = QTreeWidget()
        self.conflict_tree.setColumnCount(5)
        self.conflict_tree.setHeaderLabels(["Conflict", "Keep", "", "Mine", "Theirs"])  # the choices first: visible
        self.conflict_tree.setMaximumHeight(160)
        self.conflict_tree.setMinimumHeight(64)  # a row stays visible however crowded the dock
        self.conflict_tree.itemDoubleClicked.connect(
            lambda item, _col: self.show_conflict(str(item.data(0, UUID_ROLE))))
        mv.addWidget(self.conflict_tree)
        self.conflict_label = QLabel("")  # the current conflict in a sentence (the columns are narrow in a dock)
        self.conflict_label.setWordWrap(True)
        mv.addWidget(self.conflict_label)
        self.conflict_tree.currentItemChanged.connect(lambda item, _old: self._say_conflict(item))
        vbox.addWidget(merge_box)

        export_box = QGroupBox("Export the selected committed version to a sharded volume")
        erow = QHBoxLayout(export_box)
        self.export_dest_edit = QLineEdit()
        self.export_dest_edit.setPlaceholderText("destination directory (empty: next to the repository)")
        self.export_format_combo = QComboBox()
        self.export_format_combo.addItems(["precomputed", "zarr3"])
        self.export_format_combo.setToolTip("sharded Neuroglancer precomputed, or OME-Zarr 0.5 of sharded Zarr v3")
        self.export_labels_combo = QComboBox()
        self.export_labels_combo.addItems(["bodies", "supervoxels"])
        self.export_labels_combo.setToolTip("body ids at the version, or supervoxel ids (the base patched by splits)")
        self.export_button = QPushButton("Export")
        self.export_button.clicked.connect(lambda: c.attempt(
            self.export, self.export_dest_edit.text().strip() or None, fmt=self.export_format_combo.currentText(),
            labels=self.export_labels_combo.currentText()))
        erow.addWidget(self.export_dest_edit, 1)
        erow.addWidget(self.export_format_combo)
        erow.addWidget(self.export_labels_combo)
        erow.addWidget(self.export_button)
        vbox.addWidget(export_box)

        self.diff_tree = QTreeWidget()
        self.diff_tree.setColumnCount(4)
        self.diff_tree.setHeaderLabels(["Only in", "Edit", "Bodies", "By"])
        self.diff_label = QLabel("")
        self.diff_label.setWordWrap(True)
        vbox.addWidget(self.diff_label)
        vbox.addWidget(self.diff_tree, 1)

        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        vbox.addWidget(self.status_label)

    # -- forwarding -------------------------------------------------------------------------------------
    def _commit_clicked(self) -> None:
        c = self.controller
        commit = c.commit_and_continue if self.continue_check.isChecked() else c.commit
        if c.attempt(commit, self.message_edit.text()) is not None:
            self.message_edit.clear()

    def _branch_clicked(self) -> None:
        if self.controller.attempt(self.controller.branch, self.branch_edit.text().strip() or None) is not None:
            self.branch_edit.clear()

    def select(self, *refs: str) -> None:
        """Select the rows of ``refs`` (as a user's clicks would): Checkout, Diff, Branch and Export act on them."""
        self.controller.select_versions(*refs)

    def versions(self) -> list[str]:
        """UUIDs in the list, top (newest) first."""
        items = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [str(item.data(0, UUID_ROLE)) for item in items if item is not None]

    def merge_branch(self, theirs: str | None = None) -> Any:
        """Merge branch ``theirs`` with the sides chosen, in a worker with napari's progress; returns the worker."""
        return start_job(self.controller.merge_branch_job(theirs or None))

    # -- exporting --------------------------------------------------------------------------------------
    @property
    def exporting(self) -> bool:
        """True while an export runs in its worker thread."""
        return self.controller.exporting

    def export(self, dest: str | None = None, *, ref: str | None = None, fmt: ExportFormat = "precomputed",
               labels: LabelKind = "bodies", show: bool = True) -> Any:
        """Export version ``ref`` (default: the selected one, else the checked-out one) in a worker thread.

        The controller's export job (one Dask task per shard on the threaded scheduler), run off the
        GUI thread with napari's progress bar. Only committed versions: an open one still changes,
        and an export should name a version it reproduces. With ``show`` the result is opened
        (hidden) as a layer when done. Returns the worker.
        """
        c = self.controller
        target = ref or c.target_version()
        name = f"export {c.session.resolve(target).short} {labels}" if target else "export"

        def open_hidden(report: ExportReport) -> str:
            """Open the result as a hidden layer that leaves the active layer (the body layer) active."""
            active = self.viewer.layers.selection.active
            layers = self.viewer.open(report.dest, plugin="napari-shardscope", name=name)
            for layer in layers:
                layer.visible = False
            if active is not None and active in self.viewer.layers:
                self.viewer.layers.selection.active = active
            return f"added as layer {layers[0].name!r} (hidden)" if layers else ""

        return start_job(c.export_job(dest, ref=ref, fmt=fmt, labels=labels, after=open_hidden if show else None))

    # -- rendering --------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the DAG and redraw everything."""
        self._rows_revision = None
        self._render(self.controller.state)

    def _render(self, state: ControllerState) -> None:
        if state.revision != self._rows_revision:
            self._rows_revision = state.revision
            self._fill_tree()
        self._select_rows(state.versions_selected)
        self._fill_theirs(state)
        self._fill_conflicts(state.merge_plan)
        self._fill_diff(state)
        commit = "commit_continue" if self.continue_check.isChecked() else "commit"
        for name, button in (("checkout", self.checkout_button), ("diff", self.diff_button),
                             (commit, self.commit_button), ("branch", self.branch_button),
                             ("plan_merge", self.plan_button), ("merge_branch", self.merge_button),
                             ("export", self.export_button)):
            action = state.actions[name]
            button.setEnabled(action.enabled)
            button.setToolTip(action.reason or _PANEL_TIPS.get(name, ACTION_TABLE[name].tip))
        restyle(self.status_label, "color: #e06c75" if state.status.level == "error" else "")
        self.status_label.setText(state.status.render())

    def _fill_tree(self) -> None:
        self.tree.blockSignals(True)
        self.tree.clear()
        bold = QFont()
        bold.setBold(True)
        rows = self.controller.session.version_rows()
        for row in rows:
            created = datetime.fromtimestamp(row.created).strftime("%Y-%m-%d %H:%M")
            item = QTreeWidgetItem([
                f"{'● ' if row.checked_out else ''}{row.short}", row.branch, "committed" if row.locked else "open",
                row.message, str(row.edits), ", ".join(row.parents), created,
            ])
            item.setData(0, UUID_ROLE, row.uuid)
            item.setToolTip(0, row.uuid)
            item.setToolTip(3, row.message)
            if row.checked_out:
                for col in range(len(COLUMNS)):
                    item.setFont(col, bold)
            self.tree.addTopLevelItem(item)
        for col in (0, 1, 2, 4):
            self.tree.resizeColumnToContents(col)
        self.tree.blockSignals(False)
        total = self.controller.session.version_total()
        hidden = total - len(rows)
        self.rows_label.setVisible(hidden > 0)
        self.rows_label.setText(f"the newest {len(rows):,} of {total:,} versions; `shardscope repo log` lists "
                                f"the others" if hidden > 0 else "")

    def _select_rows(self, uuids: tuple[str, ...]) -> None:
        self.tree.blockSignals(True)
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None:  # never for i < topLevelItemCount(); Qt's signature allows None
                item.setSelected(item.data(0, UUID_ROLE) in uuids)
        self.tree.blockSignals(False)

    def _fill_theirs(self, state: ControllerState) -> None:
        combo = self.theirs_combo
        combo.blockSignals(True)
        names = [combo.itemText(i) for i in range(combo.count())]
        if names != list(state.merge_candidates):
            combo.clear()
            combo.addItems(list(state.merge_candidates))
        combo.setCurrentText(state.merge_theirs or "")
        combo.blockSignals(False)

    def _fill_conflicts(self, plan: MergePlanState | None) -> None:
        if plan is self._plan_shown:
            return
        if plan is not None and self._plan_shown is not None and plan.plan is self._plan_shown.plan:
            for key, side in plan.choices.items():  # the same conflicts: only a choice changed
                combo = self._choices[key]
                combo.blockSignals(True)
                combo.setCurrentText(SIDE_WORDS[side] if side else UNCHOSEN)
                combo.blockSignals(False)
            self._plan_shown = plan
            return
        self._plan_shown = plan
        self.conflict_tree.clear()
        self.conflict_label.setText("")
        self._choices = {}
        if plan is None:
            return
        c = self.controller
        for words in describe_conflicts(plan.plan):
            item = QTreeWidgetItem([words.label, "", "", words.mine, words.theirs])
            item.setData(0, UUID_ROLE, words.key)
            item.setToolTip(0, words.sentence(plan.theirs))
            item.setToolTip(3, f"mine: {words.mine}")
            item.setToolTip(4, f"{plan.theirs}: {words.theirs}")
            self.conflict_tree.addTopLevelItem(item)
            combo = QComboBox()
            combo.addItems([UNCHOSEN, *KEEP_CHOICES])  # no side until the user picks one
            chosen = plan.choices.get(words.key)
            combo.setCurrentText(SIDE_WORDS[chosen] if chosen else UNCHOSEN)
            combo.setToolTip("keep mine: drop their edits of it; keep theirs: take back mine; "
                             "keep both: their edits after mine (refused if they no longer fit)")
            combo.currentTextChanged.connect(
                lambda text, key=words.key: c.attempt(c.choose, key, KEEP_CHOICES.get(text)))
            self.conflict_tree.setItemWidget(item, KEEP_COLUMN, combo)
            show = QPushButton("Show")
            show.setToolTip("centre the view on the body and select it")
            show.clicked.connect(lambda _=False, key=words.key: self.show_conflict(key))
            self.conflict_tree.setItemWidget(item, SHOW_COLUMN, show)
            self._choices[words.key] = combo
        for col in (0, KEEP_COLUMN, SHOW_COLUMN):
            self.conflict_tree.resizeColumnToContents(col)
        if self.conflict_tree.topLevelItemCount():
            self.conflict_tree.setCurrentItem(self.conflict_tree.topLevelItem(0))

    def _say_conflict(self, item: Any) -> None:
        self.conflict_label.setText(item.toolTip(0) if item is not None else "")

    def show_conflict(self, key: str) -> int | None:
        """Jump to conflict ``key``: centre the view on its body and select it (where it still exists).

        Returns the body shown, ``None`` when the conflict names no body the checked-out version has.
        """
        plan = self.controller.merge_plan
        conflict = next((x for x in plan.plan.conflicts if x.key == key), None) if plan is not None else None
        body = conflict_body(conflict, plan.plan) if conflict is not None and plan is not None else None
        version = self.controller.version
        if body is None or version is None or not version.exists(body):
            self.controller.report(f"{key.replace(':', ' ')} is not in the checked-out version: "
                                   "nothing to show here", "warning")
            return None
        # the one go-to of every panel: selects the body, the canvas centres and fits it on a plane showing it
        self.controller.attempt(self.controller.go_to, "body", body)
        return body

    def _fill_diff(self, state: ControllerState) -> None:
        d = state.diff
        if d is self._diff_shown:
            return
        self._diff_shown = d
        self.diff_tree.clear()
        self.diff_label.setText(state.diff_summary)
        if d is None:
            return
        short_a, short_b = d.a[:8], d.b[:8]
        records = {e.mutation.mutation_id: e.mutation for e in (*d.only_a, *d.only_b)}
        for side, entries in ((short_a, d.only_a), (short_b, d.only_b)):
            for e in entries:
                m = e.mutation
                original = records.get(int(m.args.get("mutation", m.target or 0)))
                words = describe_undo(m, original) if m.operation in ("undo", "redo") else edit_phrase(m)
                self.diff_tree.addTopLevelItem(QTreeWidgetItem([side, words, id_list(m.bodies), m.user]))
        for col in range(3):
            self.diff_tree.resizeColumnToContents(col)


def _text_and_button(vbox: Any, title: str, placeholder: str, label: str,
                     clicked: Callable[[], None]) -> tuple[QLineEdit, QPushButton]:
    """A titled box of one line edit and the button that acts on it, added to ``vbox``."""
    box = QGroupBox(title)
    row = QHBoxLayout(box)
    edit = QLineEdit()
    edit.setPlaceholderText(placeholder)
    button = QPushButton(label)
    button.clicked.connect(clicked)
    row.addWidget(edit)
    row.addWidget(button)
    vbox.addWidget(box)
    return edit, button
