"""Read a precomputed annotation collection: by id, by related segment, by spatial cell or box, or all of it.

Every index is a directory of the dataset, read through the one byte store (local, http(s), gs, s3):

* unsharded, one file per key — ``<id>`` for the id-keyed indexes (``by_id`` and each relationship),
  ``<i>_<j>_<k>`` for a spatial cell — also found as ``NAME.gz``, CloudVolume's local layout;
* sharded (``neuroglancer_uint64_sharded_v1``), through the same :class:`ShardedReader` the shard
  browser and ``locate`` use, keyed by the id itself or by the cell's compressed Morton code.

Reads are lazy and bounded: opening reads only ``info``; a lookup reads one file, or a shard index
entry, a minishard index and the chunk (indexes cached); a whole-key read is refused before it
allocates more than :data:`MAX_CHUNK_BYTES`; a box query visits at most ``max_cells`` cells per level.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_bounded, read_ranges
from napari_shardscope.core.encoding import MAX_DECODED_BYTES, gunzip
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, IndexDecodeError, StoreError
from napari_shardscope.core.formats.precomputed.annotations.encoding import (
    decode_multiple,
    decode_single,
    decode_single_many,
)
from napari_shardscope.core.formats.precomputed.annotations.info import AnnotationInfo, SpatialLevel
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema
from napari_shardscope.core.formats.precomputed.annotations.spatial import (
    cell_chunk_id,
    cell_chunk_ids,
    cell_key,
    cell_ranges,
    cells_in_range,
    check_cell,
    count_cells,
)
from napari_shardscope.core.formats.precomputed.annotations.table import (
    U64,
    Annotations,
    concatenate,
    empty_annotations,
)
from napari_shardscope.core.formats.precomputed.shard_reader import (
    ChunkLocation,
    DecodeBounds,
    ShardedReader,
    decode_chunk,
)

#: Most bytes one stored chunk (a cell, a segment's annotations, one annotation) may hold or decode to.
MAX_CHUNK_BYTES = MAX_DECODED_BYTES
#: Most cells one level of a box query visits (a larger box is refused with the numbers, not read).
MAX_QUERY_CELLS = 1 << 16
#: Whole-key reads in flight at once on a remote store.
READ_THREADS = 16
#: Most shard files probed one by one where the store cannot list them.
MAX_PROBED_SHARDS = 4096
#: A minishard's chunks are read as one span up to this size (else one read per chunk).
MAX_SPAN_BYTES = 256 << 20
GZ = ".gz"


@dataclass(frozen=True)
class StoredChunk:
    """Bytes of one stored key and where they are: the file, and their offset in it."""

    data: bytes
    key: str
    offset: int = 0


def index_bounds(max_keys: int | None) -> DecodeBounds:
    """What an annotation index's metadata implies about its decoded sizes (a spatial level: its cell count)."""
    return DecodeBounds(max_chunks=max_keys, max_chunk_bytes=MAX_CHUNK_BYTES)


