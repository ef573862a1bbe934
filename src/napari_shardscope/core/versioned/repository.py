"""A versioned repository on local disk, on DVID's model (paper §2.2–2.3): embedded, no server.

A repository is a directory holding a marker file (``shardscope-repository.json``: format, engine,
root UUID), the engine's files and ``writer.lock``. Everything else — the DAG, data instances,
notes, per-version logs and the data — lives in one ordered key-value engine, so every operation
that changes the store is *one* engine transaction: a crash leaves the old or the new state.

Reads at a version follow DVID's rule (:mod:`~napari_shardscope.core.versioned.view`): one walk
over a key's versions, the version's ancestor set picking the nearest ancestor. Merges make a
version with two parents (:mod:`~napari_shardscope.core.versioned.merge`).

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
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.bytestore import write_file_atomic
from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import ArgumentError, ReadOnlyStorageError, StorageFaultError, StoragePermissionError
from napari_shardscope.core.versioned.ancestry import AncestorSet
from napari_shardscope.core.versioned.dag import (
    ROOT_BRANCH,
    Branch,
    Dag,
    Note,
    Version,
    new_uuid,
)
from napari_shardscope.core.versioned.dagindex import DagIndex, DagReader, DagWriter, check_index, read_journal
from napari_shardscope.core.versioned.engines import ENGINES, OrderedKV, ReadTxn, WriteTxn, engine_kind, open_engine
from napari_shardscope.core.versioned.errors import (
    BranchExistsError,
    CommittedVersionError,
    InstanceExistsError,
    LockTimeoutError,
    MergeConflictError,
    NotARepositoryError,
    OpenParentError,
    RepositoryFormatError,
    StoreCorruptError,
    UncommittedVersionError,
    UnknownBranchError,
    UnknownInstanceError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.hollow import (
    HOLLOW_FLAG_KEY,
    HollowEngine,
    HollowRef,
    HollowValues,
    hollow_key,
    hollow_summary,
)
from napari_shardscope.core.versioned.instance import Instance, check_instance
from napari_shardscope.core.versioned.merge import MERGE_POLICIES, MergePolicy, MergeResult, plan_merge
from napari_shardscope.core.versioned.node import NodeContent, NodeEntry, NodeLog, NodeNote
from napari_shardscope.core.versioned.tracking import check_not_tracking_name, resolve_tracking_name
from napari_shardscope.core.versioned.upgrade import FORMAT_VERSION, upgrade_format
from napari_shardscope.core.versioned.view import VersionView, VersionWriter, allocate_ids, decode_blocks, encode_blocks
from napari_shardscope.core.versioned.writer_lock import DEFAULT_TIMEOUT, WriterLock

MARKER_FILE = "shardscope-repository.json"
FORMAT_NAME = "napari-shardscope versioned repository"
#: The default engine: on the labelmap's pattern (28 KB gets, 1,000-key scans, batched puts) LMDB is
#: the faster one; see bench/versioned.py.
DEFAULT_ENGINE = "lmdb"

# ---------------------------------------------------------------------------------------------
# The repository
# ---------------------------------------------------------------------------------------------


class _Pending:
    """One write transaction: its DAG writer, and the in-memory changes to apply once it committed."""

    def __init__(self, txn: WriteTxn, dag: DagWriter) -> None:
        self.txn = txn
        self.dag = dag
        self.actions: list[Callable[[], None]] = []
        self.dag_changed = False

    def after(self, action: Callable[[], None]) -> None:
        self.actions.append(action)
        self.dag_changed = True

    def touched(self) -> None:
        """The DAG changed (new or rewritten versions): the generation moves on."""
        self.dag_changed = True


class Repository:
    """A versioned repository; obtain one with :func:`create_repository` or :func:`open_repository`.

    Thread-safe; one object per process and path is enough, but several are fine.
    """

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

    def __enter__(self) -> Repository:
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
                pending = _Pending(txn, DagWriter(self._index, txn, generation))
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

    @contextmanager
    def batch(self, *, timeout: float | None = None) -> Iterator[Batch]:
        """Several DAG and data changes in *one* transaction: all of them, or none after a crash.

        Made for ingesting histories (a generator of test repositories, an importer): 1,000 new
        versions with a commit each cost one transaction instead of 2,000. The batch's methods are
        those of the repository (:class:`Batch`); nothing else may write while the block runs.
        """
        with self._writing(timeout) as p:
            yield Batch(self, p)

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

    @property
    def root(self) -> Version:
        """The root version."""
        with self._snapshot() as dag:
            return dag.by_uuid(self._root_uuid)

    def versions(self) -> list[Version]:
        """All versions in creation order (reads every version record: O(history); see :meth:`log`)."""
        with self._snapshot() as dag:
            return dag.all_versions()

    def newest(self, limit: int | None = None, *, since: datetime | float | None = None) -> Iterator[Version]:
        """Versions by creation, newest first, read as consumed (one snapshot): at most ``limit``,
        stopping at the first created before ``since`` (a time). Reads only what it yields."""
        limit = _check_limit(limit)
        since_time = _since_time(since)
        with self._snapshot() as dag:
            yield from dag.newest(limit, since_time=since_time)

    def version_count(self) -> int:
        """How many versions there are (one key read: ids are handed out densely and never reused)."""
        with self._snapshot() as dag:
            return dag.max_vid()

    def has_branch(self, name: str) -> bool:
        """True when a branch is named ``name`` (one record read)."""
        with self._snapshot() as dag:
            return dag.has_branch(name)

    def branches(self) -> list[Branch]:
        """All branches with their base and head (one record per branch)."""
        with self._snapshot() as dag:
            return dag.branches()

    def head(self, branch: str) -> Version:
        """The head (last version) of ``branch``."""
        with self._snapshot() as dag:
            return dag.head(branch)

    def parents(self, ref: str | Version) -> list[Version]:
        """The parents of a version."""
        with self._snapshot() as dag:
            v = self._resolve(dag, ref)
            return [dag.by_uuid(p) for p in v.parents]

    def children(self, ref: str | Version) -> list[Version]:
        """The children of a version."""
        with self._snapshot() as dag:
            return dag.children(self._resolve(dag, ref))

    def ancestry(self, ref: str | Version) -> list[Version]:
        """The version and all its ancestors, newest first.

        Reads one record per ancestor (O(history)); :meth:`log` with a limit, :meth:`is_ancestor` and
        :meth:`merge_base` answer the usual questions reading only what they need.
        """
        with self._snapshot() as dag:
            return dag.ancestry(self._resolve(dag, ref))

    def is_ancestor(self, ancestor: str | Version, descendant: str | Version) -> bool:
        """True when ``ancestor`` is ``descendant`` or one of its ancestors (one ancestor-set read)."""
        with self._snapshot() as dag:
            return dag.is_ancestor(self._resolve(dag, ancestor), self._resolve(dag, descendant))

    def merge_base(self, a: str | Version, b: str | Version) -> Version:
        """The common ancestor of ``a`` and ``b`` created last (what a merge compares against)."""
        with self._snapshot() as dag:
            return dag.merge_base(self._resolve(dag, a), self._resolve(dag, b))

    def log(self, ref: str | Version = ROOT_BRANCH, *, limit: int | None = None,
            since: str | Version | datetime | float | None = None, first_parent: bool = False) -> Iterator[Version]:
        """``ref`` and its ancestors, newest first (``git log`` order), read as they are consumed.

        The walk runs in one snapshot held while the iterator is consumed (close it, or let it run
        out, to release it).

        Parameters
        ----------
        ref
            Where to start: a branch name (its head), a UUID prefix or a :class:`Version`.
        limit
            At most this many versions; the walk reads O(limit) records whatever the history.
        since
            A version (``str``/:class:`Version`): leave out it and its ancestors (``git log since..ref``).
            A time (:class:`~datetime.datetime`, or Unix seconds as a number): stop at the first
            version, in log order, created before it.
        first_parent
            Follow only first parents (the branch each merge was made on), as ``git log --first-parent``.
        """
        limit = _check_limit(limit)
        since_time = None if isinstance(since, str | Version) else _since_time(since)
        with self._snapshot() as dag:
            start = self._resolve(dag, ref)
            exclude = dag.ancestors(self._resolve(dag, since)) if isinstance(since, str | Version) else None
            yield from dag.log(start, limit=limit, since=exclude, since_time=since_time, first_parent=first_parent)

    def _ancestors(self, v: Version) -> AncestorSet:
        hit = self._index.cached_ancestors(v.vid)
        if hit is not None:
            return hit
        with self._snapshot() as dag:
            return dag.ancestors(self._resolve(dag, v))

    def commit(self, ref: str | Version, message: str, *, timeout: float | None = None) -> Version:
        """Lock an open version with a commit message; it becomes immutable and may have children."""
        with self._writing(timeout) as p:
            return self._commit_in(p, ref, message)

    def _commit_in(self, p: _Pending, ref: str | Version, message: str) -> Version:
        if not isinstance(message, str):
            raise ArgumentError("the commit message must be a string")
        v = self._writable(p.dag, ref)
        done = Version(uuid=v.uuid, vid=v.vid, parents=v.parents, branch=v.branch, locked=True, message=message,
                       created=v.created, committed=time.time())
        p.dag.update(done)
        p.touched()
        return done

    def new_version(self, parent: str | Version, branch: str | None = None, *,
                    timeout: float | None = None) -> Version:
        """A new open child of the committed ``parent``.

        Without ``branch`` the child continues the parent's branch (at most one child may); with
        it, the child starts that new branch (names are unique across the DAG).
        """
        with self._writing(timeout) as p:
            return self._new_version_in(p, parent, branch)

    def _new_version_in(self, p: _Pending, parent: str | Version, branch: str | None) -> Version:
        par = self._resolve(p.dag, parent)
        name = self._child_branch(p.dag, par, branch)
        v = Version(uuid=new_uuid(), vid=p.dag.max_vid() + 1, parents=(par.uuid,), branch=name,
                    locked=False, message="", created=time.time(), committed=None)
        p.dag.add(v)
        p.touched()
        return v

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

    def notes(self, ref: str | Version) -> list[Note]:
        """The append-only notes of a version, oldest first."""
        v = self.version(ref)
        prefix = K.NOTE_PREFIX + K.pack_u32(v.vid)
        out = []
        with self._engine.read() as txn:
            for key, value in txn.scan(prefix, K.next_prefix(prefix)):
                r = json.loads(value)
                out.append(Note(version=v.uuid, seq=K.unpack_u64(key[-8:]), time=float(r["time"]), text=str(r["text"])))
        return out

    def add_note(self, ref: str | Version, text: str, *, timeout: float | None = None) -> Note:
        """Append a note to a version's log (allowed on committed versions: it changes no data)."""
        if not isinstance(text, str) or not text:
            raise ArgumentError("a note needs some text")
        with self._writing(timeout) as p:
            return self._append_note(p.txn, self._resolve(p.dag, ref), text)

    @staticmethod
    def _append_note(txn: WriteTxn, v: Version, text: str) -> Note:
        prefix = K.NOTE_PREFIX + K.pack_u32(v.vid)
        last = next(txn.scan_keys(prefix, K.next_prefix(prefix), reverse=True), None)
        seq = 0 if last is None else K.unpack_u64(last[-8:]) + 1
        note = Note(version=v.uuid, seq=seq, time=time.time(), text=text)
        txn.put(K.note_key(v.vid, seq), json.dumps({"time": note.time, "text": text}).encode())
        return note

    def allocate_ids(self, counter: str, count: int = 1, *, minimum: int = 1,
                     timeout: float | None = None) -> range:
        """Reserve ``count`` fresh integers from a repository-wide (unversioned) counter.

        See :meth:`VersionWriter.allocate_ids`; this form is its own transaction.
        """
        with self._writing(timeout) as p:
            return allocate_ids(p.txn, counter, count, minimum)

    # -- id reservations (clones of a remote) -----------------------------------------------------

    def id_source(self) -> str | None:
        """The remote this repository reserves ids from (None: it hands out its own)."""
        with self._engine.read() as txn:
            raw = txn.get(K.RESERVATION_MODE_KEY)
        return None if raw is None else raw.decode()

    def set_id_source(self, remote: str, *, timeout: float | None = None) -> None:
        """From now on allocate every counter's ids only from blocks reserved from ``remote``."""
        with self._writing(timeout) as p:
            p.txn.put(K.RESERVATION_MODE_KEY, remote.encode())

    def id_blocks(self, counter: str) -> list[tuple[int, int]]:
        """The unused reserved blocks ``[(start, end), ...]`` of ``counter``."""
        with self._engine.read() as txn:
            return decode_blocks(txn.get(K.RESERVATION_PREFIX + counter.encode("utf-8")))

    def counters(self) -> dict[str, int]:
        """Every local counter and the next id it would hand out (what a first push uploads)."""
        out: dict[str, int] = {}
        with self._engine.read() as txn:
            for key, value in txn.scan(K.COUNTER_PREFIX, K.next_prefix(K.COUNTER_PREFIX)):
                out[key[len(K.COUNTER_PREFIX):].decode("utf-8")] = K.unpack_u64(value)
            for key in txn.scan_keys(K.RESERVATION_PREFIX, K.next_prefix(K.RESERVATION_PREFIX)):
                out.setdefault(key[len(K.RESERVATION_PREFIX):].decode("utf-8"), 0)
        return out

    def add_id_block(self, counter: str, ids: range, *, timeout: float | None = None) -> None:
        """Record a block of ids reserved from the remote for ``counter`` (used after the older blocks)."""
        if ids.step != 1 or not ids:
            raise ArgumentError(f"an id block must be a non-empty contiguous range, got {ids!r}")
        key = K.RESERVATION_PREFIX + counter.encode("utf-8")
        with self._writing(timeout) as p:
            blocks = decode_blocks(p.txn.get(key))
            blocks.append((ids.start, ids.stop))
            p.txn.put(key, encode_blocks(blocks))

    # -- unversioned data -----------------------------------------------------------------------

    def get_unversioned(self, instance: Instance | str, key: bytes) -> bytes | None:
        """An instance's unversioned value of ``key`` (None when absent); see :meth:`put_unversioned`."""
        inst = self.instance(instance)
        with self._engine.read() as txn:
            return txn.get(K.unversioned_key(inst.iid, key))

    def get_unversioned_many(self, instance: Instance | str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Several unversioned values of an instance, in one snapshot (None for absent keys)."""
        inst = self.instance(instance)
        with self._engine.read() as txn:
            return txn.get_many([K.unversioned_key(inst.iid, key) for key in keys])

    def unversioned_generation(self, instance: Instance | str) -> int:
        """How many transactions have written ``instance``'s unversioned data (0: never).

        A remote sync records the value it saw with the pages it synced: while it stays the same, the
        unversioned data is those pages and need not be read again (see ``remotes.pages``).
        """
        inst = self.instance(instance)
        with self._engine.read() as txn:
            return _unversioned_generation(txn, inst.iid)

    def scan_unversioned(self, instance: Instance | str, prefix: bytes = b"") -> list[tuple[bytes, bytes]]:
        """An instance's unversioned ``(key, value)`` pairs whose key starts with ``prefix`` (one snapshot)."""
        inst = self.instance(instance)
        lo = K.unversioned_prefix(inst.iid, prefix)
        cut = len(K.unversioned_prefix(inst.iid))
        with self._engine.read() as txn:
            return [(key[cut:], value) for key, value in txn.scan(lo, K.next_prefix(lo))]

    def put_unversioned(self, instance: Instance | str,
                        items: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]], *,
                        timeout: float | None = None) -> int:
        """Store unversioned values of an instance in one transaction; returns how many.

        Unversioned data is shared by every version and belongs to none, so it may be written
        while every version is committed. It is meant for data derived from something immutable —
        the labelmap keeps the index of its (never modified) base volume here, built on first need
        even when the root is long committed. Versioned data must never go here: nothing records
        who changed it, and no version could be read as it was before.
        """
        inst = self.instance(instance)
        pairs = items.items() if isinstance(items, Mapping) else items
        n = 0
        with self._writing(timeout) as p:
            for key, value in pairs:
                if not isinstance(value, bytes):
                    raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
                p.txn.put(K.unversioned_key(inst.iid, key), value)
                n += 1
            _bump_unversioned(p.txn, inst.iid)
        return n

    def replace_unversioned(self, instance: Instance | str, prefixes: Iterable[bytes],
                            items: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]], *,
                            timeout: float | None = None) -> int:
        """Delete every unversioned key under ``prefixes`` and store ``items``, in one transaction.

        For derived data rebuilt whole (a label index rebuilt, a migration's new layout): readers see
        the old set or the new one, never stale keys of the old beside the new. Returns how many were stored.
        """
        inst = self.instance(instance)
        pairs = items.items() if isinstance(items, Mapping) else items
        n = 0
        with self._writing(timeout) as p:
            for prefix in prefixes:
                lo = K.unversioned_prefix(inst.iid, prefix)
                for key in list(p.txn.scan_keys(lo, K.next_prefix(lo))):
                    p.txn.delete(key)
            for key, value in pairs:
                if not isinstance(value, bytes):
                    raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
                p.txn.put(K.unversioned_key(inst.iid, key), value)
                n += 1
            _bump_unversioned(p.txn, inst.iid)
        return n

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

    def create_instance(self, name: str, type_name: str, config: Mapping[str, Any] | None = None, *,
                        timeout: float | None = None) -> Instance:
        """Add a data instance (repository-wide, like DVID's) of a registered type."""
        check_instance(name, type_name)
        cfg = dict(config or {})
        try:
            blob = json.dumps({"name": name, "type": type_name, "config": cfg}).encode()
        except TypeError as exc:
            raise ArgumentError(f"instance config must be JSON-serialisable: {exc}") from exc
        with self._writing(timeout) as p:
            if name in self._instances:
                raise InstanceExistsError(f"a data instance named {name!r} already exists")
            iid = max((i.iid for i in self._instances.values()), default=0) + 1
            inst = Instance(name=name, type=type_name, iid=iid, config=cfg)
            p.txn.put(K.instance_record_key(iid), blob)
            p.after(lambda: self._instances.__setitem__(name, inst))
        return inst

    # -- data access ----------------------------------------------------------------------------

    @contextmanager
    def read(self, ref: str | Version) -> Iterator[VersionView]:
        """Read any version (committed or open) inside one snapshot."""
        with self._snapshot() as dag:
            v = self._resolve(dag, ref)
            yield VersionView(self, v, dag.txn, dag.ancestors(v))

    @contextmanager
    def write(self, ref: str | Version, *, timeout: float | None = None) -> Iterator[VersionWriter]:
        """Write to an open version: everything in the block is one atomic transaction."""
        with self._writing(timeout) as p:
            yield self._writer_in(p, ref)

    def _writer_in(self, p: _Pending, ref: str | Version) -> VersionWriter:
        v = self._writable(p.dag, ref)
        return VersionWriter(self, v, p.txn, self._ancestors_in(p.dag, v))

    def _ancestors_in(self, dag: DagReader, v: Version) -> AncestorSet:
        """``v``'s ancestor set inside a write: from the cache when the version predates the transaction."""
        hit = self._index.cached_ancestors(v.vid)
        return hit if hit is not None and dag.generation == self._index.generation else dag.ancestors(v)

    def checkout(self, ref: str | Version, *, write: bool = False) -> Checkout:
        """A handle on one version: for reading (any version) or writing (an open leaf)."""
        v = self.version(ref)
        if write and v.locked:
            raise CommittedVersionError(
                f"version {v.short} on {v.branch} is committed; only open versions can be "
                f"checked out for writing (start one after it: shardscope repo branch)"
            )
        return Checkout(self, v, writable=write)

    # -- merging --------------------------------------------------------------------------------

    def merge(self, ours: str | Version, theirs: str | Version, *, policy: MergePolicy = "fail",
              branch: str | None = None, timeout: float | None = None, keep_ours: Iterable[str] = (),
              then: Callable[[VersionWriter], None] | None = None) -> MergeResult:
        """Make an open version with parents ``ours`` and ``theirs`` (both committed).

        Keys changed on one side only since the merge base take that side's value; keys changed
        differently on both sides are conflicts, resolved by ``policy`` (``ours``/``theirs``) or,
        with ``fail``, reported by :class:`MergeConflictError` with nothing written (see
        :mod:`~napari_shardscope.core.versioned.merge`). The merge version continues ``ours``'s
        branch unless ``branch`` names a new one; commit it when satisfied.

        A data type with its own merge (the labelmap's branch merge) names its instances in
        ``keep_ours`` — their differing keys take our value, never conflict — and writes its result
        with ``then(writer)``, a writer on the new version inside the same transaction: the merge
        version appears whole or not at all.
        """
        if policy not in MERGE_POLICIES:
            raise ArgumentError(f"merge policy must be one of {', '.join(MERGE_POLICIES)}, got {policy!r}")
        with self._writing(timeout) as p:
            return self._merge_in(p, ours, theirs, policy=policy, branch=branch, keep_ours=keep_ours, then=then)

    def _merge_in(self, p: _Pending, ours: str | Version, theirs: str | Version, *, policy: MergePolicy,
                  branch: str | None, keep_ours: Iterable[str] = (),
                  then: Callable[[VersionWriter], None] | None = None) -> MergeResult:
        a, b = self._resolve(p.dag, ours), self._resolve(p.dag, theirs)
        if a.uuid == b.uuid:
            raise ArgumentError("cannot merge a version with itself")
        if not b.locked:
            raise UncommittedVersionError(f"version {b.short} is open; commit it before merging it")
        name = self._child_branch(p.dag, a, branch)
        pinned = frozenset(self.instance(n).iid for n in keep_ours)
        with self._state:
            instances = list(self._instances.values())
        plan = plan_merge(p.txn, p.dag, instances, a, b, policy, pinned)
        base, conflicts = plan.base, plan.conflicts
        if conflicts and policy == "fail":
            shown = ", ".join(f"{c.instance}:{c.key!r}" for c in conflicts[:5])
            raise MergeConflictError(
                f"merging {b.short} into {a.short}: {len(conflicts)} key(s) changed on both sides since "
                f"{base.short} ({shown}{', …' if len(conflicts) > 5 else ''}); choose policy ours or theirs",
                conflicts,
            )
        m = Version(uuid=new_uuid(), vid=p.dag.max_vid() + 1, parents=(a.uuid, b.uuid), branch=name,
                    locked=False, message="", created=time.time(), committed=None)
        p.dag.add(m)
        p.touched()
        for stem, value in plan.decided:
            if value is None:
                p.txn.put(K.entry_key(stem, m.vid, True), b"")
            else:
                p.txn.put(K.entry_key(stem, m.vid, False), value)
            p.txn.put(K.change_key(m.vid, stem), b"")
        self._append_note(p.txn, m, f"merge of {b.uuid} into {a.uuid} (base {base.uuid}, policy {policy}, "
                                    f"{len(conflicts)} conflict(s), {len(plan.decided)} key(s) merged)")
        if then is not None:
            then(VersionWriter(self, m, p.txn, p.dag.ancestors(m)))
        return MergeResult(version=m, base=base.uuid, conflicts=conflicts, merged=len(plan.decided))

    # -- nodes (what remotes move) --------------------------------------------------------------

    def read_node(self, ref: str | Version) -> NodeContent:
        """A committed version with everything it itself stored, named without local ids (one snapshot)."""
        v = self.version(ref)
        if not v.locked or v.committed is None:
            raise UncommittedVersionError(f"version {v.short} (branch {v.branch!r}) is open; only committed "
                                          f"versions can be sent to a remote")
        with self._state:
            names = {i.iid: i.name for i in self._instances.values()}
        entries: list[NodeEntry] = []
        logs: list[NodeLog] = []
        notes: list[NodeNote] = []
        with self._engine.read() as txn:
            lo = K.change_prefix(v.vid)
            for ckey in txn.scan_keys(lo, K.next_prefix(lo)):
                stem = K.stem_of_change_key(ckey)
                iid = K.unpack_u32(stem[:4])
                value = txn.get(K.entry_key(stem, v.vid, False))
                if value is None and txn.get(K.entry_key(stem, v.vid, True)) is None:
                    raise StoreCorruptError(f"version {v.uuid}: change index names a key with no entry")
                entries.append(NodeEntry(instance=names[iid], key=K.tkey_of_stem(stem), value=value))
            for iid, name in sorted(names.items()):
                lp = K.log_prefix(iid, v.vid)
                for key, data in txn.scan(lp, K.next_prefix(lp)):
                    logs.append(NodeLog(instance=name, seq=K.unpack_u64(key[-8:]), data=data))
            np_ = K.NOTE_PREFIX + K.pack_u32(v.vid)
            for key, value in txn.scan(np_, K.next_prefix(np_)):
                r = json.loads(value)
                notes.append(NodeNote(seq=K.unpack_u64(key[-8:]), time=float(r["time"]), text=str(r["text"])))
        entries.sort(key=lambda e: (e.instance, e.key))
        logs.sort(key=lambda g: (g.instance, g.seq))
        return NodeContent(uuid=v.uuid, parents=v.parents, branch=v.branch, message=v.message, created=v.created,
                           committed=v.committed, entries=tuple(entries), logs=tuple(logs), notes=tuple(notes))

    def branch_fits(self, parents: tuple[str, ...], branch: str) -> bool:
        """Whether a new version with these parents may carry ``branch`` in this DAG.

        It may continue the branch of a parent on it (the first parent for versions made here; any
        parent for an adopted merge version) when that parent has no continuing child yet, or start
        ``branch`` when no version carries the name and it is not a remote-tracking name.
        """
        with self._snapshot() as dag:
            return self._branch_fits(dag, parents, branch)

    def _branch_fits(self, dag: DagReader, parents: tuple[str, ...], branch: str) -> bool:
        for p in parents:
            parent = dag.by_uuid(p)
            if parent.branch == branch:
                return dag.continuing_child(parent) is None
        if dag.has_branch(branch):
            return False
        try:
            check_not_tracking_name(self.path, branch)
        except ArgumentError:
            return False
        return True

    def rename_branch(self, old: str, new: str, *, timeout: float | None = None) -> list[Version]:
        """Give every version of branch ``old`` the new branch name ``new``, in one transaction.

        A version's branch is a field of its record, so this rewrites those records and moves the
        branch record (nothing else: keys hold version ids, not names); O(length of the branch). It
        exists for one migration: repositories whose fetches (before remote-tracking names were refs)
        left local branches named ``origin/main``, a name that now always means the remote's head.
        Returns the renamed versions, oldest first.
        """
        with self._writing(timeout) as p:
            if not p.dag.has_branch(old):
                raise UnknownBranchError(f"no branch {old!r}")
            self._check_new_branch(p.dag, new)
            renamed = p.dag.rename_branch(old, new)
            p.touched()
        return renamed

    def adopt_node(self, node: NodeContent, branch: str | None = None, *, timeout: float | None = None,
                   hollow: HollowRef | None = None) -> Version:
        """Add a committed version received from elsewhere, under a fresh local id, in one transaction.

        ``branch`` (default: the node's own) is the local branch name; it must fit the DAG
        (:meth:`branch_fits`). The parents must be here and committed; every instance the node
        names must exist. Adopting a version already present returns it unchanged.

        ``hollow`` (a lazy clone): the node's values and log entries are stubs
        (:func:`~.hollow.encode_stub`) into the remote's data objects it names; they are read on demand.
        """
        with self._writing(timeout) as p:
            return self._adopt_node_in(p, node, branch, hollow)

    def _adopt_node_in(self, p: _Pending, node: NodeContent, branch: str | None,
                       hollow: HollowRef | None = None) -> Version:
        name = node.branch if branch is None else branch
        dag = p.dag
        if dag.contains(node.uuid):
            return dag.by_uuid(node.uuid)
        parents = []
        for par in node.parents:
            if not dag.contains(par):
                raise UnknownVersionError(f"version {node.uuid}: parent {par} is not in this repository")
            parents.append(dag.by_uuid(par))
            if not parents[-1].locked:
                raise UncommittedVersionError(f"version {node.uuid}: parent {par} is open here")
        on_branch = [par for par in parents if par.branch == name]
        if on_branch:
            child = dag.continuing_child(on_branch[0])
            if child is not None:
                raise BranchExistsError(f"version {on_branch[0].short} already has child {child.short} "
                                        f"continuing branch {name!r}")
        else:
            self._check_new_branch(dag, name)
        if not node.parents:
            raise StoreCorruptError(f"version {node.uuid} has no parents but this repository has a root")
        with self._state:
            iids = self._node_instances(node)
        v = Version(uuid=node.uuid, vid=dag.max_vid() + 1, parents=node.parents, branch=name,
                    locked=True, message=node.message, created=node.created, committed=node.committed)
        dag.add(v)
        p.touched()
        self._put_node_data(p.txn, node, v.vid, iids)
        if hollow is not None:
            self._mark_hollow(p, v.vid, hollow)
        return v

    def _mark_hollow(self, p: _Pending, vid: int, hollow: HollowRef) -> None:
        """Record that ``vid``'s values are stubs into ``hollow``'s objects (after its data: the rewrite guard)."""
        p.txn.put(hollow_key(vid), hollow.encode())
        p.txn.put(HOLLOW_FLAG_KEY, b"1")
        p.after(self._enable_hollow)

    def _node_instances(self, node: NodeContent) -> dict[str, int]:
        iids: dict[str, int] = {}
        for inst_name in node.instances:
            inst = self._instances.get(inst_name)
            if inst is None:
                raise UnknownInstanceError(f"version {node.uuid} holds data of instance {inst_name!r}, "
                                           f"which this repository lacks")
            iids[inst_name] = inst.iid
        return iids

    @staticmethod
    def _put_node_data(txn: WriteTxn, node: NodeContent, vid: int, iids: Mapping[str, int]) -> None:
        for e in node.entries:
            stem = K.key_stem(iids[e.instance], e.key)
            txn.put(K.entry_key(stem, vid, e.value is None), b"" if e.value is None else e.value)
            txn.put(K.change_key(vid, stem), b"")
        for g in node.logs:
            txn.put(K.log_key(iids[g.instance], vid, g.seq), g.data)
        for n in node.notes:
            txn.put(K.note_key(vid, n.seq), json.dumps({"time": n.time, "text": n.text}).encode())

    def fill_root(self, node: NodeContent, *, timeout: float | None = None, hollow: HollowRef | None = None) -> Version:
        """Write a received root's data into this repository's root (a clone's first step).

        The repository must have been created with ``root=node`` (same UUID, committed, empty).
        """
        with self._writing(timeout) as p:
            root = p.dag.by_uuid(self._root_uuid)
            if root.uuid != node.uuid or node.parents:
                raise ArgumentError(f"{node.uuid} is not this repository's root ({root.uuid})")
            lo = K.change_prefix(root.vid)
            if next(p.txn.scan_keys(lo, K.next_prefix(lo)), None) is not None:
                return root
            with self._state:
                iids = self._node_instances(node)
            self._put_node_data(p.txn, node, root.vid, iids)
            if hollow is not None:
                self._mark_hollow(p, root.vid, hollow)
        return root

    def adopt_instance(self, name: str, type_name: str, config: Mapping[str, Any], *,
                       timeout: float | None = None) -> Instance:
        """Add an instance received from another repository (its type need not be imported here).

        An instance of that name must not exist with another type or configuration.
        """
        hit = self._instances.get(name)
        if hit is None:
            self._sync()
            hit = self._instances.get(name)
        if hit is not None:
            return _same_instance(hit, type_name, config)
        blob = json.dumps({"name": name, "type": type_name, "config": dict(config)}).encode()
        with self._writing(timeout) as p:
            existing = self._instances.get(name)
            if existing is not None:
                # made by another thread or process since the look-up above: judged like a hit there,
                # or data received for one configuration would be stored under another
                return _same_instance(existing, type_name, config)
            iid = max((i.iid for i in self._instances.values()), default=0) + 1
            inst = Instance(name=name, type=type_name, iid=iid, config=dict(config))
            p.txn.put(K.instance_record_key(iid), blob)
            p.after(lambda: self._instances.__setitem__(name, inst))
        return inst

    # -- format migrations ----------------------------------------------------------------------

    @contextmanager
    def rewriting(self, *, timeout: float | None = None) -> Iterator[Rewriter]:
        """One write transaction in which any version may be rewritten, committed ones too.

        Only for format migrations, which must re-express data every version already holds (a data
        type's new record layout) without changing what any version means: committed versions stay
        immutable to every other write. Everything done through the :class:`Rewriter` commits
        atomically when the block ends, or not at all.
        """
        with self._writing(timeout) as p:
            yield Rewriter(self, p)

    # -- consistency ----------------------------------------------------------------------------

    def verify(self) -> list[str]:
        """Check the whole store; returns problems (empty when consistent). Reads everything.

        The DAG is rebuilt in memory from every version record (:class:`~.dag.Dag`) and the records
        that answer look-ups on demand — UUID index, branch records, child index, ancestor sets — are
        checked against it (:func:`~.dagindex.check_index`).
        """
        problems: list[str] = []
        with self._engine.read() as txn:
            self._read_format(txn)
            instances = self._read_instances(txn)  # check this snapshot, whatever memory holds
            records = DagReader(self._index, txn, -1, cacheable=False).all_versions()
            try:
                dag = Dag(records)
            except StoreCorruptError as exc:
                return [str(exc)]
            problems.extend(dag.check())
            problems.extend(check_index(txn, dag))
            vids = {v.vid for v in dag}
            iids = {i.iid for i in instances.values()}
            entries: set[tuple[int, bytes]] = set()
            last_meta = K.next_prefix(K.META)
            assert last_meta is not None
            for key in txn.scan_keys(last_meta, None):
                if len(key) < 4 + 2 + K.SUFFIX_LEN or key[-K.SUFFIX_LEN - 2:-K.SUFFIX_LEN] != b"\x00\x01":
                    problems.append(f"malformed data key {key!r}")
                    continue
                stem, vid, _ = K.split_entry(key)
                if vid not in vids:
                    problems.append(f"data key {key!r} names unknown version id {vid}")
                if K.unpack_u32(stem[:4]) not in iids:
                    problems.append(f"data key {key!r} names unknown instance id {K.unpack_u32(stem[:4])}")
                if (vid, stem) in entries:
                    problems.append(f"data key {key!r}: both a value and a tombstone in one version")
                entries.add((vid, stem))
            changes: set[tuple[int, bytes]] = set()
            for key in txn.scan_keys(K.CHANGE_PREFIX, K.next_prefix(K.CHANGE_PREFIX)):
                at = len(K.CHANGE_PREFIX)
                changes.add((K.unpack_u32(key[at:at + 4]), K.stem_of_change_key(key)))
            if changes != entries:
                problems.append(f"change index disagrees with data: {len(changes - entries)} extra, "
                                f"{len(entries - changes)} missing")
            for prefix, what in ((K.NOTE_PREFIX, "note"), (K.LOG_PREFIX, "log entry")):
                for key in txn.scan_keys(prefix, K.next_prefix(prefix)):
                    off = len(prefix) + (4 if prefix == K.LOG_PREFIX else 0)
                    if K.unpack_u32(key[off:off + 4]) not in vids:
                        problems.append(f"{what} {key!r} names an unknown version")
            at = len(K.UNVERSIONED_PREFIX)
            for key in txn.scan_keys(K.UNVERSIONED_PREFIX, K.next_prefix(K.UNVERSIONED_PREFIX)):
                if len(key) <= at + 4 or K.unpack_u32(key[at:at + 4]) not in iids:
                    problems.append(f"unversioned key {key!r} names an unknown instance")
        return problems


