"""Sorted tables of fixed-width rows, stored page by page in an instance's unversioned area.

The base agglomeration (supervoxel → body and its reverse) and the base label index are tables of
up to 10⁹ rows. Decoded whole into every process they were a wall (16 bytes per supervoxel, one
zlib blob capped by the decoder's budget: 67,108,863 supervoxels); read page by page they cost what
a lookup touches. A table is:

* ``NAME/dir`` — the directory: the row type, how many rows, and per page its first and last key
  (so the page holding a key is a binary search in memory);
* ``NAME/p/`` + page number (u32 BE) — :data:`ROWS_PER_PAGE` rows, sorted by the key column
  (a key may repeat, and a key's rows may continue on the next page), zlib-compressed.

A table is written in one pass over rows that arrive sorted (:class:`PagedTableWriter`, a stream
of ``(key, value)`` items for :meth:`Repository.put_unversioned`, the directory last), and read by
:class:`PagedTable`: :meth:`~PagedTable.find` for tables with one row per key,
:meth:`~PagedTable.select` for all the rows of many keys. Both are vectorised: one binary search
over the directory for all the keys, then one per page touched. Decoded pages are shared by every
table of the process through one LRU bounded in bytes.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.encoding import inflate, zlib_compress
from napari_shardscope.core.errors import ArgumentError, FormatError

U64 = npt.NDArray[np.uint64]
Rows = npt.NDArray[Any]
#: Reads unversioned values of one instance, several at once (``None`` for an absent key).
ReadMany = Callable[[Sequence[bytes]], list[bytes | None]]

#: Rows per page: 4,096 rows of 16 to 52 bytes are 64 to 208 KiB decoded (a lookup of one id reads
#: one page, cold from disk in a fresh process); a 10⁹-row table has 244,141 pages and a 5 MB directory.
ROWS_PER_PAGE = 1 << 12
#: Decoded pages kept by the process (all tables together).
PAGE_CACHE_BYTES = 256 << 20
_DIR_MAGIC = b"SSPD"
_PAGE_MAGIC = b"SSPG"
_FORMAT = 1
_CODEC_RAW = 0
_CODEC_ZLIB = 1
_HEAD = struct.Struct("<4sBI")
_PAGE_HEAD = struct.Struct("<4sBB")
_ids = itertools.count(1)
_pages: LruCache[tuple[int, int], Rows] = LruCache(1 << 20, weigh=lambda a: int(a.nbytes) + 64,
                                                      max_weight=PAGE_CACHE_BYTES)


class PageDecodeError(FormatError):
    """A stored table page or directory cannot be decoded (a damaged store)."""


def dir_key(name: bytes) -> bytes:
    """Key of a table's directory."""
    return name + b"/dir"


def page_key(name: bytes, page: int) -> bytes:
    """Key of page ``page`` of a table."""
    return name + b"/p/" + struct.pack(">I", page)


