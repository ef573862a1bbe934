"""Edits as plans: what a mutation changes, computed first, then written in one transaction.

Every edit — merge, cleave, supervoxel split, body split, undo, redo, branch merge — becomes an
:class:`EditPlan`: the logical map delta (for the log) plus the new values of every versioned key it
rewrites (body-map records, overlay blocks, index entries). :func:`write_plan` then, inside the
caller's write transaction, saves what each key held before in the mutation's undo record (for
pages and id sets only the rows the edit changes: :mod:`.undo_records`), writes
the new values, moves the freshness stamp, appends the log record and keeps the bookkeeping records:
the undo and redo stacks (a linked list: the top of each stack, and per mutation the entry below it
and where its log record is) and the per-body history. Undo is the same machinery run backwards:
its plan is the saved previous values, rebuilt from the keys' current values (:func:`plan_inverse`),
which restore every record exactly,
and it saves what it overwrites in turn — exactly what a later redo needs. Undo after a restart is
therefore a few reads, whatever the history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.block_codec import encode_label_block
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.geometry import Coord
from napari_shardscope.core.labelmap.keys import (
    BLOCK_PREFIX,
    block_key,
    decode_previous,
    mutations_counter,
    overlay_count_key,
    parse_block_key,
    undo_prefix,
)
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.mutations import BlockChange, Mutation, Operation
from napari_shardscope.core.labelmap.reading import PatchedReader
from napari_shardscope.core.labelmap.recordmap import MapTxn
from napari_shardscope.core.labelmap.records import (
    PARENT_PREFIX,
    REDO_TOP_KEY,
    STAMP_KEY,
    UNDO_TOP_KEY,
    Link,
    Top,
    decode_u64,
    encode_u64,
    encode_where,
    history_key,
    link_key,
)
from napari_shardscope.core.labelmap.state import VersionState, encode_stamp
from napari_shardscope.core.labelmap.undo_records import encode_undo_record, read_undo_record
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.view import VersionView, VersionWriter

U64 = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class EditPlan:
    """Everything one mutation does, before it is written."""

    operation: Operation
    args: dict[str, Any]
    delta: MapDelta
    keys: dict[bytes, bytes | None] = field(default_factory=dict)
    bodies: tuple[int, ...] = ()
    supervoxels: tuple[int, ...] = ()
    target: int | None = None

    @property
    def blocks(self) -> tuple[BlockChange, ...]:
        out = []
        for key in self.keys:
            if key[:1] == BLOCK_PREFIX:
                scale, c = parse_block_key(key)
                out.append(BlockChange(scale, c))
        return tuple(sorted(out, key=lambda b: (b.scale, b.block)))


@dataclass(frozen=True)
class Written:
    """A mutation as written: its record, its bytes, every key written (for the caches) and whether a
    union-find parent link was removed or moved (a root memo must then be dropped)."""

    mutation: Mutation
    data: bytes
    keys: dict[bytes, bytes | None]
    unlinked: bool


def read_top(view: VersionView, instance: Instance, key: bytes) -> Top | None:
    """The top of the undo (``U``) or redo (``R``) stack of ``view``'s version (None: empty).

    A child inherits its parent's records but not its stacks: a top pushed at another version is no top here.
    """
    raw = view.get(instance, key)
    if raw is None:
        return None
    top = Top.from_bytes(raw, key=key)
    return top if top.version == view.version.uuid else None


def read_link(view: VersionView, instance: Instance, mutation_id: int) -> Link:
    raw = view.get(instance, link_key(mutation_id))
    if raw is None:
        raise LabelmapStateError(f"the undo stack names mutation {mutation_id}, which has no stack record")
    return Link.from_bytes(raw, key=link_key(mutation_id))


def read_mutation(view: VersionView, instance: Instance, version_id: int, seq: int, *, where: str) -> Mutation:
    """A log record by where it is (its version's local id and sequence number)."""
    data = view.log_entry(instance, version_id, seq)
    if data is None:
        raise LabelmapStateError(f"the labelmap's records name log entry {seq} of version {where}, which is missing")
    return Mutation.from_bytes(data, key=f"mutation log of version {where}")


def _overlay_counts(w: VersionWriter, instance: Instance, keys: dict[bytes, bytes | None],
                    previous: dict[bytes, bytes | None]) -> dict[bytes, bytes | None]:
    """The ``o`` records after writing ``keys``: each scale's overlay block count, moved by what appears or goes."""
    change: dict[int, int] = {}
    for key, new in keys.items():
        if key[:1] != BLOCK_PREFIX:
            continue
        scale = key[1]
        was, now = previous[key] is not None, new is not None
        if was != now:
            change[scale] = change.get(scale, 0) + (1 if now else -1)
    out: dict[bytes, bytes | None] = {}
    for scale, d in change.items():
        key = overlay_count_key(scale)
        raw = w.get(instance, key)
        count = (0 if raw is None else decode_u64(raw, key=key)) + d
        out[key] = encode_u64(count) if count > 0 else None
    return out


def write_plan(w: VersionWriter, instance: Instance, name: str, plan: EditPlan, user: str) -> Written:
    """Write ``plan`` as one mutation inside ``w``'s transaction (see the module docstring)."""
    mid = w.allocate_ids(mutations_counter(name), 1, minimum=1)[0]
    keys = dict(plan.keys)
    previous = {key: w.get(instance, key) for key in keys}
    counts = {k: v for k, v in _overlay_counts(w, instance, keys, previous).items() if k not in keys}
    for key in counts:
        previous[key] = w.get(instance, key)
    keys.update(counts)
    unlinked = False
    for key, new in keys.items():
        old = previous[key]
        if key[:1] == PARENT_PREFIX and old is not None and old != new:
            unlinked = True
        if new is None:
            w.delete(instance, key)
        else:
            w.put(instance, key, new)
    if keys:
        w.put(instance, undo_prefix(mid), encode_undo_record(previous, keys))
    m = Mutation(mutation_id=mid, operation=plan.operation, args=plan.args, user=user, time=time.time(),
                 delta=plan.delta, blocks=plan.blocks, bodies=plan.bodies, supervoxels=plan.supervoxels,
                 target=plan.target)
    data = m.to_bytes()
    seq = w.append_log(instance, data)
    book = stack_records(w, instance, m, seq)
    book[STAMP_KEY] = encode_stamp(mid)
    where = encode_where(w.version.uuid, seq)
    for body in sorted(set(plan.bodies)):
        book[history_key(body, mid)] = where
    for key, value in book.items():
        if value is None:
            w.delete(instance, key)
        else:
            w.put(instance, key, value)
    return Written(m, data, {**keys, **book}, unlinked)


def stack_records(view: VersionView, instance: Instance, m: Mutation, seq: int) -> dict[bytes, bytes | None]:
    """The stack records after ``m`` (logged as entry ``seq`` of the view's version) is written.

    An ordinary edit pushes itself on the undo stack and empties the redo stack; an undo pops the entry
    it inverted and pushes itself on the redo stack; a redo pops that undo and pushes itself on the
    undo stack (undoing it again inverts the redo).
    """
    version = view.version.uuid
    undo, redo = read_top(view, instance, UNDO_TOP_KEY), read_top(view, instance, REDO_TOP_KEY)
    out: dict[bytes, bytes | None] = {}

    def push(stack: bytes, top: Top | None) -> None:
        out[link_key(m.mutation_id)] = Link(top.mutation_id if top else 0, version, seq).to_bytes()
        out[stack] = Top(m.mutation_id, version).to_bytes()

    def pop(stack: bytes, top: Top) -> None:
        below = read_link(view, instance, top.mutation_id).below
        out[stack] = Top(below, version).to_bytes() if below else None

    if m.operation == "undo":
        if undo is None or undo.mutation_id != m.target:
            raise LabelmapStateError(f"undo {m.mutation_id} does not invert the last edit of version {version[:8]}")
        pop(UNDO_TOP_KEY, undo)
        push(REDO_TOP_KEY, redo)
    elif m.operation == "redo":
        if redo is None or redo.mutation_id != m.target:
            raise LabelmapStateError(f"redo {m.mutation_id} does not invert the last undo of version {version[:8]}")
        pop(REDO_TOP_KEY, redo)
        push(UNDO_TOP_KEY, undo)
    else:
        push(UNDO_TOP_KEY, undo)
        if redo is not None:
            out[REDO_TOP_KEY] = None
    return out


def read_saved(view: VersionView, instance: Instance, mutation_id: int) -> dict[bytes, bytes | None]:
    """What every key mutation ``mutation_id`` wrote held before it: its one packed record, and the
    per-key records of the replay era (and of migrations).

    A packed record keeps the rows the mutation changed in pages and id sets, not their whole old
    values (:mod:`.undo_records`): they are rebuilt from the keys' values at ``view``, which must be
    what the mutation wrote — true whenever it is on top of its stack, the only time it is inverted.
    """
    prefix = undo_prefix(mutation_id)
    out: dict[bytes, bytes | None] = {}
    for k, v in view.scan(instance, prefix=prefix):
        if len(k) == len(prefix):
            out.update(read_undo_record(v, lambda keys: view.get_many(instance, keys),
                                        where=f"undo record of mutation {mutation_id}"))
        else:
            out[k[len(prefix):]] = decode_previous(v)
    return out


def plan_inverse(view: VersionView, instance: Instance, entry: Mutation, operation: Operation,
                 original: int) -> EditPlan:
    """The plan that reverts log entry ``entry`` (an undo, or a redo when ``entry`` is an undo)."""
    keys = read_saved(view, instance, entry.mutation_id)
    return EditPlan(operation=operation, args={"mutation": original, "inverts": entry.mutation_id},
                    delta=entry.delta.inverse(), keys=keys, bodies=entry.bodies, supervoxels=entry.supervoxels,
                    target=entry.mutation_id)


class Workspace:
    """An edit in progress: pending blocks and records over a version's state.

    Parameters
    ----------
    reader
        Patched reads of the version, holding the pending blocks.
    txn
        The body map with this edit's pending records: each step (a body split's cuts and cleaves)
        plans on the result of the previous ones.
    allocate
        Reserves ``n`` new label ids in the edit's transaction.
    """

    def __init__(self, config: LabelmapConfig, reader: PatchedReader, txn: MapTxn,
                 allocate: Callable[[int], range]) -> None:
        self.config = config
        self.reader = reader
        self.map = txn
        self.allocate = allocate

    def sv_index(self, sv: int) -> SvIndex | None:
        """The supervoxel's index entry including this edit's changes (None: does not exist)."""
        return self.map.entry(sv)

    def keys(self) -> dict[bytes, bytes | None]:
        """The versioned keys this edit writes (encoded)."""
        out: dict[bytes, bytes | None] = {}
        for (scale, c), block in sorted(self.reader.pending.items()):
            out[block_key(scale, c)] = encode_label_block(block)
        out.update(self.map.pending)
        return out

    def delta(self) -> MapDelta:
        return self.map.delta()


T = TypeVar("T")
#: Plans an edit inside the write transaction: ``(writer, state, workspace) -> (plan, result)``.
Planner = Callable[[VersionWriter, VersionState, Workspace], tuple[EditPlan, T]]


def block_coords(keys: dict[bytes, bytes | None]) -> list[tuple[int, Coord]]:
    """``(scale, block)`` of every block key in ``keys``."""
    return [parse_block_key(k) for k in keys if k[:1] == BLOCK_PREFIX]
