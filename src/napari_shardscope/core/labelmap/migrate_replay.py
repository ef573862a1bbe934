"""One transaction of a labelmap migration's history pass: the next versions' and mutations' records.

:mod:`.migrate` runs the pass as a loop of :class:`HistoryBatch` es, each in its own
:meth:`~napari_shardscope.core.versioned.repository.Repository.rewriting` transaction that ends by
storing where it got to (a :class:`Marker`, unversioned). Everything a batch needs is read from the
store at its start — the marker, the overlay counts the version reached, the records earlier batches
wrote — never carried in memory from the batch before, so a batch is a function of the committed
store: a run killed between two batches, or one that takes over from another process, continues
exactly where the last commit left off and writes what one transaction would have written, byte for
byte. A batch holds at most ``limit`` mutations (and ``max_keys`` written keys), so neither the
transaction nor the process grows with the history.

Per version, parents first (version ids are a topological order):

* a version with several parents starts in a batch of its own (:meth:`HistoryBatch._merge_start`):
  its first parent's map records where the other side wrote them (found in the other side's change
  index), its overlay counts recounted, and below a plain store merge the other side's extra edits
  replayed (the format-1 rule); its cost is that merge's, not the history's;
* each own mutation, in log order, writes the records it makes at the version with its packed undo
  record, stack records, history records and the change of the overlay block counts. Those counts
  need, for each block a mutation touched, whether the block exists after it: the state the next
  edit of the same block saved as its "before", else the version's final state. One backwards pass
  over the version's log (:func:`block_changes`) finds them all in one read of each edit's saved
  blocks, instead of a look-ahead per edit (quadratic in the version's edits).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.json_document import load_json_object
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.edits import read_saved, stack_records
from napari_shardscope.core.labelmap.errors import LabelmapStateError, MappingError
from napari_shardscope.core.labelmap.keys import (
    BLOCK_PREFIX,
    INDEX_PREFIX,
    block_prefix,
    decode_previous,
    index_key,
    overlay_count_key,
    undo_prefix,
)
from napari_shardscope.core.labelmap.label_index import BaseIndexReader, SvIndex
from napari_shardscope.core.labelmap.map_txn import MapTxn
from napari_shardscope.core.labelmap.mutations import Mutation, mutation_id_of
from napari_shardscope.core.labelmap.records import (
    HISTORY_PREFIX,
    MAP_PREFIXES,
    MERGE_MARK_KEY,
    encode_u64,
    encode_where,
    history_key,
)
from napari_shardscope.core.labelmap.undo_records import encode_undo_record
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Rewriter
from napari_shardscope.core.versioned.view import VersionWriter

#: Unversioned key of a migration in progress (absent: none started, or done).
MARKER_KEY = b"migration"
#: Changed keys read at a time from another version's change index (a merge's start).
_CHANGE_PAGE = 4096


@dataclass
class Marker:
    """Where a migration got to: the version being converted (those with smaller ids are done), its
    next own log entry, whether its start (a merge's) is written; and the totals so far."""

    vid: int = 0
    seq: int = 0
    started: bool = False
    versions: int = 0
    mutations: int = 0
    unreconciled: list[str] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, *, where: str) -> Marker:
        try:
            d = load_json_object(raw, key=where)
            return cls(int(d["vid"]), int(d["seq"]), bool(d["started"]), int(d["versions"]), int(d["mutations"]),
                       [str(u) for u in d["unreconciled"]])
        except (MetadataError, KeyError, TypeError, ValueError) as exc:
            raise LabelmapStateError(f"{where}: the record of an interrupted migration is damaged ({exc})") from exc


class _WriterRecords:
    """A version's records as the migration's transaction sees them."""

    def __init__(self, w: VersionWriter, instance: Instance) -> None:
        self.w = w
        self.instance = instance

    def get_many(self, keys: Any) -> list[bytes | None]:
        return self.w.get_many(self.instance, keys)


def undo_entries(rw: Rewriter, inst: Instance) -> dict[int, bytes]:
    """Index entries of split-made supervoxels that survive only in undo records (a split undone in the
    version that made it leaves its entries nowhere else); the first one in key order, as ever."""
    out: dict[int, bytes] = {}
    for key, _vid, tomb, value in rw.scan_all(inst, b"u"):
        inner = key[9:]
        if not tomb and len(inner) == 9 and inner[:1] == INDEX_PREFIX:
            prev = decode_previous(value)
            if prev is not None:
                out.setdefault(int.from_bytes(inner[1:], "big"), prev)
    return out


