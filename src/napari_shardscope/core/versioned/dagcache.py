"""What one repository handle keeps of the DAG in memory, and the journal that tells it what to forget.

The DAG lives in the store as records read on demand (:mod:`.dagindex`); a handle keeps bounded
caches of what it read (:class:`DagIndex`: recent versions, UUID → id, a few ancestor sets), valid
for one store *generation*. Other handles write: a commit rewrites a version's record, and the
journal record of its generation names it (:func:`read_journal`), so a handle catching up forgets
only that, never the whole DAG. Split out of :mod:`.dagindex` (issue 30), unchanged: the cache and
the journal are the handle's memory, the records module is the store's.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TypeVar

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.ancestry import AncestorSet
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.engines.protocol import ReadTxn
from napari_shardscope.core.versioned.errors import StoreCorruptError

_KT = TypeVar("_KT")
_VT = TypeVar("_VT")
#: Versions a handle keeps decoded (a few MB at most).
VERSION_CACHE = 4096
#: Ancestor sets a handle keeps (each one byte per version id of the history: 100 KB at 10⁵).
ANCESTOR_CACHE = 16


class DagIndex:
    """What one repository handle keeps of the DAG in memory: bounded caches and their generation.

    Thread-safe. ``generation`` is the store's generation the caches describe; :meth:`advance` moves
    it forward, forgetting the versions the journal names (or everything, after a format upgrade).
    """

    def __init__(self, *, versions: int = VERSION_CACHE, ancestors: int = ANCESTOR_CACHE) -> None:
        self._lock = threading.Lock()
        self.generation = -1
        self._versions: OrderedDict[int, Version] = OrderedDict()
        self._vids: OrderedDict[str, int] = OrderedDict()
        self._ancestors: OrderedDict[int, AncestorSet] = OrderedDict()
        self._limits = (versions, ancestors)

    # -- caches -----------------------------------------------------------------------------------

    @staticmethod
    def _get(cache: OrderedDict[_KT, _VT], key: _KT) -> _VT | None:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
        return hit

    def cached_version(self, vid: int) -> Version | None:
        with self._lock:
            return self._get(self._versions, vid)

    def cached_versions(self, vids: list[int]) -> list[Version | None]:
        """:meth:`cached_version` of each id, in order, under one acquisition of the lock.

        Why: an ancestry asks for every version of a history at once; a lock and a call per id were
        most of the cost of walking a history the cache holds.
        """
        with self._lock:
            return [self._get(self._versions, vid) for vid in vids]

    def cached_vid(self, uuid: str) -> int | None:
        with self._lock:
            return self._get(self._vids, uuid)

    def cached_ancestors(self, vid: int) -> AncestorSet | None:
        with self._lock:
            return self._get(self._ancestors, vid)

    def remember(self, generation: int, *, version: Version | None = None,
                 ancestors: tuple[int, AncestorSet] | None = None) -> None:
        """Cache what a reader at ``generation`` read, if that is the generation the caches describe."""
        with self._lock:
            if generation != self.generation:
                return
            if version is not None:
                self._versions[version.vid] = version
                self._versions.move_to_end(version.vid)
                self._vids[version.uuid] = version.vid
                self._vids.move_to_end(version.uuid)
                while len(self._versions) > self._limits[0]:
                    self._versions.popitem(last=False)
                while len(self._vids) > self._limits[0]:
                    self._vids.popitem(last=False)
            if ancestors is not None:
                self._ancestors[ancestors[0]] = ancestors[1]
                self._ancestors.move_to_end(ancestors[0])
                while len(self._ancestors) > self._limits[1]:
                    self._ancestors.popitem(last=False)

    def advance(self, generation: int, changed: set[int] | None) -> None:
        """The store reached ``generation``; ``changed`` versions were rewritten (None: forget all)."""
        with self._lock:
            if generation <= self.generation:
                return
            if changed is None:
                self._versions.clear()
            else:
                for vid in changed:
                    self._versions.pop(vid, None)
            self.generation = generation

    def reset(self) -> None:
        """Forget everything (the store was rebuilt, e.g. upgraded)."""
        with self._lock:
            self._versions.clear()
            self._vids.clear()
            self._ancestors.clear()
            self.generation = -1


#: A journal record meaning "forget everything" (written by a format upgrade, which rebuilds the records).
JOURNAL_ALL = b"*"


def read_journal(txn: ReadTxn, after: int, upto: int) -> set[int] | None:
    """Ids of the versions rewritten by generations ``after+1 .. upto`` (None: forget everything).

    Only generations that rewrote versions have a record (a new version rewrites none), so the
    scan costs the commits since ``after``, not the writes.
    """
    changed: set[int] = set()
    hi = K.journal_key(upto + 1) if upto + 1 < 2**64 else K.next_prefix(K.JOURNAL_PREFIX)
    for key, raw in txn.scan(K.journal_key(after + 1), hi):
        if raw == JOURNAL_ALL:
            return None
        try:
            changed.update(int(v) for v in json.loads(raw))
        except (ValueError, TypeError) as exc:
            raise StoreCorruptError(f"unreadable journal record {key!r}: {exc}") from exc
    return changed
