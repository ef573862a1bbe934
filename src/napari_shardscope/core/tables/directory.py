"""What every sorted table is made of: its schema, its page directory and its pages.

A table is a ``uint64`` key column, sorted ascending, and one or more value columns, cut into
pages of consecutive rows. The *page directory* — the first and last key and the row count of
each page — is the only part read when a table is opened: 16 bytes per page, so a 10⁹-row table
of 16,384-row pages opens with a 1 MB read. A key's page is then a binary search in memory, and
only the pages a lookup touches are fetched.

Everything a directory says is checked against the page it describes when the page is decoded
(:func:`check_page`): a directory that lies would silently answer "not listed" for a key that is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.errors import (
    PageDirectoryError,
    TableDtypeError,
    TruncatedPageError,
    UnsortedTableError,
)

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Columns = dict[str, npt.NDArray[Any]]

#: The most rows one page may hold: a hostile directory or footer claiming more is refused before
#: anything is allocated (16M rows of a few columns is already hundreds of MB decoded).
MAX_PAGE_ROWS = 1 << 24
#: The most pages a table may have (10⁹ rows in pages of 4,096 rows is 244,141; a directory of
#: 2²⁴ pages is 256 MB, read whole at open).
MAX_PAGES = 1 << 24
#: Value column data types a table stores (fixed width, so a page's bytes are known before it is read).
VALUE_KINDS = "biuf"
#: The largest key.
U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class TableSchema:
    """The columns of a table.

    Attributes
    ----------
    key
        The key column's name (``"supervoxel"``); its type is always ``uint64``.
    values
        ``(name, dtype)`` of each value column, in stored order.
    unique
        Whether a key appears at most once (a supervoxel → body table); a body → supervoxel table
        repeats its keys.
    """

    key: str
    values: tuple[tuple[str, np.dtype[Any]], ...]
    unique: bool = True

    def __post_init__(self) -> None:
        names = [self.key, *(n for n, _ in self.values)]
        if len(set(names)) != len(names):
            raise ArgumentError(f"column names must be distinct, got {names}")
        if not self.values:
            raise ArgumentError("a table needs at least one value column")
        for name, dtype in self.values:
            if not name or "/" in name or name.startswith("."):
                raise ArgumentError(f"bad column name {name!r} (non-empty, no '/', not starting with '.')")
            if np.dtype(dtype).kind not in VALUE_KINDS:
                raise ArgumentError(f"value column {name!r} has type {np.dtype(dtype)}; tables store "
                                    "booleans, integers and floats")

    @property
    def value_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.values)

    def dtype_of(self, name: str) -> np.dtype[Any]:
        for n, d in self.values:
            if n == name:
                return np.dtype(d)
        raise ArgumentError(f"no value column {name!r}; the table has {list(self.value_names)}")

    @property
    def row_bytes(self) -> int:
        """Decoded bytes per row, key included."""
        return 8 + sum(np.dtype(d).itemsize for _, d in self.values)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "values": [{"name": n, "dtype": np.dtype(d).str} for n, d in self.values],
                "unique": self.unique}

    @classmethod
    def from_json(cls, doc: Any, *, where: str) -> TableSchema:
        """The schema a table's metadata records (a :class:`PageDirectoryError` naming ``where`` if damaged)."""
        try:
            key = doc["key"]
            values = tuple((str(v["name"]), np.dtype(str(v["dtype"]))) for v in doc["values"])
            unique = doc.get("unique", True)
            if not isinstance(key, str) or not isinstance(unique, bool):
                raise TypeError("key must be a string and unique a boolean")
            return cls(key, values, unique)
        except (KeyError, TypeError, ValueError) as exc:
            raise PageDirectoryError(f"table schema is damaged ({exc})", key=where) from None


@dataclass(frozen=True)
class Page:
    """The rows of one page: keys ascending, and each value column (read-only arrays)."""

    keys: U64
    values: Columns = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes) + sum(int(v.nbytes) for v in self.values.values())

    def __len__(self) -> int:
        return int(self.keys.size)


