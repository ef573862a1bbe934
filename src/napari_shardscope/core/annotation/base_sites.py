"""The sites of a base as columns, as every input produces them: checked voxels, checked ids, interleaved sites.

A synapse row ``S`` becomes a pre site (id ``2S + 1``) and a post site (``2S + 2``); a point keeps
its id. Shared by the table reader (:mod:`.base_import`) and the precomputed reader
(:mod:`.base_precomputed`); errors name the source, the columns and the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.base import BaseProperty
from napari_shardscope.core.annotation.base_order import id_order
from napari_shardscope.core.annotation.errors import AnnotationTableError
from napari_shardscope.core.annotation.model import MAX_ID

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


def to_voxels(xyz: npt.NDArray[Any], *, columns: str, where: str, shape: tuple[int, int, int],
              voxel_size: Sequence[float] | None, row0: int = 0) -> I64:
    """``(n, 3)`` x, y, z (voxels, or nm with ``voxel_size``) → ``(n, 3)`` int64 z, y, x inside ``shape`` (a view
    of ``xyz`` where it is int64 already: the caller copies it into its sites once)."""
    v = xyz
    if v.dtype.kind == "f" or voxel_size is not None:
        v = v.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(v).all(axis=1))
        if bad.size:
            raise AnnotationTableError(f"columns {columns}, row {row0 + int(bad[0])}: coordinate {v[bad[0]].tolist()} "
                                       f"is not a finite number", key=where)
        if voxel_size is not None:
            v = v / np.asarray(voxel_size, dtype=np.float64)
        v = np.floor(v)
        lim = float(2**62)
        big = np.flatnonzero((np.abs(v) >= lim).any(axis=1))
        if big.size:
            raise AnnotationTableError(f"columns {columns}, row {row0 + int(big[0])}: coordinate {v[big[0]].tolist()} "
                                       f"is out of range", key=where)
    elif v.dtype.kind == "u" and v.size and int(v.max()) >= 2**62:
        row = int(np.flatnonzero((v >= 2**62).any(axis=1))[0])
        raise AnnotationTableError(f"columns {columns}, row {row0 + row}: coordinate {v[row].tolist()} is out of "
                                   f"range",
                                   key=where)
    # z, y, x as a view (the caller copies it into its interleaved sites once); a whole-array minimum and
    # one maximum per column decide whether any row is outside (a per-row test was 7x the CPU), and only
    # then the rows are tested to name the first
    zyx = v[:, ::-1] if v.dtype == np.int64 else v[:, ::-1].astype(np.int64)
    inside = not zyx.size or (int(zyx.min()) >= 0 and all(int(zyx[:, i].max()) < shape[i] for i in range(3)))
    outside = np.zeros(0, np.intp) if inside else \
        np.flatnonzero(((zyx < 0) | (zyx >= np.asarray(shape, dtype=np.int64))).any(axis=1))
    if outside.size:
        r = int(outside[0])
        raise AnnotationTableError(
            f"columns {columns}, row {row0 + r}: voxel (z, y, x) {tuple(zyx[r].tolist())} is outside the labelmap's "
            f"scale-0 shape {shape} ({outside.size} row(s) outside; is the table in nm? pass voxel_size)", key=where)
    return zyx


@dataclass
class Sites:
    """The annotations of a base as columns, before sorting (what both inputs produce)."""

    ids: U64
    layout: str  # "synapses" (ids 2S+1 pre, 2S+2 post) or "points"
    zyx: npt.NDArray[np.int32]  # (n, 3) z, y, x
    #: One value per row of the input: per synapse (both its sites carry it) or per point. Not repeated
    #: per site: an import spills and sorts them once per synapse (:mod:`.base_stream`).
    properties: list[tuple[BaseProperty, npt.NDArray[Any]]]


def check_ids(ids: npt.NDArray[Any], *, column: str, where: str, pairs: bool, row0: int = 0,
               unique: bool = True) -> tuple[U64, npt.NDArray[np.intp] | None]:
    """The ids as u64 (checked: in range and, with ``unique``, no duplicate) and the permutation that sorts
    them (None: sorted, or not asked: a piece's duplicates are found by the merge, :mod:`.base_stream`)."""
    if ids.dtype.kind not in "iu":
        raise AnnotationTableError(f"column {column!r} is {ids.dtype}, not integer ids", key=where)
    if ids.dtype.kind == "i" and ids.size and int(ids.min()) < 0:
        r = int(np.flatnonzero(ids < 0)[0])
        raise AnnotationTableError(f"column {column!r}, row {row0 + r}: negative id {int(ids[r])}", key=where)
    out = ids.astype(np.uint64)
    top = (MAX_ID - 2) // 2 if pairs else MAX_ID
    low = 0 if pairs else 1
    bad = np.flatnonzero((out > np.uint64(top)) | (out < np.uint64(low)))
    if bad.size:
        r = int(bad[0])
        raise AnnotationTableError(f"column {column!r}, row {row0 + r}: id {int(out[r])} is outside {low}..{top}",
                                   key=where)
    if not unique:
        return out, None
    order = id_order(out)
    s = out if order is None else out[order]
    dup = np.flatnonzero(s[1:] == s[:-1])
    if dup.size:
        full = np.arange(out.size) if order is None else order
        a, b = sorted((int(full[dup[0]]), int(full[dup[0] + 1])))
        raise AnnotationTableError(f"column {column!r}: rows {a} and {b} have the same id {int(s[dup[0]])}",
                                   key=where)
    return out, order


def interleave_sites(sid: U64, pre: I64, post: I64 | None, props: list[tuple[BaseProperty, npt.NDArray[Any]]],
           order: npt.NDArray[np.intp] | None = None) -> Sites:
    """Interleave pre and post sites (ids 2S+1, 2S+2) or take points (id S); property columns follow, one
    value per synapse (not repeated per site).

    Rows are put in synapse-id order first (``order``, from :func:`check_ids`), so the interleaved
    ids are sorted; the interleaving writes straight into the output (no gathered copy first).
    """
    n = sid.size

    def take(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return a if order is None else a[order]

    if post is None:
        return Sites(take(sid), "points", take(pre).astype(np.int32), [(p, take(arr)) for p, arr in props])
    ids = np.empty(2 * n, np.uint64)
    s = take(sid)
    np.multiply(s, np.uint64(2), out=ids[0::2])
    ids[0::2] += np.uint64(1)
    np.add(ids[0::2], np.uint64(1), out=ids[1::2])
    zyx = np.empty((2 * n, 3), np.int32)  # below 2**31 voxels per axis (the block grid is checked)
    zyx[0::2], zyx[1::2] = take(pre), take(post)
    return Sites(ids, "synapses", zyx, [(p, take(arr)) for p, arr in props])
