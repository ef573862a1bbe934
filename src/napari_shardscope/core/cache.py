"""A small thread-safe LRU map for decoded indexes.

Shard indexes and minishard indexes are tiny and re-read constantly by viewers and lookups; every
format reader keeps its decoded ones in one of these.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """Least-recently-used map of at most ``capacity`` entries, safe to share between threads.

    With ``weigh`` and ``max_weight``, the entries' total weight (say, the rows of the tables kept)
    is bounded too, so a cache of per-minishard tables stays bounded when a hostile or merely huge
    dataset has minishards of millions of chunks; the entry just stored is always kept.
    """

    def __init__(self, capacity: int, *, weigh: Callable[[V], int] | None = None,
                 max_weight: int | None = None) -> None:
        self.capacity = max(1, capacity)
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._weigh = weigh
        self._max_weight = max_weight
        self._weights: dict[K, int] = {}
        self._total = 0

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The cached value of ``key``, or ``load()`` stored and returned (the load runs unlocked)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = load()
        with self._lock:
            self._store(key, value)
        return value

    def get(self, key: K) -> V | None:
        """The cached value of ``key`` (``None`` when absent), marked as recently used."""
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            return self._data[key]

    def get_many(self, keys: Sequence[K]) -> list[V | None]:
        """:meth:`get` of each key under one lock (a query asks for hundreds at once)."""
        with self._lock:
            data = self._data
            out = [data.get(k) for k in keys]
            for k, v in zip(keys, out, strict=True):
                if v is not None:
                    data.move_to_end(k)
            return out

    def put_many(self, items: Iterable[tuple[K, V]]) -> None:
        """:meth:`put` of each item under one lock; a key already kept keeps its value."""
        with self._lock:
            for k, v in items:
                if k not in self._data:
                    self._store(k, v)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, evicting the least recently used entries over capacity."""
        with self._lock:
            self._store(key, value)

    def contains(self, key: K) -> bool:
        """Whether ``key`` is cached (without touching its recency)."""
        with self._lock:
            return key in self._data

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self._total = 0

    @property
    def total_weight(self) -> int:
        """The summed weight of the entries kept (0 without ``weigh``)."""
        with self._lock:
            return self._total

    def _store(self, key: K, value: V) -> None:
        """Insert under the lock, then evict the oldest entries over the count or the weight bound."""
        self._total -= self._weights.pop(key, 0)
        self._data[key] = value
        self._data.move_to_end(key)
        if self._weigh is not None:
            weight = max(0, int(self._weigh(value)))
            self._weights[key] = weight
            self._total += weight
        limit = self._max_weight
        while len(self._data) > self.capacity or (limit is not None and self._total > limit and len(self._data) > 1):
            old, _ = self._data.popitem(last=False)
            self._total -= self._weights.pop(old, 0)
