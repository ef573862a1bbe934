"""The body map's semantics, in memory: the deltas the mutation log keeps, and the map they define.

A version's map lives in the store as records (:mod:`.records`, :mod:`.recordmap`); this module
keeps what those records mean, in its simplest form:

* :class:`MapDelta` — the exact logical change of one edit, ``(key, old, new)`` rows over three
  tables: ``explicit`` (supervoxel → body, set by cleaves and splits), ``parent`` (body → the body it
  was merged into) and ``retired`` (supervoxels split away). Every log record carries one; a branch
  merge replays them (:meth:`~.recordmap.MapTxn.apply_delta`) and the migration of the replay era
  reads them;
* :class:`BodyMap` — the in-memory map those deltas build, the replay era's representation: body of
  a supervoxel = the root of its direct body in the merge forest. Kept as the reference model the
  record map is tested against, and for small in-memory uses;
* :func:`remap_labels` — a tile's ids mapped through any look-up (runs, then distinct ids only).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.errors import MappingError
from napari_shardscope.core.labelmap.runs import run_starts

U64 = npt.NDArray[np.uint64]
_NONE = (1 << 64) - 1  # "absent" in serialised deltas; never a valid label id

__all__ = ["BaseAgglomeration", "BodyMap", "MapDelta", "MappingError"]


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

    @cached_property
    def _by_body(self) -> tuple[U64, U64]:
        """Body ids sorted, and the supervoxels in that order: a body's members are one slice."""
        order = np.argsort(self.bodies, kind="stable")
        return self.bodies[order], self.supervoxels[order]

    def base_members(self, body: int) -> U64:
        """Supervoxels the table itself lists under ``body`` (a view; O(log n) to find)."""
        keys, svs = self._by_body
        lo, hi = np.searchsorted(keys, np.uint64(body), side="left"), np.searchsorted(keys, np.uint64(body), "right")
        return svs[int(lo):int(hi)]

    def is_listed(self, sv: int) -> bool:
        """True when the table names ``sv`` (an unlisted supervoxel is its own body)."""
        return bool(self.supervoxels.size) and _contains_sorted(self.supervoxels, sv)

    def is_body(self, body: int) -> bool:
        """True when the table assigns at least one supervoxel to ``body``."""
        return self.base_members(body).size > 0

    def members(self, body: int) -> list[int]:
        """Supervoxels the base assigns to ``body`` (plus ``body`` itself when the table does not list it).

        An id the table does not mention is its own body; whether such a supervoxel exists is the
        label index's business, not the table's.
        """
        result = {int(v) for v in self.base_members(body)}
        if not self.is_listed(body):
            result.add(body)
        return sorted(result)


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

    @classmethod
    def concat(cls, deltas: Sequence[MapDelta]) -> MapDelta:
        """One delta doing ``deltas`` in order (tables are independent, rows keep their order).

        A proofreader's body split is several supervoxel splits and cleaves; stored as one delta
        it is one log entry, so one undo reverts all of it.
        """
        return cls(
            tuple(r for d in deltas for r in d.explicit),
            tuple(r for d in deltas for r in d.parent),
            tuple(r for d in deltas for r in d.retired),
        )

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
        """Inverse of :meth:`to_bytes`; malformed input raises :class:`ArgumentError`.

        Plain ``struct`` rather than NumPy: most deltas hold one or two rows, and replaying 10⁴ of
        them when a version opens is dominated by per-call overhead (NumPy costs ~40 µs a delta).
        """
        tables: list[tuple[tuple[int, int | None, int | None], ...]] = []
        pos = 0
        size = len(data)
        for _ in range(3):
            if pos + 8 > size:
                raise ArgumentError(f"map delta truncated at byte {pos}")
            (count,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            if count > size or pos + 24 * count > size:
                raise ArgumentError(f"map delta truncated at byte {pos}")
            if count:
                flat = [None if v == _NONE else v for v in struct.unpack_from(f"<{3 * count}Q", data, pos)]
                keys = flat[0::3]
                if None in keys:
                    raise ArgumentError(f"map delta has an absent key at byte {pos}")
                tables.append(tuple(zip(keys, flat[1::3], flat[2::3], strict=True)))  # type: ignore[arg-type]
            else:
                tables.append(())
            pos += 24 * count
        if pos != size:
            raise ArgumentError(f"map delta has {size - pos} trailing bytes at byte {pos}")
        return cls(*tables)


def remap_labels(svs: npt.ArrayLike, lookup: Callable[[U64], U64]) -> U64:
    """``svs`` (any shape) with each distinct id replaced by what ``lookup`` says of it.

    Runs on every tile napari reads of a body layer and every chunk a labelmap export writes, so it
    asks ``lookup`` about the few distinct ids only. Only ``lookup`` needs the map: a caller guarding
    the map with a lock holds it for that call alone.

    Supervoxels are spatially coherent, so a tile is a few runs of one id along x: the runs are found,
    mapped and expanded with NumPy array operations, which release the GIL — an export's workers
    remap their chunks in parallel — and take ~0.7 ms for a 64³ chunk (fastremap's unique and remap,
    which hold the GIL: ~3.5 ms). A tile of mostly short runs (noise) goes through fastremap.
    """
    arr = np.asarray(svs)
    flat = np.ascontiguousarray(arr.reshape(-1), dtype=np.uint64)
    if not flat.size:
        return np.zeros(arr.shape, dtype=np.uint64)
    starts = run_starts(flat)
    if starts.size * 4 > flat.size:
        return _remap_voxels(flat, lookup).reshape(arr.shape)
    values = flat[starts]
    uniq = np.unique(values)
    bodies = lookup(uniq)
    if np.array_equal(bodies, uniq):
        return flat.reshape(arr.shape).copy()
    mapped = bodies[np.searchsorted(uniq, values)]
    return np.repeat(mapped, np.diff(np.r_[starts, flat.size])).reshape(arr.shape)


def _remap_voxels(flat: U64, lookup: Callable[[U64], U64]) -> U64:
    """:func:`remap_labels` voxel by voxel (fastremap: a hash lookup per voxel in C++)."""
    import fastremap

    uniq = np.asarray(fastremap.unique(flat), dtype=np.uint64)
    bodies = lookup(uniq)
    if np.array_equal(bodies, uniq):
        return flat.copy()
    mapping = dict(zip(uniq.tolist(), bodies.tolist(), strict=True))
    return np.asarray(fastremap.remap(flat, mapping, preserve_missing_labels=True, in_place=False), dtype=np.uint64)


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
    _roots: tuple[U64, U64] | None = field(default=None, repr=False)

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
        return remap_labels(svs, self.bodies_of_unique)

    def bodies_of_unique(self, uniq: U64) -> U64:
        """Bodies of distinct supervoxel ids (sorted or not): array lookups, no per-id Python."""
        direct = self.base.lookup(uniq)
        if self.explicit:
            keys, values = self._explicit_arrays()
            pos = np.minimum(np.searchsorted(keys, uniq), keys.size - 1)
            hit = keys[pos] == uniq
            direct[hit] = values[pos[hit]]
        if self.parent:
            merged, roots = self._root_arrays()
            pos = np.minimum(np.searchsorted(merged, direct), merged.size - 1)
            hit = merged[pos] == direct
            direct[hit] = roots[pos[hit]]
        direct[uniq == 0] = 0
        return direct

    def _root_arrays(self) -> tuple[U64, U64]:
        """Every merged-away body (sorted) and the root it resolves to; rebuilt after a change of the forest."""
        if self._roots is None:
            merged = np.fromiter(self.parent.keys(), dtype=np.uint64, count=len(self.parent))
            merged.sort()
            roots = np.fromiter((self.root(int(b)) for b in merged), dtype=np.uint64, count=merged.size)
            self._roots = (merged, roots)
        return self._roots

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

    def member_chunks(self, body: int, size: int = 256) -> Iterator[U64]:
        """Supervoxels assigned to ``root(body)``, lazily in chunks of about ``size`` (no order).

        Candidates only: the label index says which exist. Lazy so that a check such as "does this
        body keep a supervoxel after the cleave" costs the few ids it looks at, not the body's size
        — which is what keeps a cleave of a 10⁶-supervoxel body as fast as one of a 10-supervoxel one.
        """
        for b in self.merged_bodies(body):
            own = self._explicit_members.get(b)
            if own:
                yield np.fromiter(own, dtype=np.uint64, count=len(own))
            listed = self.base.base_members(b)
            for start in range(0, listed.size, size):
                chunk = self._not_moved(listed[start:start + size])
                if chunk.size:
                    yield chunk
            if not self.base.is_listed(b):
                chunk = self._not_moved(np.asarray([b], dtype=np.uint64))
                if chunk.size:
                    yield chunk

    def _not_moved(self, svs: U64) -> U64:
        """Drop base members that a cleave moved elsewhere (explicit) or a split retired."""
        if self.explicit:
            keys, _ = self._explicit_arrays()
            pos = np.minimum(np.searchsorted(keys, svs), keys.size - 1)
            svs = svs[keys[pos] != svs]
        if self.retired and svs.size:
            svs = svs[~np.isin(svs, np.fromiter(self.retired, dtype=np.uint64, count=len(self.retired)))]
        return svs

    def member_array(self, body: int) -> U64:
        """All supervoxels assigned to ``root(body)``, sorted (vectorised; costs the body's size)."""
        chunks = list(self.member_chunks(body, size=1 << 20))
        if not chunks:
            return np.zeros(0, dtype=np.uint64)
        return np.unique(np.concatenate(chunks))

    def supervoxels(self, body: int) -> list[int]:
        """Supervoxels assigned to ``body`` by the map (candidates: the label index says which exist).

        Costs the size of the body; merges and cleaves never call it.
        """
        return [int(v) for v in self.member_array(body)]

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
    def check(self, delta: MapDelta) -> None:
        """Raise :class:`MappingError` unless ``delta`` applies exactly here (nothing is changed).

        Every ``old`` must match the current value, with earlier rows of the same table taken into
        account (a body split may create and retire a supervoxel within one delta).
        """
        tables: tuple[tuple[str, tuple[tuple[int, int | None, int | None], ...], Any], ...] = (
            ("supervoxel {} explicitly in {}", delta.explicit, self.explicit.get),
            ("body {} under {}", delta.parent, self.parent.get),
            ("supervoxel {} retired={}", delta.retired, lambda k: 1 if k in self.retired else None),
        )
        for what, rows, current_of in tables:
            seen: dict[int, int | None] = {}
            for key, old, new in rows:
                current = seen[key] if key in seen else current_of(key)
                if current != old:
                    raise MappingError(f"delta expects {what.format(key, old)}, found {current}")
                seen[key] = new

    def apply(self, delta: MapDelta) -> None:
        """Apply a delta exactly (its ``old`` values must match the current state; else nothing changes)."""
        self.check(delta)
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
            self._roots = None
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
