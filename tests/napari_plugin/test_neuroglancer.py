"""napari → Neuroglancer state → napari: the same layers, position (within half a voxel) and zoom.

The state built from one viewer is opened in a second viewer exactly as a pasted link is (its sources
are the first viewer's loopback server: the round trip goes through HTTP, TensorStore and the server).
The round trip of a version (merges, selected bodies) is in ``test_neuroglancer_annotations.py``, with
the version's synapses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.volumes import open_volumes
from napari_shardscope.napari_plugin.neuroglancer import server_for, stop_server
from napari_shardscope.napari_plugin.viewer import add_volumes
from tests.realdata import REALDATA


def assert_same_view(first: Any, second: Any, voxel: tuple[float, float, float]) -> None:
    a = np.asarray(first.dims.point[-3:])
    b = np.asarray(second.dims.point[-3:])
    assert np.all(np.abs(a - b) <= np.asarray(voxel) / 2 + 1e-6), (a, b)
    assert second.camera.zoom == pytest.approx(first.camera.zoom, rel=1e-6)


@pytest.mark.qt_binding_lane
@pytest.mark.realdata
def test_file_menu_show_and_open_neuroglancer_link(make_napari_viewer: Any, qtbot: Any) -> None:
    """The menu actions as a user clicks them: the link lands on the clipboard, and pasting it opens the view.

    Also the dataset round trip: the same layer (name, kind, scale, translate), position and zoom (a position
    with a different voxel count on each axis, so that axes swapped on the way would show).
    """
    from napari._app_model import get_app_model  # napari's documented accessor
    from qtpy.QtWidgets import QApplication, QInputDialog

    from napari_shardscope.core.serve.states import load_state

    first = make_napari_viewer(show=True)
    try:
        layers = add_volumes(first, open_volumes(str(REALDATA / "igneous_pinky_sharded")))
        layer = layers[0]
        vs = tuple(float(v) for v in layer.scale[-3:])
        tr = tuple(float(t) for t in layer.translate[-3:])
        first.dims.point = tuple(t + i * v for t, i, v in zip(tr, (20, 100, 90), vs, strict=True))
        first.camera.zoom = 0.37
        app = get_app_model()
        titles = [str(item.command.title) for item in app.menus.get_menu("napari/file/io_utilities")
                  if getattr(item, "command", None) is not None]
        for title in ("Show in Neuroglancer (copy link)", "Show in Neuroglancer (open in browser)",
                      "Open Neuroglancer link..."):
            assert any(t.startswith(title) for t in titles), (title, titles)
        clipboard = QApplication.clipboard()
        clipboard.setText("")
        app.commands.execute_command("napari-shardscope.show_in_neuroglancer").result()
        qtbot.waitUntil(lambda: clipboard.text().startswith(server_for(first).client_url + "#!"), timeout=30000)
        link = clipboard.text()
        second = make_napari_viewer(show=True)  # the newest viewer is the one menu commands act on
        app.commands.execute_command("napari-shardscope.open_neuroglancer_link").result()
        (dialog,) = [d for d in QApplication.topLevelWidgets() if isinstance(d, QInputDialog) and d.isVisible()]
        dialog.setTextValue(link)
        dialog.accept()
        qtbot.waitUntil(lambda: len(second.layers) == 1, timeout=30000)
        state = load_state(link)
        assert [(lay["name"], lay["type"]) for lay in state["layers"]] == [(layer.name, "segmentation")]
        assert [(lay.name, type(lay).__name__) for lay in second.layers] == [(layer.name, "Labels")]
        np.testing.assert_allclose(second.layers[0].scale[-3:], layer.scale[-3:])
        np.testing.assert_allclose(second.layers[0].translate[-3:], layer.translate[-3:])
        assert_same_view(first, second, vs)
    finally:
        stop_server(first)


def test_server_stops_with_the_viewer(make_napari_viewer: Any, qtbot: Any) -> None:
    import http.client

    viewer = make_napari_viewer(show=True)
    server = server_for(viewer)
    assert server.running and server_for(viewer) is server
    viewer.close()
    qtbot.waitUntil(lambda: not server.running, timeout=10000)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    with pytest.raises(OSError):
        conn.request("GET", f"/v/{server.token}/")
        conn.getresponse()
