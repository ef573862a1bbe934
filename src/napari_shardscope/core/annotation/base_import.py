"""Import a synapse table or a precomputed annotation source as the base of an annotation instance, once.

The input is read a piece at a time (:mod:`.base_input`: Parquet row groups, CSV blocks), each
piece converted to columns (vectorised: no Python loop per row) and checked, and the base's sorted,
page-readable tables (:mod:`.base`) are written in ``base_dir`` beside the repository by a merge in
bounded memory (:mod:`.base_stream`). Nothing of it enters the versioned store: versions hold only
edits over it.

Inputs:

* a **CSV, Parquet or Feather** synapse table as CAVE and neuPrint export them. CAVE: ``id``,
  ``pre_pt_position`` / ``post_pt_position`` (list columns, x y z) or their ``_x``/``_y``/``_z``
  columns; neuPrint: ``x_pre``, ``y_pre``, ``z_pre``, ``x_post``, ... ``bodyId_pre``,
  ``confidence_post``. Other names through :class:`SynapseColumns`. A CSV has no random access, so
  it is converted like every table: the tables written here are what is read afterwards;
* a **precomputed annotation source** (``neuroglancer_annotations_v1``, local or a URL, read through
  the one byte store): lines are synapses (``point_a`` pre, ``point_b`` post), points are points;
  read a shard's minishards at a time (:mod:`.base_precomputed`), never whole.

Each synapse row becomes a ``pre`` and a ``post`` annotation linked ``PreSynTo``/``PostSynTo``;
a row id ``S`` (the table's ``id`` column, or the row number) gives ids ``2S + 1`` (pre) and
``2S + 2`` (post) — :func:`synapse_ids`. Other numeric and boolean columns become properties:
a column named ``pre_*``/``pre_pt_*``/``*_pre`` goes on the pre site (without that affix),
``post_*``/``*_post`` on the post site, any other on both. Coordinates are voxels of the
labelmap's scale 0 unless ``voxel_size`` (nm per voxel, x y z) says the table is in nm; a
non-integer coordinate is floored to the voxel holding it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.base import BaseConfig, BaseProperty
from napari_shardscope.core.annotation.base_input import (
    TABLE_SUFFIXES,
    is_table_file,
    iter_table_pieces,
    prefetched,
    pyarrow_modules,
    read_table_file,
)
from napari_shardscope.core.annotation.base_sites import Sites, check_ids, interleave_sites, to_voxels
from napari_shardscope.core.annotation.base_stream import RANGE_SITES, BaseBuilder, SiteChunk
from napari_shardscope.core.annotation.errors import AnnotationArgumentError, AnnotationTableError
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.version import LabelmapVersion

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
__all__ = ["TABLE_SUFFIXES", "SynapseColumns", "build_base", "is_table_file", "read_table_file", "synapse_ids",
           "write_base"]


@dataclass(frozen=True)
class SynapseColumns:
    """Which columns of a synapse table hold what.

    ``pre`` / ``post``: one list column of (x, y, z) or three columns x, y, z; ``post=None`` for a
    table of points. ``id``: the synapse id column (None: the row number). ``properties``: the
    columns to keep (None: every other numeric or boolean column).
    """

    pre: str | tuple[str, str, str]
    post: str | tuple[str, str, str] | None = None
    id: str | None = None
    properties: tuple[str, ...] | None = None


#: CAVE's synapse tables (position list columns, or their split ``_x/_y/_z`` columns).
CAVE = SynapseColumns("pre_pt_position", "post_pt_position", "id")
#: neuPrint's synapse connections export.
NEUPRINT = SynapseColumns(("x_pre", "y_pre", "z_pre"), ("x_post", "y_post", "z_post"))


def synapse_ids(synapse: npt.ArrayLike) -> tuple[U64, U64]:
    """The annotation ids of synapse ids ``synapse``: ``2S + 1`` for the pre site, ``2S + 2`` for the post."""
    s = np.asarray(synapse, dtype=np.uint64)
    return s * np.uint64(2) + np.uint64(1), s * np.uint64(2) + np.uint64(2)


def detect_columns(names: Sequence[str], *, where: str) -> SynapseColumns:
    """The layout of a table from its column names (CAVE or neuPrint), or an error naming what is missing."""
    have = set(names)
    if {"pre_pt_position", "post_pt_position"} <= have:
        return SynapseColumns(CAVE.pre, CAVE.post, "id" if "id" in have else None)
    if all(f"pre_pt_position_{a}" in have and f"post_pt_position_{a}" in have for a in "xyz"):
        return SynapseColumns(tuple(f"pre_pt_position_{a}" for a in "xyz"),  # type: ignore[arg-type]
                              tuple(f"post_pt_position_{a}" for a in "xyz"),  # type: ignore[arg-type]
                              "id" if "id" in have else None)
    if set(NEUPRINT.pre) | set(NEUPRINT.post or ()) <= have:
        return SynapseColumns(NEUPRINT.pre, NEUPRINT.post, None)
    if {"x", "y", "z"} <= have:
        return SynapseColumns(("x", "y", "z"), None, "id" if "id" in have else None)
    raise AnnotationArgumentError(
        f"{where}: cannot tell which columns hold the synapse sites (columns: {', '.join(names)}); name them: "
        f"columns=SynapseColumns(pre=('x_pre', 'y_pre', 'z_pre'), post=(...), id=...)")


# -- reading the input --------------------------------------------------------------------------------------
_pyarrow = pyarrow_modules


def _np(col: Any) -> npt.NDArray[Any]:
    """A pyarrow (chunked) numeric or boolean array as numpy, zero-copy where the layout allows.

    ``to_numpy(zero_copy_only=False)`` imports pandas (seconds on a cold start, more than the import
    of 10⁶ synapses): booleans go through uint8 and a float column's empty cells become NaN first.
    """
    pa = _pyarrow()
    arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    if pa.types.is_boolean(arr.type):
        return _np(pa.compute.cast(arr.fill_null(False), pa.uint8())).astype(np.bool_)
    if arr.null_count:
        arr = arr.fill_null(float("nan") if pa.types.is_floating(arr.type) else 0)
    name = str(arr.type)
    dtype = np.dtype({"float": "float32", "double": "float64", "halffloat": "float16"}.get(name, name))
    out: npt.NDArray[Any] = np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))
    return out[arr.offset:]


class _Cols:
    """Column access on a pyarrow Table with checks whose errors name the file, column and row."""

    def __init__(self, table: Any, where: str, row0: int = 0) -> None:
        self.pa = _pyarrow()
        self.row0 = row0  # the table's first row's number in the file (a piece of a larger table)
        self.table = table
        self.where = where
        self.names = [str(n) for n in table.column_names]

    def _column(self, name: str) -> Any:
        if name not in self.names:
            raise AnnotationTableError(f"has no column {name!r} (columns: {', '.join(self.names)})", key=self.where)
        col = self.table.column(name)
        if col.null_count:
            row = self.row0 + int(np.flatnonzero(_np(col.is_null()))[0])
            raise AnnotationTableError(f"column {name!r}, row {row}: no value", key=self.where)
        return col

    def numeric(self, name: str) -> npt.NDArray[Any]:
        col = self._column(name)
        t = col.type
        pa = self.pa
        if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            raise AnnotationTableError(f"column {name!r} is {t}, not a number", key=self.where)
        return _np(col)

    def xyz(self, spec: str | tuple[str, str, str]) -> npt.NDArray[Any]:
        """``(n, 3)`` x, y, z values of one list column or three columns."""
        if isinstance(spec, str):
            col = self._column(spec)
            pa = self.pa
            if not (pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type)
                    or pa.types.is_large_list(col.type)):
                raise AnnotationTableError(f"column {spec!r} is {col.type}, not a list of x, y, z", key=self.where)
            col = col.combine_chunks()
            lengths = _np(pa.compute.list_value_length(col))
            bad = np.flatnonzero(lengths != 3)
            if bad.size:
                raise AnnotationTableError(f"column {spec!r}, row {self.row0 + int(bad[0])}: "
                                           f"{int(lengths[bad[0]])} values, "
                                           f"not x, y, z", key=self.where)
            flat = pa.compute.list_flatten(col)
            if flat.null_count:
                row = self.row0 + int(np.flatnonzero(_np(flat.is_null()))[0]) // 3
                raise AnnotationTableError(f"column {spec!r}, row {row}: no value", key=self.where)
            if not (pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type)):
                raise AnnotationTableError(f"column {spec!r} holds {flat.type}, not numbers", key=self.where)
            return _np(flat).reshape(-1, 3)
        return np.stack([self.numeric(c) for c in spec], axis=1)


def _kinds_of(column: str) -> tuple[str, tuple[str, ...]]:
    """A property column's name on the annotations and which sites carry it (the affix rule)."""
    for pattern, kinds in ((r"^pre_pt_(.+)$", ("pre",)), (r"^post_pt_(.+)$", ("post",)),
                           (r"^pre_(.+)$", ("pre",)), (r"^post_(.+)$", ("post",)),
                           (r"^(.+)_pre$", ("pre",)), (r"^(.+)_post$", ("post",))):
        m = re.match(pattern, column)
        if m:
            return m.group(1), kinds
    return column, ("pre", "post")


