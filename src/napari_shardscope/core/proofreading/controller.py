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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.annotation.synapse_checks import MIN_SYNAPSES
from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.export.precomputed import ExportReport
from napari_shardscope.core.labelmap import LabelmapVersion, Mutation
from napari_shardscope.core.labelmap.diff import VersionDiff
from napari_shardscope.core.proofreading.actions import ACTIONS
from napari_shardscope.core.proofreading.branch_merge_draft import BranchMergeDrafting
from napari_shardscope.core.proofreading.controller_base import NavigationListener, StateListener
from napari_shardscope.core.proofreading.jobs import Job
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
from napari_shardscope.core.proofreading.split_draft import MAX_SEED_VOXELS, SplitDrafting
from napari_shardscope.core.proofreading.state import MODES, BodyInfo, Mode
from napari_shardscope.core.proofreading.synapse_todo import make_synapse_todo
from napari_shardscope.core.proofreading.synapses import SynapseSource
from napari_shardscope.core.proofreading.todo import TodoItem, Worklist
from napari_shardscope.core.proofreading.wording import (
    describe_bounds,
    describe_commit,
    describe_edit,
    describe_edits,
    describe_relation,
    describe_undo,
    edit_phrase,
    plural,
)
from napari_shardscope.core.versioned import Version

__all__ = ["ACTIONS", "HISTORY_SHOWN", "MAX_SEED_VOXELS", "NavigationListener", "ProofreadingController",
           "StateListener"]

HISTORY_SHOWN = 5


class ProofreadingController(SplitDrafting, BranchMergeDrafting):
    """Selection, mode, pending split, merge plan, actions and messages over a :class:`ProofreadingSession`.

    The split and the branch merge being drafted are in :class:`SplitDrafting` and
    :class:`BranchMergeDrafting`; what every part shares (state, listeners, messages, jobs) in
    :class:`~napari_shardscope.core.proofreading.controller_base.ControllerBase`.
    """

    def __init__(self, session: ProofreadingSession | None = None) -> None:
        super().__init__(session)
        #: The to-do list being walked (statuses kept in the repository; see core/proofreading/todo.py).
        self.todo = Worklist(lambda: self.session.repo,
                             lambda: self.session.version.uuid if self.session.version is not None else None,
                             go=self.go_to_item)
        self.session.subscribe(self._on_session)

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
                raise ArgumentError(self._wait_text())
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

    def edit_words(self, m: Mutation) -> str:
        """Edit ``m`` of the checked-out version in words (an undo or redo names the edit it took back or put back)."""
        v = self.session.version
        return edit_phrase(m) if v is None else self._phrase(v, m)

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

    def synapse_todo(self, kind: str = "orphans", body: int | None = None, *, min_synapses: int = MIN_SYNAPSES,
                     replace_list: bool = False) -> str:
        """Make synapse to-do list ``kind`` (``"orphans"``/``"weak"``) of ``body`` (default: the first selected)
        at the checked-out version, store it there and open it in :attr:`todo`; returns the list's name.

        A list of that name already kept at this version is opened with its statuses (``replace_list``
        remakes it). See :mod:`~napari_shardscope.core.proofreading.synapse_todo`.
        """
        with self._action():
            v = self.session.version
            if v is None or self.session.repo is None:
                raise ArgumentError("open a repository first: synapse to-do lists are kept in it")
            if body is None:
                if not self._selected:
                    raise ArgumentError("select the body whose synapses to check")
                body = self._selected[0]
            inst = SynapseSource(self.session).instance()
            if inst is None:
                raise ArgumentError(f"the repository holds no annotation instance bound to labelmap "
                                    f"{v.labelmap.name!r}: no synapses to check")
            name, n = make_synapse_todo(self.todo, inst.at(v.uuid), kind, body=int(body), min_synapses=min_synapses,
                                        replace_list=replace_list)
            self._ok(f"to-do list {name!r}: {plural(n, 'site')} to check — Next goes to the first")
            return name

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
