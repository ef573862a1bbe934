"""When a panel leaves the viewer, take its hooks with it.

Panels bind viewer keys, add mouse callbacks and listen to the session and the layer list. napari
removes a plugin dock (its × button, ``remove_dock_widget``) by detaching the widget with
``setParent(None)``, without a ``closeEvent``; a panel that only cleaned up in ``closeEvent`` kept
merging on Shift-M after it was gone. :func:`on_removed` runs a teardown on either path, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qtpy.QtCore import QEvent, QObject


class _RemovalWatch(QObject):
    def __init__(self, widget: Any, teardown: Callable[[], None]) -> None:
        super().__init__(widget)
        self._teardown = teardown
        self._done = False
        widget.installEventFilter(self)

    def run(self) -> None:
        if not self._done:
            self._done = True
            self._teardown()

    def eventFilter(self, obj: Any, event: Any) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Close or (kind == QEvent.Type.ParentChange and obj.parent() is None):
            self.run()
        return False


def on_removed(widget: Any, teardown: Callable[[], None]) -> Callable[[], None]:
    """Run ``teardown`` once when ``widget`` is detached from its dock or closed; returns a manual trigger."""
    return _RemovalWatch(widget, teardown).run
