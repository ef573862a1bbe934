"""The supervoxel → body map of one labelmap version (DVID's in-memory label map).

The base segmentation stores supervoxel ids and is never modified; which body a supervoxel belongs
to is this map. Three layers decide ``body_of(sv)``:

1. the *base agglomeration* (optional, immutable): the pipeline's own sv → body table;
2. *explicit* assignments: supervoxels moved by cleaves, and the new supervoxels of splits;
3. *merge aliases*: a forest of body → body parent pointers; a body's id is the root of its tree.

A merge only adds parent pointers (one per merged body), so its cost does not depend on how many
supervoxels the bodies hold — the property proofreaders feel on a body of a million supervoxels.
Parent pointers are never path-compressed in the state (that would make undo impossible); reads
use a memo of resolved roots that any change clears.

Every edit is planned as a :class:`MapDelta` — the exact (key, old, new) changes — then applied.
Replaying a version is applying its deltas in order; undo applies a delta's inverse. Deltas
serialise to compact bytes for the mutation log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, ShardscopeError

U64 = npt.NDArray[np.uint64]
_NONE = (1 << 64) - 1  # "absent" in serialised deltas; never a valid label id


class MappingError(ShardscopeError, ValueError):
    """An edit that the current mapping does not allow (unknown body, supervoxel not in the body…)."""


@dataclass(frozen=True)
class BaseAgglomeration:
    """The base's own supervoxel → body table (sorted by supervoxel); absent supervoxels are their own body."""

    supervoxels: U64
    bodies: U64

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, int]) -> BaseAgglomeration:
        svs = np.fromiter(mapping.keys(), dtype=np.uint64, count=len(mapping))
        bodies = np.fromiter(mapping.values(), dtype=np.uint64, count=len(mapping))
        order = np.argsort(svs, kind="stable")
        return cls(svs[order], bodies[order])

    @classmethod
    def identity(cls) -> BaseAgglomeration:
        empty = np.zeros(0, dtype=np.uint64)
        return cls(empty, empty)

    def lookup(self, svs: U64) -> U64:
        """Base body of each supervoxel (vectorised)."""
        out = svs.astype(np.uint64, copy=True)
        if self.supervoxels.size and svs.size:
            pos = np.minimum(np.searchsorted(self.supervoxels, svs), self.supervoxels.size - 1)
            hit = self.supervoxels[pos] == svs
            out[hit] = self.bodies[pos[hit]]
        return out

    def members(self, body: int) -> list[int]:
        """Supervoxels the base assigns to ``body`` (just ``body`` itself for an unmapped id)."""
        hits = self.supervoxels[self.bodies == np.uint64(body)]
        result = [int(v) for v in hits]
        if not (self.supervoxels.size and _contains_sorted(self.supervoxels, body)):
            result.append(body)  # an id the table does not mention is its own body
        return sorted(set(result))


def _contains_sorted(arr: U64, value: int) -> bool:
    i = int(np.searchsorted(arr, np.uint64(value)))
    return i < arr.size and int(arr[i]) == value