class Rewriter:
    """What a format migration may do inside :meth:`Repository.rewriting`'s transaction."""

    def __init__(self, repo: Repository, pending: _Pending) -> None:
        self._repo = repo
        self._p = pending

    def at(self, ref: str | Version) -> VersionWriter:
        """A writer at any version (committed ones too), inside this transaction."""
        v = self._repo._resolve(self._p.dag, ref)
        return VersionWriter(self._repo, v, self._p.txn, self._repo._ancestors_in(self._p.dag, v))

    def versions(self) -> list[Version]:
        """Every version, in creation order (parents before children)."""
        return self._p.dag.all_versions()

    def scan_all(self, instance: Instance | str, prefix: bytes) -> Iterator[tuple[bytes, int, bool, bytes]]:
        """Every stored entry of an instance's keys starting with ``prefix``, at every version:
        ``(key, version id, tombstone, value)`` (what a migration collects from the whole history)."""
        inst = self._repo.instance(instance)
        lo, hi = K.prefix_range(inst.iid, prefix)
        for key, value in self._p.txn.scan(lo, hi):
            stem, vid, tomb = K.split_entry(key)
            yield K.tkey_of_stem(stem), vid, tomb, value

    def get_unversioned_many(self, instance: Instance | str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Unversioned values of an instance as this transaction sees them."""
        inst = self._repo.instance(instance)
        return self._p.txn.get_many([K.unversioned_key(inst.iid, key) for key in keys])

    def replace_unversioned(self, instance: Instance | str, prefixes: Iterable[bytes],
                            items: Iterable[tuple[bytes, bytes]]) -> None:
        """Delete an instance's unversioned keys under ``prefixes``, then store ``items``."""
        inst = self._repo.instance(instance)
        for prefix in prefixes:
            lo = K.unversioned_prefix(inst.iid, prefix)
            for key in list(self._p.txn.scan_keys(lo, K.next_prefix(lo))):
                self._p.txn.delete(key)
        for key, value in items:
            self._p.txn.put(K.unversioned_key(inst.iid, key), value)
        _bump_unversioned(self._p.txn, inst.iid)

    def set_instance_config(self, name: str, config: Mapping[str, Any]) -> Instance:
        """Replace an instance's configuration (its format changed); takes effect when the transaction commits."""
        inst = self._repo.instance(name)
        new = Instance(name=inst.name, type=inst.type, iid=inst.iid, config=dict(config))
        blob = json.dumps({"name": new.name, "type": new.type, "config": new.config}).encode()
        self._p.txn.put(K.instance_record_key(inst.iid), blob)
        self._p.after(lambda: self._repo._instances.__setitem__(name, new))
        return new


def _unversioned_generation(txn: ReadTxn, iid: int) -> int:
    raw = txn.get(K.unversioned_generation_key(iid))
    return 0 if raw is None else K.unpack_u64(raw)


def _bump_unversioned(txn: WriteTxn, iid: int) -> None:
    """Count a write to instance ``iid``'s unversioned data, in the transaction that writes it."""
    txn.put(K.unversioned_generation_key(iid), K.pack_u64(_unversioned_generation(txn, iid) + 1))


def _same_instance(inst: Instance, type_name: str, config: Mapping[str, Any]) -> Instance:
    """``inst``, if it has this type and configuration (what adopting an existing instance requires)."""
    if inst.type != type_name or dict(inst.config) != dict(config):
        raise InstanceExistsError(f"instance {inst.name!r} exists here with another type or configuration")
    return inst


def _check_limit(limit: object) -> int | None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ArgumentError(f"limit must be a non-negative integer, got {limit!r}")
    return limit


def _since_time(since: object) -> float | None:
    """A time bound: a datetime (naive means local time) or Unix seconds."""
    if since is None:
        return None
    if isinstance(since, datetime):
        return since.timestamp()
    if isinstance(since, int | float) and not isinstance(since, bool):
        return float(since)
    raise ArgumentError(f"since must be a version or a time, got {since!r}")


class Checkout:
    """A version opened for reading (any version) or writing (an open version).

    The handle the widgets and the labelmap hold: it caches the version's ancestor set, so each
    read is one engine snapshot plus one range scan, and each write is one transaction.
    """

    def __init__(self, repo: Repository, version: Version, *, writable: bool) -> None:
        self.repo = repo
        self._version = version
        self.writable = writable
        self._anc: AncestorSet | None = None

    @property
    def version(self) -> Version:
        """The version, with current locked flag and message."""
        return self.repo.version(self._version)

    @contextmanager
    def read(self) -> Iterator[VersionView]:
        """One snapshot at this version."""
        if self._anc is None:
            self._anc = self.repo._ancestors(self._version)  # never changes: read once per checkout
        anc = self._anc
        with self.repo._engine.read() as txn:
            yield VersionView(self.repo, self._version, txn, anc)

    def write(self, *, timeout: float | None = None) -> AbstractContextManager[VersionWriter]:
        """One write transaction at this version."""
        if not self.writable:
            raise CommittedVersionError(f"version {self._version.short} was checked out read-only")
        return self.repo.write(self._version, timeout=timeout)

    def get(self, instance: Instance | str, key: bytes) -> bytes | None:
        """The value of ``key`` here."""
        with self.read() as view:
            return view.get(instance, key)

    def get_many(self, instance: Instance | str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Values of several keys here, in one snapshot."""
        with self.read() as view:
            return view.get_many(instance, keys)

    def scan(self, instance: Instance | str, *, prefix: bytes | None = None, start: bytes | None = None,
             stop: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` pairs here (materialised: the snapshot closes on return)."""
        with self.read() as view:
            return list(view.scan(instance, prefix=prefix, start=start, stop=stop))

    def put(self, instance: Instance | str, key: bytes, value: bytes) -> None:
        """Store one key (one transaction)."""
        with self.write() as w:
            w.put(instance, key, value)

    def delete(self, instance: Instance | str, key: bytes) -> bool:
        """Delete one key (one transaction)."""
        with self.write() as w:
            return w.delete(instance, key)

    def commit(self, message: str) -> Version:
        """Commit this version; the checkout becomes read-only."""
        done = self.repo.commit(self._version, message)
        self._version = done
        self.writable = False
        return done


class Batch:
    """Changes made inside one :meth:`Repository.batch` transaction (all committed together, or none).

    Each method does what the repository's method of the same name does, without a transaction of
    its own; later calls see what earlier ones wrote. Raising inside the ``with`` block discards all.
    """

    def __init__(self, repo: Repository, pending: _Pending) -> None:
        self._repo = repo
        self._p = pending

    def version(self, ref: str | Version) -> Version:
        """A version as this batch sees it."""
        return self._repo._resolve(self._p.dag, ref)

    def new_version(self, parent: str | Version, branch: str | None = None) -> Version:
        """See :meth:`Repository.new_version`."""
        return self._repo._new_version_in(self._p, parent, branch)

    def commit(self, ref: str | Version, message: str) -> Version:
        """See :meth:`Repository.commit`."""
        return self._repo._commit_in(self._p, ref, message)

    def write(self, ref: str | Version) -> VersionWriter:
        """A writer on an open version, inside this batch's transaction (see :meth:`Repository.write`)."""
        return self._repo._writer_in(self._p, ref)

    def merge(self, ours: str | Version, theirs: str | Version, *, policy: MergePolicy = "fail",
              branch: str | None = None) -> MergeResult:
        """See :meth:`Repository.merge`."""
        if policy not in MERGE_POLICIES:
            raise ArgumentError(f"merge policy must be one of {', '.join(MERGE_POLICIES)}, got {policy!r}")
        return self._repo._merge_in(self._p, ours, theirs, policy=policy, branch=branch)

    def add_note(self, ref: str | Version, text: str) -> Note:
        """See :meth:`Repository.add_note`."""
        if not isinstance(text, str) or not text:
            raise ArgumentError("a note needs some text")
        return self._repo._append_note(self._p.txn, self._repo._resolve(self._p.dag, ref), text)

    def adopt_node(self, node: NodeContent, branch: str | None = None, *, hollow: HollowRef | None = None) -> Version:
        """See :meth:`Repository.adopt_node` (a fetch adopting many nodes in one transaction)."""
        return self._repo._adopt_node_in(self._p, node, branch, hollow)

    def branch_fits(self, parents: tuple[str, ...], branch: str) -> bool:
        """See :meth:`Repository.branch_fits`, as this transaction sees the DAG (versions adopted in it too)."""
        return self._repo._branch_fits(self._p.dag, parents, branch)


# ---------------------------------------------------------------------------------------------
# Creating and opening
# ---------------------------------------------------------------------------------------------


def create_repository(path: str | os.PathLike[str] | None, *, engine: str | None = None,
                      durable: bool = True, lock_timeout: float = DEFAULT_TIMEOUT,
                      root: NodeContent | None = None) -> Repository:
    """Create a repository with one open root version on branch ``main``.

    Parameters
    ----------
    path
        A new or empty directory; None for an in-memory repository (tests, scratch work).
    engine
        ``lmdb`` (default), ``sqlite`` or ``memory``.
    durable
        Flush every commit to disk (False: faster bulk ingest, a crash may lose the last commits
        but never mixes states).
    lock_timeout
        Seconds a writer waits for another writer before :class:`LockTimeoutError`.
    root
        A clone's root, received from a remote: the root takes its UUID and commit record (its
        data is written later with :meth:`Repository.fill_root`, once the instances exist).
    """
    name = engine or (DEFAULT_ENGINE if path is not None else "memory")
    kind = engine_kind(name)
    directory: Path | None = None
    if path is not None:
        if not kind.keeps_files:
            raise ArgumentError(f"the {name} engine keeps no files; pass path=None")
        directory = Path(path)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise ArgumentError(f"{directory} already exists and is not an empty directory")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a read-only or full filesystem, a refused permission
            raise storage_fault(exc, directory) from exc
    elif kind.keeps_files:
        raise ArgumentError(f"the {name} engine needs a path")
    kv = open_engine(name, directory, create=True, durable=durable)
    repo = Repository(kv, directory, lock_timeout=lock_timeout)
    if root is None:
        root_ = Version(uuid=new_uuid(), vid=1, parents=(), branch=ROOT_BRANCH, locked=False, message="",
                               created=time.time(), committed=None)
    else:
        root_ = Version(uuid=root.uuid, vid=1, parents=(), branch=root.branch, locked=True,
                               message=root.message, created=root.created, committed=root.committed)
    with kv.write() as txn:
        txn.put(K.FORMAT_KEY, json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION,
                                          "root": root_.uuid}).encode())
        txn.put(K.GENERATION_KEY, K.pack_u64(1))
        DagWriter(repo._index, txn, 1).add(root_)
    if directory is not None:
        try:
            _write_marker(directory, name, root_.uuid)
        except OSError as exc:
            repo.close()
            raise storage_fault(exc, directory / MARKER_FILE) from exc
    with kv.read() as txn:
        repo._open_state(txn)
    return repo


