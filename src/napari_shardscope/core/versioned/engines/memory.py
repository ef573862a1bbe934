"""The in-memory engine: snapshot reads and atomic writes over a dict, for tests and scratch repositories.

It holds the same guarantees as the file engines (see :mod:`.protocol`) so the conformance tests
and every repository test run on it too, without touching the disk.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.engines.protocol import (
    ReadTxn,
    WriteTxn,
    check_items,
    check_key,
    check_range,
    closed_error,
)


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

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        check_items(items)
        self.pending.update(items)

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
        self._closed = False

    @property
    def name(self) -> str:
        return "memory"

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        if self._closed:
            raise closed_error("memory")
        yield _MemoryRead(self._snap)

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        if self._closed:
            raise closed_error("memory")
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
        self._closed = True  # like the others: no read or write after close (a snapshot being read stays)
