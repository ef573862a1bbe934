"""Sorted tables in Zarr v3: one chunk (or one inner chunk of a shard) is one page.

The layout this package writes (``write_sorted_table(url, ..., format="zarr3")``), readable by
zarr-python and TensorStore as plain arrays::

    table/zarr.json                group; attributes.shardscope_sorted_table = schema, row and page counts
    table/<key>/zarr.json          uint64 [num_rows], chunks of page_rows (sharded: shard_pages chunks per shard)
    table/<value>/zarr.json        one 1-D array per value column, chunked like the keys
    table/page_directory/zarr.json uint64 [pages, 3]: first key, last key, row count of each page

Opening reads the group's ``zarr.json``, the arrays' and the page directory (a few small reads,
concurrent on a bucket); a lookup then reads only the pages it needs — through our own Zarr v3
reader (:class:`~napari_shardscope.core.formats.zarr3.reader.Zarr3ArrayReader`): shard indexes, then
the inner chunks' byte ranges, each wave of requests in flight together.

A pipeline's own Zarr table opens too: a group with two or more 1-D arrays named by the caller
(``key="supervoxel", values=["body"]``), or a 2-D array ``[rows, columns]`` whose column 0 is the
key. Its pages are the key array's chunks; without our directory, the first and last key of every
page are found once by reading the key column page by page (bounded memory, one pass) and, with
``directory_cache=PATH``, kept in a local file for the next open.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_ranges
from napari_shardscope.core.errors import ArgumentError, MetadataError
from napari_shardscope.core.formats.zarr3.codecs import encode_chunk, split_codec_chain
from napari_shardscope.core.formats.zarr3.metadata import (
    ArrayMetadata,
    ChunkKeyEncoding,
    CodecSpec,
    GroupMetadata,
    max_chunk_file_bytes,
    parse_node_metadata,
)
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.sharding import encode_shard, parse_sharding_config
from napari_shardscope.core.formats.zarr3.writer import encode_metadata
from napari_shardscope.core.tables.destination import Destination, TableSummary
from napari_shardscope.core.tables.directory import (
    Columns,
    Page,
    PageDirectory,
    TableSchema,
    parse_value_max,
    stored_key_column,
)
from napari_shardscope.core.tables.documents import read_documents
from napari_shardscope.core.tables.errors import (
    PageDirectoryError,
    TableDtypeError,
    TruncatedPageError,
    UnsortedTableError,
)
from napari_shardscope.core.tables.protocol import StoredPageSource

#: The group attribute naming a table written here.
ATTRIBUTE = "shardscope_sorted_table"
#: The array holding the page directory.
DIRECTORY_ARRAY = "page_directory"
#: Rows per chunk of the page directory array.
DIRECTORY_CHUNK = 1 << 16
#: Pages per shard file unless the caller says otherwise (16 MiB of uint64 keys at 16,384 rows a page).
DEFAULT_SHARD_PAGES = 64
#: Whole chunk files read at once from a remote store that cannot batch whole-key reads.
WHOLE_KEY_THREADS = 32
_COMPRESSORS: dict[str, tuple[CodecSpec, ...]] = {
    "gzip": (CodecSpec("gzip", {"level": 1}),),
    "zstd": (CodecSpec("zstd", {"level": 1, "checksum": False}),),
    "none": (),
}


# -- writing ----------------------------------------------------------------------------------------------
def _column_metadata(dtype: np.dtype[Any], rows: int, page_rows: int, shard_pages: int, compression: str,
                     *, attributes: Mapping[str, Any] | None = None) -> ArrayMetadata:
    endian: dict[str, Any] = {"endian": "little"} if dtype.itemsize > 1 else {}
    inner = (CodecSpec("bytes", endian), *_COMPRESSORS[compression])
    if shard_pages:
        codecs: tuple[CodecSpec, ...] = (CodecSpec("sharding_indexed", {
            "chunk_shape": [page_rows],
            "codecs": [c.to_json() for c in inner],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}),)
        chunk = page_rows * shard_pages
    else:
        codecs, chunk = inner, page_rows
    return ArrayMetadata(shape=(rows,), data_type=dtype.name, chunk_shape=(chunk,),
                         chunk_key_encoding=ChunkKeyEncoding("default", "/"), fill_value=0 if dtype.kind != "b"
                         else False, codecs=codecs, attributes=dict(attributes or {}))


class ZarrSink:
    """Writes a table's columns page by page as Zarr v3 arrays (module docstring), the group last."""

    def __init__(self, url: str | os.PathLike[str], schema: TableSchema, page_rows: int, *, overwrite: bool,
                 context: Any = None, compression: str = "gzip", shard_pages: int = DEFAULT_SHARD_PAGES) -> None:
        if compression not in _COMPRESSORS:
            raise ArgumentError(f"zarr3 compression must be one of {list(_COMPRESSORS)}, got {compression!r}")
        if shard_pages < 0:
            raise ArgumentError(f"shard_pages must be >= 0, got {shard_pages}")
        if DIRECTORY_ARRAY in (schema.key, *schema.value_names):
            raise ArgumentError(f"a column may not be named {DIRECTORY_ARRAY!r} (the page directory's array)")
        if compression == "zstd":
            import zstandard  # noqa: F401  (the codecs extra; refused now, not after the first page)
        self.schema = schema
        self.page_rows = page_rows
        self.shard_pages = shard_pages
        self.compression = compression
        self.dest = Destination(url, "zarr.json", overwrite=overwrite, context=context)
        self.store = self.dest.store
        self._columns = [(schema.key, np.dtype(np.uint64)), *((n, np.dtype(d)) for n, d in schema.values)]
        self._chains = {}
        self._configs = {}
        for name, dtype in self._columns:
            meta = _column_metadata(dtype, page_rows * max(1, shard_pages), page_rows, shard_pages, compression)
            chain = split_codec_chain(meta.codecs, 1, dtype, key=name)
            if shard_pages:
                config = parse_sharding_config(chain.array_to_bytes, meta.chunk_shape, dtype, key=name)
                self._configs[name] = config
                self._chains[name] = config.codecs
            else:
                self._chains[name] = chain
        self._pending: dict[str, dict[tuple[int, ...], bytes]] = {n: {} for n, _ in self._columns}
        self._shard: int | None = None

    def write_page(self, number: int, keys: npt.NDArray[np.uint64], values: Columns) -> None:
        shard = number // self.shard_pages if self.shard_pages else None
        if self.shard_pages and self._shard is not None and shard != self._shard:
            self._flush()
        self._shard = shard
        for name, dtype in self._columns:
            col = keys if name == self.schema.key else values[name]
            block = np.zeros(self.page_rows, dtype=dtype)
            block[: col.size] = col
            data = encode_chunk(block, self._chains[name], None)
            if self.shard_pages:
                self._pending[name][(number % self.shard_pages,)] = data
            else:
                self.store.write(join_key(name, "c", str(number)), data)

    def _flush(self) -> None:
        if self._shard is None or not self.shard_pages:
            return
        for name, _ in self._columns:
            chunks = self._pending[name]
            if chunks:
                self.store.write(join_key(name, "c", str(self._shard)), encode_shard(chunks, self._configs[name]))
            self._pending[name] = {}

    def finish(self, summary: TableSummary) -> None:
        self._flush()
        rows = summary.num_rows
        for name, dtype in self._columns:
            meta = _column_metadata(dtype, rows, self.page_rows, self.shard_pages, self.compression)
            self.store.write(join_key(name, "zarr.json"), encode_metadata(meta))
        d = summary.directory
        table = np.stack([d.first, d.last, np.diff(d.starts).astype(np.uint64)], axis=1) if d.pages \
            else np.zeros((0, 3), dtype=np.uint64)
        dmeta = ArrayMetadata(shape=(d.pages, 3), data_type="uint64", chunk_shape=(DIRECTORY_CHUNK, 3),
                              chunk_key_encoding=ChunkKeyEncoding("default", "/"), fill_value=0,
                              codecs=(CodecSpec("bytes", {"endian": "little"}), *_COMPRESSORS["gzip"]),
                              dimension_names=("page", "first_last_count"))
        self.store.write(join_key(DIRECTORY_ARRAY, "zarr.json"), encode_metadata(dmeta))
        chain = split_codec_chain(dmeta.codecs, 2, np.dtype(np.uint64), key=DIRECTORY_ARRAY)
        for i in range(0, d.pages, DIRECTORY_CHUNK):
            block = np.zeros((DIRECTORY_CHUNK, 3), dtype=np.uint64)
            part = table[i:i + DIRECTORY_CHUNK]
            block[: part.shape[0]] = part
            self.store.write(join_key(DIRECTORY_ARRAY, "c", str(i // DIRECTORY_CHUNK), "0"),
                             encode_chunk(block, chain, None))
        group = {"zarr_format": 3, "node_type": "group", "attributes": {ATTRIBUTE: summary.metadata()}}
        self.store.write("zarr.json", json.dumps(group, indent=2).encode())  # the commit point
        self.dest.commit()

    def abort(self) -> None:
        self.dest.abort()


# -- reading ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZarrColumn:
    """One column of a table: an array, and for a 2-D array the column index in it."""

    reader: Zarr3ArrayReader
    column: int | None = None

    @property
    def rows_per_chunk(self) -> int:
        return int(self.reader.inner_chunk_shape[0])

    def chunk_of(self, row_chunk: int) -> tuple[int, ...]:
        if self.column is None:  # a 1-D array, or a 2-D one read whole (one chunk spans its columns)
            return (row_chunk,) if self.reader.metadata.ndim == 1 else (row_chunk, 0)
        return (row_chunk, self.column // int(self.reader.inner_chunk_shape[1]))


class ChunkFetcher:
    """Reads rows of many columns at once: every inner chunk located, then fetched in one batch of requests."""

    def __init__(self, store: ByteStore) -> None:
        self.store = store

    def read_rows(self, requests: Sequence[tuple[ZarrColumn, int, int]]) -> list[npt.NDArray[Any]]:
        """Rows ``[a, b)`` of each ``(column, a, b)``; missing chunks are the array's fill value."""
        wanted: dict[tuple[int, tuple[int, ...]], ZarrColumn] = {}
        for col, a, b in requests:
            r = col.rows_per_chunk
            for c in range(a // r, (b - 1) // r + 1 if b > a else a // r):
                wanted.setdefault((id(col.reader), col.chunk_of(c)), col)
        chunks = self._fetch(wanted)
        out = []
        for col, a, b in requests:
            r = col.rows_per_chunk
            parts = []
            for c in range(a // r, (b - 1) // r + 1 if b > a else a // r):
                block = chunks[(id(col.reader), col.chunk_of(c))]
                if col.column is not None:
                    block = block[:, col.column % int(col.reader.inner_chunk_shape[1])]
                lo = max(a, c * r) - c * r
                hi = min(b, (c + 1) * r) - c * r
                parts.append(block[lo:hi])
            out.append(np.concatenate(parts) if len(parts) != 1 else np.ascontiguousarray(parts[0]))
        return out

    def _fetch(self, wanted: Mapping[tuple[int, tuple[int, ...]], ZarrColumn]
               ) -> dict[tuple[int, tuple[int, ...]], npt.NDArray[Any]]:
        by_reader: dict[int, list[tuple[int, ...]]] = {}
        readers: dict[int, Zarr3ArrayReader] = {}
        for (rid, pos), col in wanted.items():
            by_reader.setdefault(rid, []).append(pos)
            readers[rid] = col.reader
        ranged: list[tuple[tuple[int, tuple[int, ...]], str, int, int]] = []
        whole: list[tuple[tuple[int, tuple[int, ...]], str]] = []
        out: dict[tuple[int, tuple[int, ...]], npt.NDArray[Any]] = {}
        for rid, positions in by_reader.items():
            reader = readers[rid]
            if reader.sharded:
                cps = reader.chunks_per_shard
                shards = sorted({tuple(p // n for p, n in zip(pos, cps, strict=True)) for pos in positions})
                reader.prefetch_shard_indexes(shards)  # remote: every shard index in one wave
                for pos in positions:
                    loc = reader.locate_inner_chunk(pos)
                    if loc.byte_range is None:
                        out[(rid, pos)] = _fill(reader)
                    else:
                        ranged.append(((rid, pos), loc.shard_key, *loc.byte_range))
            else:
                exact = _exact_chunk_bytes(reader)
                for pos in positions:
                    if exact is None:
                        whole.append(((rid, pos), reader.shard_key(pos)))
                    else:  # uncompressed: a range of known length, issued with the others (no thread each)
                        ranged.append(((rid, pos), reader.shard_key(pos), 0, exact))
        datas = read_ranges(self.store, [(k, a, b) for _, k, a, b in ranged])
        for (ident, key, a, b), data in zip(ranged, datas, strict=True):
            reader = readers[ident[0]]
            if data is None and not reader.sharded:
                out[ident] = _fill(reader)  # no chunk file: all fill value
                continue
            if data is None or len(data) != b - a:
                got = 0 if data is None else len(data)
                raise TruncatedPageError(f"inner chunk {list(ident[1])} [{a}, {b}) is cut short: {got} bytes "
                                         "in the file", key=key, offset=a + got)
            out[ident] = reader.decode_inner_chunk(data, key=key, offset=a)
        for (ident, key), data in zip(whole, self._read_whole(whole, readers), strict=True):
            reader = readers[ident[0]]
            out[ident] = _fill(reader) if data is None else reader.decode_inner_chunk(data, key=key, offset=0)
        return out

    def _read_whole(self, whole: Sequence[tuple[tuple[int, tuple[int, ...]], str]],
                    readers: Mapping[int, Zarr3ArrayReader]) -> list[bytes | None]:
        """Whole chunk files, each bounded by what its array's spec allows (concurrently on a remote store)."""
        def one(item: tuple[tuple[int, tuple[int, ...]], str]) -> bytes | None:
            (rid, _), key = item
            limit = max_chunk_file_bytes(readers[rid].metadata)
            from napari_shardscope.core.bytestore import read_bounded

            return read_bounded(self.store, key, limit, "a chunk of this array", TruncatedPageError)

        if self.store.cheap_size or len(whole) <= 1:
            return [one(w) for w in whole]
        with ThreadPoolExecutor(min(WHOLE_KEY_THREADS, len(whole))) as pool:
            return list(pool.map(one, whole))


def _exact_chunk_bytes(reader: Zarr3ArrayReader) -> int | None:
    """The stored size of every chunk of an unsharded array without compression (``None`` otherwise)."""
    chain = reader.chain
    if reader.sharded or chain.bytes_to_bytes or chain.array_to_bytes.name != "bytes":
        return None
    return math.prod(reader.inner_chunk_shape) * reader.metadata.dtype.itemsize


def _fill(reader: Zarr3ArrayReader) -> npt.NDArray[Any]:
    meta = reader.metadata
    return np.full(reader.inner_chunk_shape, meta.fill_scalar, dtype=meta.dtype)


class ZarrSource(StoredPageSource):
    """A table's pages from Zarr v3 arrays (see the module docstring for the layouts read)."""

    def __init__(self, store: ByteStore, url: str, schema: TableSchema, key: ZarrColumn,
                 values: Mapping[str, ZarrColumn], directory: PageDirectory,
                 value_max: Mapping[str, float | int] | None = None) -> None:
        self.store = store
        self.value_max = dict(value_max or {})
        self._url = url
        self._schema = schema
        self.key_column = key
        self.value_columns = dict(values)
        self._directory = directory
        self._fetcher = ChunkFetcher(store)

    def page_where(self, page: int) -> tuple[str, int | None]:
        r = self.key_column.reader
        pos = (page,) if self.key_column.column is None else self.key_column.chunk_of(page)
        if r.sharded:
            cps = r.chunks_per_shard
            return r.shard_key(tuple(p // n for p, n in zip(pos, cps, strict=True))), None
        return r.shard_key(pos), None

    def fetch_pages(self, pages: Sequence[int], columns: Sequence[str], *, keys: bool = True) -> list[Page]:
        d = self._directory
        requests: list[tuple[ZarrColumn, int, int]] = []
        for p in pages:
            a, b = int(d.starts[p]), int(d.starts[p + 1])
            if keys:
                requests.append((self.key_column, a, b))
            requests.extend((self.value_columns[n], a, b) for n in columns)
        arrays = iter(self._fetcher.read_rows(requests))
        out = []
        empty = np.zeros(0, dtype=np.uint64)
        for p in pages:
            where, offset = self.page_where(p)
            k = stored_key_column(next(arrays), where=where, offset=offset) if keys else empty
            vals = {n: next(arrays) for n in columns}
            out.append(Page(k, vals))
        return out


def _read_node(store: ByteStore, path: str) -> ArrayMetadata | GroupMetadata | None:
    return _read_nodes(store, [path])[0]


def _read_nodes(store: ByteStore, paths: Sequence[str]) -> list[ArrayMetadata | GroupMetadata | None]:
    """The ``zarr.json`` of each path, read together."""
    keys = [join_key(p, "zarr.json") for p in paths]
    return [None if raw is None else parse_node_metadata(raw, key=k)
            for k, raw in zip(keys, read_documents(store, keys), strict=True)]


def open_zarr_source(store: ByteStore, url: str, *, key: str | None = None, values: Sequence[str] | None = None,
                     directory_cache: str | os.PathLike[str] | None = None, root_document: bytes | None = None
                     ) -> ZarrSource:
    """Open the Zarr v3 table at the root of ``store`` (our layout, a group of 1-D arrays, or a 2-D array).

    ``root_document``: the root ``zarr.json`` when the caller has read it already.
    """
    root = _read_node(store, "") if root_document is None else parse_node_metadata(
        root_document, key=f"{url.rstrip('/')}/zarr.json")
    if root is None:
        raise MetadataError("zarr.json not found: not a Zarr v3 table", key=f"{url.rstrip('/')}/zarr.json")
    where = f"{url.rstrip('/')}/zarr.json"
    if isinstance(root, GroupMetadata):
        ours = root.attributes.get(ATTRIBUTE)
        if ours is not None:
            return _open_ours(store, url, ours, where)
        if key is None or not values:
            raise ArgumentError(f"{url} is a Zarr group without a {ATTRIBUTE!r} attribute: name its key array and "
                                "value arrays (key='supervoxel', values=['body'])")
        names = [key, *values]
        metas = _read_nodes(store, names)
        cols: dict[str, ZarrColumn] = {}
        for n, m in zip(names, metas, strict=True):
            if not isinstance(m, ArrayMetadata) or m.ndim != 1:
                raise ArgumentError(f"{url}: {n!r} is not a 1-D Zarr array")
            cols[n] = ZarrColumn(Zarr3ArrayReader(store, n, m))
        rows = {m.shape[0] for m in metas if isinstance(m, ArrayMetadata)}
        if len(rows) != 1:
            raise PageDirectoryError(f"columns {names} have different lengths {sorted(rows)}", key=where)
        schema = _foreign_schema(key, {n: cols[n].reader.metadata.dtype for n in values}, where)
        key_col, value_cols = cols[key], {n: cols[n] for n in values}
    else:
        if root.ndim != 2 or root.shape[1] < 2:
            raise ArgumentError(f"{url}: a Zarr array table must be 2-D [rows, columns] with the key in column 0, "
                                f"got shape {list(root.shape)}")
        reader = Zarr3ArrayReader(store, "", root)
        names = list(values) if values else [f"value{i}" for i in range(1, root.shape[1])]
        if len(names) != root.shape[1] - 1:
            raise ArgumentError(f"{url}: {len(names)} value names for {root.shape[1] - 1} value columns")
        key = key or "key"
        schema = _foreign_schema(key, dict.fromkeys(names, root.dtype), where)
        key_col = ZarrColumn(reader, 0)
        value_cols = {n: ZarrColumn(reader, i + 1) for i, n in enumerate(names)}
    if key_col.reader.metadata.dtype.kind not in "ui":
        raise TableDtypeError(f"key column {key!r} is {key_col.reader.metadata.dtype}, not an unsigned integer",
                              key=where)
    directory = _foreign_directory(store, url, key_col, schema, directory_cache)
    return ZarrSource(store, url, schema, key_col, value_cols, directory)


def _foreign_schema(key: str, dtypes: Mapping[str, np.dtype[Any]], where: str) -> TableSchema:
    for n, d in dtypes.items():
        if d.kind not in "biuf":
            raise TableDtypeError(f"value column {n!r} is {d}; tables store booleans, integers and floats", key=where)
    return TableSchema(key, tuple(dtypes.items()), unique=False)


def _open_ours(store: ByteStore, url: str, doc: Any, where: str) -> ZarrSource:
    schema = TableSchema.from_json(doc, where=where)
    try:
        rows, page_rows, pages = int(doc["num_rows"]), int(doc["page_rows"]), int(doc["pages"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PageDirectoryError(f"{ATTRIBUTE} attribute is damaged ({exc})", key=where) from None
    cols: dict[str, ZarrColumn] = {}
    names = [schema.key, *schema.value_names]
    *metas, dmeta = _read_nodes(store, [*names, DIRECTORY_ARRAY])
    for name, meta in zip(names, metas, strict=True):
        if not isinstance(meta, ArrayMetadata) or meta.ndim != 1:
            raise PageDirectoryError(f"column {name!r} is not a 1-D Zarr array", key=f"{url.rstrip('/')}/{name}")
        want = np.dtype(np.uint64) if name == schema.key else schema.dtype_of(name)
        if meta.dtype != want:
            raise TableDtypeError(f"column {name!r} is {meta.dtype}, the table's schema says {want}",
                                  key=f"{url.rstrip('/')}/{name}/zarr.json")
        if meta.shape[0] != rows:
            raise PageDirectoryError(f"column {name!r} has {meta.shape[0]} rows, the table says {rows}",
                                     key=f"{url.rstrip('/')}/{name}/zarr.json")
        cols[name] = ZarrColumn(Zarr3ArrayReader(store, name, meta))
    if cols[schema.key].rows_per_chunk != page_rows:
        raise PageDirectoryError(f"key column chunks hold {cols[schema.key].rows_per_chunk} rows, the table says "
                                 f"pages of {page_rows}", key=where)
    dwhere = f"{url.rstrip('/')}/{DIRECTORY_ARRAY}"
    if not isinstance(dmeta, ArrayMetadata) or dmeta.ndim != 2 or dmeta.shape != (pages, 3) \
            or dmeta.dtype != np.uint64:
        raise PageDirectoryError(f"the page directory must be a uint64 array of shape [{pages}, 3]", key=dwhere)
    dcol = ZarrColumn(Zarr3ArrayReader(store, DIRECTORY_ARRAY, dmeta), None)
    table = ChunkFetcher(store).read_rows([(dcol, 0, pages)])[0] if pages else np.zeros((0, 3), np.uint64)
    directory = PageDirectory.checked(table[:, 0], table[:, 1], table[:, 2], unique=schema.unique, where=dwhere)
    starts = directory.starts
    if directory.num_rows != rows or (pages and bool((np.diff(starts)[:-1] != page_rows).any())):
        raise PageDirectoryError(f"page directory row counts do not cut {rows} rows into pages of {page_rows}",
                                 key=dwhere)
    return ZarrSource(store, url, schema, cols[schema.key], {n: cols[n] for n in schema.value_names}, directory,
                      parse_value_max(doc.get("value_max"), schema))


# -- a pipeline's table without our directory --------------------------------------------------------------
_CACHE_MAGIC = b"shardscope page directory 1\n"
#: Key chunks read at once while a foreign table's directory is built.
SCAN_BATCH = 64


def _fingerprint(url: str, col: ZarrColumn) -> str:
    meta = json.dumps(col.reader.metadata.to_json(), sort_keys=True)
    return hashlib.sha256(f"{url}\n{col.column}\n{meta}".encode()).hexdigest()


def _foreign_directory(store: ByteStore, url: str, key_col: ZarrColumn, schema: TableSchema,
                       cache: str | os.PathLike[str] | None) -> PageDirectory:
    """The first and last key of each key chunk: from ``cache`` when it matches, else one pass over the keys."""
    rows = key_col.reader.metadata.shape[0]
    r = key_col.rows_per_chunk
    pages = math.ceil(rows / r) if rows else 0
    fp = _fingerprint(url, key_col)
    where = f"{url.rstrip('/')} (key column)"
    if cache is not None:
        path = Path(cache)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raw = b""
        except OSError as exc:
            raise ArgumentError(f"directory cache {path}: {exc.strerror or exc}") from exc
        if raw.startswith(_CACHE_MAGIC):
            head, _, body = raw[len(_CACHE_MAGIC):].partition(b"\n")
            if head.decode("ascii", "replace") == fp:
                return PageDirectory.from_bytes(body, unique=schema.unique, where=str(path))
    first = np.zeros(pages, dtype=np.uint64)
    last = np.zeros(pages, dtype=np.uint64)
    counts = np.zeros(pages, dtype=np.int64)
    fetcher = ChunkFetcher(store)
    for p0 in range(0, pages, SCAN_BATCH):
        batch = range(p0, min(pages, p0 + SCAN_BATCH))
        arrays = fetcher.read_rows([(key_col, p * r, min(rows, (p + 1) * r)) for p in batch])
        for p, arr in zip(batch, arrays, strict=True):
            k = stored_key_column(arr, where=where)
            first[p], last[p], counts[p] = k[0], k[-1], k.size
    backwards = np.flatnonzero(first > last)
    if backwards.size:  # found in the data, not claimed by a directory: the keys are out of order
        p = int(backwards[0])
        raise UnsortedTableError(f"page {p} goes backwards: its first key {int(first[p])} is above its last "
                                 f"{int(last[p])}", key=where)
    directory = PageDirectory.checked(first, last, counts, unique=schema.unique, where=where)
    if cache is not None:
        from napari_shardscope.core.bytestore import write_file_atomic

        write_file_atomic(Path(cache), _CACHE_MAGIC + fp.encode() + b"\n" + directory.to_bytes())
    return directory
