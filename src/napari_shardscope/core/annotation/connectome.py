"""The connectome of a version: partners, synapses, adjacency tables and what an edit changed.

Everything here reads the synapse index (:mod:`.synapse_index`: synapse keys filed under the supervoxel of
each end) and maps supervoxels to bodies through the version's labelmap at read time:

* ``connections(body)`` scans the prefixes of the body's supervoxels — after a labelmap merge the merged
  body's partners are the sum of its parts, and no synapse of another body is read; no write is needed
  when the labelmap changes, on any branch, through undo or a branch merge;
* a split retires a supervoxel; synapses recorded on gone supervoxels (only they) are re-resolved by the
  voxel under their point, once per state of the version (cached); ``synapses(body)``: :mod:`.body_sites`;
* :func:`recount_connectivity` is the reference: every record read, every point's body read from the voxels.

Synapses with an end on background (body 0) are listed by ``synapses`` but count in no connection. A synapse
is one ``PreSynTo`` link from a ``pre`` to a ``post`` annotation (a T-bar with four post sites is four synapses).
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.connections import (
    ConnectionChange,
    Connections,
    ConnectionTable,
    ConnectivityDiff,
    Partner,
    as_u64,
)
from napari_shardscope.core.annotation.errors import AnnotationArgumentError
from napari_shardscope.core.annotation.model import Point
from napari_shardscope.core.annotation.over_base import connections_over_base
from napari_shardscope.core.annotation.points import supervoxels_at
from napari_shardscope.core.annotation.resolver import (
    AnnotationVersion,
    Resolver,
    check_body,
    format_of,
    sum_pairs,
    sum_partners,
)
from napari_shardscope.core.annotation.retired import cached_entry, keep_entry

U64 = npt.NDArray[np.uint64]


_aggs_lock = threading.Lock()
_aggs: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, int], dict[int, SvAggregate]]] = \
    weakref.WeakKeyDictionary()
#: States of versions whose supervoxel aggregates are kept per instance, and supervoxels per state.
AGG_STATES = 4
AGG_SUPERVOXELS = 1 << 18
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SvAggregate:
    """The synapse ends filed under one supervoxel, summed by partner supervoxel (unique, ascending).

    Derived from the supervoxel's synapse keys at one state of the annotations; a labelmap edit
    (merge, cleave) changes none, so the partners of a merged body are these aggregates summed.
    """

    out_sv: U64
    out_n: I64
    in_sv: U64
    in_n: I64


_EMPTY = SvAggregate(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64))


def aggregate_rows(rows: list[tuple[bytes, bytes]]) -> SvAggregate:
    """The aggregate of one supervoxel's synapse keys, decoded vectorised (every key and value checked)."""
    if not rows:
        return _EMPTY
    keys = [k for k, _ in rows]
    vals = [x for _, x in rows]
    if {len(k) for k in keys} != {S.KEY_LEN} or keys[0][:1] != S.EDGE_PREFIX:
        bad = next((k for k in keys if len(k) != S.KEY_LEN or k[:1] != S.EDGE_PREFIX), keys[0])
        S.decode_key(bad)  # raises with the key named
    if {len(x) for x in vals} != {S.VALUE_LEN}:
        k, x = next((k, x) for k, x in rows if len(x) != S.VALUE_LEN)
        S.decode_value(x, key=k)  # raises with the key named
    kb = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, S.KEY_LEN)
    d = kb[:, 9]
    is_out = d == S.OUT[0]
    if not (is_out | (d == S.IN[0])).all():
        S.decode_key(keys[int(np.flatnonzero(~(is_out | (d == S.IN[0])))[0])])
    psv = np.frombuffer(b"".join(vals), dtype="<u8").reshape(-1, 4)[:, 0].astype(np.uint64)
    o_sv, o_n = np.unique(psv[is_out], return_counts=True)
    i_sv, i_n = np.unique(psv[~is_out], return_counts=True)
    return SvAggregate(o_sv, o_n.astype(np.int64), i_sv, i_n.astype(np.int64))


