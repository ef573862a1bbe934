"""Render the plugin's panels with the sample data to PNGs for the README, at napari's default window size
and in a small window.

Run on a machine without a screen under a virtual display (large enough for the windows)::

    xvfb-run -a -s "-screen 0 1920x1200x24" python scripts/screenshots.py          # every panel, both sizes
    xvfb-run -a python scripts/screenshots.py shard_browser --window small --out /tmp

Each panel is driven through its public methods, as a user would click it, so the pictures show
what the panel really does with the sample (generated into the cache on first use); each panel is
a function in :data:`PANELS`. Window sizes (:data:`WINDOWS`): ``default`` is the size napari opens
at on a first start (its own size hint, measured with fresh settings — what a new user sees),
``small`` a laptop-sized window, ``large`` the 1600 × 1000 of the older pictures. The file of
panel ``p`` at size ``w`` is ``p.png`` for ``default`` and ``p-w.png`` otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Window sizes (width, height); ``None``: napari's own first-start size.
WINDOWS: dict[str, tuple[int, int] | None] = {"default": None, "small": (960, 600), "large": (1600, 1000)}
#: Width of the docked panel in the large window (its tree shows names and numbers side by side); smaller
#: windows keep the width napari gives the panel from its size hint.
DOCK_WIDTH = 640
_window = "default"


def _wait(viewer: Any, done: Callable[[], bool], timeout: float = 120.0) -> None:
    """Process Qt events until ``done()`` (workers report back through the event loop)."""
    from qtpy.QtWidgets import QApplication

    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            raise TimeoutError("the panel did not finish in time")
        QApplication.processEvents()
        time.sleep(0.02)
    for _ in range(5):
        QApplication.processEvents()


def _dock(viewer: Any, display_name: str) -> Any:
    """Open a panel as the Plugins menu does (at :data:`DOCK_WIDTH` in the large window)."""
    from qtpy.QtCore import Qt

    dock, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", display_name)
    if _window == "large":
        viewer.window._qt_window.resizeDocks([dock], [DOCK_WIDTH], Qt.Orientation.Horizontal)
    return widget


def shard_browser(viewer: Any) -> None:
    """The sample's segmentation: a chunk located and outlined, the shard map, a clean validation."""
    from napari_shardscope.widgets.shard_browser import ShardBrowser

    browser = _dock(viewer, "Shard browser")
    assert isinstance(browser, ShardBrowser)
    browser.set_layer(viewer.layers["segmentation"])
    browser.show_shard_map("8_8_40", "shard")
    _wait(viewer, lambda: not browser.busy)
    browser.validate(None)
    _wait(viewer, lambda: not browser.busy)
    browser.locate_edit.setText("20, 30, 100")  # z, y, x from 0
    browser.locate("20, 30, 100", "voxel", "8_8_40")
    viewer.layers["segmentation"].visible = False
    viewer.layers.selection.active = viewer.layers["shard map 8_8_40 (shard)"]
    viewer.reset_view()
    _wait(viewer, lambda: True)


def _two_large_bodies(v: Any, z: int) -> list[int]:
    plane = v.read_bodies((z, slice(None), slice(None)))
    import numpy as np

    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    return [int(i) for i in ids[np.argsort(counts)[::-1]]]


def _proofreading_session(viewer: Any, repo: Path) -> tuple[Any, Any]:
    """Dock the Proofreading panel and create a repository over the sample's segmentation; the controller."""
    from napari_shardscope.widgets.proofreading import ProofreadingPanel

    panel = _dock(viewer, "Proofreading")
    assert isinstance(panel, ProofreadingPanel)
    panel.create_repository(repo)
    c = panel.controller
    _wait(viewer, lambda: not panel.busy and c.state.connected)
    viewer.dims.set_current_step(0, 32)
    return panel, c


def proofreading(viewer: Any) -> None:
    """Two bodies merged, a third selected with its info and history; keys in the panel's tooltip."""
    panel, c = _proofreading_session(viewer, Path(tempfile.mkdtemp(prefix="shardscope-shot-")) / "repo")
    order = _two_large_bodies(c.version, 32)
    c.select(order[0])
    c.add_to_selection(order[1])
    c.merge()
    c.select(order[0])
    panel.isolate_check.setChecked(False)
    viewer.layers["image"].visible = True
    panel.session.body_layer.opacity = 0.55
    viewer.reset_view()
    _wait(viewer, lambda: True)


def versions(viewer: Any) -> None:
    """A merge on main, a cleave on branch alt, merged back; the DAG, a diff and an export shown."""
    _, c = _proofreading_session(viewer, Path(tempfile.mkdtemp(prefix="shardscope-shot-")) / "repo")
    from napari_shardscope.widgets.versions import VersionsPanel

    vp = _dock(viewer, "Versions")
    assert isinstance(vp, VersionsPanel)
    order = _two_large_bodies(c.version, 32)
    c.select(order[0])
    c.add_to_selection(order[1])
    c.merge()
    root = c.commit("merge two bodies on plane 32")
    c.branch("alt")
    c.select(order[2])
    c.add_to_selection(order[3])
    c.merge()
    alt = c.commit("alt: merge two more")
    c.branch(None, root.uuid)
    c.select(order[0])
    c.cleave(c.version.supervoxels(order[0])[:1])
    c.commit("main: cleave one supervoxel")
    c.merge_branch("alt")
    merged = c.commit("merge alt into main")
    c.diff(root.uuid, alt.uuid)
    vp.export(ref=merged.uuid)  # in a worker, with napari's progress bar; the result opens as a hidden layer
    _wait(viewer, lambda: c.last_export is not None and not vp.exporting)
    vp.select(alt.uuid)
    _hide_dock(viewer, "Proofreading")  # the picture is of the Versions panel
    viewer.reset_view()
    _wait(viewer, lambda: True)


