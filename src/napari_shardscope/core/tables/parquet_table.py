"""Sorted tables in Parquet: one row group is one page (needs ``pyarrow``: ``pip install napari-shardscope[tables]``).

Parquet is how pipelines and connectome services hand tables around (CAVE and neuPrint export
Parquet; pandas and Spark write it). A file's footer already is a page directory: per row group,
the row count and — in every writer's default settings — the minimum and maximum of each column.
Opening reads only the footer (one suffix read, two when it is over 64 KiB); a lookup reads the
column chunks of the row groups it needs through our byte store (their byte ranges come from the
footer; all of a call's ranges in flight together, coalesced when close), and pyarrow decodes them
from memory. pyarrow never touches the store itself.

Read: one ``.parquet`` file, or a directory of them (sorted by name; files and row groups in that
order must be sorted by key, as a sorted export's parts are). The key column is named by the caller
or by our metadata, and may be any integer type with no negative keys (pandas writes ``int64``).
A row group without key statistics is found by reading its key column once at open.

Written (``write_sorted_table(url, ..., format="parquet")``): a single file when ``url`` ends in
``.parquet``, otherwise a directory of ``part-NNNNN.parquet`` files of ``file_rows`` rows plus a
``_shardscope_table.json`` written last; row groups of ``page_rows`` rows, statistics on,
dictionary encoding off for the key column. pyarrow reads both as a table or a dataset.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import (
    ByteStore,
    open_store,
    parse_url,
    read_document,
    read_ranges,
    read_suffixes,
)
from napari_shardscope.core.errors import ArgumentError, RefusedDestinationError, UnsupportedFeatureError
from napari_shardscope.core.tables.destination import TEMP_PREFIX, Destination, TableSummary
from napari_shardscope.core.tables.directory import (
    MAX_PAGE_ROWS,
    MAX_PAGES,
    Columns,
    Page,
    PageDirectory,
    TableSchema,
    parse_value_max,
    stored_key_column,
)
from napari_shardscope.core.tables.errors import PageDirectoryError, TableDtypeError, TableError, TruncatedPageError
from napari_shardscope.core.tables.protocol import StoredPageSource

#: The key of our metadata in a file's key-value metadata, and the manifest of a directory of parts.
METADATA_KEY = "shardscope_sorted_table"
MANIFEST = "_shardscope_table.json"
#: Bytes read from the end of a file at open: the footer of a file of thousands of row groups fits.
FOOTER_PROBE = 64 << 10
#: The largest footer read (a hostile length field must not allocate more).
MAX_FOOTER_BYTES = 256 << 20
#: The largest column chunk read for one page.
MAX_COLUMN_CHUNK_BYTES = 1 << 30
#: Rows per file of a directory of parts unless the caller says otherwise (~64 MB of (uint64, uint64)).
DEFAULT_FILE_ROWS = 1 << 22
#: The largest single file written to a bucket (uploaded in one request from a local spool file).
MAX_REMOTE_FILE_BYTES = 1 << 30
#: The most files a directory table may have.
MAX_FILES = 1 << 16


try:
    from pyarrow import ArrowException as ArrowError
except ImportError:  # without pyarrow nothing here runs: _pyarrow() refuses first
    ArrowError = OSError


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise UnsupportedFeatureError("Parquet tables", detail="install pyarrow: pip install "
                                      "'napari-shardscope[tables]'") from exc
    return pyarrow


def split_file_url(url: str) -> tuple[str, str]:
    """``(directory URL, file name)`` of a URL or path naming one file."""
    text = str(url)
    if "://" not in text:
        path = Path(os.path.expanduser(text)).absolute()
        return str(path.parent), path.name
    head, _, name = text.rstrip("/").rpartition("/")
    if not name or head.endswith(":/"):
        raise ArgumentError(f"{url!r} does not name a file")
    return head + "/", name


# -- writing ----------------------------------------------------------------------------------------------
class ParquetSink:
    """Writes one row group per page, into one file or a directory of parts (module docstring)."""

    def __init__(self, url: str | os.PathLike[str], schema: TableSchema, page_rows: int, *, overwrite: bool,
                 context: Any = None, compression: str = "zstd", file_rows: int | None = None,
                 dictionary: bool = True) -> None:
        pa = _pyarrow()
        self.pa = pa
        self.schema = schema
        self.page_rows = page_rows
        self.compression = compression
        # dictionary encoding pays for repeated values (body ids); on distinct values (points, scores) it
        # is half the CPU of writing and saves nothing: such tables pass dictionary=False
        self.dictionary = dictionary
        self.overwrite = overwrite
        self.context = context
        fields = [pa.field(schema.key, pa.uint64(), nullable=False)]
        fields += [pa.field(n, pa.from_numpy_dtype(np.dtype(d)), nullable=False) for n, d in schema.values]
        self.arrow_schema = pa.schema(fields)
        self.single = str(url).rstrip("/").endswith(".parquet")
        self._writer: Any = None
        self._path: Path | None = None  # the file being written (a temp file)
        self._parts: list[str] = []
        self._rows_in_part = 0
        if self.single:
            if file_rows is not None:
                raise ArgumentError("file_rows applies to a directory of Parquet files, not to one .parquet file")
            root, self.name = split_file_url(str(url))
            loc = parse_url(root)
            self.local_dir = Path(loc.kvstore["path"]) if loc.is_local else None
            if self.local_dir is not None:
                target = self.local_dir / self.name
                if target.exists() and not overwrite:
                    raise RefusedDestinationError(f"{target} exists (pass overwrite=True to replace it)")
                self.local_dir.mkdir(parents=True, exist_ok=True)
                self.store: ByteStore | None = None
            else:
                from napari_shardscope.core.bytestore.context import shared_context

                self.store = open_store(loc, context if context is not None else shared_context())
                if self.store.read_range(self.name, 0, 0) is not None and not overwrite:
                    raise RefusedDestinationError(f"{url} exists (pass overwrite=True to replace it)")
            self.dest: Destination | None = None
        else:
            rows = DEFAULT_FILE_ROWS if file_rows is None else int(file_rows)
            if rows < page_rows:
                raise ArgumentError(f"file_rows ({rows}) must be at least page_rows ({page_rows})")
            self.file_rows = rows - rows % page_rows
            self.dest = Destination(url, MANIFEST, overwrite=overwrite, context=context)
            self.store = self.dest.store
            self.local_dir = self.dest.temp_dir

    def _open_part(self) -> None:
        if self.single:
            folder = self.local_dir if self.local_dir is not None else Path(tempfile.gettempdir())
            self._path = folder / f"{TEMP_PREFIX}{self.name}-{uuid.uuid4().hex[:12]}"
        else:
            name = f"part-{len(self._parts):05d}.parquet"
            self._parts.append(name)
            folder = self.local_dir if self.local_dir is not None else Path(tempfile.gettempdir())
            self._path = folder / (name if self.local_dir is not None else f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(str(self._path), self.arrow_schema, compression=self.compression,
                                        use_dictionary=list(self.schema.value_names) if self.dictionary else False,
                                        write_statistics=True)
        self._rows_in_part = 0

    def write_page(self, number: int, keys: npt.NDArray[np.uint64], values: Columns) -> None:
        pa = self.pa
        if self._writer is None:
            self._open_part()
        arrays = [pa.array(keys, type=pa.uint64())] + [pa.array(values[n]) for n in self.schema.value_names]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self.arrow_schema), row_group_size=keys.size)
        self._rows_in_part += keys.size
        if self.single and self.store is not None and self._path is not None \
                and self._path.stat().st_size > MAX_REMOTE_FILE_BYTES:
            raise ArgumentError(f"a single Parquet file on a bucket is uploaded in one request and limited to "
                                f"{MAX_REMOTE_FILE_BYTES >> 20} MiB: write a directory of parts instead (a URL "
                                "not ending in .parquet)")
        if not self.single and self._rows_in_part >= self.file_rows:
            self._close_part({})

    def _close_part(self, metadata: Mapping[str, str]) -> None:
        if self._writer is None:
            return
        if metadata:
            self._writer.add_key_value_metadata(dict(metadata))
        self._writer.close()
        self._writer = None
        path = self._path
        assert path is not None
        if self.local_dir is None and self.store is not None:  # remote: upload the spooled file
            name = self.name if self.single else self._parts[-1]
            try:
                self.store.write(name, path.read_bytes())
            finally:
                path.unlink(missing_ok=True)

    def finish(self, summary: TableSummary) -> None:
        meta = {METADATA_KEY: json.dumps(summary.metadata())}
        if self.single:
            if self._writer is None:
                self._open_part()  # an empty table is still a file with a schema
            self._close_part(meta)
            if self.local_dir is not None:
                assert self._path is not None
                target = self.local_dir / self.name
                if target.exists() and not self.overwrite:
                    raise RefusedDestinationError(f"{target} appeared while the table was written")
                os.replace(self._path, target)
            return
        if not self._parts:
            self._open_part()  # an empty table is one file with a schema, so readers know its columns
        self._close_part({})
        assert self.store is not None and self.dest is not None
        manifest = {**summary.metadata(), "files": self._parts}
        self.store.write(MANIFEST, json.dumps(manifest, indent=1).encode())  # the commit point
        self.dest.commit()

    def abort(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):  # the write already failed; cleaning up must not mask it
                self._writer.close()
            self._writer = None
        if self._path is not None and (self.single or self.local_dir is None):
            self._path.unlink(missing_ok=True)
        if self.dest is not None:
            self.dest.abort()


# -- reading ----------------------------------------------------------------------------------------------
@dataclass
class ParquetFileInfo:
    """One file of a table: its key in the store, its parsed footer and where its column chunks end."""

    key: str
    metadata: Any  # pyarrow.parquet.FileMetaData
    data_end: int  # the end of the last column chunk (a size that covers every range a row group reads)


class _RangeFile(io.RawIOBase):
    """A read-only file over the byte ranges of one file fetched beforehand (pyarrow reads through it).

    A read outside them goes to the store (counted like any read); pyarrow reads exactly the column
    chunk ranges the footer gives, so that happens only for writers whose chunks need padding.
    """

    def __init__(self, store: ByteStore, key: str, size: int, ranges: Mapping[int, bytes]) -> None:
        self._store, self._key, self._size = store, key, size
        self._starts = sorted(ranges)
        self._ranges = ranges
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = offset if whence == 0 else (self._pos + offset if whence == 1 else self._size + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        data = self._slice(self._pos, min(len(buffer), max(0, self._size - self._pos)))
        n = len(data)
        buffer[:n] = data
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        n = self._size - self._pos if size is None or size < 0 else min(size, max(0, self._size - self._pos))
        data = self._slice(self._pos, n)
        self._pos += len(data)
        return data

    def _slice(self, start: int, n: int) -> bytes:
        if n <= 0:
            return b""
        i = int(np.searchsorted(self._starts, start, side="right")) - 1
        if i >= 0:
            s = self._starts[i]
            chunk = self._ranges[s]
            if start + n <= s + len(chunk):
                return chunk[start - s : start - s + n]
        return self._store.read_range(self._key, start, start + n) or b""


def _column_range(col: Any) -> tuple[int, int, int]:
    """``(start, end, uncompressed bytes)`` of a column chunk, from its footer entry."""
    start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else \
        col.data_page_offset
    return int(start), int(start) + int(col.total_compressed_size), int(col.total_uncompressed_size)


class ParquetSource(StoredPageSource):
    """A table's pages from Parquet files (module docstring)."""

    def __init__(self, store: ByteStore, url: str, schema: TableSchema, files: Sequence[ParquetFileInfo],
                 page_file: npt.NDArray[np.int64], page_group: npt.NDArray[np.int64], directory: PageDirectory,
                 column_index: Mapping[str, int], value_max: Mapping[str, float | int] | None = None) -> None:
        self.store = store
        self.value_max = dict(value_max or {})
        self._url = url
        self._schema = schema
        self.files = list(files)
        self.page_file = page_file
        self.page_group = page_group
        self._directory = directory
        self.column_index = dict(column_index)

    def page_where(self, page: int) -> tuple[str, int | None]:
        f = self.files[int(self.page_file[page])]
        rg = f.metadata.row_group(int(self.page_group[page]))
        return f.key, _column_range(rg.column(self.column_index[self._schema.key]))[0]

    def fetch_pages(self, pages: Sequence[int], columns: Sequence[str], *, keys: bool = True) -> list[Page]:
        names = ([self._schema.key] if keys else []) + list(columns)
        return [self._decode(p, names, keys, columns, data) for p, data in zip(pages, self._fetch(pages, names),
                                                                              strict=True)]

    def _fetch(self, pages: Sequence[int], names: Sequence[str]) -> list[dict[int, bytes]]:
        """The column chunk bytes of each page's row group, every range of the call in one batch."""
        requests: list[tuple[str, int, int]] = []
        owners: list[int] = []
        for i, p in enumerate(pages):
            f = self.files[int(self.page_file[p])]
            count = self._directory.count(p)
            rg = f.metadata.row_group(int(self.page_group[p]))
            for name in names:
                start, end, raw = _column_range(rg.column(self.column_index[name]))
                item = 8 if name == self._schema.key else self._schema.dtype_of(name).itemsize
                limit = min(MAX_COLUMN_CHUNK_BYTES, 4 * count * item + (1 << 20))
                if start < 0 or end - start > limit or raw > limit or end > f.data_end:
                    raise TableError(f"row group {int(self.page_group[p])}: column {name!r} chunk [{start}, {end}) "
                                     f"({raw} bytes decoded) is implausible for {count} rows", key=f.key,
                                     offset=max(start, 0))
                requests.append((f.key, start, end))
                owners.append(i)
        datas = read_ranges(self.store, requests)
        out: list[dict[int, bytes]] = [{} for _ in pages]
        for (key, start, end), owner, data in zip(requests, owners, datas, strict=True):
            if data is None or len(data) != end - start:
                got = 0 if data is None else len(data)
                raise TruncatedPageError(f"column chunk [{start}, {end}) is cut short: {got} bytes in the file",
                                         key=key, offset=start + got)
            out[owner][start] = data
        return out

    def _decode(self, page: int, names: Sequence[str], keys: bool, columns: Sequence[str],
                ranges: Mapping[int, bytes]) -> Page:
        import pyarrow.parquet as pq

        f = self.files[int(self.page_file[page])]
        group = int(self.page_group[page])
        where, offset = self.page_where(page)
        try:
            pf = pq.ParquetFile(_RangeFile(self.store, f.key, f.data_end, ranges), metadata=f.metadata,
                                pre_buffer=False)
            table = pf.read_row_group(group, columns=list(names), use_threads=False)
        except (ArrowError, OSError, ValueError) as exc:  # every pyarrow error derives from ArrowException
            raise TableError(f"row group {group} cannot be decoded ({exc})", key=where, offset=offset) from None
        arrays: dict[str, npt.NDArray[Any]] = {}
        for name in names:
            col = table.column(name)
            if col.null_count:
                raise TableDtypeError(f"row group {group}: column {name!r} holds {col.null_count} nulls", key=where,
                                      offset=offset)
            arr = col.to_numpy()
            want = np.dtype(np.uint64) if name == self._schema.key else self._schema.dtype_of(name)
            if name == self._schema.key:
                arr = stored_key_column(arr, where=where, offset=offset)
            elif arr.dtype != want:
                raise TableDtypeError(f"row group {group}: column {name!r} is {arr.dtype}, expected {want}",
                                      key=where, offset=offset)
            arrays[name] = arr
        k = arrays[self._schema.key] if keys else np.zeros(0, dtype=np.uint64)
        return Page(k, {n: arrays[n] for n in columns})


