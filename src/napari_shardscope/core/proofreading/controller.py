"""The proofreading controller: everything a proofreader's tools share, without a GUI.

What to edit and how — the selected bodies, the picked supervoxels, the click mode, a split being
seeded, the branch merge being planned with a side chosen per conflict, which actions are possible
now and why not, the last message — is state of the *proofreading*, not of a widget. Keeping it
here lets the napari panels, a notebook and the tests drive one object the same way::

    c = ProofreadingController()
    c.connect("proofread.repo")
    c.select(a); c.add_to_selection(b); c.merge()
    c.start_split(); c.add_seeds(1, voxels_a); c.add_seeds(2, voxels_b); c.split()
    c.commit("fixed a and b"); c.branch("alt")
    c.plan_branch_merge("alt"); c.choose("body:12", "theirs"); c.merge_branch("alt")

The panels only render :attr:`ProofreadingController.state` (a frozen snapshot, sent to listeners
after every change) and forward clicks and keys. Every refusal is the same sentence whether a
button shows it as its disabled reason or an action raises it: both come from :meth:`action`.

Long work (building a repository's index, a split, an export) is offered as a :class:`Job`: its
``run`` touches no controller state, so a GUI runs it in a worker thread and calls ``finish`` (or
``fail``) back on its own thread; the plain methods (``split()``, ``export()``) run a job inline.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.export.precomputed import ExportReport
from napari_shardscope.core.labelmap import BodySplit, Box, LabelmapVersion, Mutation
from napari_shardscope.core.labelmap.branch_merge import BranchMergePlan, BranchMergeResult, Resolution
from napari_shardscope.core.labelmap.diff import VersionDiff
from napari_shardscope.core.proofreading.jobs import Job, JobKind
from napari_shardscope.core.proofreading.navigation import (
    TARGET_KINDS,
    NavTarget,
    TargetKind,
    find_target,
    parse_target,
)
from napari_shardscope.core.proofreading.session import (
    EXPORT_FORMATS,
    NO_REPOSITORY,
    ExportFormat,
    JobProgress,
    LabelKind,
    ProofreadingSession,
    SessionEvent,
    create_labelmap_repository,
)
from napari_shardscope.core.proofreading.state import (
    MODES,
    ActionState,
    BodyInfo,
    ControllerState,
    Level,
    MergePlanState,
    Mode,
    PendingSplit,
    Status,
)
from napari_shardscope.core.proofreading.todo import TodoItem, Worklist
from napari_shardscope.core.proofreading.wording import (
    describe_bounds,
    describe_branch_merge,
    describe_branch_merge_plan,
    describe_commit,
    describe_edit,
    describe_edits,
    describe_relation,
    describe_undo,
    edit_phrase,
    id_list,
    plural,
)
from napari_shardscope.core.versioned import Version
from napari_shardscope.core.versioned.tracking import tracking_names

T = TypeVar("T")
#: A split region larger than this many voxels covers only one z plane of the body (painting a
#: seeds layer of a whole large body would not fit in memory).
MAX_SEED_VOXELS = 1 << 26
HISTORY_SHOWN = 5

#: Every action the controller judges, with what it does (for tooltips and key help).
ACTIONS: Mapping[str, str] = {
    "merge": "merge the selected bodies into the first",
    "cleave": "move the picked supervoxels of the selected body to a new body",
    "start_split": "seed a split of the selected body (paint labels 1, 2, …)",
    "split": "split the body by the seeds",
    "cancel_split": "drop the seeds of the split being prepared",
    "undo": "undo the last edit of this version",
    "redo": "redo the last undone edit",
    "clear_selection": "clear the selection",
    "checkout": "show the selected version",
    "diff": "what changed between the two selected versions (or the selected and the checked-out one)",
    "commit": "commit the checked-out version",
    "commit_continue": "commit the checked-out version and go on editing a new version after it, on the same branch",
    "branch": "a new open version after the selected committed version (or the checked-out one)",
    "plan_merge": "list the bodies and supervoxels both branches edited (conflicts)",
    "merge_branch": "make the merge version, with the side chosen for each conflict",
    "export": "write the selected committed version (or the checked-out one) as a new sharded volume",
}


StateListener = Callable[[ControllerState], None]
NavigationListener = Callable[[NavTarget], None]


class ProofreadingController:
    """Selection, mode, pending split, merge plan, actions and messages over a :class:`ProofreadingSession`."""

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
        #: The to-do list being walked (statuses kept in the repository; see core/proofreading/todo.py).
        self.todo = Worklist(lambda: self.session.repo,
                             lambda: self.session.version.uuid if self.session.version is not None else None,
                             go=self.go_to_item)
        self.session.subscribe(self._on_session)

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
        why = self._why_not(name)
        return ActionState(not why, why)

    def _why_not(self, name: str) -> str:
        if name not in ACTIONS:
            raise ArgumentError(f"unknown action {name!r}; one of {sorted(ACTIONS)}")
        s = self.session
        v = s.version
        if v is None:
            return NO_REPOSITORY
        if name in ("merge", "cleave", "start_split", "split", "cancel_split", "undo", "redo"):
            if name != "cancel_split":
                why = s.why_not_editable()
                if why:
                    return why
            if self.busy:
                return f"wait: {self._jobs[0].description} is running"
            if name == "merge" and len(self._selected) < 2:
                return "select two or more bodies to merge (Shift-click adds one)"
            if name == "cleave" and not self._picked:
                return "pick supervoxels first (mode: supervoxels, then click them)"
            if name == "start_split" and not self._selected and self._pending is None:
                return "select the body to split"
            if name in ("split", "cancel_split") and self._pending is None:
                return "start a split first"
            if name == "undo" and not v.can_undo:
                return "nothing to undo in this version"
            if name == "redo" and not v.can_redo:
                return "nothing to redo in this version"
            return ""
        sel = self._versions_selected
        if name == "checkout" and len(sel) != 1:
            return "select one version"
        if name == "diff" and len(sel) not in (1, 2):
            return "select two versions (Ctrl-click), or one to compare with the checked-out one"
        if name in ("commit", "commit_continue") and v.version.locked:
            return f"version {v.version.short} is already committed"
        if name == "commit_continue" and self.busy:
            return f"wait: {self._jobs[0].description} is running"
        if name in ("branch", "export"):
            target = self.target_version()
            if target is None or not s.resolve(target).locked:
                return ("a new version starts after a committed one: commit first" if name == "branch"
                        else "commit first: an export is a snapshot of a committed version")
            if name == "export" and self.exporting:
                return "an export is running: wait for it to finish"
        if name in ("plan_merge", "merge_branch"):
            if not v.version.locked:
                return "commit the checked-out version first: a merge joins two committed heads"
            if not self._candidates():
                return "no other branch to merge"
        return ""

    def _require(self, name: str) -> LabelmapVersion:
        why = self._why_not(name)
        if why:
            raise ArgumentError(why)
        v = self.session.version
        assert v is not None  # _why_not refused a disconnected session
        return v

    # -- connecting -----------------------------------------------------------------------------
    def create(self, path: str | os.PathLike[str], base_url: str, *, name: str = "seg",
               agglomeration: Any = None, engine: str | None = None) -> LabelmapVersion:
        """A new repository with a labelmap over ``base_url`` (indexes the base), ``main`` checked out."""
        self.create_job(path, base_url, name=name, agglomeration=agglomeration, engine=engine).run_here()
        assert self.session.version is not None
        return self.session.version

    def create_job(self, path: str | os.PathLike[str] | None, base_url: str | None, *, name: str = "seg",
                   agglomeration: Any = None, engine: str | None = None, labels: Any = None,
                   labels_name: str = "labels", voxel_size: Sequence[float] = (1.0, 1.0, 1.0),
                   translate: Sequence[float] = (0.0, 0.0, 0.0)) -> Job[None]:
        """:meth:`create` as a job: ``run`` builds the repository and its index, ``finish`` connects.

        ``labels``: the segmentation's own array, imported into the repository when ``base_url`` is
        ``None`` or is no volume shardscope reads (see :meth:`create_from_labels`).
        """
        with self._action():
            if path is None or not str(path).strip():
                raise ArgumentError("give the new repository's directory")
            if self.busy:
                raise ArgumentError(f"wait: {self._jobs[0].description} is running")
            what = base_url or f"the labels {labels_name!r}"
            bases: list[str] = []

            def work(progress: JobProgress | None) -> None:
                bases.append(create_labelmap_repository(
                    path, base_url, name=name, agglomeration=agglomeration, engine=engine, progress=progress,
                    labels=labels, labels_name=labels_name, voxel_size=voxel_size, translate=translate))

            def done(_: None) -> str:
                self.session.connect(path, instance=name)
                base = bases[0] if bases else what
                kept = "" if base == base_url else f" (stored in the repository as {base})"
                return f"created {path} over {what}{kept}"

            job = self._begin_job("create", f"creating {path}", work, done)
            self._set_status(f"creating {path}: indexing {what} …", "info")
            return job

    def create_from_labels(self, path: str | os.PathLike[str], labels: Any, *, labels_name: str = "labels",
                           voxel_size: Sequence[float] = (1.0, 1.0, 1.0),
                           translate: Sequence[float] = (0.0, 0.0, 0.0), name: str = "seg",
                           agglomeration: Any = None, engine: str | None = None) -> LabelmapVersion:
        """A new repository whose base is ``labels`` (a numpy array, z y x), stored inside the repository."""
        self.create_job(path, None, name=name, agglomeration=agglomeration, engine=engine, labels=labels,
                        labels_name=labels_name, voxel_size=voxel_size, translate=translate).run_here()
        assert self.session.version is not None
        return self.session.version

    def connect(self, path: str | os.PathLike[str], *, instance: str | None = None) -> LabelmapVersion:
        """Open an existing repository (its only labelmap, or ``instance``) and check out ``main``."""
        with self._action():
            self._refuse_while_busy()
            v = self.session.connect(path, instance=instance)
            self._ok(f"opened {path}")
            return v

    def disconnect(self) -> None:
        with self._action():
            self._refuse_while_busy()
            self.session.disconnect()
            self._set_status(NO_REPOSITORY, "info")

    def _refuse_while_busy(self) -> None:
        """Connecting or disconnecting closes the repository a running split or merge writes through.

        The job's worker would then fail inside a transaction with the engine's own untyped error
        (LMDB: "closed/deleted/dropped object"), so the switch is refused until the job has ended.
        """
        if self.busy:
            raise ArgumentError(f"wait: {self._jobs[0].description} is running")

    # -- selection ------------------------------------------------------------------------------
    def set_mode(self, mode: str) -> None:
        """What a click picks: ``bodies`` (select) or ``supervoxels`` (pick for a cleave)."""
        with self._action():
            if mode not in MODES:
                raise ArgumentError(f"mode must be one of {MODES}, got {mode!r}")
            if mode != self._mode:
                self._mode = next(m for m in MODES if m == mode)
                self._touch()

    def _check_body(self, body: int) -> None:
        v = self.session.version
        if v is None:
            raise ArgumentError(NO_REPOSITORY)
        if not v.exists(body):
            raise ArgumentError(f"body {body} does not exist at version {v.version.short}")

    def select(self, body: int, *, add: bool = False) -> tuple[int, ...]:
        """Select ``body`` alone (``add``: toggle it in the selection); body 0 (background) clears."""
        with self._action():
            body = int(body)
            if body == 0:
                if not add:
                    self._clear()
                return self.selected
            self._check_body(body)
            if add:
                if body in self._selected:
                    self._selected.remove(body)
                else:
                    self._selected.append(body)
            elif self._selected != [body] or self._picked:
                self._selected, self._picked = [body], []
            else:
                return self.selected  # already the selection: nothing changed
            self._touch()
            return self.selected

    def add_to_selection(self, body: int) -> tuple[int, ...]:
        """Add ``body`` to the selection (kept once; the first selected body stays first)."""
        with self._action():
            body = int(body)
            self._check_body(body)
            if body not in self._selected:
                self._selected.append(body)
                self._touch()
            return self.selected

    def clear_selection(self) -> None:
        with self._action():
            self._clear()

    def _clear(self) -> None:
        if self._selected or self._picked:
            self._selected, self._picked = [], []
            self._touch()

    def pick_supervoxel(self, sv: int) -> tuple[int, ...]:
        """Toggle supervoxel ``sv`` (of the first selected body) in the cleave pick list."""
        with self._action():
            v = self.session.version
            if v is None:
                raise ArgumentError(NO_REPOSITORY)
            if not self._selected:
                raise ArgumentError("select the body to cleave first, then pick its supervoxels")
            owner = v.body_of(int(sv))
            if owner != self._selected[0]:
                raise ArgumentError(f"supervoxel {sv} is in body {owner}, not in body {self._selected[0]}")
            if sv in self._picked:
                self._picked.remove(int(sv))
            else:
                self._picked.append(int(sv))
            self._touch()
            return self.picked

    def pick_at(self, voxel: Sequence[int], *, add: bool = False) -> int:
        """A click on scale-0 voxel (z, y, x): select the body there, or pick its supervoxel (by mode)."""
        with self._action():
            v = self.session.version
            if v is None:
                raise ArgumentError(NO_REPOSITORY)
            if self._mode == "supervoxels":
                sv = v.supervoxel_at(voxel)
                if sv:
                    self.pick_supervoxel(sv)
                return sv
            body = v.body_at(voxel)
            self.select(body, add=add)
            return body

    def body_info(self, body: int) -> BodyInfo:
        """Id, size (voxels), supervoxel count, bounds (scale-0 voxels, z y x, rounded out to the overlay
        blocks: read without touching a voxel) and recent history, with both in words."""
        _, lm, v = self.session.require()
        box = v.bbox(body, exact=False)
        history = v.history(body)[-HISTORY_SHOWN:]
        return BodyInfo(body, v.size(body), len(v.supervoxels(body)), (box.lo, box.hi),
                        tuple((h.mutation.operation, h.mutation.user, h.mutation.time, h.version) for h in history),
                        bounds_text=describe_bounds(box.lo, box.hi, lm.config.block),
                        edits=tuple(self._phrase(v, h.mutation) for h in history))

    def _phrase(self, v: LabelmapVersion, m: Mutation) -> str:
        """An edit of a history in words; an undo or redo names the edit it took back or put back."""
        if m.operation in ("undo", "redo"):
            return describe_undo(m, self._original(v, m))
        return edit_phrase(m)

    def toggle_mode(self) -> Mode:
        """Switch what a click picks: bodies ↔ supervoxels."""
        self.set_mode("supervoxels" if self._mode == "bodies" else "bodies")
        return self._mode

    # -- navigation -----------------------------------------------------------------------------
    def on_navigate(self, listener: NavigationListener) -> Callable[[], None]:
        """Call ``listener(target)`` after each :meth:`go_to` (a view moves its camera); returns an unsubscribe."""
        self._nav_listeners.append(listener)
        return lambda: self._nav_listeners.remove(listener) if listener in self._nav_listeners else None

    def go_to(self, what: str | TargetKind, value: int | tuple[int, int, int] | None = None) -> NavTarget:
        """Go to a body, a supervoxel or a voxel: select the body there and tell the views where to look.

        ``go_to("body 12")``, ``go_to("sv 345")``, ``go_to("30, 140, 88")`` (z, y, x) as typed in a
        go-to box, or ``go_to("body", 12)``. The box and focus come from the label index.
        """
        with self._action():
            _, _, v = self.session.require()
            kind: TargetKind
            if value is None:
                kind, found = parse_target(str(what))
            elif what in TARGET_KINDS:
                kind, found = next(k for k in TARGET_KINDS if k == what), value
            else:
                raise ArgumentError(f"go to one of {TARGET_KINDS}, not {what!r}")
            target = find_target(v, kind, found)
            if target.label and target.kind != "supervoxel":
                self.select(target.label)
            elif target.kind == "supervoxel":
                self.select(v.body_of(target.label))
            self._ok(f"went to {target.describe()}")
            for listener in list(self._nav_listeners):
                listener(target)
            return target

    def go_to_item(self, item: TodoItem) -> NavTarget:
        """Go to a to-do item (what :attr:`todo` calls on next / previous)."""
        return self.go_to(item.kind, item.value)

    # -- edits ----------------------------------------------------------------------------------
    def merge(self) -> Mutation:
        """Merge the other selected bodies into the first selected one."""
        with self._action():
            v = self._require("merge")
            target, others = self._selected[0], self._selected[1:]
            m = v.merge(target, others)
            self._selected = [target]
            self._ok(describe_edit(m))
            return m

    def cleave(self, supervoxels: Sequence[int] | None = None) -> int:
        """Cleave ``supervoxels`` (default: the picked ones) off the first selected body; returns the new body."""
        with self._action():
            if supervoxels is not None:
                self._picked = [int(s) for s in supervoxels]
            v = self._require("cleave")
            if not self._selected:
                raise ArgumentError("select the body to cleave")
            body, svs = self._selected[0], list(self._picked)
            new = v.cleave(body, svs)
            self._picked = []
            self._selected = [body, new]
            self._ok(f"cleaved {plural(len(svs), 'supervoxel')} off {body} into new body {new}")
            return new

    def undo(self) -> Mutation:
        """Undo the version's last edit; the message names the edit undone (``"undid: merge of 12 into 34"``)."""
        with self._action():
            v = self._require("undo")
            m = v.undo()
            self._ok(describe_undo(m, self._original(v, m)))
            return m

    def redo(self) -> Mutation:
        with self._action():
            v = self._require("redo")
            m = v.redo()
            self._ok(describe_undo(m, self._original(v, m)))
            return m

    @staticmethod
    def _original(v: LabelmapVersion, m: Mutation) -> Mutation | None:
        """The edit an undo or redo record ``m`` stands for (an undo of a redo names the first edit)."""
        wanted = m.args.get("mutation", m.target)
        return next((e.mutation for e in reversed(v.mutations()) if e.mutation.mutation_id == wanted), None)

    # -- splitting ------------------------------------------------------------------------------
    def start_split(self, plane: int | None = None) -> PendingSplit:
        """Start seeding a split of the first selected body (returns the split already started, if any).

        The region to paint in is the body's block bounds; for a body larger than
        :data:`MAX_SEED_VOXELS` only z plane ``plane`` of them (default: the first).
        """
        with self._action():
            v = self._require("start_split")
            if self._pending is not None:
                return self._pending
            body = self._selected[0]
            box = v.bbox(body, exact=False).intersect(Box.of_shape(v.scales[0].shape))
            lo, hi = list(box.lo), list(box.hi)
            if int(np.prod(np.subtract(hi, lo))) > MAX_SEED_VOXELS:
                z = lo[0] if plane is None else min(max(int(plane), lo[0]), hi[0] - 1)
                lo[0], hi[0] = z, z + 1
            self._pending = PendingSplit(body, v.uuid, Box((lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])))
            self._set_status(f"paint seed 1 on one part of body {body} and 2 (3, …) on the others, then Split",
                             "info")
            return self._pending

    def _inside(self, pending: PendingSplit, voxels: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The voxels of ``voxels`` that belong to the body being split (a brush spills over its edge)."""
        if len(voxels) == 0:
            return voxels
        v = self.session.version
        assert v is not None
        shape = np.asarray(v.scales[0].shape)
        voxels = voxels[np.all((voxels >= 0) & (voxels < shape), axis=1)]
        if len(voxels) == 0:
            return voxels
        lo, hi = voxels.min(axis=0), voxels.max(axis=0) + 1
        inside = v.mask(pending.body, Box((int(lo[0]), int(lo[1]), int(lo[2])), (int(hi[0]), int(hi[1]), int(hi[2]))))
        rel = voxels - lo
        kept: npt.NDArray[np.int64] = voxels[inside[rel[:, 0], rel[:, 1], rel[:, 2]]]
        return kept

    def add_seeds(self, label: int, voxels: npt.ArrayLike) -> PendingSplit:
        """Add scale-0 voxels (n, 3; z y x) to seed group ``label``; voxels outside the body are left out."""
        with self._action():
            pending = self._pending_here()
            if int(label) <= 0:
                raise ArgumentError(f"seed labels are positive integers, got {label}")
            pts = np.asarray(voxels, dtype=np.int64).reshape(-1, 3)
            seeds = dict(pending.seeds)
            old = seeds.get(int(label), np.empty((0, 3), dtype=np.int64))
            seeds[int(label)] = np.unique(np.concatenate([old, self._inside(pending, pts)]), axis=0)
            self._pending = replace(pending, seeds=seeds)
            self._touch()
            return self._pending

    def set_painted_seeds(self, painted: npt.ArrayLike) -> PendingSplit:
        """Replace the seeds with a painted array covering the split's box (0: no seed; 1, 2, …: groups).

        Voxels painted on other bodies are left out: they are not seeds of this split.
        """
        with self._action():
            pending = self._pending_here()
            data = np.asarray(painted)
            if data.shape != pending.box.shape:
                raise ArgumentError(f"painted seeds of shape {data.shape} do not cover the split's region "
                                    f"{pending.box.shape}")
            inside = self.session.require()[2].mask(pending.body, pending.box)
            origin = np.asarray(pending.box.lo, dtype=np.int64)
            seeds = {int(g): np.argwhere((data == g) & inside).astype(np.int64) + origin
                     for g in np.unique(data[inside]) if g != 0}
            self._pending = replace(pending, seeds=seeds)
            self._touch()
            return self._pending

    def _pending_here(self) -> PendingSplit:
        pending = self._pending
        if pending is None:
            raise ArgumentError("start a split first")
        v = self.session.version
        if v is None or pending.version != v.uuid:
            raise ArgumentError("these seeds were painted on another version: start the split again")
        return pending

    def split_job(self) -> Job[BodySplit]:
        """Split the body by the seeds, as a job (``run`` is the seeded split; ``finish`` selects the parts)."""
        with self._action():
            v = self._require("split")
            pending = self._pending_here()
            groups = {g: pts for g, pts in pending.seeds.items() if len(pts)}
            if len(groups) < 2:
                raise ArgumentError("paint at least two seed labels (1 and 2) before splitting")
            body = pending.body

            def work(_progress: JobProgress | None) -> BodySplit:
                return v.split_body(body, groups)

            def done(out: BodySplit) -> str:
                parts = sorted(set(out.bodies.values()))
                if self._pending is not None and self._pending.version == v.uuid:
                    self._pending = None
                shown = self.session.version
                if shown is None or shown.uuid != v.uuid:
                    # another version was checked out while the split ran: its selection stays, since
                    # the parts exist only at the split's version
                    ver = v.version
                    return f"split body {body} into {id_list(parts)} at {ver.short} on {ver.branch} (not checked out)"
                self._selected, self._picked = parts, []
                return f"split body {body} into {id_list(parts)}"

            job = self._begin_job("split", f"split of body {body}", work, done)
            self._set_status(f"splitting body {body} …", "info")
            return job

    def split(self) -> BodySplit:
        """Split the body by the seeds in the calling thread."""
        return self.split_job().run_here()

    def cancel_split(self) -> None:
        with self._action():
            if self._pending is not None:
                self._pending = None
                self._set_status("split cancelled", "info")

    # -- versions -------------------------------------------------------------------------------
    def select_versions(self, *refs: str) -> tuple[str, ...]:
        """Select versions (as rows of a version list) for Checkout, Diff, Branch and Export."""
        with self._action():
            uuids = tuple(self.session.resolve(r).uuid for r in refs) if refs else ()
            if uuids != self._versions_selected:
                self._versions_selected = uuids
                self._touch()
            return uuids

    def checkout(self, ref: str | None = None) -> LabelmapVersion:
        """Show version ``ref`` (default: the one selected); a split seeded on another version is cancelled."""
        with self._action():
            if ref is None:
                self._require("checkout")
                ref = self._versions_selected[0]
            v = self.session.checkout(ref)
            ver = v.version
            self._ok(f"checked out {ver.short} on {ver.branch} ({'committed, read-only' if ver.locked else 'open'})")
            return v

    def commit(self, message: str) -> Version:
        """Commit the checked-out version with ``message``: it becomes read-only (see :meth:`commit_and_continue`)."""
        with self._action():
            self._require("commit")
            done = self.session.commit(message)
            self._ok(describe_commit(done.short, message))
            return done

    def commit_and_continue(self, message: str) -> Version:
        """Commit the checked-out version and check out a fresh open version after it on the same branch.

        What a proofreader means by "commit": the work so far is locked and named, and editing goes
        on at once. Returns the new open version; the committed one is its parent.
        """
        with self._action():
            self._require("commit_continue")
            done, child = self.session.commit_and_continue(message)
            self._ok(describe_commit(done.short, message, child.short, child.branch))
            return child

    def branch(self, name: str | None = None, parent: str | None = None) -> Version:
        """A new open version from committed ``parent`` (default: :meth:`target_version`), checked out.

        ``name`` starts a new branch; ``None`` continues the parent's branch.
        """
        with self._action():
            if parent is None:
                self._require("branch")
                parent = self.target_version()
            child = self.session.branch(name, parent)
            after = self.session.resolve(child.parents[0]).short if child.parents else "the root"
            self._ok(f"new version {child.short} on {child.branch} after {after}: open for edits")
            return child

    def diff(self, a: str | None = None, b: str | None = None) -> VersionDiff:
        """What changed between ``a`` and ``b`` (default: the two selected, or the selected and the checked-out)."""
        with self._action():
            if a is None:
                self._require("diff")
                sel = self._versions_selected
                a = sel[0]
                if b is None:
                    b = sel[1] if len(sel) == 2 else self.session.require()[2].uuid
            elif b is None:
                b = self.session.require()[2].uuid
            d = self.session.diff(a, b)
            short = {u: self.session.resolve(u).short for u in (d.a, d.b, d.base)}
            sa, sb = short[d.a], short[d.b]
            self._diff = d
            self._diff_summary = (
                f"{describe_relation(d.relation, sa, sb, short[d.base])}. "
                f"Only in {sa}: {describe_edits(len(d.only_a), d.bodies_a)}; "
                f"only in {sb}: {describe_edits(len(d.only_b), d.bodies_b)}")
            self._touch()
            return d

    # -- merging branches -----------------------------------------------------------------------
    def set_merge_theirs(self, branch: str | None) -> None:
        """Choose the branch to merge; the conflicts and choices listed for another branch are dropped."""
        with self._action():
            branch = branch or None
            if branch != self._merge_theirs:
                self._merge_theirs = branch
                if self._plan is not None and self._plan.theirs != branch:
                    self._plan = None
                self._touch()

    def plan_branch_merge(self, theirs: str | None = None) -> BranchMergePlan:
        """List the conflicts of merging ``theirs`` into the checked-out version, each waiting for a side."""
        with self._action():
            self._require("plan_merge")
            theirs = theirs or self._merge_theirs
            if not theirs:
                raise ArgumentError("choose the branch to merge")
            self.set_merge_theirs(theirs)
            plan = self.session.plan_branch_merge(theirs)
            self._plan = MergePlanState(theirs, plan, {c.key: None for c in plan.conflicts})
            self._ok(describe_branch_merge_plan(plan, self._ours_name(), theirs))
            return plan

    def choose(self, key: str, side: str | None) -> None:
        """Keep ``side`` for conflict ``key`` of the checked merge: ``ours`` (keep mine), ``theirs``,
        ``both`` (their edits replayed after mine), ``None`` unsets."""
        with self._action():
            if self._plan is None or key not in self._plan.choices:
                raise ArgumentError(f"no conflict {key!r} listed: check the merge first")
            if side not in ("ours", "theirs", "both", None):
                raise ArgumentError(f"a conflict is resolved keep mine ('ours'), keep theirs ('theirs') or "
                                    f"keep both ('both'), got {side!r}")
            self._plan = replace(self._plan, choices={**self._plan.choices, key: side})  # type: ignore[dict-item]
            self._touch()

    def _plan_is_current(self, plan: MergePlanState, theirs: str) -> bool:
        v = self.session.version
        return (v is not None and plan.theirs == theirs and plan.plan.ours == v.uuid
                and plan.plan.theirs == self.session.resolve(theirs).uuid)

    def merge_branch(self, theirs: str | None = None,
                     resolutions: Mapping[str, Resolution] | None = None) -> BranchMergeResult:
        """Merge branch ``theirs`` into the checked-out version and check out the (open) merge version.

        ``resolutions`` (conflict key → side) default to the sides chosen with :meth:`choose` for
        a plan of these two heads; without one, the merge is checked first and refused while it
        has conflicts (nothing is written). Runs in the calling thread (see :meth:`merge_branch_job`).
        """
        return self.merge_branch_job(theirs, resolutions).run_here()

    def merge_branch_job(self, theirs: str | None = None,
                         resolutions: Mapping[str, Resolution] | None = None) -> Job[BranchMergeResult]:
        """:meth:`merge_branch` as a job: ``run`` writes the merge version (seconds on a large log),
        ``finish`` checks it out and says what came in."""
        with self._action():
            self._require("merge_branch")
            if self.busy:
                raise ArgumentError(f"wait: {self._jobs[0].description} is running")
            theirs = theirs or self._merge_theirs
            if not theirs:
                raise ArgumentError("choose the branch to merge")
            self.set_merge_theirs(theirs)
            if resolutions is None:
                plan = self._plan
                if plan is None or not self._plan_is_current(plan, theirs):
                    fresh = self.plan_branch_merge(theirs)  # the listed choices were for another merge
                    if fresh.conflicts:
                        raise ArgumentError(f"merging {theirs}: {plural(len(fresh.conflicts), 'conflict')} listed — "
                                            "choose keep mine, keep theirs or keep both for each, then Merge")
                    plan = self._plan
                assert plan is not None
                resolutions = plan.resolutions
                head = plan.plan.theirs
            else:
                head = self.session.resolve(theirs).uuid
            ours_name = self._ours_name()
            chosen = dict(resolutions)
            name = theirs
            session = self.session
            # Both heads are fixed here, on this thread (``head`` above, ``ours`` now): the worker runs
            # later, and meanwhile this thread may check out another version or a commit may move
            # ``theirs``; the merge must still be the one planned here, which the resolutions are for.
            ours = self.session.require()[2].uuid

            def work(_progress: JobProgress | None) -> BranchMergeResult:
                return session.write_branch_merge(head, chosen, ours=ours)

            def done(result: BranchMergeResult) -> str:
                self.session.show_branch_merge(result)
                self._plan = None
                return describe_branch_merge(name, ours_name, len(result.applied), len(result.reverted),
                                             len(result.dropped), result.mutation.bodies, result.version.short)

            job = self._begin_job("merge", f"merge of {theirs} into {ours_name}", work, done)
            self._set_status(f"merging {theirs} into {ours_name} …", "info")
            return job

    def _ours_name(self) -> str:
        v = self.session.version
        return f"{v.version.branch} ({v.version.short})" if v is not None else "this version"

    # -- exporting ------------------------------------------------------------------------------
    def default_export_dest(self, ref: str | None = None, fmt: ExportFormat = "precomputed",
                            labels: LabelKind = "bodies") -> Path:
        target = ref or self.target_version()
        if target is None:
            raise ArgumentError(NO_REPOSITORY)
        return self.session.default_export_dest(target, fmt, labels)

    def export_job(self, dest: str | None = None, *, ref: str | None = None, fmt: ExportFormat = "precomputed",
                   labels: LabelKind = "bodies",
                   after: Callable[[ExportReport], str | None] | None = None) -> Job[ExportReport]:
        """Export committed version ``ref`` (default: :meth:`target_version`) as a job.

        ``run`` writes the volume (one Dask task per shard); ``finish`` keeps the report in
        :attr:`last_export` and calls ``after(report)`` (a view opens the result), whose return
        text is added to the message.
        """
        with self._action():
            self.session.require()
            if fmt not in EXPORT_FORMATS:
                raise ArgumentError(f"format must be one of {EXPORT_FORMATS}, got {fmt!r}")
            if self.exporting:
                raise ArgumentError("an export is running: wait for it to finish")
            ref = ref or self.target_version()
            assert ref is not None
            source = self.session.export_source(ref, labels)
            short = self.session.resolve(source.version).short
            target = str(dest) if dest else str(self.session.default_export_dest(source.version, fmt, labels))

            def work(progress: JobProgress | None) -> ExportReport:
                return ProofreadingSession.write_export(source, target, fmt, progress=progress)

            def done(report: ExportReport) -> str:
                self.last_export = report
                text = (f"exported {short} ({labels}) to {target}: {plural(len(report.shards), 'shard file')}, "
                        f"{report.nbytes / 2**20:.1f} MiB")
                note = after(report) if after is not None else None
                return f"{text}; {note}" if note else text

            job = self._begin_job("export", f"export of {short}", work, done)
            self._ok(f"exporting {short} ({labels}) to {target} …")
            return job

    def export(self, dest: str | None = None, *, ref: str | None = None, fmt: ExportFormat = "precomputed",
               labels: LabelKind = "bodies") -> ExportReport:
        """Export in the calling thread (see :meth:`export_job`)."""
        return self.export_job(dest, ref=ref, fmt=fmt, labels=labels).run_here()

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

    # -- following the session ------------------------------------------------------------------
    def _on_session(self, event: SessionEvent) -> None:
        """Keep the selection, the split and the merge plan consistent with what the session shows."""
        with self._action():
            v = self.session.version
            if event.kind in ("connected", "disconnected"):
                self._selected, self._picked, self._pending = [], [], None
                self._versions_selected, self._plan, self._merge_theirs = (), None, None
                self._diff, self._diff_summary = None, ""
            if v is not None and self._pending is not None and self._pending.version != v.uuid:
                self._pending = None  # seeds belong to the version they were painted on
                self._notes.append("split cancelled: another version is checked out")
            if v is not None and event.kind in ("checkout", "edited", "dag"):
                self._selected = [b for b in self._selected if v.exists(b)]
                if event.kind == "checkout":
                    first = self._selected[0] if self._selected else None
                    self._picked = [s for s in self._picked if first is not None and v.body_of(s) == first]
                existing = set(self.session.branch_names())
                self._versions_selected = tuple(u for u in self._versions_selected if self._exists(u))
                if self._plan is not None and (self._plan.theirs not in existing
                                               or not self._plan_is_current(self._plan, self._plan.theirs)):
                    self._plan = None  # tied to both heads: one of them moved
            candidates = self._candidates()
            if self._merge_theirs not in candidates:
                self._merge_theirs = candidates[0] if candidates else None
            if event.kind in ("connected", "disconnected", "checkout"):
                self._reload_todo()
            self._touch()

    def _reload_todo(self) -> None:
        """The to-do statuses shown are those of the version checked out (or none when disconnected)."""
        try:
            self.todo.reload()
        except ShardscopeError as exc:
            self._notes.append(f"to-do list not read: {exc}")

    def _exists(self, uuid: str) -> bool:
        try:
            self.session.resolve(uuid)
        except ShardscopeError:
            return False
        return True
