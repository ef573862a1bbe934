"""Sorted tables read page by page where they live: the pipeline's agglomeration without copying it.

A *sorted table* is a ``uint64`` key column in ascending order and one or more value columns —
a supervoxel → body agglomeration (10⁹ rows for FlyWire), its body → supervoxels reverse, later a
synapse table. Stored in Zarr v3, Parquet or a precomputed-style sharded lookup, on a local disk
or a bucket, it is read through the one byte store a page at a time: opening reads the metadata
and the page directory (first and last key of each page); a vectorised lookup fetches the pages
its keys fall in, all of them in one batch of concurrent range reads, and keeps decoded pages in a
bounded LRU.

* :func:`open_sorted_table` — open any table (format detected); a
  :class:`~napari_shardscope.core.tables.protocol.SortedTable` with ``lookup``, ``select``,
  ``range``, ``iter_pages``, ``num_rows``, ``min_key``/``max_key``;
* :func:`memory_table` — the small case, from a dict or numpy arrays;
* :func:`write_sorted_table` — write a table (zarr3, parquet, precomputed) from a dict, arrays,
  another table or a generator of sorted chunks, page by page and atomically;
* :func:`write_reverse_table` — the same rows keyed by a value column (body → supervoxels);
* :class:`TableAgglomeration` — the adapter the labelmap's base agglomeration uses;
* :func:`iter_csv_chunks` — rows of a CSV file in chunks (to convert it).
"""

from __future__ import annotations

from napari_shardscope.core.tables.agglomeration import TableAgglomeration
from napari_shardscope.core.tables.csv_input import iter_csv_chunks
from napari_shardscope.core.tables.destination import TableSummary
from napari_shardscope.core.tables.directory import Page, PageDirectory, TableSchema
from napari_shardscope.core.tables.errors import (
    NotATableError,
    PageDirectoryError,
    TableDtypeError,
    TableError,
    TruncatedPageError,
    UnsortedKeysError,
    UnsortedTableError,
)
from napari_shardscope.core.tables.memory import memory_table
from napari_shardscope.core.tables.opening import open_sorted_table
from napari_shardscope.core.tables.paged import PagedTable
from napari_shardscope.core.tables.protocol import PageSource, SortedTable
from napari_shardscope.core.tables.reverse import write_reverse_table
from napari_shardscope.core.tables.writing import write_sorted_table

__all__ = [
    "NotATableError",
    "Page",
    "PageDirectory",
    "PageDirectoryError",
    "PageSource",
    "PagedTable",
    "SortedTable",
    "TableAgglomeration",
    "TableDtypeError",
    "TableError",
    "TableSchema",
    "TableSummary",
    "TruncatedPageError",
    "UnsortedKeysError",
    "UnsortedTableError",
    "iter_csv_chunks",
    "memory_table",
    "open_sorted_table",
    "write_reverse_table",
    "write_sorted_table",
]
