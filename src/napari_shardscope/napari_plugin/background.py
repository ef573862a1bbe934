"""Open a remote volume without freezing the viewer: a worker thread, a progress bar with Cancel,
and a notification when it fails.

Opening a URL means a few metadata requests, each of which may wait for a slow or unreachable
host up to the remote limits (``--timeout`` × retries, about 10 s by default). napari calls a
reader on the GUI thread, so a reader that waited there would freeze the window for that long.
Instead the reader hands the URL to :func:`open_in_background`:

* the volumes are opened (metadata only) in one of napari's worker threads;
* napari's activity dock shows a ``cancelable_progress`` bar while it runs, whose **Cancel**
  button lets the user stop waiting at once. A TensorStore request cannot be interrupted from
  Python, so cancelling abandons the open: whatever arrives later is dropped, and the request
  itself ends within the remote limits;
* on success the layers are added to the viewer that asked; on failure a napari error
  notification names the URL and the error (its group and message, as the CLI prints them).

Notebooks and scripts can call :func:`open_in_background` themselves; :meth:`BackgroundOpen.wait`
blocks until it is done for code that needs the layers before it goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from napari.viewer import Viewer

from napari_shardscope.core.errors import ShardscopeError, group_name
from napari_shardscope.core.volumes import Volume, open_volumes
from napari_shardscope.core.volumes.display import display_of


def describe_failure(url: str, exc: BaseException) -> str:
    """The one-line notification for a failed open: the URL, the error's group and its message."""
    if not isinstance(exc, ShardscopeError):
        return f"napari-shardscope could not open {url}: internal error: {type(exc).__name__}: {exc}"
    message = str(exc)
    where = "" if url in message else f"{url}: "  # our errors usually name the URL already
    return f"napari-shardscope could not open {where}{message} ({group_name(exc)} error)"


def short_name(url: str) -> str:
    """``…/name`` of a URL's last path component, so a progress bar's label leaves room for Cancel."""
    name = url.rstrip("/").rsplit("/", 1)[-1]
    return url if not name or name == url else f"…/{name}"


def _cancel_button_progress(desc: str, on_cancel: Callable[[], None]) -> Any:
    """An indeterminate napari progress bar whose Cancel button calls ``on_cancel`` at once.

    napari's ``cancelable_progress`` only runs its callback from inside a ``for`` loop over it;
    an open is one blocking call, not a loop, so the click itself must act.
    """
    from napari.utils import cancelable_progress

    class _Progress(cancelable_progress):
        def cancel(self) -> None:
            super().cancel()
            on_cancel()

    return _Progress(total=0, desc=desc)


