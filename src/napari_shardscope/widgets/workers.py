"""Long panel work off the GUI thread: napari's worker threads and progress bar.

Index builds, body splits and exports take seconds to minutes; the panels run them with
napari's ``create_worker`` so the viewer keeps painting, and report progress in napari's own
progress bar (the activity dock). Core calls report ``progress(done, total, ...)`` from the
worker thread (or from Dask's callback thread); :class:`GuiProgress` moves each report to the
GUI thread with a queued signal, since Qt widgets may only be touched there. The proofreading
controller hands its long work out as a :class:`~napari_shardscope.core.proofreading.Job`:
:func:`start_job` runs its ``run`` in a worker and its ``finish``/``fail`` back on the GUI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from qtpy.QtCore import QObject, QTimer, Signal

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.proofreading import Job


class Stopped(Exception):
    """Raised inside a worker by its progress report once the user pressed Stop."""


class GuiProgress(QObject):
    """napari's progress bar as the one :class:`~napari_shardscope.core.progress.Progress`: any thread may
    call ``progress(done, total, what)``; the bar (its count and the step's name) moves on the GUI thread.

    ``stop``: when set, the next report raises :class:`Stopped` in the reporting (worker) thread, so a
    panel's Stop button ends the work at its next step. ``on_step(done, total, what)`` runs on the GUI
    thread after the bar moved (a panel mirrors the count in its own widgets).
    """

    _step = Signal(int, int, str)

    def __init__(self, desc: str, *, stop: threading.Event | None = None,
                 on_step: Callable[[int, int, str], None] | None = None) -> None:
        super().__init__()
        from napari.utils import progress

        self.desc = desc
        self._stop = stop
        self._pbar = progress(total=0, desc=desc)
        self._step.connect(self._on_step)
        if on_step is not None:  # a Qt connection: dropped with its widget, if the panel goes first
            self._step.connect(on_step)

    def __call__(self, done: int, total: int, what: str, /) -> None:
        if self._stop is not None and self._stop.is_set():
            raise Stopped
        self._step.emit(int(done), int(total), str(what))

    def _on_step(self, done: int, total: int, what: str) -> None:
        if self._pbar.total != total:
            self._pbar.total = total
        self._pbar.update(done - self._pbar.n)
        self._pbar.set_description(f"{self.desc}: {what}" if what else self.desc)

    def close(self) -> None:
        self._pbar.close()


def start_worker(
    func: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[BaseException], None],
    *,
    running: list[Any],
    finished: Callable[[], None] | None = None,
) -> Any:
    """Run ``func`` in a napari worker thread; ``on_done(result)`` or ``on_error(exc)`` on the GUI thread.

    ``running`` holds the worker while it runs (a panel disables its actions while it is non-empty,
    and keeping a reference stops Python from collecting a running worker); ``finished`` runs last
    either way, after the worker has left ``running``.

    Once finished, the worker lets go of ``func`` and the callbacks (and through them of the panel, the
    controller, the viewer and its layers): napari keeps every worker of a window in the window's task
    list for good (its ``cancel_callback``), and keeps closed windows alive (napari 0.9: a theme event
    holds a lambda over the window). A worker that held on kept a closed viewer in memory with all it
    showed (about 20,000 objects, which every later full garbage collection walked again).
    """
    from napari.qt.threading import create_worker

    work: list[Callable[[], Any]] = [func]  # emptied when the worker is done

    def run() -> Any:
        return work[0]()

    worker = create_worker(run, _start_thread=False, _ignore_errors=True)  # type: ignore[arg-type]  # napari annotates func as FunctionType; a closure works
    worker.returned.connect(on_done)
    worker.errored.connect(on_error)

    def end() -> None:
        work.clear()
        worker.returned.disconnect(on_done)
        worker.errored.disconnect(on_error)
        worker.finished.disconnect(end)  # type: ignore[arg-type]  # (as connected below)
        if worker in running:
            running.remove(worker)
        if finished is not None:
            finished()

    worker.finished.connect(end)  # type: ignore[arg-type]  # superqt types it SigInst[None]: it emits no argument
    running.append(worker)
    worker.start()
    return worker


#: Workers of running jobs (a reference keeps Python from collecting a running worker).
_JOBS: list[Any] = []


def start_job(job: Job[Any], on_done: Callable[[Any], None] | None = None) -> Any:
    """Run a controller job in a worker thread with napari's progress bar; returns the worker.

    ``finish`` (or ``fail``) runs on the GUI thread; the controller turns typed errors into its
    status line, other exceptions go on to napari's error handler. ``on_done(result)`` runs after
    a successful ``finish``.
    """
    pbar = GuiProgress(job.description)

    def done(result: Any) -> None:
        try:
            job.finish(result)
        except ShardscopeError:
            return  # the controller's status line says what went wrong
        if on_done is not None:
            on_done(result)

    def failed(exc: BaseException) -> None:
        job.fail(exc)
        if not isinstance(exc, ShardscopeError):
            raise exc

    def finished() -> None:
        pbar.close()
        job.close()

    return start_worker(lambda: job.run(pbar), done, failed, running=_JOBS, finished=finished)


class GuiThreadBridge(QObject):
    """Runs callables posted from any thread in the thread this object lives in (the GUI thread).

    The viewer session posts the proofreading session's callbacks through one, the body surfaces their
    meshes; it lives here, beside the workers, so neither imports the other for it.
    """

    call = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.call.connect(self._run)

    def _run(self, func: Callable[[], None]) -> None:
        func()

    def post(self, func: Callable[[], None]) -> None:
        self.call.emit(func)


class NextTurnSync:
    """Runs ``sync()`` on the next turn of the event loop, once for any number of requests before it.

    Controller changes arrive inside napari's mouse and key callbacks; starting a progress bar or
    adding a layer there would run the event loop inside the callback (napari's mouse generators
    are not re-entrant). The body surfaces and the synapse layer both follow the controller this way.
    """

    _scheduled = False

    def schedule(self) -> None:
        """Sync on the next turn of the event loop (once, however often this is called before it)."""
        if not self._scheduled:
            self._scheduled = True
            QTimer.singleShot(0, self._scheduled_sync)

    def _scheduled_sync(self) -> None:
        self._scheduled = False
        self.sync()

    @property
    def pending(self) -> bool:
        """True while a sync is scheduled (tests wait for it)."""
        return self._scheduled

    def sync(self) -> None:
        raise NotImplementedError
