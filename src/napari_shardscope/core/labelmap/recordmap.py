"""The body map of one version, read and edited as records (:mod:`.records`), never replayed.

:class:`MapReader` answers what views and queries ask — the body of each of a tile's supervoxels,
a body's root, name, size, member supervoxels and blocks — from the records it reads on demand
through a :class:`RecordSource` (a version's cache), the base agglomeration and the base label
index. :class:`MapTxn` is a reader with pending writes: an edit plans on it (each step sees the
previous steps), and its pending records become the edit's keys. Its operations cost the size of
the change:

* :meth:`MapTxn.merge` — per other body two root finds (O(log n) reads: the union-find is joined by
  size), one ring splice, two root records, one logical-parent record;
* :meth:`MapTxn.cleave` — the pages and member corrections of the supervoxels moved, two root records;
* :meth:`MapTxn.split_supervoxel` — three page entries, one root record.

Every operation also returns the :class:`~napari_shardscope.core.labelmap.bodymap.MapDelta` the
mutation log keeps (the logical change: a branch merge re-plays it on another version with
:meth:`MapTxn.apply_delta`, which rebuilds the sets an un-merge splits from the logical forest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.errors import MappingError
from napari_shardscope.core.labelmap.keys import index_key
from napari_shardscope.core.labelmap.label_index import BaseIndexReader, SvIndex
from napari_shardscope.core.labelmap.records import (
    EMPTY_BOX,
    PAGE_BITS,
    PAGE_DTYPE,
    Coord,
    RootInfo,
    added_key,
    decode_ids,
    decode_page,
    decode_u64,
    encode_ids,
    encode_page,
    encode_u64,
    explicit_key,
    logical_key,
    next_key,
    parent_key,
    removed_key,
    root_key,
)

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Rows = npt.NDArray[Any]
#: The deepest a union-find path may be (joined by size it is at most log2 of the node count).
MAX_DEPTH = 128


class RecordSource(Protocol):
    """Reads a version's records, several at once (``None``: absent)."""

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        ...