def sv_aggregates(v: AnnotationVersion, view: Any, svs: Iterable[int]) -> list[SvAggregate]:
    """Aggregates of ``svs`` at the state ``view`` reads: cached per state, the missing ones scanned."""
    inst = v.instance.instance
    state = (v.uuid, view.log_length(inst))
    with _aggs_lock:
        per = _aggs.setdefault(v.instance, OrderedDict())
        cached = per.setdefault(state, {})
        per.move_to_end(state)
        while len(per) > AGG_STATES:
            per.popitem(last=False)
        got = {sv: cached.get(sv) for sv in svs}
    for sv, agg in got.items():
        if agg is None:
            got[sv] = aggregate_rows(list(view.scan(inst, prefix=S.sv_prefix(sv))))
    with _aggs_lock:
        if len(cached) > AGG_SUPERVOXELS:
            cached.clear()
        cached.update(got)  # type: ignore[arg-type]
    return [a for a in got.values() if a is not None]


@dataclass(frozen=True)
class StaleTable:
    """Synapse ends filed under supervoxels a split retired, each end's body re-resolved by its point.

    One row per key: ``is_out`` (the own end is the pre), ``own_body`` (by the own point),
    ``partner_sv`` / ``partner_live`` (the recorded partner supervoxel, still existing?) and
    ``partner_body`` (through the body map, or by the partner's point when its supervoxel is retired).
    """

    is_out: npt.NDArray[np.bool_]
    own_body: U64
    partner_sv: U64
    partner_live: npt.NDArray[np.bool_]
    partner_body: U64


_stale_lock = threading.Lock()
_stale: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[Any, ...], StaleTable]] = weakref.WeakKeyDictionary()


def stale_table(v: AnnotationVersion, r: Resolver, log_length: int) -> StaleTable:
    """The :class:`StaleTable` of the version's state (cached per annotation and labelmap state)."""
    gen = (v.uuid, log_length, r.state.stamp)
    cache, hit = cached_entry(_stale_lock, _stale, v.instance, gen)
    if hit is not None:
        return hit
    is_out: list[bool] = []
    owners: list[int] = []
    p_sv: list[int] = []
    p_pt: list[Point] = []
    inst = v.instance.instance
    retired = r.retired_with_synapses()
    with v.instance.repo.read(v.uuid) as view:
        for sv in retired:
            for k, raw in view.scan(inst, prefix=S.sv_prefix(sv)):
                _, d, own, _partner = S.decode_key(k)
                psv, ppt = S.decode_value(raw, key=k)
                is_out.append(d == S.OUT)
                owners.append(own)
                p_sv.append(psv)
                p_pt.append(ppt)
        recs = v._records(view, sorted(set(owners))) if owners else []
    point_of = {s.annotation.id: s.annotation.point for s in recs}
    psvs = as_u64(p_sv)
    if owners:
        own_svs = supervoxels_at(r.lmv, [point_of[o] for o in owners], v.instance.block)
        own_body = np.asarray(r.lmv.bodies_of(own_svs), dtype=np.uint64)
        live = r.lm.exists(r.state, psvs) | (psvs == 0)
        partner_body = r.bodies(psvs, p_pt)
    else:
        own_body, live, partner_body = psvs.copy(), np.zeros(0, dtype=bool), psvs.copy()
    table = StaleTable(np.asarray(is_out, dtype=bool), own_body, psvs, live, partner_body)
    return keep_entry(_stale_lock, cache, gen, table)


# -- queries ---------------------------------------------------------------------------------------


def check_indexed(v: AnnotationVersion) -> bool:
    """True when the synapse index holds every synapse of the instance: format ≥ 2 and no imported base.

    Older instances, and those whose synapses start in an imported base table (not in the index),
    are recounted from the records.
    """
    config = v.instance.instance.config
    fmt = config.get("format")
    return isinstance(fmt, int) and fmt >= 2 and config.get("base") is None


