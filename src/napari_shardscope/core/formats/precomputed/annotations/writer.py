"""Write a complete precomputed annotation collection: ``by_id``, relationship indexes, a spatial index.

From one :class:`~.table.Annotations` batch (ids, geometry, properties, related ids) this writes every
index Neuroglancer reads:

* ``by_id``: each annotation's single encoding, keyed by its id;
* one directory per relationship: for each related segment id, the multiple encoding of the
  annotations related to it;
* ``spatial0``, ``spatial1``, …: the levels :func:`~.spatial.build_levels` makes by the spec's
  sampling rule, each cell in the multiple encoding;
* ``info``, last, its properties listed in encoding order (:meth:`~.schema.AnnotationSchema.in_encoding_order`).

Each index is sharded (``neuroglancer_uint64_sharded_v1``, written a whole shard file at a time with
the minishard layout of :mod:`..shard_writer`) or one file per key, as asked. Sharding parameters are
chosen per index from what it holds (:func:`choose_id_sharding`, :func:`choose_spatial_sharding`):
the id-keyed indexes hash ids with ``murmurhash3_x86_128`` (ids are not spatial), about a thousand
keys per minishard, at most 512 minishards per shard and shards of about ``shard_bytes``; spatial levels
use the identity hash of the cells' Morton codes, so a shard and a minishard are spatially compact
blocks of cells (the rule is :mod:`.index_sharding`'s). ``by_id`` data is stored raw (a record is tens of
bytes: gzip's header and trailer alone take 18), the lists gzip-encoded.

The write is atomic where the store allows it: on a local disk everything is written into a sibling
directory, synced, then swapped in by one rename (``renameat2(RENAME_EXCHANGE)`` where Linux has it),
so a reader sees the old collection or the new one, never a mix, and a failure leaves the old one in
place (:mod:`.directory_swap`). A remote store cannot rename a directory: there the old ``info`` is
deleted first and the new one written last, so a failed write leaves no collection rather than a
half-written one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import join_key, open_store, parse_url
from napari_shardscope.core.encoding import check_level, encode_bytes
from napari_shardscope.core.errors import ArgumentError, RefusedDestinationError
from napari_shardscope.core.formats.precomputed.annotations.directory_swap import Writable, write_local_atomic
from napari_shardscope.core.formats.precomputed.annotations.encoding import (
    encode_multiple,
    encode_single_many,
    polyline_records,
    record_words,
)
from napari_shardscope.core.formats.precomputed.annotations.index_sharding import (
    DEFAULT_SHARD_BYTES,
    KEYS_PER_MINISHARD,
    MAX_MINISHARD_BITS,
    choose_id_sharding,
    choose_spatial_sharding,
)
from napari_shardscope.core.formats.precomputed.annotations.info import (
    AnnotationInfo,
    IndexLocation,
    SpatialLevel,
)
from napari_shardscope.core.formats.precomputed.annotations.spatial import (
    LevelCells,
    build_levels,
    cell_chunk_ids,
    cell_key,
)
from napari_shardscope.core.formats.precomputed.annotations.table import I64, U64, Annotations
from napari_shardscope.core.formats.precomputed.shard_index import encode_minishard_index, encode_shard_index
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids, format_shard_name
from napari_shardscope.core.progress import Progress

#: The spatial index's default ``limit`` (CloudVolume's): annotations per cell a viewer draws per level.
DEFAULT_LIMIT = 10_000
#: gzip level of the lists and minishard indexes: zlib's default. Annotation records are mostly float
#: coordinates and ids, which level 9 packs less than 0.1 % tighter at twice the time (measured on 3·10⁵
#: synapses: 30.04 MB either way, 8.6 s against 4.4 s).
DEFAULT_ANNOTATION_GZIP_LEVEL = 6
#: Files written at once to a remote store.
WRITE_THREADS = 16

__all__ = [
    "DEFAULT_ANNOTATION_GZIP_LEVEL",
    "DEFAULT_LIMIT",
    "DEFAULT_SHARD_BYTES",
    "KEYS_PER_MINISHARD",
    "MAX_MINISHARD_BITS",
    "IndexContents",
    "Writable",
    "WriteReport",
    "choose_id_sharding",
    "choose_spatial_sharding",
    "write_annotations",
]


# -- what is written -----------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class IndexContents:
    """One index's chunks: ``keys[i]`` (a uint64 chunk id) → ``blob(i)``, unsharded file ``name(i)``."""

    keys: U64
    blob: Callable[[int], bytes]
    name: Callable[[int], str]
    total_bytes: int
    #: Every chunk the same length, back to back in one buffer: ``(buffer, length)`` (a fast path for by_id).
    packed: tuple[npt.NDArray[np.uint8], int] | None = None