class BackgroundOpen:
    """One open of ``urls`` in a worker thread, adding its layers to ``viewer`` when it succeeds.

    Attributes a caller may read once :attr:`done` is set: :attr:`layers` (the layers added),
    :attr:`error` (the exception of a failed open), :attr:`cancelled`.
    """

    def __init__(self, viewer: Any, urls: Sequence[str],
                 add_layers: Callable[[Any, Sequence[Volume]], list[Any]]) -> None:
        from napari.qt.threading import create_worker

        self.viewer = viewer
        self.urls = list(urls)
        self.layers: list[Any] = []
        self.error: BaseException | None = None
        self.cancelled = False
        self.done = threading.Event()
        self._add_layers = add_layers
        label = short_name(self.urls[0]) if len(self.urls) == 1 else f"{len(self.urls)} volumes"
        #: napari's progress bar (indeterminate: an open is a handful of requests of unknown length).
        self.progress: Any = _cancel_button_progress(f"Opening {label}", self.cancel)
        self._worker = create_worker(self._open, _start_thread=False, _ignore_errors=True)  # type: ignore[arg-type]  # napari annotates func as FunctionType; a bound method or closure works
        self._worker.returned.connect(self._on_opened)
        self._worker.errored.connect(self._on_failed)
        self._worker.finished.connect(self._on_finished)  # type: ignore[arg-type]  # superqt types it SigInst[None]: it emits no argument
        _RUNNING.append(self)
        self._worker.start()

    def _open(self) -> list[Volume]:
        volumes = [v for url in self.urls for v in open_volumes(url)]
        for volume in volumes:  # a float image's contrast limits read a sample: here, not on the GUI thread
            display_of(volume)
        return volumes

    def cancel(self) -> None:
        """Stop waiting: the progress bar goes, and a result that arrives later is dropped."""
        if self.done.is_set() or self.cancelled:
            return
        from napari.utils.notifications import show_info

        self.cancelled = True
        self._close_progress()
        show_info(f"napari-shardscope stopped waiting for {', '.join(self.urls)} (cancelled)")
        self.done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the open has finished, failed or been cancelled; ``False`` on timeout.

        On the GUI thread this processes Qt events while it waits (the results are delivered
        there); elsewhere it simply waits.
        """
        from qtpy.QtCore import QCoreApplication, QThread

        app = QCoreApplication.instance()
        if app is None or QThread.currentThread() is not app.thread():
            return self.done.wait(timeout)
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            app.processEvents()
            self.done.wait(0.01)
        return True

    def _on_opened(self, volumes: list[Volume]) -> None:
        if self.cancelled:
            return
        try:
            self.layers = self._add_layers(self.viewer, volumes)
        except Exception as exc:  # the viewer was closed meanwhile, or layer creation failed
            self._on_failed(exc)

    def _on_failed(self, exc: BaseException) -> None:
        if self.cancelled:
            return
        from napari.utils.notifications import show_error

        self.error = exc
        show_error(describe_failure(", ".join(self.urls), exc))

    def _on_finished(self) -> None:
        if self in _RUNNING:
            _RUNNING.remove(self)
        self._close_progress()
        self.done.set()

    def _close_progress(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None


#: Opens in flight (a reference keeps Python from collecting a running worker).
_RUNNING: list[BackgroundOpen] = []


def open_in_background(viewer: Any, urls: str | Sequence[str]) -> BackgroundOpen:
    """Open ``urls`` (paths or URLs) off the GUI thread and add their layers to ``viewer``."""
    from napari_shardscope.napari_plugin.viewer import add_volumes

    return BackgroundOpen(viewer, [urls] if isinstance(urls, str) else list(urls), add_volumes)


def pending_opens() -> list[BackgroundOpen]:
    """Opens whose worker is still running (cancelled ones included until their request ends)."""
    return list(_RUNNING)


#: What the File-menu dialog says (the URL forms :func:`napari_shardscope.core.bytestore.parse_url` takes).
URL_PROMPT = ("Path or URL of a volume (precomputed, Zarr v3 / OME-Zarr, N5):\n"
              "https://…, gs://…, s3://…, file://… or a local path; a precomputed:// , zarr3:// or n5:// prefix "
              "forces the format")


def ask_and_open(viewer: Viewer) -> Any:
    """File › IO Utilities › Open volume URL: ask for a URL (a non-blocking dialog), then open it in the
    background. Returns the dialog (shown; the open starts when the user presses OK)."""
    from qtpy.QtWidgets import QInputDialog, QLineEdit

    dialog = QInputDialog()  # no parent: napari hands commands a proxy of the viewer, not its Qt window
    dialog.setWindowTitle("Open volume URL")
    dialog.setLabelText(URL_PROMPT)
    dialog.setTextEchoMode(QLineEdit.EchoMode.Normal)
    dialog.resize(640, dialog.height())

    def chosen(url: str) -> None:
        if url.strip():
            open_in_background(viewer, url.strip())

    dialog.textValueSelected.connect(chosen)
    dialog.finished.connect(lambda _result: _DIALOGS.remove(dialog) if dialog in _DIALOGS else None)
    _DIALOGS.append(dialog)  # a dialog without a parent lives as long as Python holds it
    dialog.open()
    return dialog


_DIALOGS: list[Any] = []
