"""napari's side of chunks that do not read: a notification, and a mark on the layers showing the volume.

:class:`~napari_shardscope.napari_plugin.shown.DamageLog` decides *when* to report (once per volume,
then at most once per interval); this module decides *how* napari shows a report:

* a napari warning notification with the report's text (the volume, how many reads failed, the file
  or key and the error). When napari's warning hook is installed (``napari.run()`` installs it) the
  report's :class:`~.shown.DamagedChunkWarning` already becomes that notification, so none is added;
  otherwise (a notebook, a script's viewer, tests) it is dispatched here;
* on every layer of every open viewer that shows the volume (its data are the volume's
  :class:`~.shown.ShownArray` views): ``metadata["shardscope"]["unreadable"]`` holds the counts and the
  first and latest failure, and the layer's name ends with :data:`MARK` — so the layer list says
  which layer is not what its canvas shows, after the notification has gone. Layers are changed on
  the GUI thread (reports come from napari's slicing threads).

napari is imported inside the functions: :mod:`.layers` attaches this to every volume it wraps,
also where no viewer exists (a script reading layer data), which then only gets the warning.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any

from napari_shardscope.napari_plugin.shown import DamageLog, DamageReport, ShownArray

#: Appended to the name of a layer some of whose chunks could not be read.
MARK = " ⚠ unreadable chunks"
#: Key of the layer-metadata record of unreadable chunks (under the plugin's metadata entry).
UNREADABLE_KEY = "unreadable"
#: A report that comes while napari is still making the layer (it reads a first plane before the layer is in
#: the viewer) marks it when it arrives: looked for again this many times, this many milliseconds apart.
MARK_RETRIES = 50
MARK_RETRY_MS = 100


def attach(damage: DamageLog, metadata_key: str) -> None:
    """Show ``damage``'s reports in napari (see the module docstring)."""
    damage.sinks.append(partial(_on_report, damage, metadata_key))


def _on_report(damage: DamageLog, metadata_key: str, report: DamageReport) -> None:
    try:
        from superqt.utils import ensure_main_thread
    except ImportError:  # no GUI installed: the warning is all there is
        return
    _notify(report)
    ensure_main_thread(_mark_layers)(damage, metadata_key, report)


def _notify(report: DamageReport) -> None:
    from napari.utils.notifications import Notification, NotificationSeverity, notification_manager

    if warnings.showwarning == notification_manager.receive_warning:
        return  # napari's hook turns the DamagedChunkWarning into this notification already
    notification_manager.dispatch(Notification(report.text, severity=NotificationSeverity.WARNING))


def layers_showing(damage: DamageLog) -> list[Any]:
    """The layers of every open viewer whose data are views of the volume ``damage`` logs."""
    from napari import Viewer

    found = []
    for viewer in list(Viewer._instances):
        for layer in viewer.layers:
            data = layer.data if getattr(layer, "multiscale", False) else [layer.data]
            if any(isinstance(a, ShownArray) and a.damage is damage for a in data):
                found.append(layer)
    return found


def _mark_layers(damage: DamageLog, metadata_key: str, report: DamageReport, tries: int = MARK_RETRIES) -> None:
    layers = layers_showing(damage)
    if not layers and tries > 0:  # napari is still making the layer: mark it once it is in a viewer
        from qtpy.QtCore import QTimer

        QTimer.singleShot(MARK_RETRY_MS, partial(_mark_layers, damage, metadata_key, report, tries - 1))
        return
    for layer in layers:
        record = layer.metadata.setdefault(metadata_key, {})
        record[UNREADABLE_KEY] = {"failures": report.failures, "first": report.first, "latest": report.latest,
                                  "drawn": report.drawn}
        if not layer.name.endswith(MARK):
            layer.name = f"{layer.name}{MARK}"
