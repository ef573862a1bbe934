"""Locate and list the inner chunks of one Zarr v3 array through a byte store.

A lookup reads only the shard index — one range read of ``index_size`` bytes at the start or the
end of the shard file — and decoded indexes are cached, so a viewer asking "where is the chunk
under the cursor" repeatedly costs nothing after the first time. A shard file that does not
exist means every inner chunk in it is empty (fill value).

Coordinates are in the array's own axis order (the order of ``shape`` in ``zarr.json``). When
``transpose`` codecs precede ``sharding_indexed``, the shard index is laid out over the
*transposed* inner-chunk grid; this class maps between the two so callers never see it.

An array without ``sharding_indexed`` is read as if every chunk were a shard holding exactly one
inner chunk, the whole file: the shard browser and the CLI then work on plain Zarr v3 too.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import product
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_document, read_ranges, read_suffixes
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import (
    ArgumentError,
    FormatError,
    IndexDecodeError,
    MetadataError,
    StoreError,
    UnsupportedFeatureError,
)
from napari_shardscope.core.formats.zarr3.codecs import CodecChain, decode_chunk, split_codec_chain
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, parse_array_metadata
from napari_shardscope.core.formats.zarr3.sharding import (
    EMPTY,
    ShardIndex,
    ShardingConfig,
    decode_shard_index,
    index_entry_offset,
    parse_sharding_config,
)

#: Without a listing (plain HTTP), shard files are found by probing each grid position, up to this many.
MAX_PROBED_SHARDS = 4096


@dataclass(frozen=True)
class InnerChunkLocation:
    """Where one inner chunk is stored.

    Attributes
    ----------
    shard_key
        Key of the shard file, relative to the store root.
    shard
        Grid position of the shard (the array's chunk-grid position).
    inner_chunk
        Grid position of the inner chunk in the whole array's inner-chunk grid.
    inner_chunk_in_shard
        Position of the inner chunk inside its shard (array axis order).
    byte_range
        ``[start, end)`` of the chunk's encoded bytes in the shard file, ``None`` when empty.
    """

    shard_key: str
    shard: tuple[int, ...]
    inner_chunk: tuple[int, ...]
    inner_chunk_in_shard: tuple[int, ...]
    byte_range: tuple[int, int] | None

    @property
    def present(self) -> bool:
        return self.byte_range is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "shard_key": self.shard_key,
            "shard": list(self.shard),
            "inner_chunk": list(self.inner_chunk),
            "inner_chunk_in_shard": list(self.inner_chunk_in_shard),
            "byte_range": list(self.byte_range) if self.byte_range is not None else None,
            "nbytes": self.byte_range[1] - self.byte_range[0] if self.byte_range is not None else None,
            "present": self.present,
        }


@dataclass(frozen=True, eq=False)
class LoadedIndex:
    """A shard's decoded index and, when the store knows it cheaply, the shard file's size."""

    index: ShardIndex
    file_size: int | None


def read_array_metadata(store: ByteStore, path: str) -> ArrayMetadata:
    """The parsed ``zarr.json`` of the array at ``path`` (errors name its key in the store).

    Raises
    ------
    MetadataError
        When it is missing or breaks the spec.
    UnsupportedFeatureError
        When it asks for a feature we do not implement.
    """
    key = join_key(path, "zarr.json")
    raw = read_document(store, key)
    if raw is None:
        raise MetadataError("zarr.json not found", key=key)
    return parse_array_metadata(raw, key=key)


class Zarr3ArrayReader:
    """Read access to the shard layout of one Zarr v3 array.

    Parameters
    ----------
    store
        The byte store holding the array.
    path
        The array's directory inside the store (``""`` for the root).
    metadata
        The parsed ``zarr.json``; read from the store when omitted.
    cache_size
        How many decoded shard indexes to keep.

    Raises
    ------
    MetadataError
        When ``zarr.json`` is missing or invalid.
    UnsupportedFeatureError
        When the codec chain cannot be located into (bytes -> bytes codecs after
        ``sharding_indexed`` make byte ranges meaningless) or uses a codec we do not implement.
    """

    def __init__(
        self,
        store: ByteStore,
        path: str = "",
        metadata: ArrayMetadata | None = None,
        *,
        cache_size: int = 256,
    ) -> None:
        self.store = store
        self.path = path.strip("/")
        self.metadata_key = join_key(self.path, "zarr.json")
        meta = metadata if metadata is not None else read_array_metadata(store, self.path)
        self.metadata = meta
        self.chain: CodecChain = split_codec_chain(meta.codecs, meta.ndim, meta.dtype, key=self.metadata_key)
        ab = self.chain.array_to_bytes
        self.sharding: ShardingConfig | None = None
        perm = self.chain.permutation or tuple(range(meta.ndim))
        self._perm = perm
        if ab.name == "sharding_indexed":
            if self.chain.bytes_to_bytes:
                names = [c.name for c in self.chain.bytes_to_bytes]
                raise UnsupportedFeatureError(
                    f"zarr v3 bytes -> bytes codecs {names} after sharding_indexed", key=self.metadata_key,
                    detail="they encode whole shards, so inner chunks cannot be located")
            self.sharding = parse_sharding_config(
                ab, self.chain.encoded_shape(meta.chunk_shape), meta.dtype, key=self.metadata_key
            )
            inner = [0] * meta.ndim
            for i, axis in enumerate(perm):
                inner[axis] = self.sharding.chunk_shape[i]
            self.inner_chunk_shape: tuple[int, ...] = tuple(inner)
        else:
            self.inner_chunk_shape = meta.chunk_shape
        self._indexes: LruCache[tuple[int, ...], LoadedIndex | None] = LruCache(cache_size)
        self._loading: dict[tuple[int, ...], _IndexLoad] = {}  # shard → the load of its index in flight
        self._loading_lock = threading.Lock()

    # -- geometry --------------------------------------------------------------------------------
    @property
    def sharded(self) -> bool:
        return self.sharding is not None

    @property
    def shard_shape(self) -> tuple[int, ...]:
        """Shape of a shard (the array's chunk shape), array axis order."""
        return self.metadata.chunk_shape

    @cached_property  # asked for every chunk located; the geometry never changes
    def chunks_per_shard(self) -> tuple[int, ...]:
        """Inner chunks per shard along each array axis."""
        return tuple(s // c for s, c in zip(self.shard_shape, self.inner_chunk_shape, strict=True))

    @property
    def shard_grid_shape(self) -> tuple[int, ...]:
        return self.metadata.grid_shape

    @cached_property
    def inner_grid_shape(self) -> tuple[int, ...]:
        """Number of inner chunks along each axis of the whole array (the last may be partial)."""
        return tuple(-(-s // c) for s, c in zip(self.metadata.shape, self.inner_chunk_shape, strict=True))

    def shard_key(self, shard: Sequence[int]) -> str:
        """Store key of the shard file at grid position ``shard``."""
        return join_key(self.path, self.metadata.chunk_key(shard)) if self.path else self.metadata.chunk_key(shard)

    def shard_position(self, key: str) -> tuple[int, ...] | None:
        """The shard grid position a store key names, or ``None`` if it is not a chunk key."""
        rel = key
        if self.path:
            if not key.startswith(self.path + "/"):
                return None
            rel = key[len(self.path) + 1 :]
        return self.metadata.chunk_key_encoding.decode(rel, self.metadata.ndim)

    def index_position(self, in_shard: Sequence[int]) -> tuple[int, ...]:
        """Array-order position inside a shard → position in the (possibly transposed) shard index."""
        return tuple(in_shard[axis] for axis in self._perm)

    def array_position(self, index_position: Sequence[int]) -> tuple[int, ...]:
        """Inverse of :meth:`index_position`."""
        out = [0] * len(self._perm)
        for i, axis in enumerate(self._perm):
            out[axis] = index_position[i]
        return tuple(out)

    # -- shard files and indexes ---------------------------------------------------------------
    @property
    def index_cache_capacity(self) -> int:
        """How many decoded shard indexes the reader keeps (a batch of prefetches must fit)."""
        return self._indexes.capacity

    def list_shard_files(self) -> list[tuple[str, tuple[int, ...]]]:
        """``(key, shard grid position)`` of every shard file in the store, sorted by position.

        Stores that cannot list (plain HTTP) are probed position by position when the shard grid
        has at most :data:`MAX_PROBED_SHARDS` shards. Keys outside the grid are included (so
        ``validate`` can report them); the caller filters.
        """
        prefix = self.path + "/" if self.path else ""
        try:
            keys = list(self.store.list(prefix))
        except StoreError:
            total = math.prod(self.shard_grid_shape)
            if total > MAX_PROBED_SHARDS:
                raise
            positions = list(product(*(range(n) for n in self.shard_grid_shape)))
            found_probed: list[tuple[str, tuple[int, ...]]] = []
            step = max(1, self._indexes.capacity // 2)
            for first in range(0, len(positions), step):  # the probes of a batch in flight together
                batch = positions[first : first + step]
                if self.sharding is not None:
                    self.prefetch_shard_indexes(batch)
                    found_probed.extend((self.shard_key(pos), pos) for pos in batch if self._shard_exists(pos))
                    continue
                keys = [self.shard_key(pos) for pos in batch]
                present = read_ranges(self.store, [(key, 0, 0) for key in keys])  # existence, together
                found_probed.extend((key, pos) for key, pos, got in zip(keys, batch, present, strict=True)
                                    if got is not None)
            return found_probed
        found = []
        for key in keys:
            pos = self.shard_position(key)
            if pos is not None:
                found.append((key, pos))
        return sorted(found, key=lambda kp: kp[1])

    def in_grid(self, shard: Sequence[int]) -> bool:
        return len(shard) == self.metadata.ndim and all(
            0 <= p < n for p, n in zip(shard, self.shard_grid_shape, strict=True)
        )

    def _shard_exists(self, shard: tuple[int, ...]) -> bool:
        if self.sharding is not None:
            return self.read_shard_index(shard) is not None
        return self.store.read_range(self.shard_key(shard), 0, 0) is not None

    def read_shard_index(self, shard: Sequence[int]) -> LoadedIndex | None:
        """The decoded index of the shard at ``shard``, ``None`` when the file does not exist.

        Reads only the index bytes (one range or suffix read). Cached; errors are not cached. Threads
        asking for the same uncached index at once read it once (a failed read too: all of them get its error).

        Raises
        ------
        IndexDecodeError
            When the file is too short to hold the index (names the key and offset 0).
        ChecksumError
            When the index's ``crc32c`` does not match.
        """
        config = self.sharding
        if config is None:
            raise ArgumentError(f"{self.metadata_key}: array is not sharded; it has no shard index")
        pos = tuple(int(p) for p in shard)
        load = partial(self._load_index, pos, config)
        if self._indexes.contains(pos):
            return self._indexes.get_or_load(pos, load)
        # Not cached: one thread loads it while the others needing the same shard wait and then find it
        # cached (decode threads meet a shard's first chunks together; each would read and check it).
        # A load that fails hands its error to the threads that waited for it, so they neither read the
        # damaged (or unreachable) index again one after another nor wait for more; a later call tries afresh.
        with self._loading_lock:
            flight = self._loading.get(pos)
            leader = flight is None
            if flight is None:
                flight = self._loading[pos] = _IndexLoad()
            else:
                flight.waiters += 1
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return self._indexes.get_or_load(pos, load)  # cached now (unless evicted already: loaded again)
        try:
            return self._indexes.get_or_load(pos, load)
        except Exception as exc:  # (an interrupt is not handed on: the waiters then load it themselves)
            flight.error = exc
            raise
        finally:
            with self._loading_lock:
                del self._loading[pos]
            flight.done.set()

    def _load_index(self, shard: tuple[int, ...], config: ShardingConfig) -> LoadedIndex | None:
        key = self.shard_key(shard)
        n = config.index_size
        size: int | None = None
        if self.store.cheap_size:
            size = self.store.size(key)
            if size is None:
                return None
            if size < n:
                raise IndexDecodeError(
                    f"file of {size} bytes is too short for its {n}-byte shard index", key=key, offset=0
                )
            start = 0 if config.index_location == "start" else size - n
            data = self.store.read_range(key, start, start + n)
        else:
            start = 0
            data = (
                self.store.read_range(key, 0, n) if config.index_location == "start" else self.store.read_suffix(key, n)
            )
        return _decode_loaded_index(data, config, key=key, start=start, size=size)

    def prefetch_shard_indexes(self, shards: Sequence[Sequence[int]]) -> None:
        """Load the indexes of ``shards`` with their requests in flight together (remote stores).

        A remote store answers each index read with a round trip; issued together
        (:func:`~napari_shardscope.core.bytestore.read_ranges` / ``read_suffixes``), ``n`` shards cost
        a few round trips instead of ``n``. Local stores leave each load to :meth:`read_shard_index`
        (no round trip to save). Indexes already cached are skipped; one that fails to decode is not
        cached, so :meth:`read_shard_index` reports it as it always does. At most the cache's
        capacity is loaded, so nothing prefetched is evicted before it is used.
        """
        config = self.sharding
        if config is None or self.store.cheap_size:
            return
        todo = [pos for pos in dict.fromkeys(tuple(int(p) for p in s) for s in shards)
                if not self._indexes.contains(pos)][: self._indexes.capacity]
        keys = [self.shard_key(pos) for pos in todo]
        n = config.index_size
        if config.index_location == "start":
            found = read_ranges(self.store, [(key, 0, n) for key in keys])
        else:
            found = read_suffixes(self.store, [(key, n) for key in keys])
        for pos, key, data in zip(todo, keys, found, strict=True):
            try:
                loaded = _decode_loaded_index(data, config, key=key, start=0, size=None)
            except FormatError:  # reported by read_shard_index, which does not cache errors
                continue
            self._indexes.put(pos, loaded)

    def clear_cache(self) -> None:
        """Forget cached indexes (after shard files changed)."""
        self._indexes.clear()

    # -- locate and list -------------------------------------------------------------------------
    def locate_voxel(self, voxel: Sequence[int]) -> InnerChunkLocation:
        """Where the inner chunk holding ``voxel`` (array axis order) is stored."""
        shape = self.metadata.shape
        v = _as_position(voxel, "voxel")
        if len(v) != len(shape) or not all(0 <= x < s for x, s in zip(v, shape, strict=True)):
            raise ArgumentError(
                f"voxel {list(v)} is outside the array of shape {list(shape)} (coordinates in zarr.json shape order)"
            )
        return self.locate_inner_chunk(tuple(x // c for x, c in zip(v, self.inner_chunk_shape, strict=True)))

    def locate_inner_chunk(self, inner_chunk: Sequence[int]) -> InnerChunkLocation:
        """Where the inner chunk at grid position ``inner_chunk`` is stored."""
        grid = self.inner_grid_shape
        g = _as_position(inner_chunk, "inner_chunk")
        if len(g) != len(grid) or not all(0 <= x < n for x, n in zip(g, grid, strict=True)):
            raise ArgumentError(f"inner chunk {list(g)} is outside the inner-chunk grid {list(grid)}")
        cps = self.chunks_per_shard
        shard = tuple(x // n for x, n in zip(g, cps, strict=True))
        in_shard = tuple(x % n for x, n in zip(g, cps, strict=True))
        key = self.shard_key(shard)
        if self.sharding is None:
            size = self.store.size(key)
            return InnerChunkLocation(key, shard, g, in_shard, None if size is None else (0, size))
        loaded = self.read_shard_index(shard)
        if loaded is None:
            return InnerChunkLocation(key, shard, g, in_shard, None)
        rng = self._checked_range(loaded, self.index_position(in_shard), key)
        return InnerChunkLocation(key, shard, g, in_shard, rng)

    def _checked_range(self, loaded: LoadedIndex, position: tuple[int, ...], key: str) -> tuple[int, int] | None:
        assert self.sharding is not None
        index = loaded.index
        off, n = int(index.offsets[position]), int(index.nbytes[position])
        if off == EMPTY and n == EMPTY:
            return None
        if off == EMPTY or n == EMPTY:
            raise IndexDecodeError(
                f"half-empty index entry (offset {off}, nbytes {n}) for inner chunk {list(position)}",
                key=key,
                offset=index_entry_offset(self.sharding, position, loaded.file_size),
            )
        if loaded.file_size is not None and off + n > loaded.file_size:
            raise IndexDecodeError(
                f"inner chunk {list(position)} byte range [{off}, {off + n}) ends past the end "
                f"of the file ({loaded.file_size} bytes)",
                key=key,
                offset=index_entry_offset(self.sharding, position, loaded.file_size),
            )
        return off, off + n

    def list_inner_chunks(self, shard: Sequence[int] | None = None) -> Iterator[InnerChunkLocation]:
        """One location per stored inner chunk, of one shard or (``shard=None``) of every shard file.

        Shard files outside the array's shard grid are skipped (``validate`` reports them).
        """
        if shard is not None:
            pos = _as_position(shard, "shard")
            if not self.in_grid(pos):
                raise ArgumentError(f"shard {list(pos)} is outside the shard grid {list(self.shard_grid_shape)}")
            shards = [pos]
        else:
            shards = [pos for _, pos in self.list_shard_files() if self.in_grid(pos)]
        step = max(1, self._indexes.capacity // 2)
        for first in range(0, len(shards), step):
            batch = shards[first : first + step]
            if len(batch) > 1:  # remote: a batch's index reads in flight together, not one round trip per shard
                self.prefetch_shard_indexes(batch)
            for pos in batch:
                yield from self._list_shard(pos)

    def _list_shard(self, shard: tuple[int, ...]) -> Iterator[InnerChunkLocation]:
        key = self.shard_key(shard)
        cps = self.chunks_per_shard
        origin = tuple(s * n for s, n in zip(shard, cps, strict=True))
        if self.sharding is None:
            size = self.store.size(key)
            if size is not None:
                yield InnerChunkLocation(key, shard, shard, tuple(0 for _ in shard), (0, size))
            return
        loaded = self.read_shard_index(shard)
        if loaded is None:
            return
        for index_pos in loaded.index.stored_positions():
            in_shard = self.array_position(index_pos)
            rng = self._checked_range(loaded, index_pos, key)
            inner = tuple(o + i for o, i in zip(origin, in_shard, strict=True))
            yield InnerChunkLocation(key, shard, inner, in_shard, rng)

    # -- bytes and decoding ----------------------------------------------------------------------
    def read_inner_chunk_bytes(self, location: InnerChunkLocation) -> bytes | None:
        """The stored (encoded) bytes of an inner chunk, ``None`` when it is empty."""
        if location.byte_range is None:
            return None
        start, end = location.byte_range
        data = self.store.read_range(location.shard_key, start, end)
        if data is None or len(data) != end - start:
            raise IndexDecodeError(
                f"byte range [{start}, {end}) is not in the file", key=location.shard_key, offset=start
            )
        return data

    def decode_inner_chunk(self, data: bytes, *, key: str, offset: int | None = None) -> npt.NDArray[Any]:
        """Decode an inner chunk's stored bytes to an array of the inner chunk shape (array order).

        The array covers the whole inner chunk, including any part past the array's edge.
        """
        meta = self.metadata
        if self.sharding is None:
            return decode_chunk(
                data, self.chain, meta.chunk_shape, meta.dtype, meta.fill_scalar, key=key, offset=offset
            )
        config = self.sharding
        decoded = decode_chunk(
            data, config.codecs, config.chunk_shape, meta.dtype, meta.fill_scalar, key=key, offset=offset
        )
        return decoded.transpose(np.argsort(self._perm)) if self.chain.permutation is not None else decoded

    def read_inner_chunk(self, inner_chunk: Sequence[int]) -> npt.NDArray[Any]:
        """Decoded contents of an inner chunk (fill value when empty), full inner chunk shape."""
        loc = self.locate_inner_chunk(inner_chunk)
        data = self.read_inner_chunk_bytes(loc)
        if data is None:
            return np.full(self.inner_chunk_shape, self.metadata.fill_scalar, dtype=self.metadata.dtype)
        assert loc.byte_range is not None
        return self.decode_inner_chunk(data, key=loc.shard_key, offset=loc.byte_range[0])


def _as_position(values: Sequence[int], name: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(f"{name} must be a sequence of integers, got {values!r}") from exc
    if any(int(v) != v for v in values):
        raise ArgumentError(f"{name} must be a sequence of integers, got {values!r}")
    return out


class _IndexLoad:
    """One thread's load of a shard index that other threads wait for: set when done, with its error if it failed."""

    __slots__ = ("done", "error", "waiters")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Exception | None = None
        self.waiters = 0  # threads waiting for this load (tests check they were there)


def _decode_loaded_index(data: bytes | None, config: ShardingConfig, *, key: str, start: int,
                         size: int | None) -> LoadedIndex | None:
    """A shard index read from ``key`` (``None``: the file does not exist); ``size`` when known.

    The index's offset in the file is known when it is stored at the start, or when the file size
    is (an index at the end of a file of unknown size is reported without an offset).
    """
    if data is None:
        return None
    n = config.index_size
    if len(data) < n:
        raise IndexDecodeError(f"file of {len(data)} bytes is too short for its {n}-byte shard index",
                               key=key, offset=0)
    index_offset = start if (config.index_location == "start" or size is not None) else None
    index = decode_shard_index(data, config, key=key, offset=index_offset)
    return LoadedIndex(index, size)
