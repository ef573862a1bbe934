"""Which pages of explicit assignments a version state holds, so a look-up skips the pages it does not.

Explicit assignments (supervoxel → body after a cleave, retired after a split) are stored in pages of
2¹² supervoxel ids (``e`` records, :mod:`.records`), and most pages hold none. A query resolving a few
hundred partner supervoxels used to read one record per page they fall in (hundreds of absent
records per ``connections(body)``, a third of its time); with the set of pages present (one scan of
the version's ``e`` keys, once per state) the absent ones cost nothing.

The set is a superset: pages another writer's mutation wrote are added without reading whether they
still hold rows (a look-up of such a page reads the record, which is right either way); pages an
edit of this state deleted are dropped. A version with more pages than :data:`MAX_PAGES` is not
tracked (every page is read, as before).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.records import EXPLICIT_PREFIX, node_of_key
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.view import VersionView

U64 = npt.NDArray[np.uint64]
#: Pages tracked at most per version state (a sorted uint64 array: 512 KiB).
MAX_PAGES = 1 << 16


def scan_pages(view: VersionView, instance: Instance) -> U64 | None:
    """The pages with an ``e`` record at ``view``'s version, sorted (None: more than :data:`MAX_PAGES`)."""
    found: list[int] = []
    for k in view.keys(instance, prefix=EXPLICIT_PREFIX):
        if len(k) == 9:
            found.append(node_of_key(k))
            if len(found) > MAX_PAGES:
                return None
    return np.asarray(sorted(found), dtype=np.uint64)


class ExplicitPages:
    """The pages a version state may hold (see the module docstring); thread-safe.

    ``known``: None until scanned (or after the state forgot what it read), the sorted pages after.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.known: U64 | None = None
        self.untracked = False  # too many pages: never scanned again for this state
        self._generation = 0  # moved by every write and forget: a scan made before is not taken

    def install(self, pages: U64 | None, generation: int) -> None:
        """Take a scan made at ``generation`` (:attr:`generation` then), unless the state moved on since."""
        with self._lock:
            if generation != self._generation:
                return
            if pages is None:
                self.untracked = True
            else:
                self.known = pages

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def forget(self) -> None:
        """Another writer changed the version in unknown ways: scan again when asked."""
        with self._lock:
            self.known = None
            self.untracked = False
            self._generation += 1

    def wrote(self, keys: Mapping[bytes, bytes | None] | Iterable[bytes], *, exact: bool) -> None:
        """Records written: ``exact`` (this state's own edit, values known) adds present pages and drops
        deleted ones; otherwise (another writer's, values not read) every written page is added."""
        values = keys if isinstance(keys, Mapping) else None
        add: list[int] = []
        drop: list[int] = []
        for k in keys:
            if k[:1] == EXPLICIT_PREFIX and len(k) == 9:
                page = node_of_key(k)
                (drop if exact and values is not None and values[k] is None else add).append(page)
        with self._lock:
            self._generation += 1
            if self.known is None or not (add or drop):
                return
            known = self.known
            if add:
                known = np.union1d(known, np.asarray(add, dtype=np.uint64)).astype(np.uint64)
            if drop:
                known = np.setdiff1d(known, np.asarray(drop, dtype=np.uint64)).astype(np.uint64)
            self.known = known


__all__ = ["MAX_PAGES", "ExplicitPages", "scan_pages"]
