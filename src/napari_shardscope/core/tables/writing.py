"""Writing sorted tables: rows in (a dict, arrays, or a generator of sorted chunks), pages out, atomically.

``write_sorted_table(url, rows, format=...)`` cuts the rows into pages of ``page_rows`` rows and
hands each page to the format's *sink* as soon as it is full, so a 10⁹-row table generated or
converted chunk by chunk is written in memory bounded by a page (a shard of pages for the sharded
formats), never the table. The page directory is gathered on the way (24 bytes per page) and
written last, with the table's metadata: that document is the commit point.

Atomic, in the product's sense: a reader never finds a half-written table where a good one was.

* Local directories (zarr v3, sharded precomputed, Parquet parts) are written into a hidden
  sibling directory and renamed into place when complete; a table already there is swapped out
  (``overwrite=True``) or the write is refused (:class:`RefusedDestinationError`).
* A single local Parquet file is written to a temporary file beside it and renamed.
* On a bucket, where there is no rename, the metadata document (``zarr.json``, ``info``, the
  Parquet file's footer) goes last and, with ``overwrite=True``, the old one is deleted first: a
  reader sees the old table, no table, or the new one — never a table whose directory describes
  pages it does not hold. Pages of an old, larger table are left unreferenced.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.destination import PageSink, TableSummary
from napari_shardscope.core.tables.directory import (
    MAX_PAGE_ROWS,
    Columns,
    PageDirectory,
    TableSchema,
    as_key_array,
    normalise_values,
)
from napari_shardscope.core.tables.errors import UnsortedKeysError

U64 = npt.NDArray[np.uint64]
TableFormat = Literal["zarr3", "parquet", "precomputed"]
FORMATS: tuple[str, ...] = ("zarr3", "parquet", "precomputed")
#: Rows per page unless the caller says otherwise: 16,384 rows of (uint64, uint64) are 256 KiB
#: decoded, a few milliseconds to fetch and decode; a 10⁹-row table has 61,036 pages and a 1.4 MB
#: directory. Parquet's row groups are larger (its footer holds statistics per row group).
DEFAULT_PAGE_ROWS: dict[str, int] = {"zarr3": 1 << 14, "precomputed": 1 << 14, "parquet": 1 << 16}


# -- input ------------------------------------------------------------------------------------------------
Chunk = tuple[npt.ArrayLike, "Mapping[str, npt.ArrayLike] | npt.ArrayLike"]


def table_rows(rows: Any, values: Any = None, *, value_name: str = "value", unique: bool = True
               ) -> tuple[Iterator[tuple[U64, Columns]], bool]:
    """Chunks of ``(keys, columns)`` from what a caller passes, and whether they were sorted here.

    * a mapping ``{key: value}``, or ``keys`` with ``values`` (one array or a mapping of columns):
      sorted in memory;
    * a :class:`~napari_shardscope.core.tables.protocol.SortedTable`: its pages;
    * any other iterable of ``(keys, values)`` chunks: must already be sorted (checked as written).
    """
    from napari_shardscope.core.tables.memory import sorted_rows
    from napari_shardscope.core.tables.protocol import SortedTable

    if isinstance(rows, Mapping):
        if values is not None:
            raise ArgumentError("pass either a mapping or keys and values, not both")
        keys = as_key_array(np.fromiter((int(k) for k in rows), dtype=object, count=len(rows)))
        vals = np.asarray([rows[k] for k in rows]) if rows else np.zeros(0, dtype=np.uint64)
        if vals.dtype.kind == "i" and vals.size and int(vals.min()) >= 0:
            vals = vals.astype(np.uint64)
        k, cols = sorted_rows(keys, vals, unique=unique, value_name=value_name)
        return iter([(k, cols)]), True
    if values is not None:
        k, cols = sorted_rows(rows, values, unique=unique, value_name=value_name)
        return iter([(k, cols)]), True
    if isinstance(rows, SortedTable):
        return ((p.keys, dict(p.values)) for p in rows.iter_pages()), False
    if isinstance(rows, np.ndarray | str | bytes):
        raise ArgumentError("keys need values: write_sorted_table(url, keys, values) or a mapping")
    if not isinstance(rows, Iterable):
        raise ArgumentError(f"rows must be a mapping, arrays or an iterable of (keys, values) chunks, "
                            f"got {type(rows).__name__}")

    def chunks() -> Iterator[tuple[U64, Columns]]:
        for item in rows:
            try:
                k_in, v_in = item
            except (TypeError, ValueError):
                raise ArgumentError("each chunk must be a (keys, values) pair") from None
            k = as_key_array(k_in)
            yield k, normalise_values(v_in, k.size, [value_name])

    return chunks(), False


class _Repager:
    """Cuts sorted chunks into pages of exactly ``page_rows`` rows (the last may be shorter), checking order."""

    def __init__(self, page_rows: int, unique: bool) -> None:
        self.page_rows = page_rows
        self.unique = unique
        self._keys: list[U64] = []
        self._cols: list[Columns] = []
        self._held = 0
        self._last: int | None = None
        self._chunk = 0
        self._rows_before = 0

    def add(self, keys: U64, cols: Columns) -> Iterator[tuple[U64, Columns]]:
        if keys.size:
            bad = np.flatnonzero(keys[1:] <= keys[:-1]) if self.unique else np.flatnonzero(keys[1:] < keys[:-1])
            if bad.size:
                r = int(bad[0]) + 1
                raise UnsortedKeysError(f"chunk {self._chunk}, row {r} (table row {self._rows_before + r}): key "
                                        f"{int(keys[r])} is not above key {int(keys[r - 1])} of the row before")
            if self._last is not None and (int(keys[0]) < self._last or (self.unique and int(keys[0]) == self._last)):
                raise UnsortedKeysError(f"chunk {self._chunk} (table row {self._rows_before}) starts at key "
                                        f"{int(keys[0])}, not above the previous chunk's last key {self._last}")
            self._last = int(keys[-1])
        self._chunk += 1
        self._rows_before += keys.size
        if not keys.size:
            return
        at = 0
        if self._held:  # the leftover and the head of this chunk make one page (only those rows are copied)
            need = self.page_rows - self._held
            if keys.size < need:
                self._keys.append(keys)
                self._cols.append(cols)
                self._held += keys.size
                return
            self._keys.append(keys[:need])
            self._cols.append({c: v[:need] for c, v in cols.items()})
            self._held += need
            yield self._take(self._held)
            at = need
        # whole pages are views of the chunk: no concatenation, no copy
        while keys.size - at >= self.page_rows:
            end = at + self.page_rows
            yield keys[at:end], {c: v[at:end] for c, v in cols.items()}
            at = end
        if at < keys.size:
            self._keys = [keys[at:]]
            self._cols = [{c: v[at:] for c, v in cols.items()}]
            self._held = keys.size - at

    def flush(self) -> Iterator[tuple[U64, Columns]]:
        if self._held:
            yield self._take(self._held)

    def _take(self, n: int) -> tuple[U64, Columns]:
        """All ``n`` held rows as one page (the held pieces concatenated)."""
        assert n == self._held
        keys = np.concatenate(self._keys) if len(self._keys) > 1 else self._keys[0]
        names = list(self._cols[0])
        cols = {c: (np.concatenate([x[c] for x in self._cols]) if len(self._cols) > 1 else self._cols[0][c])
                for c in names}
        self._keys, self._cols, self._held = [], [], 0
        return keys, cols


def _schema_from(key: str, first: Columns, unique: bool) -> TableSchema:
    return TableSchema(key, tuple((n, np.dtype(c.dtype)) for n, c in first.items()), unique)


def _conform(cols: Columns, schema: TableSchema, chunk: int) -> Columns:
    """A chunk's columns in the schema's names and types (a safe cast only)."""
    if set(cols) != set(schema.value_names):
        raise ArgumentError(f"chunk {chunk} has columns {sorted(cols)}, the table has {list(schema.value_names)}")
    out = {}
    for name, dtype in schema.values:
        col = cols[name]
        if col.dtype != dtype:
            if col.dtype.kind in "ui" and dtype.kind in "ui":
                info = np.iinfo(dtype)
                if col.size and (int(col.min()) < info.min or int(col.max()) > info.max):
                    raise ArgumentError(f"chunk {chunk}: column {name!r} holds values outside {dtype} "
                                        f"([{int(col.min())}, {int(col.max())}])")
            elif not np.can_cast(col.dtype, dtype, casting="same_kind"):
                raise ArgumentError(f"chunk {chunk}: column {name!r} is {col.dtype}, the table's is {dtype}")
            col = col.astype(dtype)
        out[name] = col
    return out


# -- the driver -----------------------------------------------------------------------------------------------
SinkFactory = Callable[..., PageSink]


def write_sorted_table(url: str | os.PathLike[str], rows: Any, values: Any = None, *,
                       format: TableFormat | None = None, page_rows: int | None = None, key: str = "key",
                       value_name: str = "value", unique: bool = True, overwrite: bool = False,
                       context: Any = None, **options: Any) -> TableSummary:
    """Write a sorted table at ``url`` and return what was written.

    Parameters
    ----------
    url
        A local path or ``file://``, ``s3://``, ``gs://`` URL (http is read-only). A path ending in
        ``.parquet`` is one Parquet file; any other URL is a directory.
    rows, values
        ``{key: value}``; or ``keys`` and ``values`` arrays (``values`` one array or a mapping of
        column name → array); or an iterable of ``(keys, values)`` chunks already sorted by key
        (written as they come, memory bounded by a page); or another table (converted page by page).
    format
        ``"zarr3"`` (default; ``"parquet"`` for a ``.parquet`` URL), ``"parquet"`` or ``"precomputed"``.
    page_rows
        Rows per page (default :data:`DEFAULT_PAGE_ROWS` of the format).
    key, value_name
        The key column's name; the value column's name when ``values`` is one array.
    unique
        Refuse a key twice (a supervoxel → body table); ``False`` for a body → supervoxels table.
    overwrite
        Replace a table already at ``url``.
    options
        Per format: zarr3 ``compression`` (``"gzip"``, ``"zstd"``, ``"none"``), ``shard_pages``
        (pages per shard file, 0 for one file per page); precomputed ``shard_pages``, ``gzip``;
        parquet ``compression``, ``file_rows`` (rows per file of a directory of Parquet files),
        ``dictionary`` (False: no dictionary encoding of the value columns, for distinct values).

    Raises
    ------
    UnsortedKeysError
        When chunks handed in are not sorted (names the chunk and row).
    RefusedDestinationError
        When a table or other files are already there and ``overwrite`` is off.
    """
    fmt = format or ("parquet" if str(url).rstrip("/").endswith(".parquet") else "zarr3")
    if fmt not in FORMATS:
        raise ArgumentError(f"unknown table format {fmt!r}; use one of {list(FORMATS)}")
    n_page = DEFAULT_PAGE_ROWS[fmt] if page_rows is None else int(page_rows)
    if not 1 <= n_page <= MAX_PAGE_ROWS:
        raise ArgumentError(f"page_rows must be in [1, {MAX_PAGE_ROWS}], got {page_rows}")
    if not key or "/" in key or key.startswith("."):
        raise ArgumentError(f"bad key column name {key!r}")
    chunks, _ = table_rows(rows, values, value_name=value_name, unique=unique)
    # The first non-empty chunk fixes the schema; an empty input gets one uint64 value column.
    pending: list[tuple[U64, Columns]] = []
    schema: TableSchema | None = None
    for k, cols in chunks:
        pending.append((k, cols))
        if k.size or cols:
            schema = _schema_from(key, cols, unique)
            break
    if schema is None:
        schema = TableSchema(key, ((value_name, np.dtype(np.uint64)),), unique)
    sink = _make_sink(fmt, url, schema, n_page, overwrite=overwrite, context=context, options=options)
    try:
        summary = _drive(sink, fmt, str(url), schema, n_page, _chain(pending, chunks))
    except BaseException:
        sink.abort()
        raise
    return summary


def _chain(first: list[tuple[U64, Columns]], rest: Iterator[tuple[U64, Columns]]
           ) -> Iterator[tuple[U64, Columns]]:
    yield from first
    yield from rest


def _drive(sink: PageSink, fmt: str, url: str, schema: TableSchema, page_rows: int,
           chunks: Iterator[tuple[U64, Columns]]) -> TableSummary:
    repager = _Repager(page_rows, schema.unique)
    first: list[int] = []
    last: list[int] = []
    counts: list[int] = []
    vmax: dict[str, float | int | None] = {n: None for n in schema.value_names}
    number = 0

    def emit(page: tuple[U64, Columns]) -> None:
        nonlocal number
        keys, cols = page
        first.append(int(keys[0]))
        last.append(int(keys[-1]))
        counts.append(int(keys.size))
        for name, col in cols.items():
            if col.size:
                m = col.max().item()
                cur = vmax[name]
                vmax[name] = m if cur is None or m > cur else cur
        sink.write_page(number, keys, cols)
        number += 1

    for i, (k, cols) in enumerate(chunks):
        if not k.size:
            continue
        for page in repager.add(k, _conform(cols, schema, i)):
            emit(page)
    for page in repager.flush():
        emit(page)
    directory = PageDirectory.checked(np.asarray(first, dtype=np.uint64), np.asarray(last, dtype=np.uint64),
                                      np.asarray(counts, dtype=np.int64), unique=schema.unique, where=url)
    summary = TableSummary(url, fmt, schema, directory, page_rows,
                           {k: (None if v is None else (float(v) if isinstance(v, float) else int(v)))
                            for k, v in vmax.items()})
    sink.finish(summary)
    return summary


def _make_sink(fmt: str, url: str | os.PathLike[str], schema: TableSchema, page_rows: int, *, overwrite: bool,
               context: Any, options: Mapping[str, Any]) -> PageSink:
    if fmt == "zarr3":
        from napari_shardscope.core.tables.zarr_table import ZarrSink

        return ZarrSink(url, schema, page_rows, overwrite=overwrite, context=context, **options)
    if fmt == "precomputed":
        from napari_shardscope.core.tables.sharded_table import ShardedSink

        return ShardedSink(url, schema, page_rows, overwrite=overwrite, context=context, **options)
    from napari_shardscope.core.tables.parquet_table import ParquetSink

    return ParquetSink(url, schema, page_rows, overwrite=overwrite, context=context, **options)


