"""Reading and writing at one version: the DVID read rule over the ordered engine.

Reading key K at version V is one walk over the entries of K, newest version id first (all
versions of a key sit together, see :mod:`~napari_shardscope.core.versioned.keys`), stopping at the
first entry stored at an ancestor of V (a byte lookup in V's ancestor set, see
:mod:`~napari_shardscope.core.versioned.ancestry`). Version ids are a topological order, so on a
chain that is the nearest ancestor; a tombstone there means "deleted". Scans at a version walk the
key range once and apply the same rule per key, so they merge the ancestor layers in one pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.ancestry import AncestorSet
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.engines.protocol import ReadTxn, WriteTxn
from napari_shardscope.core.versioned.errors import IdsExhaustedError, StoreCorruptError
from napari_shardscope.core.versioned.instance import Instance


class Catalog(Protocol):
    """What a view asks of its repository: instances by name and versions by id.

    :class:`~napari_shardscope.core.versioned.repository.Repository` is the one implementation; a
    Protocol here because the repository builds views, so this module cannot import it back.
    """

    def instance(self, ref: Instance | str) -> Instance:
        """The instance named ``ref`` (an :class:`Instance` is returned as is)."""
        ...

    def instances(self) -> list[Instance]:
        """All data instances, by id."""
        ...

    def version_by_id(self, vid: int) -> Version:
        """The version with repository-local id ``vid``."""
        ...


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


def visible_entry(txn: ReadTxn, stem: bytes, ancestors: AncestorSet, skip: int = -1) -> bytes | None:
    """The engine key of the entry of ``stem`` visible from a version whose ancestors are given.

    One reverse range scan over the key's entries; the first one stored at an ancestor wins
    (ids grow along every path). ``skip`` ignores one version's own entry (what a version
    inherits).
    """
    lo, hi = K.stem_range(stem)
    n = len(stem)
    flags = ancestors.flags
    m = len(flags)
    for key in txn.scan_keys(lo, hi, reverse=True):
        vid = int.from_bytes(key[n:n + 4], "big")
        if vid < m and flags[vid] and vid != skip:
            return key
    return None


def read_visible(txn: ReadTxn, stem: bytes, ancestors: AncestorSet) -> bytes | None:
    """The value of ``stem`` visible from a version (None when absent or deleted): one engine walk."""
    lo, hi = K.stem_range(stem)
    n = len(stem)
    flags = ancestors.flags
    m = len(flags)

    def accept(key: bytes) -> bool:
        vid = int.from_bytes(key[n:n + 4], "big")
        return vid < m and flags[vid] == 1

    hit = txn.find_last(lo, hi, accept)
    if hit is None or hit[0][-1] == K.TOMBSTONE:
        return None
    return hit[1]


class VersionView:
    """Reads at one version inside one engine snapshot (from :meth:`Repository.read`).

    Every method sees the same snapshot, so a scan and the gets after it agree even while
    another process writes.
    """

    def __init__(self, repo: Catalog, version: Version, txn: ReadTxn, ancestors: AncestorSet) -> None:
        self._repo = repo
        self.version = version
        self._txn = txn
        self._anc = ancestors

    def get(self, instance: Instance | str, key: bytes) -> bytes | None:
        """The value of ``key`` at this version (None when absent or deleted)."""
        inst = self._repo.instance(instance)
        return read_visible(self._txn, K.key_stem(inst.iid, check_tkey(key)), self._anc)

    def get_many(self, instance: Instance | str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Values of several keys in one snapshot (one walk over each key's versions)."""
        inst = self._repo.instance(instance)
        return [read_visible(self._txn, K.key_stem(inst.iid, check_tkey(key)), self._anc) for key in keys]

    def contains(self, instance: Instance | str, key: bytes) -> bool:
        """True when ``key`` has a value at this version (no value is read)."""
        inst = self._repo.instance(instance)
        entry = visible_entry(self._txn, K.key_stem(inst.iid, check_tkey(key)), self._anc)
        return entry is not None and entry[-1] != K.TOMBSTONE

    def _range(self, iid: int, prefix: bytes | None, start: bytes | None,
               stop: bytes | None) -> tuple[bytes, bytes]:
        if prefix is not None:
            if start is not None or stop is not None:
                raise ArgumentError("give either prefix or start/stop, not both")
            return K.prefix_range(iid, check_tkey(prefix, allow_empty=True))
        return K.tkey_range(iid, start, stop)

    def keys(self, instance: Instance | str, *, prefix: bytes | None = None, start: bytes | None = None,
             stop: bytes | None = None) -> Iterator[bytes]:
        """Keys with a value at this version, ascending; by ``prefix`` or in ``[start, stop)``.

        One pass over the keys of the range (no value is read): per key, the entry of the nearest
        ancestor wins (ids ascend inside a key, so the last accepted one).
        """
        inst = self._repo.instance(instance)
        lo, hi = self._range(inst.iid, prefix, start, stop)
        flags, cut = self._anc.flags, -K.SUFFIX_LEN
        m = len(flags)
        stem: bytes | None = None
        best: bytes | None = None
        for key in self._txn.scan_keys(lo, hi):
            s = key[:cut]
            if s != stem:
                if best is not None and best[-1] != K.TOMBSTONE:
                    yield K.tkey_of_stem(best[:cut])
                stem, best = s, None
            vid = int.from_bytes(key[cut:-1], "big")
            if vid < m and flags[vid]:
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
        if getattr(self._txn, "defers_values", False):
            yield from self._scan_selected(lo, hi)
            return
        flags, cut = self._anc.flags, -K.SUFFIX_LEN
        m = len(flags)
        stem: bytes | None = None
        best: tuple[bytes, bytes] | None = None
        for key, value in self._txn.scan(lo, hi):
            s = key[:cut]
            if s != stem:
                if best is not None and best[0][-1] != K.TOMBSTONE:
                    yield K.tkey_of_stem(best[0][:cut]), best[1]
                stem, best = s, None
            vid = int.from_bytes(key[cut:-1], "big")
            if vid < m and flags[vid]:
                best = (key, value)
        if best is not None and best[0][-1] != K.TOMBSTONE:
            yield K.tkey_of_stem(best[0][:cut]), best[1]

    def _scan_selected(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`scan` where values cost a download (a lazy clone's hollow versions): keys chosen first,
        then only the chosen entries' values read, a batch at a time."""
        flags, cut = self._anc.flags, -K.SUFFIX_LEN
        m = len(flags)
        chosen: list[bytes] = []
        stem: bytes | None = None
        best: bytes | None = None

        def flush() -> Iterator[tuple[bytes, bytes]]:
            for key, value in zip(chosen, self._txn.get_many(chosen), strict=True):
                if value is not None:
                    yield K.tkey_of_stem(key[:cut]), value
            chosen.clear()

        for key in self._txn.scan_keys(lo, hi):
            s = key[:cut]
            if s != stem:
                if best is not None and best[-1] != K.TOMBSTONE:
                    chosen.append(best)
                    if len(chosen) >= 256:
                        yield from flush()
                stem, best = s, None
            vid = int.from_bytes(key[cut:-1], "big")
            if vid < m and flags[vid]:
                best = key
        if best is not None and best[-1] != K.TOMBSTONE:
            chosen.append(best)
        yield from flush()

    def read_log(self, instance: Instance | str, *, own: bool = False) -> Iterator[LogEntry]:
        """The instance's log entries of this version's ancestry, parents first (or only its own).

        Ids grow in topological order, so one scan gives a valid replay order from the root.
        """
        inst = self._repo.instance(instance)
        lo = K.log_prefix(inst.iid, self.version.vid if own else None)
        hi = K.next_prefix(lo)
        at = len(K.LOG_PREFIX) + 4
        if getattr(self._txn, "defers_values", False):  # only the ancestors' entries are downloaded
            keys = [k for k in self._txn.scan_keys(lo, hi) if K.unpack_u32(k[at:at + 4]) in self._anc]
            for first in range(0, len(keys), 256):
                part = keys[first:first + 256]
                for key, data in zip(part, self._txn.get_many(part), strict=True):
                    if data is not None:
                        vid = K.unpack_u32(key[at:at + 4])
                        yield LogEntry(version=self._repo.version_by_id(vid).uuid, seq=K.unpack_u64(key[-8:]),
                                       data=data)
            return
        for key, data in self._txn.scan(lo, hi):
            vid = K.unpack_u32(key[at:at + 4])
            if vid in self._anc:
                yield LogEntry(version=self._repo.version_by_id(vid).uuid, seq=K.unpack_u64(key[-8:]), data=data)

    def log_length(self, instance: Instance | str) -> int:
        """How many log entries this version itself appended for the instance (one reverse seek).

        For data types whose every write appends a log entry: the count then names the state of
        the version's data, a key for caches of what is derived from it.
        """
        inst = self._repo.instance(instance)
        prefix = K.log_prefix(inst.iid, self.version.vid)
        last = next(self._txn.scan_keys(prefix, K.next_prefix(prefix), reverse=True), None)
        return 0 if last is None else K.unpack_u64(last[-8:]) + 1

    def log_entry(self, instance: Instance | str, version_id: int, seq: int) -> bytes | None:
        """Log entry ``seq`` of the instance at the version with local id ``version_id`` (None: no such entry).

        A direct read, for data types that record where their entries are (the labelmap's undo stack
        and history): no scan of the log.
        """
        inst = self._repo.instance(instance)
        return self._txn.get(K.log_key(inst.iid, version_id, seq))

    def get_unversioned(self, instance: Instance | str, key: bytes) -> bytes | None:
        """The instance's unversioned value of ``key`` (the same at every version), in this snapshot."""
        inst = self._repo.instance(instance)
        return self._txn.get(K.unversioned_key(inst.iid, key))

    def scan_unversioned(self, instance: Instance | str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """The instance's unversioned ``(key, value)`` pairs whose key starts with ``prefix``, ascending."""
        inst = self._repo.instance(instance)
        lo = K.unversioned_prefix(inst.iid, prefix)
        cut = len(K.unversioned_prefix(inst.iid))
        for key, value in self._txn.scan(lo, K.next_prefix(lo)):
            yield key[cut:], value

    def changes(self, instance: Instance | str | None = None) -> Iterator[Change]:
        """Keys this version itself wrote or deleted (not inherited), from the change index."""
        by_iid = {i.iid: i for i in self._repo.instances()}
        own = AncestorSet.of([self.version.vid])
        lo = K.change_prefix(self.version.vid, None if instance is None else self._repo.instance(instance).iid)
        for ckey in self._txn.scan_keys(lo, K.next_prefix(lo)):
            stem = K.stem_of_change_key(ckey)
            entry = visible_entry(self._txn, stem, own)
            inst = by_iid.get(K.unpack_u32(stem[:4]))
            if entry is None or inst is None:  # pragma: no cover - verify() reports these
                continue
            yield Change(instance=inst.name, key=K.tkey_of_stem(stem), deleted=entry[-1] == K.TOMBSTONE)


class VersionWriter(VersionView):
    """Reads and writes at one open version inside one write transaction (:meth:`Repository.write`).

    Everything done through one writer commits atomically when the ``with`` block ends, and is
    discarded if it ends with an exception.
    """

    def __init__(self, repo: Catalog, version: Version, txn: WriteTxn, ancestors: AncestorSet) -> None:
        super().__init__(repo, version, txn, ancestors)
        self._wtxn = txn
        self._unversioned_written: set[int] = set()

    def put(self, instance: Instance | str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key`` in this version (ancestors keep theirs)."""
        inst = self._repo.instance(instance)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
        stem = K.key_stem(inst.iid, check_tkey(key))
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

    def put_new(self, instance: Instance | str, items: Sequence[tuple[bytes, bytes]], *, fresh: bool = False) -> int:
        """Store keys that have no value at this version (a bulk import): one engine bulk put.

        What :meth:`put` does per key, with the entries sorted and handed to the engine at once.
        ``fresh`` (the keys carry ids just handed out by :meth:`allocate_ids`, so no version ever
        held them) also skips removing this version's tombstones, one engine call per key otherwise.
        """
        inst = self._repo.instance(instance)
        prefix = K.pack_u32(inst.iid)
        suffix = K.pack_u32(self.version.vid) + b"\x00"
        change = K.change_key(self.version.vid, b"")
        stems = [prefix + k.replace(b"\x00", b"\x00\xff") + K.TERMINATOR for k, _ in items]
        if any(len(s) == len(prefix) + len(K.TERMINATOR) for s in stems):
            raise ArgumentError("keys must be non-empty bytes")
        if not fresh:
            tomb = K.pack_u32(self.version.vid) + b"\x01"
            for s in stems:
                self._wtxn.delete(s + tomb)
        pairs = [(s + suffix, v) for s, (_, v) in zip(stems, items, strict=True)]
        pairs += [(change + s, b"") for s in stems]
        pairs.sort()
        self._wtxn.put_many(pairs)
        return len(items)

    def put_new_rows(self, instance: Instance | str, keys: Any, values: Sequence[bytes] | None, *,
                     fresh: bool = False) -> int:
        """:meth:`put_new` of keys given as the rows of an ``(n, w)`` uint8 array (``values``: one per row, or
        None for empty values): sorted as an array (:mod:`.key_rows`), so the entries and the change-index
        keys go to the engine already in order, without sorting a list of tuples.
        """
        from napari_shardscope.core.versioned.key_rows import escaped_keys, sorted_rows

        inst = self._repo.instance(instance)
        k = np.asarray(keys, dtype=np.uint8)
        if k.ndim != 2 or (k.shape[0] and not k.shape[1]):
            raise ArgumentError("keys must be an (n, w) array of non-empty byte rows")
        if values is not None and len(values) != k.shape[0]:
            raise ArgumentError(f"{len(values)} values for {k.shape[0]} keys")
        order = sorted_rows(k)
        rows = k[order]
        prefix = K.pack_u32(inst.iid)
        vid = self.version.vid
        if not fresh:
            tomb = K.pack_u32(vid) + b"\x01"
            for key in escaped_keys(prefix, rows, K.TERMINATOR + tomb):
                self._wtxn.delete(key)
        # the entries' and the change index's engine keys built whole, as arrays (key_rows.escaped_keys)
        entries = escaped_keys(prefix, rows, K.TERMINATOR + K.pack_u32(vid) + b"\x00")
        if values is None:
            self._wtxn.put_many(list(zip(entries, itertools.repeat(b""))))
        else:
            self._wtxn.put_many(list(zip(entries, map(values.__getitem__, order.tolist()), strict=True)))
        changes = escaped_keys(K.change_key(vid, b"") + prefix, rows, K.TERMINATOR)
        self._wtxn.put_many(list(zip(changes, itertools.repeat(b""))))
        return len(entries)

    def delete(self, instance: Instance | str, key: bytes) -> bool:
        """Delete ``key`` at this version; True when it had a value here.

        A tombstone is written only when an ancestor's value would otherwise show through;
        otherwise this version's own entry is simply removed.
        """
        inst = self._repo.instance(instance)
        stem = K.key_stem(inst.iid, check_tkey(key))
        vid = self.version.vid
        inherited = visible_entry(self._wtxn, stem, self._anc, skip=vid)
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

    def allocate_ids(self, counter: str, count: int = 1, *, minimum: int = 1) -> range:
        """Reserve ``count`` fresh integers from a repository-wide counter, in this transaction.

        The counter is *not* versioned: ids handed out on one branch are never handed out on
        another, which is how the labelmap keeps new label ids from colliding across branches.
        ``minimum`` lifts the counter past ids already used elsewhere (e.g. the base volume's max).
        """
        return allocate_ids(self._wtxn, counter, count, minimum)

    def put_unversioned(self, instance: Instance | str, key: bytes, value: bytes) -> None:
        """Store an unversioned value in this transaction (seen by every version at once).

        Only for data derived from something immutable (a labelmap's base-volume index): it rides
        on this version's transaction but belongs to no version (see
        :meth:`Repository.put_unversioned`, which works when every version is committed).
        """
        inst = self._repo.instance(instance)
        if not isinstance(value, bytes):
            raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
        self._wtxn.put(K.unversioned_key(inst.iid, key), value)
        if inst.iid not in self._unversioned_written:  # once per transaction: a remote sync's "changed" mark
            self._unversioned_written.add(inst.iid)
            mark = K.unversioned_generation_key(inst.iid)
            raw = self._wtxn.get(mark)
            self._wtxn.put(mark, K.pack_u64(1 + (0 if raw is None else K.unpack_u64(raw))))

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


def check_tkey(key: bytes, *, allow_empty: bool = False) -> bytes:
    if not isinstance(key, bytes):
        raise ArgumentError(f"keys must be bytes, got {type(key).__name__}")
    if not key and not allow_empty:
        raise ArgumentError("keys must not be empty")
    return key


def allocate_ids(txn: WriteTxn, counter: str, count: int, minimum: int) -> range:
    """Advance the counter ``counter`` by ``count`` inside ``txn``; the reserved ids as a range."""
    if not isinstance(counter, str) or not counter:
        raise ArgumentError("a counter needs a non-empty name")
    if not isinstance(count, int) or count < 1 or not isinstance(minimum, int) or minimum < 0:
        raise ArgumentError(f"bad id reservation: count={count!r}, minimum={minimum!r}")
    key = K.COUNTER_PREFIX + counter.encode("utf-8")
    raw = txn.get(key)
    if txn.get(K.RESERVATION_MODE_KEY) is not None:
        return _allocate_reserved(txn, counter, count, minimum)
    start = max(minimum, K.unpack_u64(raw) if raw is not None else 0)
    end = start + count
    if end >= 2**64:
        raise ArgumentError(f"counter {counter!r} would pass 2**64")
    txn.put(key, K.pack_u64(end))
    return range(start, end)


def decode_blocks(raw: bytes | None) -> list[tuple[int, int]]:
    """Reserved id blocks ``[(start, end), ...]`` of a counter (stored as pairs of u64)."""
    if not raw:
        return []
    if len(raw) % 16:
        raise StoreCorruptError("damaged id reservation record")
    return [(K.unpack_u64(raw[i:i + 8]), K.unpack_u64(raw[i + 8:i + 16])) for i in range(0, len(raw), 16)]


def encode_blocks(blocks: list[tuple[int, int]]) -> bytes:
    """Inverse of :func:`decode_blocks`."""
    return b"".join(K.pack_u64(a) + K.pack_u64(b) for a, b in blocks)


def _allocate_reserved(txn: WriteTxn, counter: str, count: int, minimum: int) -> range:
    """Ids from the blocks this clone reserved from its remote (never from a local counter).

    A block too small for the request, or below ``minimum``, is passed over; when none fits,
    :class:`IdsExhaustedError` tells the caller to reserve more (the transaction is then discarded).
    """
    key = K.RESERVATION_PREFIX + counter.encode("utf-8")
    blocks = decode_blocks(txn.get(key))
    for i, (a, b) in enumerate(blocks):
        start = max(a, minimum)
        if b - start >= count:
            rest = blocks[i + 1:]
            if start + count < b:
                rest.insert(0, (start + count, b))
            txn.put(key, encode_blocks(rest))
            return range(start, start + count)
    left = sum(max(0, b - max(a, minimum)) for a, b in blocks)
    raise IdsExhaustedError(f"the ids this clone reserved for {counter!r} ran out ({left} left, {count} needed); "
                            f"reserve more from the remote (`shardscope ids reserve`, needs the network)",
                            counter, count, minimum)
