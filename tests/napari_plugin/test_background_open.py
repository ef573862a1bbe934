"""Opening a URL in napari never waits on the GUI thread (issue 14).

A loopback server holds every request at a gate the test opens, so "the window kept working
while the host had not answered" is checked by state, not by timing: ``viewer.open`` has returned
and the Qt event loop runs while the server still holds the request; the layers appear once the
gate opens. Cancel is the Cancel button of napari's activity dock; a failure is a napari error
notification naming the URL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from napari.utils.notifications import NotificationSeverity, notification_manager
from qtpy.QtCore import Qt

from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import open_volume
from napari_shardscope.napari_plugin.background import open_in_background, pending_opens
from tests.http_range_server import RangeServer
from tests.volume_cases import sample  # noqa: F401  (fixture)

WAIT_MS = 30_000


@pytest.fixture
def gated(sample: SampleDataset) -> Iterator[tuple[RangeServer, threading.Event]]:  # noqa: F811
    gate = threading.Event()
    server = RangeServer(sample.root, gate=gate)
    try:
        yield server, gate
    finally:
        server.close()


def _progress_bars(viewer: Any) -> list[Any]:
    from napari._qt.widgets.qt_progress_bar import QtLabeledProgressBar

    return [b for b in viewer.window._qt_window.findChildren(QtLabeledProgressBar) if b.isVisible()
            or b.progress is not None]


def _errors_naming(url: str) -> list[Any]:
    return [r for r in notification_manager.records
            if r.severity == NotificationSeverity.ERROR and url in str(r.message)]


def test_url_opens_while_the_window_keeps_running(make_napari_viewer: Any, qtbot: Any, sample: SampleDataset,  # noqa: F811
                                                   gated: tuple[RangeServer, threading.Event]) -> None:
    server, gate = gated
    url = server.url + sample.segmentation.name
    viewer = make_napari_viewer()
    viewer.open(url, plugin="napari-shardscope")
    # viewer.open has returned and the event loop runs, while the host has not answered yet
    qtbot.waitUntil(lambda: server.held > 0, timeout=WAIT_MS)
    assert len(viewer.layers) == 0
    assert [op.urls for op in pending_opens()] == [[url]]
    assert any("Opening" in (b.progress.desc or "") for b in _progress_bars(viewer) if b.progress is not None)

    gate.set()
    qtbot.waitUntil(lambda: len(viewer.layers) == 1 and not pending_opens(), timeout=WAIT_MS)
    layer = viewer.layers[0]
    expected = open_volume(sample.segmentation)
    assert [tuple(a.shape) for a in layer.data] == [tuple(lv.array.shape) for lv in expected.levels]
    np.testing.assert_array_equal(np.asarray(layer.data[-1]), expected.levels[-1].array.read())


def test_cancel_in_the_activity_dock_drops_the_open(make_napari_viewer: Any, qtbot: Any,
                                                    sample: SampleDataset,  # noqa: F811
                                                    gated: tuple[RangeServer, threading.Event]) -> None:
    server, gate = gated
    url = server.url + sample.image.name
    viewer = make_napari_viewer(show=True)
    viewer.open(url, plugin="napari-shardscope")
    qtbot.waitUntil(lambda: server.held > 0, timeout=WAIT_MS)
    viewer.window._status_bar._toggle_activity_dock(True)
    bars = [b for b in _progress_bars(viewer) if b.progress is not None and (b.progress.desc or "").startswith(
        "Opening …/" + sample.image.name)]
    assert len(bars) == 1 and bars[0].cancel_button.isVisible()
    qtbot.mouseClick(bars[0].cancel_button, Qt.MouseButton.LeftButton)

    gate.set()  # the host answers after all: what arrives is dropped
    qtbot.waitUntil(lambda: not pending_opens(), timeout=WAIT_MS)
    qtbot.wait(50)  # let queued signals of the finished worker run
    assert len(viewer.layers) == 0
    assert any("cancelled" in str(r.message) and url in str(r.message) for r in notification_manager.records)
    assert server.requests, "the open had reached the host"


def test_failed_open_is_a_notification(make_napari_viewer: Any, qtbot: Any, sample: SampleDataset,  # noqa: F811
                                       gated: tuple[RangeServer, threading.Event]) -> None:
    server, gate = gated
    gate.set()
    url = server.url + "no-such-volume"
    viewer = make_napari_viewer()
    viewer.open(url, plugin="napari-shardscope")  # no exception reaches the caller
    qtbot.waitUntil(lambda: not pending_opens(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: bool(_errors_naming(url)), timeout=WAIT_MS)
    (record,) = _errors_naming(url)
    assert "not_found error" in str(record.message)
    assert str(record.message).count(url) == 1
    assert len(viewer.layers) == 0


def test_open_in_background_from_a_notebook(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                            gated: tuple[RangeServer, threading.Event]) -> None:
    server, gate = gated
    gate.set()
    viewer = make_napari_viewer()
    op = open_in_background(viewer, [server.url + sample.image.name, server.url + sample.segmentation.name])
    assert op.wait(WAIT_MS / 1000)
    assert op.error is None and not op.cancelled
    assert [layer.name for layer in op.layers] == [layer.name for layer in viewer.layers]
    assert {type(layer).__name__ for layer in viewer.layers} == {"Image", "Labels"}


@pytest.mark.qt_binding_lane
def test_file_menu_open_volume_url(make_napari_viewer: Any, qtbot: Any, sample: SampleDataset,  # noqa: F811
                                   gated: tuple[RangeServer, threading.Event]) -> None:
    from napari._app_model import get_app_model  # napari's documented accessor
    from qtpy.QtWidgets import QApplication, QInputDialog

    server, gate = gated
    gate.set()
    viewer = make_napari_viewer(show=True)
    titles = [str(item.command.title) for item in get_app_model().menus.get_menu("napari/file/io_utilities")
              if getattr(item, "command", None) is not None]
    assert any(t.startswith("Open volume URL") for t in titles)
    get_app_model().commands.execute_command("napari-shardscope.open_url").result()
    (dialog,) = [d for d in QApplication.topLevelWidgets() if isinstance(d, QInputDialog) and d.isVisible()]
    dialog.setTextValue(server.url + sample.segmentation.name)
    dialog.accept()
    qtbot.waitUntil(lambda: len(viewer.layers) == 1 and not pending_opens(), timeout=WAIT_MS)
    assert type(viewer.layers[0]).__name__ == "Labels"
