"""A body's history and a version's mutation log, read from the log records and the per-body history records.

Split from :mod:`.version`: the history is read, never written, by the handle, and it has its own
rule (a mutation belongs to a body's history when it touched the body or a body it was made of,
and the bodies it touched then join the lineage), read from the per-body history records so it
costs the lineage, not the log. :meth:`LabelmapVersion.history
<napari_shardscope.core.labelmap.version.LabelmapVersion.history>` and
:meth:`~napari_shardscope.core.labelmap.version.LabelmapVersion.mutations` call these.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from napari_shardscope.core.labelmap.backend import LabelmapBackend
from napari_shardscope.core.labelmap.edits import read_mutation
from napari_shardscope.core.labelmap.logs import ordered_log
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.recordmap import MapReader
from napari_shardscope.core.labelmap.records import HISTORY_PREFIX, decode_where, history_prefix


@dataclass(frozen=True)
class HistoryEntry:
    """One mutation of a body's history, with the version whose log holds it."""

    version: str
    mutation: Mutation


def read_mutations(lm: LabelmapBackend, uuid: str, *, own: bool = False) -> list[HistoryEntry]:
    """The mutation log of version ``uuid``'s ancestry, oldest first (``own``: that version's only).

    Reads the log (costs the history): what a view or an edit needs never does.
    """
    with lm.repo.read(uuid) as view:
        if own:
            return [HistoryEntry(uuid, Mutation.from_bytes(e.data, key=f"mutation log of version {uuid}"))
                    for e in view.read_log(lm.instance, own=True)]
        records = ordered_log(view, lm.instance, lambda u: lm.repo.version(u).parents)
    return [HistoryEntry(r.version, r.mutation) for r in records]


def read_history(lm: LabelmapBackend, uuid: str, body: int) -> list[HistoryEntry]:
    """Mutations that shaped ``body`` at version ``uuid``, across the ancestry, oldest first (DVID's ``history``).

    Walking back from the newest, a mutation belongs to the history when it touched the body
    or a body it was made of; the bodies it touched then join the lineage (the body a cleave
    came from, the bodies a merge took in). Read from the per-body history records (body,
    mutation id → where its log record is): the cost of the lineage, not of the log.
    """
    state = lm.state(uuid)
    with state.lock:
        lineage_start = lineage(lm.reader(state), body)
    out: dict[int, HistoryEntry] = {}
    heap: list[tuple[int, str, int]] = []
    joined: dict[int, int] = {}
    with lm.repo.read(uuid) as view:

        def add(b: int, before: int) -> None:
            joined[b] = before
            for key, value in view.scan(lm.instance, prefix=history_prefix(b)):
                mid = int.from_bytes(key[len(HISTORY_PREFIX) + 8:], "big")
                if mid < before:
                    where, seq = decode_where(value, key=key)
                    heapq.heappush(heap, (-mid, where, seq))

        for b in sorted(lineage_start):
            add(b, 2**64)
        while heap:
            neg, where, seq = heapq.heappop(heap)
            mid = -neg
            if mid in out:
                continue
            m = read_mutation(view, lm.instance, lm.repo.version(where).vid, seq, where=where[:8])
            out[mid] = HistoryEntry(where, m)
            for b in m.bodies:
                if int(b) not in joined:
                    add(int(b), mid)
    return [out[mid] for mid in sorted(out)]


def lineage(reader: MapReader, body: int) -> set[int]:
    """``body`` and the bodies merged into it (its logical merge subtree)."""
    root, info = reader.resolve(body)
    nodes = reader.ring(root)
    if info.name == body:
        return set(nodes) | {body}
    parent = dict(zip(nodes, (reader.logical_parent(n) for n in nodes), strict=True))
    out = {body}
    for n in nodes:
        cur: int | None = n
        seen = 0
        while cur is not None and cur not in out and seen <= len(nodes):
            cur = parent.get(cur)
            seen += 1
        if cur is not None and cur in out:
            out.add(n)
    return out
