"""The connectome over an imported base with its synapse index: one body, k bodies, or every body, streamed.

The base's synapse index (one row per supervoxel, direction and partner supervoxel, with the number of
synapses; sorted by supervoxel) is read for the supervoxels of the bodies asked about only; bodies
come from the version's labelmap at read time, so a merged body's partners are the sum of its parts
and no labelmap edit writes anything. A version's own records (edits of base annotations, deletions,
new synapses) correct those rows (:class:`BaseOverlay`).

Per-call cost, after the first query of a state: the body map's answer for the body's supervoxels, the
index rows of those supervoxels (pages cached by the table), one body-map look-up per distinct
partner supervoxel. What depends only on the annotations' state (the records a version holds) is
kept per annotation state, so a labelmap edit — a new labelmap state — re-resolves only the bodies of
those records, and the supervoxels splits retired are kept incrementally (:mod:`.retired`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.connections import Connections, as_u64
from napari_shardscope.core.annotation.resolver import AnnotationVersion, Resolver, sum_pairs, sum_partners
from napari_shardscope.core.annotation.retired import cached_entry, keep_entry, retired_supervoxels

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
#: Index rows (or body pairs) gathered before they are summed when the whole connectome is streamed.
STREAM_ROWS = 1 << 20


@dataclass(frozen=True)
class HeldSynapses:
    """What a version's records change in the base's synapses, at one state of the annotations.

    ``dirty_pre_sv`` / ``dirty_post_sv``: the import-time supervoxels of both ends of every base synapse
    a record at the version overrides (an edit or a tombstone of either end): their index rows no
    longer hold. ``pre_sv``/``pre_pt`` and ``post_sv``/``post_pt``: both ends (recorded supervoxel and
    point) of every synapse with an end whose record the version holds: counted from the records.
    """

    dirty_pre_sv: U64
    dirty_post_sv: U64
    pre_sv: U64
    pre_pt: I64
    post_sv: U64
    post_pt: I64


@dataclass(frozen=True)
class BaseOverlay:
    """:class:`HeldSynapses` with both ends' bodies at one state of the labelmap.

    ``fallback``: a split retired a supervoxel that base synapses are filed under (the index cannot say
    which of them moved where): the queries recount.
    """

    dirty_pre_sv: U64
    dirty_post_sv: U64
    pre_body: U64
    post_body: U64
    fallback: bool


_held_lock = threading.Lock()
_held: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[Any, ...], HeldSynapses]] = weakref.WeakKeyDictionary()
_overlay_lock = threading.Lock()
_overlays: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[Any, ...], BaseOverlay]] = weakref.WeakKeyDictionary()


def held_synapses(v: AnnotationVersion, base: Any, log_length: int) -> HeldSynapses:
    """The :class:`HeldSynapses` of ``v`` (cached per state of the annotations: a labelmap edit keeps it).

    Costs the records the version holds (its edits), never the base.
    """
    gen = (v.uuid, log_length)
    cache, hit = cached_entry(_held_lock, _held, v.instance, gen)
    if hit is not None:
        return hit
    inst = v.instance.instance
    with v.instance.repo.read(v.uuid) as view:
        held = [K.id_of_record_key(k) for k in view.keys(inst, prefix=K.RECORD_PREFIX) if len(k) == 9]
        recs = v._records(view, held)
        known = {s.annotation.id: s for s in recs}
        wanted = {x.to for s in recs for x in s.annotation.relationships} - known.keys()
        known.update((s.annotation.id, s) for s in v._records(view, sorted(wanted)))
    pairs: dict[tuple[int, int], tuple[Any, Any]] = {}
    for s in recs:
        for pre, post in S.synapse_pairs(s, known.get):
            pairs[(pre.annotation.id, post.annotation.id)] = (pre, post)
    ends = list(pairs.values())

    def points(which: int) -> I64:
        return np.asarray([e[which].annotation.point for e in ends], dtype=np.int64).reshape(-1, 3)

    # base synapses S (ids 2S+1 pre, 2S+2 post) with an end the version holds a record (or tombstone) of
    syn = np.unique((as_u64(i for i in held if 0 < i <= base.max_id) - np.uint64(1)) // np.uint64(2))
    pre_sv, found_pre = base.supervoxels(syn * np.uint64(2) + np.uint64(1))
    post_sv, found_post = base.supervoxels(syn * np.uint64(2) + np.uint64(2))
    keep = found_pre & found_post
    out = HeldSynapses(pre_sv[keep], post_sv[keep], as_u64(p.supervoxel for p, _ in ends), points(0),
                       as_u64(q.supervoxel for _, q in ends), points(1))
    return keep_entry(_held_lock, cache, gen, out)


def base_overlay(v: AnnotationVersion, r: Resolver, base: Any, log_length: int) -> BaseOverlay:
    """The :class:`BaseOverlay` of ``v`` (cached per state of the annotations and of the labelmap)."""
    gen = (v.uuid, log_length, r.state.stamp)
    cache, hit = cached_entry(_overlay_lock, _overlays, v.instance, gen)
    if hit is not None:
        return hit
    h = held_synapses(v, base, log_length)
    # supervoxels a split retired at this version that base synapses are filed under
    gone = retired_supervoxels(r)
    fallback = bool(gone.size) and bool(base.synapse_rows(gone)[0].size)
    out = BaseOverlay(h.dirty_pre_sv, h.dirty_post_sv, r.bodies(h.pre_sv, h.pre_pt), r.bodies(h.post_sv, h.post_pt),
                      fallback)
    return keep_entry(_overlay_lock, cache, gen, out)


def _overlay_now(v: AnnotationVersion, r: Resolver, base: Any) -> BaseOverlay:
    with v.instance.repo.read(v.uuid) as view:
        log_length = view.log_length(v.instance.instance)
    return base_overlay(v, r, base, log_length)


def _bodies_of(r: Resolver, svs: U64) -> U64:
    """Bodies of live supervoxels ``svs``, one body-map look-up per distinct supervoxel."""
    if not svs.size:
        return np.zeros(0, np.uint64)
    uniq, inverse = np.unique(svs, return_inverse=True)
    return r.bodies_of_unique(uniq)[inverse.reshape(-1)]


def connections_over_base(v: AnnotationVersion, body: int, base: Any) -> Connections | None:
    """``connections(body)`` over an indexed base: the base's rows of the body's supervoxels, corrected by
    what the version's records change (:class:`BaseOverlay`), partners mapped through the body map once
    per distinct supervoxel. ``None`` when a split retired a supervoxel with base synapses (recount)."""
    r = Resolver(v)
    svs = np.asarray(r.lmv.supervoxels(body), dtype=np.uint64)  # UnknownLabelError when the body does not exist
    ov = _overlay_now(v, r, base)
    if ov.fallback:
        return None
    _own, partner, direction, count = base.synapse_rows(svs)
    sides: list[tuple[U64, I64]] = []
    for out_side, mine, theirs in ((True, ov.dirty_pre_sv, ov.dirty_post_sv),
                                   (False, ov.dirty_post_sv, ov.dirty_pre_sv)):
        sel = direction == (0 if out_side else 1)
        if not mine.size:  # the version overrides no base synapse (the common case): the rows alone
            sides.append((partner[sel], count[sel]))
            continue
        gone = np.isin(mine, svs)
        sides.append((np.concatenate([partner[sel], theirs[gone]]),
                      np.concatenate([count[sel], -np.ones(int(gone.sum()), np.int64)])))
    # one body-map lookup per distinct partner supervoxel, both directions at once
    body_of = _bodies_of(r, np.concatenate([sides[0][0], sides[1][0]]))
    split = sides[0][0].size
    out = []
    for j, (own_b, other_b) in enumerate(((ov.pre_body, ov.post_body), (ov.post_body, ov.pre_body))):
        mapped = body_of[:split] if j == 0 else body_of[split:]
        if not own_b.size:  # no synapse counted from the version's records
            out.append(sum_partners(mapped, sides[j][1]))
            continue
        here = own_b == np.uint64(body)
        out.append(sum_partners(np.concatenate([mapped, other_b[here]]),
                                np.concatenate([sides[j][1], np.ones(int(here.sum()), np.int64)])))
    return Connections(body, out[0], out[1])


def members(r: Resolver, bodies: Sequence[int]) -> tuple[U64, U64]:
    """The supervoxels of ``bodies`` (sorted) and each one's body (UnknownLabelError for an absent body)."""
    parts = [np.asarray(r.lmv.supervoxels(b), dtype=np.uint64) for b in bodies]
    svs = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    owner = np.repeat(np.asarray(bodies, dtype=np.uint64), [p.size for p in parts])
    order = np.argsort(svs, kind="stable")
    return svs[order], owner[order]


