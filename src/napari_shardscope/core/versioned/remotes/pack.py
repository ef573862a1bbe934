"""Encoding of what a remote stores: node objects, data objects and unversioned objects.

Every object is named by the SHA-256 of its stored bytes (``objects/ab/cdef…``), so it is
immutable, a reader verifies what it got, and an interrupted push resumes by skipping the objects
already there. A committed version is *one node object* (its record, notes, the object hashes of
its parents' nodes and of its data objects) plus as few *data objects* as its size needs (its
key-values and log entries, cut at :data:`DATA_OBJECT_BYTES`). Parents are named by hash as well
as UUID, so a fetch walks the history from a branch head with reads alone: no listing, which a
read-only HTTP remote does not offer.

Data records are binary (a label block is 28 KB of bytes; base64 in JSON would add a third):
``b"E" u16 instance, u32 key length, key, u8 tombstone, u32 value length, value`` for a key-value
and ``b"L" u16 instance, u64 seq, u32 length, data`` for a log entry; each object is zlib-framed.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from sys import intern
from typing import Any

from napari_shardscope.core.encoding import inflate, zlib_compress
from napari_shardscope.core.errors import ArgumentError, FormatError
from napari_shardscope.core.json_document import load_json
from napari_shardscope.core.versioned.dag import check_branch_name
from napari_shardscope.core.versioned.hollow import encode_stub
from napari_shardscope.core.versioned.instance import check_instance_name
from napari_shardscope.core.versioned.node import NodeContent, NodeEntry, NodeLog, NodeNote
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError

NODE_MAGIC = b"SSNODE1\n"
DATA_MAGIC = b"SSDATA1\n"
KV_MAGIC = b"SSKV001\n"
#: A node's key listing: every key it writes or deletes and log entry it appends, with where each value sits in
#: its data objects (what a lazy clone adopts instead of the values).
KEYS_MAGIC = b"SSKEYS1\n"
#: Node objects and key listings of many versions in one object (a push's history pack), so a fetch walks a
#: history of any length in a few requests instead of one per version.
PACK_MAGIC = b"SSPACK1\n"
#: Data objects are cut at about this many bytes (before compression): big enough that a node is a
#: few objects, small enough that a retry after an interruption repeats little.
DATA_OBJECT_BYTES = 32 * 1024 * 1024
#: The most a stored object may hold, and inflate to (a hostile remote cannot make a fetch allocate more).
MAX_OBJECT_BYTES = 256 * 1024 * 1024
#: The most a node object may inflate to: its record is a JSON header (UUIDs, object names, notes).
MAX_NODE_BYTES = 16 * 1024 * 1024
#: An object may inflate to at most this many times its stored size (or :data:`INFLATE_FLOOR` bytes,
#: whichever is more). Honest objects stay far below (label blocks and index pages are compressed
#: already, logs and records are JSON or binary ids: about 1-10), and writers store an object that
#: would exceed it uncompressed (:func:`frame`); a zlib bomb — a few hundred KB inflating to
#: gigabytes at deflate's ~1000:1 — is refused after ``MAX_INFLATE_RATIO`` times its size of work,
#: not after :data:`MAX_OBJECT_BYTES`.
MAX_INFLATE_RATIO = 100
#: Objects inflating to at most this many bytes are never refused for their ratio.
INFLATE_FLOOR = 8 * 1024 * 1024
#: The deflate level objects are framed at: fast (a push compresses every new object) and what the
#: format has always used. The frame is a zlib stream (RFC 1950), as written by every earlier version, so
#: objects pushed before libdeflate did the compressing read unchanged (and old readers read new ones).
PACK_LEVEL = 1
_E = struct.Struct(">cHI")
_V = struct.Struct(">BI")
_L = struct.Struct(">cHQI")
_KV = struct.Struct(">II")
_KE = struct.Struct(">cHI")
_KEV = struct.Struct(">BHII")
_KL = struct.Struct(">cHQHII")
_PACKED = struct.Struct(">I")
#: Objects up to this many stored bytes are inflated by CPython's zlib in one call: a clone decodes two
#: such objects (a node record of ~300 bytes, a key listing) per version of the history, and for those
#: the fixed cost of a libdeflate call through ctypes is most of the work (10⁵ versions: seconds).
SMALL_OBJECT_BYTES = 64 * 1024


_OBJECT = re.compile(r"[0-9a-f]{64}")
_UUID = re.compile(r"[0-9a-f]{32}")


def check_object_name(name: object, where: str) -> str:
    """``name`` if it is an object name (64 lowercase hex); :class:`CorruptObjectError` naming ``where``.

    Every object name a remote hands us (in refs, in a node object) becomes a store key
    (:func:`object_key`); a name with ``/`` or ``..`` would read outside ``objects/``.
    """
    if not isinstance(name, str) or not _OBJECT.fullmatch(name):
        raise CorruptObjectError(f"{where}: {str(name)[:80]!r} is not an object name (64 hex digits)")
    return name


def check_uuid(uuid: object, where: str) -> str:
    """``uuid`` if it is a version UUID (32 lowercase hex); :class:`CorruptObjectError` naming ``where``."""
    if not isinstance(uuid, str) or not _UUID.fullmatch(uuid):
        raise CorruptObjectError(f"{where}: {str(uuid)[:80]!r} is not a version UUID (32 hex digits)")
    return uuid


def check_remote_branch(name: object, where: str) -> str:
    """A branch name read from a remote, checked by the local grammar (:func:`check_branch_name`)."""
    try:
        return check_branch_name(name)  # type: ignore[arg-type]
    except ArgumentError as exc:
        raise CorruptObjectError(f"{where}: {exc}") from None


def check_remote_instance(name: object, where: str) -> str:
    """An instance name read from a remote, checked by the local grammar (:func:`check_instance_name`)."""
    try:
        return check_instance_name(name)
    except ArgumentError as exc:
        raise CorruptObjectError(f"{where}: {exc}") from None


def load_remote_json(data: bytes, where: str, max_bytes: int) -> dict[str, Any]:
    """A JSON object read from a remote, through the project's bounded loader (size, depth, byte offset)."""
    try:
        doc = load_json(data, key=where, max_bytes=max_bytes)
    except FormatError as exc:
        raise CorruptObjectError(str(exc)) from None
    if not isinstance(doc, dict):
        raise CorruptObjectError(f"{where}: not a JSON object")
    return doc


