"""Resolution of recorded supervoxels (and, for retired ones, points) to bodies at one version.

Shared by every connectome query (:mod:`.connectome`, :mod:`.over_base`, :mod:`.adjacency`,
:mod:`.body_sites`): what a query reads is keyed by supervoxel, and bodies are only known through
the version's labelmap at read time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.connections import Partner
from napari_shardscope.core.annotation.errors import AnnotationArgumentError
from napari_shardscope.core.annotation.points import supervoxels_at
from napari_shardscope.core.annotation.retired import retired_supervoxels
from napari_shardscope.core.labelmap.version import LabelmapVersion

#: An :class:`~.version.AnnotationVersion` (not imported: ``version`` calls into these modules; no cycles).
AnnotationVersion = Any
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


class Resolver:
    """Maps recorded supervoxels (and, for retired ones, points) to bodies at one version."""

    def __init__(self, v: AnnotationVersion) -> None:
        self.v = v
        lm = v.instance.labelmap
        self.lm = lm
        # the state is looked up (its freshness stamp probed) once per query, and every read of the
        # query goes through it: one consistent body map, not one store probe per labelmap call
        self.state = lm.state(v.uuid)
        self.lmv = LabelmapVersion(lm, v.uuid, state=self.state)

    def bodies(self, svs: U64, points: npt.ArrayLike) -> U64:
        """Bodies of records with supervoxels ``svs`` at ``points``: retired supervoxels read the voxel."""
        svs = np.asarray(svs, dtype=np.uint64)
        if not svs.size:
            return svs.copy()
        live = self.lm.exists(self.state, svs) | (svs == 0)
        if not live.all():
            stale = np.flatnonzero(~live)
            pts = np.asarray(points, dtype=np.int64).reshape(-1, 3)[stale]
            svs = svs.copy()
            svs[stale] = supervoxels_at(self.lmv, pts, self.v.instance.block)
        return np.asarray(self.lmv.bodies_of(svs), dtype=np.uint64)

    def bodies_of_unique(self, svs: U64) -> U64:
        """Bodies of distinct live supervoxels (one body-map look-up, see :meth:`LabelmapVersion.bodies_of_unique`)."""
        return np.asarray(self.lmv.bodies_of_unique(svs), dtype=np.uint64)

    def retired_with_synapses(self) -> list[int]:
        """Supervoxels gone at this version (:func:`retired_supervoxels`) that synapse keys are filed under."""
        gone = retired_supervoxels(self)
        if not gone.size:
            return []
        out = []
        inst = self.v.instance.instance
        with self.v.instance.repo.read(self.v.uuid) as view:
            for sv in gone.tolist():
                if next(iter(view.keys(inst, prefix=S.sv_prefix(int(sv)))), None) is not None:
                    out.append(int(sv))
        return out


def check_body(body: object) -> int:
    if isinstance(body, bool) or not isinstance(body, int | np.integer) or not 0 < int(body) < 2**64:
        raise AnnotationArgumentError(f"a body id must be a positive integer, got {body!r}")
    return int(body)


def format_of(v: AnnotationVersion) -> int:
    fmt = v.instance.instance.config.get("format")
    return fmt if isinstance(fmt, int) else 0


def sum_partners(bodies: U64, weights: I64) -> tuple[Partner, ...]:
    """Partners summed by body (background 0 and zero sums dropped), largest count first, then body id."""
    keep = bodies != 0
    b = bodies[keep]
    if not b.size:
        return ()
    # one sort, runs summed in place (no inverse, no float bincount: every connections() call sums two sides)
    by_body = np.argsort(b, kind="stable")
    sb = b[by_body]
    start = np.flatnonzero(np.concatenate(([True], sb[1:] != sb[:-1])))
    uniq = sb[start]
    sums = np.add.reduceat(np.asarray(weights, dtype=np.int64)[keep][by_body], start)
    order = np.lexsort((uniq, -sums))
    order = order[sums[order] != 0]
    # Python ints from one conversion per column, not two NumPy scalars per partner
    return tuple(map(Partner, uniq[order].tolist(), sums[order].tolist()))


def sum_pairs(pre: U64, post: U64, weights: I64) -> tuple[U64, U64, I64]:
    """``(pre, post)`` pairs summed (background 0 and zero sums dropped), distinct and sorted by pre, post."""
    keep = (pre != 0) & (post != 0)
    if not keep.all():
        pre, post, weights = pre[keep], post[keep], weights[keep]
    if not pre.size:
        return pre, post, weights.astype(np.int64)
    order = np.lexsort((post, pre))
    pre, post, w = pre[order], post[order], weights[order].astype(np.int64)
    start = np.flatnonzero(np.concatenate([[True], (pre[1:] != pre[:-1]) | (post[1:] != post[:-1])]))
    sums = np.add.reduceat(w, start)
    nz = sums != 0
    return pre[start][nz], post[start][nz], sums[nz]


__all__ = ["AnnotationVersion", "Resolver", "check_body", "format_of", "sum_pairs", "sum_partners"]