def sites_from_table(table: Any, *, where: str, columns: SynapseColumns | None, shape: tuple[int, int, int],
                     voxel_size: Sequence[float] | None, row0: int = 0, whole: bool = True) -> Sites:
    """The annotations of a synapse (or point) table, vectorised.

    ``row0``: the number of the table's first row in the file (a piece); ``whole=False``: a piece, whose
    ids are not sorted nor checked against each other here (the merge does both, for the whole table).
    """
    c = _Cols(table, where, row0)
    cols = columns or detect_columns(c.names, where=where)
    n = int(table.num_rows)
    pre = to_voxels(c.xyz(cols.pre), columns=_name(cols.pre), where=where, shape=shape, voxel_size=voxel_size,
                    row0=row0)
    post = None if cols.post is None else to_voxels(c.xyz(cols.post), columns=_name(cols.post), where=where,
                                                    shape=shape, voxel_size=voxel_size, row0=row0)
    pairs = post is not None
    order: npt.NDArray[np.intp] | None = None
    if cols.id is not None:
        sid, order = check_ids(c.numeric(cols.id), column=cols.id, where=where, pairs=pairs, row0=row0,
                                unique=whole)
    else:
        sid = np.arange(row0, row0 + n, dtype=np.uint64) + np.uint64(0 if pairs else 1)
    used = {cols.id} | _used(cols.pre) | _used(cols.post)
    wanted = cols.properties
    names = [x for x in c.names if x not in used] if wanted is None else list(wanted)
    props: list[tuple[BaseProperty, npt.NDArray[Any]]] = []
    seen: dict[tuple[str, str], str] = {}
    for i, col_name in enumerate(names):
        if col_name not in c.names:
            raise AnnotationTableError(f"has no column {col_name!r} (columns: {', '.join(c.names)})", key=where)
        t = table.column(col_name).type
        pa = c.pa
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            if wanted is None:
                continue  # text, lists, timestamps: not properties of a base (named in the docs)
            raise AnnotationTableError(f"column {col_name!r} is {t}; a base property is a number or a boolean",
                                       key=where)
        col = table.column(col_name)
        if col.null_count and not pa.types.is_floating(t):
            row = row0 + int(np.flatnonzero(_np(col.is_null()))[0])
            raise AnnotationTableError(f"column {col_name!r}, row {row}: no value (only a float column may have "
                                       f"empty cells)", key=where)
        arr = _np(col)
        if arr.dtype == object:
            arr = arr.astype(np.float64)
        prop, kinds = _kinds_of(col_name) if pairs else (col_name, ("point",))
        for k in kinds:
            if (prop, k) in seen:
                raise AnnotationTableError(f"columns {seen[(prop, k)]!r} and {col_name!r} both give the {k} sites' "
                                           f"property {prop!r}; choose one with columns=SynapseColumns(properties=...)",
                                           key=where)
            seen[(prop, k)] = col_name
        typ = "bool" if arr.dtype == np.bool_ else "float" if arr.dtype.kind == "f" else "int"
        if typ == "float":
            arr = arr.astype(np.float64)
        props.append((BaseProperty(prop, f"p{i}", typ, kinds), arr))
    return interleave_sites(sid, pre, post, props, order)