def object_name(data: bytes) -> str:
    """The content hash naming ``data`` (64 hex characters)."""
    return hashlib.sha256(data).hexdigest()


def object_key(name: str) -> str:
    """Where object ``name`` lives under the remote's root (``name`` must be 64 hex digits)."""
    check_object_name(name, "object key")
    return f"objects/{name[:2]}/{name[2:]}"


def inflate_bound(stored: int, cap: int) -> int:
    """The most an object of ``stored`` bytes may inflate to: its kind's ``cap``, and the ratio bound."""
    return min(cap, max(INFLATE_FLOOR, MAX_INFLATE_RATIO * stored))


def _cap(magic: bytes) -> int:
    return MAX_NODE_BYTES if magic == NODE_MAGIC else MAX_OBJECT_BYTES


def _frame(magic: bytes, payload: bytes) -> bytes:
    """``magic`` + the zlib stream of ``payload``; stored uncompressed (zlib level 0) when compressing would
    pass the ratio every reader enforces (:func:`inflate_bound`), so no honest object is refused as a bomb."""
    framed = magic + zlib_compress(payload, PACK_LEVEL)
    if len(payload) > inflate_bound(len(framed), _cap(magic)):
        framed = magic + zlib_compress(payload, 0)
    return framed


def _unframe(magic: bytes, data: bytes, name: str) -> bytes:
    """The payload of a framed object, inflated within :func:`inflate_bound` of its stored size.

    The bound is known before inflating (the stored size and the object's kind), and the inflate
    stops at it, so a bomb with a valid hash costs at most that much memory and work, then a
    :class:`CorruptObjectError` naming it.
    """
    if not data.startswith(magic):
        raise CorruptObjectError(f"object {name}: not a {magic[:-1].decode()} object")
    bound = inflate_bound(len(data), _cap(magic))
    if len(data) <= SMALL_OBJECT_BYTES:
        d = zlib.decompressobj()
        try:
            out = d.decompress(memoryview(data)[len(magic):], bound + 1)
        except zlib.error:
            pass  # the general path below names the fault and its byte
        else:
            if d.eof and not d.unused_data and len(out) <= bound:
                return out
            # anything else (a truncated stream, bytes after it, past the bound): judged by the path below
    try:
        # offset: the stream starts after the magic, so a damage is named by its byte in the stored object
        return inflate(data[len(magic):], key=object_key(name), offset=len(magic), max_size=bound)
    except FormatError as exc:
        raise CorruptObjectError(f"object {name}: {exc}") from exc  # a bomb: "decodes to more than {bound} bytes"


