"""Zarr v3 arrays on local disk decoded here, straight into the reader's buffers: the fast read path.

Why not TensorStore's ``zarr3`` driver, which reads these arrays correctly: it inflates gzip with
zlib; libdeflate (:mod:`napari_shardscope.core.libdeflate`, the call releases the GIL) inflates
an inner chunk several times faster, and each chunk is decoded into the buffer it ends up in
(TensorStore's chunk buffer on a cached read, a reused per-thread buffer on an uncached one:
:mod:`napari_shardscope.core.volumes.direct`). Shard files are opened once
(:class:`~napari_shardscope.core.bytestore.local.KeptOpenLocalStore`).

Where (:func:`fast_path_applies`): a local store, a little-endian machine, a plain numeric dtype
(bool, integers, floats) stored little-endian (or one byte wide), and codecs that are exactly
``bytes`` [+ ``gzip``] — either the array's own, or the inner codecs of one ``sharding_indexed``
codec (whose index codecs the shard parser, :func:`~.sharding.parse_sharding_config`, already
restricts to ``bytes`` [+ ``crc32c``], at either end). Everything else (``transpose``, ``zstd``,
``blosc``, big-endian data, other dtypes, remote stores) keeps TensorStore's driver.

Chunks are located by the array's :class:`~.reader.Zarr3ArrayReader` (the one shard-index parser,
its cache and its checks). The guarantees are its and the decoder's: a damaged index (too short,
half-empty entries, ranges past the end of the file) or a ``crc32c`` mismatch is a
:class:`ChunkDecodeError` naming the shard file and offset (what TensorStore's driver reports,
and what the project's voxel readers raise for every damaged chunk); a chunk whose bytes do not
decode to exactly its size is a :class:`ChunkDecodeError` naming the file and the chunk's offset;
inflating stops at the chunk's size (a gzip bomb costs no more); a missing inner chunk or shard
file reads as the fill value.

Zarr chunks are C-ordered in the array's axis order, and an edge chunk is stored whole (padded):
a chunk reaching past the array's far edge is decoded into a whole-chunk buffer and its inside
part copied out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.encoding import gunzip_into
from napari_shardscope.core.errors import (
    ChecksumError,
    ChunkDecodeError,
    FormatError,
    IndexDecodeError,
)
from napari_shardscope.core.formats.volume_spec import check_decode_target, clipped_extent
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, CodecSpec
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader

#: Data type kinds decoded here: their zarr ``fill_value`` is a plain number (or ``"NaN"``/``"Infinity"``).
DIRECT_KINDS = frozenset("biuf")


def _plain_chain(codecs: tuple[CodecSpec, ...], itemsize: int) -> bool:
    """Whether ``codecs`` is exactly ``bytes`` (little endian, or any for one-byte data) [+ ``gzip``]."""
    names = [c.name for c in codecs]
    if names not in (["bytes"], ["bytes", "gzip"]):
        return False
    endian = codecs[0].configuration.get("endian")
    return endian == "little" or (itemsize == 1 and endian in (None, "little", "big"))


def fast_path_applies(store: ByteStore | None, meta: ArrayMetadata) -> bool:
    """Whether :class:`Zarr3ChunkSource` reads the array (the module docstring says why these cases)."""
    from napari_shardscope.core.bytestore.local import LocalByteStore

    if not isinstance(store, LocalByteStore) or not np.little_endian:
        return False
    dtype = meta.dtype
    if dtype.kind not in DIRECT_KINDS or not dtype.isnative or meta.ndim == 0:
        return False
    if math.prod(meta.chunk_shape) == 0:  # pragma: no cover - the metadata parser refuses zero-sized chunks
        return False
    codecs = meta.codecs
    if len(codecs) == 1 and codecs[0].name == "sharding_indexed":
        inner = codecs[0].configuration.get("codecs")
        if not isinstance(inner, list):
            return False
        try:
            inner_specs = tuple(CodecSpec(str(c["name"]), dict(c.get("configuration") or {})) for c in inner)
        except (TypeError, KeyError, AttributeError, ValueError):  # not an object: the codec parser says so
            return False
        return _plain_chain(inner_specs, dtype.itemsize)
    return _plain_chain(codecs, dtype.itemsize)


class Zarr3ChunkSource:
    """One zarr v3 array's (inner) chunks, decoded here (a :class:`~..volume_spec.DirectChunkSource`).

    Shaped like the array, in its own axis order; chunks are the inner chunks of a sharded array.

    Parameters
    ----------
    store
        The dataset's local byte store.
    path
        The array's directory in ``store`` (``""``: the root).
    meta
        Its parsed ``zarr.json``.
    """

    memory_order: Literal["C", "F"] = "C"

    def __init__(self, store: ByteStore, path: str, meta: ArrayMetadata) -> None:
        from napari_shardscope.core.bytestore.local import KeptOpenLocalStore, LocalByteStore

        if type(store) is LocalByteStore:  # each shard file opened once (the data is immutable while open)
            store = KeptOpenLocalStore(store.root, follow_symlinks=store.follow_symlinks)
        self.store = store
        self.meta = meta
        self.reader = Zarr3ArrayReader(store, path, meta)  # reads nothing until a chunk is read
        chain = self.reader.sharding.codecs if self.reader.sharding is not None else self.reader.chain
        self._gzip = bool(chain.bytes_to_bytes)
        self._chunk = tuple(self.reader.inner_chunk_shape)
        self._chunk_bytes = math.prod(self._chunk) * meta.dtype.itemsize
        self._fill = meta.fill_scalar
        self._root = store.url.rstrip("/")

    # -- ChunkSource --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.meta.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.meta.dtype

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self._chunk

    @property
    def fill_value(self) -> Any:
        return self._fill

    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        out = np.empty(self.extent(grid), dtype=self.dtype)
        return out if self.decode_into(grid, out) else None

    # -- DirectChunkSource --------------------------------------------------------------------
    def extent(self, grid: tuple[int, ...]) -> tuple[int, ...]:
        """The chunk's shape, clipped at the array's far edges."""
        return clipped_extent(grid, self._chunk, self.meta.shape)

    def decode_into(self, grid: tuple[int, ...], out: npt.NDArray[Any]) -> bool:
        extent = self.extent(grid)
        check_decode_target(out, extent, f"chunk {tuple(grid)} of {self._root}")
        whole = extent == self._chunk
        direct = whole and out.flags.c_contiguous and out.dtype == self.dtype
        try:
            loc = self.reader.locate_inner_chunk(grid)
            data = self.reader.read_inner_chunk_bytes(loc)
        except (IndexDecodeError, ChecksumError) as exc:  # to a voxel reader, a chunk error (as TensorStore's)
            raise ChunkDecodeError(exc.message, key=self._where(exc.key), offset=exc.offset) from exc
        if data is None:
            return False
        assert loc.byte_range is not None
        where, offset = self._where(loc.shard_key), loc.byte_range[0]
        target = out if direct else np.empty(self._chunk, dtype=self.dtype)
        if self._gzip:
            gunzip_into(data, target, key=where, offset=offset)
        else:
            if len(data) != self._chunk_bytes:
                raise ChunkDecodeError(f"raw chunk has {len(data)} bytes, expected {self._chunk_bytes}",
                                       key=where, offset=offset)
            target.reshape(-1).view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
        if target is not out:
            out[...] = target if whole else target[tuple(slice(0, e) for e in extent)]
        return True

    def prepare_chunks(self, grids: Sequence[tuple[int, ...]]) -> None:
        """Load, in this thread, the shard indexes the chunks at ``grids`` need (a cold plane: four).

        Why: otherwise the decode threads meet each shard's first chunk together, and all but one
        wait while it reads the index (:meth:`~.reader.Zarr3ArrayReader.read_shard_index` loads each
        once) — GIL-bound work between inflates. Here the indexes are read back to back before any
        decode thread starts. Nothing is raised: an index that fails is not cached, so the decode
        that needs it reads it again and raises its error, with its key and offset, as before.
        """
        if self.reader.sharding is None or len(grids) < 2:
            return
        cps = self.reader.chunks_per_shard
        shards = sorted({tuple(g // n for g, n in zip(grid, cps, strict=True)) for grid in grids})
        try:
            for shard in shards:
                self.reader.read_shard_index(shard)
        except FormatError:
            return

    def _where(self, key: str | None) -> str | None:
        if key is None or key.startswith(self._root):
            return key
        return f"{self._root}/{key}"


def zarr3_chunk_source(store: ByteStore | None, path: str, meta: ArrayMetadata) -> Zarr3ChunkSource | None:
    """The fast source of the array at ``path`` when :func:`fast_path_applies`, else ``None`` (TensorStore reads it)."""
    if store is None or not fast_path_applies(store, meta):
        return None
    return Zarr3ChunkSource(store, path, meta)