def _name(spec: str | tuple[str, str, str]) -> str:
    return repr(spec) if isinstance(spec, str) else "/".join(spec)


def _used(spec: str | tuple[str, str, str] | None) -> set[str | None]:
    if spec is None:
        return set()
    return {spec} if isinstance(spec, str) else set(spec)


# -- writing the base ---------------------------------------------------------------------------------------
def _chunk(sites: Sites) -> SiteChunk:
    return SiteChunk(sites.ids, np.asarray(sites.zyx, dtype=np.int32).reshape(-1, 3),
                     [arr for _, arr in sites.properties])


def write_base(sites: Sites, base_dir: str | os.PathLike[str], *, block: tuple[int, int, int],
               shape: tuple[int, int, int], source: str, format: str = "parquet",
               overwrite: bool = False, labelmap: LabelmapVersion | None = None) -> BaseConfig:
    """Write the records, spatial and (with ``labelmap``) synapse index and sites tables of ``sites``.

    With ``labelmap`` (the labelmap at the version the base is imported at), each site's supervoxel is
    read (one read per block holding sites) and kept in the records table (column ``sv``), and a
    synapse base gets its synapse index (the ``synapses`` table) so that ``connections(body)`` reads
    only the body's supervoxels' rows; every base gets the ids by supervoxel (the ``sites`` table) so
    that ``synapses(body)`` reads only the body's sites. One piece: :func:`build_base` streams.
    """
    builder = BaseBuilder(base_dir, block=block, shape=shape, source=source, layout=sites.layout,
                          properties=[p for p, _ in sites.properties], format=format, overwrite=overwrite,
                          labelmap=labelmap)
    try:
        builder.add(_chunk(sites))
    except BaseException:
        builder.abort()
        raise
    return builder.finish()