def table_over_base(v: AnnotationVersion, bodies: Sequence[int], base: Any,
                    within: bool) -> tuple[U64, U64, I64] | None:
    """The adjacency rows of the connections touching ``bodies`` (``within``: both ends among them).

    One read of the index rows of all their supervoxels together and one body-map look-up per distinct
    partner supervoxel: the cost of the bodies' synapses, not of the base. A connection between two
    of the bodies is taken from the pre body's outgoing rows only. ``None``: recount (see above).
    """
    r = Resolver(v)
    svs, owner = members(r, bodies)
    ov = _overlay_now(v, r, base)
    if ov.fallback:
        return None
    chosen = np.asarray(sorted(bodies), dtype=np.uint64)
    keys, partner, direction, count = base.synapse_rows(svs)
    own_b = owner[np.searchsorted(svs, keys)] if keys.size else np.zeros(0, np.uint64)
    partner_b = _bodies_of(r, partner)
    out = direction == 0
    inc = ~out & ~np.isin(partner_b, chosen)  # a pair of chosen bodies is counted on its pre side
    dirty_pre, dirty_post = _bodies_of(r, ov.dirty_pre_sv), _bodies_of(r, ov.dirty_post_sv)
    pre = np.concatenate([own_b[out], partner_b[inc], dirty_pre, ov.pre_body])
    post = np.concatenate([partner_b[out], own_b[inc], dirty_post, ov.post_body])
    w = np.concatenate([count[out], count[inc], -np.ones(dirty_pre.size, np.int64), np.ones(ov.pre_body.size,
                                                                                             np.int64)])
    # the overlay's rows were not selected by body: keep those touching the bodies (every row, when within)
    touch = np.isin(pre, chosen) & np.isin(post, chosen) if within else np.isin(pre, chosen) | np.isin(post, chosen)
    return sum_pairs(pre[touch], post[touch], w[touch])


