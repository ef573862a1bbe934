"""An edit's undo record: what every key it wrote held before, stored as the change, not the value.

Each mutation keeps one record, ``u`` + mutation id (:func:`~.keys.undo_prefix`), naming every key it
wrote and what that key held before. The first layout (``SSUP``, :func:`~.keys.encode_saved`) kept
the whole previous value of each key, so a cleave of one supervoxel on a page of 4,096 explicit
assignments saved the whole 68 KB page, and a long history grew by the size of the pages it touched
(~8.5 KB per edit; 844 MB of a 1.13 GB store migrated from 10⁵ edits). As in DVID, where only the
changed keys are stored, this layout (``SSU2``) stores for the record kinds that are sorted rows —
explicit pages (``e``) and member-correction id sets (``a``, ``x``) — only the rows the edit changed
or removed, with their old bytes, and the keys of the rows it added. Undo rebuilds the old value
from the key's current value, which is what the edit wrote: undo and redo only ever invert the top
of their stack, and everything written after it was undone first, exactly. An 8-byte digest of the
old value is checked after the rebuild, so a record applied to anything else is a typed error, never
a silently wrong page. Every other key (small records, overlay blocks) keeps its whole previous value.

Layout: ``b"SSU2"``, u32 count, then per key: u16 key length, the key, u8 kind, u32 payload length,
payload. Kinds: :data:`ABSENT` (no payload), :data:`WHOLE` (the value), :data:`ROWS` (u8 row width,
u32 old rows, u32 added keys, the 8-byte digest, the old rows, the added keys as u64 LE). A row's key
is its first 8 bytes (u64 LE); a value is stored as rows only when its keys strictly increase.
Records of the first layout stay readable (:func:`read_undo_record` dispatches on the magic).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.keys import decode_saved
from napari_shardscope.core.labelmap.records import (
    ADDED_PREFIX,
    EXPLICIT_PREFIX,
    PAGE_DTYPE,
    REMOVED_PREFIX,
    RecordDecodeError,
)

MAGIC = b"SSU2"
OLD_MAGIC = b"SSUP"
ABSENT = 0
WHOLE = 1
ROWS = 2
#: Row width of the record kinds stored as row deltas (key prefix → bytes per row).
ROW_WIDTHS: dict[bytes, int] = {EXPLICIT_PREFIX: PAGE_DTYPE.itemsize, ADDED_PREFIX: 8, REMOVED_PREFIX: 8}
_HEAD = struct.Struct("<4sI")
_ENTRY = struct.Struct("<BI")
_ROWS = struct.Struct("<BII8s")
_KLEN = struct.Struct("<H")

#: Reads the current values of keys at the version being undone (``None``: absent).
ReadMany = Callable[[Sequence[bytes]], list[bytes | None]]


@dataclass(frozen=True)
class RowDelta:
    """The rows an edit changed in one sorted-rows value: their old bytes, the keys it added, the old digest."""

    width: int
    old_rows: bytes
    added: bytes
    digest: bytes


Saved = bytes | None | RowDelta


def digest_of(value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=8).digest()


def _rows(value: bytes, width: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]] | None:
    """A value as a (rows, width) byte matrix and its row keys; None unless whole rows with increasing keys."""
    if width < 8 or len(value) % width:
        return None
    m = np.frombuffer(value, dtype=np.uint8).reshape(-1, width)
    keys = np.ascontiguousarray(m[:, :8]).view("<u8").ravel().astype(np.uint64)
    if keys.size > 1 and not bool((keys[1:] > keys[:-1]).all()):
        return None
    return m, keys


def row_delta(old: bytes, new: bytes, width: int) -> RowDelta | None:
    """The delta that turns ``new`` back into ``old`` (None: not sorted rows, or no smaller than ``old``)."""
    a, b = _rows(old, width), _rows(new, width)
    if a is None or b is None:
        return None
    (om, ok), (nm, nk) = a, b
    at = np.minimum(np.searchsorted(nk, ok), max(nk.size - 1, 0))
    kept = np.zeros(ok.size, dtype=bool)
    if nk.size:
        hit = nk[at] == ok
        kept[hit] = (om[hit] == nm[at[hit]]).all(axis=1)
    changed = om[~kept]
    added = nk[~np.isin(nk, ok)].astype("<u8")
    delta = RowDelta(width, changed.tobytes(), added.tobytes(), digest_of(old))
    if _ROWS.size + len(delta.old_rows) + len(delta.added) >= len(old):
        return None
    return delta


def apply_row_delta(current: bytes | None, delta: RowDelta, *, what: str) -> bytes:
    """The old value ``delta`` was taken from, rebuilt from ``current`` (what the edit wrote); checked."""
    got = _rows(current or b"", delta.width)
    back = _rows(delta.old_rows, delta.width)
    if got is None or back is None or len(delta.added) % 8:
        raise LabelmapStateError(f"{what}: the saved rows do not fit the key's current value")
    (cm, ck), (bm, bk) = got, back
    added = np.frombuffer(delta.added, dtype="<u8").astype(np.uint64)
    keep = ~np.isin(ck, np.concatenate([added, bk]))
    rows = np.concatenate([cm[keep], bm]) if bm.size else cm[keep]
    keys = np.concatenate([ck[keep], bk])
    value = rows[np.argsort(keys, kind="stable")].tobytes()
    if digest_of(value) != delta.digest:
        raise LabelmapStateError(f"{what}: the key no longer holds what the mutation wrote (the saved change "
                                 "does not rebuild its previous value); the labelmap's records are inconsistent")
    return value


def encode_undo_record(previous: dict[bytes, bytes | None], new: dict[bytes, bytes | None]) -> bytes:
    """The undo record of a mutation that wrote ``new`` over ``previous`` (same keys)."""
    parts = [_HEAD.pack(MAGIC, len(previous))]
    for key, old in previous.items():
        width = ROW_WIDTHS.get(key[:1])
        now = new.get(key)
        delta = row_delta(old, now, width) if old is not None and now is not None and width else None
        if old is None:
            kind, payload = ABSENT, b""
        elif delta is not None:
            kind = ROWS
            payload = _ROWS.pack(delta.width, len(delta.old_rows) // delta.width, len(delta.added) // 8,
                                 delta.digest) + delta.old_rows + delta.added
        else:
            kind, payload = WHOLE, old
        parts += [_KLEN.pack(len(key)), key, _ENTRY.pack(kind, len(payload)), payload]
    return b"".join(parts)


def decode_undo_record(data: bytes, *, where: str) -> dict[bytes, Saved]:
    """The entries of an ``SSU2`` record (:class:`RecordDecodeError` naming ``where`` and the offset on damage)."""
    if len(data) < _HEAD.size or data[:4] != MAGIC:
        raise RecordDecodeError("not an undo record", key=where, offset=0)
    (count,) = _HEAD.unpack_from(data, 0)[1:]
    pos = _HEAD.size
    out: dict[bytes, Saved] = {}
    try:
        for _ in range(count):
            start = pos
            (klen,) = _KLEN.unpack_from(data, pos)
            key = data[pos + 2:pos + 2 + klen]
            kind, plen = _ENTRY.unpack_from(data, pos + 2 + klen)
            body = pos + 2 + klen + _ENTRY.size
            payload = data[body:body + plen]
            if len(key) != klen or len(payload) != plen:
                raise RecordDecodeError("undo record truncated", key=where, offset=start)
            if kind == ABSENT and not plen:
                out[key] = None
            elif kind == WHOLE:
                out[key] = payload
            elif kind == ROWS:
                width, n_old, n_added, digest = _ROWS.unpack_from(payload, 0)
                rows_end = _ROWS.size + n_old * width
                if width < 8 or rows_end + 8 * n_added != plen:
                    raise RecordDecodeError("undo record: row delta of the wrong length", key=where, offset=start)
                out[key] = RowDelta(width, payload[_ROWS.size:rows_end], payload[rows_end:], digest)
            else:
                raise RecordDecodeError(f"undo record: unknown entry kind {kind}", key=where, offset=start)
            pos = body + plen
    except struct.error as exc:
        raise RecordDecodeError(f"undo record truncated ({exc})", key=where, offset=pos) from exc
    if pos != len(data):
        raise RecordDecodeError("undo record: trailing bytes", key=where, offset=pos)
    return out


def read_undo_record(data: bytes, read: ReadMany, *, where: str) -> dict[bytes, bytes | None]:
    """Every key's previous value from a packed undo record of either layout; row deltas are rebuilt
    from the keys' current values (``read``), which must be what the mutation wrote."""
    if data[:4] == OLD_MAGIC:
        return decode_saved(data)
    entries = decode_undo_record(data, where=where)
    deltas = [k for k, v in entries.items() if isinstance(v, RowDelta)]
    current = dict(zip(deltas, read(deltas), strict=True)) if deltas else {}
    out: dict[bytes, bytes | None] = {}
    for key, saved in entries.items():
        if isinstance(saved, RowDelta):
            out[key] = apply_row_delta(current[key], saved, what=f"{where}, key {_show(key)}")
        else:
            out[key] = saved
    return out


def _show(key: bytes) -> str:
    return key[:1].decode(errors="replace") + key[1:].hex()
