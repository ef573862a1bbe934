"""The edit transaction over a version's body map: a :class:`~.map_reader.MapReader` with pending writes.

An edit plans on a :class:`MapTxn` (each step sees the previous steps), and its pending records
become the edit's keys. Its operations cost the size of the change, never of the body or the
history (see :mod:`.recordmap` for each one's cost), and return the
:class:`~napari_shardscope.core.labelmap.bodymap.MapDelta` the mutation log keeps;
:meth:`MapTxn.apply_delta` replays such a delta on another version (branch merges, migration).
"""


from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.errors import MappingError
from napari_shardscope.core.labelmap.keys import index_key
from napari_shardscope.core.labelmap.label_index import BaseIndexReader, SvIndex
from napari_shardscope.core.labelmap.map_reader import (
    U64,
    Bools,
    MapReader,
    RecordSource,
)
from napari_shardscope.core.labelmap.records import (
    EMPTY_BOX,
    PAGE_BITS,
    PAGE_DTYPE,
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
