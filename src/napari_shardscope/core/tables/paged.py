"""One implementation of :class:`~napari_shardscope.core.tables.protocol.SortedTable` over any page source.

A lookup of ``n`` keys: the keys are made distinct and sorted (one ``np.unique``), each one's page
found by a binary search over the directory's last keys, and the pages needed fetched — those
already in the page cache are not, the others all together through the source (one batch of
concurrent range reads on a remote store). Inside a page, a ``searchsorted`` finds each key; the
answers are scattered back to the caller's order. Nothing is done per key in Python.

Memory is bounded whatever the number of keys: pages are fetched in batches of at most
``batch_bytes`` and answers taken out of them before the next batch; decoded pages stay in an LRU
of at most ``cache_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.directory import (
    Columns,
    Page,
    PageDirectory,
    TableSchema,
    as_key_array,
    check_page,
    empty_columns,
)
from napari_shardscope.core.tables.errors import PageDirectoryError, TruncatedPageError
from napari_shardscope.core.tables.protocol import PageSource

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]

#: Decoded page columns a table keeps by default (keys and values of ~500 pages of 16,384 rows).
DEFAULT_CACHE_BYTES = 128 << 20
#: The most decoded bytes one batch of fetched pages may hold; a lookup over more pages goes in batches.
DEFAULT_BATCH_BYTES = 64 << 20
#: The fewest pages a batch holds, however large a page is.
MIN_BATCH_PAGES = 4

_KEYS = "\0keys"  # the cache's name for the key column (no value column can be named so)


class PagedTable:
    """A sorted table read page by page from ``source``, with a bounded LRU of decoded pages.

    Parameters
    ----------
    source
        The backend (opened: schema and directory known).
    cache_bytes
        Decoded page bytes kept between calls.
    batch_bytes
        Decoded page bytes fetched at once by one call (bounds a call's memory).
    """

    def __init__(self, source: PageSource, *, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 batch_bytes: int = DEFAULT_BATCH_BYTES) -> None:
        self.source = source
        self._cache: LruCache[tuple[str, int], npt.NDArray[Any]] = LruCache(
            1 << 30, weigh=lambda a: int(a.nbytes) + 96, max_weight=max(1, cache_bytes))
        self._batch_bytes = max(1, batch_bytes)

    def __repr__(self) -> str:
        return f"PagedTable({self.url!r}, rows={self.num_rows}, pages={self.directory.pages})"

    # -- what the table is ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.source.url

    @property
    def schema(self) -> TableSchema:
        return self.source.schema

    @property
    def directory(self) -> PageDirectory:
        return self.source.directory

    @property
    def num_rows(self) -> int:
        return self.directory.num_rows

    @property
    def min_key(self) -> int | None:
        d = self.directory
        return int(d.first[0]) if d.pages else None

    @property
    def max_key(self) -> int | None:
        d = self.directory
        return int(d.last[-1]) if d.pages else None

    @property
    def value_max(self) -> dict[str, float | int]:
        """The largest value of each column, where the writer recorded it (tables written here do)."""
        return dict(getattr(self.source, "value_max", {}) or {})

    @property
    def cached_bytes(self) -> int:
        """Decoded page bytes held by the cache now."""
        return self._cache.total_weight

    def clear_cache(self) -> None:
        self._cache.clear()

    # -- pages -----------------------------------------------------------------------------------------------
    def _columns(self, columns: Sequence[str] | None) -> tuple[str, ...]:
        if columns is None:
            return self.schema.value_names
        names = tuple(columns)
        for name in names:
            self.schema.dtype_of(name)  # an ArgumentError naming the columns there are
        return names

    def _batches(self, pages: Sequence[int], names: Sequence[str]) -> Iterator[Sequence[int]]:
        """``pages`` in runs whose decoded size stays under the batch budget."""
        d = self.directory
        per_row = 8 + sum(self.schema.dtype_of(n).itemsize for n in names)
        first = 0
        while first < len(pages):
            last, total = first, 0
            while last < len(pages):
                size = d.count(pages[last]) * per_row
                if last - first >= MIN_BATCH_PAGES and total + size > self._batch_bytes:
                    break
                total += size
                last += 1
            yield pages[first:last]
            first = last

    def pages(self, numbers: Sequence[int], columns: Sequence[str] | None = None, *,
              keys: bool = True) -> list[Page]:
        """Pages ``numbers`` (cached ones from the cache, the others fetched together), checked.

        All of them are held at once: callers bound ``numbers`` (see :meth:`_batches`).
        """
        names = self._columns(columns)
        d = self.directory
        for p in numbers:
            if not 0 <= p < d.pages:
                raise ArgumentError(f"page {p} is outside the table's {d.pages} pages")
        want = ((_KEYS,) if keys else ()) + names
        have: dict[tuple[str, int], npt.NDArray[Any]] = {}
        missing: dict[tuple[str, ...], list[int]] = {}
        for p in dict.fromkeys(numbers):
            lack: list[str] = []
            for name in want:
                got = self._cache.get((name, p))
                if got is None:
                    lack.append(name)
                else:
                    have[(name, p)] = got
            if lack:
                missing.setdefault(tuple(lack), []).append(p)
        for absent, group in missing.items():
            fetch_keys = _KEYS in absent
            values = [n for n in absent if n != _KEYS]
            fetched = self.source.fetch_pages(group, values, keys=fetch_keys)
            for p, page in zip(group, fetched, strict=True):
                where, offset = self.source.page_where(p)
                if fetch_keys:
                    full = Page(page.keys, {n: page.values[n] for n in values})
                    check_page(full, d, p, self.schema, where=where, offset=offset)
                    page.keys.setflags(write=False)
                    self._cache.put((_KEYS, p), page.keys)
                    have[(_KEYS, p)] = page.keys
                for n in values:
                    col = page.values.get(n)
                    if col is None or col.size != d.count(p):
                        size = -1 if col is None else col.size
                        cls = TruncatedPageError if size < d.count(p) else PageDirectoryError
                        raise cls(f"page {p}: {n} column holds {max(size, 0)} rows, the directory says "
                                  f"{d.count(p)}", key=where, offset=offset)
                    col.setflags(write=False)
                    self._cache.put((n, p), col)
                    have[(n, p)] = col
        empty = np.zeros(0, dtype=np.uint64)
        return [Page(have[(_KEYS, p)] if keys else empty, {n: have[(n, p)] for n in names}) for p in numbers]

    # -- lookups -----------------------------------------------------------------------------------------------
    def lookup(self, keys: npt.ArrayLike, columns: Sequence[str] | None = None) -> tuple[Columns, Bools]:
        names = self._columns(columns)
        flat = as_key_array(keys)
        out = {n: np.zeros(flat.size, dtype=self.schema.dtype_of(n)) for n in names}
        found = np.zeros(flat.size, dtype=bool)
        if not flat.size or not self.directory.pages:
            return out, found
        uniq, inverse = np.unique(flat, return_inverse=True)
        page_of = self.directory.page_of(uniq)
        u_found = np.zeros(uniq.size, dtype=bool)
        u_vals = empty_columns(TableSchema(self.schema.key, tuple((n, self.schema.dtype_of(n)) for n in names),
                                           self.schema.unique), uniq.size) if names else {}
        needed = np.unique(page_of[page_of >= 0])
        # uniq is sorted and page_of is non-decreasing where valid: a page's keys are one run of uniq.
        valid = np.flatnonzero(page_of >= 0)
        vp = page_of[valid]
        for batch in self._batches(needed.tolist(), names):
            pages = self.pages(batch, names)
            for p, page in zip(batch, pages, strict=True):
                lo, hi = np.searchsorted(vp, [p, p + 1])
                idx = valid[lo:hi]
                asked = uniq[idx]
                pos = np.searchsorted(page.keys, asked, side="left")
                pos_c = np.minimum(pos, page.keys.size - 1)
                hit = (pos < page.keys.size) & (page.keys[pos_c] == asked)
                rows, where = pos_c[hit], idx[hit]
                u_found[where] = True
                for n in names:
                    u_vals[n][where] = page.values[n][rows]
        found = u_found[inverse]
        return {n: u_vals[n][inverse] for n in names}, found

    def select(self, keys: npt.ArrayLike, columns: Sequence[str] | None = None) -> tuple[U64, Columns]:
        names = self._columns(columns)
        uniq = np.unique(as_key_array(keys))
        out_keys: list[U64] = []
        out_vals: dict[str, list[npt.NDArray[Any]]] = {n: [] for n in names}
        needed = self.directory.pages_of_keys(uniq)
        for batch in self._batches(needed.tolist(), names):
            for page in self.pages(batch, names):
                # a page's keys are sorted: each asked key's rows are one run, found by two binary
                # searches per key (not a search of every row of the page among the keys)
                rows = _runs(np.searchsorted(page.keys, uniq, side="left"),
                             np.searchsorted(page.keys, uniq, side="right"))
                if rows.size:
                    out_keys.append(page.keys[rows])
                    for n in names:
                        out_vals[n].append(page.values[n][rows])
        if not out_keys:
            return np.zeros(0, dtype=np.uint64), {n: np.zeros(0, dtype=self.schema.dtype_of(n)) for n in names}
        return np.concatenate(out_keys), {n: np.concatenate(v) for n, v in out_vals.items()}

    def range(self, lo: int, hi: int, columns: Sequence[str] | None = None) -> Iterator[tuple[U64, Columns]]:
        names = self._columns(columns)
        lo_, hi_ = int(lo), int(hi)
        if lo_ < 0 or hi_ < 0:
            raise ArgumentError(f"a key range must be non-negative, got [{lo_}, {hi_})")
        hi_ = min(hi_, 1 << 64)
        pages = list(self.directory.pages_between(lo_, hi_))
        for batch in self._batches(pages, names):
            for page in self.pages(batch, names):
                a = 0 if lo_ <= int(page.keys[0]) else int(np.searchsorted(page.keys, np.uint64(lo_), side="left"))
                b = page.keys.size if hi_ > int(page.keys[-1]) else int(
                    np.searchsorted(page.keys, np.uint64(hi_), side="left"))
                if b > a:
                    yield page.keys[a:b], {n: page.values[n][a:b] for n in names}

    def iter_pages(self, columns: Sequence[str] | None = None) -> Iterator[Page]:
        names = self._columns(columns)
        for batch in self._batches(list(range(self.directory.pages)), names):
            yield from self.pages(batch, names)


def _runs(lo: npt.NDArray[np.intp], hi: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """The row numbers ``lo[i]..hi[i]-1`` of every run, concatenated in order (vectorised)."""
    n = hi - lo
    keep = n > 0
    lo, n = lo[keep], n[keep]
    total = int(n.sum())
    if not total:
        return np.zeros(0, dtype=np.intp)
    # each run's rows: its start plus 0..n-1 (a running count restarted at every run)
    starts = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    return (starts + np.arange(total)).astype(np.intp)
