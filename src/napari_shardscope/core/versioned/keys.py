"""Key layout of the versioned store, as in DVID (paper §2.3, Figure 5).

A data key is ``instance id (4 bytes) + type-specific key (escaped) + version id (4 bytes) +
tombstone flag (1 byte)``, all big-endian, in that order. Because the version id comes *after* the
type-specific key, every version of one key sits together in the ordered engine: a read at a
version is one short range scan over those neighbours, and the in-memory DAG picks the nearest
ancestor's entry. A tombstone entry (flag 1) hides its ancestors' values.

The type-specific key is variable-length (``keyvalue`` keys are arbitrary strings), so it is
escaped order-preservingly: ``0x00`` becomes ``0x00 0xFF`` and the key ends with ``0x00 0x01``.
Without that, the versions of key ``a`` would interleave with the key ``a\\x00...`` and prefix and
range scans could not be expressed as single engine ranges. With it, ``escape`` is a byte-wise
homomorphism that preserves order, so a prefix or a ``[start, stop)`` range of type-specific keys
is exactly one range of engine keys.

Instance id 0 is reserved for the repository's own metadata (format, DAG, instances, notes,
per-version logs), which therefore lives in the same engine and changes in the same transactions
as the data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from napari_shardscope.core.errors import ArgumentError

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

VALUE = 0
TOMBSTONE = 1
MAX_ID = 2**32 - 1
#: Bytes after the escaped type-specific key: version id + tombstone flag.
SUFFIX_LEN = 5
_TERMINATOR = b"\x00\x01"
TERMINATOR = _TERMINATOR

META = _U32.pack(0)
FORMAT_KEY = META + b"f"
GENERATION_KEY = META + b"g"
VERSION_PREFIX = META + b"v"
INSTANCE_PREFIX = META + b"i"
NOTE_PREFIX = META + b"n"
LOG_PREFIX = META + b"l"
CHANGE_PREFIX = META + b"c"
COUNTER_PREFIX = META + b"a"
UNVERSIONED_PREFIX = META + b"u"
#: Per instance, a counter every write to its unversioned data bumps (a remote sync's "unchanged since" mark).
UNVERSIONED_GENERATION_PREFIX = META + b"w"
#: Id blocks reserved from a remote, per counter (a clone allocates only from these).
RESERVATION_PREFIX = META + b"r"
#: Present (holding the remote's name) when every counter must allocate from reserved blocks.
RESERVATION_MODE_KEY = META + b"R"
# Format 2: the DAG as small records read on demand (see :mod:`.dagindex`), instead of every version
# record read at open.
#: ``+ 32 hex characters`` -> version id (u32): UUIDs and UUID prefixes resolved by one range scan.
UUID_PREFIX = META + b"U"
#: ``+ branch name (UTF-8)`` -> the branch's base, head and length (JSON).
BRANCH_PREFIX = META + b"b"
#: ``+ parent id + child id`` -> empty: the children of a version by one range scan.
CHILD_PREFIX = META + b"k"
#: ``+ version id`` -> the version's ancestor page table (:mod:`.ancestry`).
ANCESTOR_PREFIX = META + b"A"
#: ``+ owner version id + page number`` -> one page of an ancestor bitmap (:mod:`.ancestry`).
ANCESTOR_PAGE_PREFIX = META + b"P"
#: ``+ generation (u64)`` -> ids of the versions whose records that generation rewrote (JSON list; only
#: for generations that rewrote some, ``*`` for "all"): another handle re-reads only those after a write.
JOURNAL_PREFIX = META + b"J"


@dataclass(frozen=True)
class DataKey:
    """A decoded data key."""

    instance_id: int
    tkey: bytes
    version_id: int
    tombstone: bool


def pack_u32(value: int) -> bytes:
    """Big-endian 4 bytes, so that numeric order is byte order."""
    if not 0 <= value <= MAX_ID:
        raise ArgumentError(f"id {value} out of range 0..{MAX_ID}")
    return _U32.pack(value)


def unpack_u32(data: bytes) -> int:
    """Inverse of :func:`pack_u32`."""
    return int(_U32.unpack(data)[0])


def pack_u64(value: int) -> bytes:
    """Big-endian 8 bytes (sequence numbers of notes and log entries)."""
    return _U64.pack(value)


def unpack_u64(data: bytes) -> int:
    """Inverse of :func:`pack_u64`."""
    return int(_U64.unpack(data)[0])


def escape_tkey(tkey: bytes) -> bytes:
    """Order-preserving escape of a type-specific key, without its terminator."""
    return tkey.replace(b"\x00", b"\x00\xff")


def unescape_tkey(escaped: bytes) -> bytes:
    """Inverse of :func:`escape_tkey`."""
    return escaped.replace(b"\x00\xff", b"\x00")


def key_stem(instance_id: int, tkey: bytes) -> bytes:
    """The bytes shared by every version of ``tkey`` in the instance (everything but the suffix)."""
    return _U32.pack(instance_id) + escape_tkey(tkey) + _TERMINATOR


def encode_data_key(instance_id: int, tkey: bytes, version_id: int, tombstone: bool = False) -> bytes:
    """The engine key of one version's entry for ``tkey``."""
    return key_stem(instance_id, tkey) + _U32.pack(version_id) + (b"\x01" if tombstone else b"\x00")


