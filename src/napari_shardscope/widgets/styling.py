"""Style sheets set only when they change.

``QWidget.setStyleSheet`` re-polishes the widget (and its children) even when the sheet is the one it
already has: about 2 ms for a status line. The panels render on every controller state (each click, each
selection, each worker's news), so they set a status line's colour through :func:`restyle`, which leaves an
unchanged sheet alone.
"""

from __future__ import annotations

from typing import Any


def restyle(widget: Any, sheet: str) -> None:
    """Give ``widget`` the style sheet ``sheet``, unless it has it already."""
    if widget.styleSheet() != sheet:
        widget.setStyleSheet(sheet)
