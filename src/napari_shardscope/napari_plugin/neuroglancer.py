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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from napari.viewer import Viewer

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.serve.annotations import mount_version_annotations
from napari_shardscope.core.serve.handoff import (
    LAYER_ORDER,
    ServedLayer,
    default_view,
    mount_dataset,
    mount_version,
)
from napari_shardscope.core.serve.ngstate import ParsedState, build_state, parse_state
from napari_shardscope.core.serve.server import ShardServer
from napari_shardscope.core.serve.states import load_state
from napari_shardscope.core.volumes import Volume
from napari_shardscope.napari_plugin.layers import METADATA_KEY

#: Layer metadata key of the proofreading session's layers (see widgets/session.py).
PROOFREADING_KEY = "shardscope_proofreading"
_SERVERS: weakref.WeakKeyDictionary[Any, ShardServer] = weakref.WeakKeyDictionary()


def _real(viewer: Any) -> Any:
    """The viewer behind the proxy napari hands to commands (one server and session per real viewer)."""
    return getattr(viewer, "__wrapped__", viewer)


def server_for(viewer: Any) -> ShardServer:
    """The viewer's server (started on first use; stopped when the viewer's window closes)."""
    viewer = _real(viewer)
    server = _SERVERS.get(viewer)
    if server is None or not server.running:
        server = ShardServer()
        _SERVERS[viewer] = server
        with contextlib.suppress(AttributeError):  # no Qt window: the daemon thread ends with Python
            viewer.window._qt_window.destroyed.connect(lambda *_: server.stop())
    return server


def stop_server(viewer: Any) -> None:
    viewer = _real(viewer)
    server = _SERVERS.pop(viewer, None)
    if server is not None:
        server.stop()


@dataclass(frozen=True)
class _Wanted:
    """One layer to hand over, read from the viewer on the GUI thread (mounting happens off it)."""

    name: str
    url: str | None = None
    labelmap: Any = None
    version: str | None = None
    segments: tuple[int, ...] = ()


@dataclass(frozen=True)
class ViewSnapshot:
    """What the viewer shows, taken on the GUI thread: layers, position (z, y, x), zoom, layout."""

    layers: tuple[_Wanted, ...]
    position: tuple[float, float, float]
    zoom: float
    layout: str


def snapshot(viewer: Any) -> ViewSnapshot:
    """Read the viewer's visible shardscope layers and camera (cheap: no I/O)."""
    viewer = _real(viewer)
    wanted: list[_Wanted] = []
    seen: set[str] = set()
    for layer in viewer.layers:
        if not layer.visible:
            continue
        meta = getattr(layer, "metadata", {}) or {}
        proof = meta.get(PROOFREADING_KEY)
        if isinstance(proof, dict) and proof.get("version"):
            controller = proof.get("controller")  # the proofreading session's (widgets put it there)
            labelmap = getattr(getattr(controller, "session", None), "labelmap", None)
            if labelmap is None or str(proof["version"]) in seen:
                continue
            seen.add(str(proof["version"]))
            wanted.append(_Wanted(layer.name, labelmap=labelmap, version=str(proof["version"]),
                                  segments=tuple(int(b) for b in getattr(controller, "selected", ()))))
            continue
        info = meta.get(METADATA_KEY)
        if isinstance(info, dict) and info.get("url") and str(info["url"]) not in seen:
            seen.add(str(info["url"]))
            wanted.append(_Wanted(layer.name, url=str(info["url"]),
                                  segments=tuple(int(s) for s in info.get("segments", ()))))
    if not wanted:
        raise ArgumentError("no shardscope layer is visible: open a volume or check out a version first")
    point = tuple(float(p) for p in viewer.dims.point[-3:])
    return ViewSnapshot(tuple(wanted), (point[0], point[1], point[2]), float(viewer.camera.zoom),
                        "3d" if viewer.dims.ndisplay == 3 else "xy")