@dataclass(frozen=True)
class PageDirectory:
    """First and last key and first row of every page (``starts`` has one more entry: the row count).

    Built through :meth:`checked`, which refuses a directory that contradicts itself.
    """

    first: U64
    last: U64
    starts: I64

    @property
    def pages(self) -> int:
        return int(self.first.size)

    @property
    def num_rows(self) -> int:
        return int(self.starts[-1])

    def count(self, page: int) -> int:
        return int(self.starts[page + 1] - self.starts[page])

    @classmethod
    def checked(cls, first: npt.ArrayLike, last: npt.ArrayLike, counts: npt.ArrayLike, *, unique: bool,
                where: str) -> PageDirectory:
        """A directory from per-page first keys, last keys and row counts, checked.

        Raises
        ------
        PageDirectoryError
            When the arrays disagree in length, a page is empty or larger than
            :data:`MAX_PAGE_ROWS`, a page's first key exceeds its last, or pages overlap or go
            backwards (names ``where`` and the page).
        """
        f = np.asarray(first)
        la = np.asarray(last)
        c = np.asarray(counts)
        if f.ndim != 1 or f.shape != la.shape or f.shape != c.shape:
            raise PageDirectoryError(f"directory arrays disagree in shape: {f.shape}, {la.shape}, {c.shape}", key=where)
        if f.size > MAX_PAGES:
            raise PageDirectoryError(f"{f.size} pages is more than the {MAX_PAGES} a table may have", key=where)
        for name, arr in (("first key", f), ("last key", la), ("row count", c)):
            if arr.size and arr.dtype.kind not in "ui":
                raise PageDirectoryError(f"directory {name}s are {arr.dtype}, not integers", key=where)
            if arr.size and arr.dtype.kind == "i" and int(arr.min()) < 0:
                bad = int(np.flatnonzero(arr < 0)[0])
                raise PageDirectoryError(f"page {bad}: negative {name} {int(arr[bad])}", key=where)
        f64, l64 = f.astype(np.uint64), la.astype(np.uint64)
        c64 = c.astype(np.int64)
        if c64.size and (int(c64.min()) < 1 or int(c64.max()) > MAX_PAGE_ROWS):
            bad = int(np.flatnonzero((c64 < 1) | (c64 > MAX_PAGE_ROWS))[0])
            raise PageDirectoryError(f"page {bad} claims {int(c64[bad])} rows (1 to {MAX_PAGE_ROWS} allowed)",
                                     key=where)
        inverted = np.flatnonzero(f64 > l64)
        if inverted.size:
            p = int(inverted[0])
            raise PageDirectoryError(f"page {p}: first key {int(f64[p])} is above its last key {int(l64[p])}",
                                     key=where)
        if f64.size > 1:
            back = np.flatnonzero(f64[1:] <= l64[:-1]) if unique else np.flatnonzero(f64[1:] < l64[:-1])
            if back.size:
                p = int(back[0]) + 1
                raise UnsortedTableError(f"page {p} starts at key {int(f64[p])}, not after page {p - 1}'s last key "
                                         f"{int(l64[p - 1])}: keys are not sorted across pages", key=where)
        starts = np.zeros(f64.size + 1, dtype=np.int64)
        np.cumsum(c64, out=starts[1:])
        for arr in (f64, l64, starts):
            arr.setflags(write=False)
        return cls(f64, l64, starts)

    # -- where keys are ----------------------------------------------------------------------------
    def page_of(self, keys: U64) -> I64:
        """The page holding the first row of each key if any could: ``-1`` where no page can.

        The first page whose last key is ``>= key``, provided its first key is ``<= key``; with
        repeated keys that is the page of the key's first row.
        """
        p = np.searchsorted(self.last, keys, side="left").astype(np.int64)
        inside = p < self.pages
        ok = np.zeros(keys.shape, dtype=bool)
        ok[inside] = self.first[p[inside]] <= keys[inside]
        p[~ok] = -1
        return p

    def pages_between(self, lo: int, hi: int) -> range:
        """The pages that may hold keys in ``[lo, hi)``."""
        if hi <= lo or not self.pages or lo > U64_MAX:
            return range(0)
        start = int(np.searchsorted(self.last, np.uint64(lo), side="left"))
        stop = self.pages if hi > U64_MAX else int(np.searchsorted(self.first, np.uint64(hi), side="left"))
        return range(start, max(start, stop))

    def pages_of_keys(self, keys: U64) -> I64:
        """Every page that may hold a row of any of ``keys`` (sorted, distinct): repeated keys span pages."""
        if not keys.size or not self.pages:
            return np.zeros(0, dtype=np.int64)
        lo = np.searchsorted(self.last, keys, side="left")
        hi = np.searchsorted(self.first, keys, side="right")
        spans = [(a, b) for a, b in zip(lo.tolist(), hi.tolist(), strict=True) if b > a]
        if not spans:
            return np.zeros(0, dtype=np.int64)
        if all(b - a == 1 for a, b in spans):
            return np.unique(np.asarray([a for a, _ in spans], dtype=np.int64))
        return np.unique(np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans]))

    def to_bytes(self) -> bytes:
        """``first``, ``last`` and row counts as little-endian uint64 (24 bytes per page)."""
        counts = np.diff(self.starts).astype("<u8")
        return self.first.astype("<u8").tobytes() + self.last.astype("<u8").tobytes() + counts.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, *, unique: bool, where: str) -> PageDirectory:
        """Inverse of :meth:`to_bytes` (a :class:`PageDirectoryError` naming ``where`` if damaged)."""
        if len(data) % 24:
            raise TruncatedPageError(f"page directory of {len(data)} bytes is not a whole number of 24-byte "
                                     "entries", key=where, offset=len(data) - len(data) % 24)
        n = len(data) // 24
        arr = np.frombuffer(data, dtype="<u8").reshape(3, n)
        return cls.checked(arr[0], arr[1], arr[2], unique=unique, where=where)