def connections(v: AnnotationVersion, body: int) -> Connections:
    """Partners of ``body`` at ``v`` with synapse counts: outgoing (body pre) and incoming (body post)."""
    body = check_body(body)
    base = v.instance.base
    if base is not None and base.indexed and format_of(v) >= 2:
        got = connections_over_base(v, body, base)
        return got if got is not None else _connections_from(recount_connectivity(v).as_dict(), body)
    if not check_indexed(v):
        return _connections_from(recount_connectivity(v).as_dict(), body)
    r = Resolver(v)
    svs = r.lmv.supervoxels(body)  # UnknownLabelError when the body does not exist here
    with v.instance.repo.read(v.uuid) as view:
        log_length = view.log_length(v.instance.instance)
        aggs = sv_aggregates(v, view, [int(s) for s in svs])
    stale = stale_table(v, r, log_length)
    sides = []
    for out_side in (True, False):
        psv = np.concatenate([a.out_sv if out_side else a.in_sv for a in aggs] or [np.zeros(0, np.uint64)])
        cnt = np.concatenate([a.out_n if out_side else a.in_n for a in aggs] or [np.zeros(0, np.int64)])
        if psv.size:  # one lookup per distinct partner supervoxel
            psv, inverse = np.unique(psv, return_inverse=True)
            cnt = np.bincount(inverse.reshape(-1), weights=cnt, minlength=len(psv)).astype(np.int64)
        live = r.lm.exists(r.state, psv) | (psv == 0) if psv.size else np.zeros(0, dtype=bool)
        # Ends under the body's live supervoxels whose partner is on a retired one are counted from
        # the retired side (the stale table), the partner's body read under its point.
        parts = [np.asarray(r.lmv.bodies_of(psv[live]), dtype=np.uint64)]
        weights = [cnt[live]]
        mine = stale.is_out == out_side
        owned = mine & (stale.own_body == np.uint64(body))
        theirs = ~mine & stale.partner_live & (stale.partner_body == np.uint64(body))
        parts += [stale.partner_body[owned], stale.own_body[theirs]]
        weights += [np.ones(int(owned.sum()), np.int64), np.ones(int(theirs.sum()), np.int64)]
        sides.append(sum_partners(np.concatenate(parts), np.concatenate(weights)))
    return Connections(body, sides[0], sides[1])


def _partners(c: Counter[int]) -> tuple[Partner, ...]:
    return tuple(Partner(b, n) for b, n in sorted(c.items(), key=lambda t: (-t[1], t[0])))


def _connections_from(table: dict[tuple[int, int], int], body: int) -> Connections:
    out: Counter[int] = Counter()
    inc: Counter[int] = Counter()
    for (a, b), n in table.items():
        if a == body:
            out[b] += n
        if b == body:
            inc[a] += n
    return Connections(body, _partners(out), _partners(inc))


def _table(pre: U64, post: U64) -> ConnectionTable:
    return ConnectionTable.from_arrays(*sum_pairs(pre, post, np.ones(pre.size, np.int64)))


