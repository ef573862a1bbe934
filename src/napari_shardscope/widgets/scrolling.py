"""Panels that fit any dock: contents in a scroll area, so a short window scrolls instead of squeezing.

A docked panel taller than the room napari gives it (its default window is about 1100 × 750, and
two panels share one column) was squeezed below its layout's minimum: Qt then overlapped the
group boxes, cut word-wrapped labels and drew list rows under buttons; with two docks the window
even grew past the screen. Each panel builds its contents into :func:`scroll_body` instead of
itself: the scroll area is small, its contents keep their natural size and scroll.
"""

from __future__ import annotations

from typing import TypeVar

from qtpy.QtCore import QEvent, QObject, QSize, Qt
from qtpy.QtWidgets import QFrame, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

#: Height a panel may shrink to in its dock (the rest scrolls).
MIN_PANEL_HEIGHT = 160


class _VerticalScrollArea(QScrollArea):
    """Scrolls vertically only: as wide as its contents need (nothing cut on the right), as short as the dock."""

    def eventFilter(self, watched: QObject | None, event: QEvent | None) -> bool:
        """The contents changed their layout: the panel's size hints changed with them (the dock re-asks)."""
        if event is not None and watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return bool(super().eventFilter(watched, event))

    def _extra(self) -> int:
        bar = self.verticalScrollBar()  # a scroll area always has one; Qt's signature allows None
        width = int(bar.sizeHint().width()) if bar is not None else 0
        return width + 2 * int(self.frameWidth())

    def minimumSizeHint(self) -> QSize:
        body = self.widget()
        if body is None:
            return super().minimumSizeHint()
        return QSize(int(body.minimumSizeHint().width()) + self._extra(), MIN_PANEL_HEIGHT)

    def sizeHint(self) -> QSize:
        body = self.widget()
        if body is None:
            return super().sizeHint()
        hint = body.sizeHint()
        return QSize(int(hint.width()) + self._extra(), int(hint.height()))


def scroll_body(panel: QWidget) -> QWidget:
    """The widget ``panel`` builds its contents into: inside a frameless scroll area that fills the panel."""
    outer = QVBoxLayout(panel)
    outer.setContentsMargins(0, 0, 0, 0)
    area = _VerticalScrollArea(panel)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # contents follow the dock width
    area.setMinimumHeight(MIN_PANEL_HEIGHT)
    body = QWidget(area)
    area.setWidget(body)
    body.installEventFilter(area)
    outer.addWidget(area)
    return body


_W = TypeVar("_W", bound=QWidget)


def wrapping(label: _W) -> _W:
    """Let a word-wrapped label take the width it is given (a long path no longer widens the panel)."""
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label
