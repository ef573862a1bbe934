"""The version DAG as a repository shows it: versions, branches, the log, commits, new versions, notes.

Every question about history (a head, a log with a limit, an ancestor test, a merge base) reads only
the records it needs through the handle's snapshot (:mod:`.handle`); every change to the DAG (a new
version, a commit, a renamed branch, a note) is one write transaction. Split out of the repository
module (issue 30), unchanged: :class:`~.repository.Repository` inherits it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.dag import ROOT_BRANCH, Branch, Note, Version, new_uuid
from napari_shardscope.core.versioned.engines import WriteTxn
from napari_shardscope.core.versioned.errors import UnknownBranchError
from napari_shardscope.core.versioned.handle import RepositoryHandle, _Pending


class VersionHistory(RepositoryHandle):
    """The DAG part of :class:`~.repository.Repository`: reading and growing the history."""

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

    def merges_in(self, ref: str | Version) -> list[Version]:
        """The merge versions (more than one parent) among the version and its ancestors, newest first.

        Reads the DAG's child index (keys only) and the merges' records, never a record per ancestor:
        what a reader checking its lineage for merges needs, in a fraction of :meth:`ancestry`'s cost.
        """
        with self._snapshot() as dag:
            return dag.merges_in(self._resolve(dag, ref))

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