def verify(name: str, data: bytes) -> bytes:
    """``data`` if it hashes to ``name``; :class:`CorruptObjectError` otherwise."""
    if object_name(data) != name:
        raise CorruptObjectError(f"object {name}: content does not match its hash (damaged or tampered)")
    return data


@dataclass(frozen=True, slots=True)
class NodeHeader:
    """A decoded node object: the version record and where its parents and data are.

    A clone holds one per version of the history until it has checked them all (slots, and the
    UUIDs and object names shared with the parents' headers: about half the memory at 10⁵ versions).
    """

    uuid: str
    parents: tuple[tuple[str, str], ...]  # (uuid, node object)
    branch: str
    message: str
    created: float
    committed: float
    notes: tuple[NodeNote, ...]
    instances: tuple[str, ...]
    data: tuple[str, ...]  # data object names
    entries: int
    logs: int
    region: Any = None
    keys: str | None = None  # the key listing object (nodes pushed before listings have none)


def encode_data(node: NodeContent) -> tuple[list[bytes], tuple[str, ...]]:
    """The node's data objects (framed) and the instance table their records index."""
    objects, instances, _ = encode_data_and_keys(node)
    return objects, instances


def encode_data_and_keys(node: NodeContent) -> tuple[list[bytes], tuple[str, ...], bytes]:
    """The node's data objects (framed), the instance table their records index, and its key listing.

    The listing names, per key-value and log entry, the data object and the byte range of its value in
    that object's inflated payload (:func:`decode_keys`): a lazy clone reads one value by downloading
    one object, and knows every key a version wrote without downloading any.
    """
    instances = tuple(sorted(node.instances))
    index = {n: i for i, n in enumerate(instances)}
    objects: list[bytes] = []
    parts: list[bytes] = []
    listing: list[bytes] = []
    size = 0

    def flush() -> None:
        nonlocal parts, size
        if parts:
            objects.append(_frame(DATA_MAGIC, b"".join(parts)))
            parts, size = [], 0

    for e in node.entries:
        value = b"" if e.value is None else e.value
        head = _E.pack(b"E", index[e.instance], len(e.key)) + e.key + _V.pack(e.value is None, len(value))
        listing.append(_KE.pack(b"E", index[e.instance], len(e.key)) + e.key
                       + _KEV.pack(e.value is None, len(objects), size + len(head), len(value)))
        parts.append(head + value)
        size += len(head) + len(value)
        if size >= DATA_OBJECT_BYTES:
            flush()
    for g in node.logs:
        head = _L.pack(b"L", index[g.instance], g.seq, len(g.data))
        listing.append(_KL.pack(b"L", index[g.instance], g.seq, len(objects), size + len(head), len(g.data)))
        parts.append(head + g.data)
        size += len(head) + len(g.data)
        if size >= DATA_OBJECT_BYTES:
            flush()
    flush()
    return objects, instances, _frame(KEYS_MAGIC, b"".join(listing))


def decode_keys(name: str, data: bytes, header: NodeHeader) -> list[NodeEntry | NodeLog]:
    """A node's key listing (after :func:`verify`) as records whose values are stubs (:mod:`~..hollow`).

    Tombstones stay tombstones (no value to fetch); every stub names a data object the node has.
    """
    raw = _unframe(KEYS_MAGIC, data, name)
    out: list[NodeEntry | NodeLog] = []
    pos, n = 0, len(raw)
    try:
        while pos < n:
            kind = raw[pos:pos + 1]
            if kind == b"E":
                _, inst, klen = _KE.unpack_from(raw, pos)
                pos += _KE.size
                key = raw[pos:pos + klen]
                pos += klen
                tomb, obj, offset, length = _KEV.unpack_from(raw, pos)
                pos += _KEV.size
                if len(key) != klen or (not tomb and obj >= len(header.data)):
                    raise ValueError("record runs past the end or names a data object the node lacks")
                out.append(NodeEntry(header.instances[inst], key, None if tomb else encode_stub(obj, offset, length)))
            elif kind == b"L":
                _, inst, seq, obj, offset, length = _KL.unpack_from(raw, pos)
                pos += _KL.size
                if obj >= len(header.data):
                    raise ValueError("a log record names a data object the node lacks")
                out.append(NodeLog(header.instances[inst], seq, encode_stub(obj, offset, length)))
            else:
                raise ValueError(f"unknown record kind {kind!r}")
    except (struct.error, IndexError, ValueError) as exc:
        raise CorruptObjectError(f"object {name}: bad key listing record at byte {pos} ({exc})") from exc
    return out


