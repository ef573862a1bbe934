"""Sorted tables as a precomputed-style sharded lookup: chunk id = page number.

There is no published standard for a supervoxel → body table in Neuroglancer's sharded format
(CAVE/graphene answers from its server, DVID from its key-value store; meshes, skeletons and
annotations are keyed by segment id). This is our own layout on the
``neuroglancer_uint64_sharded_v1`` container, read and written through the same shard
reader/writer as precomputed volumes (so ``shardscope``'s shard tools and TensorStore's
``neuroglancer_uint64_sharded`` kvstore read it too)::

    table/info            {"@type": "shardscope_sorted_table", "format": 1, key, values, unique,
                           num_rows, page_rows, pages, value_max, "sharding": {...}, "directory": "page_directory"}
    table/page_directory  24 bytes per page, little-endian uint64: all first keys, all last keys, all row counts
    table/<shard>.shard   one chunk per page; chunk id = page number; identity hash, preshift 0,
                          minishard_bits = log2(shard_pages): pages 64·s … 64·s+63 in shard s

A page's chunk is its columns one after another, each ``count`` little-endian values (key
column first, then the value columns in schema order), gzip-encoded (``data_encoding``).
Opening reads ``info`` and the directory; a lookup reads shard indexes and minishard indexes (two
waves, cached) and then the pages' byte ranges (one wave).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import ByteStore, read_bounded, read_document, read_ranges
from napari_shardscope.core.encoding import Encoding
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.shard_reader import DecodeBounds, ShardedReader, decode_chunk
from napari_shardscope.core.formats.precomputed.shard_writer import encode_shard
from napari_shardscope.core.formats.precomputed.sharding import (
    SHARDING_TYPE,
    ShardingSpec,
    assign_chunk_ids,
    format_shard_name,
    parse_sharding_spec,
)
from napari_shardscope.core.json_document import load_json_object
from napari_shardscope.core.tables.destination import Destination, TableSummary
from napari_shardscope.core.tables.directory import (
    MAX_PAGES,
    Columns,
    Page,
    PageDirectory,
    TableSchema,
    parse_value_max,
)
from napari_shardscope.core.tables.errors import PageDirectoryError, TruncatedPageError
from napari_shardscope.core.tables.protocol import StoredPageSource

TABLE_TYPE = "shardscope_sorted_table"
DIRECTORY_FILE = "page_directory"
#: Pages per shard file unless the caller says otherwise (a power of two: the minishard bits).
DEFAULT_SHARD_PAGES = 64
#: Shard number bits: 2²⁴ shards of 64 pages of 16,384 rows is 1.7·10¹³ rows; fixed before the
#: row count is known because it sets the width of the shard file names.
DEFAULT_SHARD_BITS = 24


def table_spec(shard_pages: int, shard_bits: int, gzip: bool) -> ShardingSpec:
    if shard_pages < 1 or shard_pages & (shard_pages - 1):
        raise ArgumentError(f"shard_pages must be a power of two, got {shard_pages}")
    m = shard_pages.bit_length() - 1
    if not 0 <= shard_bits <= 64 - m:
        raise ArgumentError(f"shard_bits must be in [0, {64 - m}], got {shard_bits}")
    enc: Encoding = "gzip" if gzip else "raw"
    return ShardingSpec(preshift_bits=0, hash="identity", minishard_bits=m, shard_bits=shard_bits,
                        minishard_index_encoding=enc, data_encoding=enc)


def encode_page(keys: np.ndarray[Any, Any], values: Columns, schema: TableSchema) -> bytes:
    parts = [np.ascontiguousarray(keys, dtype="<u8").tobytes()]
    for name, dtype in schema.values:
        parts.append(np.ascontiguousarray(values[name], dtype=np.dtype(dtype).newbyteorder("<")).tobytes())
    return b"".join(parts)


def decode_page(data: bytes, count: int, schema: TableSchema, *, key: str, offset: int | None) -> Page:
    need = count * schema.row_bytes
    if len(data) != need:
        cls = TruncatedPageError if len(data) < need else PageDirectoryError
        raise cls(f"page holds {len(data)} bytes, its directory says {count} rows of {schema.row_bytes} bytes",
                  key=key, offset=offset)
    keys = np.frombuffer(data, dtype="<u8", count=count).astype(np.uint64)
    pos = 8 * count
    values = {}
    for name, dtype in schema.values:
        d = np.dtype(dtype)
        values[name] = np.frombuffer(data, dtype=d.newbyteorder("<"), count=count, offset=pos).astype(d)
        pos += count * d.itemsize
    return Page(keys, values)


class ShardedSink:
    """Writes pages into shard files of ``shard_pages`` consecutive pages, then ``page_directory`` and ``info``."""

    def __init__(self, url: str | os.PathLike[str], schema: TableSchema, page_rows: int, *, overwrite: bool,
                 context: Any = None, shard_pages: int = DEFAULT_SHARD_PAGES, shard_bits: int = DEFAULT_SHARD_BITS,
                 gzip: bool = True, level: int = 6) -> None:
        self.spec = table_spec(shard_pages, shard_bits, gzip)
        self.schema = schema
        self.page_rows = page_rows
        self.shard_pages = shard_pages
        self.level = level
        self.dest = Destination(url, "info", overwrite=overwrite, context=context)
        self.store = self.dest.store
        self._pending: dict[int, bytes] = {}
        self._shard: int | None = None

    def write_page(self, number: int, keys: np.ndarray[Any, Any], values: Columns) -> None:
        if number >= self.shard_pages * self.spec.num_shards:
            raise ArgumentError(f"page {number} does not fit {self.spec.num_shards} shards of {self.shard_pages} "
                                "pages: raise shard_bits or page_rows")
        shard = number // self.shard_pages
        if self._shard is not None and shard != self._shard:
            self._flush()
        self._shard = shard
        self._pending[number] = encode_page(keys, values, self.schema)

    def _flush(self) -> None:
        if self._shard is None or not self._pending:
            return
        name = f"{format_shard_name(self.spec, self._shard)}.shard"
        self.store.write(name, encode_shard(self.spec, self._pending, shard=self._shard, level=self.level))
        self._pending = {}

    def finish(self, summary: TableSummary) -> None:
        self._flush()
        self.store.write(DIRECTORY_FILE, summary.directory.to_bytes())
        info = {"@type": TABLE_TYPE, **summary.metadata(), "sharding": self.spec.to_json(),
                "directory": DIRECTORY_FILE}
        self.store.write("info", json.dumps(info, indent=1).encode())  # the commit point
        self.dest.commit()

    def abort(self) -> None:
        self.dest.abort()


class ShardedSource(StoredPageSource):
    """A table's pages from a sharded lookup (module docstring)."""

    def __init__(self, store: ByteStore, url: str, schema: TableSchema, spec: ShardingSpec,
                 directory: PageDirectory, page_rows: int, value_max: dict[str, float | int] | None = None) -> None:
        self.store = store
        self.value_max = dict(value_max or {})
        self._url = url
        self._schema = schema
        self.spec = spec
        self._directory = directory
        row_bytes = schema.row_bytes
        counts = np.diff(directory.starts)

        def exact(chunk_id: int) -> int | None:
            return int(counts[chunk_id]) * row_bytes if 0 <= chunk_id < counts.size else None

        self.reader = ShardedReader(store, "", spec, bounds=DecodeBounds(
            max_chunks=max(1, directory.pages), max_chunk_bytes=max(1, page_rows * row_bytes),
            exact_chunk_bytes=exact))

    def page_where(self, page: int) -> tuple[str, int | None]:
        shard = int(assign_chunk_ids(self.spec, np.asarray([page], dtype=np.uint64)).shard[0])
        return self.reader.shard_key(shard), None

    def fetch_pages(self, pages: Sequence[int], columns: Sequence[str], *, keys: bool = True) -> list[Page]:
        if not pages:
            return []
        a = assign_chunk_ids(self.spec, np.asarray(pages, dtype=np.uint64))
        self.reader.load_shards_with_minishards(sorted(set(a.shard.tolist())))
        starts, ends, present = self.reader.locate_arrays(a.chunk_ids, a.shard, a.minishard)
        requests = []
        for i, p in enumerate(pages):
            key = self.reader.shard_key(int(a.shard[i]))
            if not present[i]:
                raise TruncatedPageError(f"page {p} is not in its shard file (the directory lists it)", key=key)
            file = self.reader.shard_file(int(a.shard[i]))
            if file is None or file.layout != "shard":
                raise TruncatedPageError(f"page {p}: shard file missing or in the split .index/.data layout",
                                         key=key)
            requests.append((file.key, int(starts[i]), int(ends[i])))
        datas = read_ranges(self.store, requests)
        out = []
        d = self._directory
        for p, (key, s, e), data in zip(pages, requests, datas, strict=True):
            if data is None or len(data) != e - s:
                got = 0 if data is None else len(data)
                raise TruncatedPageError(f"page {p} [{s}, {e}) is cut short: {got} bytes in the file", key=key,
                                         offset=s + got)
            raw = decode_chunk(self.spec, self.reader.bounds, p, data, key=key, offset=s)
            page = decode_page(raw, d.count(p), self.schema, key=key, offset=s)
            out.append(Page(page.keys if keys else np.zeros(0, dtype=np.uint64),
                            {n: page.values[n] for n in columns}))
        return out


