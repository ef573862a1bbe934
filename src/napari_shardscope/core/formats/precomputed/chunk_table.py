"""A vectorised hash table over the entries of several minishard indexes: locate millions of ids at once.

Why: resolving ids group by group (sort the ids by (shard, minishard), then ``searchsorted`` in
each minishard) spends its time in a million-element ``argsort`` and in one Python iteration per
minishard. Here every entry of the minishards involved goes into one open-addressing table keyed
by chunk id, and all queries probe it together: each probe round is a few numpy gathers over the
queries still unresolved, and at a load factor of at most 1/4 nearly all resolve in the first
round. Lookups cost O(ids) with no sort at all.

An id is only found in the minishard it hashes to, as a per-minishard lookup would find it: an
entry a damaged index lists under another minishard is left out of the table (``group_of`` says
where each id belongs). When a minishard lists an id twice, the first entry in storage order wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.formats.precomputed.shard_index import MinishardIndex

U64 = npt.NDArray[np.uint64]
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing multiplier (2**64 / golden ratio)


class ChunkTable:
    """Entries of the minishard indexes ``indexes`` (listed under ``groups``), looked up in bulk by :meth:`lookup`.

    ``group_of`` maps chunk ids to the group (``shard << minishard_bits | minishard``) they hash to.
    """

    def __init__(self, groups: Sequence[int], indexes: Sequence[MinishardIndex],
                 group_of: Callable[[U64], U64]) -> None:
        sizes = [len(ix) for ix in indexes]
        empty = np.zeros(0, np.uint64)
        ids = np.concatenate([ix.chunk_ids for ix in indexes]) if sum(sizes) else empty
        starts = np.concatenate([ix.starts for ix in indexes]) if sum(sizes) else empty
        ends = np.concatenate([ix.ends for ix in indexes]) if sum(sizes) else empty
        listed = np.repeat(np.asarray(groups, dtype=np.uint64), sizes)
        home = group_of(ids) == listed if ids.size else np.zeros(0, dtype=bool)
        self.ids: U64 = ids[home]
        zero = np.zeros(1, dtype=np.uint64)
        # a zero sentinel after the entries: index -1 (not found) reads it
        self._starts = np.concatenate([starts[home], zero])
        self._ends = np.concatenate([ends[home], zero])
        self.bits = max(4, int(self.ids.size * 4 - 1).bit_length())  # table of 2**bits >= 4 x entries
        self.mask = (1 << self.bits) - 1
        self._insert()

    def _home(self, ids: U64) -> npt.NDArray[np.intp]:
        mixed = np.multiply(ids, _MIX)
        np.right_shift(mixed, np.uint64(64 - self.bits), out=mixed)
        return mixed.view(np.int64).astype(np.intp, copy=False)

    def _insert(self) -> None:
        """Place every entry, earlier entries first at each contested slot (linear probing)."""
        slots = np.full(self.mask + 1, -1, dtype=np.intp)
        pending = np.arange(self.ids.size, dtype=np.intp)
        pos = self._home(self.ids)
        while pending.size:
            free = slots[pos] < 0
            # the first pending entry (lowest index: storage order) at each free slot takes it
            winners_pos, first = np.unique(pos[free], return_index=True)
            slots[winners_pos] = pending[free][first]
            placed = np.zeros(pending.size, dtype=bool)
            placed[np.flatnonzero(free)[first]] = True
            pending, pos = pending[~placed], (pos[~placed] + 1) & self.mask
        self.slot_entry = slots
        self.slot_ids = np.zeros(slots.size, dtype=np.uint64)  # the key of each slot, stored by slot
        full = slots >= 0
        self.slot_ids[full] = self.ids[slots[full]]

    def lookup(self, chunk_ids: U64) -> tuple[U64, U64, npt.NDArray[np.bool_]]:
        """``(starts, ends, present)`` for each id."""
        n = chunk_ids.size
        found = np.full(n, -1, dtype=np.intp)
        if n and self.ids.size:
            todo: npt.NDArray[np.intp] | None = None  # None: every query (the first round copies nothing)
            q_ids = chunk_ids
            pos = self._home(q_ids)
            while True:
                entry = self.slot_entry[pos]
                occupied = entry >= 0
                match = self.slot_ids[pos] == q_ids
                match &= occupied
                if todo is None:
                    np.copyto(found, entry, where=match)
                else:
                    found[todo[match]] = entry[match]
                occupied &= ~match
                left = np.flatnonzero(occupied)
                if left.size == 0:
                    break
                todo = left if todo is None else todo[left]
                q_ids = q_ids[left]
                pos = (pos[left] + 1) & self.mask
        return self._starts[found], self._ends[found], found >= 0