def recount_connectivity(v: AnnotationVersion) -> ConnectionTable:
    """The whole connectome from scratch: every record read, every point's body read from the voxels.

    The reference the index is checked against (the model test) and the peer of the benchmark:
    it uses neither the synapse index nor the recorded supervoxels.
    """
    records = {a.id: a for a in v.all()}
    pairs = [(a.id, r.to) for a in records.values() if a.kind == "pre" for r in a.relationships
             if r.rel == "PreSynTo" and r.to in records and records[r.to].kind == "post"
             and any(x.rel == "PostSynTo" and x.to == a.id for x in records[r.to].relationships)]
    if not pairs:
        return _table(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    lmv = v.instance.labelmap.at(v.uuid)
    ids = sorted(records)
    svs = supervoxels_at(lmv, [records[i].point for i in ids], v.instance.block)
    body = dict(zip(ids, lmv.bodies_of(svs).tolist(), strict=True))
    pre = as_u64(body[p] for p, _ in pairs)
    post = as_u64(body[q] for _, q in pairs)
    keep = (pre != 0) & (post != 0)
    return _table(pre[keep], post[keep])


def _changed_ids(v: AnnotationVersion, base: Any) -> set[int]:
    """Ids whose record a version between ``base`` (excluded) and ``v`` wrote (the store's change index)."""
    repo = v.instance.repo
    below = {x.uuid for x in repo.ancestry(base)}
    ids: set[int] = set()
    for x in repo.ancestry(v.version):
        if x.uuid in below:
            continue
        with repo.read(x) as view:
            for c in view.changes(v.instance.instance):
                if c.key[:1] == K.RECORD_PREFIX and len(c.key) == 9:
                    ids.add(K.id_of_record_key(c.key))
    return ids


def affected_bodies(a: AnnotationVersion, b: AnnotationVersion) -> tuple[int, ...]:
    """Bodies (at ``a`` or ``b``) whose connections can differ between the two versions.

    The labelmap mutations one version has and the other lacks (their bodies, and the bodies at
    either version of every supervoxel their deltas name), and the annotations whose record
    differs (their bodies at either version).
    """
    from napari_shardscope.core.labelmap.diff import diff_versions

    lm = a.instance.labelmap
    d = diff_versions(lm, a.uuid, b.uuid)
    bodies: set[int] = set(d.bodies_a) | set(d.bodies_b)
    svs: set[int] = set(d.supervoxels_a) | set(d.supervoxels_b)
    for e in (*d.only_a, *d.only_b):
        delta = e.mutation.delta
        svs.update(k for k, _o, _n in delta.explicit)
        svs.update(k for k, _o, _n in delta.retired)
        for k, o, n in delta.parent:
            bodies.update(x for x in (k, o, n) if x)
    repo = a.instance.repo
    base = repo.version(d.base)
    ids = _changed_ids(a, base) | _changed_ids(b, base)
    sv_arr = as_u64(sorted(svs))
    for v in (a, b):
        r = Resolver(v)
        if sv_arr.size:
            live = sv_arr[r.lm.exists(r.state, sv_arr)]
            bodies.update(int(x) for x in r.lmv.bodies_of(live).tolist())
        if ids:
            recs = [s for s in (v.find(i) for i in sorted(ids)) if s is not None]
            pts = [s.point for s in recs]
            bodies.update(int(x) for x in r.lmv.bodies_of(supervoxels_at(r.lmv, pts, v.instance.block)).tolist())
    bodies.discard(0)
    return tuple(sorted(bodies))


def diff_connectivity(a: AnnotationVersion, b: AnnotationVersion,
                      bodies: Iterable[int] | None = None) -> ConnectivityDiff:
    """Which connections differ from version ``a`` to ``b``: created, removed or changed, counts before/after.

    Only the bodies the intervening edits touched are read (:func:`affected_bodies`), unless
    ``bodies`` names the ones to compare.
    """
    if a.instance.name != b.instance.name:
        raise AnnotationArgumentError(f"compare one annotation instance at two versions, not "
                                      f"{a.instance.name!r} and {b.instance.name!r}")
    chosen = tuple(sorted({check_body(x) for x in bodies})) if bodies is not None else affected_bodies(a, b)
    sides = []
    for v in (a, b):
        lmv = v.instance.labelmap.at(v.uuid)
        here = [x for x in chosen if lmv.exists(x)]
        sides.append(connectivity(v, here).as_dict() if here else {})
    before, after = sides
    changes = [ConnectionChange(p, q, before.get((p, q), 0), after.get((p, q), 0))
               for p, q in sorted(set(before) | set(after)) if before.get((p, q), 0) != after.get((p, q), 0)]
    return ConnectivityDiff(a.uuid, b.uuid, chosen, tuple(changes))


def connectivity(v: AnnotationVersion, bodies: Iterable[int] | None = None, *,
                 within: bool = False) -> ConnectionTable:
    """The adjacency table at ``v`` (:func:`.adjacency.connectivity`: through the indexes, the whole one streamed)."""
    from napari_shardscope.core.annotation.adjacency import connectivity as through_indexes

    return through_indexes(v, bodies, within=within)


# names other modules import from here (they moved to smaller modules)
_check_body = check_body
_format = format_of
_sum_partners = sum_partners
