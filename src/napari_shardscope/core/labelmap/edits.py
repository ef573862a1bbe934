"""Edits as plans: what a mutation changes, computed first, then written in one transaction.

Every edit — merge, cleave, supervoxel split, body split, undo, redo — becomes an
:class:`EditPlan`: the body-map delta plus the new values of the versioned keys it rewrites
(overlay blocks, index entries). :func:`write_plan` then, inside the caller's write transaction,
saves each key's previous value under the mutation's undo keys, writes the new values, moves the
freshness stamp and appends the log record. Undo is the same machinery run backwards: its plan is
the inverse delta and the saved previous values (:func:`plan_inverse`), and it saves what it
overwrites in turn, which is exactly what a later redo needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.block_codec import encode_label_block
from napari_shardscope.core.labelmap.bodymap import BodyMap, MapDelta
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.geometry import Coord
from napari_shardscope.core.labelmap.keys import (
    block_key,
    decode_previous,
    encode_previous,
    index_key,
    mutations_counter,
    parse_block_key,
    undo_key,
    undo_prefix,
)
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.mutations import BlockChange, Mutation, Operation
from napari_shardscope.core.labelmap.reading import PatchedReader
from napari_shardscope.core.labelmap.state import STAMP_KEY, VersionState, encode_stamp
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
            if key[:1] == b"b":
                scale, c = parse_block_key(key)
                out.append(BlockChange(scale, c))
        return tuple(sorted(out, key=lambda b: (b.scale, b.block)))


def write_plan(w: VersionWriter, instance: Instance, name: str, plan: EditPlan, user: str) -> tuple[Mutation, bytes]:
    """Write ``plan`` as one mutation inside ``w``'s transaction; the record and its bytes."""
    mid = w.allocate_ids(mutations_counter(name), 1, minimum=1)[0]
    for key, new in plan.keys.items():
        w.put(instance, undo_key(mid, key), encode_previous(w.get(instance, key)))
        if new is None:
            w.delete(instance, key)
        else:
            w.put(instance, key, new)
    w.put(instance, STAMP_KEY, encode_stamp(mid))
    m = Mutation(mutation_id=mid, operation=plan.operation, args=plan.args, user=user, time=time.time(),
                 delta=plan.delta, blocks=plan.blocks, bodies=plan.bodies, supervoxels=plan.supervoxels,
                 target=plan.target)
    data = m.to_bytes()
    w.append_log(instance, data)
    return m, data


def plan_inverse(view: VersionView, instance: Instance, entry: Mutation, operation: Operation,
                 original: int) -> EditPlan:
    """The plan that reverts log entry ``entry`` (an undo, or a redo when ``entry`` is an undo)."""
    prefix = undo_prefix(entry.mutation_id)
    keys = {k[len(prefix):]: decode_previous(v) for k, v in view.scan(instance, prefix=prefix)}
    return EditPlan(operation=operation, args={"mutation": original, "inverts": entry.mutation_id},
                    delta=entry.delta.inverse(), keys=keys, bodies=entry.bodies, supervoxels=entry.supervoxels,
                    target=entry.mutation_id)


class Workspace:
    """An edit in progress: pending blocks and index entries over a version's state.

    Parameters
    ----------
    reader
        Patched reads of the version, holding the pending blocks.
    body_map
        The map to plan against. For a multi-step edit (a body split) a private copy, which each
        step's delta is applied to so the next step plans on the result.
    index_of
        Current index entry of a supervoxel before this edit (None: does not exist).
    allocate
        Reserves ``n`` new label ids in the edit's transaction.
    """

    def __init__(self, config: LabelmapConfig, reader: PatchedReader, body_map: BodyMap,
                 index_of: Callable[[int], SvIndex | None], allocate: Callable[[int], range], *,
                 multi_step: bool) -> None:
        self.config = config
        self.reader = reader
        self.map = body_map
        self._index_of = index_of
        self.allocate = allocate
        self.multi_step = multi_step
        self.index: dict[int, SvIndex | None] = {}
        self.deltas: list[MapDelta] = []

    def sv_index(self, sv: int) -> SvIndex | None:
        """The supervoxel's index entry including this edit's changes (None: does not exist)."""
        if sv in self.index:
            return self.index[sv]
        if sv in self.map.retired:
            return None
        return self._index_of(sv)

    def record(self, delta: MapDelta) -> None:
        self.deltas.append(delta)
        if self.multi_step:
            self.map.apply(delta)

    def keys(self) -> dict[bytes, bytes | None]:
        """The versioned keys this edit writes (encoded)."""
        out: dict[bytes, bytes | None] = {}
        for (scale, c), block in sorted(self.reader.pending.items()):
            out[block_key(scale, c)] = encode_label_block(block)
        for sv, entry in sorted(self.index.items()):
            out[index_key(sv)] = None if entry is None or not entry.counts.size else entry.to_bytes()
        return out

    def delta(self) -> MapDelta:
        return MapDelta.concat(self.deltas)


T = TypeVar("T")
#: Plans an edit inside the write transaction: ``(writer, state, workspace factory) -> (plan, result)``.
Planner = Callable[[VersionWriter, VersionState, Callable[[bool], Workspace]], tuple[EditPlan, T]]


def block_coords(keys: dict[bytes, bytes | None]) -> list[tuple[int, Coord]]:
    """``(scale, block)`` of every block key in ``keys``."""
    return [parse_block_key(k) for k in keys if k[:1] == b"b"]