def _read_footers(store: ByteStore, url: str, keys: Sequence[str]) -> list[ParquetFileInfo]:
    """Every file's footer: one suffix read each, all together (a second for footers over 64 KiB)."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    tails = read_suffixes(store, [(k, FOOTER_PROBE) for k in keys])
    sizes: list[int | None] = [store.size(k) if store.cheap_size else None for k in keys]
    need: list[int] = []
    lengths: list[int] = []
    for i, (key, tail) in enumerate(zip(keys, tails, strict=True)):
        where = f"{url.rstrip('/')}/{key}"
        if tail is None:
            raise TableError("Parquet file not found", key=where)
        if len(tail) < 12 or tail[-4:] != b"PAR1":
            size = sizes[i]
            raise TableError("not a Parquet file (no PAR1 magic at its end)", key=where,
                             offset=None if size is None else max(0, size - 4))
        length = int.from_bytes(tail[-8:-4], "little")
        if length > MAX_FOOTER_BYTES:
            raise TableError(f"footer claims {length} bytes, more than the {MAX_FOOTER_BYTES} read", key=where)
        lengths.append(length)
        if length + 8 > len(tail):
            if len(tail) < FOOTER_PROBE:
                raise TruncatedPageError(f"footer claims {length} bytes, the file holds {len(tail)}", key=where,
                                         offset=0)
            need.append(i)
    more = read_suffixes(store, [(keys[i], lengths[i] + 8) for i in need])
    for i, data in zip(need, more, strict=True):
        tails[i] = data
    out = []
    for i, key in enumerate(keys):
        where = f"{url.rstrip('/')}/{key}"
        tail = tails[i] or b""
        footer = tail[len(tail) - lengths[i] - 8:]
        try:
            meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
        except (ArrowError, OSError, ValueError) as exc:
            size = sizes[i]
            raise TableError(f"footer cannot be decoded ({exc})", key=where,
                             offset=None if size is None else size - lengths[i] - 8) from None
        ends = [0]
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            ends.extend(_column_range(rg.column(c))[1] for c in range(rg.num_columns))
        data_end = max(ends)
        size = sizes[i]
        if size is not None and data_end > size - lengths[i] - 8:
            raise TruncatedPageError(f"column chunks run to byte {data_end}, past the footer", key=where,
                                     offset=size - lengths[i] - 8)
        out.append(ParquetFileInfo(key, meta, data_end))
    return out


def _in_key_order(infos: list[ParquetFileInfo], key: str | None) -> list[ParquetFileInfo]:
    """Files of a listed directory ordered by their smallest key (``part-10`` sorts before ``part-2`` by name).

    Files whose key statistics are missing keep their name order, after the others.
    """
    def smallest(info: ParquetFileInfo) -> tuple[int, int]:
        meta = info.metadata
        try:
            names = meta.schema.to_arrow_schema().names
            col = names.index(key) if key is not None else 0
            lows = [meta.row_group(g).column(col).statistics for g in range(meta.num_row_groups)]
            mins = [int(st.min) for st in lows if st is not None and st.has_min_max]
        except (ValueError, TypeError, OSError):
            return (1, 0)
        return (0, min(mins)) if mins else (1, 0)

    return sorted(infos, key=smallest)


def open_parquet_source(store: ByteStore, url: str, files: Sequence[str], *, key: str | None = None,
                        values: Sequence[str] | None = None, manifest: Mapping[str, Any] | None = None
                        ) -> ParquetSource:
    """Open the table made of ``files`` (keys in ``store``, in key order)."""
    if not files:
        raise TableError("no Parquet files", key=url)
    if len(files) > MAX_FILES:
        raise TableError(f"{len(files)} files is more than the {MAX_FILES} a table may have", key=url)
    infos = _read_footers(store, url, files)
    if manifest is None and len(infos) > 1:
        infos = _in_key_order(infos, key)
    first = infos[0]
    arrow = first.metadata.schema.to_arrow_schema()
    ours: dict[str, Any] = {}
    raw = (first.metadata.metadata or {}).get(METADATA_KEY.encode())
    where0 = f"{url.rstrip('/')}/{first.key}"
    if raw is not None:
        try:
            ours = json.loads(raw)
        except ValueError:
            raise PageDirectoryError(f"{METADATA_KEY} metadata is not JSON", key=where0) from None
    elif manifest is not None:
        ours = dict(manifest)
    unique = False
    if ours:
        schema0 = TableSchema.from_json(ours, where=where0)
        key = key or schema0.key
        values = list(values) if values else list(schema0.value_names)
        unique = schema0.unique
    if key is None:
        key = arrow.names[0]
    if not values:
        values = [n for n in arrow.names if n != key]
    names = [key, *values]
    index = {}
    for n in names:
        if n not in arrow.names:
            raise ArgumentError(f"{where0} has no column {n!r}; its columns are {arrow.names}")
        index[n] = arrow.names.index(n)
    import pyarrow as pa

    ktype = arrow.field(key).type
    if not pa.types.is_integer(ktype):
        raise TableDtypeError(f"key column {key!r} is {ktype}, not an integer", key=where0)
    dtypes = {}
    for n in values:
        t = arrow.field(n).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
            raise TableDtypeError(f"value column {n!r} is {t}; tables store booleans, integers and floats",
                                  key=where0)
        dtypes[n] = np.dtype(t.to_pandas_dtype())
    schema = TableSchema(key, tuple(dtypes.items()), unique)
    for info in infos[1:]:
        other = info.metadata.schema.to_arrow_schema()
        for n in names:
            if n not in other.names or other.field(n).type != arrow.field(n).type \
                    or other.names.index(n) != index[n]:
                raise TableDtypeError(f"column {n!r} differs from {first.key}'s", key=f"{url.rstrip('/')}/{info.key}")
    page_file, page_group, first_keys, last_keys, counts, unknown = [], [], [], [], [], []
    for fi, info in enumerate(infos):
        meta = info.metadata
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            n = rg.num_rows
            if n == 0:
                continue
            if n > MAX_PAGE_ROWS or n < 0:
                raise PageDirectoryError(f"row group {g} claims {n} rows (at most {MAX_PAGE_ROWS} per page)",
                                         key=f"{url.rstrip('/')}/{info.key}")
            stats = rg.column(index[key]).statistics
            page_file.append(fi)
            page_group.append(g)
            counts.append(n)
            if stats is not None and stats.has_min_max:
                lo, hi = int(stats.min), int(stats.max)
                if lo < 0:
                    raise TableDtypeError(f"row group {g}: key column holds a negative key ({lo})",
                                          key=f"{url.rstrip('/')}/{info.key}")
                first_keys.append(lo)
                last_keys.append(hi)
            else:
                first_keys.append(0)
                last_keys.append(0)
                unknown.append(len(counts) - 1)
            if len(counts) > MAX_PAGES:
                raise PageDirectoryError(f"more than {MAX_PAGES} row groups", key=url)
    pf = np.asarray(page_file, dtype=np.int64)
    pg = np.asarray(page_group, dtype=np.int64)
    if unknown:  # row groups without statistics: their key column read once
        c = np.asarray(counts, dtype=np.int64)
        starts = np.zeros(c.size + 1, dtype=np.int64)
        np.cumsum(c, out=starts[1:])
        probe = ParquetSource(store, url, schema, infos, pf, pg, PageDirectory(
            np.zeros(c.size, np.uint64), np.zeros(c.size, np.uint64), starts), index)
        for i0 in range(0, len(unknown), 64):
            batch = unknown[i0:i0 + 64]
            for p, page in zip(batch, probe.fetch_pages(batch, [], keys=True), strict=True):
                first_keys[p], last_keys[p] = int(page.keys[0]), int(page.keys[-1])
    directory = PageDirectory.checked(np.asarray(first_keys, dtype=np.uint64), np.asarray(last_keys, dtype=np.uint64),
                                      np.asarray(counts, dtype=np.int64), unique=unique, where=url)
    return ParquetSource(store, url, schema, infos, pf, pg, directory, index,
                         parse_value_max(ours.get("value_max"), schema) if ours else None)


def parquet_files(store: ByteStore, url: str) -> tuple[list[str], dict[str, Any] | None]:
    """The files of a directory table and our manifest: its list, or every ``*.parquet`` listed, sorted by name."""
    raw = read_document(store, MANIFEST)
    if raw is not None:
        from napari_shardscope.core.json_document import load_json_object

        doc = load_json_object(raw, key=f"{url.rstrip('/')}/{MANIFEST}")
        files = doc.get("files")
        if not isinstance(files, list) or not all(isinstance(f, str) and f and "/" not in f and f[0] != "."
                                                  for f in files):
            raise PageDirectoryError("manifest 'files' must list plain file names", key=f"{url.rstrip('/')}/{MANIFEST}")
        return list(files), doc
    return sorted(k for k in store.list("") if k.endswith(".parquet") and "/" not in k
                  and not k.startswith((".", "_"))), None