def whole_over_base(v: AnnotationVersion, base: Any) -> tuple[U64, U64, I64] | None:
    """Every connection at ``v``: the index's outgoing rows page by page, summed as they come.

    Holds one batch of pages and the table so far (one row per connected pair of bodies), never a
    row per synapse. ``None``: recount (see above).
    """
    r = Resolver(v)
    ov = _overlay_now(v, r, base)
    if ov.fallback:
        return None
    acc = (np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
    pending: list[tuple[U64, U64, I64]] = []
    rows = 0

    def fold() -> tuple[U64, U64, I64]:
        return sum_pairs(*(np.concatenate(c) for c in zip(acc, *pending, strict=True)))

    for page in base.synapses.iter_pages(["partner", "dir", "n"]):
        out = np.asarray(page.values["dir"]) == 0
        pre = _bodies_of(r, np.asarray(page.keys, dtype=np.uint64)[out])
        post = _bodies_of(r, np.asarray(page.values["partner"], dtype=np.uint64)[out])
        pending.append(sum_pairs(pre, post, np.asarray(page.values["n"], dtype=np.int64)[out]))
        rows += pending[-1][0].size
        if rows >= STREAM_ROWS:
            acc, pending, rows = fold(), [], 0
    pending.append((_bodies_of(r, ov.dirty_pre_sv), _bodies_of(r, ov.dirty_post_sv),
                    -np.ones(ov.dirty_pre_sv.size, np.int64)))
    pending.append((ov.pre_body, ov.post_body, np.ones(ov.pre_body.size, np.int64)))
    return fold()


__all__ = ["BaseOverlay", "HeldSynapses", "base_overlay", "connections_over_base", "held_synapses", "members",
           "table_over_base", "whole_over_base"]