@dataclass(frozen=True)
class MapDelta:
    """The exact changes one edit makes to the map: ``(key, old, new)`` per table; ``None`` = absent.

    Tables: ``explicit`` (supervoxel → body), ``parent`` (body → parent body in the merge forest),
    ``retired`` (supervoxels that no longer exist after a split: old/new are 0 or 1).
    """

    explicit: tuple[tuple[int, int | None, int | None], ...] = ()
    parent: tuple[tuple[int, int | None, int | None], ...] = ()
    retired: tuple[tuple[int, int | None, int | None], ...] = ()

    def inverse(self) -> MapDelta:
        """The delta that undoes this one (applied in reverse order)."""

        def flip(
            rows: tuple[tuple[int, int | None, int | None], ...],
        ) -> tuple[tuple[int, int | None, int | None], ...]:
            return tuple((k, new, old) for k, old, new in reversed(rows))

        return MapDelta(flip(self.explicit), flip(self.parent), flip(self.retired))

    def is_empty(self) -> bool:
        return not (self.explicit or self.parent or self.retired)

    def to_bytes(self) -> bytes:
        """Compact binary form: per table a uint64 count then ``count`` (key, old, new) triples."""
        parts = []
        for rows in (self.explicit, self.parent, self.retired):
            arr = np.array(
                [(k, _NONE if o is None else o, _NONE if n is None else n) for k, o, n in rows], dtype="<u8"
            ).reshape(-1, 3)
            parts.append(struct.pack("<Q", len(rows)) + arr.tobytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> MapDelta:
        """Inverse of :meth:`to_bytes`; malformed input raises :class:`ArgumentError`."""
        tables = []
        pos = 0
        for _ in range(3):
            if pos + 8 > len(data):
                raise ArgumentError(f"map delta truncated at byte {pos}")
            (count,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            size = 24 * count
            if count > len(data) or pos + size > len(data):
                raise ArgumentError(f"map delta truncated at byte {pos}")
            arr = np.frombuffer(data, dtype="<u8", count=3 * count, offset=pos).reshape(-1, 3)
            pos += size
            tables.append(
                tuple(
                    (int(k), None if int(o) == _NONE else int(o), None if int(n) == _NONE else int(n))
                    for k, o, n in arr
                )
            )
        if pos != len(data):
            raise ArgumentError(f"map delta has {len(data) - pos} trailing bytes at byte {pos}")
        return cls(*tables)


@dataclass
class BodyMap:
    """Mutable supervoxel → body map; see the module docstring for the layers."""

    base: BaseAgglomeration = field(default_factory=BaseAgglomeration.identity)
    explicit: dict[int, int] = field(default_factory=dict)
    parent: dict[int, int] = field(default_factory=dict)
    retired: set[int] = field(default_factory=set)
    _children: dict[int, set[int]] = field(default_factory=dict, repr=False)
    _explicit_members: dict[int, set[int]] = field(default_factory=dict, repr=False)
    _root_memo: dict[int, int] = field(default_factory=dict, repr=False)
    _snapshot: tuple[U64, U64] | None = field(default=None, repr=False)

    # -- reads -------------------------------------------------------------------------------
    def direct_body(self, sv: int) -> int:
        """The body a supervoxel is assigned to before merge aliases are followed."""
        got = self.explicit.get(sv)
        if got is not None:
            return got
        return int(self.base.lookup(np.asarray([sv], dtype=np.uint64))[0])

    def root(self, body: int) -> int:
        """The body id that ``body`` has been merged into (itself when not merged)."""
        memo = self._root_memo.get(body)
        if memo is not None:
            return memo
        node = body
        seen = 0
        while node in self.parent:
            node = self.parent[node]
            seen += 1
            if seen > len(self.parent):  # pragma: no cover - a cycle would be a bug in apply()
                raise MappingError(f"merge forest has a cycle through body {body}")
        self._root_memo[body] = node
        return node

    def body_of(self, sv: int) -> int:
        """The body holding supervoxel ``sv``."""
        return self.root(self.direct_body(sv))

    def bodies_of(self, svs: npt.ArrayLike) -> U64:
        """Vectorised :meth:`body_of` for an array of supervoxel ids (any shape); 0 stays 0."""
        arr = np.asarray(svs)
        flat = arr.reshape(-1).astype(np.uint64, copy=False)
        uniq, inverse = np.unique(flat, return_inverse=True)
        direct = self.base.lookup(uniq)
        if self.explicit:
            keys, values = self._explicit_arrays()
            pos = np.minimum(np.searchsorted(keys, uniq), keys.size - 1)
            hit = keys[pos] == uniq
            direct[hit] = values[pos[hit]]
        if self.parent:
            direct = np.fromiter((self.root(int(b)) for b in direct), dtype=np.uint64, count=direct.size)
        direct[uniq == 0] = 0
        return direct[inverse.reshape(-1)].reshape(arr.shape)

    def _explicit_arrays(self) -> tuple[U64, U64]:
        if self._snapshot is None:
            keys = np.fromiter(self.explicit.keys(), dtype=np.uint64, count=len(self.explicit))
            values = np.fromiter(self.explicit.values(), dtype=np.uint64, count=len(self.explicit))
            order = np.argsort(keys, kind="stable")
            self._snapshot = (keys[order], values[order])
        return self._snapshot

    def merged_bodies(self, body: int) -> list[int]:
        """Every body id whose tree is rooted at ``root(body)``, the root first."""
        r = self.root(body)
        out, stack = [r], [r]
        while stack:
            for child in sorted(self._children.get(stack.pop(), ())):
                out.append(child)
                stack.append(child)
        return out

    def supervoxels(self, body: int) -> list[int]:
        """Supervoxels assigned to ``body`` by the map (candidates: the label index says which exist).

        Costs the size of the body; merges and cleaves never call it.
        """
        r = self.root(body)
        found: set[int] = set()
        for b in self.merged_bodies(r):
            found.update(self._explicit_members.get(b, ()))
            for sv in self.base.members(b):
                if sv not in self.explicit and sv not in self.retired:
                    found.add(sv)
        return sorted(found)

    def is_merged_away(self, body: int) -> bool:
        return body in self.parent

    # -- planning edits ----------------------------------------------------------------------
    def plan_merge(self, target: int, others: Sequence[int]) -> MapDelta:
        """Delta for merging ``others`` into ``target``: one parent pointer per other body."""
        if target in self.parent:
            raise MappingError(f"body {target} was merged into body {self.root(target)}; merge into that")
        rows = []
        seen: set[int] = set()
        for other in others:
            if other == target:
                raise MappingError(f"cannot merge body {target} into itself")
            if other in self.parent:
                raise MappingError(f"body {other} was already merged into body {self.root(other)}")
            if other in seen:
                raise MappingError(f"body {other} is listed twice")
            seen.add(other)
            rows.append((other, None, target))
        if not rows:
            raise ArgumentError("merge needs at least one other body")
        return MapDelta(parent=tuple(rows))

    def plan_cleave(self, body: int, svs: Iterable[int], new_body: int) -> MapDelta:
        """Delta moving ``svs`` (all in ``body``) to the new body ``new_body``."""
        if body in self.parent:
            raise MappingError(f"body {body} was merged into body {self.root(body)}")
        if new_body in self.parent or new_body in self._children or new_body in self._explicit_members:
            raise MappingError(f"new body id {new_body} is already in use")
        rows = []
        seen: set[int] = set()
        for sv in svs:
            sv = int(sv)
            if sv in seen:
                continue
            seen.add(sv)
            if sv in self.retired:
                raise MappingError(f"supervoxel {sv} no longer exists (it was split)")
            if self.body_of(sv) != body:
                raise MappingError(f"supervoxel {sv} is in body {self.body_of(sv)}, not in body {body}")
            rows.append((sv, self.explicit.get(sv), new_body))
        if not rows:
            raise ArgumentError("cleave needs at least one supervoxel")
        return MapDelta(explicit=tuple(rows))

    def plan_split_supervoxel(self, sv: int, split_id: int, remain_id: int) -> MapDelta:
        """Delta retiring ``sv`` and giving its two parts (new ids) the body ``sv`` had."""
        if sv in self.retired:
            raise MappingError(f"supervoxel {sv} no longer exists (it was split)")
        if split_id == remain_id or sv in (split_id, remain_id):
            raise ArgumentError("a split needs two new supervoxel ids distinct from the original")
        body = self.direct_body(sv)
        rows: list[tuple[int, int | None, int | None]] = [
            (split_id, self.explicit.get(split_id), body),
            (remain_id, self.explicit.get(remain_id), body),
        ]
        if sv in self.explicit:
            rows.append((sv, self.explicit[sv], None))
        return MapDelta(explicit=tuple(rows), retired=((sv, None, 1),))

    # -- applying ----------------------------------------------------------------------------
    def apply(self, delta: MapDelta) -> None:
        """Apply a delta exactly (its ``old`` values must match the current state)."""
        for sv, old, new in delta.explicit:
            current = self.explicit.get(sv)
            if current != old:
                raise MappingError(f"delta expects supervoxel {sv} explicitly in {old}, found {current}")
            if current is not None:
                self._explicit_members.get(current, set()).discard(sv)
            if new is None:
                self.explicit.pop(sv, None)
            else:
                self.explicit[sv] = new
                self._explicit_members.setdefault(new, set()).add(sv)
        for body, old, new in delta.parent:
            current = self.parent.get(body)
            if current != old:
                raise MappingError(f"delta expects body {body} under {old}, found {current}")
            if current is not None:
                self._children.get(current, set()).discard(body)
            if new is None:
                self.parent.pop(body, None)
            else:
                self.parent[body] = new
                self._children.setdefault(new, set()).add(body)
        for sv, old, new in delta.retired:
            current = 1 if sv in self.retired else None
            if current != old:
                raise MappingError(f"delta expects supervoxel {sv} retired={old}, found {current}")
            if new:
                self.retired.add(sv)
            else:
                self.retired.discard(sv)
        if delta.parent:
            self._root_memo.clear()
        if delta.explicit:
            self._snapshot = None

    def copy(self) -> BodyMap:
        """An independent copy (a child version starts from its parent's map)."""
        return BodyMap(
            base=self.base,
            explicit=dict(self.explicit),
            parent=dict(self.parent),
            retired=set(self.retired),
            _children={k: set(v) for k, v in self._children.items()},
            _explicit_members={k: set(v) for k, v in self._explicit_members.items()},
        )
