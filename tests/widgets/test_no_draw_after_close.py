"""No test, script or plugin code leaves napari drawing after the viewer it drew in is closed.

``viewer.screenshot()`` flashes by default: napari puts a ``QGraphicsColorizeEffect`` on the OpenGL canvas and
runs a 300 ms ``QPropertyAnimation`` on it, owned by no viewer. A test that ends within those 300 ms closes the
viewer with the animation still running; its next frame repaints a canvas whose GL context is going away, on
whichever test of that pytest-xdist worker turns the event loop next (a worker died in Mesa's glDrawArrays under
vispy's paintGL). Every screenshot taken here passes ``flash=False``; this test keeps it so.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: ``<something>viewer.screenshot(...)`` with its arguments (napari's; Playwright's ``page.screenshot`` is not one).
CALL = re.compile(r"viewer\.screenshot\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


def test_every_viewer_screenshot_passes_flash_false() -> None:
    files = [p for folder in ("src", "tests", "scripts", "examples", "bench") for p in (ROOT / folder).rglob("*.py")
             if p.resolve() != Path(__file__).resolve()]
    calls = [(path.relative_to(ROOT), args) for path in files for args in CALL.findall(path.read_text())]
    assert len(calls) >= 8  # the test finds the calls it guards
    flashing = [f"{path}: screenshot({args})" for path, args in calls if "flash=False" not in args]
    assert flashing == []
