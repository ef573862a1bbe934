"""Reads of one version's body map from its records: what views and queries ask, answered on demand.

:class:`MapReader` answers the body of each of a tile's supervoxels, a body's root, name, size,
member supervoxels and blocks from the records it reads through a :class:`RecordSource` (a
version's cache), the base agglomeration and the base label index: nothing is replayed. Split from
:mod:`.recordmap` (the model of the records, and its public door) so the reads every view makes and
the transaction an edit plans on (:mod:`.map_txn`, a reader with pending writes) are each one room.
"""


from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.base_members import BaseMembers
from napari_shardscope.core.labelmap.body_cache import BODY_CACHE_QUERY, BodyCache
from napari_shardscope.core.labelmap.errors import MappingError
from napari_shardscope.core.labelmap.keys import index_key
from napari_shardscope.core.labelmap.label_index import BaseIndexReader, SvIndex
from napari_shardscope.core.labelmap.records import (
    EMPTY_BOX,
    EXPLICIT_PREFIX,
    PAGE_BITS,
    Coord,
    RootInfo,
    added_key,
    decode_ids,
    decode_page,
    decode_u64,
    logical_key,
    next_key,
    parent_key,
    removed_key,
    root_key,
)
from napari_shardscope.core.versioned.key_rows import row_bytes

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
                 entries: Callable[[list[int]], Mapping[int, SvIndex]] | None = None,
                 base_members: BaseMembers | None = None, pages: Callable[[], U64 | None] | None = None,
                 bodies: BodyCache | None = None) -> None:
        self.records = records
        self.agg = agglomeration
        self._index = index
        self.memo: dict[int, int] = {} if memo is None else memo
        self._entries = entries
        self._base_members = base_members
        self._pages = pages
        self._body_cache = bodies

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
        present = self._pages() if self._pages is not None else None
        if present is not None:  # only the pages the version holds are read (:mod:`.explicit_pages`)
            pages = pages[np.isin(pages, present, assume_unique=True)]
            if not pages.size:
                return body, retired
        keys = explicit_keys(pages)
        # most pages hold no explicit supervoxel (absent): only present ones are decoded
        rows = [p for p in (decode_page(raw, key=k) for k, raw in zip(keys, self.get_many(keys), strict=True)
                            if raw is not None) if p.size]
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
        """The body of each distinct supervoxel (0 stays 0): explicit pages, agglomeration, roots, names.

        Through the state's :class:`~.body_cache.BodyCache` when it has one: only supervoxels whose
        answer an edit may have changed are resolved again.
        """
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        if not arr.size:
            return np.zeros(0, dtype=np.uint64)
        cache = self._body_cache
        if cache is None or arr.size > BODY_CACHE_QUERY:
            return self._resolve_unique(arr)
        ids = arr.tolist()
        nodes = cache.nodes(ids)
        unknown = [i for i, n in enumerate(nodes) if n is None]
        if unknown:  # which node: explicit page, else the agglomeration
            asked = arr[unknown] if len(unknown) < len(ids) else arr
            direct = self.direct(asked).tolist()
            cache.put_nodes(asked.tolist(), direct)
            for i, n in zip(unknown, direct, strict=True):
                nodes[i] = n
        known = [0 if n is None else n for n in nodes]  # (every node is known now)
        bodies = cache.bodies(known)
        unnamed = sorted({n for n, b in zip(known, bodies, strict=True) if b is None and n})
        if unnamed:  # which root and what it is named: only nodes under roots an edit wrote, or new ones
            roots = self.roots(np.asarray(unnamed, dtype=np.uint64))
            uroots = [int(r) for r in np.unique(roots)]
            name_of = dict(zip(uroots, self.names(uroots), strict=True))
            found = [name_of[r] for r in roots.tolist()]
            cache.put_bodies(unnamed, roots.tolist(), found)
            body_of = dict(zip(unnamed, found, strict=True))
            bodies = [b if b is not None else body_of.get(n, 0) for n, b in zip(known, bodies, strict=True)]
        out = np.asarray([0 if b is None else b for b in bodies], dtype=np.uint64)  # node 0 (background): body 0
        out[arr == 0] = 0
        return out

    def _resolve_unique(self, arr: U64) -> U64:
        """Bodies of distinct supervoxels, vectorised (no cache)."""
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
        gone = np.concatenate([v for v in removed.values()] or [np.zeros(0, np.uint64)])
        extra = np.concatenate([v for v in added.values()] or [np.zeros(0, np.uint64)])
        if self._base_members is not None:  # kept per node: the base never changes
            base = self._base_members.union(nodes)
            if not gone.size and not extra.size:
                return base
            base = np.setdiff1d(base, gone, assume_unique=True) if gone.size else base
        else:
            base = np.setdiff1d(self.base_member_candidates(nodes), gone, assume_unique=False)
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


_PAGE_KEY = np.dtype([("p", "S1"), ("page", ">u8")])


def explicit_keys(pages: U64) -> list[bytes]:
    """:func:`explicit_key` of every page, built as one array (a query asks for hundreds of pages)."""
    rows = np.zeros(pages.size, dtype=_PAGE_KEY)
    rows["p"], rows["page"] = EXPLICIT_PREFIX, pages
    return row_bytes(rows.view(np.uint8).reshape(pages.size, _PAGE_KEY.itemsize))


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