@dataclass(frozen=True)
class WriteReport:
    """What :func:`write_annotations` wrote."""

    url: str
    info: AnnotationInfo
    annotations: int
    files: int
    bytes_written: int
    level_counts: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "annotations": self.annotations, "files": self.files,
                "bytes_written": self.bytes_written, "levels": list(self.level_counts), "info": self.info.to_json()}


def write_annotations(
    dest: str | os.PathLike[str],
    annotations: Annotations,
    *,
    sharded: bool = True,
    lower_bound: Sequence[float] | None = None,
    upper_bound: Sequence[float] | None = None,
    limit: int = DEFAULT_LIMIT,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    by_id_sharding: ShardingSpec | None = None,
    relationship_sharding: Mapping[str, ShardingSpec] | None = None,
    gzip_level: int = DEFAULT_ANNOTATION_GZIP_LEVEL,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> WriteReport:
    """Write ``annotations`` as a complete precomputed annotation collection at ``dest``.

    Parameters
    ----------
    dest
        A local directory or a writable URL (``gs://``, ``s3://``, ``file://``).
    annotations
        Every annotation, with its related ids when the schema has relationships; ids unique.
    sharded
        Sharded indexes (default) or one file per key (``by_id/<id>``, ``spatial0/0_0_0``), as the
        ``neuroglancer`` wheel writes them.
    lower_bound, upper_bound
        The collection's bounds (the spatial grid's origin and extent); default: the annotations'
        bounding box, widened to whole units (``floor(min)``, ``floor(max) + 1``). Given, they must
        contain every annotation.
    limit
        The spatial index's ``limit``: annotations per cell at each level.
    shard_bytes
        Target bytes of one shard file (sharding parameters are chosen from it).
    by_id_sharding, relationship_sharding
        Explicit sharding of ``by_id`` and of relationships by id, in place of the chosen ones.
    gzip_level
        Compression level of gzip-encoded chunks and minishard indexes (default 6, zlib's: see
        :data:`DEFAULT_ANNOTATION_GZIP_LEVEL`).
    overwrite
        Replace a collection already at ``dest`` (atomically on a local disk).
    progress
        Called as ``progress(done, total, what)`` after each index file group.

    Raises
    ------
    ArgumentError
        For duplicate ids, non-finite geometry, bounds that do not contain the annotations, missing
        related ids, or a bad option.
    RefusedDestinationError
        When ``dest`` holds something (an ``info``, or files) and ``overwrite`` is false.
    """
    check_level(gzip_level)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ArgumentError(f"limit must be a positive integer, got {limit!r}")
    schema = annotations.schema.in_encoding_order()  # every reader then agrees on the records (see there)
    annotations = dataclasses.replace(annotations, schema=schema)
    if schema.relationships and annotations.relationships is None:
        raise ArgumentError(f"the annotations carry no related ids, and the schema has relationships "
                            f"{list(schema.relationships)}")
    ids = annotations.ids
    if np.unique(ids).size != ids.size:
        dup = np.unique(ids, return_counts=True)
        raise ArgumentError(f"annotation ids must be unique; {int(dup[0][np.argmax(dup[1])])} appears "
                            f"{int(dup[1].max())} times")
    lower, upper = _bounds(annotations, lower_bound, upper_bound)
    location = parse_url(dest)
    local = location.is_local
    target = Path(location.kvstore["path"]) if local else None
    store = open_store(location)
    _claim(store, location.url, overwrite)

    levels = build_levels(annotations, lower, upper, limit)
    rel_keys = _relationship_keys(schema.relationships)
    contents: list[tuple[str, IndexContents, ShardingSpec | None]] = []
    by_id = _by_id_contents(annotations)
    contents.append(("by_id", by_id, _sharding_for(sharded, by_id_sharding, lambda: choose_id_sharding(
        by_id.keys.size, by_id.total_bytes, shard_bytes=shard_bytes, data_encoding="raw"))))
    rel_locations = []
    words = _record_source(annotations)
    for name in schema.relationships:
        assert annotations.relationships is not None
        rel = annotations.relationships[name]
        c = _grouped_contents(annotations, words, rel.values, rel.owners(), sort_by_key=True)
        given = (relationship_sharding or {}).get(name)
        spec = _sharding_for(sharded, given, lambda c=c: choose_id_sharding(  # type: ignore[misc]
            c.keys.size, c.total_bytes, shard_bytes=shard_bytes))
        contents.append((rel_keys[name], c, spec))
        rel_locations.append(IndexLocation(rel_keys[name], spec, name))
    spatial = []
    for i, lv in enumerate(levels):
        keys = cell_chunk_ids(SpatialLevel("", lv.grid_shape, lv.chunk_size, limit), lv.cells)
        c = _level_contents(annotations, words, lv, keys)
        spec = (choose_spatial_sharding(lv.grid_shape, int(lv.cells.shape[0]), c.total_bytes,
                                        shard_bytes=shard_bytes) if sharded else None)
        contents.append((f"spatial{i}", c, spec))
        spatial.append(SpatialLevel(f"spatial{i}", lv.grid_shape, lv.chunk_size, limit, spec))
    info = AnnotationInfo(schema, tuple(lower), tuple(upper), IndexLocation("by_id", contents[0][2]),
                          tuple(rel_locations), tuple(spatial))

    def write_all(into: Writable) -> tuple[int, int]:
        files = written = 0
        for done, (prefix, c, spec) in enumerate(contents):
            f, w = _write_index(into, prefix, c, spec, gzip_level)
            files, written = files + f, written + w
            if progress is not None:
                progress(done + 1, len(contents), prefix)
        document = _info_bytes(info)
        into.write("info", document)
        return files + 1, written + len(document)

    if target is not None:
        files, written = write_local_atomic(target, write_all, overwrite=overwrite)
    else:
        if overwrite:
            store.delete("info")
            store.clear()
        files, written = write_all(store)
    return WriteReport(location.url, info, len(annotations), files, written,
                       tuple(int(lv.members.size) for lv in levels))


def _claim(store: Any, url: str, overwrite: bool) -> None:
    """Refuse a destination that holds anything, unless ``overwrite`` and it holds an annotation collection.

    Replacing a directory deletes it: ``overwrite`` replaces a previous collection, never a directory of
    other files (a mistyped destination must not cost a user their data).
    """
    info = store.read("info")
    holds = info is not None or next(iter(store.list("")), None) is not None
    if not holds:
        return
    if not overwrite:
        raise RefusedDestinationError(f"{url} already holds files; pass overwrite=True (CLI: --overwrite) "
                                      "to replace the annotation collection there")
    try:
        doc = json.loads(info) if info is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("@type") != "neuroglancer_annotations_v1":
        raise RefusedDestinationError(f"{url} holds files that are not a precomputed annotation collection "
                                      "(no annotation info): overwrite replaces only a collection")


def _info_bytes(info: AnnotationInfo) -> bytes:
    return json.dumps(info.to_json(), indent=1).encode()


def _sharding_for(sharded: bool, given: ShardingSpec | None, choose: Callable[[], ShardingSpec]) -> ShardingSpec | None:
    if given is not None:
        return given
    return choose() if sharded else None


def _relationship_keys(names: Sequence[str]) -> dict[str, str]:
    """A directory per relationship: ``rel_<id>`` (as the wheel's writer names them) when the id is a plain name."""
    out: dict[str, str] = {}
    for i, name in enumerate(names):
        key = f"rel_{name}" if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) else f"rel_{i}"
        while key in out.values() or key == "by_id" or re.fullmatch(r"spatial\d+", key):
            key += "_"
        out[name] = key
    return out


