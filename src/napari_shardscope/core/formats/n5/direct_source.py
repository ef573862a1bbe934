"""N5 datasets on local disk decoded here, straight into the reader's buffers: the fast read path.

Why not TensorStore's ``n5`` driver, which reads these datasets correctly: it inflates gzip with
zlib, and libdeflate (:mod:`napari_shardscope.core.libdeflate`, the call releases the GIL) inflates
a block several times faster (``bench/n5_gzip.py``, ``bench/reader.py``). Each block is decoded
into the buffer it ends up in (TensorStore's chunk buffer on a cached read, a reused per-thread
buffer on an uncached one: :mod:`napari_shardscope.core.volumes.direct`), then byte-swapped there
(N5 stores big-endian; :func:`_swap_in_place`).

Where (:func:`fast_path_applies`): a local store, compression ``raw`` or ``gzip`` (gzip members or
one zlib stream, ``useZlib``), any N5 data type (all are plain numbers), and a dataset TensorStore's
driver reads (so what :func:`~.attributes.needs_own_reader` sends to
:class:`~.volume.N5ChunkSource` stays there). Everything else (``bzip2``, ``xz``, ``blosc``,
``zstd``, remote stores) keeps TensorStore's driver.

Blocks are read whole in one read clamped to :func:`~.block.max_block_bytes` (the bound of
:func:`~.block.read_block_bytes`), and their header is parsed and checked by :mod:`.block`
(:func:`~.block.decode_block_header`, :func:`~.block.check_block_header`), so they are refused
exactly as the block decoder refuses them.
Why a plain :class:`~napari_shardscope.core.bytestore.local.LocalByteStore`, not the
``KeptOpenLocalStore`` the zarr v3 and precomputed sources read through: N5 keeps one file per
block, each read once per cold read, and kept descriptors are a budget of 128 for the whole process
that the first 128 blocks would spend for good (and shard files of other volumes would lose).

A block whose stored dimensions differ from its extent is read as TensorStore's ``n5`` driver
reads it (checked by writing such blocks and reading them with it): a full-size edge block (as
TensorStore and zarr-python write them) is decoded whole and its inside part used; a block stored
smaller than its extent (a truncated block, anywhere) is padded with 0. Dimensions over
``blockSize`` or of another count are a :class:`ChunkDecodeError` (TensorStore refuses them too);
data that does not decode to exactly the header's size is a :class:`ChunkDecodeError` naming the
block file and the data's offset; inflating stops at the block's size (a gzip bomb costs no more);
a missing block reads as 0; a varlength block is :class:`UnsupportedFeatureError`, as for
:class:`~.volume.N5ChunkSource` (TensorStore refuses those too).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.errors import ChunkDecodeError, UnsupportedFeatureError
from napari_shardscope.core.formats.n5.attributes import DatasetAttributes, needs_own_reader
from napari_shardscope.core.formats.n5.block import (
    check_block_header,
    decode_block_header,
    format_block_key,
    max_block_bytes,
)
from napari_shardscope.core.formats.n5.compression import inflate_gzip_into
from napari_shardscope.core.formats.volume_spec import check_decode_target, clipped_extent

#: Compressions decoded here (the rest stay on TensorStore's driver, or :class:`~.volume.N5ChunkSource`).
DIRECT_COMPRESSIONS = ("raw", "gzip")


def fast_path_applies(store: ByteStore | None, attributes: DatasetAttributes) -> bool:
    """Whether :class:`N5DirectSource` reads the dataset (the module docstring says why these cases)."""
    from napari_shardscope.core.bytestore.local import LocalByteStore

    if not isinstance(store, LocalByteStore) or needs_own_reader(attributes):
        return False
    if attributes.compression.type not in DIRECT_COMPRESSIONS or attributes.ndim == 0:
        return False
    return math.prod(attributes.block_size) > 0


class N5DirectSource:
    """One N5 dataset's blocks, decoded here (a :class:`~..volume_spec.DirectChunkSource`).

    Shaped like the array TensorStore's ``n5`` driver opens: N5 order, x first, so the level's
    transform presents it the same way. Blocks are x fastest: :attr:`memory_order` ``"F"``.

    Parameters
    ----------
    store
        The store the dataset's path is relative to (local).
    attributes
        The dataset's parsed attributes.
    """

    memory_order: Literal["C", "F"] = "F"

    def __init__(self, store: ByteStore, attributes: DatasetAttributes) -> None:
        self.store = store
        self.attributes = attributes
        self._dtype = np.dtype(attributes.data_type)  # native byte order, as the arrays are read
        self._swap = self._dtype.itemsize > 1 and np.little_endian  # the blocks are big-endian
        self._block = tuple(attributes.block_size)
        self._gzip = attributes.compression.type == "gzip"
        self._root = store.url.rstrip("/")
        self._limit = max_block_bytes(attributes)

    # -- ChunkSource --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.attributes.dimensions)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self._block

    @property
    def fill_value(self) -> Any:
        return 0

    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        out = np.empty(self.extent(grid), dtype=self._dtype, order="F")
        return out if self.decode_into(grid, out) else None

    # -- DirectChunkSource --------------------------------------------------------------------
    def extent(self, grid: tuple[int, ...]) -> tuple[int, ...]:
        """The block's shape (x first), clipped at the dataset's far edges."""
        return clipped_extent(grid, self._block, self.attributes.dimensions)

    def decode_into(self, grid: tuple[int, ...], out: npt.NDArray[Any]) -> bool:
        extent = self.extent(grid)
        check_decode_target(out, extent, f"block {tuple(grid)} of {self._root}")
        key = format_block_key(self.attributes, grid)
        where = f"{self._root}/{key}"
        # One open and one read, bounded as read_block_bytes bounds a block (its size check then read resolve
        # and open the file twice: a fifth of a cold uint8 plane's CPU time here); the read is clamped to the file.
        data = self.store.read_range(key, 0, self._limit + 1)
        if data is None:
            return False
        if len(data) > self._limit:
            raise ChunkDecodeError(f"is larger than the {self._limit}-byte limit for a block of this dataset",
                                   key=where)
        header = check_block_header(decode_block_header(data, key=where), self.attributes, key=where)
        if header.varlength:
            raise UnsupportedFeatureError("N5 varlength blocks in the viewer", key=where)
        dims = header.shape
        direct = dims == extent and out.flags.f_contiguous and out.dtype == self._dtype
        target = out if direct else np.empty(dims, dtype=self._dtype, order="F")
        self._decode_payload(data, header.nbytes, target, where)
        if target is not out:
            if dims == extent:
                out[...] = target
            else:  # stored larger (a full-size edge block) or smaller (padded with 0), as TensorStore reads it
                common = tuple(slice(0, min(d, e)) for d, e in zip(dims, extent, strict=True))
                if any(d < e for d, e in zip(dims, extent, strict=True)):
                    out[...] = 0
                out[common] = target[common]
        return True

    def _decode_payload(self, data: bytes, start: int, target: npt.NDArray[Any], where: str) -> None:
        """The block's data (``data[start:]``) into ``target`` (F-contiguous, native dtype): exactly its size."""
        size = int(target.nbytes)
        if self._gzip:
            got = inflate_gzip_into(data, self.attributes.compression, int(target.ctypes.data), size,
                                    key=where, offset=start, start=start)  # no copy of the data past the header
            if got != size:
                label = "zlib" if self.attributes.compression.use_zlib else "gzip"
                raise ChunkDecodeError(f"{label} data decodes to {got} bytes, expected {size}", key=where, offset=start)
        else:
            if len(data) - start != size:
                raise ChunkDecodeError(f"raw data has {len(data) - start} bytes, expected {size}", key=where,
                                       offset=start)
            target.reshape(-1, order="F").view(np.uint8)[:] = np.frombuffer(data, dtype=np.uint8, offset=start)
        if self._swap:
            _swap_in_place(target)


def _swap_in_place(target: npt.NDArray[Any]) -> None:
    """Byte-swap the contiguous ``target`` in place (big-endian block data to native order).

    Why not ``target.byteswap(inplace=True)``: numpy's cast from a big-endian view of the same
    memory is vectorised, its in-place byteswap is not (a 64³ uint64 block: about 35 µs against
    65 µs here). Neither lets go of the GIL for long, so swaps of two decode threads mostly take turns.
    """
    flat = target.reshape(-1, order="A")  # a view: target is F- (or C-) contiguous
    np.copyto(flat, flat.view(flat.dtype.newbyteorder(">")))


def n5_direct_source(store: ByteStore | None, attributes: DatasetAttributes) -> N5DirectSource | None:
    """The fast source of the dataset when :func:`fast_path_applies`, else ``None`` (TensorStore reads it)."""
    if store is None or not fast_path_applies(store, attributes):
        return None
    return N5DirectSource(store, attributes)