def block_changes(rw: Rewriter, inst: Instance, v: Version, w: VersionWriter) -> dict[int, dict[int, int]]:
    """For each own log entry (by sequence number) of ``v`` that changes how many overlay blocks a scale
    has: the change per scale. One pass over the log from its end: a block's state after an edit is
    what the next edit of it saved, else its state at the version."""
    first = rw.changed_keys(inst, v, start=b"u", limit=1)
    if not first or first[0][:1] != b"u":
        return {}  # no undo records stored here: no edit of this version touched a block
    out: dict[int, dict[int, int]] = {}
    later: dict[bytes, bool] = {}  # block key -> exists after the edit being looked at
    start: int | None = None
    while True:
        chunk = rw.own_log(inst, v, start=start, reverse=True, limit=1024)
        for e in chunk:
            mid = mutation_id_of(e.data, key=f"mutation log of version {v.uuid}")
            prefix = undo_prefix(mid) + BLOCK_PREFIX
            d: dict[int, int] = {}
            for key, value in w.scan(inst, prefix=prefix):
                block = key[len(prefix) - 1:]
                before = decode_previous(value) is not None
                after = later.get(block)
                if after is None:
                    after = w.contains(inst, block)
                later[block] = before
                if after != before:
                    d[block[1]] = d.get(block[1], 0) + int(after) - int(before)
            d = {s: n for s, n in d.items() if n}
            if d:
                out[e.seq] = d
        if len(chunk) < 1024 or chunk[-1].seq == 0:
            return out
        start = chunk[-1].seq - 1


