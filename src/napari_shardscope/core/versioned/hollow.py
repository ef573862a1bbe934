"""Hollow versions: a lazy clone's versions whose values stay on the remote until first read.

A lazy clone (``shardscope clone`` without ``--prefetch``) adopts every version's DAG record and
*which* keys it wrote (and deleted) — so the DVID read rule (:mod:`.view`) picks the right version's
entry exactly as for local data — but stores, in place of each value and log entry, a 10-byte
*stub*: where the value sits in one of the version's data objects on the remote (object index,
offset, length in the object's inflated payload). A version holding stubs is *hollow*; its record
``META + "H" + vid`` names the remote and the data objects.

Every engine transaction of a repository holding hollow versions goes through :class:`HollowTxn`,
which hands back the real value wherever the engine holds a stub: the data object is downloaded
once (through an :class:`ObjectSource`, which verifies its hash and keeps a copy in the repository
directory), cached in memory, and sliced. So every reader — views, merges, ``read_node`` for a push,
data types — sees values, never stubs, and a value is never wrong: it comes from an object whose
hash the version's node record names, at a range whose record head (the source checks it) names the same
key or log sequence and length. Offline, a value not read before is a
:class:`~.errors.NotLocalError` naming the remote and the object (bounded retries, no hang).

The versioned store does not import the transport (the remotes import the repository), so the
source of objects is a seam: the remotes register a factory with :func:`use_object_source` when
they are imported, and a hollow read in a process that never imported them imports them first.
"""

from __future__ import annotations

import importlib
import json
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import UnsupportedError
from napari_shardscope.core.versioned.engines.protocol import OrderedKV, ReadTxn, WriteTxn
from napari_shardscope.core.versioned.errors import StoreCorruptError

#: ``+ version id (u32)`` -> the hollow version's remote and data objects (JSON).
HOLLOW_PREFIX = K.META + b"H"
#: Present when the repository holds (or ever held) hollow versions: its handles read through :class:`HollowTxn`.
HOLLOW_FLAG_KEY = K.META + b"h"
#: A stub: data object index, offset and length of the value in that object's inflated payload.
STUB = struct.Struct(">HII")
#: Inflated data objects kept in memory per repository handle (the least recently used go first).
PAYLOAD_CACHE_BYTES = 256 * 1024 * 1024
#: Values resolved together while scanning (one batched download for the objects they need).
SCAN_BATCH = 256
_LOG_KEY_LEN = len(K.LOG_PREFIX) + 4 + 4 + 8
#: The module that registers the remotes' object source when imported (see :func:`object_source`).
SOURCE_MODULE = "napari_shardscope.core.versioned.remotes"


