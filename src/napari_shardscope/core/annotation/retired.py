"""Supervoxels a split retired at a version, kept incrementally per labelmap version.

Annotations (and a base's synapse index) are filed under the supervoxel under their point when they
were written. A supervoxel split retires a supervoxel; undoing the split brings it back and retires
the two it made. Every query by body must read the annotations filed under supervoxels that no
longer exist at the version (their body is read at their point instead), so it needs this set.

Why incremental: the set used to be derived from the whole mutation log of the version's ancestry
once per labelmap *state*, and a merge or an undo is a new state — so the first query after every
edit read and parsed the whole log (610 log records per 20 edits in ``bench/connectome.py``;
10⁵ records after 10⁵ edits). The log is append-only (an undo appends its inverse) and the
ancestors' logs are committed, so the candidates (every supervoxel a split names) of a version are
read once from its ancestry and then only from the version's own new log records; which of them
no longer exist is one vectorised look-up per labelmap state.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.mutations import Mutation

U64 = npt.NDArray[np.uint64]
T = TypeVar("T")
#: States of versions whose derived tables are kept per instance (each cache below).
STALE_CACHE = 16


def cached_entry(lock: threading.Lock, caches: weakref.WeakKeyDictionary[Any, OrderedDict[Any, T]], owner: Any,
                 gen: tuple[Any, ...]) -> tuple[OrderedDict[Any, T], T | None]:
    """The per-owner cache of one state's derived table, and its entry for ``gen`` (most recent now)."""
    with lock:
        cache = caches.setdefault(owner, OrderedDict())
        hit = cache.get(gen)
        if hit is not None:
            cache.move_to_end(gen)
        return cache, hit


def keep_entry(lock: threading.Lock, cache: OrderedDict[Any, T], gen: tuple[Any, ...], value: T) -> T:
    """Store ``value`` for ``gen``, dropping the oldest states beyond :data:`STALE_CACHE`."""
    with lock:
        cache[gen] = value
        while len(cache) > STALE_CACHE:
            cache.popitem(last=False)
    return value


@dataclass
class _Candidates:
    """Supervoxels the splits of a labelmap version's ancestry name, and how much of its own log was read."""

    own_read: int
    svs: set[int] = field(default_factory=set)


def _named_by_splits(m: Mutation, into: set[int]) -> None:
    d = m.delta
    if d.retired:
        into.update(int(sv) for sv, _old, _new in d.retired)
        into.update(int(sv) for sv, _old, _new in d.explicit)


_cand_lock = threading.Lock()
_candidates: weakref.WeakKeyDictionary[Any, OrderedDict[str, _Candidates]] = weakref.WeakKeyDictionary()
#: Labelmap versions whose split candidates are kept per labelmap (the least recently asked dropped first).
CANDIDATE_VERSIONS = 64
_gone_lock = threading.Lock()
_gone: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[Any, ...], U64]] = weakref.WeakKeyDictionary()


def split_candidates(lm: Any, uuid: str) -> U64:
    """Every supervoxel a split in version ``uuid``'s ancestry named (retired or created), sorted.

    The ancestry's log is read once per version and process; later calls read only the version's
    own log records appended since (direct reads, no scan).
    """
    inst = lm.instance
    with lm.repo.read(uuid) as view:
        length = view.log_length(inst)
        with _cand_lock:
            entry = _candidates.setdefault(lm, OrderedDict()).get(uuid)
        if entry is None or length < entry.own_read:  # first time (or a log rewritten by a migration)
            entry = _Candidates(length)
            for e in view.read_log(inst):
                _named_by_splits(Mutation.from_bytes(e.data, key=f"mutation log of version {e.version}"), entry.svs)
        elif length > entry.own_read:
            vid = lm.repo.version(uuid).vid
            fresh = _Candidates(length, set(entry.svs))
            for seq in range(entry.own_read, length):
                data = view.log_entry(inst, vid, seq)
                if data is not None:
                    _named_by_splits(Mutation.from_bytes(data, key=f"mutation log of version {uuid}"), fresh.svs)
            entry = fresh
    with _cand_lock:
        per = _candidates.setdefault(lm, OrderedDict())
        per[uuid] = entry
        per.move_to_end(uuid)
        while len(per) > CANDIDATE_VERSIONS:
            per.popitem(last=False)
    return np.fromiter(sorted(entry.svs), dtype=np.uint64, count=len(entry.svs))


def retired_supervoxels(r: Any) -> U64:
    """Supervoxels a split in the version's ancestry named and that no longer exist here (``r``: a Resolver).

    A split retires its supervoxel and creates two; undoing it brings the old one back and retires
    the two new ones, under which annotations added after the split are filed. So every supervoxel
    a split names (retired or created) is a candidate; those that exist are not. Kept per labelmap state.
    """
    gen = (r.lmv.uuid, r.state.stamp)
    cache, hit = cached_entry(_gone_lock, _gone, r.lm, gen)
    if hit is not None:
        return hit
    cand = split_candidates(r.lm, r.lmv.uuid)
    gone = np.asarray(cand[~r.lm.exists(r.state, cand)] if cand.size else cand, dtype=np.uint64)
    return keep_entry(_gone_lock, cache, gen, gone)


__all__ = ["STALE_CACHE", "cached_entry", "keep_entry", "retired_supervoxels", "split_candidates"]
