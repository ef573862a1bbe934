"""napari ↔ Neuroglancer: "Show in Neuroglancer" and "Open Neuroglancer link…".

Thin glue over :mod:`napari_shardscope.core.serve`: the viewer's layers become mounts of one
loopback server per viewer (datasets as stored; the proofreading session's version as computed
precomputed, with the selected bodies as ``segments``), its camera a :class:`ViewDescription`; a
pasted state is parsed by core, its readable sources opened off the GUI thread, then the position,
zoom and selected segments applied. The server runs on its own thread and stops with the viewer.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from typing import Any

from napari.viewer import Viewer

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.serve.handoff import ServedLayer, default_view, mount_dataset, mount_version
from napari_shardscope.core.serve.ngstate import ParsedState, build_state, parse_state, state_from_text, state_url
from napari_shardscope.core.serve.server import ShardServer
from napari_shardscope.core.volumes import Volume
from napari_shardscope.napari_plugin.layers import METADATA_KEY

#: Layer metadata key of the proofreading session's layers (see widgets/session.py).
PROOFREADING_KEY = "shardscope_proofreading"
_SERVERS: weakref.WeakKeyDictionary[Any, ShardServer] = weakref.WeakKeyDictionary()


def server_for(viewer: Any) -> ShardServer:
    """The viewer's server (started on first use; stopped when the viewer's window closes)."""
    server = _SERVERS.get(viewer)
    if server is None or not server.running:
        server = ShardServer()
        _SERVERS[viewer] = server
        with contextlib.suppress(AttributeError):  # no Qt window: the daemon thread ends with Python
            viewer.window._qt_window.destroyed.connect(lambda *_: server.stop())
    return server


def stop_server(viewer: Any) -> None:
    server = _SERVERS.pop(viewer, None)
    if server is not None:
        server.stop()


def _served_layers(viewer: Any, server: ShardServer) -> list[ServedLayer]:
    out: list[ServedLayer] = []
    seen: set[str] = set()
    for layer in viewer.layers:
        if not layer.visible:
            continue
        meta = getattr(layer, "metadata", {}) or {}
        proof = meta.get(PROOFREADING_KEY)
        if isinstance(proof, dict) and proof.get("version"):
            from napari_shardscope.widgets.session import session_for

            controller = session_for(viewer).controller
            labelmap = controller.session.labelmap
            if labelmap is None or str(proof["version"]) in seen:
                continue
            seen.add(str(proof["version"]))
            out.append(mount_version(server, labelmap, str(proof["version"]), name=layer.name,
                                     segments=controller.selected))
            continue
        info = meta.get(METADATA_KEY)
        if isinstance(info, dict) and info.get("url"):
            url = str(info["url"])
            if url in seen:
                continue
            seen.add(url)
            served = mount_dataset(server, url, name=layer.name)
            segments = tuple(int(s) for s in info.get("segments", ()))
            if segments:
                from dataclasses import replace

                served = replace(served, layer=replace(served.layer, segments=segments))
            out.append(served)
    out.sort(key=lambda s: 0 if s.layer.kind == "image" else 1)
    return out


def view_state(viewer: Any, server: ShardServer | None = None) -> dict[str, Any]:
    """The Neuroglancer state of what ``viewer`` shows (its shardscope layers, position, zoom)."""
    server = server or server_for(viewer)
    layers = _served_layers(viewer, server)
    if not layers:
        raise ArgumentError("no shardscope layer is visible: open a volume or check out a version first")
    point = tuple(float(p) for p in viewer.dims.point[-3:])
    layout = "3d" if viewer.dims.ndisplay == 3 else "xy"
    view = default_view(layers, position=(point[0], point[1], point[2]), zoom=float(viewer.camera.zoom),
                        layout=layout)
    return build_state(view)


def neuroglancer_url(viewer: Any) -> str:
    """A link that opens the viewer's view in Neuroglancer, served by the viewer's loopback server."""
    server = server_for(viewer)
    return state_url(server.client_url, view_state(viewer, server))


def show_in_neuroglancer(viewer: Viewer) -> str:
    """Layers › Show in Neuroglancer: copy the link to the clipboard and say so; returns the link."""
    from napari.utils.notifications import show_info
    from qtpy.QtWidgets import QApplication

    url = neuroglancer_url(viewer)
    clipboard = QApplication.clipboard()
    if clipboard is not None:
        clipboard.setText(url)
    show_info("Neuroglancer link copied to the clipboard (served from this napari until it closes)")
    return url


def open_in_neuroglancer(viewer: Viewer) -> str:
    """Layers › Open in Neuroglancer: open the link in the system browser; returns the link."""
    import webbrowser

    url = neuroglancer_url(viewer)
    webbrowser.open(url)
    return url


# -- the other way -------------------------------------------------------------------------------


def _location(url: str) -> str:
    """A source URL without Neuroglancer's format prefix or suffix and trailing slash (for matching)."""
    text = url.split("|", 1)[0]
    _, sep, rest = text.partition("://")
    if sep and "://" in rest:
        text = rest
    return text.rstrip("/")


