"""A precomputed annotation source read as pieces of sites, so its import holds a piece, never the source.

The source's ``by_id`` index is read a minishard (sharded) or a group of files (unsharded) at a time
(:meth:`~napari_shardscope.core.formats.precomputed.annotations.reader.AnnotationSource.iter_batches`);
batches are gathered into pieces of about :data:`~.base_input.PIECE_ROWS` annotations, each
converted to sites (lines are synapses: ``point_a`` pre, ``point_b`` post; points are points) and
handed to the streamed build (:mod:`.base_stream`), which finds duplicate ids in its merge by id.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import base_input
from napari_shardscope.core.annotation.base import BaseProperty
from napari_shardscope.core.annotation.base_sites import I64, U64, Sites, check_ids, interleave_sites, to_voxels
from napari_shardscope.core.annotation.errors import AnnotationTableError
from napari_shardscope.core.errors import UnsupportedFeatureError
from napari_shardscope.core.formats.units import nm_per_neuroglancer_unit


def precomputed_pieces(source: Any, *, where: str, shape: tuple[int, int, int],
                       voxel_size: Sequence[float] | None, rows: int | None = None) -> Iterator[Sites]:
    """The sites of a precomputed annotation collection, ``rows`` annotations or so at a time.

    At least one piece is yielded (of no sites for an empty source), so the caller always sees the
    properties. ``rows``: annotations per piece (default :data:`~.base_input.PIECE_ROWS`).
    """
    schema = source.schema
    kind = schema.annotation_type
    if kind not in ("point", "line"):
        raise UnsupportedFeatureError(f"importing {kind} annotations", detail="a base holds points and lines "
                                      "(synapses)")
    dims = [d.name for d in schema.dimensions]
    if sorted(dims) != ["x", "y", "z"]:
        raise AnnotationTableError(f"annotation dimensions are {dims}; an import needs x, y and z", key=where)
    rows = base_input.PIECE_ROWS if rows is None else rows
    held: list[Any] = []
    count = 0
    row0 = 0
    for batch in source.iter_batches():
        held.append(batch)
        count += len(batch)
        if count >= rows:
            yield sites_of_batches(source, held, where=where, shape=shape, voxel_size=voxel_size, row0=row0)
            row0 += count
            held, count = [], 0
    if held or row0 == 0:
        yield sites_of_batches(source, held, where=where, shape=shape, voxel_size=voxel_size, row0=row0)


def sites_of_batches(source: Any, batches: list[Any], *, where: str, shape: tuple[int, int, int],
                     voxel_size: Sequence[float] | None, row0: int = 0) -> Sites:
    """The sites of some batches of a precomputed source (ids checked for range here, for repeats by the merge)."""
    schema = source.schema
    kind = schema.annotation_type
    dims = [d.name for d in schema.dimensions]
    order = [dims.index(a) for a in "xyz"]
    scale_nm = np.asarray([schema.dimensions[i].scale * _unit_nm(schema.dimensions[i].unit, where)
                           for i in order], dtype=np.float64)
    rank = len(dims)
    ids = np.concatenate([np.asarray(b.ids, dtype=np.uint64) for b in batches]) if batches else \
        np.zeros(0, np.uint64)
    geo = np.concatenate([np.asarray(b.geometry, dtype=np.float64) for b in batches]) if batches else \
        np.zeros((0, 2 * rank if kind == "line" else rank))

    def voxels(cols: npt.NDArray[Any], what: str) -> I64:
        xyz = cols[:, order] * (scale_nm / np.asarray(voxel_size, dtype=np.float64) if voxel_size is not None
                                else 1.0)
        return to_voxels(xyz, columns=what, where=where, shape=shape, voxel_size=None, row0=row0)

    sides = ("pre", "post") if kind == "line" else ("point",)
    props: list[tuple[BaseProperty, npt.NDArray[Any]]] = []
    for i, p in enumerate(schema.properties):
        if p.components != 1:
            continue  # rgb / rgba colours: display hints, not properties of a synapse
        arr = np.concatenate([np.asarray(b.properties[p.id]) for b in batches]) if batches else \
            np.zeros(0, p.dtype)
        labels = None
        typ = "float" if arr.dtype.kind == "f" else "int"
        if p.enum_values is not None and p.enum_labels is not None:
            typ = "enum"
            labels = {str(int(v) if typ != "float" and float(v).is_integer() else v): lab
                      for v, lab in zip(p.enum_values, p.enum_labels, strict=True)}
        if typ == "float":
            arr = arr.astype(np.float64)
        props.append((BaseProperty(p.id, f"p{i}", typ, sides, labels), arr))
    for j, r in enumerate(schema.relationships):
        firsts: list[U64] = []
        for b in batches:
            rel = (b.relationships or {}).get(r)
            first = np.zeros(len(b), np.uint64)
            if rel is not None:
                has = rel.counts > 0
                first[has] = rel.values[rel.offsets[:-1][has]]
            firsts.append(first)
        arr = np.concatenate(firsts) if firsts else np.zeros(0, np.uint64)
        props.append((BaseProperty(r, f"r{j}", "int", sides), arr))
    if kind == "line":
        pre, post = voxels(geo[:, :rank], "point_a"), voxels(geo[:, rank:], "point_b")
        sid, _ = check_ids(ids, column="id", where=where, pairs=True, row0=row0, unique=False)
        return interleave_sites(sid, pre, post, props)
    sid, _ = check_ids(ids, column="id", where=where, pairs=False, row0=row0, unique=False)
    return interleave_sites(sid, voxels(geo, "point"), None, props)


def _unit_nm(unit: str, where: str) -> float:
    nm = nm_per_neuroglancer_unit(unit)
    if nm is None:
        raise AnnotationTableError(f"dimension unit {unit!r} is not a length", key=where)
    return nm