def entry_key(stem: bytes, version_id: int, tombstone: bool) -> bytes:
    """An entry key from a precomputed :func:`key_stem` (the hot path avoids re-escaping)."""
    return stem + _U32.pack(version_id) + (b"\x01" if tombstone else b"\x00")


def decode_data_key(key: bytes) -> DataKey:
    """Split an engine data key into its parts."""
    return DataKey(
        instance_id=int(_U32.unpack_from(key, 0)[0]),
        tkey=unescape_tkey(key[4:-SUFFIX_LEN - 2]),
        version_id=int(_U32.unpack_from(key, len(key) - SUFFIX_LEN)[0]),
        tombstone=key[-1] == TOMBSTONE,
    )


def stem_range(stem: bytes) -> tuple[bytes, bytes]:
    """Engine range ``[lo, hi)`` holding every version entry of one key stem.

    The stem ends with the terminator ``0x00 0x01``; any longer type-specific key continues with a
    byte > 0x00 or with ``0x00 0xFF``, so ``stem[:-1] + 0x02`` bounds exactly this key's entries.
    """
    return stem, stem[:-1] + b"\x02"


def next_prefix(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix`` (None: no bound)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def prefix_range(instance_id: int, prefix: bytes) -> tuple[bytes, bytes]:
    """Engine range of every entry whose type-specific key starts with ``prefix``."""
    lo = _U32.pack(instance_id) + escape_tkey(prefix)
    hi = next_prefix(lo)
    assert hi is not None  # the instance id is < 2**32 - 1 or the prefix is non-empty
    return lo, hi


def tkey_range(instance_id: int, start: bytes | None, stop: bytes | None) -> tuple[bytes, bytes]:
    """Engine range of every entry whose type-specific key is in ``[start, stop)``.

    ``escape(start)`` (without terminator) sorts at or before the encoding of ``start`` and after
    the encoding of every smaller key, so plain escaped bounds give the exact range.
    """
    base = _U32.pack(instance_id)
    lo = base + escape_tkey(start) if start is not None else base
    if stop is not None:
        hi = base + escape_tkey(stop)
    else:
        upper = next_prefix(base)
        assert upper is not None
        hi = upper
    return lo, hi


def split_entry(key: bytes) -> tuple[bytes, int, bool]:
    """``(stem, version id, tombstone)`` of an engine data key, without unescaping (hot path)."""
    n = len(key) - SUFFIX_LEN
    return key[:n], int(_U32.unpack_from(key, n)[0]), key[-1] == TOMBSTONE


def tkey_of_stem(stem: bytes) -> bytes:
    """The type-specific key of a stem."""
    return unescape_tkey(stem[4:-2])


def version_record_key(version_id: int) -> bytes:
    """Where a version's record lives."""
    return VERSION_PREFIX + _U32.pack(version_id)


def uuid_key(uuid: str) -> bytes:
    """Where the id of the version with this (full, lowercase hex) UUID lives."""
    return UUID_PREFIX + uuid.encode("ascii")


def branch_key(name: str) -> bytes:
    """Where branch ``name``'s record lives."""
    return BRANCH_PREFIX + name.encode("utf-8")


def child_prefix(parent_id: int) -> bytes:
    """Prefix of the child-index keys of a version."""
    return CHILD_PREFIX + _U32.pack(parent_id)


def child_key(parent_id: int, child_id: int) -> bytes:
    """Child-index key: ``child_id`` is a child of ``parent_id``."""
    return CHILD_PREFIX + _U32.pack(parent_id) + _U32.pack(child_id)


def journal_key(generation: int) -> bytes:
    """Where the list of versions a generation rewrote lives."""
    return JOURNAL_PREFIX + _U64.pack(generation)


def instance_record_key(instance_id: int) -> bytes:
    """Where a data instance's record lives."""
    return INSTANCE_PREFIX + _U32.pack(instance_id)


def note_key(version_id: int, seq: int) -> bytes:
    """Where note number ``seq`` of a version lives (append-only)."""
    return NOTE_PREFIX + _U32.pack(version_id) + _U64.pack(seq)


def log_prefix(instance_id: int, version_id: int | None = None) -> bytes:
    """Prefix of an instance's per-version log entries (of one version when given).

    Log keys are ``instance + version + seq``: version ids grow in creation order, which is a
    topological order of the DAG, so one scan over the instance's log prefix yields the entries of
    all versions parents-first — the order a replay (the labelmap's label map) needs.
    """
    head = LOG_PREFIX + _U32.pack(instance_id)
    return head if version_id is None else head + _U32.pack(version_id)


def log_key(instance_id: int, version_id: int, seq: int) -> bytes:
    """Where log entry ``seq`` of an instance in a version lives."""
    return log_prefix(instance_id, version_id) + _U64.pack(seq)


def unversioned_prefix(instance_id: int, prefix: bytes = b"") -> bytes:
    """Prefix of an instance's unversioned keys (that start with ``prefix``).

    Unversioned keys hold data every version shares and none may change (e.g. a labelmap's index
    of its immutable base volume). They live in the metadata area, so they carry no version id,
    no tombstone and no change-index entry, and are written whether or not any version is open.
    """
    return UNVERSIONED_PREFIX + _U32.pack(instance_id) + prefix


def unversioned_generation_key(instance_id: int) -> bytes:
    """Where the count of writes to an instance's unversioned data lives (u64)."""
    return UNVERSIONED_GENERATION_PREFIX + _U32.pack(instance_id)


def unversioned_key(instance_id: int, key: bytes) -> bytes:
    """Engine key of an instance's unversioned ``key`` (raw, not escaped: it is never mixed with versions)."""
    if not isinstance(key, bytes) or not key:
        raise ArgumentError(f"unversioned keys must be non-empty bytes, got {key!r}")
    return unversioned_prefix(instance_id, key)


def change_prefix(version_id: int, instance_id: int | None = None) -> bytes:
    """Prefix of the change index of a version (of one instance when given).

    The change index is a version-first list of the data keys a version holds entries for. It
    costs one small extra key per write and makes "what changed in this version" and merges (which
    must find every key touched on either side since the common ancestor) cost the size of the
    change, not the size of the store.
    """
    head = CHANGE_PREFIX + _U32.pack(version_id)
    return head if instance_id is None else head + _U32.pack(instance_id)


def change_key(version_id: int, stem: bytes) -> bytes:
    """Change-index key of ``stem`` (instance id + escaped key) in a version."""
    return CHANGE_PREFIX + _U32.pack(version_id) + stem


def stem_of_change_key(key: bytes) -> bytes:
    """The data stem recorded by a change-index key."""
    return key[len(CHANGE_PREFIX) + 4:]