@dataclass(frozen=True)
class HollowRef:
    """Where a hollow version's values are: the remote's name and the version's data objects, in order."""

    remote: str
    objects: tuple[str, ...]

    def encode(self) -> bytes:
        return json.dumps({"remote": self.remote, "objects": list(self.objects)}).encode()

    @staticmethod
    def decode(raw: bytes, vid: int) -> HollowRef:
        try:
            d = json.loads(raw)
            return HollowRef(str(d["remote"]), tuple(str(o) for o in d["objects"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreCorruptError(f"hollow version record of version id {vid} is unreadable ({exc})") from exc


def hollow_key(vid: int) -> bytes:
    """Where the hollow record of version id ``vid`` lives."""
    return HOLLOW_PREFIX + K.pack_u32(vid)


def encode_stub(index: int, offset: int, length: int) -> bytes:
    """The stub stored in place of a value that is byte ``offset`` … ``offset + length`` of data object ``index``."""
    return STUB.pack(index, offset, length)


def decode_stub(raw: bytes, ref: HollowRef, key: bytes) -> tuple[int, int, int]:
    if len(raw) != STUB.size:
        raise StoreCorruptError(f"hollow entry {key!r}: a stub of {len(raw)} bytes, not {STUB.size}")
    index, offset, length = STUB.unpack(raw)
    if index >= len(ref.objects):
        raise StoreCorruptError(f"hollow entry {key!r}: data object {index} of {len(ref.objects)}")
    return index, offset, length


def is_log_key(key: bytes) -> bool:
    """Whether engine key ``key`` is a log entry's (``log_key``: instance, version, u64 sequence last)."""
    return len(key) == _LOG_KEY_LEN and key.startswith(K.LOG_PREFIX)


def stub_version(key: bytes) -> int | None:
    """The version id whose value ``key`` holds, when ``key`` is a data entry or a log entry (else None)."""
    if key[:4] != K.META:
        if key[-1] == K.TOMBSTONE:
            return None
        return int.from_bytes(key[-K.SUFFIX_LEN:-1], "big")
    if is_log_key(key):
        at = len(K.LOG_PREFIX) + 4
        return int.from_bytes(key[at:at + 4], "big")
    return None


class ObjectSource(Protocol):
    """Data objects of one remote: verified (hash), decoded payloads, kept locally once downloaded."""

    def payloads(self, names: Sequence[str]) -> list[bytes]:
        """The inflated payload of each data object (downloads in flight together); typed errors."""
        ...

    def check_value(self, name: str, payload: bytes, offset: int, length: int, key: bytes) -> None:
        """A typed error unless bytes ``offset`` … ``offset + length`` of data object ``name`` are the value of
        engine key ``key`` (the stub came from the remote's key listing, which its data must bear out)."""
        ...


#: ``factory(repository, remote name) -> ObjectSource``.
SourceFactory = Callable[[Any, str], ObjectSource]
_factories: list[SourceFactory] = []


def use_object_source(factory: SourceFactory) -> None:
    """Register how hollow values are downloaded (the remotes do, when imported)."""
    _factories[:] = [factory]


def object_source(repo: Any, remote: str) -> ObjectSource:
    """The registered source for ``remote`` of ``repo`` (importing the remotes first if nobody has)."""
    if not _factories:
        importlib.import_module(SOURCE_MODULE)  # registers itself; a late binding, as the CLI's verbs
    if not _factories:  # pragma: no cover - the remotes always register
        raise UnsupportedError("no source of remote objects is registered; import napari_shardscope.core."
                               "versioned.remotes")
    return _factories[0](repo, remote)


class HollowValues:
    """One repository handle's view of its hollow versions: their records, sources and a payload cache."""

    def __init__(self, repo: Any) -> None:
        self._repo = repo
        self._lock = threading.RLock()
        self._refs: dict[int, HollowRef] = {}
        self._solid: set[int] = set()  # version ids known not hollow (forgotten whenever the DAG moves)
        self._payloads: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._sources: dict[str, ObjectSource] = {}

    def forget(self) -> None:
        """Forget which versions are *not* hollow (new versions may have been adopted hollow)."""
        with self._lock:
            self._solid.clear()

    def ref(self, txn: ReadTxn, vid: int, *, cache: bool = True) -> HollowRef | None:
        """The hollow record of ``vid`` (None: its values are local)."""
        with self._lock:
            hit = self._refs.get(vid)
            if hit is not None or vid in self._solid:
                return hit
        raw = txn.get(hollow_key(vid))
        ref = None if raw is None else HollowRef.decode(raw, vid)
        if cache:
            with self._lock:
                if ref is None:
                    self._solid.add(vid)
                else:
                    self._refs[vid] = ref
        return ref

    def _source(self, remote: str) -> ObjectSource:
        with self._lock:
            src = self._sources.get(remote)
        if src is None:
            src = object_source(self._repo, remote)
            with self._lock:
                self._sources[remote] = src
        return src

    def _cached(self, name: str) -> bytes | None:
        with self._lock:
            hit = self._payloads.get(name)
            if hit is not None:
                self._payloads.move_to_end(name)
            return hit

    def _keep(self, name: str, payload: bytes) -> None:
        with self._lock:
            if name in self._payloads:
                return
            self._payloads[name] = payload
            self._bytes += len(payload)
            while self._bytes > PAYLOAD_CACHE_BYTES and len(self._payloads) > 1:
                _, old = self._payloads.popitem(last=False)
                self._bytes -= len(old)

    def resolve(self, txn: ReadTxn, items: Sequence[tuple[bytes, bytes | None]]) -> list[bytes | None]:
        """The values of ``(engine key, stored value)`` pairs: stubs of hollow versions replaced by their bytes."""
        out: list[bytes | None] = [v for _, v in items]
        wanted: list[tuple[int, str, str, int, int, bytes]] = []  # (position, remote, object, offset, length, key)
        for i, (key, value) in enumerate(items):
            if value is None:
                continue
            vid = stub_version(key)
            if vid is None:
                continue
            ref = self.ref(txn, vid)
            if ref is None:
                continue
            index, offset, length = decode_stub(value, ref, key)
            wanted.append((i, ref.remote, ref.objects[index], offset, length, key))
        if not wanted:
            return out
        have: dict[str, bytes] = {}
        missing: dict[str, list[str]] = {}
        for _, remote, name, *_rest in wanted:
            if name in have:
                continue
            hit = self._cached(name)
            if hit is not None:
                have[name] = hit
            elif name not in missing.setdefault(remote, []):
                missing[remote].append(name)
        for remote, names in missing.items():
            for name, payload in zip(names, self._source(remote).payloads(names), strict=True):
                have[name] = payload
                self._keep(name, payload)
        ref_remote = {i: remote for i, remote, *_rest in wanted}
        for i, _, name, offset, length, key in wanted:
            payload = have[name]
            if offset + length > len(payload):
                raise StoreCorruptError(f"hollow entry {key!r}: bytes {offset}…{offset + length} past the end "
                                        f"of data object {name} ({len(payload)} bytes)")
            self._source(ref_remote[i]).check_value(name, payload, offset, length, key)
            out[i] = payload[offset:offset + length]
        return out


class HollowTxn:
    """An engine transaction that hands back real values where the engine holds hollow versions' stubs."""

    #: Readers that walk many entries to keep a few (a scan at a version) select keys first, then read values.
    defers_values = True

    def __init__(self, txn: Any, values: HollowValues) -> None:
        self._txn = txn
        self._values = values

    @property
    def inner_txn(self) -> Any:
        """The engine's transaction under this one: for records that are never hollow (the DAG's)."""
        return self._txn

    def get(self, key: bytes) -> bytes | None:
        return self._values.resolve(self._txn, [(key, self._txn.get(key))])[0]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        keys = list(keys)
        return self._values.resolve(self._txn, list(zip(keys, self._txn.get_many(keys), strict=True)))

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        batch: list[tuple[bytes, bytes | None]] = []
        for item in self._txn.scan(lo, hi, reverse=reverse):
            batch.append(item)
            if len(batch) >= SCAN_BATCH:
                yield from self._resolved(batch)
                batch = []
        if batch:
            yield from self._resolved(batch)

    def _resolved(self, batch: list[tuple[bytes, bytes | None]]) -> Iterator[tuple[bytes, bytes]]:
        for (key, _), value in zip(batch, self._values.resolve(self._txn, batch), strict=True):
            assert value is not None
            yield key, value

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        return self._txn.scan_keys(lo, hi, reverse=reverse)  # type: ignore[no-any-return]

    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        hit = self._txn.find_last(lo, hi, accept)
        if hit is None:
            return None
        value = self._values.resolve(self._txn, [hit])[0]
        assert value is not None
        return hit[0], value

    def _check_writable(self, key: bytes) -> None:
        vid = stub_version(key)
        if vid is not None and self._values.ref(self._txn, vid, cache=False) is not None:
            raise UnsupportedError(
                f"version id {vid} is hollow (a lazy clone keeps its data on the remote): it cannot be rewritten "
                f"here; clone with --prefetch to migrate or rewrite committed versions")

    def put(self, key: bytes, value: bytes) -> None:
        self._check_writable(key)
        self._txn.put(key, value)

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        # a bulk put writes new keys of an open version; each is checked like put's (a hollow version's
        # keys are refused), then the engine loops natively
        checked: set[int | None] = {None}
        for key, _ in items:
            vid = stub_version(key)
            if vid not in checked:  # one look-up per version written, not per key
                self._check_writable(key)
                checked.add(vid)
        self._txn.put_many(items)

    def delete(self, key: bytes) -> bool:
        self._check_writable(key)
        return bool(self._txn.delete(key))


class HollowEngine:
    """An engine whose transactions are :class:`HollowTxn` (a repository holding hollow versions)."""

    def __init__(self, engine: OrderedKV, values: HollowValues) -> None:
        self.inner = engine
        self.values = values

    @property
    def name(self) -> str:
        return self.inner.name

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        with self.inner.read() as txn:
            yield HollowTxn(txn, self.values)

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        with self.inner.write() as txn:
            yield HollowTxn(txn, self.values)

    def close(self) -> None:
        self.inner.close()


def hollow_summary(txn: ReadTxn) -> tuple[int, dict[str, set[str]]]:
    """How many versions are hollow, and their data objects per remote (``repo verify`` on a lazy clone)."""
    count = 0
    objects: dict[str, set[str]] = {}
    for key, raw in txn.scan(HOLLOW_PREFIX, K.next_prefix(HOLLOW_PREFIX)):
        ref = HollowRef.decode(raw, K.unpack_u32(key[-4:]))
        count += 1
        objects.setdefault(ref.remote, set()).update(ref.objects)
    return count, objects