@dataclass(frozen=True)
class Directory:
    """What a table's directory says: row type, key column, and each page's key range and row count."""

    dtype: np.dtype[Any]
    key: str
    rows: int
    first: U64
    last: U64
    counts: npt.NDArray[np.uint32]

    @property
    def pages(self) -> int:
        return int(self.first.size)

    def to_bytes(self) -> bytes:
        head = json.dumps({"dtype": [list(d) for d in self.dtype.descr], "key": self.key, "rows": self.rows,
                           "pages": self.pages}, separators=(",", ":")).encode()
        body = (self.first.astype("<u8").tobytes() + self.last.astype("<u8").tobytes()
                + self.counts.astype("<u4").tobytes())
        return _HEAD.pack(_DIR_MAGIC, _FORMAT, len(head)) + head + zlib_compress(body, 1)

    @classmethod
    def from_bytes(cls, data: bytes, *, key: str) -> Directory:
        try:
            magic, version, length = _HEAD.unpack_from(data, 0)
            if magic != _DIR_MAGIC or version != _FORMAT:
                raise ValueError("not a table directory (bad magic or version)")
            head = json.loads(data[_HEAD.size:_HEAD.size + length])
            dtype = np.dtype([tuple(d) for d in head["dtype"]])
            pages = int(head["pages"])
            body = inflate(data[_HEAD.size + length:], key=key, max_size=20 * pages + 1, error=PageDecodeError)
            if len(body) != 20 * pages:
                raise ValueError(f"{len(body)} bytes for {pages} pages")
            first = np.frombuffer(body, "<u8", pages, 0).astype(np.uint64)
            last = np.frombuffer(body, "<u8", pages, 8 * pages).astype(np.uint64)
            counts = np.frombuffer(body, "<u4", pages, 16 * pages).astype(np.uint32)
            out = cls(dtype, str(head["key"]), int(head["rows"]), first, last, counts)
            if out.key not in (dtype.names or ()) or int(counts.sum()) != out.rows:
                raise ValueError("key column or row count inconsistent")
            return out
        except PageDecodeError:
            raise
        except (ValueError, TypeError, KeyError, struct.error) as exc:
            raise PageDecodeError(f"damaged table directory ({exc})", key=key) from exc


def encode_page(rows: Rows, *, compress: bool = True) -> bytes:
    """One page's stored bytes (rows little-endian, zlib level 1 unless ``compress`` is off)."""
    raw = np.ascontiguousarray(rows).tobytes()
    if compress:
        return _PAGE_HEAD.pack(_PAGE_MAGIC, _FORMAT, _CODEC_ZLIB) + zlib_compress(raw, 1)
    return _PAGE_HEAD.pack(_PAGE_MAGIC, _FORMAT, _CODEC_RAW) + raw


def decode_page(data: bytes, dtype: np.dtype[Any], count: int, *, key: str) -> Rows:
    """Inverse of :func:`encode_page`, checked against the row count the directory gives."""
    if len(data) < _PAGE_HEAD.size:
        raise PageDecodeError("page truncated", key=key, offset=len(data))
    magic, version, codec = _PAGE_HEAD.unpack_from(data, 0)
    if magic != _PAGE_MAGIC or version != _FORMAT or codec not in (_CODEC_RAW, _CODEC_ZLIB):
        raise PageDecodeError("not a table page (bad magic, version or codec)", key=key, offset=0)
    want = count * dtype.itemsize
    body = data[_PAGE_HEAD.size:] if codec == _CODEC_RAW else inflate(
        data[_PAGE_HEAD.size:], key=key, offset=_PAGE_HEAD.size, max_size=want, error=PageDecodeError)
    if len(body) != want:
        raise PageDecodeError(f"page holds {len(body)} bytes, its directory says {count} rows of "
                              f"{dtype.itemsize}", key=key, offset=_PAGE_HEAD.size)
    rows = np.frombuffer(body, dtype=dtype, count=count).copy()
    rows.setflags(write=False)
    return rows