def name_layers(parsed: ParsedState, layers: Sequence[Any]) -> None:
    """Give each layer the state's name of the source it came from (when one source gave one layer)."""
    urls = [str(lay.metadata.get(METADATA_KEY, {}).get("url", "")).rstrip("/") for lay in layers]
    for layer, url in zip(layers, urls, strict=True):
        if not url or urls.count(url) != 1:
            continue
        for source in parsed.openable:
            if source.open_url is not None and _location(source.open_url) == url:
                layer.name = source.layer
                break


def apply_state(viewer: Any, parsed: ParsedState, layers: Sequence[Any]) -> None:
    """Name the layers, set position, zoom and selected segments of a parsed state (its layers added)."""
    name_layers(parsed, layers)
    ref = next((lay for lay in layers if isinstance(lay.metadata.get(METADATA_KEY), dict)), None)
    position = parsed.position
    if ref is not None:
        meta = ref.metadata[METADATA_KEY]
        fmt = str(meta.get("format", ""))
        position = parsed.position_for(fmt, ome=fmt.startswith("zarr") and meta.get("unit") is not None) or position
    if position is not None:
        point = list(viewer.dims.point)
        point[-3:] = position
        viewer.dims.point = point
        viewer.camera.center = tuple(position[-3:]) if viewer.dims.ndisplay == 3 else tuple(position[-2:])
    if parsed.zoom is not None:
        viewer.camera.zoom = parsed.zoom
    for layer in layers:
        ids = parsed.segments.get(layer.name)
        if ids and hasattr(layer, "selected_label"):
            layer.metadata.setdefault(METADATA_KEY, {})["segments"] = list(ids)
            layer.selected_label = ids[0]


def open_state(viewer: Any, text: str) -> Any:
    """Open a Neuroglancer link or state JSON in ``viewer`` off the GUI thread; returns the background open.

    Sources the project cannot read are named in a notification, never dropped silently.
    """
    from napari.utils.notifications import show_warning

    from napari_shardscope.napari_plugin.background import BackgroundOpen
    from napari_shardscope.napari_plugin.viewer import add_volumes

    parsed = parse_state(state_from_text(text))
    skipped = [f"{s.layer} ({s.url or 'no source'}): {s.reason}" for s in parsed.not_opened]
    if skipped or parsed.problems:
        show_warning("Not opened from the Neuroglancer state: " + "; ".join([*skipped, *parsed.problems]))
    urls = [s.open_url for s in parsed.openable if s.open_url is not None]
    if not urls:
        raise ArgumentError("the Neuroglancer state has no source the project can open")

    def add(v: Any, volumes: Sequence[Volume]) -> list[Any]:
        added = add_volumes(v, volumes)
        apply_state(v, parsed, added)
        return added

    return BackgroundOpen(viewer, urls, add)


PROMPT = "A Neuroglancer link (https://…#!{…}) or state JSON:"


def ask_and_open_state(viewer: Viewer) -> Any:
    """Layers › Open Neuroglancer link…: ask for a link (non-blocking dialog), then open it."""
    from napari.utils.notifications import show_error
    from qtpy.QtWidgets import QInputDialog, QLineEdit

    dialog = QInputDialog()
    dialog.setWindowTitle("Open Neuroglancer link")
    dialog.setLabelText(PROMPT)
    dialog.setTextEchoMode(QLineEdit.EchoMode.Normal)
    dialog.resize(640, dialog.height())

    def chosen(text: str) -> None:
        if text.strip():
            try:
                open_state(viewer, text)
            except Exception as exc:
                show_error(f"napari-shardscope: {exc}")

    dialog.textValueSelected.connect(chosen)
    dialog.finished.connect(lambda _r: _DIALOGS.remove(dialog) if dialog in _DIALOGS else None)
    _DIALOGS.append(dialog)
    dialog.open()
    return dialog


_DIALOGS: list[Any] = []
