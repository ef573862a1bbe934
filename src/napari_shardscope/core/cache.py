"""A small thread-safe LRU map for decoded indexes.

Shard indexes and minishard indexes are tiny and re-read constantly by viewers and lookups; every
format reader keeps its decoded ones in one of these.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """Least-recently-used map of at most ``capacity`` entries, safe to share between threads."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The cached value of ``key``, or ``load()`` stored and returned (the load runs unlocked)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = load()
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)
        return value

    def get(self, key: K) -> V | None:
        """The cached value of ``key`` (``None`` when absent), marked as recently used."""
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, evicting the least recently used entries over capacity."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def contains(self, key: K) -> bool:
        """Whether ``key`` is cached (without touching its recency)."""
        with self._lock:
            return key in self._data

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
