"""The connectome of a version: partners, synapses, adjacency tables and what an edit changed.

Everything here reads the synapse index (:mod:`.synapse_index`: synapse keys filed under the supervoxel of
each end) and maps supervoxels to bodies through the version's labelmap at read time:

* ``connections(body)`` scans the prefixes of the body's supervoxels — after a labelmap merge the merged
  body's partners are the sum of its parts, and no synapse of another body is read; no write is needed
  when the labelmap changes, on any branch, through undo or a branch merge;
* a split retires a supervoxel; synapses recorded on gone supervoxels (only they) are re-resolved by the
  voxel under their point, once per state of the version (cached); ``synapses(body)``: :mod:`.body_sites`;
* :func:`recount_connectivity` is the reference: every record read, every point's body read from the voxels.

The pieces: :mod:`.resolver` (supervoxels and points to bodies), :mod:`.retired` (the supervoxels
splits retired, kept incrementally), :mod:`.sv_synapses` (a supervoxel's synapses, aggregated and
cached), :mod:`.over_base` (an imported base's index and what a version changes in it),
:mod:`.adjacency` (tables of k bodies and the whole one, streamed) and :mod:`.recount`.

Synapses with an end on background (body 0) are listed by ``synapses`` but count in no connection. A synapse
is one ``PreSynTo`` link from a ``pre`` to a ``post`` annotation (a T-bar with four post sites is four synapses).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.adjacency import table_indexed, whole_indexed
from napari_shardscope.core.annotation.connections import (
    ConnectionChange,
    Connections,
    ConnectionTable,
    ConnectivityDiff,
    Partner,
    as_u64,
)
from napari_shardscope.core.annotation.errors import AnnotationArgumentError
from napari_shardscope.core.annotation.over_base import connections_over_base, table_over_base, whole_over_base
from napari_shardscope.core.annotation.points import supervoxels_at
from napari_shardscope.core.annotation.recount import _table, recount_connectivity
from napari_shardscope.core.annotation.resolver import (
    AnnotationVersion,
    Resolver,
    check_body,
    format_of,
    sum_partners,
)
from napari_shardscope.core.annotation.retired import retired_supervoxels
from napari_shardscope.core.annotation.sv_synapses import (
    AGG_STATES,
    AGG_SUPERVOXELS,
    StaleTable,
    SvAggregate,
    _aggs,
    aggregate_rows,
    check_indexed,
    stale_table,
    sv_aggregates,
)

U64 = npt.NDArray[np.uint64]


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
        parts = [r.bodies_of_unique(psv[live])]  # distinct (np.unique above)
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
    """The adjacency table at ``v``: every connection with ``pre`` or ``post`` among ``bodies``
    (``within``: both), or the whole connectome when ``bodies`` is None.

    Through the synapse indexes (:mod:`.adjacency`): the cost of the bodies' synapses; the whole
    connectome streamed, holding one chunk of the index and the table so far. Instances without an
    index (and a base after a split retired one of its supervoxels) are recounted.
    """
    chosen = None if bodies is None else sorted({check_body(b) for b in bodies})
    base = v.instance.base
    rows = None
    if base is not None and base.indexed and format_of(v) >= 2:
        rows = whole_over_base(v, base) if chosen is None else table_over_base(v, chosen, base, within)
    elif check_indexed(v):
        rows = whole_indexed(v) if chosen is None else table_indexed(v, chosen, within)
    if rows is not None:
        return ConnectionTable.from_arrays(*rows)
    table = recount_connectivity(v)
    if chosen is None:
        return table
    keep = np.isin(table.pre, chosen) & np.isin(table.post, chosen) if within else \
        np.isin(table.pre, chosen) | np.isin(table.post, chosen)
    return ConnectionTable(table.pre[keep], table.post[keep], table.count[keep])


# names other modules import from here (they moved to smaller modules)
_check_body = check_body
_format = format_of
_sum_partners = sum_partners

__all__ = ["AGG_STATES", "AGG_SUPERVOXELS", "Resolver", "StaleTable", "SvAggregate", "_aggs", "_check_body", "_format",
           "_sum_partners", "_table", "affected_bodies", "aggregate_rows", "check_indexed", "connections",
           "connectivity", "diff_connectivity", "recount_connectivity", "retired_supervoxels", "stale_table",
           "sv_aggregates"]