class MapReader:
    """Reads of one version's body map (see the module docstring).

    Parameters
    ----------
    records
        The version's records.
    agglomeration
        The base supervoxel → body table.
    index
        The base label index (asked for only by queries that need counts or blocks).
    memo
        Node → a known ancestor (or root), shared by the readers of one version state; only ever
        extended, and cleared by whoever removes a parent link.
    entries
        Index entries of split-made supervoxels found elsewhere (a branch merge's other side);
        a supervoxel id's entry never changes, so any holder's is right.
    """

    def __init__(self, records: RecordSource, agglomeration: AgglomerationSource,
                 index: Callable[[], BaseIndexReader], memo: dict[int, int] | None = None,
                 entries: Callable[[list[int]], Mapping[int, SvIndex]] | None = None) -> None:
        self.records = records
        self.agg = agglomeration
        self._index = index
        self.memo: dict[int, int] = {} if memo is None else memo
        self._entries = entries

    @property
    def index(self) -> BaseIndexReader:
        return self._index()

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self.records.get_many(keys)

    def get(self, key: bytes) -> bytes | None:
        return self.get_many([key])[0]

    # -- explicit assignments -----------------------------------------------------------------------

    def explicit(self, svs: npt.ArrayLike) -> tuple[U64, Bools]:
        """Per supervoxel: the body an edit assigned it (0: none) and whether it is retired."""
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        body = np.zeros(arr.shape, dtype=np.uint64)
        retired = np.zeros(arr.shape, dtype=bool)
        if not arr.size:
            return body, retired
        pages = np.unique(arr >> np.uint64(PAGE_BITS))
        keys = [explicit_key(int(p)) for p in pages]
        loaded = [decode_page(raw, key=k) for k, raw in zip(keys, self.get_many(keys), strict=True)]
        rows = [p for p in loaded if p.size]
        if not rows:
            return body, retired
        table = np.concatenate(rows) if len(rows) > 1 else rows[0]
        pos = np.minimum(np.searchsorted(table["sv"], arr), table.size - 1)
        hit = table["sv"][pos] == arr
        body[hit] = table["body"][pos[hit]]
        retired[hit] = table["retired"][pos[hit]] != 0
        return body, retired

    def direct(self, svs: npt.ArrayLike) -> U64:
        """The node (direct body) of each supervoxel: its explicit body, else the agglomeration's."""
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        body, _ = self.explicit(arr)
        out = self.agg.lookup(arr)
        has = body != 0
        out[has] = body[has]
        return out

    # -- union-find -------------------------------------------------------------------------------

    def parents(self, nodes: Sequence[int]) -> list[int | None]:
        keys = [parent_key(n) for n in nodes]
        return [None if raw is None else decode_u64(raw, key=k) for k, raw in zip(keys, self.get_many(keys),
                                                                                    strict=True)]

    def roots(self, nodes: npt.ArrayLike) -> U64:
        """The union-find root of each node (batched: one read per level of the forest)."""
        arr = np.asarray(nodes, dtype=np.uint64).reshape(-1)
        uniq = sorted({int(n) for n in arr.tolist()}) if arr.size <= 64 else [int(n) for n in np.unique(arr)]
        start = {n: self.memo.get(n, n) for n in uniq}
        step: dict[int, int] = {}
        done: set[int] = set()
        frontier = sorted(set(start.values()))
        for _ in range(MAX_DEPTH):
            if not frontier:
                break
            nxt = []
            for node, par in zip(frontier, self.parents(frontier), strict=True):
                if par is None:
                    done.add(node)
                else:
                    step[node] = par
                    if par not in done and par not in step:
                        nxt.append(par)
            frontier = sorted(set(nxt))
        else:  # pragma: no cover - joined by size the forest is never this deep
            raise MappingError("union-find forest deeper than expected (a cycle?)")
        out: dict[int, int] = {}
        for n in uniq:
            r = start[n]
            hops = 0
            while r in step:
                r = step[r]
                hops += 1
                if hops > MAX_DEPTH:  # pragma: no cover
                    raise MappingError(f"union-find forest has a cycle through node {n}")
            out[n] = r
            self.memo[n] = r
        if arr.size <= 64:
            return np.asarray([out[n] for n in arr.tolist()], dtype=np.uint64)
        lookup = np.asarray([out[n] for n in uniq], dtype=np.uint64)
        return lookup[np.searchsorted(np.asarray(uniq, dtype=np.uint64), arr)]

    def root(self, node: int) -> int:
        return int(self.roots(np.asarray([node], dtype=np.uint64))[0])

    def default_infos(self, nodes: Sequence[int]) -> list[RootInfo]:
        """What a root without a record is: a base body as the base index counts it (or an empty node)."""
        if not nodes:
            return []
        top = max(self.index.max_id, self.agg.max_id)  # above: ids edits handed out, never base bodies
        if all(n > top for n in nodes):
            return [RootInfo(n, 0, 0, 1, *EMPTY_BOX) for n in nodes]
        found, rows = self.index.body_summaries(np.asarray(nodes, dtype=np.uint64))
        out = []
        for n, f, r in zip(nodes, found.tolist(), rows, strict=True):
            if f:
                out.append(RootInfo(n, int(r["voxels"]), int(r["svs"]), 1, (int(r["z0"]), int(r["y0"]), int(r["x0"])),
                                    (int(r["z1"]), int(r["y1"]), int(r["x1"]))))
            else:
                out.append(RootInfo(n, 0, 0, 1, *EMPTY_BOX))
        return out

    def infos(self, roots: Sequence[int]) -> list[RootInfo]:
        """The :class:`RootInfo` of each root."""
        keys = [root_key(r) for r in roots]
        raws = self.get_many(keys)
        missing = [r for r, raw in zip(roots, raws, strict=True) if raw is None]
        defaults = dict(zip(missing, self.default_infos(missing), strict=True))
        return [defaults[r] if raw is None else RootInfo.from_bytes(raw, key=k)
                for r, k, raw in zip(roots, keys, raws, strict=True)]

    def info(self, root: int) -> RootInfo:
        return self.infos([root])[0]

    def names(self, roots: Sequence[int]) -> list[int]:
        """The visible name of each root's set (a root without a record is named by itself)."""
        keys = [root_key(r) for r in roots]
        return [r if raw is None else RootInfo.from_bytes(raw, key=k).name
                for r, k, raw in zip(roots, keys, self.get_many(keys), strict=True)]

    def bodies_of_unique(self, svs: npt.ArrayLike) -> U64:
        """The body of each distinct supervoxel (0 stays 0): explicit pages, agglomeration, roots, names."""
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        if not arr.size:
            return np.zeros(0, dtype=np.uint64)
        direct = self.direct(arr)
        nodes = np.unique(direct[direct != 0])
        out = np.zeros(arr.shape, dtype=np.uint64)
        if nodes.size:
            roots = self.roots(nodes)
            uroots = [int(r) for r in np.unique(roots)]
            name_of = dict(zip(uroots, self.names(uroots), strict=True))
            named = np.asarray([name_of[int(r)] for r in roots], dtype=np.uint64)
            pos = np.searchsorted(nodes, direct)
            keep = direct != 0
            out[keep] = named[pos[keep]]
        out[arr == 0] = 0
        return out

    def bodies_of(self, svs: npt.ArrayLike) -> U64:
        """:meth:`bodies_of_unique` for any array of ids (any shape)."""
        arr = np.asarray(svs, dtype=np.uint64)
        uniq, inverse = np.unique(arr, return_inverse=True)
        return self.bodies_of_unique(uniq)[inverse.reshape(-1)].reshape(arr.shape)

    def body_of(self, sv: int) -> int:
        return int(self.bodies_of_unique(np.asarray([sv], dtype=np.uint64))[0])

    def resolve(self, body: int) -> tuple[int, RootInfo]:
        """The root of the set holding node ``body`` and its info (``info.name != body``: merged away)."""
        if body not in self.memo:  # every record of a node not seen yet, in one read
            self.get_many([k(body) for k in (parent_key, root_key, next_key, logical_key)])
        r = self.root(body)
        return r, self.info(r)

    def ring(self, root: int) -> list[int]:
        """Every node of ``root``'s set, by a walk of the member ring (O(nodes) reads)."""
        out = [root]
        node = root
        while True:
            raw = self.get(next_key(node))
            node = node if raw is None else decode_u64(raw, key=next_key(node))
            if node == root:
                return out
            out.append(node)
            if len(out) > (1 << 31):  # pragma: no cover - a broken ring
                raise MappingError(f"member ring of body {root} does not close")

    def logical_parent(self, node: int) -> int | None:
        raw = self.get(logical_key(node))
        return None if raw is None else decode_u64(raw, key=logical_key(node))

    # -- members and the label index ---------------------------------------------------------------

    def corrections(self, nodes: Sequence[int]) -> tuple[dict[int, U64], dict[int, U64]]:
        """Per node: the base members it lost (``x``) and the supervoxels it gained (``a``)."""
        xk = [removed_key(n) for n in nodes]
        ak = [added_key(n) for n in nodes]
        raws = self.get_many(xk + ak)
        removed = {n: decode_ids(r, key=k) for n, k, r in zip(nodes, xk, raws[:len(nodes)], strict=True)}
        added = {n: decode_ids(r, key=k) for n, k, r in zip(nodes, ak, raws[len(nodes):], strict=True)}
        return removed, added

    def split_entries(self, svs: Iterable[int]) -> dict[int, SvIndex]:
        """Index entries of split-made supervoxels among ``svs`` (the version's ``i`` records, else elsewhere)."""
        wanted = sorted({int(s) for s in svs})
        if not wanted:
            return {}
        keys = [index_key(s) for s in wanted]
        out = {s: SvIndex.from_bytes(raw, key=f"index entry of supervoxel {s}")
               for s, raw in zip(wanted, self.get_many(keys), strict=True) if raw is not None}
        if self._entries is not None:
            rest = [s for s in wanted if s not in out]
            if rest:
                out.update({int(k): v for k, v in self._entries(rest).items()})
        return out

    def _split_made(self, arr: U64) -> Bools:
        return arr > np.uint64(self.index.max_id)

    def totals(self, svs: npt.ArrayLike) -> tuple[Bools, U64]:
        """Which supervoxels have voxels (base or split-made, retirement aside) and how many."""
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        found, totals = self.index.totals(arr)
        made = self._split_made(arr)
        if made.any():
            entries = self.split_entries(arr[made].tolist())
            for i in np.flatnonzero(made):
                e = entries.get(int(arr[i]))
                if e is not None:
                    found[i] = True
                    totals[i] = e.total
        return found, totals

    def exists(self, svs: npt.ArrayLike) -> Bools:
        """Which supervoxels exist at this version: voxels in the base or a split's entry, not retired."""
        arr = np.asarray(svs, dtype=np.uint64)
        flat = arr.reshape(-1)
        found, _ = self.totals(flat)
        if found.any():
            _, retired = self.explicit(flat[found])
            found[np.flatnonzero(found)[retired]] = False
        found &= flat != 0
        return found.reshape(arr.shape)

    def entry(self, sv: int) -> SvIndex | None:
        """Where supervoxel ``sv`` is (None: it does not exist here)."""
        if sv == 0 or bool(self.explicit(np.asarray([sv], dtype=np.uint64))[1][0]):
            return None
        if sv > self.index.max_id:
            return self.split_entries([sv]).get(sv)
        return self.index.entry(sv)

    def sv_rows(self, svs: npt.ArrayLike) -> tuple[I64, I64]:
        """Scale-0 blocks (k, 3) and voxel counts (k,) of the given supervoxels, concatenated."""
        arr = np.unique(np.asarray(svs, dtype=np.uint64).reshape(-1))
        made = self._split_made(arr)
        rows = self.index.sv_rows(arr[~made])
        blocks = [np.stack([rows["z"], rows["y"], rows["x"]], axis=1).astype(np.int64).reshape(-1, 3)]
        counts = [rows["n"].astype(np.int64)]
        for e in self.split_entries(arr[made].tolist()).values():
            blocks.append(e.blocks)
            counts.append(e.counts)
        return np.concatenate(blocks).reshape(-1, 3), np.concatenate(counts)

    def base_member_candidates(self, nodes: Sequence[int]) -> U64:
        """What the agglomeration gives the nodes (their listed supervoxels, and each unlisted node itself)."""
        arr = np.asarray(sorted(set(nodes)), dtype=np.uint64)
        listed = self.agg.members_of(arr)
        own = arr[~self.agg.listed_mask(arr) & (arr <= np.uint64(self.index.max_id))]
        return np.union1d(listed, own).astype(np.uint64)

    def node_members(self, nodes: Sequence[int]) -> U64:
        """The supervoxels of the given nodes that exist here, sorted (O(members))."""
        nodes = list(dict.fromkeys(int(n) for n in nodes))
        removed, added = self.corrections(nodes)
        base = self.base_member_candidates(nodes)
        gone = np.concatenate([v for v in removed.values()] or [np.zeros(0, np.uint64)])
        extra = np.concatenate([v for v in added.values()] or [np.zeros(0, np.uint64)])
        base = np.setdiff1d(base, gone, assume_unique=False)
        if base.size:
            base = base[self.index.contains(base)]
        cand = np.union1d(base, extra).astype(np.uint64)
        if extra.size:
            cand = cand[self.totals(cand)[0]]
        return cand

    def node_blocks(self, nodes: Sequence[int]) -> tuple[I64, I64]:
        """The scale-0 blocks holding the nodes' supervoxels and the voxel count in each (sorted, z-major).

        O(blocks): the base bodies' rows of the per-body index, minus the rows of the supervoxels
        they lost, plus those of the ones they gained — no per-supervoxel walk.
        """
        nodes = list(dict.fromkeys(int(n) for n in nodes))
        removed, added = self.corrections(nodes)
        base_rows = self.index.body_rows(np.asarray(nodes, dtype=np.uint64))
        parts_b = [np.stack([base_rows["z"], base_rows["y"], base_rows["x"]], axis=1).astype(np.int64).reshape(-1, 3)]
        parts_n = [base_rows["n"].astype(np.int64)]
        gone = np.concatenate([v for v in removed.values()] or [np.zeros(0, np.uint64)])
        extra = np.concatenate([v for v in added.values()] or [np.zeros(0, np.uint64)])
        if gone.size:
            b, n = self.sv_rows(gone[gone <= np.uint64(self.index.max_id)])
            parts_b.append(b)
            parts_n.append(-n)
        if extra.size:
            b, n = self.sv_rows(extra)
            parts_b.append(b)
            parts_n.append(n)
        return sum_blocks(np.concatenate(parts_b).reshape(-1, 3), np.concatenate(parts_n))

    def voxel_box(self, nodes: Sequence[int], block: Coord) -> tuple[Coord, Coord] | None:
        """The exact scale-0 voxel box of the nodes' supervoxels, from the index's in-block boxes: O(blocks).

        None when some supervoxel's rows carry no box (an index converted from format 1, or a split
        made before boxes were kept): the caller reads voxels instead.
        """
        if not self.index.has_boxes:
            return None
        nodes = list(dict.fromkeys(int(n) for n in nodes))
        removed, added = self.corrections(nodes)
        plain = [n for n in nodes if not removed[n].size]
        parts: list[Rows] = [self.index.body_rows(np.asarray(plain, dtype=np.uint64))] if plain else []
        touched = [n for n in nodes if removed[n].size]
        if touched:  # nodes that lost supervoxels: their remaining base supervoxels' own rows
            base = np.setdiff1d(self.base_member_candidates(touched),
                                np.concatenate([removed[n] for n in touched]))
            parts.append(self.index.sv_rows(base))
        extra = np.concatenate([v for v in added.values()] or [np.zeros(0, np.uint64)])
        made = extra > np.uint64(self.index.max_id)
        if (~made).any():
            parts.append(self.index.sv_rows(extra[~made]))
        edge = np.asarray(block, dtype=np.int64)
        lo = np.full(3, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(3, -1, dtype=np.int64)
        for rows in parts:
            if not rows.size:
                continue
            origin = np.stack([rows["z"], rows["y"], rows["x"]], axis=1).astype(np.int64) * edge
            lo = np.minimum(lo, (origin + np.stack([rows["z0"], rows["y0"], rows["x0"]], axis=1)).min(axis=0))
            hi = np.maximum(hi, (origin + np.stack([rows["z1"], rows["y1"], rows["x1"]], axis=1)).max(axis=0))
        for e in self.split_entries(extra[made].tolist()).values():
            if e.boxes is None:
                return None
            origin = e.blocks * edge
            lo = np.minimum(lo, (origin + e.boxes[:, :3]).min(axis=0))
            hi = np.maximum(hi, (origin + e.boxes[:, 3:]).max(axis=0))
        if hi[0] < 0:
            return EMPTY_BOX
        return (int(lo[0]), int(lo[1]), int(lo[2])), (int(hi[0]), int(hi[1]), int(hi[2]))

    def node_aggregate(self, nodes: Sequence[int], name: int) -> RootInfo:
        """The exact :class:`RootInfo` of a set made of ``nodes`` (recounted from members: O(blocks))."""
        blocks, counts = self.node_blocks(nodes)
        svs = self.node_members(nodes)
        lo, hi = box_of(blocks)
        return RootInfo(name, int(counts.sum()), int(svs.size), len(set(nodes)), lo, hi, True)


def sum_blocks(blocks: I64, counts: I64) -> tuple[I64, I64]:
    """Counts summed per block; blocks with nothing left dropped; z-major order."""
    if not counts.size:
        return np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort((blocks[:, 2], blocks[:, 1], blocks[:, 0]))
    b, n = blocks[order], counts[order]
    new = np.r_[True, np.any(b[1:] != b[:-1], axis=1)]
    first = np.flatnonzero(new)
    total = np.add.reduceat(n, first)
    keep = total > 0
    return b[first][keep].reshape(-1, 3), total[keep]


def box_of(blocks: I64) -> tuple[Coord, Coord]:
    if not blocks.size:
        return EMPTY_BOX
    lo = blocks.min(axis=0)
    hi = blocks.max(axis=0) + 1
    return (int(lo[0]), int(lo[1]), int(lo[2])), (int(hi[0]), int(hi[1]), int(hi[2]))


class MapTxn(MapReader):
    """A :class:`MapReader` with pending writes: what an edit plans on (see the module docstring).

    ``pending`` maps each written key to its new value (``None``: deleted); reads see it first.
    ``unlinked`` tells whether a parent link was removed or moved (then the shared root memo is
    stale and must be cleared once the edit is written).
    """

    def __init__(self, records: RecordSource, agglomeration: AgglomerationSource,
                 index: Callable[[], BaseIndexReader], memo: dict[int, int] | None = None,
                 entries: Callable[[list[int]], Mapping[int, SvIndex]] | None = None) -> None:
        super().__init__(records, agglomeration, index, None, entries)
        self._shared = memo if memo is not None else {}
        self.memo = dict()
        self.pending: dict[bytes, bytes | None] = {}
        self._resolved: dict[int, tuple[int, RootInfo]] = {}
        self.unlinked = False
        self.deltas: list[MapDelta] = []

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        out: list[bytes | None] = [None] * len(keys)
        missing: list[int] = []
        for i, k in enumerate(keys):
            if k in self.pending:
                out[i] = self.pending[k]
            else:
                missing.append(i)
        if missing:
            got = self.records.get_many([keys[i] for i in missing])
            for i, v in zip(missing, got, strict=True):
                out[i] = v
        return out

    def roots(self, nodes: npt.ArrayLike) -> U64:
        if not self.unlinked:
            arr = np.asarray(nodes, dtype=np.uint64).reshape(-1)
            for n in (arr.tolist() if arr.size <= 64 else np.unique(arr).tolist()):
                if n not in self.memo and n in self._shared:
                    self.memo[n] = self._shared[n]
        return super().roots(nodes)

    def put(self, key: bytes, value: bytes | None) -> None:
        if key[:1] == b"p":
            old = self.get(key)
            if old is not None and old != value:
                self.unlinked = True
                self.memo.clear()
        if key[:1] in (b"p", b"r"):
            self._resolved.clear()
        self.pending[key] = value

    def resolve(self, body: int) -> tuple[int, RootInfo]:
        hit = self._resolved.get(body)
        if hit is None:
            hit = self._resolved[body] = super().resolve(body)
        return hit

    def put_entry(self, sv: int, entry: SvIndex | None) -> None:
        """Write (or delete) the index entry of a split-made supervoxel."""
        self.put(index_key(sv), None if entry is None or not entry.counts.size else entry.to_bytes())

    def record(self, delta: MapDelta) -> MapDelta:
        self.deltas.append(delta)
        return delta

    def delta(self) -> MapDelta:
        return MapDelta.concat(self.deltas)

    # -- record helpers ---------------------------------------------------------------------------

    def _set_info(self, root: int, info: RootInfo | None) -> None:
        self.put(root_key(root), None if info is None else info.to_bytes())

    def _set_pages(self, svs: U64, bodies: U64, retired: Bools) -> None:
        """Set the explicit entries of ``svs`` (body 0 and not retired: the entry is removed)."""
        if not svs.size:
            return
        order = np.argsort(svs, kind="stable")
        svs, bodies, retired = svs[order], bodies[order], retired[order]
        pages = svs >> np.uint64(PAGE_BITS)
        for page in np.unique(pages).tolist():
            sel = pages == np.uint64(page)
            key = explicit_key(int(page))
            rows = decode_page(self.get(key), key=key)
            keep = rows[~np.isin(rows["sv"], svs[sel])]
            new = np.zeros(int(sel.sum()), dtype=PAGE_DTYPE)
            new["sv"], new["body"], new["retired"] = svs[sel], bodies[sel], retired[sel].astype(np.uint8)
            new = new[(new["body"] != 0) | (new["retired"] != 0)]
            merged = np.concatenate([keep, new])
            merged = merged[np.argsort(merged["sv"], kind="stable")]
            self.put(key, encode_page(merged))

    def _adjust(self, key: bytes, add: U64 | None = None, remove: U64 | None = None) -> None:
        cur = decode_ids(self.get(key), key=key)
        if remove is not None and remove.size:
            cur = np.setdiff1d(cur, remove)
        if add is not None and add.size:
            cur = np.union1d(cur, add)
        self.put(key, encode_ids(cur.astype(np.uint64)))

    def _membership(self, svs: U64, nodes: U64, *, joining: bool) -> None:
        """Make each supervoxel an effective member of its node (``joining``) or stop it being one."""
        if not svs.size:
            return
        base = self.agg.lookup(svs)
        for node in np.unique(nodes).tolist():
            sel = nodes == np.uint64(node)
            s, b = svs[sel], base[sel]
            via_base, via_added = s[b == np.uint64(node)], s[b != np.uint64(node)]
            if joining:
                if via_base.size:
                    self._adjust(removed_key(int(node)), remove=via_base)
                if via_added.size:
                    self._adjust(added_key(int(node)), add=via_added)
            else:
                if via_base.size:
                    self._adjust(removed_key(int(node)), add=via_base)
                if via_added.size:
                    self._adjust(added_key(int(node)), remove=via_added)

    def _shift(self, svs: U64, from_nodes: U64 | None, to_nodes: U64 | None) -> None:
        """Move the counts of existing ``svs`` between the roots of their old and new nodes."""
        if not svs.size:
            return
        found, totals = self.totals(svs)
        if not found.any():
            return
        svs = svs[found]
        totals = totals[found].astype(np.int64)
        from_roots = self.roots(from_nodes[found]) if from_nodes is not None else None
        to_roots = self.roots(to_nodes[found]) if to_nodes is not None else None
        delta_v: dict[int, int] = {}
        delta_n: dict[int, int] = {}
        gained: set[int] = set()
        losers: set[int] = set()
        for i in range(svs.size):
            fr = int(from_roots[i]) if from_roots is not None else None
            to = int(to_roots[i]) if to_roots is not None else None
            if fr == to:
                continue
            if fr is not None:
                delta_v[fr] = delta_v.get(fr, 0) - int(totals[i])
                delta_n[fr] = delta_n.get(fr, 0) - 1
                losers.add(fr)
            if to is not None:
                delta_v[to] = delta_v.get(to, 0) + int(totals[i])
                delta_n[to] = delta_n.get(to, 0) + 1
                gained.add(to)
        roots = sorted(set(delta_v) | set(delta_n))
        for r, info in zip(roots, self.infos(roots), strict=True):
            # the block box is a hint kept exact through merges; moving supervoxels leaves it loose on both
            # sides (an edit reads no block rows; a query needing the box recounts it from the blocks)
            self._set_info(r, info.changed(voxels=delta_v.get(r, 0), svs=delta_n.get(r, 0),
                                           loose=r in losers or r in gained))

    def _union(self, a: int, b: int, name: int) -> None:
        """Join the sets of roots ``a`` and ``b`` (by size), named ``name``."""
        ia, ib = self.infos([a, b])
        big, small = (a, b) if ia.nodes >= ib.nodes else (b, a)
        self.put(parent_key(small), encode_u64(big))
        na, nb = self.get_many([next_key(a), next_key(b)])
        next_a = a if na is None else decode_u64(na, key=next_key(a))
        next_b = b if nb is None else decode_u64(nb, key=next_key(b))
        self.put(next_key(a), None if next_b == a else encode_u64(next_b))
        self.put(next_key(b), None if next_a == b else encode_u64(next_a))
        self._set_info(big, ia.joined(ib, name))
        self._set_info(small, None)
        self.memo[small] = big

    # -- operations -------------------------------------------------------------------------------

    def merge(self, target: int, others: Sequence[int]) -> MapDelta:
        """Merge bodies ``others`` into ``target`` (each a visible body); the log's delta."""
        rt, it = self.resolve(target)
        if it.name != target:
            raise MappingError(f"body {target} was merged into body {it.name}; merge into that")
        rows = []
        seen: set[int] = set()
        for other in others:
            if other == target:
                raise MappingError(f"cannot merge body {target} into itself")
            if other in seen:
                raise MappingError(f"body {other} is listed twice")
            ro, io = self.resolve(other)
            if io.name != other:
                raise MappingError(f"body {other} was already merged into body {io.name}")
            seen.add(other)
            rt = self.root(target)
            self._union(rt, ro, target)
            self.put(logical_key(other), encode_u64(target))
            rows.append((other, None, target))
        if not rows:
            raise ArgumentError("merge needs at least one other body")
        return self.record(MapDelta(parent=tuple(rows)))

    def cleave(self, body: int, svs: Iterable[int], new_body: int) -> MapDelta:
        """Move ``svs`` (existing supervoxels of ``body``) to the new body ``new_body``; the log's delta."""
        arr = np.unique(np.asarray([int(s) for s in svs], dtype=np.uint64))
        if not arr.size:
            raise ArgumentError("cleave needs at least one supervoxel")
        r, info = self.resolve(body)
        if info.name != body:
            raise MappingError(f"body {body} was merged into body {info.name}")
        taken = self.get_many([parent_key(new_body), root_key(new_body), logical_key(new_body), next_key(new_body),
                               added_key(new_body)])
        if any(v is not None for v in taken):
            raise MappingError(f"new body id {new_body} is already in use")
        ebody, eret = self.explicit(arr)
        if eret.any():
            raise MappingError(f"supervoxel {int(arr[eret][0])} no longer exists (it was split)")
        base = self.agg.lookup(arr)
        direct = np.where(ebody != 0, ebody, base)
        roots = self.roots(direct)
        wrong = roots != np.uint64(r)
        if wrong.any():
            sv = int(arr[wrong][0])
            raise MappingError(f"supervoxel {sv} is in body {self.body_of(sv)}, not in body {body}")
        rows = tuple((int(s), int(e) if e else None, int(new_body)) for s, e in zip(arr, ebody, strict=True))
        self._set_info(new_body, RootInfo(new_body, 0, 0, 1, *EMPTY_BOX))
        self._shift(arr, direct, np.full(arr.shape, new_body, dtype=np.uint64))
        self._membership(arr, direct, joining=False)
        self._membership(arr, np.full(arr.shape, new_body, dtype=np.uint64), joining=True)
        self._set_pages(arr, np.full(arr.shape, new_body, dtype=np.uint64), eret)
        return self.record(MapDelta(explicit=rows))

    def split_supervoxel(self, sv: int, split_id: int, remain_id: int) -> MapDelta:
        """Retire ``sv``; its two parts (new ids, their index entries already written) keep its node."""
        body, retired = self.explicit(np.asarray([sv, split_id, remain_id], dtype=np.uint64))
        if retired[0]:
            raise MappingError(f"supervoxel {sv} no longer exists (it was split)")
        if split_id == remain_id or sv in (split_id, remain_id):
            raise ArgumentError("a split needs two new supervoxel ids distinct from the original")
        node = int(body[0]) if body[0] else int(self.agg.lookup(np.asarray([sv], dtype=np.uint64))[0])
        rows: list[tuple[int, int | None, int | None]] = [
            (split_id, int(body[1]) or None, node), (remain_id, int(body[2]) or None, node)]
        if body[0]:
            rows.append((sv, int(body[0]), None))
        self._membership(np.asarray([sv], dtype=np.uint64), np.asarray([node], dtype=np.uint64), joining=False)
        parts = np.asarray([split_id, remain_id], dtype=np.uint64)
        self._membership(parts, np.full(2, node, dtype=np.uint64), joining=True)
        self._set_pages(np.asarray([sv, split_id, remain_id], dtype=np.uint64),
                        np.asarray([0, node, node], dtype=np.uint64), np.asarray([True, False, False]))
        r = self.root(node)
        self._set_info(r, self.info(r).changed(svs=1))
        return self.record(MapDelta(explicit=tuple(rows), retired=((sv, None, 1),)))

    # -- replaying a logged delta (branch merges, migration) ----------------------------------------

    def apply_delta(self, delta: MapDelta) -> None:
        """Apply a logged delta by its meaning (not by restoring records), checking every ``old`` value.

        Explicit and retired rows move supervoxels between nodes and roots one by one; parent rows
        join sets (by size), or — un-merging a body — rebuild the sets involved from the logical
        forest (``q`` records). Raises :class:`MappingError` when the delta does not apply here;
        nothing is written then (the pending records are the caller's to drop).
        """
        for sv, old, new in delta.explicit:
            arr = np.asarray([sv], dtype=np.uint64)
            ebody, eret = self.explicit(arr)
            cur = int(ebody[0]) or None
            if cur != old:
                raise MappingError(f"delta expects supervoxel {sv} explicitly in {old}, found {cur}")
            if old == new:
                continue
            implicit = self._implicit_node(sv)
            a, b = old or implicit, new or implicit
            if not eret[0] and a != b:
                self._shift(arr, None if a is None else np.asarray([a], np.uint64),
                            None if b is None else np.asarray([b], np.uint64))
                if a is not None:
                    self._membership(arr, np.asarray([a], np.uint64), joining=False)
                if b is not None:
                    self._membership(arr, np.asarray([b], np.uint64), joining=True)
            self._set_pages(arr, np.asarray([new or 0], np.uint64), eret)
        rebuild: set[int] = set()
        for body, old, new in delta.parent:
            cur = self.logical_parent(body)
            if cur != old:
                raise MappingError(f"delta expects body {body} under {old}, found {cur}")
            if old == new:
                continue
            involved = [body, *(x for x in (old, new) if x is not None)]
            if old is None and new is not None and not rebuild:
                rb, rn = self.root(body), self.root(new)
                if rb == rn:
                    raise MappingError(f"delta merges body {body} into body {new}, which it already holds")
                self._union(rn, rb, self.info(rn).name)
            else:
                rebuild.update(int(r) for r in self.roots(np.asarray(involved, dtype=np.uint64)))
            self.put(logical_key(body), None if new is None else encode_u64(new))
        if rebuild:
            self._rebuild(rebuild)
        for sv, old, new in delta.retired:
            arr = np.asarray([sv], dtype=np.uint64)
            ebody, eret = self.explicit(arr)
            cur = 1 if eret[0] else None
            if cur != old:
                raise MappingError(f"delta expects supervoxel {sv} retired={old}, found {cur}")
            if bool(new) == bool(eret[0]):
                continue
            owner = int(ebody[0]) or self._implicit_node(sv)
            if owner is not None:
                node = np.asarray([owner], dtype=np.uint64)
                if new:
                    self._shift(arr, node, None)
                    self._membership(arr, node, joining=False)
                else:
                    self._shift(arr, None, node)
                    self._membership(arr, node, joining=True)
            self._set_pages(arr, ebody, np.asarray([bool(new)]))
        self.record(delta)

    def _implicit_node(self, sv: int) -> int | None:
        """The node a supervoxel without an explicit entry belongs to: the agglomeration's body of a base
        supervoxel; none for a split-made id (it belongs only where an entry puts it)."""
        if sv > self.index.max_id:
            return None
        return int(self.agg.lookup(np.asarray([sv], dtype=np.uint64))[0])

    def _rebuild(self, roots: set[int]) -> None:
        """Regroup the nodes of the sets of ``roots`` by their logical roots, each group a fresh flat set."""
        nodes = sorted({n for r in roots for n in self.ring(r)})
        logical = dict(zip(nodes, [self.logical_parent(n) for n in nodes], strict=True))

        def top(n: int) -> int:
            seen = 0
            while logical.get(n) is not None:
                n = int(logical[n])  # type: ignore[arg-type]
                seen += 1
                if seen > len(logical) + 1:
                    raise MappingError(f"the merge forest has a cycle through body {n}")
            return n

        groups: dict[int, list[int]] = {}
        for n in nodes:
            groups.setdefault(top(n), []).append(n)
        for n in nodes:
            for key in (parent_key(n), next_key(n), root_key(n)):
                if self.get(key) is not None:
                    self.put(key, None)
        self.unlinked = True
        self.memo.clear()
        for name, members in groups.items():
            ordered = [name, *sorted(m for m in members if m != name)]
            for m in ordered[1:]:
                self.put(parent_key(m), encode_u64(name))
            for a, b in zip(ordered, ordered[1:] + ordered[:1], strict=True):
                self.put(next_key(a), None if a == b else encode_u64(b))
            self._set_info(name, self.node_aggregate(ordered, name))