def _bounds(batch: Annotations, lower: Sequence[float] | None,
            upper: Sequence[float] | None) -> tuple[list[float], list[float]]:
    rank = batch.schema.rank
    lo, hi = batch.bounds()
    if len(batch) and not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        bad = int(np.flatnonzero(~(np.all(np.isfinite(lo), axis=1) & np.all(np.isfinite(hi), axis=1)))[0])
        raise ArgumentError(f"annotation {int(batch.ids[bad])} has non-finite geometry")
    data_lo = lo.min(axis=0) if len(batch) else np.zeros(rank)
    data_hi = hi.max(axis=0) if len(batch) else np.zeros(rank)
    low = np.floor(data_lo) if lower is None else np.asarray(lower, dtype=np.float64)
    high = np.floor(data_hi) + 1 if upper is None else np.asarray(upper, dtype=np.float64)
    for name, v in (("lower_bound", low), ("upper_bound", high)):
        if v.shape != (rank,) or not np.all(np.isfinite(v)):
            raise ArgumentError(f"{name} must be {rank} finite numbers, got {v.tolist()}")
    if np.any(high <= low):
        raise ArgumentError(f"upper_bound {high.tolist()} must exceed lower_bound {low.tolist()} in every dimension")
    if len(batch) and (np.any(data_lo < low) or np.any(data_hi > high)):
        raise ArgumentError(f"the annotations span {data_lo.tolist()} .. {data_hi.tolist()}, outside the bounds "
                            f"{low.tolist()} .. {high.tolist()}")
    return [float(v) for v in low], [float(v) for v in high]


