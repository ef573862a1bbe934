"""Long proofreading work split in two: the work itself, and applying its result.

Building a repository's label index, a seeded split and an export take seconds to minutes. A GUI
must run them off its own thread, but the controller's state (selection, messages) belongs to one
thread. A :class:`Job` separates the two: :meth:`Job.run` does the work and touches no controller
state, so any thread may call it; :meth:`Job.finish` or :meth:`Job.fail` then run on the
controller's thread. A notebook runs both in place with :meth:`Job.run_here`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from napari_shardscope.core.proofreading.session import JobProgress

T = TypeVar("T")
JobKind = Literal["create", "split", "export", "merge"]


class Job(Generic[T]):
    """One long operation of the controller, open from creation until ``finish``/``fail``/``close``.

    ``close`` may be called more than once (a GUI calls it when its worker thread ends, whatever
    happened).
    """

    def __init__(self, kind: JobKind, description: str, work: Callable[[JobProgress | None], T], *,
                 on_finish: Callable[[T], None], on_fail: Callable[[BaseException], None],
                 on_close: Callable[[Job[Any]], None]) -> None:
        self.kind = kind
        self.description = description
        self._work = work
        self._on_finish = on_finish
        self._on_fail = on_fail
        self._on_close = on_close
        self._closed = False

    def __repr__(self) -> str:
        return f"Job({self.kind!r}, {self.description!r}{', closed' if self._closed else ''})"

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, progress: JobProgress | None = None) -> T:
        """Do the work, reporting ``progress(done, total, ...)``; any thread may call it."""
        return self._work(progress)

    def finish(self, result: T) -> T:
        """Apply the result (on the controller's thread) and end the job."""
        try:
            self._on_finish(result)
        finally:
            self.close()
        return result

    def fail(self, exc: BaseException) -> None:
        """The work raised ``exc``: say so (on the controller's thread) and end the job."""
        try:
            self._on_fail(exc)
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)

    def run_here(self) -> T:
        """Run and finish in the calling thread (what a notebook or a script wants)."""
        try:
            result = self.run()
        except BaseException as exc:
            self.fail(exc)
            raise
        return self.finish(result)
