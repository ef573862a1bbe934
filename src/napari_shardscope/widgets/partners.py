"""The Proofreading panel's *Partners* box: the first selected body's synaptic partners, and the last edit's wiring.

Kept apart from the panel (it is one box with its own tree, its own reads and its own click path): the
panel hands it each controller state; the box reads the partners through the session's synapse source
only when the body, the revision or the version changed, and never while a job holds the labelmap's lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from qtpy.QtCore import Qt
from qtpy.QtGui import QAction
from qtpy.QtWidgets import QGroupBox, QLabel, QMenu, QToolButton, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from napari_shardscope.core.annotation.synapse_checks import MIN_SYNAPSES
from napari_shardscope.core.errors import ShardscopeError

if TYPE_CHECKING:
    from napari_shardscope.core.proofreading import ControllerState, ProofreadingController
    from napari_shardscope.widgets.session import ViewerSession


class PartnerOwner(Protocol):
    """What the box asks of the panel that holds it (read at each use: the panel may change controller)."""

    @property
    def session(self) -> ViewerSession: ...

    @property
    def controller(self) -> ProofreadingController: ...


class PartnerBox(QGroupBox):
    """Partners of the first selected body at this version, most synapses first; a click goes to one."""

    def __init__(self, owner: PartnerOwner, parent: QWidget | None = None) -> None:
        super().__init__("Partners", parent)
        self._owner = owner
        self._key: tuple[object, ...] | None = None
        self._source: object = None  # the synapse layer whose reads the box listens to
        self.setToolTip("the first selected body's synaptic partners at this version, most synapses "
                        "first (out: it is presynaptic); click one to select it and go to it")
        box = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["", "partner", "synapses"])
        self.tree.setRootIsDecorated(False)
        self.tree.setMaximumHeight(160)
        self.tree.itemClicked.connect(self._clicked)
        box.addWidget(self.tree)
        self.wiring_label = QLabel("")
        self.wiring_label.setWordWrap(True)
        self.wiring_label.setToolTip("what the last edit did to the wiring of the bodies it touched")
        box.addWidget(self.wiring_label)
        self.todo_button = QToolButton()
        self.todo_button.setText("Synapse to-do…")
        self.todo_button.setToolTip("make a to-do list of the first selected body's synapses to check, kept in the "
                                    "repository at this version; the Navigate panel's Next / Previous walk it")
        self.todo_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.todo_button)
        self.orphans_action = QAction("Orphan synapses (background, no partner, autapse)", menu)
        self.orphans_action.triggered.connect(lambda: self.make_todo("orphans"))
        self.weak_action = QAction(f"Weak partners (fewer than {MIN_SYNAPSES} synapses)", menu)
        self.weak_action.triggered.connect(lambda: self.make_todo("weak"))
        menu.addAction(self.orphans_action)
        menu.addAction(self.weak_action)
        self.todo_button.setMenu(menu)
        box.addWidget(self.todo_button)
        self.setVisible(False)  # shown when the repository has synapses of this labelmap

    def show_state(self, state: ControllerState) -> None:
        """The first selected body's partners, most synapses first (when the body, an edit or the version changed).

        The partners come with the synapse layer's read, in its worker thread (a body with 10⁵ synapses
        takes seconds): until it ends the box says it is reading; :meth:`_loaded` draws the rows.
        """
        first = state.selected[0] if state.selected else None
        key = (first, state.revision, state.version.uuid if state.version else None)
        if key == self._key or state.busy:  # busy: a split in a worker holds the labelmap's lock
            return
        self._key = key
        synapses = self._owner.session.synapses
        if self._source is not synapses:
            synapses.signals.loaded.connect(self._loaded)  # dropped by Qt with the box
            self._source = synapses
        self._render()

    def _loaded(self) -> None:
        if self._key is not None:
            self._render()

    def _render(self) -> None:
        assert self._key is not None
        first, revision, version = self._key
        synapses = self._owner.session.synapses
        self.wiring_label.setText(synapses.wiring.last)
        self.tree.clear()
        try:
            bound = synapses.source.instance() is not None
        except ShardscopeError as exc:
            self.setVisible(True)
            self.setTitle(f"Partners ({exc})")
            return
        self.setVisible(bound)
        if not bound or first is None:
            self.setTitle("Partners")
            return
        read, key = synapses.read, synapses.read_key
        if key is not None and key[:2] == (version, revision) and read is not None and first in read.bodies \
                and first not in read.connections:
            self.setTitle(f"Partners of {first}: not a body at this version")
            return
        if key is None or key[:2] != (version, revision) or read is None or first not in read.connections:
            self.setTitle(f"Partners ({synapses.error})" if synapses.error and key is not None
                          and key[:2] == (version, revision) else f"Partners of {first}: reading…")
            return
        conns = read.connections[first]
        self.setTitle(f"Partners of {conns.body}: {conns.out_total} out, {conns.in_total} in")
        rows = [("out", p.body, p.count) for p in conns.outgoing] + [("in", p.body, p.count) for p in conns.incoming]
        rows.sort(key=lambda r: (-r[2], r[0] != "out", r[1]))  # strongest first; out before in on a tie
        for direction, body, count in rows:
            item = QTreeWidgetItem(["→ out" if direction == "out" else "← in", str(body), str(count)])
            item.setData(0, Qt.ItemDataRole.UserRole, (direction, body, count))
            self.tree.addTopLevelItem(item)

    def rows(self) -> list[tuple[str, int, int]]:
        """The partner list as shown: (``"out"``/``"in"``, partner body, synapse count), top row first."""
        out: list[tuple[str, int, int]] = []
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None:
                direction, body, count = item.data(0, Qt.ItemDataRole.UserRole)
                out.append((str(direction), int(body), int(count)))
        return out

    def make_todo(self, kind: str) -> str | None:
        """Make synapse to-do list ``kind`` of the first selected body, open it, and show the Navigate panel.

        A typed error (nothing selected, nothing to check) goes to the status line; returns the list's name.
        """
        controller = self._owner.controller
        name = controller.attempt(controller.synapse_todo, kind)
        if name is not None:
            window = self._owner.session.viewer.window
            window.add_plugin_dock_widget("napari-shardscope", "Navigate")  # shown (made once) for Next / Previous
        return name

    def _clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        """A click on a partner row selects that body and goes to it (the go-to path of the to-do list)."""
        _, body, _ = item.data(0, Qt.ItemDataRole.UserRole)
        controller = self._owner.controller
        controller.attempt(controller.go_to, "body", int(body))
