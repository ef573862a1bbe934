"""Adjacency tables of a version: the connections of k bodies, or of every body, through the synapse indexes.

``connectivity(bodies)`` used to ask :func:`~.connectome.connections` once per body (a Resolver, a log
read and an overlay per body) and, with no bodies, to read every record of an imported base (a
recount: two Python objects per synapse, 8 GiB at 10⁷). Now:

* **k bodies**: the synapse index of all their supervoxels is read together — the versioned keys'
  per-supervoxel aggregates (:func:`~.connectome.sv_aggregates`, cached per state) or the base's
  index rows (:func:`~.over_base.table_over_base`) — and every partner supervoxel is mapped to its
  body once. The cost is the bodies' synapses. A connection between two of the bodies is counted from
  its pre body's outgoing side only;
* **every body**: the index is streamed — the base's index table page by page, the versioned
  ``y`` keys in chunks of :data:`SCAN_CHUNK` — and summed by pair of bodies as it comes, holding one
  chunk and the table so far (one row per connected pair), never one row per synapse.

Synapse ends filed under supervoxels a split retired are counted from the version's stale table
(:func:`~.connectome.stale_table`, their bodies read at their points), as ``connections`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.over_base import members
from napari_shardscope.core.annotation.resolver import AnnotationVersion, Resolver, sum_pairs
from napari_shardscope.core.annotation.sv_synapses import stale_table, sv_aggregates

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
#: Synapse keys decoded at once when the whole connectome of a versioned instance is streamed.
SCAN_CHUNK = 1 << 16
#: Body pairs gathered before they are summed into the table so far.
FOLD_ROWS = 1 << 20

Rows = tuple[U64, U64, I64]


def _touching(rows: Rows, chosen: U64, within: bool) -> Rows:
    pre, post, w = rows
    keep = np.isin(pre, chosen) & np.isin(post, chosen) if within else np.isin(pre, chosen) | np.isin(post, chosen)
    return pre[keep], post[keep], w[keep]


def _stale_rows(stale: Any) -> Rows:
    """The synapses with an end on a retired supervoxel, each once: every outgoing end filed there, and the
    incoming ends filed there whose pre end is live (its outgoing key is then under a live supervoxel)."""
    theirs = ~stale.is_out & stale.partner_live
    pre = np.concatenate([stale.own_body[stale.is_out], stale.partner_body[theirs]])
    post = np.concatenate([stale.partner_body[stale.is_out], stale.own_body[theirs]])
    return pre, post, np.ones(pre.size, np.int64)


def table_indexed(v: AnnotationVersion, bodies: Sequence[int], within: bool) -> Rows:
    """The connections touching ``bodies`` through the versioned synapse index (format ≥ 2, no base)."""
    r = Resolver(v)
    svs, owner = members(r, bodies)  # UnknownLabelError when a body does not exist here
    with v.instance.repo.read(v.uuid) as view:
        log_length = view.log_length(v.instance.instance)
        aggs = sv_aggregates(v, view, svs.tolist())
    chosen = np.asarray(sorted(bodies), dtype=np.uint64)
    sides = []
    for out_side in (True, False):
        psv = [a.out_sv if out_side else a.in_sv for a in aggs]
        own = np.repeat(owner, [p.size for p in psv]) if psv else np.zeros(0, np.uint64)
        p = np.concatenate(psv) if psv else np.zeros(0, np.uint64)
        n = np.concatenate([a.out_n if out_side else a.in_n for a in aggs]) if aggs else np.zeros(0, np.int64)
        live = r.lm.exists(r.state, p) | (p == 0) if p.size else np.zeros(0, dtype=bool)
        sides.append((own[live], p[live], n[live]))
    every = np.concatenate([sides[0][1], sides[1][1]])
    uniq, inverse = np.unique(every, return_inverse=True)
    mapped = np.asarray(r.lmv.bodies_of(uniq), dtype=np.uint64)[inverse.reshape(-1)] if uniq.size else uniq
    out_partner, in_partner = mapped[:sides[0][1].size], mapped[sides[0][1].size:]
    inc = ~np.isin(in_partner, chosen)  # a pair of chosen bodies is counted on its pre side
    pre = np.concatenate([sides[0][0], in_partner[inc]])
    post = np.concatenate([out_partner, sides[1][0][inc]])
    w = np.concatenate([sides[0][2], sides[1][2][inc]])
    if within:
        pre, post, w = _touching((pre, post, w), chosen, True)
    stale = _touching(_stale_rows(stale_table(v, r, log_length)), chosen, within)
    return sum_pairs(*(np.concatenate(c) for c in zip((pre, post, w), stale, strict=True)))


def whole_indexed(v: AnnotationVersion) -> Rows:
    """Every connection at ``v`` through the versioned synapse index, streamed (see the module docstring)."""
    r = Resolver(v)
    inst = v.instance.instance
    acc: Rows = (np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
    pending: list[Rows] = []
    rows = 0

    def fold() -> Rows:
        return sum_pairs(*(np.concatenate(c) for c in zip(acc, *pending, strict=True)))

    def chunk(keys: list[bytes], values: list[bytes]) -> Rows:
        if {len(k) for k in keys} != {S.KEY_LEN} or {len(x) for x in values} != {S.VALUE_LEN}:
            bad = next(i for i, (k, x) in enumerate(zip(keys, values, strict=True))
                       if len(k) != S.KEY_LEN or len(x) != S.VALUE_LEN)
            S.decode_key(keys[bad])  # raises with the key named
            S.decode_value(values[bad], key=keys[bad])
        kb = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, S.KEY_LEN)
        out = kb[:, 9] == S.OUT[0]
        own = np.frombuffer(kb[:, 1:9].tobytes(), dtype=">u8").astype(np.uint64)[out]
        partner = np.frombuffer(b"".join(values), dtype="<u8").reshape(-1, 4)[:, 0].astype(np.uint64)[out]
        # ends on retired supervoxels are counted from the stale table
        live = (r.lm.exists(r.state, own) | (own == 0)) & (r.lm.exists(r.state, partner) | (partner == 0))
        own, partner = own[live], partner[live]
        every = np.concatenate([own, partner])
        uniq, inverse = np.unique(every, return_inverse=True)
        mapped = np.asarray(r.lmv.bodies_of(uniq), dtype=np.uint64)[inverse.reshape(-1)] if uniq.size else uniq
        return sum_pairs(mapped[:own.size], mapped[own.size:], np.ones(own.size, np.int64))

    with v.instance.repo.read(v.uuid) as view:
        log_length = view.log_length(inst)
        keys: list[bytes] = []
        values: list[bytes] = []
        for k, raw in view.scan(inst, prefix=S.EDGE_PREFIX):
            keys.append(k)
            values.append(raw)
            if len(keys) >= SCAN_CHUNK:
                pending.append(chunk(keys, values))
                keys, values = [], []
                rows += pending[-1][0].size
                if rows >= FOLD_ROWS:
                    acc, pending, rows = fold(), [], 0
        if keys:
            pending.append(chunk(keys, values))
    pending.append(_stale_rows(stale_table(v, r, log_length)))
    return fold()


__all__ = ["table_indexed", "whole_indexed"]
