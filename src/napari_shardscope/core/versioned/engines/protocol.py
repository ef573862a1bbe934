"""The ordered key-value protocol every storage engine of the versioned store implements.

DVID's insight (paper §2) is that versioning needs only an *ordered* key-value store with range
scans; everything else (DAG, tombstones, merges) is built above it. Keeping the interface this
small is what lets the store run on LMDB or SQLite (both embedded, both crash-safe, both safe for
several reader processes and one writer) and on a plain in-memory engine for tests, with one
conformance test class that every engine must pass. This module is the whole contract: engines
(:mod:`.memory`, :mod:`.lmdb`, :mod:`.sqlite`) import it, the store above imports only it and
:func:`~napari_shardscope.core.versioned.engines.registry.open_engine`.

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

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import Protocol

from napari_shardscope.core.errors import ArgumentError


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

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Store many pairs in one call (bulk imports: the engine loops natively, ascending keys fastest)."""
        ...


class OrderedKV(Protocol):
    """An embedded ordered key-value engine."""

    @property
    def name(self) -> str:
        """Engine name, one of :data:`~napari_shardscope.core.versioned.engines.registry.ENGINE_NAMES`."""
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


def check_items(items: Sequence[tuple[bytes, bytes]]) -> None:
    """:func:`check_key` and a bytes value for every pair of a bulk put (one pass, no engine call)."""
    if not items:
        return
    # itemgetter, not zip(*items): unpacking 10⁵ pairs as arguments was most of a bulk add's time
    keys = list(map(itemgetter(0), items))
    values = list(map(itemgetter(1), items))
    if not (set(map(type, keys)) == {bytes} and all(keys) and set(map(type, values)) == {bytes}):
        bad = next(p for p in items if not (type(p[0]) is bytes and p[0] and type(p[1]) is bytes))
        check_key(bad[0])
        raise ArgumentError(f"values must be bytes, got {type(bad[1]).__name__} (key {bad[0]!r})")


def check_key(key: bytes) -> None:
    """Keys are non-empty bytes (empty keys are refused by LMDB, so by all engines alike)."""
    if not isinstance(key, bytes) or not key:
        raise ArgumentError(f"keys must be non-empty bytes, got {key!r}")


def closed_error(where: object) -> ArgumentError:
    """What a read or write of a closed engine raises, also one that was in progress when it closed.

    Why typed: a repository is closed by one thread (a disconnect) while another may still read
    through it (a mesh load, napari drawing a layer); the engines' own errors there (LMDB's
    "closed/deleted/dropped object", SQLite's "closed database") name nothing a caller can act on.
    """
    return ArgumentError(f"{where}: the repository is closed")
