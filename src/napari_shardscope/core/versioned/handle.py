"""What every repository operation stands on: a handle's state, caught up with other handles, and its transactions.

A repository is a directory holding a marker file (``shardscope-repository.json``: format, engine,
root UUID), the engine's files and ``writer.lock``. Everything else — the DAG, data instances,
notes, per-version logs and the data — lives in one ordered key-value engine, so every operation
that changes the store is *one* engine transaction: a crash leaves the old or the new state.

The DAG is not held in memory (format 2, :mod:`~napari_shardscope.core.versioned.dagindex`): a
version, a branch head, a UUID prefix, children or an ancestor set are each a record or a short
range scan read when asked, through bounded caches, so opening a repository reads a few records
whatever its history. Format-1 repositories (every version record read at open) are upgraded in
place, in one transaction, the first time they are opened writable (:mod:`.migrate`).

Processes: any number may read; writers serialise on :class:`WriterLock` (with a timeout). A
generation counter in the store changes with every write that changes the DAG or the instances,
and a journal record names the versions a generation rewrote (a commit), so a handle that sees a new
generation forgets only those (and re-reads the instances), and every write transaction does so
first: no process writes through a stale view and no update is lost.

:class:`RepositoryHandle` holds exactly that — the engine, the lock, the DAG caches, the instances,
the snapshot and write transactions, resolving a reference to a version — and nothing a user calls
for its own sake; :class:`~.repository.Repository` is assembled from it and the modules of each
concept built on it (:mod:`.history`, :mod:`.unversioned`, :mod:`.counters`, :mod:`.transfer`,
:mod:`.fsck`, :mod:`.access`), so each holds one room of what was one 1,400-line class.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError, ReadOnlyStorageError, StoragePermissionError
from napari_shardscope.core.versioned.ancestry import AncestorSet
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.dagcache import DagIndex, read_journal
from napari_shardscope.core.versioned.dagindex import DagReader, DagWriter
from napari_shardscope.core.versioned.engines import OrderedKV, ReadTxn, WriteTxn
from napari_shardscope.core.versioned.errors import (
    BranchExistsError,
    CommittedVersionError,
    NotARepositoryError,
    OpenParentError,
    RepositoryFormatError,
    StoreCorruptError,
    UnknownInstanceError,
)
from napari_shardscope.core.versioned.hollow import HOLLOW_FLAG_KEY, HollowEngine, HollowValues, hollow_summary
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.tracking import check_not_tracking_name, resolve_tracking_name
from napari_shardscope.core.versioned.upgrade import FORMAT_VERSION, upgrade_format
from napari_shardscope.core.versioned.writer_lock import DEFAULT_TIMEOUT, WriterLock

FORMAT_NAME = "napari-shardscope versioned repository"


class _Pending:
    """One write transaction: its DAG writer, and the in-memory changes to apply once it committed."""

    def __init__(self, txn: WriteTxn, dag: DagWriter) -> None:
        self.txn = txn
        self.dag = dag
        self.actions: list[Callable[[], None]] = []
        self.dag_changed = False
        #: This transaction marked a version hollow (the flag record and the switch to hollow reads: once).
        self.marked_hollow = False

    def after(self, action: Callable[[], None]) -> None:
        self.actions.append(action)
        self.dag_changed = True

    def touched(self) -> None:
        """The DAG changed (new or rewritten versions): the generation moves on."""
        self.dag_changed = True


class RepositoryHandle:
    """The state and transactions of one repository handle (see the module docstring); the base of
    :class:`~.repository.Repository` and of each concept's part of it."""

    def __init__(self, engine: OrderedKV, directory: Path | None, *, lock_timeout: float = DEFAULT_TIMEOUT) -> None:
        self._engine = engine
        self.path = directory
        self._lock = WriterLock(directory, lock_timeout)
        self._state = threading.RLock()
        self._index = DagIndex()
        self._instances: dict[str, Instance] = {}
        self._root_uuid = ""
        self._closed = False
        self._hollow: HollowValues | None = None  # set once the repository holds hollow versions (a lazy clone)
        #: The format this handle found and upgraded at open (None: it was current).
        self.upgraded_from: int | None = None

    # -- life cycle -----------------------------------------------------------------------------

    @property
    def engine(self) -> str:
        """Name of the engine under this repository."""
        return self._engine.name

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (readers holding data of it may keep showing what they read)."""
        return self._closed

    def close(self) -> None:
        """Close the engine and the lock file."""
        if not self._closed:
            self._closed = True
            self._engine.close()
            self._lock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Repository({str(self.path) if self.path else '<memory>'!r}, engine={self.engine!r})"

    # -- state loading --------------------------------------------------------------------------

    def _read_format(self, txn: ReadTxn) -> dict[str, Any]:
        """The format record; refuses stores that are not repositories or are newer than this library."""
        raw = txn.get(K.FORMAT_KEY)
        if raw is None:
            raise NotARepositoryError(f"{self.path}: the store holds no repository format record")
        try:
            fmt = json.loads(raw)
            ok = isinstance(fmt, dict) and fmt.get("format") == FORMAT_NAME and isinstance(fmt.get("version", 0), int)
        except ValueError:
            ok = False
        if not ok:
            raise StoreCorruptError(f"{self.path}: unrecognised repository format record")
        if int(fmt.get("version", 0)) > FORMAT_VERSION:
            raise StoreCorruptError(f"{self.path}: repository format {fmt['version']} is newer than this library "
                                    f"(format {FORMAT_VERSION}); upgrade napari-shardscope")
        return dict(fmt)

    def _read_instances(self, txn: ReadTxn) -> dict[str, Instance]:
        instances: dict[str, Instance] = {}
        for key, value in txn.scan(K.INSTANCE_PREFIX, K.next_prefix(K.INSTANCE_PREFIX)):
            try:
                r = json.loads(value)
                inst = Instance(name=str(r["name"]), type=str(r["type"]), iid=K.unpack_u32(key[-4:]),
                                config=dict(r.get("config", {})))
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreCorruptError(f"{self.path}: unreadable instance record: {exc}") from exc
            instances[inst.name] = inst
        return instances

    def _open_state(self, txn: ReadTxn) -> None:
        """Read what a handle needs at open: the format (current), the root, the instances. O(1) in history."""
        fmt = self._read_format(txn)
        if int(fmt.get("version", 0)) != FORMAT_VERSION:
            raise RepositoryFormatError(
                f"{self.path}: repository format {fmt.get('version')} must be upgraded to {FORMAT_VERSION} "
                f"(open it where it can be written, or run `shardscope repo migrate {self.path}`)")
        root = fmt.get("root")
        if not isinstance(root, str):
            raise StoreCorruptError(f"{self.path}: the format record names no root version")
        self._root_uuid = root
        if txn.get(HOLLOW_FLAG_KEY) is not None:
            self._enable_hollow()
        self._catch_up(txn, self._read_generation(txn), force=True)
        reader = DagReader(self._index, txn, self._index.generation)
        if reader.max_vid() == 0:
            raise StoreCorruptError(f"{self.path}: repository has no versions")
        if reader.by_uuid(root).parents:
            raise StoreCorruptError(f"{self.path}: the root version {root} has parents")

    def _catch_up(self, txn: ReadTxn, generation: int, *, force: bool = False) -> None:
        """Bring memory to ``txn``'s ``generation``: forget the versions its journal names, re-read instances.

        Generations only grow, so a snapshot older than what memory holds changes nothing (a reader
        that raced a writer in this process must not put back the state before the write).
        """
        with self._state:
            if generation <= self._index.generation and not force:
                return
            changed = None if self._index.generation < 0 else read_journal(txn, self._index.generation, generation)
            self._instances = self._read_instances(txn)
            if self._hollow is not None:
                self._hollow.forget()  # another handle may have adopted hollow versions
            elif txn.get(HOLLOW_FLAG_KEY) is not None:
                self._enable_hollow()
            if force:
                self._index.reset()
            self._index.advance(generation, changed)

    def _enable_hollow(self) -> None:
        """Read through :class:`~.hollow.HollowTxn` from now on: the repository holds hollow versions."""
        with self._state:
            if self._hollow is None:
                self._hollow = HollowValues(self)
                self._engine = HollowEngine(self._engine, self._hollow)

    @property
    def lazy(self) -> bool:
        """True when some versions' data stay on a remote until first read (a lazy clone)."""
        return self._hollow is not None

    def not_local(self) -> tuple[int, dict[str, set[str]]]:
        """Hollow versions (data on a remote until first read): their count, and their data objects per remote."""
        with self._engine.read() as txn:
            return hollow_summary(txn)

    @staticmethod
    def _read_generation(txn: ReadTxn) -> int:
        raw = txn.get(K.GENERATION_KEY)
        if raw is None or len(raw) != 8:
            raise StoreCorruptError("repository generation counter is missing")
        return K.unpack_u64(raw)

    @contextmanager
    def _snapshot(self) -> Iterator[DagReader]:
        """A read transaction and the DAG as it sees it (memory caught up first if the store moved on)."""
        if self._closed:
            raise ArgumentError("the repository is closed")
        with self._engine.read() as txn:
            generation = self._read_generation(txn)
            if generation != self._index.generation:
                self._catch_up(txn, generation)
            yield DagReader(self._index, txn, generation)

    def _sync(self) -> None:
        """Catch up with other handles' writes (one engine get when nothing changed)."""
        with self._snapshot():
            pass

    def version_by_id(self, vid: int) -> Version:
        """The version with repository-local id ``vid`` (ids appear in keys, logs and change lists)."""
        hit = self._index.cached_version(vid)
        if hit is not None:
            return hit
        with self._snapshot() as dag:
            return dag.by_vid(vid)

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _writing(self, timeout: float | None = None) -> Iterator[_Pending]:
        """One write transaction under the writer lock, on a caught-up view of the DAG.

        The DAG writer changes only the store; memory learns of it once the engine has committed,
        while the lock is still held (the caches forget what was rewritten), so memory never runs
        ahead of disk.
        """
        if self._closed:
            raise ArgumentError("the repository is closed")
        with self._lock.hold(timeout):
            with self._engine.write() as txn:
                generation = self._read_generation(txn)
                if generation != self._index.generation:
                    self._catch_up(txn, generation)
                # DAG records are never hollow: the DAG writer reads and writes them past the hollow
                # layer (a lazy clone adopts 10⁵ versions' records through it otherwise)
                pending = _Pending(txn, DagWriter(self._index, getattr(txn, "inner_txn", txn), generation))
                yield pending
                written = generation + 1
                if pending.dag_changed:
                    pending.txn.put(K.GENERATION_KEY, K.pack_u64(written))
                    if pending.dag.changed:  # what other handles must forget (new versions: nothing)
                        pending.txn.put(K.journal_key(written), json.dumps(sorted(pending.dag.changed)).encode())
            if pending.dag_changed:
                with self._state:
                    # Between the engine's commit and here another thread may have caught up with
                    # this very write from disk; its actions are then in memory already.
                    if self._index.generation < written:
                        for action in pending.actions:
                            action()
                        self._index.advance(written, pending.dag.changed)

    def _upgrade(self) -> None:
        """Upgrade an older format in place: one transaction under the writer lock (old or new after a crash).

        A repository that cannot be written here (read-only filesystem or files) is refused with
        :class:`RepositoryFormatError` naming ``shardscope repo migrate``.
        """
        try:
            with self._lock.hold(), self._engine.write() as txn:
                fmt = self._read_format(txn)  # again: another process may have upgraded it meanwhile
                found = int(fmt.get("version", 0))
                if found < FORMAT_VERSION:
                    upgrade_format(txn, fmt)
                    self.upgraded_from = found
        except (ReadOnlyStorageError, StoragePermissionError) as exc:
            raise RepositoryFormatError(
                f"{self.path}: repository format is older than {FORMAT_VERSION} and cannot be upgraded here "
                f"({exc}); copy it somewhere writable and run `shardscope repo migrate`") from exc
        self._index.reset()

    # -- versions -------------------------------------------------------------------------------

    def version(self, ref: str | Version) -> Version:
        """The version named by a branch name (its head), a UUID prefix, a :class:`Version`, or a
        remote-tracking name (``origin/main``: the head last fetched from remote ``origin``, see
        :mod:`~napari_shardscope.core.versioned.tracking`), which wins over any local branch."""
        if isinstance(ref, Version):
            hit = self._index.cached_version(ref.vid)
            if hit is not None and hit.uuid == ref.uuid:
                return hit
        with self._snapshot() as dag:
            return self._resolve(dag, ref)

    def _ancestors(self, v: Version) -> AncestorSet:
        hit = self._index.cached_ancestors(v.vid)
        if hit is not None:
            return hit
        with self._snapshot() as dag:
            return dag.ancestors(self._resolve(dag, v))

    def _fresh(self, ref: str | Version) -> Version:
        """Resolve with the store's current state (a new snapshot)."""
        with self._snapshot() as dag:
            return self._resolve(dag, ref)

    def _resolve(self, dag: DagReader, ref: str | Version) -> Version:
        """``ref`` in ``dag``: every text reference goes through here, so a remote-tracking name
        (``origin/main``) means the remote's head wherever a version is named."""
        return dag.resolve(self._tracked(ref))

    def _tracked(self, ref: str | Version) -> str | Version:
        """``ref``, or the UUID it names when it is a remote-tracking name (``<remote>/<branch>``)."""
        if isinstance(ref, str) and "/" in ref:
            node = resolve_tracking_name(self.path, ref)
            if node is not None:
                return node
        return ref

    def _check_new_branch(self, dag: DagReader, name: str) -> None:
        """A new branch name: well formed, unused, and not a remote-tracking name (``origin/…``)."""
        dag.check_new_branch(name)
        check_not_tracking_name(self.path, name)

    def _writable(self, dag: DagReader, ref: str | Version) -> Version:
        v = self._resolve(dag, ref)
        if v.locked:
            raise CommittedVersionError(
                f"version {v.short} on {v.branch} is committed (read-only): start a new version after it "
                f"to change data (shardscope repo branch, or New version in the Versions panel)"
            )
        return v

    def _child_branch(self, dag: DagReader, parent: Version, branch: str | None) -> str:
        if not parent.locked:
            committed = next((p for p in parent.parents if dag.by_uuid(p).locked), None)
            instead = f", or make the new version a child of its committed parent {committed[:8]}" if committed else ""
            raise OpenParentError(
                f"version {parent.short} (branch {parent.branch!r}) is open; commit it before making children"
                f"{instead}", version=parent.uuid, committed_parent=committed)
        if branch is None:
            child = dag.continuing_child(parent)
            if child is not None:
                raise BranchExistsError(
                    f"version {parent.short} already has child {child.short} continuing branch "
                    f"{parent.branch!r}; give a new branch name"
                )
            return parent.branch
        self._check_new_branch(dag, branch)
        return branch

    # -- instances ------------------------------------------------------------------------------

    def instances(self) -> list[Instance]:
        """All data instances, by id."""
        with self._state:
            return sorted(self._instances.values(), key=lambda i: i.iid)

    def instance(self, ref: Instance | str) -> Instance:
        """The instance named ``ref`` (an :class:`Instance` is returned as is)."""
        if isinstance(ref, Instance):
            return ref
        hit = self._instances.get(ref)
        if hit is not None:
            return hit
        self._sync()
        hit = self._instances.get(ref)
        if hit is None:
            names = ", ".join(sorted(self._instances)) or "none"
            raise UnknownInstanceError(f"no data instance named {ref!r} (instances: {names})")
        return hit

    def _ancestors_in(self, dag: DagReader, v: Version) -> AncestorSet:
        """``v``'s ancestor set inside a write: from the cache when the version predates the transaction."""
        hit = self._index.cached_ancestors(v.vid)
        return hit if hit is not None and dag.generation == self._index.generation else dag.ancestors(v)
