"""A precomputed chunk's ``encoding`` undone here, for chunks TensorStore's driver does not read.

TensorStore decodes precomputed chunks on the viewer's hot path. Two kinds of data users have it
does not read, so the format decodes them itself (behind TensorStore's ``virtual_chunked`` driver,
see :class:`PrecomputedChunkSource`):

* ``compresso`` segmentation (Seung lab's codec, the ``compresso`` package), sharded or not;
* CloudVolume's local layout: unsharded chunk files stored as ``NAME.gz`` (its default for
  ``file://``) or ``NAME.br`` (``compress="br"``), whose content is the chunk's ordinary encoding,
  gzipped or brotli-compressed.

Encodings read here: ``raw`` (x fastest, then channels), ``compressed_segmentation`` (the
``compressed-segmentation`` package) and ``compresso``. Each decode is checked against the chunk's
extent before anything is allocated from the stored sizes, and a chunk of the wrong size is a
:class:`~napari_shardscope.core.errors.ChunkDecodeError` naming the key.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, read_bounded
from napari_shardscope.core.encoding import gunzip, unbrotli
from napari_shardscope.core.errors import ChunkDecodeError, UnsupportedFeatureError
from napari_shardscope.core.formats.precomputed.compresso_stream import check_compresso_stream
from napari_shardscope.core.formats.precomputed.info import PrecomputedInfo, ScaleInfo

#: Encodings :func:`decode_chunk_encoding` reads.
OWN_ENCODINGS = ("raw", "compressed_segmentation", "compresso")
#: Suffixes CloudVolume gives chunk files it compressed itself (its ``file://`` layout).
GZIP_SUFFIX = ".gz"
BROTLI_SUFFIX = ".br"


def decode_chunk_encoding(data: bytes, info: PrecomputedInfo, scale: ScaleInfo, extent: tuple[int, int, int], *,
                          key: str) -> npt.NDArray[Any]:
    """The chunk of ``extent`` voxels (x, y, z) stored as ``data``, as an ``(x, y, z, channel)`` array.

    Raises
    ------
    ChunkDecodeError
        Bytes that do not decode, or decode to another extent than the chunk's.
    UnsupportedFeatureError
        An encoding not in :data:`OWN_ENCODINGS` (TensorStore reads those where the layout allows).
    """
    channels = info.num_channels
    dtype = info.dtype
    if scale.encoding == "raw":
        expected = math.prod(extent) * channels * dtype.itemsize
        if len(data) != expected:
            raise ChunkDecodeError(f"raw chunk has {len(data)} bytes, expected {expected}", key=key, offset=0)
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape((*extent, channels), order="F")
    if scale.encoding == "compressed_segmentation":
        block = scale.compressed_segmentation_block_size or (8, 8, 8)
        return decode_compressed_segmentation(data, dtype, block, extent, channels, key=key)
    if scale.encoding == "compresso":
        return decode_compresso(data, dtype, extent, channels, key=key)
    raise UnsupportedFeatureError(f"precomputed '{scale.encoding}' chunks in this layout", key=key,
                                  detail=f"read here: {', '.join(OWN_ENCODINGS)}")


def decode_compressed_segmentation(data: bytes, dtype: np.dtype[Any], block: tuple[int, int, int],
                                   extent: tuple[int, int, int], channels: int, *, key: str) -> npt.NDArray[Any]:
    """A compressed_segmentation chunk of ``extent`` voxels as ``(x, y, z, channel)``, every offset checked first."""
    import compressed_segmentation

    if dtype.itemsize not in (4, 8) or dtype.kind not in "ui":
        raise ChunkDecodeError(f"compressed_segmentation holds 32- or 64-bit labels, the scale's data type is {dtype}",
                               key=key, offset=0)
    check_compressed_segmentation(data, extent, channels, block, dtype.itemsize, key=key)
    shape = (*extent, channels) if channels > 1 else extent
    try:
        out = compressed_segmentation.decompress(bytes(data), shape, dtype, block_size=block, order="F")
    except Exception as exc:  # the codec raises ValueError/RuntimeError/IndexError for bad bytes
        raise ChunkDecodeError(f"bad compressed_segmentation data ({exc})", key=key, offset=0) from exc
    out = check_decoded(np.asarray(out), shape, dtype, "compressed_segmentation", key=key)
    return out.reshape((*extent, channels), order="F")


#: Most voxels in one compressed_segmentation block (256³; writers use 8³): larger sizes are damage, and
#: would overflow the 64-bit offset arithmetic below.
MAX_CSEG_BLOCK_VOXELS = 1 << 24
#: Bit widths a compressed_segmentation block header may give its packed values.
_CSEG_BITS = (0, 1, 2, 4, 8, 16, 32)


def check_compressed_segmentation(data: bytes, extent: tuple[int, int, int], channels: int,
                                  block: tuple[int, int, int], itemsize: int, *, key: str) -> None:
    """Check that every offset a compressed_segmentation chunk holds stays inside it (ChunkDecodeError if not).

    The ``compressed-segmentation`` decoder follows the channel offsets, block headers, packed values
    and lookup tables without bounds checks: damaged bytes (or bytes of another encoding) made it
    read past the buffer and crash the process with a segmentation fault. Checked here, with
    numpy, before it is called: per channel, its offset and the block headers; per block, a known
    bit width, packed values inside the channel, and a lookup table long enough for the largest
    index the block uses (decoded only for blocks whose table could be too short).
    """
    if len(data) % 4:
        raise ChunkDecodeError(f"compressed_segmentation chunk of {len(data)} bytes is not whole 32-bit words",
                               key=key, offset=0)
    words = np.frombuffer(data, dtype="<u4")
    n = len(words)
    if not all(b > 0 for b in block) or math.prod(block) > MAX_CSEG_BLOCK_VOXELS:
        raise ChunkDecodeError(f"compressed_segmentation block size {list(block)} is not 1 to "
                               f"{MAX_CSEG_BLOCK_VOXELS} voxels", key=key, offset=0)
    grid = [-(-e // b) for e, b in zip(extent, block, strict=True)]
    nblocks, block_voxels = math.prod(grid), math.prod(block)
    entry_words = 2 if itemsize == 8 else 1
    if n < channels:
        raise ChunkDecodeError(f"compressed_segmentation chunk of {n} words cannot hold {channels} channel offsets",
                               key=key, offset=0)
    for c in range(channels):
        start = int(words[c])
        end = int(words[c + 1]) if c + 1 < channels else n
        if not (channels <= start and start + 2 * nblocks <= end <= n):
            raise ChunkDecodeError(f"compressed_segmentation channel {c} at word {start} (to {end}) does not hold "
                                   f"its {nblocks} block headers inside the {n}-word chunk", key=key, offset=4 * c)
        headers = words[start:start + 2 * nblocks].reshape(nblocks, 2).astype(np.int64)
        table = (headers[:, 0] & 0xFFFFFF) + start
        bits = headers[:, 0] >> 24
        values = headers[:, 1] + start
        bad = ~np.isin(bits, _CSEG_BITS) | (values + (block_voxels * bits + 31) // 32 > end) | (table >= end)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ChunkDecodeError(f"compressed_segmentation block {i} of channel {c}: bad header (bits "
                                   f"{int(bits[i])}, values at word {int(values[i])}, table at word {int(table[i])})",
                                   key=key, offset=4 * (start + 2 * i))
        # an index may be as large as its bit width allows whatever the block's voxel count (a block of
        # 64 voxels at 16 bits can name entry 51,076): only a table long enough for 2**bits entries is safe unread
        for j in np.flatnonzero(table + entry_words * (np.int64(1) << bits) > end):
            i = int(j)
            width = int(bits[i])
            pos = np.arange(block_voxels, dtype=np.int64) * width
            packed = words[int(values[i]) + pos // 32].astype(np.uint64) if width else np.zeros(1, np.uint64)
            used = int(((packed >> (pos % 32).astype(np.uint64)) & np.uint64((1 << width) - 1)).max()) if width else 0
            if int(table[i]) + entry_words * (used + 1) > end:
                raise ChunkDecodeError(f"compressed_segmentation block {i} of channel {c}: lookup table at word "
                                       f"{int(table[i])} is shorter than index {used} needs", key=key,
                                       offset=4 * (start + 2 * i))


def decode_compresso(data: bytes, dtype: np.dtype[Any], extent: tuple[int, int, int], channels: int, *,
                     key: str) -> npt.NDArray[Any]:
    """A compresso chunk of ``extent`` voxels as ``(x, y, z, 1)``; the whole stream is checked before C++ decodes it."""
    try:
        import compresso
    except ImportError as exc:  # pragma: no cover - compresso is in the codecs extra
        raise UnsupportedFeatureError("precomputed 'compresso' chunks need the 'compresso' package", key=key,
                                      detail="pip install 'napari-shardscope[codecs]'") from exc
    if channels != 1:
        raise UnsupportedFeatureError("compresso with more than one channel", key=key)
    check_compresso_stream(data, extent, dtype.itemsize, key=key)  # every field, before C++ trusts any
    try:
        out = compresso.decompress(bytes(data))
    except Exception as exc:  # compresso.DecodeError for what its own checks catch
        raise ChunkDecodeError(f"bad compresso data ({exc})", key=key, offset=0) from exc
    return check_decoded(np.asarray(out), extent, dtype, "compresso", key=key)[..., np.newaxis]


def check_decoded(out: npt.NDArray[Any], shape: tuple[int, ...], dtype: np.dtype[Any], what: str, *,
                  key: str) -> npt.NDArray[Any]:
    """``out`` as an array of ``shape`` and ``dtype``; a decoder that returned anything else is an error.

    The last line of defence behind the header checks: a C decoder's output whose shape, data type or
    value count is not what the spec implies is a :class:`ChunkDecodeError`, never voxels.
    """
    if out.shape != tuple(shape) or out.dtype.itemsize != dtype.itemsize or out.dtype.kind not in "uib":
        raise ChunkDecodeError(f"{what} data decoded to {out.dtype} {list(out.shape)}, the chunk is {dtype} "
                               f"{list(shape)}", key=key, offset=0)
    return out.view(dtype) if out.dtype != dtype else out


def max_chunk_bytes(info: PrecomputedInfo, extent: tuple[int, int, int]) -> int:
    """Most bytes a chunk of ``extent`` voxels can take stored or encoded: twice its raw size, plus slack."""
    return 2 * math.prod(extent) * info.num_channels * info.dtype.itemsize + (1 << 16)


def gzipped_layout(root: str | None, scale: ScaleInfo) -> bool:
    """Whether an unsharded scale on the local disk stores its chunk files as ``NAME.gz`` (CloudVolume's layout).

    Decided from the first chunk file found in the scale's directory (a ``scandir`` that stops at
    once); remote stores are never in this layout (CloudVolume uploads gzip with a content encoding).
    """
    if root is None or scale.sharding is not None:
        return False
    try:
        with os.scandir(os.path.join(root, scale.key)) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith((GZIP_SUFFIX, BROTLI_SUFFIX)):
                    return True
                if "_" in name and "-" in name:
                    return False
    except OSError:
        return False
    return False


class ScaleChunkGeometry:
    """The array a precomputed scale's chunk source presents: ``(x, y, z, channel)`` from 0, fill 0.

    Shared by every source of a scale's chunks (this module's and the raw fast path's), so they
    cannot disagree with each other or with the array TensorStore's driver opens.
    """

    info: PrecomputedInfo
    scale: ScaleInfo

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.scale.size, self.info.num_channels)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.info.dtype

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return (*self.scale.chunk_size, self.info.num_channels)

    @property
    def fill_value(self) -> Any:
        return 0


@dataclass(frozen=True)
class PrecomputedChunkSource(ScaleChunkGeometry):
    """One precomputed scale's chunks decoded here (:mod:`module docstring <.chunk_encoding>` says when).

    A :class:`~napari_shardscope.core.formats.volume_spec.ChunkSource` shaped ``(x, y, z, channel)``
    from 0, like the array TensorStore's driver opens (translated to 0), so the scale's transform
    presents it the same way. ``read_sharded`` reads one chunk's bytes of a sharded scale (the
    inspector's shard reader, data encoding undone).
    """

    store: ByteStore
    info: PrecomputedInfo
    scale: ScaleInfo
    read_sharded: Any = field(default=None, compare=False)


    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        position = (grid[0], grid[1], grid[2])
        start, stop = self.scale.chunk_bounds(position)
        extent = (stop[0] - start[0], stop[1] - start[1], stop[2] - start[2])
        if self.scale.sharding is not None:
            data = self.read_sharded(self.scale.chunk_id(position))
            key = f"{self.store.url.rstrip('/')}/{self.scale.key} chunk {self.scale.chunk_id(position)}"
        else:
            data, key = self._read_file(self.scale.unsharded_chunk_key(position), extent)
        if data is None:
            return None
        return decode_chunk_encoding(data, self.info, self.scale, extent, key=key)

    def _read_file(self, name: str, extent: tuple[int, int, int]) -> tuple[bytes | None, str]:
        """A chunk file's bytes, gunzipped when it is stored as ``NAME.gz``; ``None`` when absent."""
        where = f"{self.store.url.rstrip('/')}/{name}"
        cap = max_chunk_bytes(self.info, extent)
        data = read_bounded(self.store, name + GZIP_SUFFIX, cap, "a chunk file", ChunkDecodeError)
        if data is not None:
            return gunzip(data, key=where + GZIP_SUFFIX, offset=0, max_size=cap), where + GZIP_SUFFIX
        data = read_bounded(self.store, name + BROTLI_SUFFIX, cap, "a chunk file", ChunkDecodeError)
        if data is not None:
            return unbrotli(data, key=where + BROTLI_SUFFIX, offset=0, max_size=cap), where + BROTLI_SUFFIX
        return read_bounded(self.store, name, cap, "a chunk file", ChunkDecodeError), where