def encode_pack(objects: Sequence[bytes]) -> bytes:
    """A history pack: node objects and key listings of many versions, each kept byte for byte."""
    return _frame(PACK_MAGIC, b"".join(_PACKED.pack(len(o)) + o for o in objects))


def decode_pack(name: str, data: bytes) -> dict[str, bytes]:
    """Inverse of :func:`encode_pack` (after :func:`verify`): object name (its hash, computed here) → bytes."""
    raw = _unframe(PACK_MAGIC, data, name)
    out: dict[str, bytes] = {}
    pos = 0
    try:
        while pos < len(raw):
            (size,) = _PACKED.unpack_from(raw, pos)
            pos += _PACKED.size
            obj = raw[pos:pos + size]
            pos += size
            if len(obj) != size:
                raise ValueError("object runs past the end")
            out[object_name(obj)] = obj
    except (struct.error, ValueError) as exc:
        raise CorruptObjectError(f"object {name}: bad pack record at byte {pos} ({exc})") from exc
    return out


def encode_node(node: NodeContent, parent_objects: Mapping[str, str], data_names: Sequence[str],
                instances: Sequence[str], region: Any = None, keys: str | None = None) -> bytes:
    """The node object of ``node`` (deterministic: the same node always hashes the same)."""
    header: dict[str, Any] = {
        "uuid": node.uuid, "parents": [[p, parent_objects[p]] for p in node.parents], "branch": node.branch,
        "message": node.message, "created": node.created, "committed": node.committed,
        "notes": [[n.seq, n.time, n.text] for n in node.notes], "instances": list(instances),
        "data": list(data_names), "entries": len(node.entries), "logs": len(node.logs),
    }
    if region is not None:
        header["region"] = region
    if keys is not None:
        header["keys"] = keys
    return _frame(NODE_MAGIC, json.dumps(header, sort_keys=True, separators=(",", ":")).encode())


def _flat_record(raw: bytes) -> dict[str, Any] | None:
    """``raw`` as a JSON object nested at most three levels (a node record's shape), else None.

    A clone decodes one node record per version; the general loader's depth walk is half of that
    work. Records of that shape pass every check :func:`load_remote_json` makes (UTF-8, valid JSON,
    nesting far below its limit; the size is bounded by the inflate), so only other documents go
    through it, with its errors.
    """
    if len(raw) > MAX_NODE_BYTES:
        return None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    for value in doc.values():
        if isinstance(value, dict):
            return None
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict) or (isinstance(item, list)
                                              and any(isinstance(x, (list, dict)) for x in item)):
                    return None
    return doc


def decode_node(name: str, data: bytes) -> NodeHeader:
    """Inverse of :func:`encode_node` (after :func:`verify`)."""
    raw = _unframe(NODE_MAGIC, data, name)
    where = f"object {name}"
    h = _flat_record(raw)
    if h is None:  # not the usual flat record: the bounded loader accepts or refuses it, naming why and where
        h = load_remote_json(raw, where, MAX_NODE_BYTES)
    try:
        parents = tuple((intern(check_uuid(p, where)), intern(check_object_name(o, where))) for p, o in h["parents"])
        header = NodeHeader(
            uuid=intern(check_uuid(h["uuid"], where)), parents=parents,
            branch=intern(check_remote_branch(h["branch"], where)),
            message=str(h["message"]), created=float(h["created"]), committed=float(h["committed"]),
            notes=tuple(NodeNote(int(s), float(t), str(x)) for s, t, x in h["notes"]),
            instances=tuple(intern(check_remote_instance(i, where)) for i in h["instances"]),
            data=tuple(check_object_name(d, where) for d in h["data"]),
            entries=int(h["entries"]), logs=int(h["logs"]), region=h.get("region"),
            keys=None if h.get("keys") is None else check_object_name(h["keys"], where))
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise CorruptObjectError(f"{where}: unreadable node record ({exc})") from exc
    if header.entries < 0 or header.logs < 0:
        raise CorruptObjectError(f"{where}: negative record counts")
    return header


def decode_data(name: str, data: bytes, instances: Sequence[str]) -> Iterator[NodeEntry | NodeLog]:
    """The records of a data object (after :func:`verify`)."""
    return (record for record, _ in data_records_at(name, data, instances))


