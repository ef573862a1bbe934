"""The synapses filed under one supervoxel in the versioned synapse index, as the connectome queries read them.

:mod:`.synapse_index` files each synapse under the supervoxel of each end. Queries by body read the
keys of the body's supervoxels summed by partner supervoxel (:class:`SvAggregate`, cached per state
of the annotations: a labelmap edit changes none), and the keys filed under supervoxels a split
retired, each end's body re-resolved at its point (:class:`StaleTable`, cached per state of the
annotations and of the labelmap). Shared by ``connections`` (:mod:`.connectome`) and the adjacency
tables (:mod:`.adjacency`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.connections import as_u64
from napari_shardscope.core.annotation.model import Point
from napari_shardscope.core.annotation.points import supervoxels_at
from napari_shardscope.core.annotation.resolver import AnnotationVersion, Resolver
from napari_shardscope.core.annotation.retired import cached_entry, keep_entry

U64 = npt.NDArray[np.uint64]

#: Per instance and state ``(version, log length)``: supervoxel → its synapse aggregate.
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




def check_indexed(v: AnnotationVersion) -> bool:
    """True when the synapse index holds every synapse of the instance: format ≥ 2 and no imported base.

    Older instances, and those whose synapses start in an imported base table (not in the index),
    are recounted from the records.
    """
    config = v.instance.instance.config
    fmt = config.get("format")
    return isinstance(fmt, int) and fmt >= 2 and config.get("base") is None


__all__ = ["AGG_STATES", "AGG_SUPERVOXELS", "StaleTable", "SvAggregate", "aggregate_rows", "check_indexed",
           "stale_table", "sv_aggregates"]
