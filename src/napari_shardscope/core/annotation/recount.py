"""The reference connectome: every record read, every point's body read from the voxels.

What the synapse indexes are checked against (the model tests) and the peer of the benchmark; also
the answer for instances without an index. It uses neither index nor the recorded supervoxels.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.connections import ConnectionTable, as_u64
from napari_shardscope.core.annotation.points import supervoxels_at
from napari_shardscope.core.annotation.resolver import AnnotationVersion, sum_pairs

U64 = npt.NDArray[np.uint64]


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


__all__ = ["recount_connectivity"]
