"""A vectorised hash table over the entries of several minishard indexes: locate millions of ids at once.

Why: resolving ids group by group (sort the ids by (shard, minishard), then ``searchsorted`` in
each minishard) spends its time in a million-element ``argsort`` and in one Python iteration per
minishard. Here every entry of the minishards involved goes into one open-addressing table keyed
by (chunk id, group), and all queries probe it together: each probe round is a handful of numpy
gathers over the queries still unresolved, and at a load factor of at most 1/4 nearly all resolve
in the first round. Lookups cost O(ids) with no sort at all.

A key is the pair (chunk id, group) where group = ``shard << minishard_bits | minishard``: an id
is only found in the minishard it hashes to, as a per-minishard lookup would. When a minishard
lists an id twice (a damaged index), the first entry in storage order is found, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.formats.precomputed.shard_index import MinishardIndex

U64 = npt.NDArray[np.uint64]
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing multiplier (2**64 / golden ratio)
_MIX2 = np.uint64(0xC2B2AE3D27D4EB4F)


class ChunkTable:
    """Entries of the minishard indexes ``indexes`` (one per ``groups``), looked up in bulk by :meth:`lookup`."""

    def __init__(self, groups: Sequence[int], indexes: Sequence[MinishardIndex]) -> None:
        sizes = [len(ix) for ix in indexes]
        total = sum(sizes)
        self.ids: U64 = np.concatenate([ix.chunk_ids for ix in indexes]) if total else np.zeros(0, np.uint64)
        self.starts: U64 = np.concatenate([ix.starts for ix in indexes]) if total else np.zeros(0, np.uint64)
        self.ends: U64 = np.concatenate([ix.ends for ix in indexes]) if total else np.zeros(0, np.uint64)
        self.groups: U64 = np.repeat(np.asarray(groups, dtype=np.uint64), sizes)
        self.bits = max(4, int(total * 4 - 1).bit_length())  # table of 2**bits >= 4 x entries
        self.mask = (1 << self.bits) - 1
        self._insert()
        zero = np.zeros(1, dtype=np.uint64)
        self._starts = np.concatenate([self.starts, zero])
        self._ends = np.concatenate([self.ends, zero])

    def _home(self, ids: U64, groups: U64) -> npt.NDArray[np.intp]:
        with np.errstate(over="ignore"):
            mixed = groups * _MIX2
            np.bitwise_xor(mixed, ids, out=mixed)
            np.multiply(mixed, _MIX, out=mixed)
        np.right_shift(mixed, np.uint64(64 - self.bits), out=mixed)
        return mixed.view(np.int64).astype(np.intp, copy=False)

    def _insert(self) -> None:
        """Place every entry, earlier entries first at each contested slot (linear probing)."""
        slots = np.full(self.mask + 1, -1, dtype=np.intp)
        pending = np.arange(self.ids.size, dtype=np.intp)
        pos = self._home(self.ids, self.groups)
        while pending.size:
            free = slots[pos] < 0
            # the first pending entry (lowest index: storage order) at each free slot takes it
            cand_pos, cand = pos[free], pending[free]
            winners_pos, first = np.unique(cand_pos, return_index=True)
            slots[winners_pos] = cand[first]
            placed = np.zeros(pending.size, dtype=bool)
            placed[np.flatnonzero(free)[first]] = True
            pending, pos = pending[~placed], pos[~placed]
            pos = (pos + 1) & self.mask
        # the key of every slot, stored by slot: a probe is two gathers, not an indirection
        self.slot_entry = slots
        full = slots >= 0
        self.slot_ids = np.zeros(slots.size, dtype=np.uint64)
        self.slot_groups = np.zeros(slots.size, dtype=np.uint64)
        self.slot_ids[full] = self.ids[slots[full]]
        self.slot_groups[full] = self.groups[slots[full]]

    def lookup(self, chunk_ids: U64, groups: U64) -> tuple[U64, U64, npt.NDArray[np.bool_]]:
        """``(starts, ends, present)`` for each (id, group) query."""
        n = chunk_ids.size
        if n == 0 or self.ids.size == 0:
            return np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=bool)
        found = np.full(n, -1, dtype=np.intp)
        todo: npt.NDArray[np.intp] | None = None  # None: every query (the first round, no copies)
        q_ids, q_groups = chunk_ids, groups
        pos = self._home(q_ids, q_groups)
        while True:
            entry = self.slot_entry[pos]
            match = self.slot_ids[pos] == q_ids
            match &= self.slot_groups[pos] == q_groups
            match &= entry >= 0
            if todo is None:
                found[match] = entry[match]
            else:
                found[todo[match]] = entry[match]
            more = ~match
            more &= entry >= 0
            left = np.flatnonzero(more)
            if left.size == 0:
                break
            todo = left if todo is None else todo[left]
            q_ids, q_groups = q_ids[left], q_groups[left]
            pos = (pos[left] + 1) & self.mask
        # index -1 (not found) picks the zero sentinel at the end of _starts/_ends
        return self._starts[found], self._ends[found], found >= 0