class KeyedDirectory:
    """One index directory: unsharded files, or a sharded directory read with a :class:`ShardedReader`.

    ``max_keys`` bounds how many keys the directory can hold (a spatial level's cell count), so a
    hostile minishard index cannot make the reader inflate more entries than that.
    """

    def __init__(self, store: ByteStore, prefix: str, sharding: Any, *, max_keys: int | None = None,
                 reader: ShardedReader | None = None) -> None:
        self.store = store
        self.prefix = prefix
        self.sharding = sharding
        self.reader: ShardedReader | None = reader
        if sharding is not None and reader is None:
            self.reader = ShardedReader(store, prefix, sharding, bounds=index_bounds(max_keys))

    def display(self, name: str) -> str:
        return join_key(self.prefix, name)

    # -- unsharded ---------------------------------------------------------------------------------------
    def file_key(self, name: str) -> str | None:
        """The stored key of file ``name`` (``NAME`` or CloudVolume's ``NAME.gz``), ``None`` when absent."""
        key = join_key(self.prefix, name)
        if self.store.cheap_size:
            if self.store.size(key) is not None:
                return key
            return key + GZ if self.store.size(key + GZ) is not None else None
        if self.store.read_range(key, 0, 0) is not None:
            return key
        return key + GZ if self.store.read_range(key + GZ, 0, 0) is not None else None

    def read_file(self, name: str) -> StoredChunk | None:
        key = join_key(self.prefix, name)
        data = read_bounded(self.store, key, MAX_CHUNK_BYTES, "an annotation index file", ChunkDecodeError)
        if data is None:
            gz = read_bounded(self.store, key + GZ, MAX_CHUNK_BYTES, "an annotation index file", ChunkDecodeError)
            if gz is None:
                return None
            return StoredChunk(gunzip(gz, key=key + GZ, offset=0, max_size=MAX_CHUNK_BYTES), key + GZ)
        return StoredChunk(data, key)

    def read_files(self, names: Sequence[str]) -> list[StoredChunk | None]:
        if self.store.cheap_size or len(names) < 2:
            return [self.read_file(n) for n in names]
        with ThreadPoolExecutor(min(READ_THREADS, len(names))) as pool:
            return list(pool.map(self.read_file, names))

    def names(self) -> Iterator[str]:
        """File names directly in the directory, ``.gz`` removed (unsharded only)."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        for key in self.store.list(prefix):
            name = key[len(prefix):]
            if "/" not in name:
                yield name.removesuffix(GZ)

    # -- sharded ------------------------------------------------------------------------------------------
    def read_chunks(self, chunk_ids: U64) -> list[StoredChunk | None]:
        """Each chunk's bytes (``data_encoding`` undone): one pass over the indexes, reads in flight together."""
        reader = self.reader
        assert reader is not None
        if chunk_ids.size == 0:
            return []
        locations = reader.locate_many(chunk_ids)
        wanted = [(i, loc) for i, loc in enumerate(locations) if loc.present and loc.byte_range is not None]
        files = [reader.shard_file(loc.shard) for _, loc in wanted]
        requests = []
        for (_, loc), file in zip(wanted, files, strict=True):
            if file is None:
                raise IndexDecodeError(f"shard {loc.shard} has an index but no file", key=loc.shard_file)
            assert loc.byte_range is not None
            requests.append((file, *loc.byte_range))
        simple = [r for r in requests if r[0].layout == "shard"]
        answers: list[bytes | None]
        if len(simple) == len(requests):
            answers = read_ranges(self.store, [(f.key, a, b) for f, a, b in requests])
        else:
            answers = [reader.read_file_range(f, a, b) for f, a, b in requests]
        out: list[StoredChunk | None] = [None] * len(locations)
        for (i, loc), (file, start, end), data in zip(wanted, requests, answers, strict=True):
            raw = data or b""
            if len(raw) < end - start:
                raise IndexDecodeError(f"chunk {loc.chunk_id} data [{start}, {end}) truncated",
                                       key=file.display_key, offset=start + len(raw))
            decoded = decode_chunk(reader.spec, reader.bounds, loc.chunk_id, raw, key=file.display_key, offset=start)
            out[i] = StoredChunk(decoded, file.display_key, start)
        return out

    def locate(self, chunk_id: int) -> ChunkLocation:
        assert self.reader is not None
        return self.reader.locate(chunk_id)


