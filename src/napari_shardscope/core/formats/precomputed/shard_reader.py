"""Locate, list and read chunks of a sharded precomputed directory through a byte store.

A lookup costs at most two small range reads (shard index, minishard index), both cached, and one
read of the chunk's own bytes; whole shard files are never read to find something. Both layouts of
the spec are read: the current ``<shard>.shard`` and the obsolete ``<shard>.index`` +
``<shard>.data`` pair, which is the same bytes split after the shard index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.allocator import tune_malloc
from napari_shardscope.core.bytestore import ByteStore, join_key, read_bounded, read_ranges
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.encoding import MAX_DECODED_BYTES, decode_bytes
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, FormatError, IndexDecodeError
from napari_shardscope.core.formats.precomputed.chunk_table import ChunkTable
from napari_shardscope.core.formats.precomputed.shard_index import (
    MinishardIndex,
    ShardIndex,
    decode_minishard_index,
    decode_minishard_indexes,
    decode_shard_index,
)
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids, format_shard_name

Layout = Literal["shard", "index+data"]
T = TypeVar("T")


@dataclass(frozen=True)
class DecodeBounds:
    """What the metadata implies about the decoded sizes in one sharded directory.

    A volume scale knows how many chunks exist (the grid) and how large each decodes; an id-keyed
    directory (skeletons, meshes) knows neither, and gets the memory budget. Decoding stops at
    these sizes, so a gzip bomb costs no more than the data it could legitimately hold.
    """

    max_chunks: int | None = None  # most chunks a minishard index can list
    max_chunk_bytes: int = MAX_DECODED_BYTES  # most bytes one chunk may decode to
    exact_chunk_bytes: Callable[[int], int | None] | None = None  # by chunk id, when the encoding fixes it


@dataclass(frozen=True)
class ShardFile:
    """Where a shard's bytes live: one ``.shard`` file, or the obsolete ``.index`` + ``.data`` pair."""

    shard: int
    layout: Layout
    key: str  # the .shard file, or the .index file
    data_key: str | None = None  # the .data file of the obsolete layout
    size: int | None = None  # total logical size (index + data), when known
    head: bytes | None = None  # the shard index bytes, when the existence probe already read them

    @property
    def display_key(self) -> str:
        return self.key if self.layout == "shard" else f"{self.key} + {self.data_key}"


@dataclass(frozen=True)
class ChunkLocation:
    """Where one chunk id is stored (``present=False`` when the shard holds no such chunk)."""

    chunk_id: int
    hashed_chunk_id: int
    shard: int
    minishard: int
    shard_file: str
    present: bool
    byte_range: tuple[int, int] | None = None  # [start, end) in the logical shard file

    def to_json(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "hashed_chunk_id": self.hashed_chunk_id,
            "shard": self.shard,
            "minishard": self.minishard,
            "shard_file": self.shard_file,
            "present": self.present,
            "byte_range": list(self.byte_range) if self.byte_range is not None else None,
        }


