"""Check a precomputed annotation collection: every stored record decodes, and the indexes agree.

Per index directory (``by_id``, each relationship, each spatial level):

* sharded: each shard file gets the checks every sharded directory gets (:mod:`..validate`: index
  ranges, sorted ids in the right shard and minishard, unclaimed bytes), and each chunk is decoded as
  this index's encoding; a spatial chunk's id must be the Morton code of a cell of the level's grid;
* unsharded: each file's name must be a key of the index (a decimal uint64, or a cell ``i_j_k`` of the
  grid; CloudVolume's ``NAME.gz`` is read), and its bytes must decode.

Then, when the whole collection is checked, the indexes are cross-checked, as Neuroglancer relies on
them agreeing: every annotation a spatial cell lists intersects that cell; each is stored at one
spatial level only; ``by_id`` and the spatial index hold the same annotations; the geometry and
properties an annotation has in a spatial cell or a relationship list are the ones ``by_id`` stores
(compared as a 64-bit digest of the encoded record); and each relationship index lists exactly the
(segment, annotation) pairs the ``by_id`` records name. Each kind of disagreement is reported for the
first :data:`MAX_REPORTED` cases, then counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import join_key, read_bounded
from napari_shardscope.core.encoding import gunzip
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, FormatError, StoreError
from napari_shardscope.core.formats.precomputed.annotations.encoding import (
    decode_multiple,
    decode_single,
    polyline_records,
    record_words,
)
from napari_shardscope.core.formats.precomputed.annotations.info import SpatialLevel
from napari_shardscope.core.formats.precomputed.annotations.reader import (
    MAX_CHUNK_BYTES,
    AnnotationSource,
    KeyedDirectory,
)
from napari_shardscope.core.formats.precomputed.annotations.spatial import (
    cell_bounds,
    cell_of_chunk_id,
    parse_cell_key,
    splitmix64,
)
from napari_shardscope.core.formats.precomputed.annotations.table import U64, Annotations
from napari_shardscope.core.formats.precomputed.sharding import parse_shard_name
from napari_shardscope.core.formats.precomputed.validate import validate_shard_file
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.progress import Progress

#: Cases of one kind of disagreement reported one by one; the rest are counted in one more problem.
MAX_REPORTED = 16
#: Most shard files probed on a store that cannot list (beyond that, validate says so instead).
MAX_PROBED_SHARDS = 4096

_CELLISH = re.compile(r"^\d+(_\d+)*$")


def record_digests(batch: Annotations) -> U64:
    """A 64-bit digest of each annotation's encoded record (geometry and properties, bit for bit)."""
    n = len(batch)
    h = np.zeros(n, dtype=np.uint64)
    if batch.schema.annotation_type != "polyline":
        words = record_words(batch)
        for col in range(words.shape[1]):
            h = splitmix64(h ^ (words[:, col].astype(np.uint64) + np.uint64(col)))
        return h
    flat, starts = polyline_records(batch)
    lengths = np.diff(np.append(starts, flat.size))
    padded = np.zeros(int(flat.size + 3) // 4 * 4, dtype=np.uint8)
    padded[: flat.size] = flat
    words = padded.view("<u4").astype(np.uint64)
    pos = np.arange(words.size, dtype=np.uint64)
    mixed = splitmix64(words ^ (pos << np.uint64(32)))
    if n == 0:
        return h
    sums = np.add.reduceat(mixed, starts // 4) if words.size else np.zeros(n, np.uint64)
    with np.errstate(over="ignore"):
        return splitmix64(sums.astype(np.uint64) ^ lengths.astype(np.uint64))


@dataclass
class _Seen:
    """What one index holds, as parallel arrays (one entry per annotation occurrence) and where each came from."""

    ids: list[U64] = field(default_factory=list)
    digests: list[U64] = field(default_factory=list)
    keys: list[npt.NDArray[np.int64]] = field(default_factory=list)  # index into ``places``
    offsets: list[npt.NDArray[np.int64]] = field(default_factory=list)  # each record's byte offset, -1: unknown
    segments: list[U64] = field(default_factory=list)  # relationships: the segment each entry is listed under
    places: list[tuple[str, str | None]] = field(default_factory=list)  # (file, "chunk N" inside a shard file)

    def add(self, batch: Annotations, key: str, offset: int, chunk: str | None, *, listed: bool,
            segment: int | None = None) -> None:
        """Record a decoded chunk: stored in file ``key`` at ``offset`` (-1 inside a shard file: chunk ``chunk``).

        ``listed``: the chunk is a multiple encoding, whose records follow an 8-byte count.
        """
        n = len(batch)
        self.places.append((key, chunk))
        self.ids.append(batch.ids)
        self.digests.append(record_digests(batch))
        self.keys.append(np.full(n, len(self.places) - 1, dtype=np.int64))
        record = batch.schema.layout.record_bytes
        if offset < 0 or (listed and record is None):
            self.offsets.append(np.full(n, -1, dtype=np.int64))
        elif listed:
            assert record is not None
            self.offsets.append(offset + 8 + record * np.arange(n, dtype=np.int64))
        else:
            self.offsets.append(np.full(n, offset, dtype=np.int64))
        if segment is not None:
            self.segments.append(np.full(n, segment, dtype=np.uint64))

    def where(self, j: int, keys: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]) -> tuple[str, str | None,
                                                                                                  int | None]:
        key, chunk = self.places[int(keys[j])]
        return key, chunk, None if offsets[j] < 0 else int(offsets[j])

    def arrays(self) -> tuple[U64, U64, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        if not self.ids:
            return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return (np.concatenate(self.ids), np.concatenate(self.digests), np.concatenate(self.keys),
                np.concatenate(self.offsets))


@dataclass
class _Checker:
    source: AnnotationSource
    progress: Progress | None
    by_id: _Seen = field(default_factory=_Seen)
    by_id_related: dict[str, list[tuple[U64, U64]]] = field(default_factory=dict)  # rel -> [(ids, segments)]
    related: dict[str, _Seen] = field(default_factory=dict)
    levels: dict[int, _Seen] = field(default_factory=dict)


def validate_annotations(source: AnnotationSource, *, index: str | None = None,
                         progress: Progress | None = None) -> Iterator[Problem]:
    """Yield every problem of the collection (nothing when it is sound).

    ``index`` names one index to check alone — ``"by_id"``, ``"relationships/<id>"`` or
    ``"spatial/<key>"`` — which decodes its records but skips the cross-checks (they need them all).
    """
    checker = _Checker(source, progress)
    info = source.info
    jobs: list[tuple[str, Callable[[], Iterator[Problem]]]] = [("by_id", lambda: _check_by_id(checker))]
    for rel in info.relationships:
        name = rel.id or ""
        jobs.append((f"relationships/{name}", lambda name=name: _check_related(checker, name)))  # type: ignore[misc]
    for i, level in enumerate(info.spatial):
        jobs.append((f"spatial/{level.key}", lambda i=i: _check_level(checker, i)))  # type: ignore[misc]
    names = [name for name, _ in jobs]
    if index is not None and index not in names:
        raise ArgumentError(f"no index {index!r}; this collection has {names}")
    below = [d for d in range(info.rank) if info.upper_bound[d] < info.lower_bound[d]]
    if below and index is None:
        d = below[0]
        yield Problem("info", f"upper_bound[{d}] {info.upper_bound[d]:g} is below lower_bound[{d}] "
                      f"{info.lower_bound[d]:g}: the bounds contain no annotation")
    for name, job in jobs:
        if index is None or name == index:
            yield from job()
    if index is None:
        yield from _cross_check(checker)


# -- walking an index directory ---------------------------------------------------------------------------------
def _files(checker: _Checker, directory: KeyedDirectory, what: str,
           decode: Callable[[str, bytes, str, int], str | None]) -> Iterator[Problem]:
    """Run ``decode(name_or_id, bytes, key, offset)`` over every stored key of a directory; its problems.

    ``decode`` returns a problem's message (or ``None``) and raises :class:`FormatError` for bytes that
    do not decode; ``offset`` is ``-1`` inside a shard file (the shard check names the chunk's offset).
    """
    reader = directory.reader
    if reader is None:
        try:
            names = sorted(set(directory.names()))
        except StoreError as exc:
            yield Problem(directory.prefix, f"cannot list the {what} directory: {exc}")
            return
        for i, name in enumerate(names):
            if checker.progress is not None and i % 256 == 0:
                checker.progress(i, len(names), f"{what} files")
            key = directory.file_key(name)
            if key is None:
                continue
            try:
                data = read_bounded(directory.store, key, MAX_CHUNK_BYTES, "an annotation index file",
                                    ChunkDecodeError)
                if data is None:
                    continue
                if key.endswith(".gz"):
                    data = gunzip(data, key=key, offset=0, max_size=MAX_CHUNK_BYTES)
            except FormatError as exc:
                yield Problem(exc.key or key, exc.message, exc.offset)
                continue
            try:
                message = decode(name, data, key, 0)
            except FormatError as exc:
                yield Problem(exc.key or key, exc.message, exc.offset)
                continue
            if message is not None:
                yield Problem(key, message)
        return
    spec = reader.spec
    try:
        shards = reader.existing_shards()
    except StoreError:
        if spec.num_shards > MAX_PROBED_SHARDS:
            yield Problem(directory.prefix, f"the store cannot list and {what} has {spec.num_shards} possible "
                          "shards: not validated")
            return
        shards = [f.shard for f in reader.load_shard_files(range(spec.num_shards)) if f is not None]
    prefix = f"{directory.prefix}/"
    try:
        for key in directory.store.list(prefix):
            name = key[len(prefix):]
            if "/" not in name and name.endswith((".shard", ".index", ".data")) and \
                    parse_shard_name(spec, name) is None:
                yield Problem(key, f"file name is not a shard of this spec (shard_bits={spec.shard_bits})")
    except StoreError:
        pass
    for i, shard in enumerate(shards):
        if checker.progress is not None:
            checker.progress(i, len(shards), f"{what} shard {shard}")
        file = reader.shard_file(shard)
        if file is None:
            continue
        try:
            data = reader.read_whole_file(file)
        except FormatError as exc:
            yield Problem(exc.key or file.display_key, exc.message, exc.offset)
            continue
        display = file.display_key

        def check(chunk_id: int, decoded: bytes, display: str = display) -> str | None:
            try:
                return decode(str(chunk_id), decoded, display, -1)
            except FormatError as exc:  # reported at the chunk's offset in the shard file
                return exc.message

        yield from validate_shard_file(spec, data, key=display, shard=shard, check_chunk=check, bounds=reader.bounds)


def _check_by_id(checker: _Checker) -> Iterator[Problem]:
    source = checker.source
    schema = source.schema

    def decode(name: str, data: bytes, key: str, offset: int) -> str | None:
        if not _is_id(name):
            return f"file name {name!r} is not an annotation id (a decimal uint64)"
        batch = decode_single(data, schema, int(name), key=key, offset=max(offset, 0))
        checker.by_id.add(batch, key, offset, None if offset >= 0 else f"chunk {name}", listed=False)
        assert batch.relationships is not None
        for rel, related in batch.relationships.items():
            checker.by_id_related.setdefault(rel, []).append(
                (np.repeat(batch.ids, related.counts), related.values))
        return None

    yield from _files(checker, source.by_id, "by_id", decode)


def _check_related(checker: _Checker, name: str) -> Iterator[Problem]:
    source = checker.source
    seen = checker.related.setdefault(name, _Seen())

    def decode(key_name: str, data: bytes, key: str, offset: int) -> str | None:
        if not _is_id(key_name):
            return f"file name {key_name!r} is not a segment id (a decimal uint64)"
        batch = decode_multiple(data, source.schema, key=key, offset=max(offset, 0))
        seen.add(batch, key, offset, None if offset >= 0 else f"chunk {key_name}", listed=True, segment=int(key_name))
        return None

    yield from _files(checker, source.relationship_dirs[name], f"relationships/{name}", decode)


def _check_level(checker: _Checker, level: int) -> Iterator[Problem]:
    source = checker.source
    spec = source.info.spatial[level]
    seen = checker.levels.setdefault(level, _Seen())
    sharded = source.level_dirs[level].reader is not None

    def decode(name: str, data: bytes, key: str, offset: int) -> str | None:
        if sharded:
            try:
                cell = cell_of_chunk_id(spec, int(name))
            except ArgumentError:
                return f"id is not the Morton code of a cell of grid {list(spec.grid_shape)}"
        else:
            parsed = parse_cell_key(name, spec)
            if parsed is None:
                if _CELLISH.match(name):
                    return f"file name {name!r} is not a cell of grid {list(spec.grid_shape)}"
                return None  # not an index file (a stray file is no business of the index)
            cell = parsed
        batch = decode_multiple(data, source.schema, key=key, offset=max(offset, 0))
        outside = _outside_cell(batch, spec, source.info.lower_bound, cell)
        seen.add(batch, key, offset, None if offset >= 0 else f"chunk {name}", listed=True)
        if outside is not None:
            return (f"annotation {outside} lies outside cell {list(cell)} "
                    f"({_cell_text(spec, source.info.lower_bound, cell)})")
        return None

    yield from _files(checker, source.level_dirs[level], f"spatial/{spec.key}", decode)


def _outside_cell(batch: Annotations, spec: SpatialLevel, lower: tuple[float, ...],
                  cell: tuple[int, ...]) -> int | None:
    """The first annotation of ``batch`` whose box misses ``cell`` (closed, float32-rounding tolerant)."""
    if len(batch) == 0:
        return None
    c_lo, c_hi = cell_bounds(spec, lower, cell)
    tol = 1e-6 * np.maximum(np.abs(c_hi), np.asarray(spec.chunk_size)) + 1e-9
    lo, hi = batch.bounds()
    miss = np.any((hi < c_lo - tol) | (lo > c_hi + tol), axis=1)
    return int(batch.ids[int(np.argmax(miss))]) if np.any(miss) else None


def _cell_text(spec: SpatialLevel, lower: tuple[float, ...], cell: tuple[int, ...]) -> str:
    lo, hi = cell_bounds(spec, lower, cell)
    return " x ".join(f"[{a:g}, {b:g}]" for a, b in zip(lo.tolist(), hi.tolist(), strict=True))


def _is_id(name: str) -> bool:
    return name.isdigit() and (name == "0" or not name.startswith("0")) and int(name) < 1 << 64


# -- cross-checks -------------------------------------------------------------------------------------------------
class _Reporter:
    """Problems of one kind: the first :data:`MAX_REPORTED` one by one, then a count."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first_place: dict[str, tuple[str, int | None]] = {}

    def report(self, kind: str, place: tuple[str, str | None, int | None], message: str) -> Iterator[Problem]:
        """``place``: the file, ``"chunk N"`` when the entry is a chunk of a shard file, and the byte offset."""
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        key, chunk, offset = place
        self.first_place.setdefault(kind, (key, offset))
        if n < MAX_REPORTED:
            yield Problem(key, f"{chunk}: {message}" if chunk else message, offset)

    def summary(self) -> Iterator[Problem]:
        for kind, n in self.counts.items():
            if n > MAX_REPORTED:
                place = self.first_place[kind]
                yield Problem(place[0], f"{n - MAX_REPORTED} more cases: {kind}", None)


def _cross_check(checker: _Checker) -> Iterator[Problem]:
    rep = _Reporter()
    info = checker.source.info
    id_ids, id_digests, id_keys, id_offsets = checker.by_id.arrays()
    order = np.argsort(id_ids, kind="stable")
    sorted_ids, sorted_digests = id_ids[order], id_digests[order]

    def lookup(ids: U64) -> tuple[npt.NDArray[np.bool_], U64]:
        """Whether each id is in by_id, and its by_id digest."""
        if sorted_ids.size == 0:
            return np.zeros(ids.size, dtype=bool), np.zeros(ids.size, dtype=np.uint64)
        pos = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
        return sorted_ids[pos] == ids, sorted_digests[pos]

    # spatial levels: one level per annotation, the same records as by_id, nothing missing either way
    level_ids: list[tuple[U64, npt.NDArray[np.int64]]] = []
    for level in sorted(checker.levels):
        seen = checker.levels[level]
        ids, digests, keys, offsets = seen.arrays()
        unique = np.unique(ids)
        level_ids.append((unique, np.full(unique.size, level, dtype=np.int64)))
        found, want = lookup(ids)
        for j in np.flatnonzero(~found).tolist():
            yield from rep.report("spatial cells list annotations by_id lacks", seen.where(j, keys, offsets),
                                  f"annotation {int(ids[j])} (spatial level {level}) has no by_id entry: "
                                  "Neuroglancer cannot select it")
        for j in np.flatnonzero(found & (digests != want)).tolist():
            yield from rep.report("spatial and by_id records differ", seen.where(j, keys, offsets),
                                  f"annotation {int(ids[j])}: its geometry or properties in spatial level {level} "
                                  "differ from its by_id record")
    if level_ids:
        all_ids = np.concatenate([a for a, _ in level_ids])
        all_levels = np.concatenate([b for _, b in level_ids])
        o = np.argsort(all_ids, kind="stable")
        all_ids, all_levels = all_ids[o], all_levels[o]
        for j in np.flatnonzero(all_ids[1:] == all_ids[:-1]).tolist():
            level = int(all_levels[j + 1])
            yield from rep.report("annotations stored at two spatial levels", (info.spatial[level].key, None, None),
                                  f"annotation {int(all_ids[j])} is stored at spatial levels {int(all_levels[j])} "
                                  f"and {level}; each belongs to one level")
        in_spatial = np.isin(sorted_ids, all_ids)
        for j in np.flatnonzero(~in_spatial).tolist():
            yield from rep.report("by_id annotations in no spatial cell",
                                  checker.by_id.where(int(order[j]), id_keys, id_offsets),
                                  f"annotation {int(sorted_ids[j])} is in by_id but in no spatial cell: "
                                  "Neuroglancer's spatial view never shows it")

    # relationships: the same pairs both ways, the same records
    for rel in info.relationships:
        name = rel.id or ""
        seen = checker.related.get(name, _Seen())
        ids, digests, keys, offsets = seen.arrays()
        segments = np.concatenate(seen.segments) if seen.segments else np.zeros(0, np.uint64)
        found, want = lookup(ids)
        for j in np.flatnonzero(~found).tolist():
            yield from rep.report(f"{name!r} lists name annotations by_id lacks", seen.where(j, keys, offsets),
                                  f"annotation {int(ids[j])} (related to segment {int(segments[j])} by {name!r}) "
                                  "has no by_id entry")
        for j in np.flatnonzero(found & (digests != want)).tolist():
            yield from rep.report(f"{name!r} and by_id records differ", seen.where(j, keys, offsets),
                                  f"annotation {int(ids[j])}: its geometry or properties in the {name!r} list of "
                                  f"segment {int(segments[j])} differ from its by_id record")
        pairs = checker.by_id_related.get(name, [])
        want_ids = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, np.uint64)
        want_segs = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, np.uint64)
        stored = _pair_keys(ids[found], segments[found])
        for j in np.flatnonzero(~np.isin(_pair_keys(want_ids, want_segs), stored)).tolist():
            place = (join_key(rel.key, str(int(want_segs[j]))), None, None)
            yield from rep.report(f"by_id relationships missing from the {name!r} index", place,
                                  f"annotation {int(want_ids[j])} lists segment {int(want_segs[j])} under {name!r}, "
                                  f"but that segment's {name!r} list does not hold it")
        expected = _pair_keys(want_ids, want_segs)
        f_ids, f_segs = ids[found], segments[found]
        f_keys, f_offsets = keys[found], offsets[found]
        for j in np.flatnonzero(~np.isin(stored, expected)).tolist():
            yield from rep.report(f"{name!r} pairs by_id does not list", seen.where(j, f_keys, f_offsets),
                                  f"segment {int(f_segs[j])}'s {name!r} list holds annotation {int(f_ids[j])}, whose "
                                  "by_id record does not list that segment")
    yield from rep.summary()


def _pair_keys(ids: U64, segments: U64) -> npt.NDArray[np.void]:
    pairs = np.stack([ids.astype(np.uint64), segments.astype(np.uint64)], axis=1)
    return np.ascontiguousarray(pairs).view(np.dtype((np.void, 16))).reshape(-1)