# -- the contents of each index ------------------------------------------------------------------------------
def _by_id_contents(batch: Annotations) -> IndexContents:
    buf, starts, ends = encode_single_many(batch)
    lengths = ends - starts
    ids = batch.ids
    packed = None
    if lengths.size and np.all(lengths == lengths[0]):
        packed = (buf, int(lengths[0]))
    return IndexContents(ids, lambda i: buf[int(starts[i]): int(ends[i])].tobytes(), lambda i: str(int(ids[i])),
                         int(buf.size), packed)


@dataclass(frozen=True, eq=False)
class _Records:
    """Each annotation's record bytes, to assemble multiple encodings from."""

    words: npt.NDArray[np.uint32] | None  # fixed-size records, (n, record_bytes / 4)
    flat: npt.NDArray[np.uint8] | None  # polylines: records back to back
    starts: I64 | None
    ids_le: npt.NDArray[Any]


def _record_source(batch: Annotations) -> _Records:
    if batch.schema.annotation_type == "polyline":
        flat, starts = polyline_records(batch)
        return _Records(None, flat, starts, batch.ids.astype("<u8"))
    return _Records(record_words(batch), None, None, batch.ids.astype("<u8"))


def _grouped_contents(batch: Annotations, records: _Records, keys: U64, members: I64, *,
                      sort_by_key: bool, order: I64 | None = None) -> IndexContents:
    """Multiple encodings of the members of each key (relationships: key = segment; levels: key = cell code)."""
    if order is None:
        order = np.lexsort((batch.ids[members], keys)) if sort_by_key else np.arange(keys.size)
    keys, members = keys[order], members[order]
    if sort_by_key and keys.size:  # an annotation listing a segment twice is listed under it once
        first = np.concatenate([[True], (keys[1:] != keys[:-1]) | (members[1:] != members[:-1])])
        keys, members = keys[first], members[first]
    if keys.size:
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(keys)) + 1, [keys.size]]).astype(np.int64)
    else:
        bounds = np.zeros(1, np.int64)
    unique_keys = keys[bounds[:-1]]
    ids_le = records.ids_le[members]
    if records.words is not None:
        words = records.words[members]

        def blob(i: int) -> bytes:
            a, b = int(bounds[i]), int(bounds[i + 1])
            return b"".join((np.uint64(b - a).astype("<u8").tobytes(), words[a:b].tobytes(), ids_le[a:b].tobytes()))
        record_total = int(words.nbytes)
    else:
        def blob(i: int) -> bytes:
            a, b = int(bounds[i]), int(bounds[i + 1])
            return encode_multiple(batch.take(members[a:b]))
        assert records.flat is not None and records.starts is not None
        lengths = np.diff(np.append(records.starts, records.flat.size))
        record_total = int(lengths[members].sum())
    total = record_total + 8 * keys.size + 8 * unique_keys.size
    return IndexContents(unique_keys, blob, lambda i: str(int(unique_keys[i])), total)


