"""Show volumes in a napari viewer: the code behind ``shardscope open`` and ``shardscope demo``.

napari (and Qt) are imported inside the functions, so importing this module — and running the
inspection commands of the CLI — works on machines without Qt.

Slicing mode: napari's asynchronous slicing (``NAPARI_ASYNC=1``) moves the chunk reads of a
slice change off the GUI thread, so the window keeps repainting and accepting input while a
remote or slow volume loads; the new plane appears when its chunks arrive. For local volumes it
costs key-to-frame time instead: with the next chunk layer prefetched a synchronous step reads
from the cache in ~1-2 ms, and the hop to napari's slicing thread and back through the event
loop added ~5-15 ms per step (``bench/browse.py``, the async rows). So by default (:func:`slicing_mode`)
interactive sessions slice asynchronously when a volume is remote and synchronously when all are
local; ``--sync`` / ``--async`` force either. The mode is set through the environment variable
before napari is imported — never the persisted napari setting, which would change the user's
other napari sessions. Screenshots always slice synchronously so the frame written to disk shows
the data, not an empty canvas.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.volumes import Volume
from napari_shardscope.napari_plugin.layers import volume_layer_data


def check_display() -> None:
    """Fail with a clear message where Qt would abort the process for want of a display.

    On Linux without ``DISPLAY``/``WAYLAND_DISPLAY`` Qt's xcb plugin aborts (exit 134, no
    message). ``QT_QPA_PLATFORM=offscreen`` is not a way out: napari's OpenGL canvas crashes
    there. ``xvfb-run -a`` provides a virtual display.
    """
    if not sys.platform.startswith("linux"):
        return
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    raise ShardscopeError("no display (DISPLAY is not set); on a headless machine run the command "
                          "under a virtual display: xvfb-run -a shardscope ...")


def order_for_display(volumes: Sequence[Volume]) -> list[Volume]:
    """Images first, segmentations on top of them, so labels are not hidden under an opaque image."""
    return sorted(volumes, key=lambda v: 0 if v.kind == "image" else 1)


def add_volumes(viewer: Any, volumes: Sequence[Volume]) -> list[Any]:
    """Add one layer per volume (images below labels) to ``viewer``; return the new layers."""
    from napari.layers import Layer

    layers = []
    for volume in order_for_display(volumes):
        data, kwargs, layer_type = volume_layer_data(volume)
        if "channel_axis" in kwargs:
            added = getattr(viewer, f"add_{layer_type}")(data, **kwargs)
            layers.extend(added if isinstance(added, list) else [added])
            continue
        layer = Layer.create(data, kwargs, layer_type)
        viewer.add_layer(layer)
        layers.append(layer)
    return layers


#: Window size of ``--screenshot`` pictures (pixels).
SCREENSHOT_SIZE = (1600, 1000)

#: The plugin's panels docked by ``shardscope open`` / ``demo`` (display names in napari.yaml).
DOCKED_WIDGETS = ("Shard browser", "Proofreading", "Versions")


def slicing_mode(volumes: Sequence[Volume], async_slicing: bool | None) -> bool:
    """Whether to slice asynchronously: as asked, or (``None``) when any volume is remote."""
    if async_slicing is not None:
        return async_slicing
    from napari_shardscope.core.volumes import is_remote

    return any(is_remote(v.url) for v in volumes)


def show_volumes(volumes: Sequence[Volume], *, screenshot: Path | None = None, async_slicing: bool | None = None,
                 title: str = "shardscope", widgets: Sequence[str] = DOCKED_WIDGETS,
                 prepare: Callable[[Any, list[Any]], None] | None = None) -> int:
    """Open a napari window with ``volumes`` and the plugin's ``widgets`` docked (as the Plugins menu
    would); with ``screenshot``, write one frame and exit. ``prepare(viewer, layers)`` runs once the
    layers are in (e.g. to go to the position of a Neuroglancer state).

    Returns the process exit code (0).
    """
    check_display()
    os.environ["NAPARI_ASYNC"] = "1" if slicing_mode(volumes, async_slicing) and screenshot is None else "0"
    import napari

    viewer = napari.Viewer(title=title, show=True)
    layers = add_volumes(viewer, volumes)
    docks = [viewer.window.add_plugin_dock_widget("napari-shardscope", name, tabify=i > 0)[0]
             for i, name in enumerate(widgets)]  # one dock area, one tab per panel: the canvas keeps its room
    if docks:  # the first panel's tab in front, once the tabs exist
        from qtpy.QtWidgets import QApplication

        QApplication.processEvents()
        docks[0].show()
        docks[0].raise_()
    if prepare is not None:
        prepare(viewer, layers)
    if screenshot is None:
        napari.run()
        return 0
    try:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        from qtpy.QtWidgets import QApplication

        # the whole window at a fixed size: the data with the panels beside it, as a user sees them
        viewer.window.resize(*SCREENSHOT_SIZE)
        QApplication.processEvents()
        if prepare is None:
            viewer.reset_view()
        _hide_notifications(viewer)
        QApplication.processEvents()
        viewer.screenshot(path=str(screenshot), canvas_only=False, flash=False)
    finally:
        viewer.close()
    return 0


def _hide_notifications(viewer: Any) -> None:
    """Hide napari's toasts (e.g. its PyQt5 deprecation notice) so they do not cover a screenshot."""
    try:
        from napari._qt.dialogs.qt_notification import NapariQtNotification
    except ImportError:  # private module: a napari without it has nothing to hide here
        return
    for toast in viewer.window._qt_window.findChildren(NapariQtNotification):
        toast.hide()
