"""The small case: a table held in memory (from a dict or from numpy arrays), paged like any other.

A test fixture, a notebook's hand-made agglomeration, or a table another program already loaded:
no bytes are read, pages are views of the arrays. It goes through the same
:class:`~napari_shardscope.core.tables.paged.PagedTable` as the stored backends, so it answers
exactly as they do (the property tests compare them all to ``np.searchsorted`` on the whole table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ReadStats
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.directory import (
    Columns,
    Page,
    PageDirectory,
    TableSchema,
    as_key_array,
    normalise_values,
)
from napari_shardscope.core.tables.errors import UnsortedKeysError
from napari_shardscope.core.tables.paged import PagedTable

#: Rows per page of an in-memory table (only the cost of a ``searchsorted`` depends on it).
MEMORY_PAGE_ROWS = 1 << 16


class MemorySource:
    """Sorted arrays cut into pages of ``page_rows`` rows (views, no copy)."""

    def __init__(self, keys: npt.NDArray[np.uint64], values: Columns, schema: TableSchema,
                 page_rows: int = MEMORY_PAGE_ROWS) -> None:
        if page_rows < 1:
            raise ArgumentError(f"page_rows must be >= 1, got {page_rows}")
        self._keys = keys
        self._values = values
        self._schema = schema
        self._page_rows = page_rows
        n = keys.size
        starts = np.arange(0, n, page_rows, dtype=np.int64)
        counts = np.minimum(page_rows, n - starts)
        self._directory = PageDirectory.checked(keys[starts], keys[starts + counts - 1], counts,
                                                unique=schema.unique, where="<memory>")
        self._stats = ReadStats()

    @property
    def url(self) -> str:
        return "<memory>"

    @property
    def schema(self) -> TableSchema:
        return self._schema

    @property
    def directory(self) -> PageDirectory:
        return self._directory

    @property
    def stats(self) -> ReadStats:
        return self._stats

    def page_where(self, page: int) -> tuple[str, int | None]:
        return "<memory>", None

    def fetch_pages(self, pages: Sequence[int], columns: Sequence[str], *, keys: bool = True) -> list[Page]:
        out = []
        empty = np.zeros(0, dtype=np.uint64)
        for p in pages:
            a = int(self._directory.starts[p])
            b = int(self._directory.starts[p + 1])
            out.append(Page(self._keys[a:b] if keys else empty, {n: self._values[n][a:b] for n in columns}))
        return out


def sorted_rows(keys: npt.ArrayLike, values: Mapping[str, npt.ArrayLike] | npt.ArrayLike, *,
                unique: bool = True, value_name: str = "value") -> tuple[npt.NDArray[np.uint64], Columns]:
    """``keys`` and their value columns sorted by key (stable: repeated keys keep their order).

    Raises
    ------
    UnsortedKeysError
        When ``unique`` and a key appears twice (names the key).
    """
    k = as_key_array(keys)
    cols = normalise_values(values, k.size, [value_name])
    if k.size > 1 and bool((k[1:] < k[:-1]).any()):
        order = np.argsort(k, kind="stable")
        k = k[order]
        cols = {n: c[order] for n, c in cols.items()}
    if unique and k.size > 1:
        dup = np.flatnonzero(k[1:] == k[:-1])
        if dup.size:
            raise UnsortedKeysError(f"key {int(k[dup[0]])} appears more than once in a table of unique keys")
    return k, cols


def schema_for(key: str, columns: Columns, unique: bool) -> TableSchema:
    """The schema of ``columns`` (their names and types, in order)."""
    return TableSchema(key, tuple((n, np.dtype(c.dtype)) for n, c in columns.items()), unique)


def memory_table(keys: npt.ArrayLike | Mapping[Any, Any], values: Mapping[str, npt.ArrayLike] | npt.ArrayLike
                 | None = None, *, key: str = "key", value_name: str = "value", unique: bool = True,
                 page_rows: int = MEMORY_PAGE_ROWS) -> PagedTable:
    """A table in memory: ``memory_table({sv: body, ...})`` or ``memory_table(keys, values)``.

    A dict's keys are the key column and its values one value column named ``value_name``; arrays
    need not be sorted (they are sorted here). ``values`` may be a mapping of column name → array.
    """
    if isinstance(keys, Mapping):
        if values is not None:
            raise ArgumentError("pass either a mapping or keys and values, not both")
        mapping = keys
        k = as_key_array(np.fromiter((int(x) for x in mapping), dtype=object, count=len(mapping)))
        vals = np.asarray([mapping[x] for x in mapping]) if mapping else np.zeros(0, dtype=np.uint64)
        if vals.dtype.kind == "i" and vals.size and int(vals.min()) >= 0:
            vals = vals.astype(np.uint64)
        k, cols = sorted_rows(k, vals, unique=unique, value_name=value_name)
    else:
        if values is None:
            raise ArgumentError("keys need values")
        k, cols = sorted_rows(keys, values, unique=unique, value_name=value_name)
    return PagedTable(MemorySource(k, cols, schema_for(key, cols, unique), page_rows))
