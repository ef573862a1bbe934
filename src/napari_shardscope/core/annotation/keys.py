"""Key layout of an annotation instance in the versioned store.

Every key that describes an annotation carries its id, so an edit of one annotation writes only
its own keys, and the store's key-level three-way merge of two branches that edited *different*
annotations is exactly their id-level merge (:mod:`.branch_merge` decides the ids both edited):

* ``b"i" + id (u64 BE)`` → the record (:mod:`.model`);
* ``b"s" + bz, by, bx (u32 BE) + id`` → empty: the spatial index, one key per annotation in the
  block of the bound labelmap's block grid holding its point. Big-endian block coordinates make
  one row of blocks (fixed bz, by) one contiguous key range, so a box query is one range scan per
  row it overlaps;
* ``b"t" + tag (UTF-8) + b"\\x00" + id`` → empty: the tag index (tags hold no NUL);
* ``b"v" + supervoxel (u64 BE) + id`` → empty: the supervoxel index (format 3), one key per
  annotation under the supervoxel its record holds, so the annotations of a body are one prefix scan
  per supervoxel of the body (``synapses(body)``), not a read of every annotation in its blocks.

Edit bookkeeping (never conflicting between branches: keyed by version or by a repository-wide
mutation id):

* ``b"k" + mutation id`` → where the mutation's log record is and the entry below it on its stack;
* ``b"U" + version UUID (16 bytes)`` / ``b"R" + version UUID`` → the top of that version's undo /
  redo stack (a child version starts with empty stacks, as in the labelmap).

Counters (repository-wide, unique across branches): ``annotation/<name>/ids`` (ids the instance
hands out) and ``annotation/<name>/mutations``.
"""

from __future__ import annotations

import struct

from napari_shardscope.core.annotation.errors import AnnotationRecordError

RECORD_PREFIX = b"i"
SPATIAL_PREFIX = b"s"
TAG_PREFIX = b"t"
SUPERVOXEL_PREFIX = b"v"
LINK_PREFIX = b"k"
UNDO_PREFIX = b"U"
REDO_PREFIX = b"R"
#: Prefixes of the keys that describe annotations (what a branch merge reconciles id by id).
DATA_PREFIXES = (RECORD_PREFIX, SPATIAL_PREFIX, TAG_PREFIX, SUPERVOXEL_PREFIX)

_U64 = struct.Struct(">Q")
_BLOCK = struct.Struct(">III")
_LINK = struct.Struct("<Q16sQ")
MAX_BLOCK = 2**32 - 1


def record_key(aid: int) -> bytes:
    return RECORD_PREFIX + _U64.pack(aid)


def id_of_record_key(key: bytes) -> int:
    if len(key) != 9 or key[:1] != RECORD_PREFIX:
        raise AnnotationRecordError(f"not an annotation record key: {key.hex()}")
    return int(_U64.unpack_from(key, 1)[0])


def block_row(bz: int, by: int) -> bytes:
    """Prefix of the spatial keys of one row of blocks."""
    return SPATIAL_PREFIX + struct.pack(">II", bz, by)


def spatial_key(block: tuple[int, int, int], aid: int) -> bytes:
    return SPATIAL_PREFIX + _BLOCK.pack(*block) + _U64.pack(aid)


def spatial_block_prefix(block: tuple[int, int, int]) -> bytes:
    return SPATIAL_PREFIX + _BLOCK.pack(*block)


def supervoxel_prefix(sv: int) -> bytes:
    """Prefix of the supervoxel-index keys of the annotations recorded under supervoxel ``sv``."""
    return SUPERVOXEL_PREFIX + _U64.pack(sv)


def supervoxel_key(sv: int, aid: int) -> bytes:
    return SUPERVOXEL_PREFIX + _U64.pack(sv) + _U64.pack(aid)


def tag_prefix(tag: str) -> bytes:
    return TAG_PREFIX + tag.encode("utf-8") + b"\x00"


def tag_key(tag: str, aid: int) -> bytes:
    return tag_prefix(tag) + _U64.pack(aid)


def id_of_index_key(key: bytes) -> int:
    """The annotation id an index key (spatial or tag) ends with."""
    if len(key) < 9:
        raise AnnotationRecordError(f"not an annotation index key: {key.hex()}")
    return int(_U64.unpack_from(key, len(key) - 8)[0])


def undo_top_key(version: str) -> bytes:
    return UNDO_PREFIX + bytes.fromhex(version)


def redo_top_key(version: str) -> bytes:
    return REDO_PREFIX + bytes.fromhex(version)


def link_key(mutation_id: int) -> bytes:
    return LINK_PREFIX + _U64.pack(mutation_id)


def encode_u64(value: int) -> bytes:
    return _U64.pack(value)


def decode_u64(raw: bytes, *, key: bytes) -> int:
    if len(raw) != 8:
        raise AnnotationRecordError(f"stack top of {len(raw)} bytes (expected 8)", key=key.hex())
    return int(_U64.unpack(raw)[0])


def encode_link(below: int, version: str, seq: int) -> bytes:
    """A stack entry: the mutation below it (0: bottom) and where its log record is (version UUID, seq)."""
    return _LINK.pack(below, bytes.fromhex(version), seq)


def decode_link(raw: bytes, *, key: bytes) -> tuple[int, str, int]:
    if len(raw) != _LINK.size:
        raise AnnotationRecordError(f"stack link of {len(raw)} bytes (expected {_LINK.size})", key=key.hex())
    below, uuid, seq = _LINK.unpack(raw)
    return int(below), uuid.hex(), int(seq)


def ids_counter(name: str) -> str:
    return f"annotation/{name}/ids"


def mutations_counter(name: str) -> str:
    return f"annotation/{name}/mutations"
