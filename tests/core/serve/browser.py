"""Headless Chromium (Debian's, through Playwright) rendering a Neuroglancer link, read back as pixels.

Never ``playwright install``: the system ``/usr/bin/chromium`` is driven through ``executable_path``
and renders WebGL with SwiftShader (software), so the test needs no GPU and no download.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-quic", "--disable-dev-shm-usage"]
#: Upper bound of every wait for the viewer (seconds); the test never sleeps longer.
READY_TIMEOUT = 40.0
VIEWPORT = {"width": 640, "height": 640}

needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed")


@dataclass
class Rendered:
    """A screenshot of the page and the rectangle (x, y, w, h, CSS px) of the cross-section panel."""

    pixels: npt.NDArray[np.uint8]
    panel: tuple[float, float, float, float]

    def at(self, u: float, v: float) -> tuple[int, int, int]:
        """RGB at panel-relative offset (u, v) from the panel's centre, in screen pixels."""
        x, y, w, h = self.panel
        px = int(np.floor(x + w / 2 + u))
        py = int(np.floor(y + h / 2 + v))
        r, g, b = self.pixels[py, px, :3]
        return int(r), int(g), int(b)


def wait_ready(page: Any) -> None:
    """Wait until Neuroglancer says every visible chunk is loaded (``viewer.isReady()``), at most
    :data:`READY_TIMEOUT`; asked every 50 ms in the page (a condition, not a sleep)."""
    page.wait_for_function("() => typeof viewer !== 'undefined' && viewer.isReady()", polling=50,
                           timeout=READY_TIMEOUT * 1000)


def settle(page: Any) -> None:
    """Once ready: the mouse moved off the panels (no hover highlight on a segment), two animation frames drawn
    after the move (the frame that shows the change, and one after it), and ready again."""
    wait_ready(page)
    page.mouse.move(0, 0)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(null))))")
    wait_ready(page)
    assert page.evaluate("() => viewer.isReady()")


class Browser:
    def __init__(self, playwright: Any) -> None:
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)

    def render(self, url: str) -> Rendered:
        from PIL import Image

        page = self.browser.new_page(viewport=VIEWPORT)
        try:
            page.goto(url)
            settle(page)
            rect = page.evaluate("""() => {
                const r = document.querySelector('.neuroglancer-rendered-data-panel').getBoundingClientRect();
                return [r.x, r.y, r.width, r.height]; }""")
            png = page.screenshot()
            shots = os.environ.get("SHARDSCOPE_NG_SHOTS")
            if shots:  # for a human to look at what the browser drew
                os.makedirs(shots, exist_ok=True)
                with open(os.path.join(shots, f"ng-{time.time_ns()}.png"), "wb") as f:
                    f.write(png)
        finally:
            page.close()
        pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        return Rendered(pixels, (rect[0], rect[1], rect[2], rect[3]))

    def close(self) -> None:
        self.browser.close()


@contextmanager
def chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = Browser(p)
        try:
            yield b
        finally:
            b.close()


def colours_by_label(rendered: Rendered, labels: npt.NDArray[np.uint64], center: tuple[float, float],
                     px_per_voxel: float) -> tuple[dict[int, tuple[int, int, int]], float]:
    """Each label's majority colour over the voxel centres of a 2-D (y, x) slice, and the agreement.

    ``center`` is the (y, x) voxel-index position shown at the panel's centre (voxel centres at
    integers). Agreement is the fraction of visible voxel centres whose pixel has their label's colour.
    """
    _, _, w, h = rendered.panel
    samples: dict[int, list[tuple[int, int, int]]] = {}
    for iy in range(labels.shape[0]):
        for ix in range(labels.shape[1]):
            # four points 0.3 voxel off the centre: a view shifted by half a voxel misses a quarter of them
            for dx, dy in ((-0.3, -0.3), (0.3, -0.3), (-0.3, 0.3), (0.3, 0.3)):
                u, v = (ix + dx - center[1]) * px_per_voxel, (iy + dy - center[0]) * px_per_voxel
                if abs(u) > w / 2 - 4 or abs(v) > h / 2 - 4:
                    continue
                samples.setdefault(int(labels[iy, ix]), []).append(rendered.at(u, v))
    colours: dict[int, tuple[int, int, int]] = {}
    agree = total = 0
    for label, got in samples.items():
        values, counts = np.unique(np.asarray(got), axis=0, return_counts=True)
        best = values[int(np.argmax(counts))]
        colours[label] = (int(best[0]), int(best[1]), int(best[2]))
        agree += int(counts.max())
        total += len(got)
    return colours, agree / max(total, 1)
