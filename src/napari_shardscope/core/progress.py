"""The one progress protocol: every long job reports ``progress(done, total, what)``, whoever shows it.

Validation, export, mesh export, label-index builds, prefetches and the proofreading jobs all take a
:class:`Progress`; the command line's terminal reporter
(:class:`napari_shardscope.core.cli.common.StderrProgress`), napari's progress bar
(:class:`napari_shardscope.widgets.workers.GuiProgress`) and the shard browser's validation bar
implement it. One signature, checked by mypy on both sides, because a job that called its reporter
with two arguments while the terminal reporter wanted three worked with ``--quiet`` (no reporter)
and crashed without it.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Called after each step of a long job, from whatever thread runs the step.

    ``done`` of ``total`` steps are finished (``total`` may be 0 when there is nothing to do);
    ``what`` names the step just finished or the phase ("shard 3", "combine ranges"), in words a
    progress bar can show. A reporter may raise to cancel the job (the shard browser's Stop).
    """

    def __call__(self, done: int, total: int, what: str, /) -> None: ...


def report(progress: Progress | None, done: int, total: int, what: str) -> None:
    """``progress(done, total, what)`` when there is a reporter (jobs run with ``progress=None`` too)."""
    if progress is not None:
        progress(done, total, what)