class HistoryBatch:
    """One transaction's share of the history pass (see the module docstring)."""

    def __init__(self, rw: Rewriter, inst: Instance, config: LabelmapConfig, agg: AgglomerationSource,
                 index: Callable[[], BaseIndexReader], fallback: Mapping[int, bytes], marker: Marker, *,
                 limit: int, max_keys: int, deltas: dict[int, dict[int, dict[int, int]]],
                 progress: Progress | None = None) -> None:
        self.rw = rw
        self.inst = inst
        self.config = config
        self.agg = agg
        self.index = index
        self.fallback = fallback
        self.marker = marker
        self.limit = max(1, limit)
        self.max_keys = max(1, max_keys)
        self.deltas = deltas  # the current version's block changes, kept between batches of one run
        self.progress = progress
        self.keys = 0  # keys written by this batch
        self.units = 0  # mutations and versions converted by this batch

    # -- the batch ------------------------------------------------------------------------------------

    def run(self) -> bool:
        """Convert the next versions and mutations; True when every version is converted."""
        versions = self.rw.versions()
        m = self.marker
        for i, v in enumerate(versions):
            if v.vid < m.vid:
                continue
            if v.vid > m.vid:
                m.vid, m.seq, m.started = v.vid, 0, False
            w = self.rw.at(v)
            if not m.started:
                if len(v.parents) > 1:
                    if self.units:
                        return False  # a merge's start is a transaction of its own
                    head = self.rw.own_log(self.inst, v, limit=1)
                    op = Mutation.from_bytes(head[0].data).operation if head else None
                    self._merge_start(v, w, op)
                    m.started = True
                    return False
                m.started = True
            if not self._mutations(v, w):
                return False
            self.units += 1
            m.versions += 1
            self.deltas.pop(v.vid, None)
            if self.progress is not None:
                self.progress(i + 1, len(versions), f"{self.inst.name}: version {v.short}")
            m.vid, m.seq, m.started = v.vid + 1, 0, False
            if self.units >= self.limit or self.keys >= self.max_keys:
                return False
        return True

    def _mutations(self, v: Version, w: VersionWriter) -> bool:
        """Convert ``v``'s own mutations from the marker on, within the batch; True when none are left."""
        m = self.marker
        if v.vid not in self.deltas:
            self.deltas.clear()
            self.deltas[v.vid] = block_changes(self.rw, self.inst, v, w)
        deltas = self.deltas[v.vid]
        counts = self._counts(w)
        memo: dict[int, int] = {}
        while True:
            chunk = self.rw.own_log(self.inst, v, start=m.seq, limit=max(1, min(1024, self.limit - self.units)))
            if not chunk:
                return True
            for e in chunk:
                mut = Mutation.from_bytes(e.data, key=f"mutation log of version {v.uuid}")
                self._mutation(v, w, e.seq, mut, counts, deltas.get(e.seq, {}), memo)
                m.seq, m.mutations = e.seq + 1, m.mutations + 1
                self.units += 1
                if self.units >= self.limit or self.keys >= self.max_keys:
                    # the log may end here: the next batch finds it empty and moves on
                    return False

    # -- one mutation -----------------------------------------------------------------------------------

    def _put(self, w: VersionWriter, key: bytes, value: bytes | None) -> None:
        if value is None:
            w.delete(self.inst, key)
        else:
            w.put(self.inst, key, value)
        self.keys += 1

    def entries(self, svs: list[int]) -> dict[int, SvIndex]:
        """Index entries of split-made supervoxels stored anywhere in the history (an id's entry never
        changes): a version's ``i`` record, else an undo record's."""
        out: dict[int, SvIndex] = {}
        for sv in svs:
            raw = next((value for key, _vid, tomb, value in self.rw.scan_all(self.inst, index_key(sv))
                        if not tomb and len(key) == 9), None)
            if raw is None:
                raw = self.fallback.get(sv)
            if raw is not None:
                out[sv] = SvIndex.from_bytes(raw, key=f"index entry of supervoxel {sv}")
        return out

    def txn(self, w: VersionWriter, memo: dict[int, int]) -> MapTxn:
        return MapTxn(_WriterRecords(w, self.inst), self.agg, self.index, memo, self.entries)

    def _mutation(self, v: Version, w: VersionWriter, seq: int, m: Mutation, counts: dict[int, int],
                  blocks: Mapping[int, int], memo: dict[int, int]) -> None:
        txn = self.txn(w, memo)
        if m.operation in ("undo", "redo"):
            if m.target is None:
                raise LabelmapStateError(f"mutation log: {m.operation} {m.mutation_id} names no record")
            for key, value in read_saved(w, self.inst, m.target).items():
                if key[:1] in MAP_PREFIXES:  # the map's records are restored exactly, as a new undo does
                    txn.put(key, value)
        else:
            try:
                txn.apply_delta(m.delta)
            except MappingError as exc:
                raise LabelmapStateError(f"version {v.short}: mutation {m.mutation_id} does not replay "
                                         f"({exc}); the log is inconsistent") from exc
        if txn.unlinked:
            memo.clear()
        changes = dict(txn.pending)
        for scale, d in blocks.items():
            counts[scale] = counts.get(scale, 0) + d
            changes[overlay_count_key(scale)] = encode_u64(counts[scale]) if counts[scale] > 0 else None
        previous: dict[bytes, bytes | None] = {}
        for key, new in changes.items():
            if key[:1] == INDEX_PREFIX or key[:1] == BLOCK_PREFIX:
                continue  # format 1 wrote these already
            previous[key] = w.get(self.inst, key)
            self._put(w, key, new)
        if previous:  # beside format 1's per-key records of its blocks and index entries
            w.put(self.inst, undo_prefix(m.mutation_id), encode_undo_record(previous, changes))
            self.keys += 1
        book = stack_records(w, self.inst, m, seq)
        for body in sorted(set(m.bodies)):
            book[history_key(body, m.mutation_id)] = encode_where(v.uuid, seq)
        for key, record in book.items():
            self._put(w, key, record)

    def _counts(self, w: VersionWriter) -> dict[int, int]:
        """Overlay block counts as the version has them now (inherited, or written by earlier batches)."""
        raw = w.get_many(self.inst, [overlay_count_key(s) for s in range(len(self.config.scales))])
        return {s: 0 if r is None else int.from_bytes(r, "little") for s, r in enumerate(raw)}

    # -- a version with several parents -------------------------------------------------------------

    def _merge_start(self, v: Version, w: VersionWriter, op: str | None) -> None:
        """A version with several parents starts as its first parent's records (plus, below a store
        merge, the other parents' extra records replayed); its overlay counts are counted afresh."""
        by_uuid = {x.uuid: x for x in self.rw.versions()}
        first = self.rw.at(v.parents[0])
        ours_side = {a.vid for a in _ancestry(first.version, by_uuid)}
        other = sorted(a.vid for a in _ancestry(v, by_uuid) if a.vid not in ours_side and a.vid != v.vid)
        # the map's records (and, below a branch merge, the history: its record stands for theirs) as the
        # first parent has them, where the other side's versions wrote them
        branch_merge = op == "merge-branches"
        shadowed = (*MAP_PREFIXES, HISTORY_PREFIX) if branch_merge else MAP_PREFIXES
        by_vid = {x.vid: x for x in by_uuid.values()}
        for vid in other:
            start: bytes | None = None
            while True:
                page = self.rw.changed_keys(self.inst, by_vid[vid], start=start, limit=_CHANGE_PAGE)
                keys = [k for k in page if k[:1] in shadowed]
                if keys:
                    for key, want, have in zip(keys, first.get_many(self.inst, keys), w.get_many(self.inst, keys),
                                               strict=True):
                        if want != have:
                            self._put(w, key, want)
                if len(page) < _CHANGE_PAGE:
                    break
                start = page[-1] + b"\x00"
        for s in range(len(self.config.scales)):
            n = sum(1 for _ in w.keys(self.inst, prefix=block_prefix(s)))
            raw = w.get(self.inst, overlay_count_key(s))
            if (0 if raw is None else int.from_bytes(raw, "little")) != n:
                self._put(w, overlay_count_key(s), encode_u64(n) if n else None)
        if branch_merge:
            return
        extra = self._extra_versions(v, by_uuid)
        if not extra:
            return
        txn = self.txn(w, {})
        try:
            for uuid in extra:
                seq: int | None = None
                while True:
                    chunk = self.rw.own_log(self.inst, uuid, start=seq, limit=1024)
                    for e in chunk:
                        txn.apply_delta(Mutation.from_bytes(e.data, key=f"mutation log of version {uuid}").delta)
                    if len(chunk) < 1024:
                        break
                    seq = chunk[-1].seq + 1
        except MappingError:
            self.marker.unreconciled.append(v.uuid)  # format 1 refused this version too; so does format 2
            return
        for key, value in txn.pending.items():
            self._put(w, key, value)
        self._put(w, MERGE_MARK_KEY, b"\x01")

    def _extra_versions(self, v: Version, by_uuid: Mapping[str, Version]) -> list[str]:
        """The versions whose own logs a plain store merge replays after its first parent's: the format-1
        replay order (:func:`~.logs.ordered_log`) at the level of versions, whose logs are read one at a time."""
        memo: dict[str, list[str]] = {}
        firsts: dict[str, str | None] = {}

        def first_op(uuid: str) -> str | None:
            if uuid not in firsts:
                head = self.rw.own_log(self.inst, uuid, limit=1)
                firsts[uuid] = Mutation.from_bytes(head[0].data).operation if head else None
            return firsts[uuid]

        def ordered(uuid: str) -> list[str]:
            hit = memo.get(uuid)
            if hit is not None:
                return hit
            chain: list[str] = []
            prefix: list[str] = []
            cur = uuid
            while True:
                chain.append(cur)
                parents = by_uuid[cur].parents
                if not parents:
                    break
                if len(parents) > 1 and first_op(cur) != "merge-branches":
                    prefix = list(ordered(parents[0]))
                    seen = set(prefix)
                    for p in parents[1:]:
                        for u in ordered(p):
                            if u not in seen:
                                seen.add(u)
                                prefix.append(u)
                    break
                if parents[0] in memo:
                    prefix = memo[parents[0]]
                    break
                cur = parents[0]
            out = prefix + list(reversed(chain))
            memo[uuid] = out
            return out

        ours = set(ordered(v.parents[0]))
        return [u for u in ordered(v.uuid) if u not in ours and u != v.uuid]


def _ancestry(v: Version, by_uuid: Mapping[str, Version]) -> list[Version]:
    out, todo, seen = [], [v.uuid], set()
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        out.append(by_uuid[u])
        todo.extend(by_uuid[u].parents)
    return out
