"""What a labelmap holds in memory for one version: a cache of the records it read, never a replay.

A version's body map is records in the store (:mod:`.records`), so a version's state is only what
was read of them: a bounded cache of records (key → value or absence), a memo of union-find roots,
the overlay (how many blocks each scale has, fetched on demand) and the lazy arrays handed out.
Opening a version reads its freshness stamp and its overlay counts, nothing else.

Committed versions never change, so their caches are kept (an LRU of states). An open version's
cache is updated with exactly the keys each edit writes; when another process (or another handle)
edited the version — a different stamp in the store, noticed on the next look-up, or by any read
of records — the cache is dropped and refilled on demand.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from napari_shardscope.core.labelmap.body_cache import BodyCache
from napari_shardscope.core.labelmap.catch_up import CaughtUp, is_cached_record
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.explicit_pages import ExplicitPages
from napari_shardscope.core.labelmap.keys import BLOCK_PREFIX, OVERLAY_COUNT_PREFIX, overlay_count_key
from napari_shardscope.core.labelmap.reading import Fetch, Overlay
from napari_shardscope.core.labelmap.records import STAMP_KEY, decode_u64
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.volumes.lazy import LazyArray

__all__ = ["STAMP_KEY", "EditRecords", "RecordCache", "VersionState", "decode_stamp", "encode_stamp",
           "overlay_counts"]

_U64 = struct.Struct(">Q")
#: Bytes of records one version's cache keeps (values and keys; absent keys count a little).
RECORD_CACHE_BYTES = 24 << 20
Load = Callable[[list[bytes]], list[bytes | None]]


def encode_stamp(mutation_id: int) -> bytes:
    return _U64.pack(mutation_id)


def decode_stamp(raw: bytes | None) -> int:
    return 0 if raw is None or len(raw) != 8 else int(_U64.unpack(raw)[0])


def overlay_counts(values: Sequence[bytes | None]) -> dict[int, int]:
    """The overlay block count per scale from the ``o`` records (in scale order)."""
    return {s: 0 if raw is None else decode_u64(raw, key=overlay_count_key(s)) for s, raw in enumerate(values)}


class RecordCache:
    """A version's records as read: key → value (``None``: absent), LRU bounded in bytes; thread-safe."""

    def __init__(self, load: Load, budget: int = RECORD_CACHE_BYTES) -> None:
        self._load = load
        self._budget = budget
        self._data: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.RLock()
        self._generation = 0
        #: Keys held that are not of a kind a catch-up keeps (:meth:`forget` drops them all).
        self._others: set[bytes] = set()

    def get_many(self, keys: Sequence[bytes], load: Load | None = None) -> list[bytes | None]:
        """Values of ``keys``; misses read by ``load`` (default: the cache's own loader) and kept."""
        with self._lock:  # one dict probe per key (a query asks for hundreds of pages at once)
            generation = self._generation
            data = self._data
            found = [data.get(k, _MISS) for k in keys]
            touch = data.move_to_end
            for k, v in zip(keys, found, strict=True):
                if v is not _MISS:
                    touch(k)
        out: list[bytes | None] = found  # the misses are filled below
        missing = [i for i, v in enumerate(found) if v is _MISS]
        if missing:
            want = list(dict.fromkeys(keys[i] for i in missing))
            got = dict(zip(want, (load or self._load)(want), strict=True))
            with self._lock:
                if self._generation == generation:  # not dropped meanwhile: keep what was read
                    for k, v in got.items():
                        self._store(k, v)
            for i in missing:
                out[i] = got[keys[i]]
        return out

    def update(self, items: Mapping[bytes, bytes | None]) -> None:
        """Take the values an edit wrote (so the cache agrees with the store after it)."""
        with self._lock:
            for k, v in items.items():
                self._store(k, v)

    def forget(self, keys: Iterable[bytes]) -> None:
        """Drop ``keys`` and every record not of a kind :func:`~.catch_up.is_cached_record` accepts (another
        writer changed them). Like :meth:`clear`, a read in flight (started before) keeps none of what it read."""
        with self._lock:
            for k in (*keys, *self._others):
                if k in self._data:
                    self._bytes -= _weight(k, self._data.pop(k))
            self._others.clear()
            self._generation += 1

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def keys(self) -> list[bytes]:
        """The keys held now (tests, diagnostics)."""
        with self._lock:
            return list(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._others.clear()
            self._bytes = 0
            self._generation += 1

    def _store(self, key: bytes, value: bytes | None) -> None:
        if key in self._data:
            self._bytes -= _weight(key, self._data.pop(key))
        self._data[key] = value
        self._bytes += _weight(key, value)
        if not is_cached_record(key):
            self._others.add(key)
        while self._bytes > self._budget and len(self._data) > 1:
            k, v = self._data.popitem(last=False)
            self._bytes -= _weight(k, v)
            self._others.discard(k)


_MISS: Any = object()


def _weight(key: bytes, value: bytes | None) -> int:
    return len(key) + (0 if value is None else len(value)) + 48


class EditRecords:
    """A state's records as an edit reads them: the cache first, misses through the edit's own transaction.

    Inside the edit the stamp was checked and the writer lock is held, so what the transaction reads
    is the version as the cache knows it: misses are kept in the cache too.
    """

    def __init__(self, cache: RecordCache, read: Load) -> None:
        self._cache = cache
        self._read = read

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self._cache.get_many(keys, self._read)


class VersionState:
    """The in-memory state of one version (see the module docstring); changes happen under :attr:`lock`.

    Readers (napari's slicing threads through the bodies transform) take the lock too, so a tile
    is never mapped half through an edit.
    """

    def __init__(self, version: Version, stamp: int, load: Load, config: LabelmapConfig, fetch: Fetch,
                 counts: Mapping[int, int], log_length: int | None = None) -> None:
        self.version = version
        #: The store's freshness stamp this state reflects (id of the last mutation visible here).
        self.stamp = stamp
        #: The version's own log length at :attr:`stamp` (None: unknown), where catching up starts.
        self.log_length = log_length
        self.config = config
        self.fetch = fetch
        self.records = RecordCache(load)
        #: The pages of explicit assignments the version may hold (scanned on first use).
        self.pages = ExplicitPages()
        #: The body of each supervoxel resolved here, kept across edits that do not touch it.
        self.bodies = BodyCache()
        #: Union-find node → a known ancestor (only extended; cleared when a parent link is removed).
        self.memo: dict[int, int] = {}
        self.overlay = Overlay(config, counts, fetch)
        self.lock = threading.RLock()
        #: Lazy arrays per (overlay snapshot, scale, kind) handed out for this state.
        self.arrays: dict[tuple[int, int, str], LazyArray] = {}
        #: True while an edit of this object plans on the state (it holds the writer lock: loads need not
        #: look for other writers).
        self.editing = False

    def refresh(self, stamp: int, counts: Mapping[int, int], log_length: int | None = None) -> None:
        """Someone else edited the version: forget what was read (arrays handed out follow)."""
        with self.lock:
            self.stamp = stamp
            self.log_length = log_length
            self.records.clear()
            self.pages.forget()
            self.bodies.clear()
            self.memo.clear()
            if counts != self.overlay.counts or any(counts.values()):
                self.overlay = Overlay(self.config, counts, self.fetch)
                self.arrays.clear()

    def catch_up(self, stamp: int, counts: Mapping[int, int], caught: CaughtUp,
                 fresh: Mapping[bytes, bytes | None] | None = None) -> None:
        """Someone else edited the version and ``caught`` names every record they wrote: forget only those
        (``fresh``: some of them as the store holds them at ``stamp``, kept instead).

        The root memo goes when a parent link was removed or moved; the overlay (and the arrays handed
        out) when a block or a block count was written, as after an edit of this state's own.
        """
        with self.lock:
            self.stamp = stamp
            self.log_length = caught.log_length
            self.records.forget(caught.keys)
            if fresh:
                self.records.update(fresh)
            self.pages.wrote(caught.keys, exact=False)
            self.bodies.wrote(caught.keys, unlinked=caught.unlinked)
            if caught.unlinked:
                self.memo.clear()
            if caught.blocks or counts != self.overlay.counts:
                self.overlay = Overlay(self.config, counts, self.fetch)
                self.arrays.clear()

    def written(self, keys: Mapping[bytes, bytes | None], stamp: int, *, unlinked: bool,
                log_length: int | None = None) -> bool:
        """Bring the state up to date after an edit wrote ``keys`` (the version's log now ``log_length``
        entries long); True when overlay blocks changed."""
        with self.lock:
            self.records.update(keys)
            self.pages.wrote(keys, exact=True)
            self.bodies.wrote(keys, unlinked=unlinked)
            self.stamp = stamp
            self.log_length = log_length
            if unlinked:
                self.memo.clear()
            if not any(k[:1] == BLOCK_PREFIX for k in keys):
                return False
            counts = dict(self.overlay.counts)
            for k, v in keys.items():
                if k[:1] == OVERLAY_COUNT_PREFIX and len(k) == 2:
                    counts[k[1]] = 0 if v is None else decode_u64(v, key=k)
            self.overlay = Overlay(self.config, counts, self.fetch)
            self.arrays.clear()
            return True
