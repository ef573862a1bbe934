"""The plumbing every part of the proofreading controller shares: state, listeners, messages, jobs.

:class:`ControllerBase` holds what the controller is (selection, mode, the split and branch merge
being drafted, the running jobs, the status line) and how a change reaches the views (one
notification per user action, a typed error turned into the status line). The actions themselves
live with what they draft: :mod:`.split_draft`, :mod:`.branch_merge_draft` and :mod:`.controller`;
what is possible now is the table of :mod:`.actions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.export.precomputed import ExportReport
from napari_shardscope.core.labelmap import LabelmapVersion
from napari_shardscope.core.labelmap.diff import VersionDiff
from napari_shardscope.core.proofreading.actions import ACTIONS, why_not
from napari_shardscope.core.proofreading.jobs import Job, JobKind
from napari_shardscope.core.proofreading.navigation import NavTarget
from napari_shardscope.core.proofreading.session import NO_REPOSITORY, JobProgress, ProofreadingSession
from napari_shardscope.core.proofreading.state import (
    ActionState,
    ControllerState,
    Level,
    MergePlanState,
    Mode,
    PendingSplit,
    Status,
)
from napari_shardscope.core.versioned.tracking import tracking_names

T = TypeVar("T")

StateListener = Callable[[ControllerState], None]
NavigationListener = Callable[[NavTarget], None]


class ControllerBase:
    """State, listeners, messages and jobs of a proofreading controller (see :class:`ProofreadingController`)."""

    def __init__(self, session: ProofreadingSession | None = None) -> None:
        self.session = session if session is not None else ProofreadingSession()
        self._listeners: list[StateListener] = []
        self._mode: Mode = "bodies"
        self._selected: list[int] = []
        self._picked: list[int] = []
        self._pending: PendingSplit | None = None
        self._status = Status(NO_REPOSITORY)
        self._last_error = ""
        self._jobs: list[Job[Any]] = []
        self._versions_selected: tuple[str, ...] = ()
        self._merge_theirs: str | None = None
        self._plan: MergePlanState | None = None
        self._diff: VersionDiff | None = None
        self._diff_summary = ""
        self._notes: list[str] = []
        self.last_export: ExportReport | None = None
        self._depth = 0
        self._dirty = False
        self._nav_listeners: list[NavigationListener] = []

    # -- listeners and batching -----------------------------------------------------------------
    def subscribe(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(state)`` after every change; returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def is_subscribed(self, listener: StateListener) -> bool:
        return listener in self._listeners

    @contextmanager
    def _action(self) -> Iterator[None]:
        """One user action: listeners hear once, at the end; a typed error becomes the status line."""
        self._depth += 1
        try:
            yield
        except ShardscopeError as exc:
            self._error(str(exc))
            raise
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._flush()

    def _touch(self) -> None:
        self._dirty = True
        if self._depth == 0:
            self._flush()

    def _flush(self) -> None:
        if self._notes:  # side effects no message of the action mentioned (a split cancelled by a checkout)
            notes, self._notes = self._notes, []
            if self._status.level == "error":
                self._last_error = "; ".join([self._status.text, *notes])
                self._status = Status(self._last_error, "error")
            else:
                self._status = Status("; ".join(notes), "warning")
            self._dirty = True
        if not self._dirty:
            return
        self._dirty = False
        state = self.state
        for listener in list(self._listeners):
            listener(state)

    def attempt(self, action: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """Run a user action; a typed error becomes the status line instead of propagating.

        What a button or key does: the user sees the message, no traceback. Other exceptions
        (bugs) propagate.
        """
        try:
            return action(*args, **kwargs)
        except ShardscopeError as exc:
            if not (self._status.level == "error" and self._status.text.startswith(str(exc))):
                with self._action():  # raised outside the controller's actions (a view's own check)
                    self._error(str(exc))
            return None

    # -- messages -------------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        return self._status

    @property
    def last_error(self) -> str:
        """The last refusal or failure (``''`` once an action succeeded since)."""
        return self._last_error

    def report(self, text: str, level: Level = "info") -> None:
        """Put a message in the status line (for views: "switch to 2D to pick bodies")."""
        with self._action():
            if level == "error":
                self._error(text)
            else:
                self._set_status(text, level)

    def _set_status(self, text: str, level: Level) -> None:
        if self._notes:
            text = "; ".join([text, *self._notes]) if text else "; ".join(self._notes)
            self._notes = []
        self._status = Status(text, level)
        self._touch()

    def _ok(self, text: str) -> None:
        self._last_error = ""
        self._set_status(text, "ok")

    def _error(self, text: str) -> None:
        self._last_error = text
        self._status = Status(text, "error")
        self._touch()

    # -- state ----------------------------------------------------------------------------------
    @property
    def version(self) -> LabelmapVersion | None:
        """The checked-out version (reads and edits), ``None`` until connected."""
        return self.session.version

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def selected(self) -> tuple[int, ...]:
        """Selected bodies; the first is the one merged into, cleaved, split, described."""
        return tuple(self._selected)

    @property
    def picked(self) -> tuple[int, ...]:
        """Supervoxels of the first selected body picked for a cleave."""
        return tuple(self._picked)

    @property
    def pending_split(self) -> PendingSplit | None:
        return self._pending

    @property
    def merge_plan(self) -> MergePlanState | None:
        return self._plan

    @property
    def last_diff(self) -> VersionDiff | None:
        return self._diff

    @property
    def versions_selected(self) -> tuple[str, ...]:
        return self._versions_selected

    @property
    def busy(self) -> bool:
        """True while a job that blocks edits (creating a repository, a split) runs."""
        return any(j.kind != "export" for j in self._jobs)

    @property
    def exporting(self) -> bool:
        return any(j.kind == "export" for j in self._jobs)

    @property
    def idle(self) -> bool:
        """No job of any kind is running."""
        return not self._jobs

    @property
    def state(self) -> ControllerState:
        s = self.session
        v = s.version
        version = v.version if v is not None else None
        candidates = self._candidates()
        return ControllerState(
            connected=s.is_connected, version=version, revision=s.revision, mode=self._mode,
            selected=self.selected, picked=self.picked, pending_split=self._pending,
            actions={name: self.action(name) for name in ACTIONS}, status=self._status,
            last_error=self._last_error, edit_block=s.why_not_editable() if version is not None else "",
            busy=self.busy, exporting=self.exporting, versions_selected=self._versions_selected,
            merge_candidates=tuple(candidates), merge_theirs=self._merge_theirs, merge_plan=self._plan,
            diff=self._diff, diff_summary=self._diff_summary)

    def target_version(self) -> str | None:
        """What Branch and Export act on: the one selected version, else the checked-out one."""
        if len(self._versions_selected) == 1:
            return self._versions_selected[0]
        return self.session.version.uuid if self.session.version is not None else None

    def _candidates(self) -> list[str]:
        """Branches that can be merged into the checked-out version's branch."""
        v = self.session.version
        if v is None:
            return []
        current = v.version.branch
        # and the remote-tracking heads (origin/alice after a fetch): what a review usually opens
        repo = self.session.repo
        tracked = tracking_names(repo.path) if repo is not None else []
        return [b for b in self.session.branch_names() if b != current] + tracked


    # -- what is possible -----------------------------------------------------------------------
    def action(self, name: str) -> ActionState:
        """Whether action ``name`` (one of :data:`ACTIONS`) can run now, and why not."""
        why = why_not(self, name)
        return ActionState(not why, why)

    def _require(self, name: str) -> LabelmapVersion:
        """The checked-out version, if action ``name`` can run now; else its reason as an :class:`ArgumentError`."""
        why = why_not(self, name)
        if why:
            raise ArgumentError(why)
        v = self.session.version
        assert v is not None  # why_not refused a disconnected session
        return v

    def _wait_text(self) -> str:
        """Why an edit waits: the job that blocks edits."""
        return f"wait: {self._jobs[0].description} is running"

    def _refuse_while_busy(self) -> None:
        """Connecting or disconnecting closes the repository a running split or merge writes through.

        The job's worker would then fail inside a transaction with the engine's own untyped error
        (LMDB: "closed/deleted/dropped object"), so the switch is refused until the job has ended.
        """
        if self.busy:
            raise ArgumentError(self._wait_text())

    def _ours_name(self) -> str:
        v = self.session.version
        return f"{v.version.branch} ({v.version.short})" if v is not None else "this version"

    # -- jobs -----------------------------------------------------------------------------------
    def _begin_job(self, kind: JobKind, description: str, work: Callable[[JobProgress | None], T],
                   done: Callable[[T], str]) -> Job[T]:
        """Open a job; ``done(result)`` applies its result and returns the message."""

        def on_finish(result: T) -> None:
            with self._action():
                self._ok(done(result))

        def on_fail(exc: BaseException) -> None:
            with self._action():
                self._error(f"{description} failed: {exc}" if kind == "export" else str(exc))

        job: Job[T] = Job(kind, description, work, on_finish=on_finish, on_fail=on_fail, on_close=self._end_job)
        self._jobs.append(job)
        self._touch()
        return job

    def _end_job(self, job: Job[Any]) -> None:
        if job in self._jobs:
            with self._action():
                self._jobs.remove(job)
                self._touch()