def _write_marker(directory: Path, engine: str, root: str) -> None:
    marker = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "engine": engine, "root": root}
    write_file_atomic(directory / MARKER_FILE, json.dumps(marker, indent=2).encode() + b"\n")


def open_repository(path: str | os.PathLike[str], *, durable: bool = True,
                    lock_timeout: float = DEFAULT_TIMEOUT) -> Repository:
    """Open an existing repository; never modifies a path that is not one.

    Raises
    ------
    NotARepositoryError
        ``path`` is missing, a plain file, or a directory without a repository marker.
    StoreCorruptError
        The marker is there but the engine files are unreadable or belong to another store.
    """
    directory = Path(path)
    if not directory.exists():
        raise NotARepositoryError(f"{directory}: no such repository")
    if not directory.is_dir():
        raise NotARepositoryError(f"{directory} is a file, not a repository directory")
    marker_path = directory / MARKER_FILE
    if not marker_path.is_file():
        raise NotARepositoryError(f"{directory}: not a repository (no {MARKER_FILE})")
    try:
        marker = json.loads(marker_path.read_bytes())
        if not isinstance(marker, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreCorruptError(f"{marker_path}: unreadable repository marker ({exc})") from exc
    if marker.get("format") != FORMAT_NAME:
        raise NotARepositoryError(f"{marker_path}: not a napari-shardscope repository marker")
    name = marker.get("engine")
    kind = ENGINES.get(name) if isinstance(name, str) else None
    if kind is None or not kind.keeps_files:
        raise StoreCorruptError(f"{marker_path}: unknown engine {name!r}")
    kv = open_engine(kind.name, directory, create=False, durable=durable)
    repo = Repository(kv, directory, lock_timeout=lock_timeout)
    try:
        with kv.read() as txn:
            fmt = repo._read_format(txn)
        if fmt.get("root") != marker.get("root"):
            raise StoreCorruptError(f"{directory}: engine files belong to another repository (root mismatch)")
        if int(fmt.get("version", 0)) < FORMAT_VERSION:
            repo._upgrade()
            if repo.upgraded_from is not None:
                with contextlib.suppress(OSError):  # the marker's version is informative; the engine's rules
                    _write_marker(directory, kind.name, str(fmt["root"]))
        with kv.read() as txn:
            repo._open_state(txn)
    except NotARepositoryError as exc:
        repo.close()
        raise StoreCorruptError(str(exc)) from exc
    except (StoreCorruptError, UnknownVersionError, UnknownBranchError, RepositoryFormatError, LockTimeoutError,
            StorageFaultError):
        repo.close()
        raise
    except Exception as exc:
        repo.close()
        raise StoreCorruptError(f"{directory}: unreadable store ({type(exc).__name__}: {exc})") from exc
    return repo

