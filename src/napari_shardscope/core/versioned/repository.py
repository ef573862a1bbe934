"""A versioned repository on local disk, on DVID's model (paper §2.2–2.3): embedded, no server.

A repository is a directory holding a marker file (``shardscope-repository.json``: format, engine,
root UUID), the engine's files and ``writer.lock``. Everything else — the DAG, data instances,
notes, per-version logs and the data — lives in one ordered key-value engine, so every operation
that changes the store is *one* engine transaction: a crash leaves the old or the new state.

Reading key K at version V: one reverse range scan over the entries of K (all versions of a key
sit together, see :mod:`~napari_shardscope.core.versioned.keys`), keeping the first entry whose
version is an ancestor of V (the in-memory DAG answers that with a set lookup). Version ids are a
topological order, so the first ancestor met going backwards is the nearest one on a chain, and a
tombstone there means "deleted". Scans at a version walk the key range once and apply the same
rule per key, so they merge the ancestor layers.

Merges (DVID's repo merge) make a version with two parents. Keys that differ between the parents
are found through the per-version change index (only versions below the common ancestors are
looked at) and decided by three-way comparison with the merge base; every such key is written
into the merge version, which keeps the "largest ancestor id wins" read rule exact across merges.

Processes: any number may read; writers serialise on :class:`WriterLock` (with a timeout) and each
write transaction first reloads the DAG if another process changed it (a generation counter in
the store tells), so no process writes through a stale view and no update is lost.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned import keys as K
from napari_shardscope.core.versioned.dag import (
    ROOT_BRANCH,
    Branch,
    Dag,
    Note,
    Version,
    decode_versions,
    encode_version,
    new_uuid,
)
from napari_shardscope.core.versioned.engine import ENGINE_NAMES, OrderedKV, ReadTxn, WriteTxn, open_engine
from napari_shardscope.core.versioned.errors import (
    BranchExistsError,
    CommittedVersionError,
    InstanceExistsError,
    MergeConflict,
    MergeConflictError,
    NotARepositoryError,
    StoreCorruptError,
    UncommittedVersionError,
    UnknownBranchError,
    UnknownInstanceError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.writer_lock import DEFAULT_TIMEOUT, WriterLock

MARKER_FILE = "shardscope-repository.json"
FORMAT_NAME = "napari-shardscope versioned repository"
FORMAT_VERSION = 1
#: The default engine: LMDB reads 28 KB blocks several times faster (see bench/versioned.py).
DEFAULT_ENGINE = "lmdb"
MergePolicy = Literal["fail", "ours", "theirs"]
MERGE_POLICIES: tuple[str, ...] = ("fail", "ours", "theirs")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

#: Instance types the store accepts; type modules add theirs with :func:`register_instance_type`.
INSTANCE_TYPES: set[str] = {"keyvalue"}


def register_instance_type(name: str) -> None:
    """Allow instances of type ``name`` (called by a type's module, e.g. the labelmap)."""
    INSTANCE_TYPES.add(name)


@dataclass(frozen=True)
class Instance:
    """A data instance: a named, typed namespace of keys (DVID's data instance).

    Attributes
    ----------
    name
        Unique name in the repository.
    type
        Instance type (``keyvalue``, ``labelmap``).
    iid
        Small integer id used as the first 4 bytes of the instance's keys.
    config
        Type-specific settings (e.g. a labelmap's base volume URL), JSON-serialisable.
    """

    name: str
    type: str
    iid: int
    config: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Change:
    """A key a version itself stores an entry for (a value, or a tombstone when ``deleted``)."""

    instance: str
    key: bytes
    deleted: bool


@dataclass(frozen=True)
class LogEntry:
    """One entry of an instance's append-only per-version log."""

    version: str
    seq: int
    data: bytes


@dataclass(frozen=True)
class MergeResult:
    """What a merge did.

    Attributes
    ----------
    version
        The new (open) merge version; commit it when satisfied.
    base
        UUID of the merge base (the common ancestor compared against).
    conflicts
        Keys changed differently on both sides (resolved by the policy unless it was ``fail``).
    merged
        How many keys the merge version had to store.
    """

    version: Version
    base: str
    conflicts: tuple[MergeConflict, ...]
    merged: int


# ---------------------------------------------------------------------------------------------
# Reading and writing at a version
# ---------------------------------------------------------------------------------------------


def _visible_entry(txn: ReadTxn, stem: bytes, ancestors: frozenset[int], skip: int = -1) -> bytes | None:
    """The engine key of the entry of ``stem`` visible from a version whose ancestors are given.

    One reverse range scan over the key's entries; the first one stored at an ancestor wins
    (ids grow along every path). ``skip`` ignores one version's own entry (what a version
    inherits).
    """
    lo, hi = K.stem_range(stem)
    n = len(stem)
    for key in txn.scan_keys(lo, hi, reverse=True):
        vid = int.from_bytes(key[n:n + 4], "big")
        if vid in ancestors and vid != skip:
            return key
    return None


def _read_visible(txn: ReadTxn, stem: bytes, ancestors: frozenset[int]) -> bytes | None:
    """The value of ``stem`` visible from a version (None when absent or deleted): one engine walk."""
    lo, hi = K.stem_range(stem)
    n = len(stem)
    hit = txn.find_last(lo, hi, lambda key: int.from_bytes(key[n:n + 4], "big") in ancestors)
    if hit is None or hit[0][-1] == K.TOMBSTONE:
        return None
    return hit[1]


class VersionView:
    """Reads at one version inside one engine snapshot (from :meth:`Repository.read`).

    Every method sees the same snapshot, so a scan and the gets after it agree even while
    another process writes.
    """

    def __init__(self, repo: Repository, version: Version, txn: ReadTxn, ancestors: frozenset[int]) -> None:
        self._repo = repo
        self.version = version
        self._txn = txn
        self._anc = ancestors

    def get(self, instance: Instance | str, key: bytes) -> bytes | None:
        """The value of ``key`` at this version (None when absent or deleted)."""
        inst = self._repo.instance(instance)
        return _read_visible(self._txn, K.key_stem(inst.iid, _check_tkey(key)), self._anc)

    def get_many(self, instance: Instance | str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Values of several keys (one range scan each, values fetched in one engine batch)."""
        inst = self._repo.instance(instance)
        chosen: list[bytes | None] = []
        for key in keys:
            entry = _visible_entry(self._txn, K.key_stem(inst.iid, _check_tkey(key)), self._anc)
            chosen.append(None if entry is None or entry[-1] == K.TOMBSTONE else entry)
        wanted = [c for c in chosen if c is not None]
        values = iter(self._txn.get_many(wanted))
        return [None if c is None else next(values) for c in chosen]

    def contains(self, instance: Instance | str, key: bytes) -> bool:
        """True when ``key`` has a value at this version (no value is read)."""
        inst = self._repo.instance(instance)
        entry = _visible_entry(self._txn, K.key_stem(inst.iid, _check_tkey(key)), self._anc)
        return entry is not None and entry[-1] != K.TOMBSTONE

    def _range(self, iid: int, prefix: bytes | None, start: bytes | None,
               stop: bytes | None) -> tuple[bytes, bytes]:
        if prefix is not None:
            if start is not None or stop is not None:
                raise ArgumentError("give either prefix or start/stop, not both")
            return K.prefix_range(iid, _check_tkey(prefix, allow_empty=True))
        return K.tkey_range(iid, start, stop)

    def keys(self, instance: Instance | str, *, prefix: bytes | None = None, start: bytes | None = None,
             stop: bytes | None = None) -> Iterator[bytes]:
        """Keys with a value at this version, ascending; by ``prefix`` or in ``[start, stop)``.

        One pass over the keys of the range (no value is read): per key, the entry of the nearest
        ancestor wins (ids ascend inside a key, so the last accepted one).
        """
        inst = self._repo.instance(instance)
        lo, hi = self._range(inst.iid, prefix, start, stop)
        anc, cut = self._anc, -K.SUFFIX_LEN
        stem: bytes | None = None
        best: bytes | None = None
        for key in self._txn.scan_keys(lo, hi):
            s = key[:cut]
            if s != stem:
                if best is not None and best[-1] != K.TOMBSTONE:
                    yield K.tkey_of_stem(best[:cut])
                stem, best = s, None
            if int.from_bytes(key[cut:-1], "big") in anc:
                best = key
        if best is not None and best[-1] != K.TOMBSTONE:
            yield K.tkey_of_stem(best[:cut])

    def scan(self, instance: Instance | str, *, prefix: bytes | None = None, start: bytes | None = None,
             stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs at this version, ascending; one pass over the key range.

        Values are read while walking (not fetched again afterwards): most keys have one or two
        entries, and a second lookup per key costs more than the odd extra value (3x on SQLite).
        """
        inst = self._repo.instance(instance)
        lo, hi = self._range(inst.iid, prefix, start, stop)
        anc, cut = self._anc, -K.SUFFIX_LEN
        stem: bytes | None = None
        best: tuple[bytes, bytes] | None = None
        for key, value in self._txn.scan(lo, hi):
            s = key[:cut]
            if s != stem:
                if best is not None and best[0][-1] != K.TOMBSTONE:
                    yield K.tkey_of_stem(best[0][:cut]), best[1]
                stem, best = s, None
            if int.from_bytes(key[cut:-1], "big") in anc:
                best = (key, value)
        if best is not None and best[0][-1] != K.TOMBSTONE:
            yield K.tkey_of_stem(best[0][:cut]), best[1]

    def read_log(self, instance: Instance | str, *, own: bool = False) -> Iterator[LogEntry]:
        """The instance's log entries of this version's ancestry, parents first (or only its own).

        Ids grow in topological order, so one scan gives a valid replay order from the root.
        """
        inst = self._repo.instance(instance)
        lo = K.log_prefix(inst.iid, self.version.vid if own else None)
        hi = K.next_prefix(lo)
        dag = self._repo._dag_snapshot()
        for key, data in self._txn.scan(lo, hi):
            vid = K.unpack_u32(key[len(K.LOG_PREFIX) + 4:len(K.LOG_PREFIX) + 8])
            if vid in self._anc:
                yield LogEntry(version=dag.by_vid(vid).uuid, seq=K.unpack_u64(key[-8:]), data=data)

    def changes(self, instance: Instance | str | None = None) -> Iterator[Change]:
        """Keys this version itself wrote or deleted (not inherited), from the change index."""
        by_iid = {i.iid: i for i in self._repo.instances()}
        lo = K.change_prefix(self.version.vid, None if instance is None else self._repo.instance(instance).iid)
        for ckey in self._txn.scan_keys(lo, K.next_prefix(lo)):
            stem = K.stem_of_change_key(ckey)
            entry = _visible_entry(self._txn, stem, frozenset({self.version.vid}))
            inst = by_iid.get(K.unpack_u32(stem[:4]))
            if entry is None or inst is None:  # pragma: no cover - verify() reports these
                continue
            yield Change(instance=inst.name, key=K.tkey_of_stem(stem), deleted=entry[-1] == K.TOMBSTONE)


class VersionWriter(VersionView):
    """Reads and writes at one open version inside one write transaction (:meth:`Repository.write`).

    Everything done through one writer commits atomically when the ``with`` block ends, and is
    discarded if it ends with an exception.
    """

    def __init__(self, repo: Repository, version: Version, txn: WriteTxn, ancestors: frozenset[int]) -> None:
        super().__init__(repo, version, txn, ancestors)
        self._wtxn = txn

    def put(self, instance: Instance | str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key`` in this version (ancestors keep theirs)."""
        inst = self._repo.instance(instance)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
        stem = K.key_stem(inst.iid, _check_tkey(key))
        vid = self.version.vid
        self._wtxn.delete(K.entry_key(stem, vid, True))
        self._wtxn.put(K.entry_key(stem, vid, False), bytes(value))
        self._wtxn.put(K.change_key(vid, stem), b"")

    def put_many(self, instance: Instance | str, items: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]]) -> int:
        """Store several keys (the labelmap's batched block writes); returns how many."""
        pairs = items.items() if isinstance(items, Mapping) else items
        n = 0
        for key, value in pairs:
            self.put(instance, key, value)
            n += 1
        return n

    def delete(self, instance: Instance | str, key: bytes) -> bool:
        """Delete ``key`` at this version; True when it had a value here.

        A tombstone is written only when an ancestor's value would otherwise show through;
        otherwise this version's own entry is simply removed.
        """
        inst = self._repo.instance(instance)
        stem = K.key_stem(inst.iid, _check_tkey(key))
        vid = self.version.vid
        inherited = _visible_entry(self._wtxn, stem, self._anc, skip=vid)
        inherited_value = inherited is not None and inherited[-1] != K.TOMBSTONE
        had_own = self._wtxn.delete(K.entry_key(stem, vid, False))
        own_tomb = self._wtxn.get(K.entry_key(stem, vid, True)) is not None
        was_visible = had_own or (inherited_value and not own_tomb)
        if inherited_value:
            self._wtxn.put(K.entry_key(stem, vid, True), b"")
            self._wtxn.put(K.change_key(vid, stem), b"")
        else:
            self._wtxn.delete(K.entry_key(stem, vid, True))
            self._wtxn.delete(K.change_key(vid, stem))
        return was_visible

    def append_log(self, instance: Instance | str, data: bytes) -> int:
        """Append ``data`` to the instance's log of this version; returns its sequence number.

        Entries are never rewritten (the labelmap's mutation log).
        """
        inst = self._repo.instance(instance)
        if not isinstance(data, bytes):
            raise ArgumentError(f"log entries must be bytes, got {type(data).__name__}")
        prefix = K.log_prefix(inst.iid, self.version.vid)
        last = next(self._wtxn.scan_keys(prefix, K.next_prefix(prefix), reverse=True), None)
        seq = 0 if last is None else K.unpack_u64(last[-8:]) + 1
        self._wtxn.put(K.log_key(inst.iid, self.version.vid, seq), data)
        return seq


def _check_tkey(key: bytes, *, allow_empty: bool = False) -> bytes:
    if not isinstance(key, bytes):
        raise ArgumentError(f"keys must be bytes, got {type(key).__name__}")
    if not key and not allow_empty:
        raise ArgumentError("keys must not be empty")
    return key


# ---------------------------------------------------------------------------------------------
# The repository
# ---------------------------------------------------------------------------------------------


class _Pending:
    """In-memory changes to apply once a write transaction has committed."""

    def __init__(self, txn: WriteTxn) -> None:
        self.txn = txn
        self.actions: list[Callable[[], None]] = []
        self.dag_changed = False

    def after(self, action: Callable[[], None]) -> None:
        self.actions.append(action)
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
        self._dag = Dag()
        self._instances: dict[str, Instance] = {}
        self._generation = -1
        self._closed = False

    # -- life cycle -----------------------------------------------------------------------------

    @property
    def engine(self) -> str:
        """Name of the engine under this repository."""
        return self._engine.name

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

    def _load(self, txn: ReadTxn) -> None:
        raw = txn.get(K.FORMAT_KEY)
        if raw is None:
            raise NotARepositoryError(f"{self.path}: the store holds no repository format record")
        try:
            fmt = json.loads(raw)
            ok = fmt.get("format") == FORMAT_NAME
        except ValueError:
            ok = False
        if not ok:
            raise StoreCorruptError(f"{self.path}: unrecognised repository format record")
        if int(fmt.get("version", 0)) > FORMAT_VERSION:
            raise StoreCorruptError(f"{self.path}: repository format {fmt['version']} is newer than this library")
        versions = decode_versions([v for _, v in txn.scan(K.VERSION_PREFIX, K.next_prefix(K.VERSION_PREFIX))])
        if not versions:
            raise StoreCorruptError(f"{self.path}: repository has no versions")
        instances: dict[str, Instance] = {}
        for key, value in txn.scan(K.INSTANCE_PREFIX, K.next_prefix(K.INSTANCE_PREFIX)):
            try:
                r = json.loads(value)
                inst = Instance(name=str(r["name"]), type=str(r["type"]), iid=K.unpack_u32(key[-4:]),
                                config=dict(r.get("config", {})))
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreCorruptError(f"{self.path}: unreadable instance record: {exc}") from exc
            instances[inst.name] = inst
        dag = Dag(versions)
        with self._state:
            self._dag = dag
            self._instances = instances
            self._generation = self._read_generation(txn)

    @staticmethod
    def _read_generation(txn: ReadTxn) -> int:
        raw = txn.get(K.GENERATION_KEY)
        if raw is None or len(raw) != 8:
            raise StoreCorruptError("repository generation counter is missing")
        return K.unpack_u64(raw)

    def _sync(self) -> None:
        """Reload the DAG and instances if another process changed them (one engine get)."""
        with self._engine.read() as txn:
            if self._read_generation(txn) != self._generation:
                self._load(txn)

    def _dag_snapshot(self) -> Dag:
        return self._dag

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _writing(self, timeout: float | None = None) -> Iterator[_Pending]:
        """One write transaction under the writer lock, on a fresh DAG.

        In-memory DAG changes registered with :meth:`_Pending.after` are applied only once the
        engine has committed, while the lock is still held, so memory never runs ahead of disk.
        """
        if self._closed:
            raise ArgumentError("the repository is closed")
        with self._lock.hold(timeout):
            with self._engine.write() as txn:
                if self._read_generation(txn) != self._generation:
                    self._load(txn)
                pending = _Pending(txn)
                yield pending
                if pending.dag_changed:
                    pending.txn.put(K.GENERATION_KEY, K.pack_u64(self._generation + 1))
            with self._state:
                for action in pending.actions:
                    action()
                if pending.dag_changed:
                    self._generation += 1

    # -- versions -------------------------------------------------------------------------------

    def version(self, ref: str | Version) -> Version:
        """The version named by a branch name (its head), a UUID prefix, or a :class:`Version`."""
        with self._state:
            try:
                if isinstance(ref, Version):
                    return self._dag.resolve(ref)
            except UnknownVersionError:
                pass
        self._sync()
        with self._state:
            return self._dag.resolve(ref)

    @property
    def root(self) -> Version:
        """The root version."""
        with self._state:
            return self._dag.root

    def versions(self) -> list[Version]:
        """All versions in creation order."""
        self._sync()
        with self._state:
            return list(self._dag)

    def branches(self) -> list[Branch]:
        """All branches with their base and head."""
        self._sync()
        with self._state:
            return self._dag.branches()

    def head(self, branch: str) -> Version:
        """The head (last version) of ``branch``."""
        self._sync()
        with self._state:
            return self._dag.head(branch)

    def parents(self, ref: str | Version) -> list[Version]:
        """The parents of a version."""
        v = self.version(ref)
        with self._state:
            return [self._dag.by_uuid(p) for p in v.parents]

    def children(self, ref: str | Version) -> list[Version]:
        """The children of a version."""
        v = self.version(ref)
        with self._state:
            return self._dag.children(v)

    def ancestry(self, ref: str | Version) -> list[Version]:
        """The version and all its ancestors, newest first (``repo log``)."""
        v = self.version(ref)
        with self._state:
            return self._dag.ancestry(v)

    def _ancestors(self, v: Version) -> frozenset[int]:
        with self._state:
            return self._dag.ancestors(v)

    def commit(self, ref: str | Version, message: str, *, timeout: float | None = None) -> Version:
        """Lock an open version with a commit message; it becomes immutable and may have children."""
        if not isinstance(message, str):
            raise ArgumentError("the commit message must be a string")
        with self._writing(timeout) as p:
            v = self._writable(ref)
            done = self._dag.with_commit(v, message, time.time())
            p.txn.put(K.version_record_key(done.vid), encode_version(done))
            p.after(lambda: self._dag.update(done))
        return done

    def new_version(self, parent: str | Version, branch: str | None = None, *,
                    timeout: float | None = None) -> Version:
        """A new open child of the committed ``parent``.

        Without ``branch`` the child continues the parent's branch (at most one child may); with
        it, the child starts that new branch (names are unique across the DAG).
        """
        with self._writing(timeout) as p:
            par = self._fresh(parent)
            name = self._child_branch(par, branch)
            v = Version(uuid=new_uuid(), vid=self._dag.max_vid + 1, parents=(par.uuid,), branch=name,
                        locked=False, message="", created=time.time(), committed=None)
            p.txn.put(K.version_record_key(v.vid), encode_version(v))
            p.after(lambda: self._dag.add(v))
        return v

    def _fresh(self, ref: str | Version) -> Version:
        """Resolve inside a write transaction (the DAG was just refreshed)."""
        with self._state:
            return self._dag.resolve(ref)

    def _writable(self, ref: str | Version) -> Version:
        v = self._fresh(ref)
        if v.locked:
            raise CommittedVersionError(
                f"version {v.short} (branch {v.branch!r}) is committed and read-only; "
                f"make a child with new_version to change data"
            )
        return v

    def _child_branch(self, parent: Version, branch: str | None) -> str:
        if not parent.locked:
            raise UncommittedVersionError(
                f"version {parent.short} (branch {parent.branch!r}) is open; commit it before making children"
            )
        if branch is None:
            child = self._dag.continuing_child(parent)
            if child is not None:
                raise BranchExistsError(
                    f"version {parent.short} already has child {child.short} continuing branch "
                    f"{parent.branch!r}; give a new branch name"
                )
            return parent.branch
        self._dag.check_new_branch(branch)
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
            v = self._fresh(ref)
            note = self._append_note(p.txn, v, text)
        return note

    @staticmethod
    def _append_note(txn: WriteTxn, v: Version, text: str) -> Note:
        prefix = K.NOTE_PREFIX + K.pack_u32(v.vid)
        last = next(txn.scan_keys(prefix, K.next_prefix(prefix), reverse=True), None)
        seq = 0 if last is None else K.unpack_u64(last[-8:]) + 1
        note = Note(version=v.uuid, seq=seq, time=time.time(), text=text)
        txn.put(K.note_key(v.vid, seq), json.dumps({"time": note.time, "text": text}).encode())
        return note

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
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ArgumentError(f"bad instance name {name!r}: use 1-128 letters, digits, '.', '_' or '-'")
        if type_name not in INSTANCE_TYPES:
            raise ArgumentError(f"unknown instance type {type_name!r}; known: {', '.join(sorted(INSTANCE_TYPES))}")
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
        v = self.version(ref)
        anc = self._ancestors(v)
        with self._engine.read() as txn:
            yield VersionView(self, v, txn, anc)

    @contextmanager
    def write(self, ref: str | Version, *, timeout: float | None = None) -> Iterator[VersionWriter]:
        """Write to an open version: everything in the block is one atomic transaction."""
        with self._writing(timeout) as p:
            v = self._writable(ref)
            yield VersionWriter(self, v, p.txn, self._ancestors(v))

    def checkout(self, ref: str | Version, *, write: bool = False) -> Checkout:
        """A handle on one version: for reading (any version) or writing (an open leaf)."""
        v = self.version(ref)
        if write and v.locked:
            raise CommittedVersionError(
                f"version {v.short} (branch {v.branch!r}) is committed; only open versions can be "
                f"checked out for writing (make one with new_version)"
            )
        return Checkout(self, v, writable=write)

    # -- merging --------------------------------------------------------------------------------

    def merge(self, ours: str | Version, theirs: str | Version, *, policy: MergePolicy = "fail",
              branch: str | None = None, timeout: float | None = None) -> MergeResult:
        """Make an open version with parents ``ours`` and ``theirs`` (both committed).

        Keys whose values differ between the parents are compared with the merge base: a key
        changed on one side only takes that side's value; a key changed differently on both sides
        is a conflict, resolved by ``policy`` (``ours``/``theirs``) or, with ``fail``, reported by
        :class:`MergeConflictError` with nothing written. The merge version continues ``ours``'s
        branch unless ``branch`` names a new one.
        """
        if policy not in MERGE_POLICIES:
            raise ArgumentError(f"merge policy must be one of {', '.join(MERGE_POLICIES)}, got {policy!r}")
        with self._writing(timeout) as p:
            a, b = self._fresh(ours), self._fresh(theirs)
            if a.uuid == b.uuid:
                raise ArgumentError("cannot merge a version with itself")
            if not b.locked:
                raise UncommittedVersionError(f"version {b.short} is open; commit it before merging it")
            name = self._child_branch(a, branch)
            with self._state:
                anc_a, anc_b = self._dag.ancestors(a), self._dag.ancestors(b)
                base = self._dag.merge_base(a, b)
                anc_base = self._dag.ancestors(base)
            common = anc_a & anc_b
            stems: set[bytes] = set()
            for vid in (anc_a | anc_b) - common:
                lo = K.change_prefix(vid)
                stems.update(K.stem_of_change_key(k) for k in p.txn.scan_keys(lo, K.next_prefix(lo)))
            by_iid = {i.iid: i for i in self._instances.values()}
            decided: list[tuple[bytes, bytes | None]] = []
            conflicts: list[MergeConflict] = []
            for stem in sorted(stems):
                va = _read_visible(p.txn, stem, anc_a)
                vb = _read_visible(p.txn, stem, anc_b)
                if va == vb:
                    continue
                v0 = _read_visible(p.txn, stem, anc_base)
                if vb == v0:
                    decided.append((stem, va))
                elif va == v0:
                    decided.append((stem, vb))
                else:
                    inst = by_iid.get(K.unpack_u32(stem[:4]))
                    conflicts.append(MergeConflict(instance=inst.name if inst else "?", key=K.tkey_of_stem(stem)))
                    decided.append((stem, va if policy == "ours" else vb))
            if conflicts and policy == "fail":
                shown = ", ".join(f"{c.instance}:{c.key!r}" for c in conflicts[:5])
                raise MergeConflictError(
                    f"merging {b.short} into {a.short}: {len(conflicts)} key(s) changed on both sides since "
                    f"{base.short} ({shown}{', …' if len(conflicts) > 5 else ''}); choose policy ours or theirs",
                    conflicts,
                )
            m = Version(uuid=new_uuid(), vid=self._dag.max_vid + 1, parents=(a.uuid, b.uuid), branch=name,
                        locked=False, message="", created=time.time(), committed=None)
            p.txn.put(K.version_record_key(m.vid), encode_version(m))
            for stem, value in decided:
                if value is None:
                    p.txn.put(K.entry_key(stem, m.vid, True), b"")
                else:
                    p.txn.put(K.entry_key(stem, m.vid, False), value)
                p.txn.put(K.change_key(m.vid, stem), b"")
            self._append_note(p.txn, m, f"merge of {b.uuid} into {a.uuid} (base {base.uuid}, policy {policy}, "
                                        f"{len(conflicts)} conflict(s), {len(decided)} key(s) merged)")
            p.after(lambda: self._dag.add(m))
        return MergeResult(version=m, base=base.uuid, conflicts=tuple(conflicts), merged=len(decided))

    # -- consistency ----------------------------------------------------------------------------

    def verify(self) -> list[str]:
        """Check the whole store; returns problems (empty when consistent). Reads everything."""
        problems: list[str] = []
        with self._engine.read() as txn:
            self._load(txn)
            dag = self._dag
            problems.extend(dag.check())
            vids = {v.vid for v in dag}
            iids = {i.iid for i in self._instances.values()}
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
        return problems


class Checkout:
    """A version opened for reading (any version) or writing (an open version).

    The handle the widgets and the labelmap hold: it caches the version's ancestor set, so each
    read is one engine snapshot plus one range scan, and each write is one transaction.
    """

    def __init__(self, repo: Repository, version: Version, *, writable: bool) -> None:
        self.repo = repo
        self._version = version
        self.writable = writable

    @property
    def version(self) -> Version:
        """The version, with current locked flag and message."""
        return self.repo.version(self._version)

    @contextmanager
    def read(self) -> Iterator[VersionView]:
        """One snapshot at this version."""
        anc = self.repo._ancestors(self._version)
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


# ---------------------------------------------------------------------------------------------
# Creating and opening
# ---------------------------------------------------------------------------------------------


def create_repository(path: str | os.PathLike[str] | None, *, engine: str | None = None,
                      durable: bool = True, lock_timeout: float = DEFAULT_TIMEOUT) -> Repository:
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
    """
    name = engine or (DEFAULT_ENGINE if path is not None else "memory")
    if name not in ENGINE_NAMES:
        raise ArgumentError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
    directory: Path | None = None
    if path is not None:
        if name == "memory":
            raise ArgumentError("the memory engine keeps no files; pass path=None")
        directory = Path(path)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise ArgumentError(f"{directory} already exists and is not an empty directory")
        directory.mkdir(parents=True, exist_ok=True)
    elif name != "memory":
        raise ArgumentError(f"the {name} engine needs a path")
    kv = open_engine(name, directory, create=True, durable=durable)
    repo = Repository(kv, directory, lock_timeout=lock_timeout)
    root = Version(uuid=new_uuid(), vid=1, parents=(), branch=ROOT_BRANCH, locked=False, message="",
                   created=time.time(), committed=None)
    with kv.write() as txn:
        txn.put(K.FORMAT_KEY, json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION,
                                          "root": root.uuid}).encode())
        txn.put(K.GENERATION_KEY, K.pack_u64(1))
        txn.put(K.version_record_key(root.vid), encode_version(root))
    if directory is not None:
        marker = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "engine": name, "root": root.uuid}
        _write_atomically(directory / MARKER_FILE, json.dumps(marker, indent=2).encode() + b"\n")
    with kv.read() as txn:
        repo._load(txn)
    return repo


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
    if name not in ("lmdb", "sqlite"):
        raise StoreCorruptError(f"{marker_path}: unknown engine {name!r}")
    kv = open_engine(str(name), directory, create=False, durable=durable)
    repo = Repository(kv, directory, lock_timeout=lock_timeout)
    try:
        with kv.read() as txn:
            repo._load(txn)
            fmt = json.loads(txn.get(K.FORMAT_KEY) or b"{}")
        if fmt.get("root") != marker.get("root") or repo.root.uuid != marker.get("root"):
            raise StoreCorruptError(f"{directory}: engine files belong to another repository (root mismatch)")
    except NotARepositoryError as exc:
        repo.close()
        raise StoreCorruptError(str(exc)) from exc
    except (StoreCorruptError, UnknownVersionError, UnknownBranchError):
        repo.close()
        raise
    except Exception as exc:
        repo.close()
        raise StoreCorruptError(f"{directory}: unreadable store ({type(exc).__name__}: {exc})") from exc
    return repo


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
