"""The seams of the tables package: :class:`SortedTable` (what callers use) and :class:`PageSource` (a backend).

A caller — the labelmap's base agglomeration, later a synapse table — asks a :class:`SortedTable`
for many keys at once and never sees where the pages come from. A backend (zarr v3, Parquet, a
sharded precomputed lookup, memory) is a :class:`PageSource`: a directory read at open, and a
way to fetch a batch of pages concurrently. :class:`~napari_shardscope.core.tables.paged.PagedTable`
puts the two together (page cache, grouping keys by page, checks), so every backend gets the same
lookups and the same guarantees.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, ReadStats
from napari_shardscope.core.tables.directory import Columns, Page, PageDirectory, TableSchema

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]


@runtime_checkable
class SortedTable(Protocol):
    """A sorted ``uint64`` key column and value columns, read page by page.

    Lookups are vectorised: pass every key you need at once (a plane's supervoxels), and each page
    they fall in is fetched once, all pages of a call concurrently.
    """

    @property
    def url(self) -> str:
        """Where the table lives, as the user named it."""
        ...

    @property
    def schema(self) -> TableSchema:
        """The key column's name and the value columns."""
        ...

    @property
    def directory(self) -> PageDirectory:
        """First and last key and row count of every page (read at open)."""
        ...

    @property
    def num_rows(self) -> int:
        ...

    @property
    def min_key(self) -> int | None:
        """The smallest key (``None`` for an empty table)."""
        ...

    @property
    def max_key(self) -> int | None:
        """The largest key (``None`` for an empty table)."""
        ...

    def lookup(self, keys: npt.ArrayLike, columns: Sequence[str] | None = None) -> tuple[Columns, Bools]:
        """The values of each key's first row, and which keys were found.

        ``keys`` may have any shape; answers are flat, one per key, in the order given. Missing
        keys get 0 in every column and ``False`` in the mask. ``columns`` restricts the value
        columns fetched (default: all).
        """
        ...

    def select(self, keys: npt.ArrayLike, columns: Sequence[str] | None = None) -> tuple[U64, Columns]:
        """Every row whose key is one of ``keys`` (a key repeated in the table gives all its rows), by key."""
        ...

    def range(self, lo: int, hi: int, columns: Sequence[str] | None = None) -> Iterator[tuple[U64, Columns]]:
        """The rows with keys in ``[lo, hi)``, ascending, a page's worth at a time."""
        ...

    def iter_pages(self, columns: Sequence[str] | None = None) -> Iterator[Page]:
        """Every page in order (the whole table, one bounded page at a time)."""
        ...


class PageSource(Protocol):
    """A backend: a table's schema and directory (known at open) and concurrent page fetches."""

    @property
    def url(self) -> str:
        ...

    @property
    def schema(self) -> TableSchema:
        ...

    @property
    def directory(self) -> PageDirectory:
        ...

    @property
    def stats(self) -> ReadStats:
        """Requests and bytes the source's byte store has served (what a benchmark counts)."""
        ...

    def fetch_pages(self, pages: Sequence[int], columns: Sequence[str], *, keys: bool = True) -> list[Page]:
        """Pages ``pages`` with the value columns ``columns`` (and the keys unless ``keys=False``: then
        ``Page.keys`` is empty), fetched together: a remote store's requests are in flight at once.

        Pages are decoded and checked against the directory's row count; :class:`PagedTable`
        checks the keys.
        """
        ...

    def page_where(self, page: int) -> tuple[str, int | None]:
        """The file or key holding ``page`` and the byte offset where it starts (for messages)."""
        ...


class StoredPageSource:
    """What every byte-store backend answers the same way: its URL, schema and directory as read at
    open, and its store's read counts. A backend sets ``store``, ``_url``, ``_schema`` and
    ``_directory`` and adds ``fetch_pages`` and ``page_where``."""

    store: ByteStore
    _url: str
    _schema: TableSchema
    _directory: PageDirectory

    @property
    def url(self) -> str:
        return self._url

    @property
    def schema(self) -> TableSchema:
        return self._schema

    @property
    def directory(self) -> PageDirectory:
        return self._directory

    @property
    def stats(self) -> ReadStats:
        return self.store.stats
