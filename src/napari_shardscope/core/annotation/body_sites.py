"""The synapse sites of one body at a version, read through the supervoxel index.

``synapses(body)`` must cost the body's sites, not the instance's: every annotation is also filed
under the supervoxel its record holds (versioned key ``v`` + supervoxel + id; for an imported base,
the ``sites`` table sorted by supervoxel), so the body's supervoxels — and the supervoxels a split
named that no longer exist — are the only prefixes read. Instances and bases from before the index
are answered through the body's blocks, as before.
"""

from __future__ import annotations

import numpy as np

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.base import UNKNOWN_SUPERVOXEL
from napari_shardscope.core.annotation.connections import SynapseSite, as_u64
from napari_shardscope.core.annotation.model import Annotation, Point
from napari_shardscope.core.annotation.resolver import AnnotationVersion, Resolver
from napari_shardscope.core.annotation.resolver import check_body as _check_body
from napari_shardscope.core.annotation.resolver import format_of as _format
from napari_shardscope.core.annotation.retired import retired_supervoxels


def _sites_indexed(v: AnnotationVersion) -> bool:
    """Whether every annotation of ``v`` is filed under its supervoxel (format 3, and a base imported with
    its ids by supervoxel)."""
    base = v.instance.base
    return _format(v) >= 3 and (base is None or base.sites_indexed)


#: (own id, partner id) → the partner's recorded supervoxel and point, from the synapse index.
Ends = dict[tuple[int, int], tuple[int, Point]]


def _sites_of_body(v: AnnotationVersion, r: Resolver, body: int) -> tuple[list[Annotation], Ends]:
    """The ``pre``/``post`` annotations in ``body`` at ``v``, by id, read through the supervoxel index.

    Candidates: the annotations filed under the body's supervoxels, and under the supervoxels a split
    retired (their body is read under their point) — versioned ``v`` keys, and the base's ids by
    supervoxel at import. Their records are then read at the version (edits and tombstones win over
    the base, as everywhere) and each kept when its body here is ``body``: a record moved away since
    it was filed (a base site moved by a version) is dropped. Costs the body's annotations (and the
    retired supervoxels'), never the instance's. Also returns the synapse-index entries filed under the
    same supervoxels: the partners' supervoxels and points, so that their records need not be read.
    """
    svs = np.asarray(r.lmv.supervoxels(body), dtype=np.uint64)  # UnknownLabelError when absent here
    cand = np.union1d(svs, retired_supervoxels(r))
    inst = v.instance.instance
    base = v.instance.base
    ids: list[int] = []
    ends: Ends = {}
    with v.instance.repo.read(v.uuid) as view:
        for sv in cand.tolist():
            ids.extend(K.id_of_index_key(k) for k in view.keys(inst, prefix=K.supervoxel_prefix(sv)))
            for k, raw in view.scan(inst, prefix=S.sv_prefix(sv)):
                _sv, _d, own, partner = S.decode_key(k)
                ends[(own, partner)] = S.decode_value(raw, key=k)
        if base is not None:
            ids.extend(base.ids_of_supervoxels(cand).tolist())
        recs = [s for s in v._records(view, ids) if s.annotation.kind in ("pre", "post")] if ids else []
    if not recs:
        return [], ends
    rec_sv = as_u64(s.supervoxel for s in recs)
    unknown = rec_sv == np.uint64(UNKNOWN_SUPERVOXEL)  # base-placed records: the supervoxel at import
    if base is not None and unknown.any():
        at_import, found = base.supervoxels(as_u64(s.annotation.id for s, u in zip(recs, unknown.tolist(),
                                                                                  strict=True) if u))
        rec_sv[unknown] = np.where(found, at_import, np.uint64(UNKNOWN_SUPERVOXEL))
    bodies = r.bodies(rec_sv, [s.annotation.point for s in recs])
    return [s.annotation for s, b in zip(recs, bodies.tolist(), strict=True) if b == body], ends


def synapses(v: AnnotationVersion, body: int) -> list[SynapseSite]:
    """The ``pre`` and ``post`` annotations in ``body`` at ``v`` (by id) with their partners' ids and bodies."""
    body = _check_body(body)
    r = Resolver(v)
    # an instance or base from before the supervoxel index: through the body's blocks
    if _sites_indexed(v):
        sites, ends = _sites_of_body(v, r, body)
    else:
        sites, ends = [a for a in v.by_body(body) if a.kind in ("pre", "post")], {}
    links = {a.id: [x.to for x in a.relationships if x.rel in ("PreSynTo", "PostSynTo")] for a in sites}
    # a partner's supervoxel and point: from the synapse index when the link is a synapse filed there,
    # else from its record (a base synapse, a link without its inverse)
    where: dict[int, tuple[int, Point]] = {}
    for a in sites:
        for i in links[a.id]:
            end = ends.get((a.id, i))
            if end is not None:
                where[i] = end
    ids = sorted({i for ls in links.values() for i in ls} - where.keys())
    with v.instance.repo.read(v.uuid) as view:
        recs = v._records(view, ids) if ids else []
    where.update((s.annotation.id, (s.supervoxel, s.annotation.point)) for s in recs)
    order = list(where)
    bodies = r.bodies(as_u64(where[i][0] for i in order), [where[i][1] for i in order])
    body_of = dict(zip(order, bodies.tolist(), strict=True))
    return [SynapseSite(a, body, tuple((i, int(body_of[i])) for i in links[a.id])) for a in sites]