def data_records_at(name: str, data: bytes, instances: Sequence[str]) -> Iterator[tuple[NodeEntry | NodeLog, int]]:
    """The records of a data object, each with the byte where its value starts in the inflated payload:
    where a key listing must point (:func:`decode_keys`, checked by ``remote check``)."""
    raw = _unframe(DATA_MAGIC, data, name)
    pos, n = 0, len(raw)
    try:
        while pos < n:
            kind = raw[pos:pos + 1]
            if kind == b"E":
                _, inst, klen = _E.unpack_from(raw, pos)
                pos += _E.size
                key = raw[pos:pos + klen]
                pos += klen
                tomb, vlen = _V.unpack_from(raw, pos)
                pos += _V.size
                value = raw[pos:pos + vlen]
                if len(key) != klen or len(value) != vlen:
                    raise ValueError("record runs past the end")
                yield NodeEntry(instances[inst], key, None if tomb else value), pos
                pos += vlen
            elif kind == b"L":
                _, inst, seq, dlen = _L.unpack_from(raw, pos)
                pos += _L.size
                payload = raw[pos:pos + dlen]
                if len(payload) != dlen:
                    raise ValueError("record runs past the end")
                yield NodeLog(instances[inst], seq, payload), pos
                pos += dlen
            else:
                raise ValueError(f"unknown record kind {kind!r}")
    except (struct.error, IndexError, ValueError) as exc:
        raise CorruptObjectError(f"object {name}: bad record at byte {pos} ({exc})") from exc


def value_is_at(payload: bytes, offset: int, length: int, *, tkey: bytes | None = None,
                seq: int | None = None) -> bool:
    """Whether bytes ``offset`` … ``offset + length`` of a data object's payload are the value of the entry
    for ``tkey`` (or of log record ``seq``): the record head just before them must name that key (or seq)
    and that length. A lazy read checks the range its key listing gave before believing it."""
    if offset + length > len(payload):
        return False
    if tkey is not None:
        at = offset - _V.size - len(tkey) - _E.size
        if at < 0:
            return False
        kind, _, klen = _E.unpack_from(payload, at)
        tomb, vlen = _V.unpack_from(payload, offset - _V.size)
        return bool(kind == b"E" and klen == len(tkey) and not tomb and vlen == length
                    and payload[at + _E.size:offset - _V.size] == tkey)
    at = offset - _L.size
    if at < 0:
        return False
    kind, _, found, dlen = _L.unpack_from(payload, at)
    return bool(kind == b"L" and found == seq and dlen == length)


def node_content(header: NodeHeader, records: Sequence[NodeEntry | NodeLog]) -> NodeContent:
    """The :class:`NodeContent` a header and its data records describe."""
    entries = tuple(sorted((r for r in records if isinstance(r, NodeEntry)), key=lambda e: (e.instance, e.key)))
    logs = tuple(sorted((r for r in records if isinstance(r, NodeLog)), key=lambda g: (g.instance, g.seq)))
    if len(entries) != header.entries or len(logs) != header.logs:
        raise CorruptObjectError(f"node {header.uuid}: {len(entries)} entries and {len(logs)} log records, "
                                 f"expected {header.entries} and {header.logs}")
    return NodeContent(uuid=header.uuid, parents=tuple(p for p, _ in header.parents), branch=header.branch,
                       message=header.message, created=header.created, committed=header.committed,
                       entries=entries, logs=logs, notes=header.notes)


