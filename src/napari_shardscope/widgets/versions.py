"""The Versions panel: the DAG of versions, commit, new branch, checkout, what changed, export.

A thin view over the shared session (:mod:`.session`) and core calls a notebook can make
(``repo.versions()``, ``repo.commit``, ``repo.new_version``, ``lm.at``,
:func:`~napari_shardscope.core.labelmap.diff.diff_versions`). The DAG is a list, newest first, with
each version's parents, so merges and branch points read like ``git log --graph`` without drawing:
short UUID, branch, lock state, message, own edit count, time. The checked-out version is marked
and bold; a checkout switches the layers (the session does that, for both panels).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qtpy.QtCore import Qt
from qtpy.QtGui import QFont
from qtpy.QtWidgets import (
    QAbstractItemView,
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

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.export.precomputed import ExportReport, export_precomputed
from napari_shardscope.core.export.source import labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.labelmap.branch_merge import (
    BranchMergePlan,
    BranchMergeResult,
    merge_branches,
    plan_branch_merge,
)
from napari_shardscope.core.labelmap.diff import VersionDiff, diff_versions
from napari_shardscope.core.versioned import Version
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.session import ProofreadingSession, session_for
from napari_shardscope.widgets.workers import GuiProgress, start_worker

if TYPE_CHECKING:
    import napari

UNCHOSEN = "choose…"
EXPORT_TIP = ("write the selected committed version (or the checked-out one) as a new sharded volume, "
              "every scale, in a worker with napari's progress bar; the result opens as a hidden layer")
COLUMNS = ("Version", "Branch", "State", "Message", "Edits", "Parents", "Created")
UUID_ROLE = Qt.ItemDataRole.UserRole


class VersionsPanel(QWidget):  # type: ignore[misc]
    """Dock widget: the versions of the session's repository and what to do with them."""

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = viewer = napari_viewer
        self.session: ProofreadingSession = session_for(viewer)
        self.last_error = ""
        self.last_diff: VersionDiff | None = None
        self.last_plan: BranchMergePlan | None = None
        self.last_export: ExportReport | None = None
        self._exports: list[Any] = []
        self._choices: dict[str, QComboBox] = {}  # conflict key -> the side chosen in the conflict list
        self._build()
        self._signals = (self.session.connected, self.session.version_changed, self.session.dag_changed,
                         self.session.edited)
        for signal in self._signals:
            signal.connect(self._refresh_slot)
        self.teardown = on_removed(self, self._teardown)
        self.refresh()

    def _teardown(self) -> None:
        """The panel left the viewer: stop following the session."""
        for signal in self._signals:
            signal.disconnect(self._refresh_slot)

    def _build(self) -> None:
        vbox = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setRootIsDecorated(False)
        self.tree.setMinimumHeight(150)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.itemDoubleClicked.connect(
            lambda item, _col: self._guard(lambda: self.checkout(item.data(0, UUID_ROLE))))
        self.tree.itemSelectionChanged.connect(self._update_actions)
        vbox.addWidget(self.tree, 2)

        row = QHBoxLayout()
        self.checkout_button = QPushButton("Checkout")
        self.checkout_button.setToolTip("show the selected version in the layers (double-click a row does too)")
        self.checkout_button.clicked.connect(lambda: self._guard(lambda: self.checkout(self._selected_one())))
        self.diff_button = QPushButton("Diff")
        self.diff_button.setToolTip("what changed between the two selected versions (or the selected and the current)")
        self.diff_button.clicked.connect(lambda: self._guard(self._diff_clicked))
        row.addWidget(self.checkout_button)
        row.addWidget(self.diff_button)
        vbox.addLayout(row)

        commit_box = QGroupBox("Commit the checked-out version")
        crow = QHBoxLayout(commit_box)
        self.message_edit = QLineEdit()
        self.message_edit.setPlaceholderText("commit message")
        self.commit_button = QPushButton("Commit")
        self.commit_button.clicked.connect(lambda: self._guard(lambda: self.commit(self.message_edit.text())))
        crow.addWidget(self.message_edit)
        crow.addWidget(self.commit_button)
        vbox.addWidget(commit_box)

        branch_box = QGroupBox("New version from the selected committed version")
        brow = QHBoxLayout(branch_box)
        self.branch_edit = QLineEdit()
        self.branch_edit.setPlaceholderText("new branch name (empty: continue its branch)")
        self.branch_button = QPushButton("New branch")
        self.branch_button.clicked.connect(
            lambda: self._guard(lambda: self.new_branch(self.branch_edit.text().strip() or None,
                                                        self._selected_or_current())))
        brow.addWidget(self.branch_edit)
        brow.addWidget(self.branch_button)
        vbox.addWidget(branch_box)

        merge_box = QGroupBox("Merge a branch into the checked-out (committed) version")
        mv = QVBoxLayout(merge_box)
        mrow = QHBoxLayout()
        self.theirs_combo = QComboBox()
        self.theirs_combo.setToolTip("their branch (its head is merged)")
        self.theirs_combo.currentTextChanged.connect(self._forget_plan)
        self.plan_button = QPushButton("Check")
        self.plan_button.setToolTip("list the bodies and supervoxels both branches edited (conflicts)")
        self.plan_button.clicked.connect(lambda: self._guard(lambda: self.plan_merge(self.theirs_combo.currentText())))
        self.merge_button = QPushButton("Merge")
        self.merge_button.setToolTip("make the merge version, with the side chosen for each conflict")
        self.merge_button.clicked.connect(lambda: self._guard(lambda: self.merge(self.theirs_combo.currentText())))
        mrow.addWidget(self.theirs_combo, 1)
        mrow.addWidget(self.plan_button)
        mrow.addWidget(self.merge_button)
        mv.addLayout(mrow)
        self.conflict_tree = QTreeWidget()
        self.conflict_tree.setColumnCount(4)
        self.conflict_tree.setHeaderLabels(["Conflict", "Ours", "Theirs", "Keep"])
        self.conflict_tree.setMaximumHeight(140)
        mv.addWidget(self.conflict_tree)
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
        self.export_button.setToolTip(EXPORT_TIP)
        self.export_button.clicked.connect(lambda: self._guard(lambda: self.export(
            self.export_dest_edit.text().strip() or None, fmt=self.export_format_combo.currentText(),
            labels=self.export_labels_combo.currentText())))
        erow.addWidget(self.export_dest_edit, 1)
        erow.addWidget(self.export_format_combo)
        erow.addWidget(self.export_labels_combo)
        erow.addWidget(self.export_button)
        vbox.addWidget(export_box)

        self.diff_tree = QTreeWidget()
        self.diff_tree.setColumnCount(5)
        self.diff_tree.setHeaderLabels(["Side", "Mutation", "Operation", "Bodies", "User"])
        self.diff_label = QLabel("")
        self.diff_label.setWordWrap(True)
        vbox.addWidget(self.diff_label)
        vbox.addWidget(self.diff_tree, 1)

        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        vbox.addWidget(self.status_label)

    # -- the DAG ----------------------------------------------------------------------------------------
    def _refresh_slot(self, *_: Any) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Re-read the DAG (after a commit, branch, checkout or edit)."""
        self.tree.clear()
        repo, lm = self.session.repo, self.session.labelmap
        if repo is None or lm is None:
            self.status_label.setText("no repository: create or open one in the Proofreading panel")
            self._update_actions()
            return
        if self.status_label.text().startswith("no repository"):
            self._ok("")  # connected since: the hint is stale
        current = self.session.version.uuid if self.session.version is not None else None
        edits = self._own_edit_counts()
        bold = QFont()
        bold.setBold(True)
        for v in sorted(repo.versions(), key=lambda v: v.vid, reverse=True):
            created = datetime.fromtimestamp(v.created).strftime("%Y-%m-%d %H:%M")
            mark = "● " if v.uuid == current else ""
            item = QTreeWidgetItem([
                f"{mark}{v.short}", v.branch, "committed" if v.locked else "open", v.message,
                str(edits.get(v.uuid, 0)), ", ".join(repo.version(p).short for p in v.parents), created,
            ])
            item.setData(0, UUID_ROLE, v.uuid)
            item.setToolTip(0, v.uuid)
            item.setToolTip(3, v.message)
            if v.uuid == current:
                for col in range(len(COLUMNS)):
                    item.setFont(col, bold)
            self.tree.addTopLevelItem(item)
        for col in (0, 1, 2, 4):
            self.tree.resizeColumnToContents(col)
        current_branch = self.session.version.version.branch if self.session.version is not None else None
        previous = self.theirs_combo.currentText()
        self.theirs_combo.clear()
        names = [b.name for b in repo.branches() if b.name != current_branch]
        self.theirs_combo.addItems(names)
        if previous in names:
            self.theirs_combo.setCurrentText(previous)
        self._update_actions()

    def _own_edit_counts(self) -> dict[str, int]:
        """Mutations each version's own log holds.

        A version's state holds the logs of its first-parent chain (a branch merge carries the
        other side's edits in one record), so one state per chain tip covers every version:
        newest first, each version not yet on a visited chain is a tip.
        """
        lm = self.session.labelmap
        repo = self.session.repo
        if lm is None or repo is None:
            return {}
        counts: dict[str, int] = {}
        seen: set[int] = set()
        covered: set[str] = set()
        for v in sorted(repo.versions(), key=lambda v: v.vid, reverse=True):
            if v.uuid in covered:
                continue
            for entry in lm.at(v.uuid).mutations():
                if entry.mutation.mutation_id not in seen:
                    seen.add(entry.mutation.mutation_id)
                    counts[entry.version] = counts.get(entry.version, 0) + 1
            cur: Version | None = v
            while cur is not None and cur.uuid not in covered:
                covered.add(cur.uuid)
                cur = repo.version(cur.parents[0]) if cur.parents else None
        return counts

    def versions(self) -> list[str]:
        """UUIDs in the list, top (newest) first."""
        return [str(self.tree.topLevelItem(i).data(0, UUID_ROLE)) for i in range(self.tree.topLevelItemCount())]

    def select(self, *refs: str) -> None:
        """Select the rows of ``refs`` (for tests and notebooks, as a user's clicks would)."""
        repo = self._repo()
        uuids = {repo.version(r).uuid for r in refs}
        self.tree.clearSelection()
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            item.setSelected(item.data(0, UUID_ROLE) in uuids)

    def _selected(self) -> list[str]:
        return [str(item.data(0, UUID_ROLE)) for item in self.tree.selectedItems()]

    def _selected_one(self) -> str:
        sel = self._selected()
        if len(sel) != 1:
            raise ArgumentError("select one version")
        return sel[0]

    def _selected_or_current(self) -> str:
        sel = self._selected()
        if len(sel) == 1:
            return sel[0]
        if self.session.version is None:
            raise ArgumentError("no version checked out")
        return self.session.version.uuid

    # -- actions ----------------------------------------------------------------------------------------
    def checkout(self, ref: str) -> str:
        """Show version ``ref`` in the layers; returns its UUID."""
        v = self.session.checkout(ref)
        self._ok(f"checked out {v.version.short} ({v.version.branch}, "
                 f"{'committed' if v.version.locked else 'open'})")
        return v.uuid

    def commit(self, message: str) -> Version:
        """Commit the checked-out version with ``message``."""
        if not message.strip():
            raise ArgumentError("write a commit message")
        done = self.session.commit(message)
        self.message_edit.clear()
        self._ok(f"committed {done.short}: {message}")
        return done

    def new_branch(self, name: str | None = None, parent: str | None = None) -> Version:
        """A new open version from committed ``parent`` (default: the checked-out one), checked out."""
        v = self.session.branch(name, parent)
        self.branch_edit.clear()
        self._ok(f"new version {v.short} on branch {v.branch!r}")
        return v

    def diff(self, a: str, b: str) -> VersionDiff:
        """Show what changed between ``a`` and ``b``: each side's mutations and the bodies they touched."""
        lm = self.session.labelmap
        if lm is None:
            raise ArgumentError("no repository")
        d = diff_versions(lm, a, b)
        self.last_diff = d
        repo = self._repo()
        self.diff_tree.clear()
        short_a, short_b = repo.version(d.a).short, repo.version(d.b).short
        for side, entries in ((short_a, d.only_a), (short_b, d.only_b)):
            for e in entries:
                m = e.mutation
                self.diff_tree.addTopLevelItem(QTreeWidgetItem([
                    side, str(m.mutation_id), m.operation, ", ".join(map(str, m.bodies)), m.user]))
        for col in range(4):
            self.diff_tree.resizeColumnToContents(col)
        self.diff_label.setText(
            f"{short_a} vs {short_b} ({d.relation}, base {repo.version(d.base).short}): "
            f"{len(d.only_a)} mutation(s) only in {short_a} touching {len(d.bodies_a)} bodies; "
            f"{len(d.only_b)} only in {short_b} touching {len(d.bodies_b)} bodies")
        return d

    # -- merging branches -------------------------------------------------------------------------------
    def _ours(self) -> str:
        if self.session.version is None:
            raise ArgumentError("no version checked out")
        return self.session.version.uuid

    def plan_merge(self, theirs: str) -> BranchMergePlan:
        """List the conflicts of merging ``theirs`` into the checked-out version, each with a side to keep."""
        lm = self.session.labelmap
        if lm is None:
            raise ArgumentError("no repository")
        plan = plan_branch_merge(lm, self._ours(), theirs)
        self.last_plan = plan
        self.conflict_tree.clear()
        self._choices = {}
        for c in plan.conflicts:
            item = QTreeWidgetItem([c.key, ", ".join(map(str, c.ours)), ", ".join(map(str, c.theirs)), ""])
            self.conflict_tree.addTopLevelItem(item)
            combo = QComboBox()
            combo.addItems([UNCHOSEN, "ours", "theirs"])  # no side until the user picks one
            self.conflict_tree.setItemWidget(item, 3, combo)
            self._choices[c.key] = combo
        self._ok(f"merging {theirs} into {plan.ours[:8]}: {len(plan.theirs_mutations)} of their mutation(s), "
                 f"{len(plan.conflicts)} conflict(s)" + (" — choose a side for each, then Merge" if plan.conflicts
                                                          else ""))
        return plan

    def _forget_plan(self, *_: Any) -> None:
        """Another branch to merge: the listed conflicts and choices were for the previous one."""
        self.last_plan = None
        self._choices = {}
        self.conflict_tree.clear()

    def choose(self, key: str, side: str) -> None:
        """Set the side kept for conflict ``key`` (as the row's combo box does)."""
        if key not in self._choices:
            raise ArgumentError(f"no conflict {key!r} listed: check the merge first")
        self._choices[key].setCurrentText(side)

    def merge(self, theirs: str, resolutions: dict[str, str] | None = None) -> BranchMergeResult:
        """Merge branch ``theirs`` into the checked-out version and check out the (open) merge version.

        ``resolutions`` (conflict key → side) default to the sides chosen in the conflict list.
        """
        lm = self.session.labelmap
        if lm is None:
            raise ArgumentError("no repository")
        ours = self._ours()
        if resolutions is None:
            plan = self.last_plan
            if plan is None or plan.ours != ours or plan.theirs != self._repo().version(theirs).uuid:
                plan = self.plan_merge(theirs)  # the listed choices were for another merge: list this one's
                if plan.conflicts:
                    raise ArgumentError(f"merging {theirs}: {len(plan.conflicts)} conflict(s) listed — choose a "
                                        "side for each, then Merge")
            choices = self._choices
            resolutions = {c.key: choices[c.key].currentText() for c in plan.conflicts
                           if c.key in choices and choices[c.key].currentText() != UNCHOSEN}
        result = merge_branches(lm, ours, theirs, resolutions=resolutions)  # type: ignore[arg-type]
        self.last_plan = None
        self.conflict_tree.clear()
        self.session.dag_changed.emit()
        self.session.checkout(result.version.uuid)
        self._ok(f"merge version {result.version.short} (open): {len(result.applied)} of their edits applied, "
                 f"{len(result.reverted)} of ours reverted, {len(result.dropped)} of theirs dropped; commit it")
        return result

    # -- exporting --------------------------------------------------------------------------------------
    def default_export_dest(self, ref: str, fmt: str = "precomputed", labels: str = "bodies") -> Path:
        """``<repo>-<version>-<labels>[.zarr]`` beside the repository directory."""
        repo = self._repo()
        where = Path(repo.path)
        suffix = ".zarr" if fmt == "zarr3" else ""
        return where.parent / f"{where.name}-{repo.version(ref).short}-{labels}{suffix}"

    def export(self, dest: str | None = None, *, ref: str | None = None, fmt: str = "precomputed",
               labels: str = "bodies", show: bool = True) -> Any:
        """Export version ``ref`` (default: the selected one, else the checked-out one) in a worker thread.

        The same call a notebook makes (``export_precomputed(labelmap_source(repo, name, ref), dest)``),
        run off the GUI thread with napari's progress bar, one Dask task per shard on the threaded
        scheduler. Only committed versions: an open one still changes, and an export should name a
        version it reproduces. With ``show`` the result is opened (hidden) as a layer when done.
        Returns the worker.
        """
        lm = self.session.labelmap
        if lm is None:
            raise ArgumentError("no repository: create or open one in the Proofreading panel")
        if fmt not in ("precomputed", "zarr3"):
            raise ArgumentError(f"format must be 'precomputed' or 'zarr3', got {fmt!r}")
        if self._exports:
            raise ArgumentError("an export is running: wait for it to finish")
        repo = self._repo()
        ref = ref or self._selected_or_current()
        source = labelmap_source(repo.path, lm.name, ref, labels=labels)  # type: ignore[arg-type]
        short = repo.version(source.version).short
        target = str(dest) if dest else str(self.default_export_dest(source.version, fmt, labels))
        pbar = GuiProgress(f"export {short} ({labels})")

        def run() -> ExportReport:
            write = export_zarr3 if fmt == "zarr3" else export_precomputed
            return write(source, target, progress=pbar)

        def done(report: ExportReport) -> None:
            self.last_export = report
            text = (f"exported {short} ({labels}) to {target}: {len(report.shards)} shard files, "
                    f"{report.nbytes / 2**20:.1f} MiB")
            if show:  # added hidden and not selected: the body layer keeps the clicks
                active = self.viewer.layers.selection.active
                layers = self.viewer.open(target, plugin="napari-shardscope", name=f"export {short} {labels}")
                for layer in layers:
                    layer.visible = False
                if active is not None and active in self.viewer.layers:
                    self.viewer.layers.selection.active = active
                text += f"; added as layer {layers[0].name!r} (hidden)" if layers else ""
            self._ok(text)

        def failed(exc: BaseException) -> None:
            self._error(f"export of {short} failed: {exc}")
            if not isinstance(exc, ShardscopeError):
                raise exc

        def finished() -> None:
            pbar.close()
            self._update_actions()

        self._ok(f"exporting {short} ({labels}) to {target} …")
        worker = start_worker(run, done, failed, running=self._exports, finished=finished)
        self._update_actions()
        return worker

    def _diff_clicked(self) -> None:
        sel = self._selected()
        if len(sel) == 2:
            self.diff(sel[0], sel[1])
        elif len(sel) == 1 and self.session.version is not None:
            self.diff(sel[0], self.session.version.uuid)
        else:
            raise ArgumentError("select two versions (Ctrl-click), or one to compare with the checked-out one")

    def _update_actions(self) -> None:
        connected = self.session.is_connected
        sel = self._selected()
        repo = self.session.repo
        editable = self.session.editable
        self.checkout_button.setEnabled(connected and len(sel) == 1)
        self.diff_button.setEnabled(connected and len(sel) in (1, 2))
        self.commit_button.setEnabled(connected and editable)
        self.commit_button.setToolTip("" if editable else (self.session.why_not_editable() or "already committed"))
        target = sel[0] if len(sel) == 1 else (self.session.version.uuid if self.session.version else None)
        locked = bool(connected and repo is not None and target is not None and repo.version(target).locked)
        self.branch_button.setEnabled(locked)
        ours_locked = bool(connected and self.session.version is not None and self.session.version.version.locked)
        for b in (self.plan_button, self.merge_button):
            b.setEnabled(ours_locked and self.theirs_combo.count() > 0)
        if not ours_locked:
            self.merge_button.setToolTip("commit the checked-out version first: a merge joins two committed heads")
        self.branch_button.setToolTip("" if locked else "a new version needs a committed parent: commit first")
        self.export_button.setEnabled(locked and not self._exports)
        self.export_button.setToolTip(EXPORT_TIP if locked else
                                      "commit first: an export is a snapshot of a committed version")

    # -- messages ---------------------------------------------------------------------------------------
    def _repo(self) -> Any:
        if self.session.repo is None:
            raise ArgumentError("no repository: create or open one in the Proofreading panel")
        return self.session.repo

    def _guard(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except ShardscopeError as exc:
            self._error(str(exc))
            return None

    def _error(self, message: str) -> None:
        self.last_error = message
        self.status_label.setStyleSheet("color: #e06c75")
        self.status_label.setText(message)

    def _ok(self, message: str) -> None:
        self.last_error = ""
        self.status_label.setStyleSheet("")
        self.status_label.setText(message)