def state_of(snap: ViewSnapshot, server: ShardServer) -> dict[str, Any]:
    """Mount what ``snap`` shows on ``server`` (reads metadata: run it off the GUI thread) and build the state."""
    served: list[ServedLayer] = []
    for w in snap.layers:
        if w.labelmap is not None and w.version is not None:
            seg = mount_version(server, w.labelmap, w.version, name=w.name, segments=w.segments)
            served.append(seg)  # and the version's annotations (synapses), linked to it
            served.extend(replace(seg, layer=view) for view in mount_version_annotations(
                server, w.labelmap, w.version, segmentation_layer=seg.layer.name))
        elif w.url is not None:
            got = mount_dataset(server, w.url, name=w.name)
            if w.segments:
                got = replace(got, layer=replace(got.layer, segments=w.segments))
            served.append(got)
    served.sort(key=lambda s: LAYER_ORDER[s.layer.kind])
    return build_state(default_view(served, position=snap.position, zoom=snap.zoom, layout=snap.layout))


def view_state(viewer: Any, server: ShardServer | None = None) -> dict[str, Any]:
    """The Neuroglancer state of what ``viewer`` shows (blocking; :func:`request_link` does it off the GUI thread)."""
    return state_of(snapshot(viewer), server or server_for(viewer))


def neuroglancer_url(viewer: Any) -> str:
    """A link that opens the viewer's view in Neuroglancer, served by the viewer's loopback server."""
    server = server_for(viewer)
    return server.state_link(view_state(viewer, server))


def request_link(viewer: Any, deliver: Callable[[str], object]) -> Any:
    """Build the viewer's link in a worker thread, then call ``deliver(url)`` on the GUI thread.

    Returns the started worker (its ``finished`` signal fires after delivery or a reported error).
    """
    from napari.qt.threading import create_worker
    from napari.utils.notifications import show_error

    viewer = _real(viewer)
    snap = snapshot(viewer)  # on the GUI thread: layers and camera
    server = server_for(viewer)
    def build() -> str:
        server.client_root()  # no neuroglancer package: an error now, not a 404 in the browser
        return server.state_link(state_of(snap, server))

    def forget() -> None:
        if worker in _WORKERS:
            _WORKERS.remove(worker)

    def report(exc: Exception) -> None:
        show_error(f"napari-shardscope: Show in Neuroglancer: {exc}")

    worker = create_worker(build, _start_thread=False, _ignore_errors=True)  # type: ignore[arg-type]  # napari annotates func as FunctionType; a bound method or closure works
    worker.returned.connect(deliver)
    worker.errored.connect(report)
    _WORKERS.append(worker)
    worker.finished.connect(forget)  # type: ignore[arg-type]  # superqt types it SigInst[None]: it emits no argument
    worker.start()
    return worker


_WORKERS: list[Any] = []


def copy_link(url: str) -> None:
    from napari.utils.notifications import show_info
    from qtpy.QtWidgets import QApplication

    clipboard = QApplication.clipboard()
    if clipboard is not None:
        clipboard.setText(url)
    show_info("Neuroglancer link copied to the clipboard (served from this napari until it closes)")


def show_in_neuroglancer(viewer: Viewer) -> Any:
    """File › IO Utilities › Show in Neuroglancer (copy link): the link goes to the clipboard."""
    return request_link(viewer, copy_link)


def open_in_neuroglancer(viewer: Viewer) -> Any:
    """File › IO Utilities › Show in Neuroglancer (open in browser): the system browser opens the link."""
    import webbrowser

    return request_link(viewer, webbrowser.open)


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
    if parsed.layout == "3d":  # the other layouts show cross sections: napari's 2-D view
        viewer.dims.ndisplay = 3
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

    parsed = parse_state(load_state(text))
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
    """File › IO Utilities › Open Neuroglancer link…: ask for a link (non-blocking dialog), then open it."""
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