class PagedTableWriter:
    """Cuts rows that arrive sorted by ``key`` into pages; the stored items, directory last.

    ``unique`` refuses a key twice (tables read with :meth:`PagedTable.find`).
    """

    def __init__(self, name: bytes, dtype: npt.DTypeLike, key: str, *, unique: bool = False,
                 rows_per_page: int = ROWS_PER_PAGE, compress: bool = True) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        if key not in (self.dtype.names or ()):
            raise ArgumentError(f"table {name!r} has no key column {key!r}")
        self.key = key
        self.unique = unique
        self.rows_per_page = max(1, rows_per_page)
        self.compress = compress
        self._buffer: list[Rows] = []
        self._buffered = 0
        self._first: list[int] = []
        self._last: list[int] = []
        self._counts: list[int] = []
        self._prev: int | None = None

    def add(self, rows: Rows) -> Iterator[tuple[bytes, bytes]]:
        """Take the next rows (sorted, all keys ≥ the last ones taken); yield the pages they complete."""
        rows = np.asarray(rows)
        if rows.dtype != self.dtype:
            rows = rows.astype(self.dtype)
        if not rows.size:
            return
        k = rows[self.key]
        bad = k[1:] <= k[:-1] if self.unique else k[1:] < k[:-1]
        first = int(k[0])
        if bad.any() or (self._prev is not None and (first < self._prev or (self.unique and first == self._prev))):
            raise ArgumentError(f"rows of table {self.name!r} must arrive sorted by {self.key}"
                                f"{' without repeats' if self.unique else ''}")
        self._prev = int(k[-1])
        self._buffer.append(rows)
        self._buffered += rows.size
        while self._buffered >= self.rows_per_page:
            yield self._cut(self.rows_per_page)

    def finish(self) -> Iterator[tuple[bytes, bytes]]:
        """The last page and the directory."""
        if self._buffered:
            yield self._cut(self._buffered)
        directory = Directory(self.dtype, self.key, int(sum(self._counts)),
                              np.asarray(self._first, dtype=np.uint64), np.asarray(self._last, dtype=np.uint64),
                              np.asarray(self._counts, dtype=np.uint32))
        yield dir_key(self.name), directory.to_bytes()

    def _cut(self, n: int) -> tuple[bytes, bytes]:
        whole = np.concatenate(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        page, rest = whole[:n], whole[n:]
        self._buffer = [rest] if rest.size else []
        self._buffered = int(rest.size)
        number = len(self._counts)
        self._first.append(int(page[self.key][0]))
        self._last.append(int(page[self.key][-1]))
        self._counts.append(int(page.size))
        return page_key(self.name, number), encode_page(page, compress=self.compress)


def write_table(name: bytes, dtype: npt.DTypeLike, key: str, parts: Iterable[Rows], *,
                unique: bool = False, rows_per_page: int = ROWS_PER_PAGE) -> Iterator[tuple[bytes, bytes]]:
    """Every stored item of a table whose rows come sorted in ``parts`` (the directory last)."""
    writer = PagedTableWriter(name, dtype, key, unique=unique, rows_per_page=rows_per_page)
    for part in parts:
        yield from writer.add(part)
    yield from writer.finish()


class PagedTable:
    """Reads one stored table (see the module docstring); thread-safe, pages cached process-wide."""

    def __init__(self, name: bytes, read: ReadMany, *, what: str = "table") -> None:
        self.name = name
        self.what = what
        self._read = read
        self._token = next(_ids)
        self._dir: Directory | None = None

    def __repr__(self) -> str:
        return f"PagedTable({self.name!r})"

    def exists(self) -> bool:
        """Whether the table's directory is stored (a table is complete once its directory is)."""
        if self._dir is not None:
            return True
        return self._read([dir_key(self.name)])[0] is not None

    @property
    def directory(self) -> Directory:
        if self._dir is None:
            raw = self._read([dir_key(self.name)])[0]
            if raw is None:
                raise PageDecodeError(f"{self.what} has no directory (never written, or written incompletely)",
                                      key=dir_key(self.name).decode(errors="replace"))
            self._dir = Directory.from_bytes(raw, key=dir_key(self.name).decode(errors="replace"))
        return self._dir

    @property
    def rows(self) -> int:
        return self.directory.rows

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.directory.dtype

    def max_key(self) -> int:
        """The largest key (0 for an empty table)."""
        d = self.directory
        return int(d.last[-1]) if d.pages else 0

    def pages(self, numbers: Sequence[int]) -> list[Rows]:
        """Decoded pages (from the cache, the missing ones read together)."""
        d = self.directory
        out: list[Rows | None] = [_pages.get((self._token, int(p))) for p in numbers]
        missing = [i for i, rows in enumerate(out) if rows is None]
        if missing:
            keys = [page_key(self.name, int(numbers[i])) for i in missing]
            for i, key, raw in zip(missing, keys, self._read(keys), strict=True):
                p = int(numbers[i])
                where = key.decode(errors="replace")
                if raw is None:
                    raise PageDecodeError(f"{self.what}: page {p} is missing", key=where)
                rows = decode_page(raw, d.dtype, int(d.counts[p]), key=where)
                _pages.put((self._token, p), rows)
                out[i] = rows
        return [r for r in out if r is not None]

    def iter_pages(self) -> Iterator[Rows]:
        """Every page in order (for building from the table, and for small tables read whole)."""
        for start in range(0, self.directory.pages, 16):
            yield from self.pages(list(range(start, min(start + 16, self.directory.pages))))

    def all_rows(self) -> Rows:
        """The whole table (small tables, tests)."""
        parts = list(self.iter_pages())
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)

    def find(self, keys: npt.ArrayLike) -> tuple[npt.NDArray[np.bool_], Rows]:
        """For a table with one row per key: which ``keys`` it holds, and their rows (aligned with ``keys``)."""
        q = np.asarray(keys, dtype=np.uint64).reshape(-1)
        d = self.directory
        found = np.zeros(q.shape, dtype=bool)
        out = np.zeros(q.shape, dtype=d.dtype)
        if not d.pages or not q.size:
            return found, out
        if q.size <= 4:  # an edit's few ids: no grouping machinery
            for i, key in enumerate(q.tolist()):
                p = int(np.searchsorted(d.first, np.uint64(key), side="right")) - 1
                if p < 0 or key > int(d.last[p]):
                    continue
                page_rows = self.pages([p])[0]
                k = page_rows[d.key]
                at = int(np.searchsorted(k, np.uint64(key)))
                if at < k.size and int(k[at]) == key:
                    found[i], out[i] = True, page_rows[at]
            return found, out
        page = np.searchsorted(d.first, q, side="right") - 1
        valid = page >= 0
        valid[valid] &= q[valid] <= d.last[page[valid]]
        idx = np.flatnonzero(valid)
        if not idx.size:
            return found, out
        order = idx[np.argsort(page[idx], kind="stable")]
        bounds = np.flatnonzero(np.diff(page[order])) + 1
        groups = np.split(order, bounds)
        loaded = self.pages([int(page[g[0]]) for g in groups])
        for g, rows in zip(groups, loaded, strict=True):
            k = rows[d.key]
            pos = np.minimum(np.searchsorted(k, q[g]), k.size - 1)
            hit = k[pos] == q[g]
            found[g[hit]] = True
            out[g[hit]] = rows[pos[hit]]
        return found, out

    def select(self, keys: npt.ArrayLike) -> Rows:
        """Every row whose key is one of ``keys``, sorted by key (rows of one key in stored order)."""
        q = np.unique(np.asarray(keys, dtype=np.uint64).reshape(-1))
        d = self.directory
        if not d.pages or not q.size:
            return np.zeros(0, dtype=d.dtype)
        lo = np.maximum(np.searchsorted(d.first, q, side="left") - 1, 0)
        hi = np.searchsorted(d.first, q, side="right") - 1
        ok = hi >= lo
        lo, hi = lo[ok], hi[ok]
        if not lo.size:
            return np.zeros(0, dtype=d.dtype)
        lengths = hi - lo + 1
        starts = np.repeat(lo, lengths)
        offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        candidates = np.unique(starts + offsets)
        # a page whose key range misses every key is not read
        first, last = d.first[candidates], d.last[candidates]
        reach = np.searchsorted(q, first, side="left") < np.searchsorted(q, last, side="right")
        parts = []
        for rows in self.pages([int(p) for p in candidates[reach]]):
            k = rows[d.key]
            pos = np.minimum(np.searchsorted(q, k), q.size - 1)
            keep = q[pos] == k
            if keep.any():
                parts.append(rows[keep])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=d.dtype)
