""":class:`Repository`, assembled, and the handles that read and write data at versions.

The class users hold: the parts of each concept (:mod:`.history`, :mod:`.counters`,
:mod:`.unversioned`, :mod:`.transfer`, :mod:`.fsck`, all on :mod:`.handle`) plus what reads and
writes data — :meth:`Repository.read`/:meth:`Repository.write` at a version, a :class:`Checkout` on
one version, merges (a version with two parents, :mod:`~napari_shardscope.core.versioned.merge`),
a :class:`Batch` of changes in one transaction, and a :class:`Rewriter` for format migrations.
Reads at a version follow DVID's rule (:mod:`~napari_shardscope.core.versioned.view`): one walk over
a key's versions, the version's ancestor set picking the nearest ancestor.

It is not in :mod:`.repository` because :mod:`.opening` (create and open) needs the class and
:mod:`.repository` re-exports both: modules of one package must not import each other in a cycle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from itertools import islice
from typing import Any

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.ancestry import AncestorSet
from napari_shardscope.core.versioned.counters import IdCounters
from napari_shardscope.core.versioned.dag import Note, Version, new_uuid
from napari_shardscope.core.versioned.errors import (
    CommittedVersionError,
    InstanceExistsError,
    MergeConflictError,
    UncommittedVersionError,
)
from napari_shardscope.core.versioned.fsck import RepositoryCheck
from napari_shardscope.core.versioned.handle import _Pending
from napari_shardscope.core.versioned.history import VersionHistory
from napari_shardscope.core.versioned.hollow import HollowRef
from napari_shardscope.core.versioned.instance import Instance, check_instance
from napari_shardscope.core.versioned.merge import MERGE_POLICIES, MergePolicy, MergeResult, plan_merge
from napari_shardscope.core.versioned.node import NodeContent
from napari_shardscope.core.versioned.transfer import NodeTransfer
from napari_shardscope.core.versioned.unversioned import UnversionedData, _bump_unversioned
from napari_shardscope.core.versioned.view import LogEntry, VersionView, VersionWriter


class Repository(VersionHistory, IdCounters, UnversionedData, NodeTransfer, RepositoryCheck):
    """A versioned repository; obtain one with :func:`create_repository` or :func:`open_repository`.

    Thread-safe; one object per process and path is enough, but several are fine.
    """

    @contextmanager
    def batch(self, *, timeout: float | None = None) -> Iterator[Batch]:
        """Several DAG and data changes in *one* transaction: all of them, or none after a crash.

        Made for ingesting histories (a generator of test repositories, an importer): 1,000 new
        versions with a commit each cost one transaction instead of 2,000. The batch's methods are
        those of the repository (:class:`Batch`); nothing else may write while the block runs.
        """
        with self._writing(timeout) as p:
            yield Batch(self, p)

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

    def instance(self, name: str) -> Instance:
        """A data instance with its configuration as this transaction sees it (set_instance_config applies
        at commit)."""
        return self._repo.instance(name)

    def scan_all(self, instance: Instance | str, prefix: bytes) -> Iterator[tuple[bytes, int, bool, bytes]]:
        """Every stored entry of an instance's keys starting with ``prefix``, at every version:
        ``(key, version id, tombstone, value)`` (what a migration collects from the whole history)."""
        inst = self._repo.instance(instance)
        lo, hi = K.prefix_range(inst.iid, prefix)
        for key, value in self._p.txn.scan(lo, hi):
            stem, vid, tomb = K.split_entry(key)
            yield K.tkey_of_stem(stem), vid, tomb, value

    def own_log(self, instance: Instance | str, ref: str | Version, *, start: int | None = None,
                reverse: bool = False, limit: int = 1024) -> list[LogEntry]:
        """At most ``limit`` entries of the log version ``ref`` appended itself: from sequence number
        ``start`` up (``reverse``: down; ``None``: from the first, or the last, entry).

        A migration reads a version's log in such pieces, one per transaction, so that neither its
        memory nor a transaction grows with the version's history.
        """
        inst = self._repo.instance(instance)
        v = self._repo._resolve(self._p.dag, ref)
        lo = K.log_prefix(inst.iid, v.vid)
        hi = K.next_prefix(lo)
        if start is not None and not reverse:
            lo = K.log_key(inst.iid, v.vid, start)
        elif start is not None:
            hi = K.log_key(inst.iid, v.vid, start + 1)
        keys = list(islice(self._p.txn.scan_keys(lo, hi, reverse=reverse), limit))
        return [LogEntry(version=v.uuid, seq=K.unpack_u64(key[-8:]), data=data)
                for key, data in zip(keys, self._p.txn.get_many(keys), strict=True) if data is not None]

    def changed_keys(self, instance: Instance | str, ref: str | Version, *, start: bytes | None = None,
                     limit: int = 4096) -> list[bytes]:
        """At most ``limit`` keys version ``ref`` itself stores an entry for (a value or a tombstone),
        ascending from ``start``: the version's change index, read in pieces."""
        inst = self._repo.instance(instance)
        v = self._repo._resolve(self._p.dag, ref)
        lo = K.change_prefix(v.vid, inst.iid)
        hi = K.next_prefix(lo)
        if start:
            lo = K.change_key(v.vid, K.key_stem(inst.iid, start))
        return [K.tkey_of_stem(K.stem_of_change_key(key))
                for key in islice(self._p.txn.scan_keys(lo, hi), limit)]

    def put_unversioned(self, instance: Instance | str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Store (a value) or delete (``None``) unversioned keys of an instance: a migration's own
        bookkeeping (where it got to), which no version holds."""
        inst = self._repo.instance(instance)
        for key, value in items:
            if value is None:
                self._p.txn.delete(K.unversioned_key(inst.iid, key))
            else:
                self._p.txn.put(K.unversioned_key(inst.iid, key), value)
        _bump_unversioned(self._p.txn, inst.iid)

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

    def adopt_nodes(self, nodes: Iterable[tuple[NodeContent, str | None, HollowRef | None]]) -> list[Version]:
        """Adopt many ``(node, branch, hollow)`` (parents first) as :meth:`adopt_node` each, records written in bulk.

        The store ends byte for byte as after calling :meth:`adopt_node` for each in this batch; the DAG
        records are built in memory and written with one bulk put (what a clone adopts per batch).
        ``nodes`` is consumed lazily: each is adopted before the next is taken, so a generator may
        choose a node's branch from the DAG as it stands (:meth:`branch_fits`).
        """
        return self._repo._adopt_nodes_in(self._p, nodes)

    def branch_fits(self, parents: tuple[str, ...], branch: str) -> bool:
        """See :meth:`Repository.branch_fits`, as this transaction sees the DAG (versions adopted in it too)."""
        return self._repo._branch_fits(self._p.dag, parents, branch)
