"""The npe2 reader contribution: drop a volume's path or URL on napari and see it.

napari asks every reader whose filename pattern matches (ours is ``*``, directories included)
whether it can read a path, on the GUI thread, for every file a user drops. So
:func:`get_reader` must be fast and must never raise:

* a local path is accepted only if it is a directory holding ``info``, ``zarr.json``, ``.zarray``,
  ``.zgroup`` or ``attributes.json`` (or is one of those files) — two or three ``stat`` calls — and its metadata
  is opened there (local reads), so a directory that is not a volume is declined;
* a remote URL (``http(s)://``, ``gs://``, ``s3://``, or with a ``precomputed://`` style prefix)
  is accepted by its form alone when napari runs with its Qt event loop: the reader then opens it
  in a worker thread (:mod:`.background`) with a progress bar and a Cancel button, adds the layers
  when the metadata arrives and shows a napari notification if it fails — a slow or unreachable
  host never freezes the window. It returns napari's "nothing to add now" sentinel ``[(None,)]``.
  Without a Qt application (a script driving napari's reader API) the URL is probed synchronously,
  as a local path is;
* a local directory up to three levels above datasets — no metadata of its own, an N5 container, a zarr
  group of groups — is accepted when datasets lie below it (the bounded search of
  :mod:`napari_shardscope.core.formats.discovery`): reading it adds nothing and shows a napari
  notification naming them (the ``NotADatasetError``), instead of napari's "no reader found";
* anything else that goes wrong while deciding returns ``None`` (logged at debug level), letting other
  readers try.

The volumes opened during the check are what the returned reader function turns into layers,
so metadata is read once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from napari_shardscope.core.bytestore.url import split_format
from napari_shardscope.core.errors import NotADatasetError
from napari_shardscope.core.volumes import Volume, is_remote, open_volumes
from napari_shardscope.napari_plugin.layers import LayerData, volume_layer_data

log = logging.getLogger(__name__)

METADATA_FILES = ("info", "zarr.json", "attributes.json", ".zarray", ".zgroup")
ReaderFunction = Callable[[Any], list[LayerData]]


#: What a reader returns when it added nothing itself (napari's null-layer sentinel).
NOTHING_TO_ADD: list[Any] = [(None,)]


def get_reader(path: str | Sequence[str]) -> ReaderFunction | None:
    """A function reading ``path`` into layers, or ``None`` if ``path`` is not a volume we read."""
    try:
        paths = _as_paths(path)
        if not paths:
            return None
        if not all(could_be_volume(p) for p in paths):
            return _parent_reader(paths)
        if any(is_remote(p) for p in paths) and _gui_thread():
            return _background_reader(paths)
        volumes: list[Volume] = []
        for p in paths:
            volumes.extend(open_volumes(p))
    except NotADatasetError as exc:  # a group or container: say what lies below it, if anything does
        return _refusal_reader(exc) if exc.children else None
    except Exception as exc:  # never raise: napari would show a traceback for someone else's file
        log.debug("napari-shardscope declines %r: %s", path, exc)
        return None

    def read(_path: Any = None) -> list[LayerData]:
        return [volume_layer_data(v) for v in volumes]

    return read


def _parent_reader(paths: list[str]) -> ReaderFunction | None:
    """For one local directory without metadata of its own: a reader naming the datasets below it, if any."""
    if len(paths) != 1 or is_remote(paths[0]):
        return None
    text = _local_path(paths[0])
    if text is None or not os.path.isdir(text):
        return None
    try:
        open_volumes(text)
    except NotADatasetError as exc:
        return _refusal_reader(exc) if exc.children else None
    return None  # it opened after all (a race with a writer): let napari ask again


def _refusal_reader(exc: NotADatasetError) -> ReaderFunction:
    """A reader that adds nothing and tells the user, in a napari notification, which datasets to open instead."""

    def read(_path: Any = None) -> list[LayerData]:
        from napari.utils.notifications import show_warning

        from napari_shardscope.napari_plugin.background import describe_failure

        show_warning(describe_failure(exc.url or "", exc))
        return NOTHING_TO_ADD

    return read


def _gui_thread() -> bool:
    """Whether we run on the thread of a Qt application (napari's GUI): the place not to wait."""
    try:
        from qtpy.QtCore import QCoreApplication, QThread
    except Exception:  # no Qt binding: a script using the reader API without a GUI
        return False
    app = QCoreApplication.instance()
    return app is not None and QThread.currentThread() is app.thread()


def _background_reader(paths: list[str]) -> ReaderFunction:
    """A reader that opens ``paths`` off the GUI thread and adds their layers when they arrive."""

    def read(_path: Any = None) -> list[LayerData]:
        import napari

        from napari_shardscope.napari_plugin.background import open_in_background

        viewer = napari.current_viewer()
        if viewer is None:  # napari called the reader outside a viewer: open here, as a script would
            return read_volumes(paths)
        open_in_background(viewer, paths)
        return NOTHING_TO_ADD

    return read


def read_volumes(path: str | Sequence[str]) -> list[LayerData]:
    """Layer data for ``path`` (one or more paths/URLs), raising on failure (for scripts)."""
    out: list[LayerData] = []
    for p in _as_paths(path):
        out.extend(volume_layer_data(v) for v in open_volumes(p))
    return out


def _as_paths(path: Any) -> list[str]:
    if isinstance(path, str | os.PathLike):
        return [os.fspath(path)]
    if isinstance(path, list | tuple):
        return [os.fspath(p) for p in path]
    return []


def could_be_volume(path: str) -> bool:
    """Cheap check: a remote URL, or a local directory (or metadata file) of a known format."""
    if not path.strip():
        return False
    if is_remote(path):
        return True
    text = _local_path(path)
    if text is None:
        return False
    if os.path.isdir(text):
        return any(os.path.isfile(os.path.join(text, name)) for name in METADATA_FILES)
    return os.path.basename(text.rstrip("/")) in METADATA_FILES and os.path.isfile(text)


def _local_path(path: str) -> str | None:
    """The file-system path a local path or ``file://`` URL names (format prefix removed); ``None`` for other URLs."""
    text, _ = split_format(path)
    if text.startswith("file://"):
        from urllib.parse import unquote, urlparse

        text = unquote(urlparse(text).path)
    if "://" in text:
        return None
    return os.path.expanduser(text)