class AnnotationSource:
    """A precomputed annotation collection opened for reading (``info`` already parsed).

    Parameters
    ----------
    store
        The byte store rooted at the collection (its ``info``'s directory).
    info
        The parsed ``info``.
    readers
        Shard readers to use, by index directory (the inspector's, so that ``locate`` and reads share
        one set of index caches); the rest are made here.
    """

    def __init__(self, store: ByteStore, info: AnnotationInfo,
                 readers: Mapping[str, ShardedReader] | None = None) -> None:
        self.store = store
        self.info = info
        given = dict(readers or {})
        self.by_id = KeyedDirectory(store, info.by_id.key, info.by_id.sharding, reader=given.get(info.by_id.key))
        self.relationship_dirs = {r.id or "": KeyedDirectory(store, r.key, r.sharding, reader=given.get(r.key))
                                  for r in info.relationships}
        self.level_dirs = [KeyedDirectory(store, s.key, s.sharding, max_keys=s.num_cells, reader=given.get(s.key))
                           for s in info.spatial]

    def __repr__(self) -> str:
        s = self.info.schema
        return f"AnnotationSource({self.store.url!r}, {s.annotation_type}, rank {s.rank})"

    @property
    def schema(self) -> AnnotationSchema:
        return self.info.schema

    # -- by id ---------------------------------------------------------------------------------------------
    def get(self, annotation_id: int) -> Annotations | None:
        """One annotation with its related ids (from ``by_id``), ``None`` when the collection has no such id."""
        found = self.get_many([annotation_id])
        return found if len(found) else None

    def get_many(self, annotation_ids: Sequence[int] | npt.ArrayLike) -> Annotations:
        """The annotations of these ids that exist (in the order asked), each with its related ids."""
        ids = _ids(annotation_ids)
        if self.by_id.reader is not None:
            chunks = self.by_id.read_chunks(ids)
        else:
            chunks = self.by_id.read_files([str(int(i)) for i in ids.tolist()])
        parts = [decode_single(c.data, self.schema, int(i), key=c.key, offset=c.offset)
                 for i, c in zip(ids.tolist(), chunks, strict=True) if c is not None]
        return concatenate(parts, self.schema)

    def ids(self) -> U64:
        """Every annotation id ``by_id`` stores, sorted (lists the directory, or reads the minishard indexes).

        Raises :class:`StoreError` for an unsharded ``by_id`` on a store that cannot list (plain HTTP):
        ids are then found through the spatial index (:meth:`query_box`) or asked for (:meth:`get_many`).
        """
        reader = self.by_id.reader
        if reader is not None:
            parts = [np.asarray([loc.chunk_id for loc in reader.iter_chunks(shard)], dtype=np.uint64)
                     for shard in shards_of(reader)]
            return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        found = sorted({int(n) for n in self.by_id.names() if _is_uint64(n)})
        return np.asarray(found, dtype=np.uint64)

    def iter_batches(self, batch_size: int = 1 << 16) -> Iterator[Annotations]:
        """Every annotation of ``by_id``, with related ids, a batch at a time.

        Sharded: shard by shard, each minishard's chunks read as one span and decoded together (one
        vectorised pass when their encodings have one length). Unsharded: ``batch_size`` files at a time.
        """
        reader = self.by_id.reader
        if reader is None:
            names = [n for n in sorted(set(self.by_id.names())) if _is_uint64(n)]
            for first in range(0, len(names), batch_size):
                part = names[first: first + batch_size]
                chunks = self.by_id.read_files(part)
                decoded = [decode_single(c.data, self.schema, int(n), key=c.key, offset=c.offset)
                           for n, c in zip(part, chunks, strict=True) if c is not None]
                if decoded:
                    yield concatenate(decoded, self.schema)
            return
        for shard in shards_of(reader):
            index = reader.shard_index(shard)
            if index is None:
                continue
            for m in index.nonempty_minishards().tolist():
                batch = self._decode_minishard(reader, shard, int(m))
                if len(batch):
                    yield batch

    def _decode_minishard(self, reader: ShardedReader, shard: int, minishard: int) -> Annotations:
        mi = reader.minishard_index(shard, minishard)
        file = reader.shard_file(shard)
        if len(mi) == 0 or file is None:
            return empty_annotations(self.schema)
        starts, ends = mi.starts.astype(np.int64), mi.ends.astype(np.int64)
        lo, hi = int(starts.min()), int(ends.max())
        if reader.spec.data_encoding == "raw" and hi - lo <= MAX_SPAN_BYTES:
            span = reader.read_file_range(file, lo, hi)
            if len(span) < hi - lo:
                raise IndexDecodeError(f"minishard {minishard} data [{lo}, {hi}) truncated", key=file.display_key,
                                       offset=lo + len(span))
            key = file.display_key
            return decode_single_many(span, starts - lo, ends - lo, mi.chunk_ids, self.schema,
                                      where=lambda i: (key, int(starts[i])))
        chunks = self.by_id.read_chunks(mi.chunk_ids)
        parts = [decode_single(c.data, self.schema, int(i), key=c.key, offset=c.offset)
                 for i, c in zip(mi.chunk_ids.tolist(), chunks, strict=True) if c is not None]
        return concatenate(parts, self.schema)

    def all(self) -> Annotations:
        """Every annotation of ``by_id`` in one batch (see :meth:`iter_batches`)."""
        return concatenate(list(self.iter_batches()), self.schema)

    # -- by related segment -------------------------------------------------------------------------------
    def related(self, relationship: str, segment_id: int) -> Annotations:
        """The annotations related to ``segment_id`` through ``relationship`` (empty when none).

        The relationship index stores geometry and properties, not the related-id lists
        (``relationships`` is ``None``); :meth:`get_many` of the ids has them.
        """
        directory = self._relationship_dir(relationship)
        seg = _ids([segment_id])
        chunk = (directory.read_chunks(seg)[0] if directory.reader is not None
                 else directory.read_file(str(int(seg[0]))))
        if chunk is None:
            return empty_annotations(self.schema).without_relationships()
        return decode_multiple(chunk.data, self.schema, key=chunk.key, offset=chunk.offset)

    def _relationship_dir(self, relationship: str) -> KeyedDirectory:
        self.schema.relationship_index(relationship)  # ArgumentError naming the relationships
        return self.relationship_dirs[relationship]

    # -- spatial -------------------------------------------------------------------------------------------
    def level(self, level: int) -> SpatialLevel:
        if not 0 <= level < len(self.info.spatial):
            raise ArgumentError(f"spatial level {level} does not exist; this collection has "
                                f"{len(self.info.spatial)} (0 is the coarsest)")
        return self.info.spatial[level]

    def cell(self, level: int, cell: Sequence[int]) -> Annotations:
        """The annotations a spatial cell lists (empty when its file or chunk is absent)."""
        spec = self.level(level)
        c = check_cell(spec, cell)
        directory = self.level_dirs[level]
        if directory.reader is not None:
            chunk = directory.read_chunks(np.asarray([cell_chunk_id(spec, c)], dtype=np.uint64))[0]
        else:
            chunk = directory.read_file(cell_key(c))
        if chunk is None:
            return empty_annotations(self.schema).without_relationships()
        return decode_multiple(chunk.data, self.schema, key=chunk.key, offset=chunk.offset)

    def cells_in_box(self, level: int, lower: Sequence[float], upper: Sequence[float]) -> npt.NDArray[np.int64]:
        """The cells of a level that the box ``[lower, upper]`` touches, ``(k, rank)``."""
        spec = self.level(level)
        first, last = cell_ranges(spec, self.info.lower_bound, _point(lower, self.schema.rank, "lower"),
                                  _point(upper, self.schema.rank, "upper"))
        return cells_in_range(first, last)

    def query_box(self, lower: Sequence[float], upper: Sequence[float], *, max_level: int | None = None,
                  max_cells: int = MAX_QUERY_CELLS) -> Annotations:
        """The annotations whose bounding box meets ``[lower, upper]``, from levels 0 … ``max_level`` (all).

        Coarse levels hold a uniform subsample and each annotation is stored at one level only, so levels
        ``0..k`` give what a viewer shows at that density; all levels give every annotation. An
        annotation listed in several cells is returned once.

        Raises
        ------
        ArgumentError
            When one level would need more than ``max_cells`` cells read (with the count), for a box of
            the wrong rank, or a level that does not exist.
        """
        rank = self.schema.rank
        lo, hi = _point(lower, rank, "lower"), _point(upper, rank, "upper")
        if max_level is not None:
            self.level(max_level)  # ArgumentError for a level that does not exist
        levels = range(len(self.info.spatial) if max_level is None else max_level + 1)
        found: list[Annotations] = []
        for level in levels:
            spec = self.info.spatial[level]
            first, last = cell_ranges(spec, self.info.lower_bound, lo, hi)
            n = count_cells(first, last)
            if n > max_cells:
                raise ArgumentError(f"the box touches {n} cells of spatial level {level} ({spec.key}), more than "
                                    f"max_cells={max_cells}: query a smaller box, or levels up to a coarser one")
            cells = cells_in_range(first, last)
            found.extend(self._read_cells(level, cells))
        batch = concatenate(found, self.schema) if found else empty_annotations(self.schema).without_relationships()
        if len(batch) == 0:
            return batch
        b_lo, b_hi = batch.bounds()
        inside = np.all((b_hi >= lo) & (b_lo <= hi), axis=1)
        batch = batch.take(inside)
        _, first_seen = np.unique(batch.ids, return_index=True)
        return batch.take(np.sort(first_seen))

    def _read_cells(self, level: int, cells: npt.NDArray[np.int64]) -> list[Annotations]:
        spec = self.info.spatial[level]
        directory = self.level_dirs[level]
        if directory.reader is not None:
            chunks = directory.read_chunks(cell_chunk_ids(spec, cells))
        else:
            chunks = directory.read_files([cell_key(c) for c in cells.tolist()])
        return [decode_multiple(c.data, self.schema, key=c.key, offset=c.offset) for c in chunks if c is not None]

    # -- where things are ----------------------------------------------------------------------------------
    def locate_annotation(self, annotation_id: int) -> dict[str, Any]:
        """Where ``by_id`` stores an annotation: its file, or shard, minishard and byte range."""
        return _locate(self.by_id, "by_id", int(_ids([annotation_id])[0]), str(int(annotation_id)),
                       {"annotation_id": int(annotation_id)})

    def locate_related(self, relationship: str, segment_id: int) -> dict[str, Any]:
        """Where a relationship index stores the annotations related to ``segment_id``."""
        directory = self._relationship_dir(relationship)
        seg = int(_ids([segment_id])[0])
        return _locate(directory, f"relationships/{relationship}", seg, str(seg),
                       {"relationship": relationship, "segment": seg})

    def locate_cell(self, level: int, cell: Sequence[int]) -> dict[str, Any]:
        """Where a spatial level stores a cell: its file ``i_j_k``, or the shard location of its Morton code."""
        spec = self.level(level)
        c = check_cell(spec, cell)
        return _locate(self.level_dirs[level], f"spatial/{spec.key}", cell_chunk_id(spec, c), cell_key(c),
                       {"level": level, "cell": list(c)})

    def locate_point(self, point: Sequence[float]) -> list[dict[str, Any]]:
        """At every spatial level, where the cell holding ``point`` is stored."""
        p = _point(point, self.schema.rank, "point")
        out = []
        for level, spec in enumerate(self.info.spatial):
            first, last = cell_ranges(spec, self.info.lower_bound, p, p)
            if np.any(last < first):
                raise ArgumentError(f"point {list(point)} lies outside the collection's bounds "
                                    f"{list(self.info.lower_bound)} .. {list(self.info.upper_bound)}")
            out.append({**self.locate_cell(level, [int(c) for c in first]), "point": [float(v) for v in p]})
        return out


