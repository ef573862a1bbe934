"""The ordered key-value engine behind the versioned store: one small Protocol, three engines.

DVID's insight (paper §2) is that versioning needs only an *ordered* key-value store with range
scans; everything else (DAG, tombstones, merges) is built above it. Keeping the interface this
small is what lets the store run on LMDB or SQLite (both embedded, both crash-safe, both safe for
several reader processes and one writer) and on a plain in-memory engine for tests, with one
conformance test class that every engine must pass.

Semantics every engine guarantees:

* a read transaction sees one consistent snapshot for its whole life;
* a write transaction sees its own writes; leaving its ``with`` block normally commits it
  atomically and durably (when the engine was opened ``durable``), leaving it by an exception
  discards every change;
* keys and values are ``bytes``; keys order lexicographically by bytes; ranges are ``[lo, hi)``
  with ``hi=None`` meaning "to the end".

Engines do not serialise writers across processes themselves beyond what their library does; the
repository holds an inter-process writer lock with a timeout around every write transaction.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from napari_shardscope.core.errors import ArgumentError

#: Engine names accepted by :func:`open_engine`, default first (see :mod:`bench.versioned`).
ENGINE_NAMES: tuple[str, ...] = ("lmdb", "sqlite", "memory")


class ReadTxn(Protocol):
    """Reads from one consistent snapshot."""

    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or None."""
        ...

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of several keys, in order (engines batch the lookups)."""
        ...

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """Key/value pairs with ``lo <= key < hi``, ascending (descending when ``reverse``)."""
        ...

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        """Keys only, as :meth:`scan`: version selection looks at keys before touching values."""
        ...

    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        """The greatest key in ``[lo, hi)`` that ``accept`` takes, with its value (None: no such key).

        This is the versioned read: walk one key's entries newest first, stop at the first one of an
        ancestor. Engines do it natively so only the chosen value is fetched, once.
        """
        ...


class WriteTxn(ReadTxn, Protocol):
    """A read transaction that can also change the store; atomic as a whole."""

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key`` (replacing any value)."""
        ...

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; True when it existed."""
        ...


class OrderedKV(Protocol):
    """An embedded ordered key-value engine."""

    @property
    def name(self) -> str:
        """Engine name, one of :data:`ENGINE_NAMES`."""
        ...

    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read transaction (snapshot) for the ``with`` block."""
        ...

    def write(self) -> AbstractContextManager[WriteTxn]:
        """A write transaction: commits on normal exit, rolls back on an exception."""
        ...

    def close(self) -> None:
        """Release files and handles; the engine is unusable afterwards."""
        ...


def check_range(lo: bytes, hi: bytes | None) -> None:
    """Reject argument types early: a ``str`` key would otherwise sort or hash silently wrong."""
    if not isinstance(lo, bytes) or (hi is not None and not isinstance(hi, bytes)):
        raise ArgumentError(f"range bounds must be bytes, got {type(lo).__name__}, {type(hi).__name__}")


def check_key(key: bytes) -> None:
    """Keys are non-empty bytes (empty keys are refused by LMDB, so by all engines alike)."""
    if not isinstance(key, bytes) or not key:
        raise ArgumentError(f"keys must be non-empty bytes, got {key!r}")


class _MemorySnapshot:
    """An immutable state of the memory engine: a dict and its sorted keys."""

    __slots__ = ("data", "keys")

    def __init__(self, data: dict[bytes, bytes], keys: list[bytes]) -> None:
        self.data = data
        self.keys = keys

    def span(self, lo: bytes, hi: bytes | None) -> list[bytes]:
        i = bisect.bisect_left(self.keys, lo)
        j = len(self.keys) if hi is None else bisect.bisect_left(self.keys, hi)
        return self.keys[i:j]


class _MemoryRead:
    def __init__(self, snap: _MemorySnapshot) -> None:
        self._snap = snap

    def get(self, key: bytes) -> bytes | None:
        return self._snap.data.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.get(k) for k in keys]

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        check_range(lo, hi)
        span = self._span(lo, hi)
        return reversed(span) if reverse else iter(span)

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        for key in self.scan_keys(lo, hi, reverse=reverse):
            value = self.get(key)
            assert value is not None
            yield key, value

    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        for key in self.scan_keys(lo, hi, reverse=True):
            if accept(key):
                value = self.get(key)
                assert value is not None
                return key, value
        return None

    def _span(self, lo: bytes, hi: bytes | None) -> list[bytes]:
        return self._snap.span(lo, hi)


class _MemoryWrite(_MemoryRead):
    """Buffers changes over a snapshot; the engine applies them at commit."""

    def __init__(self, snap: _MemorySnapshot) -> None:
        super().__init__(snap)
        self.pending: dict[bytes, bytes | None] = {}

    def get(self, key: bytes) -> bytes | None:
        if key in self.pending:
            return self.pending[key]
        return self._snap.data.get(key)

    def _span(self, lo: bytes, hi: bytes | None) -> list[bytes]:
        merged = set(self._snap.span(lo, hi))
        for key, value in self.pending.items():
            if key >= lo and (hi is None or key < hi):
                if value is None:
                    merged.discard(key)
                else:
                    merged.add(key)
        return sorted(merged)

    def put(self, key: bytes, value: bytes) -> None:
        check_key(key)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
        self.pending[key] = bytes(value)

    def delete(self, key: bytes) -> bool:
        check_key(key)
        existed = self.get(key) is not None
        self.pending[key] = None
        return existed


class MemoryEngine:
    """An in-memory engine with snapshot reads and atomic writes, for tests and scratch repositories.

    Each commit builds a new immutable snapshot (copying the dict), so readers never see a partial
    write. That costs O(store size) per commit, which is fine for the small stores tests use.
    """

    def __init__(self) -> None:
        self._snap = _MemorySnapshot({}, [])
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "memory"

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        yield _MemoryRead(self._snap)

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        with self._lock:
            txn = _MemoryWrite(self._snap)
            yield txn
            if txn.pending:
                data = dict(self._snap.data)
                for key, value in txn.pending.items():
                    if value is None:
                        data.pop(key, None)
                    else:
                        data[key] = value
                self._snap = _MemorySnapshot(data, sorted(data))

    def close(self) -> None:
        pass


def open_engine(name: str, directory: Path | None, *, create: bool, durable: bool = True) -> OrderedKV:
    """Open (or create) the engine ``name`` storing its files in ``directory``.

    Parameters
    ----------
    name
        One of :data:`ENGINE_NAMES`.
    directory
        The repository directory (ignored by the memory engine).
    create
        Create the engine's files; when False they must exist (a missing file is never created
        silently, so a typo in a path is an error rather than a new empty store).
    durable
        Flush to disk at every commit. ``False`` trades crash durability of the last commits (not
        consistency) for bulk-ingest speed.
    """
    if name == "memory":
        return MemoryEngine()
    if directory is None:
        raise ArgumentError(f"the {name} engine needs a directory")
    if name == "lmdb":
        from napari_shardscope.core.versioned.lmdb_engine import LmdbEngine

        return LmdbEngine(directory, create=create, durable=durable)
    if name == "sqlite":
        from napari_shardscope.core.versioned.sqlite_engine import SqliteEngine

        return SqliteEngine(directory, create=create, durable=durable)
    raise ArgumentError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")
