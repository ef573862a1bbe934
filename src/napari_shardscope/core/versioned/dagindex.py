"""The version DAG as small records in the store, read on demand (repository format 2).

Format 1 kept the DAG in memory, as DVID does: opening a repository read every version record
(10⁴ versions: 1.3 s) and every other handle re-read all of them after any write. Here the DAG stays
in the engine as records that each answer one question with one get or one short range scan:

==========================  =====================================================================
record (under the META id)  answers
==========================  =====================================================================
``v`` + id                  the version (JSON, unchanged from format 1)
``U`` + UUID hex            the id of a UUID; a UUID *prefix* is a range scan over these keys
``b`` + branch name         the branch's base, head and length: a head is one get
``k`` + parent + child      the children of a version: one range scan
``A`` + id / ``P`` + ...    the version's ancestor set (:mod:`~napari_shardscope.core.versioned.ancestry`)
``J`` + generation          the ids of the versions a write rewrote (a commit): what other handles
                            must forget, so they re-read only that, never the whole DAG
==========================  =====================================================================

A handle keeps bounded caches (:class:`~.dagcache.DagIndex`): recently used versions, UUID → id, and a few
ancestor sets. Ids, UUIDs, parents and ancestor sets never change once written; a version's locked
flag, message and commit time change once (the commit), which the journal tells other handles about.

Every lookup happens through a :class:`DagReader` bound to one engine transaction, so a read sees
one consistent DAG. A reader fills the caches only if its snapshot is as new as what the caches
describe (the *generation*); a writer (:class:`DagWriter`) never fills them, because its
transaction may still be rolled back.
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.ancestry import (
    AncestorSet,
    PageReader,
    load_ancestors,
    write_ancestors,
)
from napari_shardscope.core.versioned.dag import (
    Branch,
    Version,
    check_branch_name,
    decode_version,
    decode_versions,
    encode_version,
)
from napari_shardscope.core.versioned.dagcache import ANCESTOR_CACHE as ANCESTOR_CACHE
from napari_shardscope.core.versioned.dagcache import JOURNAL_ALL as JOURNAL_ALL
from napari_shardscope.core.versioned.dagcache import VERSION_CACHE as VERSION_CACHE
from napari_shardscope.core.versioned.dagcache import DagIndex as DagIndex
from napari_shardscope.core.versioned.dagcache import read_journal as read_journal
from napari_shardscope.core.versioned.engines.buffered import BufferedWrites
from napari_shardscope.core.versioned.engines.protocol import ReadTxn, WriteTxn
from napari_shardscope.core.versioned.errors import (
    AmbiguousVersionError,
    BranchExistsError,
    StoreCorruptError,
    UnknownBranchError,
    UnknownVersionError,
)

_HEX = re.compile(r"[0-9a-f]+")


@dataclass(frozen=True)
class BranchRecord:
    """A branch as stored: its first version, its last (the head) and how many versions it has."""

    name: str
    base: int
    head: int
    length: int

    def encode(self) -> bytes:
        # the bytes json.dumps({"base": …, "head": …, "length": …}, separators=(",", ":")) gives for
        # ints, without its per-call encoder (a clone encodes one per version adopted)
        return b'{"base":%d,"head":%d,"length":%d}' % (int(self.base), int(self.head), int(self.length))

    @classmethod
    def decode(cls, name: str, raw: bytes) -> BranchRecord:
        try:
            r = json.loads(raw)
            return cls(name=name, base=int(r["base"]), head=int(r["head"]), length=int(r["length"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreCorruptError(f"unreadable record of branch {name!r}: {exc}") from exc



class DagReader:
    """The DAG as seen from one engine transaction (lookups read records on demand)."""

    def __init__(self, index: DagIndex, txn: ReadTxn, generation: int, *, cacheable: bool = True) -> None:
        self.index = index
        self.txn = txn
        self.generation = generation
        self._cacheable = cacheable

    # -- versions ---------------------------------------------------------------------------------

    def get_vid(self, vid: int) -> Version | None:
        """The version with id ``vid``, or None."""
        return self._get_vids([vid])[0]

    def by_vid(self, vid: int) -> Version:
        """The version with id ``vid``."""
        return self.by_vids([vid])[0]

    def by_vids(self, vids: list[int]) -> list[Version]:
        """The versions with these ids, in this order (:meth:`_get_vids`)."""
        found = self._get_vids(vids)
        for vid, v in zip(vids, found, strict=True):
            if v is None:
                raise UnknownVersionError(f"no version with id {vid}")
        return [v for v in found if v is not None]

    def _get_vids(self, vids: list[int]) -> list[Version | None]:
        """The versions with these ids (None where there is none), in this order: cached ones from memory, the
        rest read together and decoded with one JSON parse.

        Why: an ancestry of a deep history is thousands of records, and one parse per record cost more
        than reading it. Longer than the version cache, a walk evicted each record before the next walk
        came back to it (an LRU read in one order each time), so every walk decoded the whole history.
        Records read are remembered oldest first: the cache keeps the newest, where the next walk
        starts, and a walk decodes only what the cache cannot hold.
        """
        found: list[Version | None] = (self.index.cached_versions(vids) if self._cacheable
                                       else [None for _ in vids])
        missing = [pos for pos, v in enumerate(found) if v is None and 0 < vids[pos] <= K.MAX_ID]
        raws = self.txn.get_many([K.version_record_key(vids[p]) for p in missing]) if missing else []
        present = [(pos, raw) for pos, raw in zip(missing, raws, strict=True) if raw is not None]
        decoded = decode_versions([raw for _, raw in present]) if present else []
        for (pos, _), v in zip(present, decoded, strict=True):
            if v.vid != vids[pos]:
                raise StoreCorruptError(f"version record under id {vids[pos]} names id {v.vid}")
            found[pos] = v
        if self._cacheable:
            for v in sorted(decoded, key=lambda d: d.vid):
                self.index.remember(self.generation, version=v)
        return found

    def vid_of(self, uuid: str) -> int | None:
        """The id of the version with this full UUID, or None."""
        if self._cacheable:
            hit = self.index.cached_vid(uuid)
            if hit is not None:
                return hit
        if not isinstance(uuid, str) or len(uuid) != 32 or not _HEX.fullmatch(uuid):
            return None
        raw = self.txn.get(K.uuid_key(uuid))
        if raw is None:
            return None
        if len(raw) != 4:
            raise StoreCorruptError(f"UUID index entry of {uuid} is damaged")
        return K.unpack_u32(raw)

    def by_uuid(self, uuid: str) -> Version:
        """The version with this full UUID."""
        vid = self.vid_of(uuid)
        if vid is None:
            raise UnknownVersionError(f"no version {uuid}")
        v = self.by_vid(vid)
        if v.uuid != uuid:
            raise StoreCorruptError(f"UUID index maps {uuid} to id {vid}, which is version {v.uuid}")
        return v

    def contains(self, uuid: str) -> bool:
        """True when a version has this full UUID."""
        return self.vid_of(uuid) is not None

    def parent_vids(self, v: Version) -> list[int]:
        """Ids of ``v``'s parents."""
        out = []
        for p in v.parents:
            pv = self.vid_of(p)
            if pv is None:
                raise StoreCorruptError(f"version {v.uuid} names a parent {p} that is not in the DAG")
            out.append(pv)
        return out

    def max_vid(self) -> int:
        """The largest id in use (0 when empty)."""
        last = next(self.txn.scan_keys(K.VERSION_PREFIX, K.next_prefix(K.VERSION_PREFIX), reverse=True), None)
        return 0 if last is None else K.unpack_u32(last[len(K.VERSION_PREFIX):])

    # -- names ------------------------------------------------------------------------------------

    def resolve_prefix(self, prefix: str) -> Version:
        """The one version whose UUID starts with ``prefix`` (as DVID resolves UUID prefixes)."""
        text = prefix.strip().lower()
        if not text or not _HEX.fullmatch(text):
            raise UnknownVersionError(f"{prefix!r} is neither a branch name nor a UUID prefix (hex)")
        if len(text) == 32:
            return self.by_uuid(text)
        lo = K.UUID_PREFIX + text.encode("ascii")
        hits: list[tuple[str, int]] = []
        for key, raw in self.txn.scan(lo, K.next_prefix(lo)):
            hits.append((key[len(K.UUID_PREFIX):].decode("ascii"), K.unpack_u32(raw)))
            if len(hits) >= 6:
                break
        if not hits:
            raise UnknownVersionError(f"no version UUID starts with {text!r}")
        if len(hits) > 1:
            shown = ", ".join(h[: max(len(text) + 4, 8)] for h, _ in hits[:5])
            raise AmbiguousVersionError(f"UUID prefix {text!r} matches several versions: {shown}…")
        return self.by_vid(hits[0][1])

    def resolve(self, ref: str | Version) -> Version:
        """A version from a branch name (its head), a UUID prefix or a :class:`Version`.

        Branch names win over UUID prefixes when a text is both.
        """
        if isinstance(ref, Version):
            v = self.get_vid(ref.vid)
            if v is not None and v.uuid == ref.uuid:
                return v
            return self.by_uuid(ref.uuid)
        if not isinstance(ref, str):
            raise ArgumentError(f"a version reference must be a string, got {type(ref).__name__}")
        rec = self.branch(ref) if ref else None
        if rec is not None:
            return self.by_vid(rec.head)
        return self.resolve_prefix(ref)

    # -- branches ---------------------------------------------------------------------------------

    def branch(self, name: str) -> BranchRecord | None:
        """Branch ``name``'s record, or None."""
        try:
            key = K.branch_key(name)
        except UnicodeEncodeError:
            return None
        raw = self.txn.get(key)
        return None if raw is None else BranchRecord.decode(name, raw)

    def has_branch(self, name: str) -> bool:
        """True when some version is on branch ``name``."""
        return self.branch(name) is not None

    def head(self, name: str) -> Version:
        """The last version of a branch."""
        rec = self.branch(name)
        if rec is None:
            raise UnknownBranchError(f"no branch named {name!r}")
        return self.by_vid(rec.head)

    def branch_records(self) -> list[BranchRecord]:
        """Every branch record, in order of creation (of their first versions)."""
        recs = [BranchRecord.decode(key[len(K.BRANCH_PREFIX):].decode("utf-8"), raw)
                for key, raw in self.txn.scan(K.BRANCH_PREFIX, K.next_prefix(K.BRANCH_PREFIX))]
        return sorted(recs, key=lambda r: r.base)

    def branches(self) -> list[Branch]:
        """Every branch with its base and head, in order of creation."""
        return [Branch(name=r.name, base=self.by_vid(r.base).uuid, head=self.by_vid(r.head).uuid, length=r.length)
                for r in self.branch_records()]

    def check_new_branch(self, name: str) -> None:
        """Raise when ``name`` is malformed or already names a branch."""
        check_branch_name(name)
        rec = self.branch(name)
        if rec is not None:
            raise BranchExistsError(f"branch {name!r} already exists (head {self.by_vid(rec.head).uuid})")

    # -- structure --------------------------------------------------------------------------------

    def child_vids(self, v: Version) -> list[int]:
        """Ids of ``v``'s children, ascending (creation order)."""
        lo = K.child_prefix(v.vid)
        return [K.unpack_u32(key[-4:]) for key in self.txn.scan_keys(lo, K.next_prefix(lo))]

    def children(self, v: Version) -> list[Version]:
        """Children of ``v`` in creation order."""
        return [self.by_vid(c) for c in self.child_vids(v)]

    def continuing_child(self, v: Version) -> Version | None:
        """The child of ``v`` on ``v``'s branch, if any (there is at most one).

        A branch is a chain ending at its head, so only a version that is not its branch's head
        can have one: the common case (appending at a head) costs one get.
        """
        rec = self.branch(v.branch)
        if rec is None or rec.head == v.vid:
            return None
        for c in self.child_vids(v):
            child = self.by_vid(c)
            if child.branch == v.branch:
                return child
        return None

    def ancestors(self, v: Version) -> AncestorSet:
        """Ids of ``v`` and all its ancestors (one record and its pages; cached)."""
        if self._cacheable:
            hit = self.index.cached_ancestors(v.vid)
            if hit is not None:
                return hit
        anc = load_ancestors(self.txn, v.vid)
        if anc.max() != v.vid:
            raise StoreCorruptError(f"the ancestor record of version {v.uuid} does not end at its own id {v.vid}")
        if self._cacheable:
            self.index.remember(self.generation, ancestors=(v.vid, anc))
        return anc

    def is_ancestor(self, ancestor: Version, v: Version) -> bool:
        """True when ``ancestor`` is ``v`` or one of its ancestors (one record read)."""
        return ancestor.vid <= v.vid and ancestor.vid in self.ancestors(v)

    def ancestry(self, v: Version) -> list[Version]:
        """``v`` and its ancestors, newest first: one record per ancestor not cached (O(history))."""
        return self.by_vids(self.ancestors(v).descending())

    def merge_vids(self) -> list[int]:
        """Ids of every version with more than one parent, ascending.

        Read from the child index's keys alone (a merge is the child of two parents, so its id
        appears under both): one key-only range scan, no version record decoded. At 10⁵ versions
        that is a few tenths of a second against seconds for reading every record.
        """
        children = bytearray()
        for key in self.txn.scan_keys(K.CHILD_PREFIX, K.next_prefix(K.CHILD_PREFIX)):
            children += key[-4:]
        if not children:
            return []
        ids, counts = np.unique(np.frombuffer(bytes(children), dtype=">u4"), return_counts=True)
        return [int(i) for i in ids[counts > 1]]

    def merges_in(self, v: Version) -> list[Version]:
        """The merge versions among ``v`` and its ancestors, newest first (their records only)."""
        anc = self.ancestors(v)
        return [self.by_vid(i) for i in reversed(self.merge_vids()) if i <= v.vid and i in anc]

    def merge_base(self, a: Version, b: Version) -> Version:
        """The common ancestor of ``a`` and ``b`` with the largest id.

        No other common ancestor descends from it (a descendant would have a larger id), so it is
        a lowest common ancestor, and the choice is deterministic when there are several.
        """
        common = self.ancestors(a) & self.ancestors(b)
        if not common:
            raise StoreCorruptError(f"versions {a.uuid} and {b.uuid} share no ancestor")
        return self.by_vid(common.max())

    def log(self, start: Version, *, limit: int | None = None, since: AncestorSet | None = None,
            since_time: float | None = None, first_parent: bool = False) -> Iterator[Version]:
        """``start`` and its ancestors, newest (largest id) first, reading only what is yielded.

        A walk with a max-heap on ids: ids are a topological order, so every version comes after
        all its descendants, as ``git log`` orders commits. ``first_parent`` follows only the first
        parent (the branch a merge was made on). Versions in ``since`` (an ancestor set) are left
        out and not walked through; with ``since_time`` the walk stops at the first version created
        before it. Each yielded version costs one record read and its parents' id look-ups.
        """
        if since is not None and start.vid in since:
            return
        heap = [-start.vid]
        queued = {start.vid}
        n = 0
        while heap and (limit is None or n < limit):
            v = self.by_vid(-heapq.heappop(heap))
            if since_time is not None and v.created < since_time:
                return
            yield v
            n += 1
            for pv in self.parent_vids(v)[: 1 if first_parent else None]:
                if pv not in queued and (since is None or pv not in since):
                    queued.add(pv)
                    heapq.heappush(heap, -pv)

    def newest(self, limit: int | None = None, *, since_time: float | None = None) -> Iterator[Version]:
        """Versions by id, largest first (one reverse range scan): at most ``limit``, stopping at the
        first created before ``since_time``."""
        for n, (_, raw) in enumerate(self.txn.scan(K.VERSION_PREFIX, K.next_prefix(K.VERSION_PREFIX), reverse=True)):
            if limit is not None and n >= limit:
                return
            v = decode_version(raw)
            if since_time is not None and v.created < since_time:
                return
            yield v

    def all_versions(self) -> list[Version]:
        """Every version in creation order (reads every record: listings and checks only)."""
        return decode_versions([raw for _, raw in self.txn.scan(K.VERSION_PREFIX, K.next_prefix(K.VERSION_PREFIX))])