def shards_of(reader: ShardedReader) -> list[int]:
    """The shards of a sharded index that have a file: listed, or probed on a store that cannot list
    (plain HTTP) when there are at most :data:`MAX_PROBED_SHARDS`."""
    try:
        return reader.existing_shards()
    except StoreError:
        if reader.spec.num_shards > MAX_PROBED_SHARDS:
            raise
        return [f.shard for f in reader.load_shard_files(range(reader.spec.num_shards)) if f is not None]


def _locate(directory: KeyedDirectory, source: str, chunk_id: int, name: str, what: dict[str, Any]) -> dict[str, Any]:
    if directory.reader is None:
        key = directory.file_key(name)
        size = directory.store.size(key) if key is not None and directory.store.cheap_size else None
        return {"source": source, **what, "key": key or directory.display(name), "present": key is not None,
                "size": size, "sharded": False}
    return {"source": source, **what, **directory.locate(chunk_id).to_json(), "sharded": True}


def _ids(values: Sequence[int] | npt.ArrayLike) -> U64:
    arr = np.asarray(values)
    if arr.dtype == np.uint64:
        return arr.reshape(-1)
    if arr.dtype.kind not in "iuO" or (arr.dtype.kind == "O" and not all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in arr.reshape(-1).tolist())):
        raise ArgumentError(f"ids must be integers, got {values!r}")
    items = [int(v) for v in arr.reshape(-1).tolist()]
    bad = next((v for v in items if not 0 <= v < 1 << 64), None)
    if bad is not None:
        raise ArgumentError(f"ids must be in [0, 2**64), got {bad}")
    return np.asarray(items, dtype=np.uint64)


def _is_uint64(name: str) -> bool:
    return name.isdigit() and (name == "0" or not name.startswith("0")) and int(name) < 1 << 64


def _point(values: Sequence[float], rank: int, name: str) -> npt.NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size != rank or not np.all(np.isfinite(arr)):
        raise ArgumentError(f"{name} must be {rank} finite numbers, got {list(values)}")
    return arr