def as_key_array(keys: npt.ArrayLike, *, what: str = "keys") -> U64:
    """``keys`` as a flat uint64 array, refusing what is not a non-negative integer (an :class:`ArgumentError`)."""
    arr = np.asarray(keys)
    if arr.dtype == np.uint64:
        return arr.reshape(-1)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64)
    if arr.dtype.kind == "O":
        try:
            arr = np.asarray([int(k) for k in arr.reshape(-1)], dtype=np.uint64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ArgumentError(f"{what} must be integers in [0, 2**64), got {exc}") from None
        return arr
    if arr.dtype.kind not in "ui":
        raise ArgumentError(f"{what} must be integers, got {arr.dtype}")
    if arr.dtype.kind == "i" and int(arr.min()) < 0:
        raise ArgumentError(f"{what} must be >= 0, got {int(arr.min())}")
    return arr.astype(np.uint64).reshape(-1)


def stored_key_column(arr: npt.NDArray[Any], *, where: str, offset: int | None = None) -> U64:
    """A key column as read from a file, as uint64: integers only, never negative."""
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind not in "ui":
        raise TableDtypeError(f"key column is {arr.dtype}, not an unsigned integer", key=where, offset=offset)
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise TableDtypeError(f"key column holds a negative key ({int(arr.min())})", key=where, offset=offset)
    return arr.astype(np.uint64)


def check_page(page: Page, directory: PageDirectory, number: int, schema: TableSchema, *, where: str,
               offset: int | None = None) -> None:
    """Refuse a page that is not what the directory says: row count, first and last key, order.

    Raises
    ------
    TruncatedPageError
        When a column holds fewer rows than the directory promises.
    PageDirectoryError
        When the page holds more rows, or keys other than its directory entry's first and last.
    UnsortedTableError
        When the page's keys go backwards (or repeat, in a table of unique keys).
    """
    want = directory.count(number)
    for name, col in (("key", page.keys), *page.values.items()):
        if col.size < want:
            raise TruncatedPageError(f"page {number}: {name} column holds {col.size} rows, the directory says "
                                     f"{want}", key=where, offset=offset)
        if col.size > want:
            raise PageDirectoryError(f"page {number}: {name} column holds {col.size} rows, the directory says "
                                     f"{want}", key=where, offset=offset)
    keys = page.keys
    if int(keys[0]) != int(directory.first[number]) or int(keys[-1]) != int(directory.last[number]):
        raise PageDirectoryError(f"page {number} holds keys {int(keys[0])}..{int(keys[-1])}, the directory says "
                                 f"{int(directory.first[number])}..{int(directory.last[number])}", key=where,
                                 offset=offset)
    bad = np.flatnonzero(keys[1:] <= keys[:-1]) if schema.unique else np.flatnonzero(keys[1:] < keys[:-1])
    if bad.size:
        r = int(bad[0]) + 1
        word = "repeats" if schema.unique and keys[r] == keys[r - 1] else "goes below"
        raise UnsortedTableError(f"page {number}, row {r}: key {int(keys[r])} {word} key {int(keys[r - 1])} of the "
                                 "row before", key=where, offset=offset)


def parse_value_max(doc: Any, schema: TableSchema) -> dict[str, float | int]:
    """The largest value of each column a writer recorded (columns with a damaged or absent entry left out)."""
    out: dict[str, float | int] = {}
    if isinstance(doc, Mapping):
        for name in schema.value_names:
            v = doc.get(name)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[name] = v
    return out


def empty_columns(schema: TableSchema, n: int) -> Columns:
    """Zero-filled value columns of ``n`` rows (what a lookup answers for keys not found)."""
    return {name: np.zeros(n, dtype=dtype) for name, dtype in schema.values}


def normalise_values(values: Mapping[str, npt.ArrayLike] | npt.ArrayLike | None, n: int,
                     names: Sequence[str] | None = None) -> Columns:
    """Value columns from what a caller passes: one array (named ``"value"``) or a mapping of name → array."""
    if values is None:
        raise ArgumentError("a table needs values")
    if isinstance(values, Mapping):
        out = {str(k): np.asarray(v) for k, v in values.items()}
    else:
        out = {(names[0] if names else "value"): np.asarray(values)}
    for name, col in out.items():
        if col.ndim != 1 or col.shape[0] != n:
            raise ArgumentError(f"value column {name!r} has shape {col.shape}, expected ({n},)")
    return out
