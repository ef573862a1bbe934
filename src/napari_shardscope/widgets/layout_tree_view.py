"""The shard browser's tree widget: a layout tree filled row by row, children added in pages.

A row is filled when it is expanded (the core reads that row's index then, and only then: a scale's
shard files, a shard's minishards, a minishard's chunks), and its children are added
:data:`PAGE_SIZE` at a time with a "show more" row, so a scale with 10⁴ shards opens at once.
Split from :mod:`.shard_browser`: the paging and the path → row bookkeeping are the tree widget's,
whatever the panel around it does with a clicked row.
"""

from __future__ import annotations

from collections.abc import Callable

from qtpy.QtCore import Qt
from qtpy.QtGui import QColor
from qtpy.QtWidgets import QHeaderView, QTreeWidget, QTreeWidgetItem, QWidget

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.layout import LayoutNode, LayoutTree, NodePath, format_bytes, format_ratio

#: Children added to the tree per page ("show more" adds the next page).
PAGE_SIZE = 200
COLUMNS = ("Layout", "Chunks", "Stored", "Raw", "Ratio")
NODE_ROLE = Qt.ItemDataRole.UserRole
MORE_ROLE = Qt.ItemDataRole.UserRole + 1


class LayoutTreeView(QTreeWidget):
    """The rows of a :class:`~napari_shardscope.core.layout.LayoutTree`, read when expanded, paged.

    ``on_error`` shows a message when expanding a row fails (an index that cannot be read).
    """

    def __init__(self, on_error: Callable[[str], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tree: LayoutTree | None = None
        self._on_error = on_error
        self._items: dict[NodePath, QTreeWidgetItem] = {}
        self._pending: dict[NodePath, list[LayoutNode]] = {}
        self.setColumnCount(len(COLUMNS))
        self.setHeaderLabels(list(COLUMNS))
        self.setUniformRowHeights(True)
        self.setIndentation(12)
        header = self.header()
        assert header is not None
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.itemExpanded.connect(self._on_item_expanded)

    def forget_tree(self) -> None:
        """Forget the tree and every row.

        Not named ``reset``: that is QAbstractItemView's slot, which ``clear()`` calls back (an override
        recursed until the interpreter aborted when the panel first cleared its tree).
        """
        self.tree = None
        self.clear()
        self._items.clear()
        self._pending.clear()

    def show_roots(self, tree: LayoutTree, roots: list[LayoutNode]) -> None:
        """Show ``tree``'s top rows (its scales); their children are read when expanded."""
        self.tree = tree
        self.addTopLevelItems([self._make_item(node) for node in roots])

    def _make_item(self, node: LayoutNode) -> QTreeWidgetItem:
        item = QTreeWidgetItem()
        self._fill_item(item, node)
        if node.expandable:
            item.setChildIndicatorPolicy(QTreeWidgetItem.ChildIndicatorPolicy.ShowIndicator)
        self._items[node.path] = item
        return item

    @staticmethod
    def _fill_item(item: QTreeWidgetItem, node: LayoutNode) -> None:
        item.setData(0, NODE_ROLE, node)
        values = (node.name, "" if node.chunks is None else str(node.chunks), format_bytes(node.stored_bytes),
                  format_bytes(node.raw_bytes), format_ratio(node.ratio))
        for col, text in enumerate(values):
            item.setText(col, text)
            if col:
                item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        item.setToolTip(0, node.detail or node.name)
        if node.kind == "error" or not node.present:
            item.setForeground(0, QColor("#e06c75"))

    def _on_item_expanded(self, item: QTreeWidgetItem) -> None:
        node = item.data(0, NODE_ROLE)
        if isinstance(node, LayoutNode):
            self._populate(item, node)

    def _populate(self, item: QTreeWidgetItem, node: LayoutNode) -> None:
        if self.tree is None or node.path in self._pending or item.childCount():
            return
        try:
            expansion = self.tree.expand(node)
        except ShardscopeError as exc:
            self._on_error(str(exc))
            return
        self._fill_item(item, expansion.node)
        self._pending[node.path] = list(expansion.children)
        self._add_page(item, node.path)
        if not expansion.children:
            item.setChildIndicatorPolicy(QTreeWidgetItem.ChildIndicatorPolicy.DontShowIndicatorWhenChildless)

    def _add_page(self, item: QTreeWidgetItem, path: NodePath) -> None:
        pending = self._pending.get(path, [])
        last = item.child(item.childCount() - 1) if item.childCount() else None
        if last is not None and last.data(0, MORE_ROLE):
            item.removeChild(last)
        page, rest = pending[:PAGE_SIZE], pending[PAGE_SIZE:]
        self._pending[path] = rest
        item.addChildren([self._make_item(child) for child in page])
        if rest:
            more = QTreeWidgetItem([f"… show {min(PAGE_SIZE, len(rest))} more of {len(rest)}"])
            more.setData(0, MORE_ROLE, True)
            more.setForeground(0, QColor("#61afef"))
            item.addChild(more)

    def show_more(self, item: QTreeWidgetItem) -> bool:
        """When ``item`` is a "show more" row, add its parent's next page; whether it was one."""
        parent = item.parent()
        if item.data(0, MORE_ROLE) and parent is not None:
            parent_node = parent.data(0, NODE_ROLE)
            self._add_page(parent, parent_node.path)
            return True
        return False

    def expand_path(self, path: NodePath) -> QTreeWidgetItem:
        """Expand the tree down to ``path`` (reading the indexes on the way) and return its row."""
        if self.tree is None:
            raise ArgumentError("no dataset is shown")
        item: QTreeWidgetItem | None = None
        for depth in range(1, len(path) + 1):
            sub = path[:depth]
            if sub not in self._items and item is not None:
                self._populate(item, item.data(0, NODE_ROLE))
                while sub not in self._items and self._pending.get(path[: depth - 1]):
                    self._add_page(item, path[: depth - 1])
            if sub not in self._items:
                raise ArgumentError(f"no row {' / '.join(f'{k} {v}' for k, v in sub)} in the tree")
            item = self._items[sub]
            if depth < len(path):
                item.setExpanded(True)
                self._populate(item, item.data(0, NODE_ROLE))
        assert item is not None
        return item

    def item_for_path(self, path: NodePath) -> QTreeWidgetItem | None:
        """The row of ``path`` if it has been created (``None`` if its parent was never expanded)."""
        return self._items.get(path)