def open_sharded_source(store: ByteStore, url: str, info: bytes | None = None) -> ShardedSource:
    """Open the sharded table at the root of ``store`` (its ``info`` already read, or read here)."""
    where = f"{url.rstrip('/')}/info"
    raw = info if info is not None else read_document(store, "info")
    if raw is None:
        raise PageDirectoryError("info not found: not a sharded table", key=where)
    doc = load_json_object(raw, key=where)
    if doc.get("@type") != TABLE_TYPE:
        raise PageDirectoryError(f'@type must be "{TABLE_TYPE}", got {doc.get("@type")!r}', key=where)
    schema = TableSchema.from_json(doc, where=where)
    spec = parse_sharding_spec(doc.get("sharding"), key=where)
    if spec.hash != "identity" or spec.preshift_bits != 0:
        raise PageDirectoryError("a sharded table's pages use the identity hash and preshift_bits 0", key=where)
    if spec.data_encoding != spec.minishard_index_encoding or doc.get("sharding", {}).get("@type") != SHARDING_TYPE:
        raise PageDirectoryError("sharding encodings must match", key=where)
    try:
        rows, page_rows, pages = int(doc["num_rows"]), int(doc["page_rows"]), int(doc["pages"])
        name = str(doc.get("directory", DIRECTORY_FILE))
    except (KeyError, TypeError, ValueError) as exc:
        raise PageDirectoryError(f"info is damaged ({exc})", key=where) from None
    if not 0 <= pages <= MAX_PAGES or page_rows < 1 or rows < 0:
        raise PageDirectoryError(f"{pages} pages of {page_rows} rows is not a table", key=where)
    if name != DIRECTORY_FILE:
        raise PageDirectoryError(f"directory must be {DIRECTORY_FILE!r}, got {name!r}", key=where)
    data = read_bounded(store, DIRECTORY_FILE, 24 * pages, "a page directory", PageDirectoryError)
    dwhere = f"{url.rstrip('/')}/{DIRECTORY_FILE}"
    if data is None:
        raise PageDirectoryError("page directory missing", key=dwhere)
    if len(data) != 24 * pages:
        raise TruncatedPageError(f"page directory holds {len(data)} bytes, {pages} pages need {24 * pages}",
                                 key=dwhere, offset=len(data))
    directory = PageDirectory.from_bytes(data, unique=schema.unique, where=dwhere)
    if directory.num_rows != rows or (pages > 1 and bool((np.diff(directory.starts)[:-1] != page_rows).any())):
        raise PageDirectoryError(f"page directory row counts do not cut {rows} rows into pages of {page_rows}",
                                 key=dwhere)
    if pages and int(np.diff(directory.starts)[-1]) > page_rows:
        raise PageDirectoryError(f"the last page holds more than {page_rows} rows", key=dwhere)
    if pages > spec.num_minishards * spec.num_shards and spec.minishard_bits + spec.shard_bits < 64:
        raise PageDirectoryError(f"{pages} pages do not fit the sharding's {spec.num_shards} shards", key=where)
    return ShardedSource(store, url, schema, spec, directory, page_rows, parse_value_max(doc.get("value_max"), schema))
