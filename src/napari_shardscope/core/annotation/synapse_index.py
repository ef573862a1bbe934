"""The synapse index: one pair of versioned keys per synapse, filed under the supervoxel of each end.

A synapse is a ``pre`` annotation ``p`` holding ``PreSynTo q`` and a ``post`` annotation ``q``
holding ``PostSynTo p`` (relationships are stored on both ends, so both records agree). Its keys:

* ``b"y" + sv(p) (u64 BE) + b"o" + p + q`` → sv(q) (u64) and q's point (3 × i64): the outgoing end;
* ``b"y" + sv(q) (u64 BE) + b"i" + q + p`` → sv(p) and p's point: the incoming end.

``sv(a)`` is the supervoxel recorded in ``a``'s record (the one under its point when written).
Why supervoxels and not bodies: a supervoxel's synapses never change when the labelmap merges or
cleaves bodies (only the body map changes), so the index needs no write when the labelmap is
edited, on any branch, and is correct through undo, branch merges and remotes by construction — it
is versioned beside the records it is derived from, in the same transactions. ``connections(body)``
scans the prefixes of the body's supervoxels and maps the partners' supervoxels through the
version's body map, so a merged body's partners are the sum of its parts without reading any
synapse of another body; a supervoxel *split* (which retires a supervoxel) is the one edit after
which the synapses recorded on the retired supervoxel are re-resolved by the voxel under their
point (:mod:`.connectome`).

The keys of the synapses of annotation ``a`` depend on ``a``'s record and its partners'; an edit
that rewrites ``a``'s record recomputes exactly those (:func:`edge_items`), so the index always
equals what a scan of every record would derive (the model test checks it after every step).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from napari_shardscope.core.annotation.errors import AnnotationRecordError
from napari_shardscope.core.annotation.model import Point, Stored

EDGE_PREFIX = b"y"
OUT = b"o"
IN = b"i"
_KEY = struct.Struct(">Q1sQQ")
_VALUE = struct.Struct("<Q3q")
KEY_LEN = 1 + _KEY.size
VALUE_LEN = _VALUE.size


def edge_key(sv: int, direction: bytes, own: int, partner: int) -> bytes:
    return EDGE_PREFIX + _KEY.pack(sv, direction, own, partner)


def sv_prefix(sv: int) -> bytes:
    """Prefix of every synapse key filed under supervoxel ``sv``."""
    return EDGE_PREFIX + struct.pack(">Q", sv)


def decode_key(key: bytes) -> tuple[int, bytes, int, int]:
    """(supervoxel, direction, own id, partner id) of a synapse key."""
    if len(key) != KEY_LEN or key[:1] != EDGE_PREFIX:
        raise AnnotationRecordError(f"not a synapse index key: {key.hex()}")
    sv, d, own, partner = _KEY.unpack_from(key, 1)
    if d not in (OUT, IN):
        raise AnnotationRecordError(f"synapse index key with direction {d!r}: {key.hex()}")
    return int(sv), d, int(own), int(partner)


def encode_value(sv: int, point: Point) -> bytes:
    return _VALUE.pack(sv, *point)


def decode_value(raw: bytes, *, key: bytes) -> tuple[int, Point]:
    if len(raw) != _VALUE.size:
        raise AnnotationRecordError(f"synapse index value of {len(raw)} bytes (expected {_VALUE.size})",
                                    key=key.hex())
    sv, z, y, x = _VALUE.unpack(raw)
    return int(sv), (int(z), int(y), int(x))


def synapse_pairs(s: Stored, get: Callable[[int], Stored | None]) -> list[tuple[Stored, Stored]]:
    """The synapses ``(pre, post)`` annotation ``s`` is an end of, with both records mutually linked."""
    a = s.annotation
    out: list[tuple[Stored, Stored]] = []
    for r in a.relationships:
        if a.kind == "pre" and r.rel == "PreSynTo":
            other = get(r.to)
            if other is not None and other.annotation.kind == "post" and any(
                    x.rel == "PostSynTo" and x.to == a.id for x in other.annotation.relationships):
                out.append((s, other))
        elif a.kind == "post" and r.rel == "PostSynTo":
            other = get(r.to)
            if other is not None and other.annotation.kind == "pre" and any(
                    x.rel == "PreSynTo" and x.to == a.id for x in other.annotation.relationships):
                out.append((other, s))
    return out


def pair_items(pre: Stored, post: Stored) -> dict[bytes, bytes]:
    """The two keys (and values) of synapse ``pre`` → ``post``."""
    p, q = pre.annotation, post.annotation
    return {edge_key(pre.supervoxel, OUT, p.id, q.id): encode_value(post.supervoxel, q.point),
            edge_key(post.supervoxel, IN, q.id, p.id): encode_value(pre.supervoxel, p.point)}


def edge_items(s: Stored | None, get: Callable[[int], Stored | None]) -> dict[bytes, bytes]:
    """Every synapse key (with its value) that has ``s`` as an end, partners read through ``get``."""
    if s is None:
        return {}
    items: dict[bytes, bytes] = {}
    for pre, post in synapse_pairs(s, get):
        items.update(pair_items(pre, post))
    return items
