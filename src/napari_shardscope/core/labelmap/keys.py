"""Key layout of a labelmap instance in the versioned store.

Versioned keys (their value at a version is the nearest ancestor's, see the store):

* ``b"b" + scale (u8) + bz, by, bx (u32 BE)`` → an overlay label block (:mod:`.block_codec`):
  the supervoxel ids of that block at that scale after supervoxel splits. Big-endian coordinates
  make one scale's blocks one contiguous, z-major key range.
* ``b"o" + scale (u8)`` → how many overlay blocks the scale has (absent: none), so a reader knows
  without listing keys whether the base's own view serves the scale.
* ``b"i" + supervoxel (u64 BE)`` → label-index entry of a supervoxel created by a split
  (:mod:`.label_index`). Supervoxels of the base are indexed in the unversioned area instead.
* ``b"u" + mutation id (u64 BE)`` → the mutation's undo record: every key it wrote and what that key
  held before — the whole value for small records, only the changed rows for pages and id sets
  (:mod:`.undo_records`) — so undo can restore every record it changed exactly. The replay era kept
  one record per key, ``b"u" + mutation id + key`` (``b"\\x00"``: nothing; ``b"\\x01" + value``).
* the body map's records (:mod:`.records`): ``e`` pages of explicit assignments, ``p``/``q``/``n``/``r``
  union-find, logical-forest, ring and root records, ``a``/``x`` per-node member corrections;
  the undo and redo stacks (``U``, ``R``, ``k`` + mutation id) and per-body history (``h``).

Unversioned keys (shared by every version; derived from the immutable base):

* ``b"agglomeration/..."`` → the base supervoxel → body table, paged (:mod:`.agglomeration`);
* ``b"index/meta"`` (JSON) and ``b"index/t/..."`` → the base label index, paged (:mod:`.label_index`).

Counters (repository-wide, :meth:`Repository.allocate_ids`): ``labelmap/<name>/labels`` hands out
new body and supervoxel ids (one space, as in DVID, so a new body id is never a supervoxel id),
``labelmap/<name>/mutations`` the mutation ids.
"""

from __future__ import annotations

import struct

from napari_shardscope.core.errors import ArgumentError

Coord = tuple[int, int, int]

BLOCK_PREFIX = b"b"
INDEX_PREFIX = b"i"
UNDO_PREFIX = b"u"
OVERLAY_COUNT_PREFIX = b"o"
#: Keys of the replay era's unversioned base data (read only by the migration).
AGGLOMERATION_KEY = b"agglomeration"
INDEX_META_KEY = b"index/meta"
INDEX_SUMMARY_KEY = b"index/summary"
BASE_INDEX_PREFIX = b"index/sv/"

_BLOCK = struct.Struct(">BIII")
_U64 = struct.Struct(">Q")
_ABSENT = b"\x00"
_PRESENT = b"\x01"


def block_key(scale: int, block: Coord) -> bytes:
    """Key of the overlay block at grid position ``block`` (z, y, x) of ``scale``."""
    return BLOCK_PREFIX + _BLOCK.pack(scale, *block)


def block_prefix(scale: int | None = None) -> bytes:
    """Prefix of every overlay block key (of one scale when given)."""
    return BLOCK_PREFIX if scale is None else BLOCK_PREFIX + bytes([scale])


def parse_block_key(key: bytes) -> tuple[int, Coord]:
    """``(scale, (bz, by, bx))`` of a block key."""
    if len(key) != 1 + _BLOCK.size or not key.startswith(BLOCK_PREFIX):
        raise ArgumentError(f"not a labelmap block key: {key!r}")
    scale, z, y, x = _BLOCK.unpack_from(key, 1)
    return int(scale), (int(z), int(y), int(x))


def index_key(sv: int) -> bytes:
    """Versioned label-index key of supervoxel ``sv``."""
    return INDEX_PREFIX + _U64.pack(sv)


def parse_index_key(key: bytes) -> int:
    """The supervoxel of a versioned index key."""
    if len(key) != 9 or not key.startswith(INDEX_PREFIX):
        raise ArgumentError(f"not a labelmap index key: {key!r}")
    return int(_U64.unpack_from(key, 1)[0])


def base_index_key(sv: int) -> bytes:
    """The replay era's unversioned base label-index key of supervoxel ``sv`` (the migration reads it)."""
    return BASE_INDEX_PREFIX + _U64.pack(sv)


def overlay_count_key(scale: int) -> bytes:
    """Key of the count of overlay blocks of ``scale``."""
    return OVERLAY_COUNT_PREFIX + bytes([scale])


def undo_prefix(mutation_id: int) -> bytes:
    """Prefix of the saved previous values of one mutation."""
    return UNDO_PREFIX + _U64.pack(mutation_id)


def undo_key(mutation_id: int, key: bytes) -> bytes:
    """Where the value ``key`` had before mutation ``mutation_id`` is kept."""
    return undo_prefix(mutation_id) + key


def encode_previous(value: bytes | None) -> bytes:
    """A saved previous value: absent or present (an empty value is still a value)."""
    return _ABSENT if value is None else _PRESENT + value


def decode_previous(data: bytes) -> bytes | None:
    """Inverse of :func:`encode_previous`."""
    if data[:1] == _ABSENT and len(data) == 1:
        return None
    if data[:1] == _PRESENT:
        return data[1:]
    raise ArgumentError("malformed saved value in the labelmap's undo area")


_SAVED_MAGIC = b"SSUP"


def decode_saved(data: bytes) -> dict[bytes, bytes | None]:
    """An undo record of the first packed layout: every key a mutation wrote and its whole previous value.

    Written until undo records became deltas (:mod:`.undo_records`, which reads both layouts); kept
    for the records of existing stores. Layout: ``b"SSUP"``, u32 count, then per key u16 length, the
    key, and :func:`encode_previous` of its value behind a u32 length (:class:`ArgumentError` on damage).
    """
    if data[:4] != _SAVED_MAGIC or len(data) < 8:
        raise ArgumentError("malformed saved values in the labelmap's undo area")
    (count,) = struct.unpack_from("<I", data, 4)
    pos = 8
    out: dict[bytes, bytes | None] = {}
    try:
        for _ in range(count):
            (klen,) = struct.unpack_from("<H", data, pos)
            key = data[pos + 2:pos + 2 + klen]
            (vlen,) = struct.unpack_from("<I", data, pos + 2 + klen)
            start = pos + 6 + klen
            if len(key) != klen or start + vlen > len(data):
                raise ValueError("truncated")
            out[key] = decode_previous(data[start:start + vlen])
            pos = start + vlen
    except (struct.error, ValueError) as exc:
        raise ArgumentError(f"malformed saved values in the labelmap's undo area ({exc})") from exc
    if pos != len(data):
        raise ArgumentError("malformed saved values in the labelmap's undo area (trailing bytes)")
    return out


def labels_counter(name: str) -> str:
    """Counter handing out new body and supervoxel ids of labelmap ``name``."""
    return f"labelmap/{name}/labels"


def mutations_counter(name: str) -> str:
    """Counter handing out the mutation ids of labelmap ``name``."""
    return f"labelmap/{name}/mutations"
