"""The proofreading session: which repository, labelmap and version a proofreader has checked out.

One object holds the three, so everything that shows or edits "the current version" — the napari
layers, the Proofreading and Versions panels, a notebook, a script — agrees on it: a commit made
anywhere disables edits everywhere, a checkout switches what every view shows. The session only
keeps that state and the operations on versions (create/connect, checkout, commit, branch, merge a
branch, export); selections, messages and enabled actions are the controller's
(:mod:`.controller`), napari layers the viewer binding's (``widgets.session``).

Listeners get a :class:`SessionEvent` after every change. Edits may run in worker threads (a
split takes seconds); the labelmap tells its subscribers in the editing thread, and the session
hands its own notification to ``dispatch`` — by default it calls at once, a GUI passes a function
that queues the call on its own thread, so listeners always run where the GUI lives.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.export.precomputed import ExportReport, export_precomputed
from napari_shardscope.core.export.source import LabelmapSource, labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.labelmap import (
    TYPE_NAME,
    EditEvent,
    Labelmap,
    LabelmapVersion,
    create_labelmap,
    open_labelmap,
)
from napari_shardscope.core.labelmap.branch_merge import (
    BranchMergePlan,
    BranchMergeResult,
    Resolution,
    merge_branches,
    plan_branch_merge,
)
from napari_shardscope.core.labelmap.diff import VersionDiff, diff_versions
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.proofreading.imported import import_labels, labels_array
from napari_shardscope.core.proofreading.wording import committed_block
from napari_shardscope.core.versioned import Repository, Version, create_repository, open_repository

EventKind = Literal["connected", "disconnected", "checkout", "dag", "edited"]
ExportFormat = Literal["precomputed", "zarr3"]
LabelKind = Literal["bodies", "supervoxels"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("precomputed", "zarr3")
LABEL_KINDS: tuple[LabelKind, ...] = ("bodies", "supervoxels")
#: Reports long work as ``progress(done, total, what)`` (napari's progress bar, a terminal bar): the one
#: :class:`~napari_shardscope.core.progress.Progress` protocol, under the name the controller's jobs use.
JobProgress = Progress
#: Runs a callable on the listeners' thread: ``dispatch(call)``.
Dispatch = Callable[[Callable[[], None]], None]
NO_REPOSITORY = "no repository: create or open one"
#: Versions the Versions panel lists, newest first (it redraws them on every change).
VERSION_ROWS = 200


@dataclass(frozen=True)
class SessionEvent:
    """What changed in a session.

    Attributes
    ----------
    kind
        ``connected`` (a repository was opened and its ``main`` checked out), ``disconnected``,
        ``checkout`` (another version is shown), ``dag`` (versions or their locks changed:
        commit, new branch, merge), ``edited`` (a version's labels changed).
    version
        UUID of the checked-out version after the change (``None`` when disconnected).
    edit
        For ``edited``: the labelmap's event (which version, which mutation, whether blocks changed).
    revision
        The session's change counter after this event: views re-read the DAG when it moved.
    """

    kind: EventKind
    version: str | None
    revision: int
    edit: EditEvent | None = None


@dataclass(frozen=True)
class VersionRow:
    """One version as the Versions list shows it (newest first)."""

    uuid: str
    short: str
    branch: str
    locked: bool
    message: str
    edits: int
    parents: tuple[str, ...]
    created: float
    checked_out: bool


SessionListener = Callable[[SessionEvent], None]


def _call_now(call: Callable[[], None]) -> None:
    call()


def create_labelmap_repository(path: str | os.PathLike[str], base_url: str | None, *, name: str = "seg",
                               agglomeration: Any = None, engine: str | None = None,
                               progress: Progress | None = None, labels: Any = None,
                               labels_name: str = "labels", voxel_size: Sequence[float] = (1.0, 1.0, 1.0),
                               translate: Sequence[float] = (0.0, 0.0, 0.0)) -> str:
    """A new repository at ``path`` with labelmap ``name`` over ``base_url``, closed again; returns the base.

    ``labels`` (any array-like, z y x) is the segmentation itself, for data that has no path or URL
    shardscope reads (a numpy array, a TIFF napari opened): when ``base_url`` is ``None`` or does not
    open as a segmentation volume, ``labels`` is imported into the repository
    (:func:`~napari_shardscope.core.proofreading.imported.import_labels`, placed by ``voxel_size`` and
    ``translate``) and becomes the base. Building the base label index reads all of scale 0 once, so
    this is the part a GUI runs in a worker thread; connecting afterwards (on the GUI's thread) is cheap.
    """
    base = base_url if base_url and _opens_as_base(base_url, fallback=labels is not None) else None
    if base is None and labels is None:
        raise ArgumentError("give the segmentation: a path or URL of a volume, or its labels array")
    if base is None:
        labels = labels_array(labels)  # refused before anything is written
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    repo = create_repository(path, engine=engine)
    try:
        if base is None:
            base = import_labels(path, labels_name, labels, voxel_size=voxel_size, translate=translate,
                                 progress=progress)
        create_labelmap(repo, name, base, agglomeration=agglomeration, progress=progress)
    finally:
        repo.close()
    return base


def _opens_as_base(url: str, *, fallback: bool) -> bool:
    """Whether ``url`` opens as a labelmap base; with a ``fallback`` its failure is an answer, not an error."""
    from napari_shardscope.core.labelmap.config import scales_of
    from napari_shardscope.core.volumes import open_volume

    try:
        scales_of(open_volume(url, kind="segmentation"))
    except ShardscopeError:
        if not fallback:
            raise
        return False
    return True


class ProofreadingSession:
    """The repository, labelmap and checked-out version of one proofreader, and what changes them."""

    def __init__(self, *, dispatch: Dispatch | None = None) -> None:
        self._dispatch: Dispatch = dispatch or _call_now
        self._listeners: list[SessionListener] = []
        self._repo: Repository | None = None
        self._labelmap: Labelmap | None = None
        self._version: LabelmapVersion | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.revision = 0

    # -- state ----------------------------------------------------------------------------------
    @property
    def repo(self) -> Repository | None:
        return self._repo

    @property
    def labelmap(self) -> Labelmap | None:
        return self._labelmap

    @property
    def version(self) -> LabelmapVersion | None:
        """The checked-out version (its arrays, reads and edits), ``None`` until connected."""
        return self._version

    @property
    def is_connected(self) -> bool:
        return self._labelmap is not None and self._version is not None

    @property
    def editable(self) -> bool:
        """True when the checked-out version accepts edits (open, not committed)."""
        return self._version is not None and not self._version.version.locked

    def why_not_editable(self) -> str:
        """A sentence for disabled edit actions (``''`` when edits are allowed)."""
        if self._version is None:
            return "connect to a repository first (create or open one)"
        v = self._version.version
        if v.locked:
            return committed_block(v.short, v.branch)
        return ""

    def require(self) -> tuple[Repository, Labelmap, LabelmapVersion]:
        """The repository, labelmap and checked-out version, or the error a caller shows."""
        if self._repo is None or self._labelmap is None or self._version is None:
            raise ArgumentError(NO_REPOSITORY)
        return self._repo, self._labelmap, self._version

    # -- listeners ------------------------------------------------------------------------------
    def subscribe(self, listener: SessionListener) -> Callable[[], None]:
        """Call ``listener(event)`` after every change; returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _emit(self, kind: EventKind, edit: EditEvent | None = None) -> None:
        self.revision += 1
        event = SessionEvent(kind, self._version.uuid if self._version else None, self.revision, edit)
        for listener in list(self._listeners):
            listener(event)

    def _on_edit(self, event: EditEvent) -> None:
        """The labelmap's subscriber: runs in the editing thread, so hand the news to ``dispatch``."""
        def tell() -> None:
            if self._labelmap is not None and event.labelmap == self._labelmap.name:
                self._emit("edited", event)

        self._dispatch(tell)

    # -- connecting -----------------------------------------------------------------------------
    def create(self, path: str | os.PathLike[str], base_url: str, *, name: str = "seg",
               agglomeration: Any = None, engine: str | None = None,
               progress: Progress | None = None) -> LabelmapVersion:
        """A new repository at ``path`` with a labelmap over ``base_url``; checks out ``main``.

        ``agglomeration`` is the base's supervoxel → body grouping (a bodies JSON path or a mapping).
        """
        create_labelmap_repository(path, base_url, name=name, agglomeration=agglomeration, engine=engine,
                                   progress=progress)
        return self.connect(path, instance=name)

    def connect(self, path: str | os.PathLike[str], *, instance: str | None = None) -> LabelmapVersion:
        """Open an existing repository and its labelmap (the only one, or ``instance``); checks out ``main``."""
        repo = open_repository(path)
        try:
            names = [i.name for i in repo.instances() if i.type == TYPE_NAME]
            if instance is None:
                if len(names) != 1:
                    raise ArgumentError(f"{path}: {len(names)} labelmap instances ({', '.join(names) or 'none'}); "
                                        f"name the one to open")
                instance = names[0]
            lm = open_labelmap(repo, instance)
            branches = {b.name for b in repo.branches()}
            version = lm.at("main" if "main" in branches else repo.root.uuid)
        except BaseException:
            repo.close()
            raise
        self._close()
        self._repo, self._labelmap, self._version = repo, lm, version
        self._unsubscribe = lm.subscribe(self._on_edit)
        self._emit("connected")
        return version

    def _close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._repo is not None:
            self._repo.close()
        self._repo = self._labelmap = self._version = None

    def disconnect(self) -> None:
        """Close the repository (views keep what they show until their user removes it)."""
        if self._repo is None:
            return
        self._close()
        self._emit("disconnected")

    # -- versions -------------------------------------------------------------------------------
    def checkout(self, ref: str) -> LabelmapVersion:
        """Show any version (a branch name means its head, a UUID prefix names one)."""
        _, lm, _ = self.require()
        self._version = lm.at(ref)
        self._emit("checkout")
        return self._version

    def commit(self, message: str) -> Version:
        """Commit the checked-out (open) version: it becomes read-only, and may have children."""
        repo, _, v = self.require()
        if not message.strip():
            raise ArgumentError("write a commit message")
        done = repo.commit(v.uuid, message)
        self._emit("dag")
        return done

    def commit_and_continue(self, message: str) -> tuple[Version, Version]:
        """Commit the checked-out version and check out a new open child on the same branch.

        Returns ``(committed, child)``. The child is made right after the commit; should making it
        fail, the commit stands and the committed version stays checked out (read-only).
        """
        done = self.commit(message)
        repo, _, _ = self.require()
        child = repo.new_version(done.uuid)
        self._emit("dag")
        self.checkout(child.uuid)
        return done, child

    def branch(self, name: str | None = None, parent: str | None = None) -> Version:
        """A new open child of a committed version (default: the checked-out one), checked out.

        ``name`` starts a new branch; ``None`` continues the parent's branch.
        """
        repo, _, v = self.require()
        child = repo.new_version(parent or v.uuid, name)
        self._emit("dag")
        self.checkout(child.uuid)
        return child

    def plan_branch_merge(self, theirs: str) -> BranchMergePlan:
        """What merging branch ``theirs`` into the checked-out version involves (nothing written)."""
        _, lm, v = self.require()
        return plan_branch_merge(lm, v.uuid, theirs)

    def merge_branch(self, theirs: str, resolutions: Mapping[str, Resolution] | None = None) -> BranchMergeResult:
        """Merge branch ``theirs`` into the checked-out (committed) version; checks out the open merge version.

        ``resolutions`` maps each conflict key (``"body:12"``) to the side kept; an unresolved
        conflict refuses the merge and writes nothing.
        """
        return self.show_branch_merge(self.write_branch_merge(theirs, resolutions))

    def write_branch_merge(self, theirs: str, resolutions: Mapping[str, Resolution] | None = None, *,
                           ours: str | None = None) -> BranchMergeResult:
        """The store half of :meth:`merge_branch`: writes the merge version, tells no listener (any thread).

        ``ours`` (default: the version checked out now) is the version merged into. A worker thread
        passes the one its caller planned with: by the time it runs, the caller's thread may have
        checked out another.
        """
        _, lm, v = self.require()
        return merge_branches(lm, ours or v.uuid, theirs, resolutions=resolutions)

    def show_branch_merge(self, result: BranchMergeResult) -> BranchMergeResult:
        """The listeners' half of :meth:`merge_branch`: the DAG changed, the merge version is checked out."""
        self._emit("dag")
        self.checkout(result.version.uuid)
        return result

    def diff(self, a: str, b: str) -> VersionDiff:
        """The mutations only ``a`` has and only ``b`` has, and the bodies they touched."""
        _, lm, _ = self.require()
        return diff_versions(lm, a, b)

    def head(self, branch: str) -> Version:
        repo, _, _ = self.require()
        return repo.head(branch)

    def resolve(self, ref: str) -> Version:
        """The version ``ref`` names (branch name or UUID prefix)."""
        repo, _, _ = self.require()
        return repo.version(ref)

    def branch_names(self) -> list[str]:
        repo, _, _ = self.require()
        return [b.name for b in repo.branches()]

    def version_rows(self, limit: int = VERSION_ROWS) -> list[VersionRow]:
        """The newest ``limit`` versions, newest first (and the checked-out one, if older), with each
        one's own edit count and parents (short UUIDs).

        Bounded whatever the history: the Versions panel draws these rows on every change, and a
        repository may hold 10⁵ versions; :meth:`version_total` says how many there are in all.
        """
        if self._repo is None or self._labelmap is None:
            return []
        repo = self._repo
        current = self._version.uuid if self._version is not None else None
        shown = list(repo.newest(limit))
        if current is not None and all(v.uuid != current for v in shown):
            shown.append(repo.version(current))
        edits = self._own_edit_counts(shown)
        return [VersionRow(v.uuid, v.short, v.branch, v.locked, v.message, edits.get(v.uuid, 0),
                           tuple(p[:8] for p in v.parents), v.created, v.uuid == current)
                for v in shown]

    def version_total(self) -> int:
        """How many versions the repository holds (one record read)."""
        return 0 if self._repo is None else self._repo.version_count()

    def _own_edit_counts(self, shown: Sequence[Version]) -> dict[str, int]:
        """Mutations each shown version's own log holds.

        A version's state holds the logs of its first-parent chain (a branch merge carries the
        other side's edits in one record), so one state per chain tip covers every version:
        newest first, each shown version not yet on a visited chain is a tip; a chain is followed
        only while it stays among the shown versions.
        """
        repo, lm = self._repo, self._labelmap
        if repo is None or lm is None:
            return {}
        window = {v.uuid: v for v in shown}
        counts: dict[str, int] = {}
        seen: set[int] = set()
        covered: set[str] = set()
        for v in sorted(shown, key=lambda v: v.vid, reverse=True):
            if v.uuid in covered:
                continue
            for entry in lm.at(v.uuid).mutations():
                if entry.mutation.mutation_id not in seen:
                    seen.add(entry.mutation.mutation_id)
                    counts[entry.version] = counts.get(entry.version, 0) + 1
            cur: Version | None = v
            while cur is not None and cur.uuid not in covered:
                covered.add(cur.uuid)
                cur = window.get(cur.parents[0]) if cur.parents else None
        return counts

    # -- exporting ------------------------------------------------------------------------------
    def default_export_dest(self, ref: str, fmt: ExportFormat = "precomputed", labels: LabelKind = "bodies") -> Path:
        """``<repo>-<version>-<labels>[.zarr]`` beside the repository directory."""
        repo, _, _ = self.require()
        where = Path(str(repo.path))
        suffix = ".zarr" if fmt == "zarr3" else ""
        return where.parent / f"{where.name}-{repo.version(ref).short}-{labels}{suffix}"

    def export_source(self, ref: str, labels: LabelKind = "bodies") -> LabelmapSource:
        """The export source of version ``ref``: refused unless it is committed (a reproducible snapshot)."""
        repo, lm, _ = self.require()
        if labels not in LABEL_KINDS:
            raise ArgumentError(f"labels must be one of {LABEL_KINDS}, got {labels!r}")
        return labelmap_source(repo.path, lm.name, ref, labels=labels)

    @staticmethod
    def write_export(source: LabelmapSource, dest: str, fmt: ExportFormat = "precomputed", *,
                     progress: JobProgress | None = None) -> ExportReport:
        """Write ``source`` as a sharded volume (one Dask task per shard); any thread may run it."""
        if fmt not in EXPORT_FORMATS:
            raise ArgumentError(f"format must be one of {EXPORT_FORMATS}, got {fmt!r}")
        write = export_zarr3 if fmt == "zarr3" else export_precomputed
        return write(source, dest, progress=progress)

    def export(self, dest: str | None = None, *, ref: str | None = None, fmt: ExportFormat = "precomputed",
               labels: LabelKind = "bodies", progress: JobProgress | None = None) -> ExportReport:
        """Export committed version ``ref`` (default: the checked-out one) to ``dest`` (default beside the repo)."""
        _, _, v = self.require()
        source = self.export_source(ref or v.uuid, labels)
        target = dest or str(self.default_export_dest(source.version, fmt, labels))
        return self.write_export(source, target, fmt, progress=progress)
