"""The reverse of a table: the same rows sorted by a value column (body → supervoxels from supervoxel → body).

A body's supervoxels are a range of the reverse table, so ``members(body)`` reads the one or two
pages holding them instead of scanning the forward table. The reverse table is written by the same
writer, from the forward table read page by page:

* a table of up to ``memory_rows`` rows is sorted in memory (16 bytes per row of (body,
  supervoxel); the default, 2²⁴ rows, needs ~0.5 GB at the peak of the sort);
* a larger one is cut into ranges of the value column, each at most ``memory_rows`` rows, by a
  first pass that samples the values; a second pass spills each range's rows to a local
  temporary file, and each range is then sorted in memory and written in order. No external merge
  sort: a range is sorted once. A value repeated more than ``memory_rows`` times (one body of more
  supervoxels than that) makes its range larger than the bound — that range is still sorted in
  memory.

A pipeline that already produces the body-sorted table writes it directly with
:func:`~napari_shardscope.core.tables.write_sorted_table` (``unique=False``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.destination import TableSummary
from napari_shardscope.core.tables.directory import Columns
from napari_shardscope.core.tables.protocol import SortedTable
from napari_shardscope.core.tables.writing import TableFormat, write_sorted_table

U64 = npt.NDArray[np.uint64]
#: Rows sorted in memory at once.
DEFAULT_MEMORY_ROWS = 1 << 24
#: Values sampled per range by the first pass of a large table.
SAMPLES_PER_RANGE = 256


def reverse_rows(table: SortedTable, value: str, *, memory_rows: int = DEFAULT_MEMORY_ROWS,
                 scratch: str | os.PathLike[str] | None = None) -> Iterator[tuple[U64, Columns]]:
    """``(values, {key_name: keys})`` chunks of ``table`` sorted by ``value`` then key."""
    dtype = table.schema.dtype_of(value)
    if dtype.kind not in "ui":
        raise ArgumentError(f"column {value!r} is {dtype}: only an integer column can key a reverse table")
    key_name = table.schema.key
    n = table.num_rows
    if n <= memory_rows:
        ks: list[U64] = []
        vs: list[npt.NDArray[Any]] = []
        for page in table.iter_pages([value]):
            ks.append(page.keys)
            vs.append(page.values[value])
        if not ks:
            return
        k = np.concatenate(ks)
        v = np.concatenate(vs)
        _check_non_negative(v, value)
        v = v.astype(np.uint64)
        order = np.lexsort((k, v))
        yield v[order], {key_name: k[order]}
        return
    edges = _range_edges(table, value, -(-n // memory_rows))
    row = np.dtype([("v", "<u8"), ("k", "<u8")])

    def page_rows() -> Iterator[npt.NDArray[Any]]:
        for page in table.iter_pages([value]):
            v = page.values[value]
            _check_non_negative(v, value)
            rows = np.empty(page.keys.size, dtype=row)
            rows["v"], rows["k"] = v.astype(np.uint64), page.keys
            yield rows

    for part in sort_by_ranges(page_rows(), edges, ("v", "k"), scratch=scratch, prefix="shardscope-reverse-"):
        if part.size:
            yield part["v"].astype(np.uint64), {key_name: part["k"].astype(np.uint64)}


def sort_by_ranges(batches: Iterable[npt.NDArray[Any]], edges: U64, order: tuple[str, str], *,
                   scratch: str | os.PathLike[str] | None = None, prefix: str = "shardscope-sort-",
                   ) -> Iterator[npt.NDArray[Any]]:
    """Rows (structured arrays) sorted by ``order`` (major field, minor field) with bounded memory: each batch is
    split by the major field's ranges (``edges``: the ranges' inner bounds) into one spill file per range, then each
    range is read back and sorted alone. Yields one sorted part per range, in order (empty ones too)."""
    major, minor = order
    with tempfile.TemporaryDirectory(prefix=prefix, dir=scratch) as tmp:
        files = [Path(tmp) / f"range-{i:05d}" for i in range(edges.size + 1)]
        dtype: np.dtype[Any] | None = None
        handles = [f.open("wb") for f in files]
        try:
            for rows in batches:
                dtype = rows.dtype
                which = np.searchsorted(edges, rows[major], side="right")
                by_range = np.argsort(which, kind="stable")
                cuts = np.searchsorted(which[by_range], np.arange(1, len(files)))
                for i, piece in enumerate(np.split(rows[by_range], cuts)):
                    if piece.size:
                        handles[i].write(piece.tobytes())
        finally:
            for h in handles:
                h.close()
        for f in files:
            part: npt.NDArray[Any] = np.fromfile(f, dtype=dtype) if dtype is not None else np.zeros(0)
            f.unlink()
            yield part[np.lexsort((part[minor], part[major]))] if part.size else part


def _check_non_negative(v: npt.NDArray[Any], name: str) -> None:
    if v.dtype.kind == "i" and v.size and int(v.min()) < 0:
        raise ArgumentError(f"column {name!r} holds a negative value ({int(v.min())}): it cannot key a table")


def _range_edges(table: SortedTable, value: str, ranges: int) -> U64:
    """Value boundaries cutting the table into about ``ranges`` ranges of equal row counts (one sampling pass)."""
    n = table.num_rows
    want = ranges * SAMPLES_PER_RANGE
    step = max(1, n // want)
    samples: list[npt.NDArray[Any]] = []
    offset = 0
    for page in table.iter_pages([value]):
        v = page.values[value]
        first = (-offset) % step
        samples.append(v[first::step].astype(np.uint64))
        offset += v.size
    s = np.sort(np.concatenate(samples)) if samples else np.zeros(0, dtype=np.uint64)
    if not s.size:
        return np.zeros(0, dtype=np.uint64)
    picks = s[np.linspace(0, s.size - 1, ranges + 1)[1:-1].astype(np.int64)]
    return np.unique(picks)


def write_reverse_table(table: SortedTable, url: str | os.PathLike[str], value: str | None = None, *,
                        format: TableFormat | None = None, page_rows: int | None = None,
                        memory_rows: int = DEFAULT_MEMORY_ROWS, scratch: str | os.PathLike[str] | None = None,
                        overwrite: bool = False, **options: Any) -> TableSummary:
    """Write ``table`` sorted by its column ``value`` (default: its only value column) at ``url``.

    The reverse table's key is ``value`` and its one value column is the forward key (a body →
    supervoxel table from a supervoxel → body one); keys repeat (``unique=False``).
    """
    names = table.schema.value_names
    if value is None:
        if len(names) != 1:
            raise ArgumentError(f"name the column to sort by: the table has {list(names)}")
        value = names[0]
    table.schema.dtype_of(value)
    return write_sorted_table(url, reverse_rows(table, value, memory_rows=memory_rows, scratch=scratch),
                              format=format, page_rows=page_rows, key=value, value_name=table.schema.key,
                              unique=False, overwrite=overwrite, **options)
