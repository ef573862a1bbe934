"""Mutation records: the append-only log of a labelmap version (DVID's mutation log).

One record per edit, written in the same transaction as the edit's effects. A record says what the
proofreader asked for (operation and arguments, user, time) and exactly what it did: the map delta
(:class:`~napari_shardscope.core.labelmap.bodymap.MapDelta`) and the overlay blocks it rewrote. A
version's map is the replay of the deltas from the root; undo and redo are new records whose
deltas invert or repeat an earlier one, so history is never rewritten.

Wire format: ``b"SSMU"``, u8 format version (1), u32 JSON length, the JSON header, then the
delta's bytes. Large deltas (a cleave of a million supervoxels) stay binary.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Literal

from napari_shardscope.core.errors import ArgumentError, FormatError
from napari_shardscope.core.labelmap.bodymap import MapDelta

Operation = Literal["merge", "cleave", "split-supervoxel", "split-body", "undo", "redo", "merge-branches"]
OPERATIONS: tuple[str, ...] = ("merge", "cleave", "split-supervoxel", "split-body", "undo", "redo", "merge-branches")
MAGIC = b"SSMU"
_HEAD = struct.Struct("<4sBI")


class MutationLogError(FormatError):
    """A mutation-log entry cannot be decoded (corrupt store or a newer format)."""


@dataclass(frozen=True)
class BlockChange:
    """One overlay block a mutation rewrote: its scale and block grid position (z, y, x)."""

    scale: int
    block: tuple[int, int, int]


@dataclass(frozen=True)
class Mutation:
    """One entry of a labelmap version's mutation log.

    Attributes
    ----------
    mutation_id
        Repository-wide unique, increasing id.
    operation
        What the proofreader did.
    args
        The operation's arguments as given (bodies, supervoxels, counts), JSON-ready.
    user, time
        Who and when (seconds since the epoch).
    delta
        The exact map change.
    blocks
        Overlay blocks rewritten (supervoxel splits; their previous contents are kept under the
        mutation's undo keys so undo can restore them).
    bodies
        Body ids the mutation touched (for history and for the labelmap-aware branch merge).
    supervoxels
        Supervoxel ids the mutation touched.
    target
        For ``undo``/``redo``: the mutation id undone or redone.
    """

    mutation_id: int
    operation: Operation
    args: dict[str, Any]
    user: str
    time: float
    delta: MapDelta = field(default_factory=MapDelta)
    blocks: tuple[BlockChange, ...] = ()
    bodies: tuple[int, ...] = ()
    supervoxels: tuple[int, ...] = ()
    target: int | None = None

    def to_bytes(self) -> bytes:
        header = {
            "id": self.mutation_id,
            "op": self.operation,
            "args": self.args,
            "user": self.user,
            "time": self.time,
            "blocks": [[b.scale, *b.block] for b in self.blocks],
            "bodies": list(self.bodies),
            "supervoxels": list(self.supervoxels),
            "target": self.target,
        }
        text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
        return _HEAD.pack(MAGIC, 1, len(text)) + text + self.delta.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes, *, key: str = "mutation log") -> Mutation:
        """Decode one log entry; anything malformed raises :class:`MutationLogError`."""
        end = _header_end(data, key)
        try:
            h = json.loads(data[_HEAD.size : end])
            delta = MapDelta.from_bytes(data[end:])
            op = h["op"]
            if op not in OPERATIONS:
                raise ValueError(f"unknown operation {op!r}")
            return cls(
                mutation_id=int(h["id"]),
                operation=op,
                args=dict(h["args"]),
                user=str(h["user"]),
                time=float(h["time"]),
                delta=delta,
                blocks=tuple(BlockChange(int(b[0]), (int(b[1]), int(b[2]), int(b[3]))) for b in h["blocks"]),
                bodies=tuple(int(b) for b in h["bodies"]),
                supervoxels=tuple(int(s) for s in h["supervoxels"]),
                target=None if h["target"] is None else int(h["target"]),
            )
        except FormatError:
            raise
        except Exception as exc:  # malformed JSON / fields: one typed error for all of it
            raise MutationLogError(
                f"malformed record ({type(exc).__name__}: {exc})", key=key, offset=_HEAD.size
            ) from exc


def _header_end(data: bytes, key: str) -> int:
    """Where an encoded entry's JSON header ends, after checking the fixed head (magic, version, length)."""
    if len(data) < _HEAD.size:
        raise MutationLogError("entry truncated", key=key, offset=len(data))
    magic, version, length = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != 1:
        raise MutationLogError("not a labelmap mutation record (bad magic or version)", key=key, offset=0)
    end = int(_HEAD.size + length)
    if end > len(data):
        raise MutationLogError("header truncated", key=key, offset=len(data))
    return end


def mutation_id_of(data: bytes, *, key: str = "mutation log") -> int:
    """Only the mutation id of an encoded entry (its JSON header, not its map delta): what a pass over
    a long log that needs nothing else reads (the migration's look-ahead over a version's edits)."""
    end = _header_end(data, key)
    try:
        return int(json.loads(data[_HEAD.size:end])["id"])
    except Exception as exc:  # malformed JSON / fields: one typed error for all of it
        raise MutationLogError(f"malformed record ({type(exc).__name__}: {exc})", key=key,
                               offset=_HEAD.size) from exc


def decode_delta(data: bytes, *, key: str = "mutation log") -> MapDelta:
    """Only the map delta of an encoded entry.

    Replaying a version's map needs nothing else, and skipping the JSON header is what keeps
    opening a version with 10⁴ mutations well under the 200 ms a proofreader would notice.
    """
    if len(data) < _HEAD.size:
        raise MutationLogError("entry truncated", key=key, offset=len(data))
    magic, version, length = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != 1:
        raise MutationLogError("not a labelmap mutation record (bad magic or version)", key=key, offset=0)
    end = _HEAD.size + length
    if end > len(data):
        raise MutationLogError("header truncated", key=key, offset=len(data))
    try:
        return MapDelta.from_bytes(data[end:])
    except ArgumentError as exc:
        raise MutationLogError(f"malformed map delta ({exc})", key=key, offset=end) from exc