def navigate(viewer: Any) -> None:
    """A to-do list walked (one item done with a note, one skipped), the next body gone to, the others dimmed."""
    _, c = _proofreading_session(viewer, Path(tempfile.mkdtemp(prefix="shardscope-shot-")) / "repo")
    from napari_shardscope.core.proofreading.highlight import HoverCache
    from napari_shardscope.widgets.navigator import NavigatorPanel

    nav = _dock(viewer, "Navigate")
    assert isinstance(nav, NavigatorPanel)
    order = _two_large_bodies(c.version, 32)
    todo = Path(tempfile.mkdtemp(prefix="shardscope-todo-")) / "assigned.csv"
    notes = ("check the tip", "", "", "split?")
    todo.write_text("body,note\n" + "".join(f"{b},{n}\n" for b, n in zip(order[:4], notes, strict=False)))
    nav.load(todo)
    c.todo.next()
    nav.note_edit.setText("merged the tip back")
    nav.mark_and_next("done")
    nav.mark_and_next("skipped")  # now on the third item: the view went there, the body is selected
    nav.canvas.set_dim_others(True)
    viewer.layers["image"].visible = True
    target = nav.canvas.last_target
    assert target is not None
    nav.canvas.show_hover(HoverCache().describe(c.version, target.focus, c.session.revision))
    _hide_dock(viewer, "Proofreading")  # the picture is of the Navigate panel
    _wait(viewer, lambda: True)


def _hide_dock(viewer: Any, title: str) -> None:
    from qtpy.QtWidgets import QDockWidget

    for dock in viewer.window._qt_window.findChildren(QDockWidget):
        if dock.windowTitle().startswith(title):
            dock.hide()


def selection_3d(viewer: Any) -> None:
    """Two bodies selected (yellow: the one merged into, cyan: the other), seen in 3-D among the others."""
    from napari_shardscope.widgets.shard_browser import camera

    panel, c = _proofreading_session(viewer, Path(tempfile.mkdtemp(prefix="shardscope-shot-")) / "repo")
    order = _two_large_bodies(c.version, 32)
    c.select(order[0])
    c.add_to_selection(order[1])
    viewer.layers["image"].visible = False
    panel.session.body_layer.opacity = 0.25
    viewer.dims.ndisplay = 3
    viewer.reset_view()
    cam = camera(viewer)
    cam.angles = (10, -35, 75)
    cam.zoom = cam.zoom * 0.6  # the rotated volume stays inside the canvas
    _wait(viewer, lambda: True)


def _close_notifications(viewer: Any) -> None:
    """Hide napari's toasts (e.g. the PyQt5 deprecation notice) so they do not cover the picture."""
    from napari._qt.dialogs.qt_notification import NapariQtNotification

    for toast in viewer.window._qt_window.findChildren(NapariQtNotification):
        toast.hide()
    _wait(viewer, lambda: True)


def _save_small_png(image: Any, path: Path) -> None:
    """Write an RGBA screenshot as a 256-colour PNG: a UI picture loses nothing visible and shrinks ~3x."""
    from PIL import Image

    Image.fromarray(image).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
        path, optimize=True)


PANELS: dict[str, Callable[[Any], None]] = {"shard_browser": shard_browser, "proofreading": proofreading,
                                             "versions": versions, "navigate": navigate,
                                             "selection_3d": selection_3d}


def file_name(name: str, window: str) -> str:
    return f"{name}.png" if window == "default" else f"{name}-{window}.png"


def render(name: str, out_dir: Path, window: str = "default") -> Path:
    """Open the sample in a fresh viewer of size ``window``, set up panel ``name``, save the window."""
    global _window
    _window = window
    os.environ.setdefault("NAPARI_ASYNC", "0")  # slice synchronously: the picture must show the data
    # fresh napari settings: the first-start window size, no geometry remembered from another run
    os.environ["NAPARI_CONFIG"] = str(Path(tempfile.mkdtemp(prefix="shardscope-napari-")) / "settings.yaml")
    import napari

    from napari_shardscope.napari_plugin.sample import sample_volumes
    from napari_shardscope.napari_plugin.viewer import add_volumes

    viewer = napari.Viewer(title="shardscope", show=True)
    try:
        size = WINDOWS[window]
        if size is not None:
            viewer.window.resize(*size)
        add_volumes(viewer, sample_volumes())
        PANELS[name](viewer)
        _close_notifications(viewer)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / file_name(name, window)
        image = viewer.screenshot(canvas_only=False, flash=False)
        _save_small_png(image, path)
        return path
    finally:
        viewer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("panels", nargs="*", help=f"panels to render, of {sorted(PANELS)} (default: all)")
    parser.add_argument("--window", action="append", choices=sorted(WINDOWS),
                        help="window size(s) to render (repeatable; default: default and small)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images",
                        help="output directory (default: docs/images)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.panels) - set(PANELS))
    if unknown:
        parser.error(f"unknown panel(s) {unknown}; choose from {sorted(PANELS)}")
    # The repositories, to-do lists and napari settings the panels make go in one directory, removed at the end
    # (they were left in the system's temporary directory, four repositories a run).
    with tempfile.TemporaryDirectory(prefix="shardscope-screenshots-") as scratch:
        tempfile.tempdir = scratch
        try:
            for window in args.window or ["default", "small"]:
                for name in args.panels or list(PANELS):
                    print(render(name, args.out, window))
        finally:
            tempfile.tempdir = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
