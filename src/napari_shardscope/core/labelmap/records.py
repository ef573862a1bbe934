"""The record layout of a version's body map, and the codecs of each record.

A version's supervoxel → body map is a handful of kinds of small versioned keys (copy-on-write per
version by the store's own rule: a version sees its nearest ancestor's value), so opening a version
reads nothing and a view reads only the records of the ids it shows:

* ``e`` + page (u64 BE, supervoxel >> :data:`PAGE_BITS`) → the page's *explicit* supervoxels,
  sorted: the body a cleave or split gave them (0: none, the base agglomeration decides) and a
  retired flag (split away). An absent page: the agglomeration decides for all of its ids.
* ``p`` + node → the node's parent in a union-find forest over *direct bodies* (the body a
  supervoxel is assigned to before merges), joined by size, so any order of merges leaves it
  O(log n) deep. Never path-compressed in the store (undo restores records exactly); readers
  memoise roots in memory.
* ``r`` + root → the set's :class:`RootInfo`: its visible name (the body id the proofreader chose
  when merging: names are decoupled from the tree), voxel and supervoxel counts, node count and
  block bounding box — ``size`` is one read after any merge or cleave. Absent for a root never
  touched: a base body, whose counts the base label index has.
* ``n`` + node → the next node of the set's circular member ring (absent: itself); a union splices
  two rings in O(1), and a body's member nodes are one walk.
* ``q`` + node → the body the node was merged into (the logical merge forest of the mutation
  log's deltas): what un-merging a body in a branch merge needs, never read by views.
* ``a`` / ``x`` + node → supervoxels added to / removed from the node's base members (cleaves,
  splits): a node's supervoxels are its base members (:meth:`AgglomerationSource.members_of`)
  minus ``x`` plus ``a``.

The edit bookkeeping lives beside them: ``s`` (the id of the last mutation, the freshness stamp),
``U`` / ``R`` (the tops of the undo and redo stacks) and ``k`` + mutation id (the entry below it,
and where its log record is), and ``h`` + body + mutation id (the mutations that touched a body).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import FormatError

U64 = npt.NDArray[np.uint64]
Coord = tuple[int, int, int]

#: Supervoxel ids per explicit page: 4,096 ids, so a cleave of k supervoxels rewrites at most k pages
#: and a tile's few hundred supervoxels read a few pages.
PAGE_BITS = 12
STAMP_KEY = b"s"
UNDO_TOP_KEY = b"U"
REDO_TOP_KEY = b"R"
#: Present at a version with two parents whose records the labelmap reconciled itself (a migrated store merge).
MERGE_MARK_KEY = b"M"
EXPLICIT_PREFIX = b"e"
PARENT_PREFIX = b"p"
LOGICAL_PREFIX = b"q"
NEXT_PREFIX = b"n"
ROOT_PREFIX = b"r"
ADDED_PREFIX = b"a"
REMOVED_PREFIX = b"x"
LINK_PREFIX = b"k"
HISTORY_PREFIX = b"h"

PAGE_DTYPE = np.dtype([("sv", "<u8"), ("body", "<u8"), ("retired", "u1")])
_U64LE = struct.Struct("<Q")
_U64BE = struct.Struct(">Q")
_ROOT = struct.Struct("<QQQQ6qB")
_LINK = struct.Struct("<Q16sQ")
_TOP = struct.Struct("<Q16s")
_WHERE = struct.Struct("<16sQ")
#: The prefixes of the body map's own records (what a migrated undo restores exactly; the rest is bookkeeping).
MAP_PREFIXES = (EXPLICIT_PREFIX, PARENT_PREFIX, LOGICAL_PREFIX, NEXT_PREFIX, ROOT_PREFIX, ADDED_PREFIX,
                REMOVED_PREFIX)


class RecordDecodeError(FormatError):
    """A body-map record cannot be decoded (a damaged store)."""


def _node_key(prefix: bytes, node: int) -> bytes:
    return prefix + _U64BE.pack(node)


def page_of(sv: int) -> int:
    return sv >> PAGE_BITS


def explicit_key(page: int) -> bytes:
    return _node_key(EXPLICIT_PREFIX, page)


def parent_key(node: int) -> bytes:
    return _node_key(PARENT_PREFIX, node)


def logical_key(node: int) -> bytes:
    return _node_key(LOGICAL_PREFIX, node)


def next_key(node: int) -> bytes:
    return _node_key(NEXT_PREFIX, node)


def root_key(node: int) -> bytes:
    return _node_key(ROOT_PREFIX, node)


def added_key(node: int) -> bytes:
    return _node_key(ADDED_PREFIX, node)


def removed_key(node: int) -> bytes:
    return _node_key(REMOVED_PREFIX, node)


def link_key(mutation_id: int) -> bytes:
    return _node_key(LINK_PREFIX, mutation_id)


def history_prefix(body: int) -> bytes:
    return _node_key(HISTORY_PREFIX, body)


def history_key(body: int, mutation_id: int) -> bytes:
    return history_prefix(body) + _U64BE.pack(mutation_id)


def node_of_key(key: bytes) -> int:
    """The node (or page, mutation id) a ``prefix + u64`` key names."""
    if len(key) < 9:
        raise RecordDecodeError(f"not a body-map record key: {key!r}")
    return int(_U64BE.unpack_from(key, 1)[0])


def encode_u64(value: int) -> bytes:
    return _U64LE.pack(value)


def decode_u64(raw: bytes, *, key: bytes) -> int:
    if len(raw) != 8:
        raise RecordDecodeError(f"record of {len(raw)} bytes where 8 were expected", key=_show(key))
    return int(_U64LE.unpack(raw)[0])


def encode_ids(ids: U64) -> bytes | None:
    """A sorted id set (None for an empty one: the record is deleted)."""
    arr = np.asarray(ids, dtype="<u8")
    return arr.tobytes() if arr.size else None


def decode_ids(raw: bytes | None, *, key: bytes) -> U64:
    if raw is None:
        return np.zeros(0, dtype=np.uint64)
    if len(raw) % 8:
        raise RecordDecodeError(f"id set of {len(raw)} bytes is not a whole number of ids", key=_show(key))
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


def encode_page(rows: npt.NDArray[Any]) -> bytes | None:
    """An explicit page (None when empty: the page's key is deleted)."""
    return np.ascontiguousarray(rows, dtype=PAGE_DTYPE).tobytes() if rows.size else None


def decode_page(raw: bytes | None, *, key: bytes) -> npt.NDArray[Any]:
    if raw is None:
        return np.zeros(0, dtype=PAGE_DTYPE)
    if len(raw) % PAGE_DTYPE.itemsize:
        raise RecordDecodeError(f"explicit page of {len(raw)} bytes is not a whole number of rows", key=_show(key))
    return np.frombuffer(raw, dtype=PAGE_DTYPE)


@dataclass(frozen=True)
class RootInfo:
    """What a union-find root knows about its set (see the module docstring).

    ``lo``/``hi`` bound the set's scale-0 blocks (``hi`` exclusive; empty when ``lo >= hi``);
    ``exact`` is False once a cleave may have shrunk the set (the box then still holds the body).
    """

    name: int
    voxels: int
    svs: int
    nodes: int
    lo: Coord
    hi: Coord
    exact: bool = True

    @property
    def empty_box(self) -> bool:
        return any(h <= lo for lo, h in zip(self.lo, self.hi, strict=True))

    def union_box(self, lo: Coord, hi: Coord) -> tuple[Coord, Coord]:
        if any(h <= a for a, h in zip(lo, hi, strict=True)):
            return self.lo, self.hi
        if self.empty_box:
            return lo, hi
        return ((min(self.lo[0], lo[0]), min(self.lo[1], lo[1]), min(self.lo[2], lo[2])),
                (max(self.hi[0], hi[0]), max(self.hi[1], hi[1]), max(self.hi[2], hi[2])))

    def joined(self, other: RootInfo, name: int) -> RootInfo:
        """The info of the union of two sets, named ``name``."""
        lo, hi = self.union_box(other.lo, other.hi)
        return RootInfo(name, self.voxels + other.voxels, self.svs + other.svs, self.nodes + other.nodes, lo, hi,
                        self.exact and other.exact)

    def changed(self, *, voxels: int = 0, svs: int = 0, nodes: int = 0, box: tuple[Coord, Coord] | None = None,
                loose: bool = False) -> RootInfo:
        lo, hi = (self.lo, self.hi) if box is None else self.union_box(*box)
        return replace(self, voxels=self.voxels + voxels, svs=self.svs + svs, nodes=self.nodes + nodes,
                       lo=lo, hi=hi, exact=self.exact and not loose)

    def to_bytes(self) -> bytes:
        return _ROOT.pack(self.name, max(0, self.voxels), max(0, self.svs), max(1, self.nodes), *self.lo, *self.hi,
                          1 if self.exact else 0)

    @classmethod
    def from_bytes(cls, raw: bytes, *, key: bytes) -> RootInfo:
        if len(raw) != _ROOT.size:
            raise RecordDecodeError(f"root record of {len(raw)} bytes (expected {_ROOT.size})", key=_show(key))
        v = _ROOT.unpack(raw)
        return cls(int(v[0]), int(v[1]), int(v[2]), int(v[3]), (int(v[4]), int(v[5]), int(v[6])),
                   (int(v[7]), int(v[8]), int(v[9])), bool(v[10]))


EMPTY_BOX: tuple[Coord, Coord] = ((0, 0, 0), (0, 0, 0))


@dataclass(frozen=True)
class Link:
    """A stack entry: the mutation below it (0: bottom) and where its log record is (version UUID, seq)."""

    below: int
    version: str
    seq: int

    def to_bytes(self) -> bytes:
        return _LINK.pack(self.below, bytes.fromhex(self.version), self.seq)

    @classmethod
    def from_bytes(cls, raw: bytes, *, key: bytes) -> Link:
        if len(raw) != _LINK.size:
            raise RecordDecodeError(f"stack link of {len(raw)} bytes", key=_show(key))
        below, uuid, seq = _LINK.unpack(raw)
        return cls(int(below), uuid.hex(), int(seq))


@dataclass(frozen=True)
class Top:
    """The top of an undo or redo stack: a mutation id, valid only at the version that pushed it."""

    mutation_id: int
    version: str

    def to_bytes(self) -> bytes:
        return _TOP.pack(self.mutation_id, bytes.fromhex(self.version))

    @classmethod
    def from_bytes(cls, raw: bytes, *, key: bytes) -> Top:
        if len(raw) != _TOP.size:
            raise RecordDecodeError(f"stack top of {len(raw)} bytes", key=_show(key))
        mid, uuid = _TOP.unpack(raw)
        return cls(int(mid), uuid.hex())


def encode_where(version: str, seq: int) -> bytes:
    """Where a log record is: its version's UUID and its sequence number there (a history record's value)."""
    return _WHERE.pack(bytes.fromhex(version), seq)


def decode_where(raw: bytes, *, key: bytes) -> tuple[str, int]:
    if len(raw) != _WHERE.size:
        raise RecordDecodeError(f"history record of {len(raw)} bytes", key=_show(key))
    uuid, seq = _WHERE.unpack(raw)
    return uuid.hex(), int(seq)


def _show(key: bytes) -> str:
    return key[:1].decode(errors="replace") + key[1:].hex()