class ShardedReader:
    """Read access to one sharded directory (a volume scale, or a skeleton/mesh/annotation dir).

    Parameters
    ----------
    store
        The byte store holding the dataset.
    prefix
        Directory of the shard files inside the store (``""`` for the root).
    spec
        The directory's sharding spec.
    cache_size
        How many decoded minishard indexes to keep (shard indexes: a quarter of that).
    bounds
        Decoded sizes the metadata implies (default: only the memory budget).

    Indexes that fail to decode are cached as their error, so a damaged index is read and
    inflated once, not once per chunk looked up in it.
    """

    def __init__(
        self,
        store: ByteStore,
        prefix: str,
        spec: ShardingSpec,
        cache_size: int = 4096,
        bounds: DecodeBounds | None = None,
    ) -> None:
        tune_malloc()  # bulk lookups allocate arrays of millions of ids: see core.allocator
        self.store = store
        self.prefix = prefix.strip("/")
        self.spec = spec
        self.bounds = bounds or DecodeBounds()
        self._files: LruCache[int, ShardFile | None] = LruCache(max(16, cache_size // 4))
        self._shard_indexes: LruCache[int, ShardIndex | FormatError | None] = LruCache(max(16, cache_size // 4))
        self._minishards: LruCache[tuple[int, int], MinishardIndex | FormatError] = LruCache(cache_size)

    # -- files -------------------------------------------------------------------------------
    def shard_key(self, shard: int, suffix: str = "shard") -> str:
        return join_key(self.prefix, f"{format_shard_name(self.spec, shard)}.{suffix}")

    def shard_file(self, shard: int) -> ShardFile | None:
        """The shard's file(s), or ``None`` when the shard holds nothing (no file written)."""
        return self._files.get_or_load(shard, lambda: self._find_shard_file(shard))

    def _find_shard_file(self, shard: int) -> ShardFile | None:
        key = self.shard_key(shard)
        if self.store.cheap_size:
            size = self.store.size(key)
            if size is not None:
                return ShardFile(shard, "shard", key, size=size)
            index_key, data_key = self.shard_key(shard, "index"), self.shard_key(shard, "data")
            isize, dsize = self.store.size(index_key), self.store.size(data_key)
            if isize is not None:
                total = isize + dsize if dsize is not None else isize
                return ShardFile(shard, "index+data", index_key, data_key, size=total)
            return None
        # Remote stores have no cheap stat: the existence probe is the shard-index read itself.
        n = self.spec.shard_index_size
        head = self.store.read_range(key, 0, n)
        if head is not None:
            return ShardFile(shard, "shard", key, head=head)
        index_key = self.shard_key(shard, "index")
        head = self.store.read_range(index_key, 0, n)
        if head is not None:
            return ShardFile(shard, "index+data", index_key, self.shard_key(shard, "data"), head=head)
        return None

    def read_file_range(self, file: ShardFile, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the logical shard file (short if the file ends first)."""
        if file.layout == "shard":
            return self.store.read_range(file.key, start, end) or b""
        split = self.spec.shard_index_size
        parts = []
        if start < split:
            parts.append(self.store.read_range(file.key, start, min(end, split)) or b"")
        if end > split and file.data_key is not None:
            parts.append(self.store.read_range(file.data_key, max(start, split) - split, end - split) or b"")
        return b"".join(parts)

    def read_whole_file(self, file: ShardFile) -> bytes:
        """The whole logical shard file (validation reads everything; lookups never do).

        Raises :class:`IndexDecodeError` before reading a file larger than any valid shard of the
        directory (:meth:`max_file_bytes`): a sparse terabyte file is reported, not allocated.
        """
        limit = self.max_file_bytes()
        if limit is None:
            read: Callable[[str], bytes | None] = self.store.read
        else:
            def read(key: str) -> bytes | None:
                return read_bounded(self.store, key, limit, "a shard file of this scale", IndexDecodeError)
        if file.layout == "shard":
            return read(file.key) or b""
        head = read(file.key) or b""
        data = read(file.data_key) if file.data_key else None
        return head + (data or b"")

    def max_minishard_index_bytes(self) -> int:
        """Most stored bytes of one minishard index: 24 bytes per chunk the scale can hold (or the decode budget),
        twice over for what gzip may add, plus slack."""
        max_chunks = self.bounds.max_chunks
        raw = MAX_DECODED_BYTES if max_chunks is None else min(MAX_DECODED_BYTES, 24 * max_chunks)
        return 2 * raw + (1 << 16)

    def max_file_bytes(self) -> int | None:
        """Most bytes a valid shard file can hold: its index, and every chunk of the scale at twice its size.

        ``None`` for a directory that does not bound its chunk count (segment-keyed meshes, skeletons).
        """
        bounds = self.bounds
        if bounds.max_chunks is None:
            return None
        index = 16 << self.spec.minishard_bits
        return index + bounds.max_chunks * (24 + 2 * bounds.max_chunk_bytes) + (1 << 16)

    # -- indexes -----------------------------------------------------------------------------
    def shard_index(self, shard: int) -> ShardIndex | None:
        """The decoded shard index, or ``None`` when the shard file does not exist."""
        return _raise_cached(self._shard_indexes.get_or_load(shard, lambda: _catch(self._load_shard_index, shard)))

    def _load_shard_index(self, shard: int) -> ShardIndex | None:
        file = self.shard_file(shard)
        if file is None:
            return None
        data = file.head if file.head is not None else self.read_file_range(file, 0, self.spec.shard_index_size)
        # Ranges past the end of the file are checked per minishard, when one is read: a bad entry
        # must not make the healthy minishards of the shard unreadable (TensorStore reads them).
        return decode_shard_index(data, self.spec, key=file.display_key)

    def minishard_index(self, shard: int, minishard: int) -> MinishardIndex:
        """The decoded minishard index (empty when the shard or minishard holds nothing)."""
        if not 0 <= minishard < self.spec.num_minishards:
            raise ArgumentError(f"minishard {minishard} out of range [0, {self.spec.num_minishards})")
        return _raise_cached(
            self._minishards.get_or_load((shard, minishard), lambda: _catch(self._load_minishard, shard, minishard))
        )

    @property
    def prefetches(self) -> bool:
        """Whether :meth:`prefetch_minishards` fetches anything (remote stores) or leaves loads to lookups."""
        return not self.store.cheap_size

    def prefetch_minishards(self, shard: int, minishards: Sequence[int] | None = None) -> None:
        """Load these minishard indexes of ``shard`` (default: every non-empty one) with requests in flight together."""
        self.prefetch_minishards_of([shard], None if minishards is None else {shard: minishards})

    def load_shard_files(self, shards: Sequence[int]) -> list[ShardFile | None]:
        """:meth:`shard_file` of each shard; on a remote store the existence probes (shard-index reads) go together.

        A remote store has no cheap stat, so finding which of ``n`` possible shards exist costs ``n``
        range reads; issued together they cost a few round trips. Results are cached like
        :meth:`shard_file`'s.

        A probe reads exactly the shard index, not a speculative head that might hold a small
        shard's minishard indexes too: TensorStore answers a range running past the end of a value
        with OUT_OF_RANGE, so over-reading a small shard costs a second request (what exists of the
        range) instead of saving one (measured: 32 requests instead of 16 for 16 probes).
        """
        if not self.store.cheap_size:
            n = self.spec.shard_index_size
            todo = [s for s in dict.fromkeys(shards) if not self._files.contains(s)]
            heads = read_ranges(self.store, [(self.shard_key(s), 0, n) for s in todo])
            found: dict[int, ShardFile | None] = {
                s: ShardFile(s, "shard", self.shard_key(s), head=h) for s, h in zip(todo, heads, strict=True)
                if h is not None
            }
            rest = [s for s in todo if s not in found]  # the obsolete .index + .data pair, or no file
            heads = read_ranges(self.store, [(self.shard_key(s, "index"), 0, n) for s in rest])
            for s, h in zip(rest, heads, strict=True):
                found[s] = None if h is None else ShardFile(
                    s, "index+data", self.shard_key(s, "index"), self.shard_key(s, "data"), head=h)
            for s, f in found.items():
                self._files.get_or_load(s, partial(_identity, f))
        return [self.shard_file(s) for s in shards]

    def prefetch_minishards_of(self, shards: Sequence[int], minishards: dict[int, Sequence[int]] | None = None) -> None:
        """Load the minishard indexes of ``shards`` (default: every non-empty one) in few round trips.

        On a remote store each range read is a round trip: all of them are issued together
        (:func:`~napari_shardscope.core.bytestore.read_ranges`), and index ranges of one shard close
        enough together come as one request (the store's coalescing gap). A local store that
        reads a batch with each file resolved and opened once (``read_ranges``, as
        :class:`~napari_shardscope.core.bytestore.local.LocalByteStore` does) reads them the same
        way; other local stores leave each load to the lookup that needs it. Indexes already
        cached are skipped; failures are cached like any load's.
        """
        if self.store.cheap_size and getattr(self.store, "read_ranges", None) is None:
            return
        self.load_shard_files(shards)
        wanted_of = self._minishard_requests(shards, minishards)
        self._store_minishards(wanted_of, read_ranges(self.store, [(f.key, a, b) for f, _, a, b in wanted_of]))

    def load_shards_with_minishards(self, shards: Sequence[int], prefetch: int | None = None) -> list[int]:
        """The shards among ``shards`` that have a file, found and indexed in two waves of requests.

        :meth:`load_shard_files` followed by :meth:`prefetch_minishards_of` costs three dependent
        round trips when a shard is missing (its ``.shard`` probe, then the obsolete ``.index``
        probe, then the minishard indexes). Here the ``.index`` probes of the shards without a
        ``.shard`` file go out together with the minishard indexes of those that have one, so
        finding and indexing them takes two. Only the first ``prefetch`` shards found (default:
        all) get their minishard indexes, keeping a huge directory inside the caches; a split
        (``.index`` + ``.data``) shard's are left to ordinary loads. Local stores just stat.
        Everything loaded is cached as :meth:`shard_file`, :meth:`shard_index` and
        :meth:`minishard_index` cache it, failures included.
        """
        if self.store.cheap_size:
            return [f.shard for f in self.load_shard_files(shards) if f is not None]
        n = self.spec.shard_index_size
        todo = [s for s in dict.fromkeys(shards) if not self._files.contains(s)]
        heads = read_ranges(self.store, [(self.shard_key(s), 0, n) for s in todo])
        rest: list[int] = []
        for s, head in zip(todo, heads, strict=True):
            if head is None:
                rest.append(s)
            else:
                self._files.get_or_load(s, partial(_identity, ShardFile(s, "shard", self.shard_key(s), head=head)))
        unresolved = set(rest)
        found = [s for s in dict.fromkeys(shards) if s not in unresolved and self.shard_file(s) is not None]
        wanted_of = self._minishard_requests(found if prefetch is None else found[:prefetch], None)
        probes = [(self.shard_key(s, "index"), 0, n) for s in rest]
        answers = read_ranges(self.store, probes + [(f.key, a, b) for f, _, a, b in wanted_of])
        for s, head in zip(rest, answers[: len(probes)], strict=True):
            file = None if head is None else ShardFile(
                s, "index+data", self.shard_key(s, "index"), self.shard_key(s, "data"), head=head)
            self._files.get_or_load(s, partial(_identity, file))
        self._store_minishards(wanted_of, answers[len(probes):])
        return [f.shard for f in self.load_shard_files(shards) if f is not None]

    def _minishard_requests(self, shards: Sequence[int], minishards: dict[int, Sequence[int]] | None
                            ) -> list[tuple[ShardFile, int, int, int]]:
        """``(file, minishard, start, end)`` of each minishard index of ``shards`` not cached yet.

        Shard files must be loaded already. A shard whose index fails to decode, an obsolete split
        layout, and implausible ranges are left to the ordinary loads, which raise or check them.
        """
        limit = self.max_minishard_index_bytes()
        wanted_of: list[tuple[ShardFile, int, int, int]] = []  # (file, minishard, start, end) per request
        for shard in shards:
            file = self.shard_file(shard)
            if file is None or file.layout != "shard":
                continue  # the obsolete split layout is left to ordinary loads
            try:
                index = self.shard_index(shard)
            except FormatError:
                continue  # cached: raised, with its key and offset, by the load that needs the index
            if index is None:
                continue
            wanted = index.nonempty_minishards().tolist() if minishards is None else list(minishards.get(shard, ()))
            for m in wanted:
                start, end = index.minishard_range(m)
                # an implausible range is left to the checks of the ordinary load
                if not self._minishards.contains((shard, m)) and 0 < end - start <= limit:
                    wanted_of.append((file, m, start, end))
        return wanted_of

    def _store_minishards(self, wanted_of: Sequence[tuple[ShardFile, int, int, int]],
                          answers: Sequence[bytes | None]) -> None:
        """Check and decode the fetched minishard indexes (each shard's together) into the cache."""
        by_shard: dict[int, list[tuple[ShardFile, int, int, int, bytes]]] = {}
        for (file, m, start, end), data in zip(wanted_of, answers, strict=True):
            by_shard.setdefault(file.shard, []).append((file, m, start, end, data or b""))
        for shard, items in by_shard.items():
            file = items[0][0]
            parts: list[tuple[bytes, int]] = []
            decoded_for: list[int] = []
            for _, m, start, end, data in items:
                try:
                    self._check_minishard_bytes(file, m, start, end, data)
                except IndexDecodeError as exc:
                    self._minishards.put((shard, m), exc)
                    continue
                parts.append((data, start))
                decoded_for.append(m)
            decoded = decode_minishard_indexes(parts, self.spec, key=file.display_key, file_size=file.size,
                                               max_entries=self.bounds.max_chunks)
            for m, value in zip(decoded_for, decoded, strict=True):
                self._minishards.put((shard, m), value)

    def _load_minishard(self, shard: int, minishard: int, prefetched: bytes | None = None) -> MinishardIndex:
        index = self.shard_index(shard)
        empty = np.zeros(0, dtype=np.uint64)
        if index is None:
            return MinishardIndex(empty, empty, empty)
        start, end = index.minishard_range(minishard)
        if end == start:
            return MinishardIndex(empty, empty, empty)
        file = self._existing_file(shard)
        limit = self.max_minishard_index_bytes()
        if end - start > limit:  # refused before reading: a damaged entry can claim gigabytes of a sparse file
            raise IndexDecodeError(
                f"minishard {minishard} index range [{start}, {end}) is {end - start} bytes, more than the {limit} "
                "bytes an index of this scale's chunks can take",
                key=file.display_key,
                offset=16 * minishard,
            )
        self._check_minishard_bytes(file, minishard, start, end, None)
        data = self.read_file_range(file, start, end) if prefetched is None else prefetched
        self._check_minishard_bytes(file, minishard, start, end, data)
        return decode_minishard_index(
            data, self.spec, key=file.display_key, offset=start, file_size=file.size, max_entries=self.bounds.max_chunks
        )

    def _check_minishard_bytes(self, file: ShardFile, minishard: int, start: int, end: int,
                               data: bytes | None) -> None:
        """A minishard index range inside the file (when its size is known), and ``data`` not cut short."""
        if file.size is not None and end > file.size:
            raise IndexDecodeError(
                f"minishard {minishard} index range [{start}, {end}) runs past the end of the {file.size}-byte file",
                key=file.display_key,
                offset=16 * minishard,
            )
        if data is not None and len(data) < end - start:
            raise IndexDecodeError(
                f"minishard {minishard} index [{start}, {end}) truncated: file ends after {start + len(data)} bytes",
                key=file.display_key,
                offset=start + len(data),
            )

    def _existing_file(self, shard: int) -> ShardFile:
        """The shard's file, which an index already read from (a typed error if it vanished since)."""
        file = self.shard_file(shard)
        if file is None:
            raise IndexDecodeError(f"shard {shard} has an index but no file", key=self.shard_key(shard))
        return file

    # -- lookups ------------------------------------------------------------------------------
    def locate(self, chunk_id: int) -> ChunkLocation:
        """Shard, minishard and byte range of one chunk id."""
        return self.locate_many(np.asarray([chunk_id], dtype=np.uint64))[0]

    def locate_many(self, chunk_ids: object) -> list[ChunkLocation]:
        """Locate many chunk ids: hashing is vectorised, each minishard index is read once."""
        a = assign_chunk_ids(self.spec, chunk_ids)
        starts, ends, present = self.locate_arrays(a.chunk_ids, a.shard, a.minishard)
        out = []
        for i in range(a.chunk_ids.size):
            shard = int(a.shard[i])
            file = self.shard_file(shard)
            out.append(
                ChunkLocation(
                    chunk_id=int(a.chunk_ids[i]),
                    hashed_chunk_id=int(a.hashed[i]),
                    shard=shard,
                    minishard=int(a.minishard[i]),
                    shard_file=file.display_key if file else self.shard_key(shard),
                    present=bool(present[i]),
                    byte_range=(int(starts[i]), int(ends[i])) if present[i] else None,
                )
            )
        return out

    def locate_arrays(
        self, chunk_ids: npt.NDArray[np.uint64], shards: npt.NDArray[np.uint64], minishards: npt.NDArray[np.uint64]
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
        """Vectorised byte ranges for already-assigned ids: ``(starts, ends, present)``.

        The minishard indexes the ids fall in are loaded (cached) once each, then every id is
        resolved at once through a :class:`~.chunk_table.ChunkTable` (no sort of the ids).
        """
        n = chunk_ids.size
        if n == 0:
            empty = np.zeros(0, dtype=np.uint64)
            return empty, empty.copy(), np.zeros(0, dtype=bool)
        spec = self.spec
        group = (shards << np.uint64(spec.minishard_bits)) | minishards if spec.shard_bits else minishards
        if spec.shard_bits + spec.minishard_bits <= 22:  # counting beats sorting a million ids
            needed = np.flatnonzero(np.bincount(group.astype(np.intp))).astype(np.uint64)
        else:
            needed = np.unique(group)
        indexes = []
        for g in needed.tolist():
            if spec.shard_bits:  # then minishard_bits < 64
                shard, minishard = g >> spec.minishard_bits, g & (spec.num_minishards - 1)
            else:
                shard, minishard = 0, g
            indexes.append(self.minishard_index(shard, minishard))
        def group_of(ids: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
            a = assign_chunk_ids(spec, ids)
            return (a.shard << np.uint64(spec.minishard_bits)) | a.minishard if spec.shard_bits else a.minishard

        return ChunkTable(needed.tolist(), indexes, group_of).lookup(chunk_ids)

    def prefetch_indexes(self, shards: list[int], workers: int = 32) -> None:
        """Load the shard indexes and every non-empty minishard index of ``shards`` concurrently.

        Remote stores answer each small range request with a round trip; issuing them all at once
        is what makes ``inspect`` of a bucket fast.
        """
        if not self.store.cheap_size:
            self.prefetch_minishards_of(shards)  # requests in flight together, no thread each
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            indexes = list(pool.map(self.shard_index, shards))
            pairs = [
                (s, int(m))
                for s, ix in zip(shards, indexes, strict=True)
                if ix is not None
                for m in ix.nonempty_minishards()
            ]
            list(pool.map(lambda sm: self.minishard_index(*sm), pairs))

    def iter_chunks(self, shard: int, minishard: int | None = None) -> Iterator[ChunkLocation]:
        """Every stored chunk of a shard (or of one of its minishards), in index order."""
        index = self.shard_index(shard)
        if index is None:
            return
        file = self._existing_file(shard)
        minishards = [minishard] if minishard is not None else [int(m) for m in index.nonempty_minishards()]
        self.prefetch_minishards(shard, minishards)
        # One hash over the shard's ids and one conversion to Python ints per field, not one per minishard
        # and per chunk: a listing costs the records it yields, not numpy calls on tiny arrays.
        loaded = [(m, mi) for m in minishards if len(mi := self.minishard_index(shard, m))]
        if not loaded:
            return
        ids = np.concatenate([mi.chunk_ids for _, mi in loaded])
        hashed = assign_chunk_ids(self.spec, ids).hashed.tolist()
        starts = np.concatenate([mi.starts for _, mi in loaded]).tolist()
        ends = np.concatenate([mi.ends for _, mi in loaded]).tolist()
        of = [m for m, mi in loaded for _ in range(len(mi))]
        display = file.display_key
        for cid, h, m, a, b in zip(ids.tolist(), hashed, of, starts, ends, strict=True):
            yield ChunkLocation(chunk_id=cid, hashed_chunk_id=h, shard=shard, minishard=m, shard_file=display,
                                present=True, byte_range=(a, b))

    def existing_shards(self) -> list[int]:
        """Shard numbers that have a file, by listing the directory (local and listable stores)."""
        from napari_shardscope.core.formats.precomputed.sharding import parse_shard_name

        prefix = f"{self.prefix}/" if self.prefix else ""
        found: set[int] = set()
        for key in self.store.list(prefix):
            name = key[len(prefix) :]
            if "/" in name:
                continue
            number = parse_shard_name(self.spec, name)
            if number is not None and not name.endswith(".data"):
                found.add(number)
        return sorted(found)

    def read_chunk(self, chunk_id: int, *, decode: bool = True) -> bytes | None:
        """The chunk's bytes (decoded by ``data_encoding`` unless ``decode=False``), or ``None``."""
        loc = self.locate(chunk_id)
        if not loc.present or loc.byte_range is None:
            return None
        file = self._existing_file(loc.shard)
        start, end = loc.byte_range
        data = self.read_file_range(file, start, end)
        if len(data) < end - start:
            raise IndexDecodeError(
                f"chunk {chunk_id} data [{start}, {end}) truncated", key=file.display_key, offset=start + len(data)
            )
        if not decode:
            return data
        return decode_chunk(self.spec, self.bounds, chunk_id, data, key=file.display_key, offset=start)

    def clear_cache(self) -> None:
        self._files.clear()
        self._shard_indexes.clear()
        self._minishards.clear()


def decode_chunk(
    spec: ShardingSpec, bounds: DecodeBounds, chunk_id: int, data: bytes, *, key: str, offset: int
) -> bytes:
    """Undo ``data_encoding`` on one chunk, capped and (when the encoding fixes it) size-checked.

    A raw chunk of the wrong length would be silently reshaped or padded by a viewer; it is an error.
    """
    exact = bounds.exact_chunk_bytes(chunk_id) if bounds.exact_chunk_bytes is not None else None
    if spec.data_encoding == "raw":
        decoded = data  # already in memory: only its length is checked
    else:
        cap = bounds.max_chunk_bytes if exact is None else min(exact, bounds.max_chunk_bytes)
        decoded = decode_bytes(data, spec.data_encoding, key=key, offset=offset, max_size=cap)
    if exact is not None and len(decoded) != exact:
        raise ChunkDecodeError(
            f"chunk {chunk_id} decodes to {len(decoded)} bytes, expected {exact}", key=key, offset=offset
        )
    return decoded


def _identity(value: T) -> T:
    return value


def _catch(load: Callable[..., T], *args: int) -> T | FormatError:
    """``load(*args)``, or the format error it raised (so a cache keeps the failure too)."""
    try:
        return load(*args)
    except FormatError as exc:
        return exc


def _raise_cached(value: T | FormatError) -> T:
    """The cached value, or a fresh copy of the cached error (re-raising one object grows its traceback)."""
    if isinstance(value, FormatError):
        raise type(value)(value.message, key=value.key, offset=value.offset)
    return value