def _level_contents(batch: Annotations, records: _Records, level: LevelCells, cell_codes: U64) -> IndexContents:
    counts = np.diff(level.starts)
    keys = np.repeat(cell_codes, counts)  # each member's cell, already grouped and in order
    base = _grouped_contents(batch, records, keys, level.members, sort_by_key=False)
    cells = level.cells
    return IndexContents(base.keys, base.blob, lambda i: cell_key(cells[i]), base.total_bytes)


# -- writing ----------------------------------------------------------------------------------------------------
def _write_index(store: Writable, prefix: str, contents: IndexContents, spec: ShardingSpec | None,
                 level: int) -> tuple[int, int]:
    """Write one index directory; ``(files, bytes)`` written."""
    n = contents.keys.size
    if spec is None:
        files = [(join_key(prefix, contents.name(i)), contents.blob(i)) for i in range(n)]
        _write_many(store, files)
        return len(files), sum(len(d) for _, d in files)
    a = assign_chunk_ids(spec, contents.keys)
    order = np.lexsort((contents.keys, a.minishard, a.shard))
    shards = a.shard[order]
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(shards)) + 1, [n]]).astype(np.int64) if n else [0]
    count = written = 0
    items: list[tuple[str, bytes]] = []
    for j in range(len(bounds) - 1):
        sel = order[int(bounds[j]): int(bounds[j + 1])]
        shard = int(a.shard[sel[0]])
        data = _encode_shard(spec, contents, sel, a.minishard[sel], level)
        items.append((join_key(prefix, f"{format_shard_name(spec, shard)}.shard"), data))
        count, written = count + 1, written + len(data)
        if len(items) >= WRITE_THREADS:  # a few shards in memory at a time
            _write_many(store, items)
            items = []
    _write_many(store, items)
    return count, written


def _encode_shard(spec: ShardingSpec, contents: IndexContents, sel: I64, minishards: U64, level: int) -> bytes:
    """One shard file: per minishard (ascending) its chunks in id order, then every minishard index, after the
    shard index — the layout :func:`..shard_writer.encode_shard` writes, from arrays."""
    keys = contents.keys[sel]
    base = spec.shard_index_size
    parts: list[bytes] = []
    pos = base
    starts = np.zeros(spec.num_minishards, dtype=np.uint64)
    ends = np.zeros(spec.num_minishards, dtype=np.uint64)
    indexes: list[tuple[int, bytes]] = []
    m_bounds = np.concatenate([[0], np.flatnonzero(np.diff(minishards)) + 1, [sel.size]]).astype(np.int64)
    for j in range(m_bounds.size - 1):
        a, b = int(m_bounds[j]), int(m_bounds[j + 1])
        m = int(minishards[a])
        chunk_sel = sel[a:b]
        if contents.packed is not None and spec.data_encoding == "raw":
            buf, length = contents.packed
            rows = buf.reshape(-1, length)[chunk_sel]
            parts.append(rows.tobytes())
            c_lengths = np.full(b - a, length, dtype=np.uint64)
        else:
            datas = [encode_bytes(contents.blob(int(i)), spec.data_encoding, level) for i in chunk_sel.tolist()]
            parts.extend(datas)
            c_lengths = np.asarray([len(d) for d in datas], dtype=np.uint64)
        c_ends = np.uint64(pos) + np.cumsum(c_lengths, dtype=np.uint64)
        c_starts = c_ends - c_lengths
        pos = int(c_ends[-1])
        indexes.append((m, encode_minishard_index(spec, keys[a:b], c_starts, c_ends, level)))
    for m, index in indexes:
        starts[m], ends[m] = pos, pos + len(index)
        parts.append(index)
        pos += len(index)
    return encode_shard_index(spec, starts, ends) + b"".join(parts)


def _write_many(store: Writable, items: Sequence[tuple[str, bytes]]) -> None:
    if not items:
        return
    if store.cheap_size or len(items) == 1:
        for key, data in items:
            store.write(key, data)
        return
    with ThreadPoolExecutor(min(WRITE_THREADS, len(items))) as pool:
        list(pool.map(lambda kv: store.write(*kv), items))


