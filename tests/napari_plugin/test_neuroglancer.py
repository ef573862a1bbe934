"""napari → Neuroglancer state → napari: the same layers, position (within half a voxel) and zoom.

The state built from one viewer is opened in a second viewer exactly as a pasted link is (its sources
are the first viewer's loopback server: the round trip goes through HTTP, TensorStore and the server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.serve.ngstate import state_url
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.core.volumes import open_volumes
from napari_shardscope.napari_plugin.neuroglancer import open_state, server_for, stop_server, view_state
from napari_shardscope.napari_plugin.viewer import add_volumes
from napari_shardscope.widgets.session import session_for
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.realdata import REALDATA


def reopen(make_napari_viewer: Any, first: Any) -> tuple[Any, dict[str, Any]]:
    state = view_state(first)
    second = make_napari_viewer()
    op = open_state(second, state_url(server_for(first).client_url, state))
    assert op.wait(60), "opening the state did not finish"
    assert op.error is None, op.error
    return second, state


def assert_same_view(first: Any, second: Any, voxel: tuple[float, float, float]) -> None:
    a = np.asarray(first.dims.point[-3:])
    b = np.asarray(second.dims.point[-3:])
    assert np.all(np.abs(a - b) <= np.asarray(voxel) / 2 + 1e-6), (a, b)
    assert second.camera.zoom == pytest.approx(first.camera.zoom, rel=1e-6)


def test_version_round_trip_keeps_selected_bodies(make_napari_viewer: Any, tmp_path: Path) -> None:
    base = voronoi_supervoxels((6, 48, 56), 16, seed=4)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 16, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    create_labelmap(repo, "seg", tmp_path / "seg", block=16)
    repo.close()
    first = make_napari_viewer()
    try:
        c = session_for(first).controller
        v = c.connect(tmp_path / "repo")
        svs = [int(s) for s in np.unique(base[3])]
        v.merge(svs[0], [svs[1]])
        c.select(svs[0])
        c.add_to_selection(svs[2])
        first.dims.point = (3 * 40.0, 20 * 4.0, 30 * 4.0)
        first.camera.zoom = 1.5
        second, state = reopen(make_napari_viewer, first)
        seg = [lay for lay in state["layers"] if lay["type"] == "segmentation"]
        assert len(seg) == 1 and v.uuid in seg[0]["source"] and seg[0]["segments"] == [str(svs[0]), str(svs[2])]
        shown = [lay for lay in second.layers if type(lay).__name__ == "Labels"]
        assert [lay.name for lay in shown] == [seg[0]["name"]]
        assert shown[0].metadata["shardscope"]["segments"] == [svs[0], svs[2]]
        # the second viewer reads the version's bodies through the server: the merge shows
        plane = np.asarray(shown[0].data[0][3] if shown[0].multiscale else shown[0].data[3])
        np.testing.assert_array_equal(plane, v.read_bodies(np.s_[3], 0))
        assert_same_view(first, second, (40.0, 4.0, 4.0))
    finally:
        stop_server(first)
        session_for(first).controller.disconnect()


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