def _table_pieces(path: Any, *, where: str, columns: SynapseColumns | None, shape: tuple[int, int, int],
                  voxel_size: Sequence[float] | None) -> Iterator[Sites]:
    for table, row0 in iter_table_pieces(path):
        yield sites_from_table(table, where=where, columns=columns, shape=shape, voxel_size=voxel_size, row0=row0,
                               whole=False)


def _duplicate_finder(path: Any, *, where: str, columns: SynapseColumns | None) -> Any:
    """What names two rows of the table at ``path`` holding synapse id ``sid`` (read again: an error path)."""
    def find(sid: int) -> AnnotationTableError:
        rows: list[int] = []
        column = "id"
        for table, row0 in iter_table_pieces(path):
            c = _Cols(table, where, row0)
            column = (columns or detect_columns(c.names, where=where)).id or "id"
            ids = c.numeric(column)
            rows.extend(row0 + int(r) for r in np.flatnonzero(ids == sid)[:2])
            if len(rows) >= 2:
                break
        if len(rows) < 2:
            return AnnotationTableError(f"column {column!r}: id {sid} is given twice", key=where)
        return AnnotationTableError(f"column {column!r}: rows {rows[0]} and {rows[1]} have the same id {sid}",
                                    key=where)
    return find


def build_base(source: Any, base_dir: str | os.PathLike[str], *, shape: tuple[int, int, int],
               block: tuple[int, int, int], columns: SynapseColumns | Mapping[str, Any] | None = None,
               voxel_size: Sequence[float] | None = None, format: str = "parquet",
               overwrite: bool = False, labelmap: LabelmapVersion | None = None,
               range_sites: int = RANGE_SITES) -> BaseConfig:
    """Read ``source`` (a table file or a precomputed annotation source) and write its base tables.

    A table file or a precomputed source is read a piece at a time and its tables written by a merge in bounded memory
    (:mod:`.base_stream`); ``range_sites`` is the sites merged at once. ``labelmap``: read each
    site's supervoxel there and write the synapse index (:func:`write_base`).
    """
    if voxel_size is not None:
        vs = [float(v) for v in voxel_size]
        if len(vs) != 3 or not all(np.isfinite(v) and v > 0 for v in vs):
            raise AnnotationArgumentError(f"voxel_size is three positive nm sizes (x, y, z), got {voxel_size!r}")
        voxel_size = vs
    if isinstance(columns, Mapping):
        columns = SynapseColumns(**columns)
    if format not in ("parquet", "zarr3"):
        raise ArgumentError(f"base table format must be parquet or zarr3, got {format!r}")
    duplicate = None
    if not is_table_file(source):
        from napari_shardscope.core.annotation.base_precomputed import precomputed_pieces
        from napari_shardscope.core.formats.annotations import open_annotations
        from napari_shardscope.core.formats.precomputed.annotations.reader import AnnotationSource

        if columns is not None:
            raise AnnotationArgumentError("columns= names the columns of a table; a precomputed source has none")
        src = source if isinstance(source, AnnotationSource) else open_annotations(_url(source))
        where = src.store.url
        read: Iterator[Sites] = precomputed_pieces(src, where=where, shape=shape, voxel_size=voxel_size)
    else:
        where = str(Path(source).resolve())
        read = _table_pieces(source, where=where, columns=columns, shape=shape, voxel_size=voxel_size)
        duplicate = _duplicate_finder(source, where=where, columns=columns)
    # the next piece is read and converted by a thread while this one is sorted and spilled
    pieces = prefetched(read)
    first = next(pieces)  # the columns, so the properties, of every piece (the table's schema)
    properties = [p for p, _ in first.properties]
    builder = BaseBuilder(base_dir, block=block, shape=shape, source=where, layout=first.layout,
                          properties=properties, format=format, overwrite=overwrite, labelmap=labelmap,
                          duplicate=duplicate, range_sites=range_sites)
    try:
        builder.add(_chunk(first))
        del first
        for sites in pieces:
            got = [p for p, _ in sites.properties]
            if got != properties or sites.layout != builder.layout:
                raise AnnotationTableError(f"a piece of the table has the properties {[p.name for p in got]} "
                                           f"({[p.type for p in got]}), the first had "
                                           f"{[p.name for p in properties]} ({[p.type for p in properties]})",
                                           key=where)
            builder.add(_chunk(sites))
            del sites
    except BaseException:
        pieces.close()
        builder.abort()
        raise
    return builder.finish()


def _url(source: Any) -> str:
    text = os.fspath(source)
    return text if "://" in text else str(Path(text).resolve())