def encode_pairs(pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    """An unversioned object: an instance's unversioned key-values, sorted (deterministic)."""
    body = b"".join(_KV.pack(len(k), len(v)) + k + v for k, v in sorted(pairs))
    return _frame(KV_MAGIC, body)


def decode_pairs(name: str, data: bytes) -> list[tuple[bytes, bytes]]:
    """Inverse of :func:`encode_pairs` (after :func:`verify`)."""
    raw = _unframe(KV_MAGIC, data, name)
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    try:
        while pos < len(raw):
            kl, vl = _KV.unpack_from(raw, pos)
            pos += _KV.size
            k, v = raw[pos:pos + kl], raw[pos + kl:pos + kl + vl]
            pos += kl + vl
            if len(k) != kl or len(v) != vl or not k:
                raise ValueError("record runs past the end")
            out.append((k, v))
    except (struct.error, ValueError) as exc:
        raise CorruptObjectError(f"object {name}: bad record at byte {pos} ({exc})") from exc
    return out


# -- unversioned data as content-addressed pages -----------------------------------------------------

MANIFEST_MAGIC = b"SSMANI1\n"
#: Pages of an instance's unversioned key-values average about this many bytes (before compression):
#: a cut follows a key with a probability proportional to its record's size, decided by the key's
#: hash alone, so a page boundary depends on the keys around it and not on where the data started — an
#: added key changes its own page (rarely two), and every other page keeps its name.
PAGE_TARGET_BYTES = 1 << 20
#: No content-defined cut before this many bytes (no tiny pages) ...
PAGE_MIN_BYTES = 256 << 10
#: ... and always a cut at this many (a page is bounded whatever the keys hash to).
PAGE_MAX_BYTES = 4 << 20
#: A manifest object lists at most this many entries (pages or sub-manifests): about 5 MB of JSON.
MANIFEST_ENTRIES = 65_536
#: Manifests nest at most this deep (65,536² pages of 1 MiB is far past any store).
MANIFEST_DEPTH = 3
_KV_HEAD = _KV.size


def _record_size(key: bytes, value: bytes) -> int:
    return _KV_HEAD + len(key) + len(value)


def _cuts_after(key: bytes, size: int) -> bool:
    """Is ``key`` (a record of ``size`` bytes) a content-defined page boundary?"""
    h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return h * PAGE_TARGET_BYTES < size * (1 << 64)


def cut_pages(pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[list[tuple[bytes, bytes]]]:
    """Sorted key-values cut into pages by key range (content-defined boundaries, bounded size)."""
    page: list[tuple[bytes, bytes]] = []
    size = 0
    for key, value in pairs:
        page.append((key, value))
        rec = _record_size(key, value)
        size += rec
        if size >= PAGE_MAX_BYTES or (size >= PAGE_MIN_BYTES and _cuts_after(key, rec)):
            yield page
            page, size = [], 0
    if page:
        yield page


@dataclass(frozen=True)
class PageRef:
    """A page object (or, in an upper manifest level, a sub-manifest) and how many keys it holds."""

    name: str
    keys: int


def encode_manifest(entries: Sequence[PageRef], level: int) -> bytes:
    """A manifest object: ``level`` 0 lists pages, ``level`` n > 0 lists manifests of level n - 1."""
    doc = {"level": level, "entries": [[e.name, e.keys] for e in entries]}
    return _frame(MANIFEST_MAGIC, json.dumps(doc, separators=(",", ":")).encode())


def decode_manifest(name: str, data: bytes) -> tuple[int, list[PageRef]]:
    """Inverse of :func:`encode_manifest` (after :func:`verify`): its level and entries."""
    raw = _unframe(MANIFEST_MAGIC, data, name)
    where = f"object {name}"
    doc = load_remote_json(raw, where, MAX_NODE_BYTES)
    try:
        level = int(doc["level"])
        entries = [PageRef(check_object_name(n, where), int(k)) for n, k in doc["entries"]]
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise CorruptObjectError(f"{where}: unreadable manifest ({exc})") from exc
    if not 0 <= level < MANIFEST_DEPTH or len(entries) > MANIFEST_ENTRIES or any(e.keys < 0 for e in entries):
        raise CorruptObjectError(f"{where}: manifest out of bounds (level {level}, {len(entries)} entries)")
    return level, entries


def build_manifests(pages: Sequence[PageRef]) -> tuple[list[bytes], bytes]:
    """The manifest objects listing ``pages``: (lower levels' objects, the top one), each bounded."""
    lower: list[bytes] = []
    entries, level = list(pages), 0
    while len(entries) > MANIFEST_ENTRIES:
        if level + 1 >= MANIFEST_DEPTH:
            raise ArgumentError(f"{len(pages)} unversioned pages are more than a manifest may list")
        upper: list[PageRef] = []
        for i in range(0, len(entries), MANIFEST_ENTRIES):
            chunk = entries[i:i + MANIFEST_ENTRIES]
            obj = encode_manifest(chunk, level)
            lower.append(obj)
            upper.append(PageRef(object_name(obj), sum(e.keys for e in chunk)))
        entries, level = upper, level + 1
    return lower, encode_manifest(entries, level)


def data_payload(name: str, data: bytes) -> bytes:
    """The inflated records of a data object (after :func:`verify`): what a hollow version's stubs point into."""
    return _unframe(DATA_MAGIC, data, name)
