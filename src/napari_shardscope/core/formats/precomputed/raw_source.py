"""Raw-encoded precomputed scales decoded here, straight into the reader's buffers: the fast read path.

Why not TensorStore's ``neuroglancer_precomputed`` driver, which reads these scales correctly: it
inflates gzip with zlib, and libdeflate (:mod:`napari_shardscope.core.libdeflate`, the call
releases the GIL) inflates a 64³ uint64 segmentation chunk about 5x faster than zlib (0.10 vs 0.50
ms measured here). A cold 512² uint64 plane spends most of its time inflating, so decoding here
halves its CPU time against TensorStore's (``bench/reader.py``). EM image chunks barely compress;
there the gain is ~1.2x of CPU. Each chunk is decoded into the buffer it ends up in (TensorStore's
chunk buffer on a cached read, a reused per-thread buffer on an uncached one, from which only the
voxels the read selects are copied: :mod:`napari_shardscope.core.volumes.direct`), and each shard
file is opened once (the dataset's reader reads through a
:class:`~napari_shardscope.core.bytestore.local.KeptOpenLocalStore`).

Where (:func:`raw_chunk_source`): stores with cheap reads (local files: a read is a ``pread``, no
round trip), ``encoding: raw``, and either sharded (any hash, ``data_encoding`` gzip or raw) or
unsharded. Everything else keeps TensorStore's driver: other encodings (it decodes jpeg, png and
compressed_segmentation), remote stores (it issues many range requests at once).

Locating a chunk costs a few Python operations: its compressed Morton code is the OR of one
precomputed code per axis, the hash is one ``mmh3`` call, and each minishard index the reader
(:class:`~.shard_reader.ShardedReader`, with all its bounds and checks) decodes becomes a dict
from chunk id to byte range. The guarantees are the shard reader's: index damage met while reading
a chunk is a :class:`ChunkDecodeError` (as TensorStore's driver reports it) with the index's
message, shard file and offset, a chunk's bytes that do not decode to
exactly its edge-clipped extent are a :class:`ChunkDecodeError` naming the file and the chunk's
offset, inflating stops at the chunk's size (a gzip bomb costs no more), and a chunk the shard does
not list reads as the fill value.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.encoding import gunzip_into
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, FormatError, IndexDecodeError
from napari_shardscope.core.formats.precomputed.chunk_encoding import ScaleChunkGeometry
from napari_shardscope.core.formats.precomputed.info import PrecomputedInfo, ScaleInfo
from napari_shardscope.core.formats.precomputed.morton import encode_morton
from napari_shardscope.core.formats.volume_spec import check_decode_target, clipped_extent

if TYPE_CHECKING:  # imported with the first sharded read (the dataset's shard reader), not at open
    from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader

#: Minishard indexes kept as id → byte-range dicts per scale (the shard reader keeps its own decoded copies).
TABLE_CACHE = 1024
#: ... and at most this many chunk entries over all of them (a dict entry costs ~190 bytes: ~50 MiB),
#: so a dataset whose minishards list millions of chunks cannot grow the tables without bound.
TABLE_ENTRIES = 1 << 18


def fast_path_applies(store: ByteStore | None, scale: ScaleInfo) -> bool:
    """Whether :class:`RawChunkSource` reads ``scale`` (the module docstring says why these cases)."""
    if store is None or not store.cheap_size or scale.encoding != "raw":
        return False
    if not np.little_endian:  # pragma: no cover - the chunks are little-endian; decoding in place needs a match
        return False
    sharding = scale.sharding
    return sharding is None or sharding.data_encoding in ("gzip", "raw")


class RawChunkSource(ScaleChunkGeometry):
    """One raw-encoded precomputed scale's chunks, decoded here (a :class:`~..volume_spec.DirectChunkSource`).

    Shaped ``(x, y, z, channel)`` from 0, like the array TensorStore's driver opens (translated to
    0), so the scale's transform presents it the same way.

    Parameters
    ----------
    store
        The dataset's byte store (rooted at the dataset).
    info, scale
        The parsed ``info`` and the scale read.
    reader
        For a sharded scale, a function giving its :class:`ShardedReader` (called once, on the first
        read: opening a volume reads no index).
    """

    memory_order: Literal["C", "F"] = "F"

    def __init__(self, store: ByteStore, info: PrecomputedInfo, scale: ScaleInfo,
                 reader: Callable[[], ShardedReader] | None = None) -> None:
        if scale.sharding is not None and reader is None:
            raise ArgumentError(f"scale {scale.key!r} is sharded: a RawChunkSource needs its shard reader")
        self.store = store
        self.info = info
        self.scale = scale
        self._make_reader = reader
        self._reader: ShardedReader | None = None
        self._lock = threading.Lock()
        self._tables: LruCache[tuple[int, int], dict[int, tuple[int, int]]] = LruCache(
            TABLE_CACHE, weigh=len, max_weight=TABLE_ENTRIES)
        self._axis_codes: tuple[npt.NDArray[np.uint64], ...] | None = None
        self._root = store.url.rstrip("/")

    # -- ChunkSource --------------------------------------------------------------------------
    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        out = np.empty(self.extent(grid), dtype=self.dtype, order="F")
        return out if self.decode_into(grid, out) else None

    # -- DirectChunkSource --------------------------------------------------------------------
    def extent(self, grid: tuple[int, ...]) -> tuple[int, int, int, int]:
        """The chunk's shape ``(x, y, z, channel)``, clipped at the volume's far edges."""
        x, y, z = clipped_extent(grid[:3], self.scale.chunk_size, self.scale.size)
        return x, y, z, self.info.num_channels

    def decode_into(self, grid: tuple[int, ...], out: npt.NDArray[Any]) -> bool:
        extent = self.extent(grid)
        check_decode_target(out, extent, f"chunk {tuple(grid)} of scale {self.scale.key!r}")
        direct = out.flags.f_contiguous and out.dtype == self.dtype
        target = out if direct else np.empty(extent, self.dtype, order="F")
        sharded = self.scale.sharding is not None
        try:
            found = self._decode_sharded(grid, target) if sharded else self._decode_file(grid, target)
        except IndexDecodeError as exc:  # the chunk cannot be read: to a voxel reader, a chunk error (as TensorStore's)
            key = exc.key if exc.key is None or exc.key.startswith(self._root) else self._where(exc.key)
            raise ChunkDecodeError(exc.message, key=key, offset=exc.offset) from exc
        if found and target is not out:
            out[...] = target
        return found

    # -- sharded ------------------------------------------------------------------------------
    def _decode_sharded(self, grid: tuple[int, ...], out: npt.NDArray[Any]) -> bool:
        reader = self._shard_reader()
        spec = reader.spec
        codes = self._codes()
        chunk_id = int(codes[0][grid[0]]) | int(codes[1][grid[1]]) | int(codes[2][grid[2]])
        hashed = chunk_id >> spec.preshift_bits
        if spec.hash != "identity":
            import mmh3

            hashed = int.from_bytes(mmh3.mmh3_x86_128_digest(hashed.to_bytes(8, "little"), 0)[:8], "little")
        minishard = hashed & (spec.num_minishards - 1)
        shard = (hashed >> spec.minishard_bits) & (spec.num_shards - 1)
        found = self._tables.get_or_load((shard, minishard), lambda: _table(reader, shard, minishard)).get(chunk_id)
        if found is None:
            return False
        start, end = found
        file = reader.shard_file(shard)
        if file is None:
            raise IndexDecodeError(f"shard {shard} has an index but no file", key=self._where(reader.shard_key(shard)))
        where = self._where(file.display_key)
        data = reader.read_file_range(file, start, end)  # one kept descriptor per file (the dataset's reader)
        if len(data) < end - start:
            raise IndexDecodeError(f"chunk {chunk_id} data [{start}, {end}) truncated", key=where,
                                   offset=start + len(data))
        if spec.data_encoding == "gzip":
            gunzip_into(data, out, key=where, offset=start)
        else:
            _copy_raw(data, out, key=where, offset=start)
        return True

    def prepare_chunks(self, grids: Sequence[tuple[int, ...]]) -> None:
        """Load, in this thread and in one batch, the minishard tables the chunks at ``grids`` need.

        Why: a cold plane's decode threads otherwise each load the shard index and the minishard
        indexes they meet (a dozen for a 512² plane), one read at a time and contending for the
        GIL — ~5 ms of the first plane. Here the chunk ids are hashed together (vectorised), and
        the missing indexes are read through the shard reader's batch path (one resolve and open
        per file locally, requests in flight together remotely). Nothing is raised: an index that
        fails is cached as its error and raised, with its key and offset, by the decode that
        needs it, as before.
        """
        if self.scale.sharding is None or len(grids) < 2:
            return
        from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids

        reader = self._shard_reader()
        codes = self._codes()
        g = np.asarray(grids, dtype=np.intp)
        ids = codes[0][g[:, 0]] | codes[1][g[:, 1]] | codes[2][g[:, 2]]
        where = assign_chunk_ids(reader.spec, ids)
        pairs = {(int(a), int(b)) for a, b in zip(where.shard.tolist(), where.minishard.tolist(), strict=True)}
        todo = sorted(p for p in pairs if not self._tables.contains(p))
        if not todo:
            return
        wanted: dict[int, list[int]] = {}
        for shard, minishard in todo:
            wanted.setdefault(shard, []).append(minishard)
        try:
            per_shard: dict[int, Sequence[int]] = {shard: tuple(ms) for shard, ms in wanted.items()}
            reader.prefetch_minishards_of(list(wanted), per_shard)
            for shard, minishard in todo:
                self._tables.get_or_load((shard, minishard), partial(_table, reader, shard, minishard))
        except FormatError:
            return  # raised again, with its key and offset, by the decode that meets it

    def _shard_reader(self) -> ShardedReader:
        reader = self._reader
        if reader is None:
            with self._lock:
                if self._reader is None:
                    assert self._make_reader is not None  # checked in __init__
                    self._reader = self._make_reader()
                reader = self._reader
        return reader

    def _codes(self) -> tuple[npt.NDArray[np.uint64], ...]:
        """Per axis, the compressed Morton code of each grid coordinate alone (see :func:`_axis_codes`)."""
        codes = self._axis_codes
        if codes is None:
            codes = self._axis_codes = _axis_codes(tuple(int(n) for n in self.scale.grid_shape))
        return codes

    # -- unsharded ----------------------------------------------------------------------------
    def _decode_file(self, grid: tuple[int, ...], out: npt.NDArray[Any]) -> bool:
        name = self.scale.unsharded_chunk_key((grid[0], grid[1], grid[2]))  # the channel axis is one chunk
        size = self.store.size(name)  # before reading: a damaged file may be a sparse terabyte
        if size is None:
            return False
        if size != out.nbytes:
            raise ChunkDecodeError(f"raw chunk has {size} bytes, expected {out.nbytes}", key=self._where(name),
                                   offset=0)
        data = self.store.read(name)
        if data is None:  # removed since the size was read
            return False
        _copy_raw(data, out, key=self._where(name), offset=0)
        return True

    def _where(self, key: str) -> str:
        return f"{self._root}/{key}"


@functools.lru_cache(maxsize=16)
def _axis_codes(grid: tuple[int, ...]) -> tuple[npt.NDArray[np.uint64], ...]:
    """Per axis of a ``grid``-shaped chunk grid, the compressed Morton code of each coordinate alone.

    A chunk's id is the OR of its coordinates' codes: a compressed Morton code places each bit of
    each coordinate at a position fixed by the grid shape alone, so the codes of the three
    coordinates never share a bit. Kept per grid shape (read-only): a scale opened afresh (a new
    context) does not pay the ~0.25 ms of working them out again on its first read.
    """
    per_axis = []
    for axis, n in enumerate(grid):
        pos = np.zeros((n, len(grid)), dtype=np.int64)
        pos[:, axis] = np.arange(n)
        codes = encode_morton(pos, grid)
        codes.flags.writeable = False
        per_axis.append(codes)
    return tuple(per_axis)


def _table(reader: ShardedReader, shard: int, minishard: int) -> dict[int, tuple[int, int]]:
    """A minishard index as chunk id → ``(start, end)``; of an id listed twice, the first entry wins."""
    index = reader.minishard_index(shard, minishard)
    ids, starts, ends = index.chunk_ids.tolist(), index.starts.tolist(), index.ends.tolist()
    return dict(zip(reversed(ids), zip(reversed(starts), reversed(ends), strict=True), strict=True))


def _copy_raw(data: bytes, out: npt.NDArray[Any], *, key: str, offset: int) -> None:
    """A raw chunk's bytes into ``out`` (F-contiguous): exactly its size, or a :class:`ChunkDecodeError`."""
    if len(data) != out.nbytes:
        raise ChunkDecodeError(f"raw chunk has {len(data)} bytes, expected {out.nbytes}", key=key, offset=offset)
    out.reshape(-1, order="F").view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)


def raw_chunk_source(store: ByteStore | None, info: PrecomputedInfo, scale: ScaleInfo,
                     reader: Callable[[], ShardedReader] | None) -> RawChunkSource | None:
    """The fast source of ``scale`` when :func:`fast_path_applies` (and a sharded scale has a reader), else ``None``."""
    if store is None or not fast_path_applies(store, scale) or (scale.sharding is not None and reader is None):
        return None
    if math.prod(scale.chunk_size) * info.num_channels * info.dtype.itemsize == 0:  # pragma: no cover - info checks
        return None
    return RawChunkSource(store, info, scale, reader)
