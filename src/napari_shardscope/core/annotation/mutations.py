"""The mutation log of an annotation instance: one append-only record per edit (DVID's mutation log).

A record says what was asked (operation, arguments, user, time), which annotations it touched, and
exactly what it did: every key it wrote, with the value before and after. Undo writes the
"before" values back as a new record (and redo the "after" values of that undo's record back), so
history is never rewritten and an undo restores the records byte for byte, whatever the edit was.

Wire format: ``b"SSAN"``, u8 format (1), u32 JSON length, the JSON header, then the changes: u32
count, and per key u16 length, the key, then before and after each as u8 present flag, u32 length
and the bytes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Literal

from napari_shardscope.core.annotation.errors import AnnotationRecordError
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.json_document import load_json

Operation = Literal["add", "move", "delete", "set-properties", "set-tags", "relate", "unrelate", "undo", "redo",
                    "merge-branches", "add-many"]
OPERATIONS: tuple[str, ...] = ("add", "move", "delete", "set-properties", "set-tags", "relate", "unrelate", "undo",
                               "redo", "merge-branches", "add-many")
MAGIC = b"SSAN"
_HEAD = struct.Struct("<4sBI")
_KEYLEN = struct.Struct("<H")
_VAL = struct.Struct("<BI")
_COUNT = struct.Struct("<I")


@dataclass(frozen=True)
class KeyChange:
    """One key an edit wrote: its value before and after (None: absent)."""

    key: bytes
    before: bytes | None
    after: bytes | None


@dataclass(frozen=True)
class AnnotationMutation:
    """One entry of an annotation instance's mutation log.

    Attributes
    ----------
    mutation_id
        Repository-wide unique, increasing id.
    operation
        What was done.
    ids
        Annotation ids whose records the edit changed (partners of a relationship included).
    args
        The operation's arguments as given, JSON-ready.
    user, time
        Who and when (seconds since the epoch).
    target
        For ``undo``/``redo``: the mutation inverted.
    changes
        Every key written, with its value before and after.
    """

    mutation_id: int
    operation: str
    ids: tuple[int, ...]
    args: dict[str, Any]
    user: str
    time: float
    target: int | None = None
    changes: tuple[KeyChange, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.mutation_id, "op": self.operation, "ids": list(self.ids), "args": self.args,
                "user": self.user, "time": self.time, "target": self.target}

    def to_bytes(self) -> bytes:
        text = json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()
        parts = [_HEAD.pack(MAGIC, 1, len(text)), text, _COUNT.pack(len(self.changes))]
        for c in self.changes:
            parts += [_KEYLEN.pack(len(c.key)), c.key]
            for v in (c.before, c.after):
                parts += [_VAL.pack(0, 0)] if v is None else [_VAL.pack(1, len(v)), v]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes, *, key: str = "annotation mutation log") -> AnnotationMutation:
        """Decode one log entry; anything malformed raises :class:`AnnotationRecordError`."""
        if len(data) < _HEAD.size:
            raise AnnotationRecordError("entry truncated", key=key, offset=len(data))
        magic, version, length = _HEAD.unpack_from(data, 0)
        if magic != MAGIC or version != 1:
            raise AnnotationRecordError("not an annotation mutation record (bad magic or version)", key=key, offset=0)
        pos = _HEAD.size + length
        if pos + _COUNT.size > len(data):
            raise AnnotationRecordError("header truncated", key=key, offset=len(data))
        try:
            h = load_json(data[_HEAD.size:pos], key=key, max_depth=16)
            if h["op"] not in OPERATIONS:
                raise ValueError(f"unknown operation {h['op']!r}")
            head = dict(mutation_id=int(h["id"]), operation=str(h["op"]), ids=tuple(int(i) for i in h["ids"]),
                        args=dict(h["args"]), user=str(h["user"]), time=float(h["time"]),
                        target=None if h["target"] is None else int(h["target"]))
        except (ValueError, TypeError, KeyError, MetadataError) as exc:
            raise AnnotationRecordError(f"malformed header ({type(exc).__name__}: {exc})", key=key,
                                        offset=_HEAD.size) from exc
        (count,) = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        changes: list[KeyChange] = []
        for _ in range(count):
            if pos + _KEYLEN.size > len(data):
                raise AnnotationRecordError("changes truncated", key=key, offset=pos)
            (klen,) = _KEYLEN.unpack_from(data, pos)
            k = data[pos + 2:pos + 2 + klen]
            pos += 2 + klen
            vals: list[bytes | None] = []
            for _v in range(2):
                if len(k) != klen or pos + _VAL.size > len(data):
                    raise AnnotationRecordError("changes truncated", key=key, offset=pos)
                flag, n = _VAL.unpack_from(data, pos)
                pos += _VAL.size
                if flag > 1 or pos + n > len(data) or (flag == 0 and n):
                    raise AnnotationRecordError("malformed change value", key=key, offset=pos - _VAL.size)
                vals.append(data[pos:pos + n] if flag else None)
                pos += n
            changes.append(KeyChange(k, vals[0], vals[1]))
        if pos != len(data):
            raise AnnotationRecordError("trailing bytes after the changes", key=key, offset=pos)
        return cls(changes=tuple(changes), **head)  # type: ignore[arg-type]