class DagWriter(DagReader):
    """DAG changes inside one write transaction; caches stay untouched until it commits.

    ``changed`` collects the ids of rewritten versions, for the journal record the repository
    writes with the transaction's new generation.
    """

    def __init__(self, index: DagIndex, txn: WriteTxn, generation: int) -> None:
        self._buffer = BufferedWrites(txn)
        super().__init__(index, self._buffer, generation, cacheable=False)
        self.wtxn: WriteTxn = self._buffer
        self.changed: set[int] = set()
        self._pages = PageReader(self._buffer)
        # What this transaction wrote, so adopting thousands of versions in it reads none of them back
        # (records, UUIDs, branch records; the ancestor tables and pages are in ``_pages``). Only this
        # writer writes these records in its transaction, and it dies with the transaction.
        self._written: dict[int, Version] = {}
        self._written_vids: dict[str, int] = {}
        self._branches: dict[str, BranchRecord | None] = {}
        self._max_vid: int | None = None

    def get_vid(self, vid: int) -> Version | None:
        hit = self._written.get(vid)
        return hit if hit is not None else super().get_vid(vid)

    def vid_of(self, uuid: str) -> int | None:
        hit = self._written_vids.get(uuid) if isinstance(uuid, str) else None
        return hit if hit is not None else super().vid_of(uuid)

    def branch(self, name: str) -> BranchRecord | None:
        if name not in self._branches:
            if len(self._branches) >= VERSION_CACHE:
                self._branches.clear()
            self._branches[name] = super().branch(name)
        return self._branches[name]

    def max_vid(self) -> int:
        if self._max_vid is None:
            self._max_vid = super().max_vid()
        return self._max_vid

    def _remember(self, v: Version) -> None:
        if len(self._written) >= VERSION_CACHE:
            self._written.clear()
            self._written_vids.clear()
        self._written[v.vid] = v
        self._written_vids[v.uuid] = v.vid

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Versions added in the block are written together, with one bulk put when it ends.

        What a clone or a fetch adopting 1,000 versions per transaction uses: every record of the
        batch is built in memory (each version's ancestor table and page from its parent's, kept in
        memory, never read back) and written by one ``put_many``. The records are those
        :meth:`add` writes one by one, byte for byte. Nested blocks flush at the outermost end. An
        exception flushes too: what was added before it is in the transaction, as with :meth:`add`
        one by one, for a caller that handles the error and commits.
        """
        if self._buffer.buffering:
            yield
            return
        self._buffer.buffering = True
        try:
            yield
        finally:
            self._buffer.buffering = False
            self._buffer.flush()

    def add(self, v: Version, *, known_new: bool = False) -> None:
        """Write a new version: record, UUID index, child index, branch record, ancestor set.

        Its parents must be here; its id must be the next one; its branch must continue a parent's
        branch at that branch's head, or be new (the repository checks the rules first and says why).
        ``known_new``: the caller looked the UUID up in this transaction and found none (adopting
        skips a second look-up of a UUID that is not stored: one engine read per version).
        """
        if v.vid != self.max_vid() + 1:
            raise StoreCorruptError(f"version {v.uuid} gets id {v.vid}, not the next one ({self.max_vid() + 1})")
        if (v.uuid in self._written_vids) if known_new else self.contains(v.uuid):
            raise StoreCorruptError(f"version {v.uuid} is already in the DAG")
        parents = self.parent_vids(v)
        rec = self.branch(v.branch)
        if rec is None:
            rec = BranchRecord(v.branch, base=v.vid, head=v.vid, length=1)
        elif rec.head in parents:
            rec = BranchRecord(v.branch, base=rec.base, head=v.vid, length=rec.length + 1)
        else:
            raise StoreCorruptError(f"version {v.uuid} would continue branch {v.branch!r} away from its head")
        self.wtxn.put(K.version_record_key(v.vid), encode_version(v))
        self.wtxn.put(K.uuid_key(v.uuid), K.pack_u32(v.vid))
        for pv in parents:
            self.wtxn.put(K.child_key(pv, v.vid), b"")
        self.wtxn.put(K.branch_key(v.branch), rec.encode())
        write_ancestors(self.wtxn, v.vid, parents, self._pages)
        self._branches[v.branch] = rec
        self._max_vid = v.vid
        self._remember(v)

    def update(self, v: Version) -> None:
        """Rewrite a version's mutable fields (locked, message, committed) after a commit."""
        old = self.by_vid(v.vid)
        if (old.uuid, old.parents, old.branch) != (v.uuid, v.parents, v.branch):
            raise StoreCorruptError(f"version {v.uuid}: identity fields changed")
        self.wtxn.put(K.version_record_key(v.vid), encode_version(v))
        self.changed.add(v.vid)
        if v.vid in self._written:
            self._remember(v)

    def rename_branch(self, old: str, new: str) -> list[Version]:
        """Give every version of branch ``old`` the name ``new`` (O(length of the branch)).

        A version's branch is a field of its record, so its members' records are rewritten (and
        journalled), and the branch record moves. Members are found from the head along parents on
        the branch (a branch is a chain).
        """
        rec = self.branch(old)
        if rec is None:
            raise UnknownBranchError(f"no branch {old!r}")
        self.check_new_branch(new)
        renamed: list[Version] = []
        v: Version | None = self.by_vid(rec.head)
        while v is not None:
            done = Version(uuid=v.uuid, vid=v.vid, parents=v.parents, branch=new, locked=v.locked,
                           message=v.message, created=v.created, committed=v.committed)
            self.wtxn.put(K.version_record_key(v.vid), encode_version(done))
            self.changed.add(v.vid)
            self._written.pop(v.vid, None)
            renamed.append(done)
            v = next((p for p in map(self.by_vid, self.parent_vids(v)) if p.branch == old), None)
        if len(renamed) != rec.length or renamed[-1].vid != rec.base:
            raise StoreCorruptError(f"branch {old!r}: its record says {rec.length} versions from id {rec.base}, "
                                    f"its chain has {len(renamed)}")
        self.wtxn.delete(K.branch_key(old))
        self.wtxn.put(K.branch_key(new), BranchRecord(new, rec.base, rec.head, rec.length).encode())
        self._branches[old] = None
        self._branches[new] = BranchRecord(new, rec.base, rec.head, rec.length)
        return renamed[::-1]
