"""N5 blocks: their paths, their binary header, and their data decoded into numpy.

Axis convention
---------------
N5 lists axes fastest-first (x, y, z — the order of ``dimensions`` in ``attributes.json``). Grid
positions, block paths (``"gx/gy/gz"``) and header dimensions use that order. A block's elements
are stored with x varying fastest, i.e. in C order of the *reversed* dimensions, so
:func:`decode_block` returns an array of shape ``(z, y, x)`` for a 3-D block — the same memory
layout, no copy — and :func:`encode_block` takes one. ``array.T`` gives x, y, z indexing, which is
what TensorStore's ``n5`` driver shows for the block's region.

Binary format (N5 spec 4.0.0, all big-endian)::

    uint16 mode            0 = default, 1 = varlength
    uint16 ndim
    uint32 dims[ndim]      the block's extent, x first
    uint32 num_elements    only in varlength mode
    ...                    the elements, compressed as the dataset says

In default mode the block holds ``prod(dims)`` elements; in varlength mode it holds
``num_elements`` (N5 uses this for non-array payloads such as label multisets), which
:func:`decode_block` returns as a 1-D array.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_bounded
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError
from napari_shardscope.core.formats.n5.attributes import DatasetAttributes
from napari_shardscope.core.formats.n5.compression import decode_payload, encode_payload

MODE_DEFAULT = 0
MODE_VARLENGTH = 1
#: Java arrays hold at most 2**31 - 1 elements, so no valid N5 block holds more.
MAX_BLOCK_ELEMENTS = (1 << 31) - 1
#: Room a compressor may add over a block's raw bytes (gzip, bzip2, xz, lz4 and blosc add well under
#: 1% plus a few hundred bytes of framing; the rest is slack).
COMPRESSION_SLACK_BYTES = 1 << 16
_UINT32_MAX = (1 << 32) - 1


@dataclass(frozen=True)
class BlockHeader:
    """A decoded block header.

    Attributes
    ----------
    mode
        :data:`MODE_DEFAULT` or :data:`MODE_VARLENGTH`.
    shape
        The block's dimensions as stored, x first.
    num_elements
        Elements in the block: ``prod(shape)`` in default mode, the stored count in varlength mode.
    """

    mode: int
    shape: tuple[int, ...]
    num_elements: int

    @property
    def varlength(self) -> bool:
        return self.mode == MODE_VARLENGTH

    @property
    def nbytes(self) -> int:
        """Length of the header in bytes: where the (compressed) data starts."""
        return 4 + 4 * len(self.shape) + (4 if self.varlength else 0)


@dataclass(frozen=True)
class DecodedBlock:
    """A block's header and its elements.

    ``data`` has shape ``header.shape[::-1]`` (``(z, y, x)``) in default mode and is 1-D in
    varlength mode; its dtype is the dataset's, big-endian, and it is read-only (a view of the
    decoded bytes).
    """

    header: BlockHeader
    data: npt.NDArray[Any]


# -- paths -------------------------------------------------------------------------------------


def format_block_path(grid_position: Sequence[int]) -> str:
    """The block's path relative to its dataset: ``(0, 4, 1, 7)`` → ``"0/4/1/7"`` (x first)."""
    if not grid_position or any(int(g) < 0 for g in grid_position):
        raise ArgumentError(f"a block grid position is a non-empty list of non-negative integers, "
                            f"got {tuple(grid_position)}")
    return "/".join(str(int(g)) for g in grid_position)


def parse_block_path(path: str, ndim: int | None = None) -> tuple[int, ...] | None:
    """The grid position a block path names, or ``None`` when ``path`` is not a block path.

    Only canonical decimal components count (``"07"`` is not the block ``"7"`` — readers would never
    look for it there); with ``ndim`` the number of components must match.
    """
    parts = path.split("/")
    if ndim is not None and len(parts) != ndim:
        return None
    if not all(p.isascii() and p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts):
        return None
    return tuple(int(p) for p in parts)


def format_block_key(attributes: DatasetAttributes, grid_position: Sequence[int]) -> str:
    """The block's key in the store: the dataset path joined with the block path."""
    return join_key(attributes.path, format_block_path(grid_position))


def parse_block_key(attributes: DatasetAttributes, key: str) -> tuple[int, ...] | None:
    """The grid position a store key names as a block of this dataset (the inverse of :func:`format_block_key`).

    ``None`` when the key is not under the dataset or is not a block path of its dimensionality;
    the position may lie outside the block grid (``validate`` reports such blocks).
    """
    prefix = f"{attributes.path}/" if attributes.path else ""
    if not key.startswith(prefix):
        return None
    return parse_block_path(key[len(prefix) :], attributes.ndim)


def list_blocks(store: ByteStore, attributes: DatasetAttributes) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(key, grid position)`` of every stored block of a dataset, in key order (one store listing).

    Positions may lie outside the block grid; callers that show blocks filter with
    :meth:`DatasetAttributes.contains_grid_position`.
    """
    for key in store.list(f"{attributes.path}/" if attributes.path else ""):
        grid = parse_block_key(attributes, key)
        if grid is not None:
            yield key, grid


# -- header ------------------------------------------------------------------------------------


def decode_block_header(data: bytes, *, key: str | None = None) -> BlockHeader:
    """Decode the header at the start of a block's bytes.

    Raises
    ------
    ChunkDecodeError
        Truncated header (offset = where the bytes end), or an unknown mode (offset 0).
    """
    if len(data) < 4:
        raise ChunkDecodeError(f"block header truncated: {len(data)} bytes, mode and dimension count need 4",
                               key=key, offset=len(data))
    mode, ndim = struct.unpack_from(">HH", data, 0)
    if mode not in (MODE_DEFAULT, MODE_VARLENGTH):
        raise ChunkDecodeError(f"unknown block mode {mode} (0 = default, 1 = varlength)", key=key, offset=0)
    need = 4 + 4 * ndim + (4 if mode == MODE_VARLENGTH else 0)
    if len(data) < need:
        raise ChunkDecodeError(f"block header truncated: {len(data)} bytes, a {ndim}-D "
                               f"{'varlength' if mode else 'default'} header needs {need}",
                               key=key, offset=len(data))
    shape = struct.unpack_from(f">{ndim}I", data, 4)
    count = struct.unpack_from(">I", data, 4 + 4 * ndim)[0] if mode == MODE_VARLENGTH else math.prod(shape)
    return BlockHeader(mode=mode, shape=tuple(shape), num_elements=count)


def check_block_header(header: BlockHeader, attributes: DatasetAttributes, *, key: str | None = None) -> BlockHeader:
    """``header`` if a block of the dataset ``attributes`` describes may have it, else a :class:`ChunkDecodeError`.

    Why one function: the block decoder and the direct reader (:mod:`.direct_source`) must refuse
    the same blocks with the same messages. Refused: a dimension count differing from the
    dataset's (offset 2), a dimension larger than ``blockSize`` (offset of that dimension;
    TensorStore refuses such blocks too), more elements than an N5 block can hold (offset 4).
    """
    if len(header.shape) != attributes.ndim:
        raise ChunkDecodeError(f"block has {len(header.shape)} dimensions, the dataset has {attributes.ndim}",
                               key=key, offset=2)
    over = [i for i, (d, b) in enumerate(zip(header.shape, attributes.block_size, strict=True)) if d > b]
    if over:  # spec: every block has the block size, except end blocks, which may be smaller
        raise ChunkDecodeError(f"block dimensions {header.shape} exceed the dataset's blockSize "
                               f"{attributes.block_size}", key=key, offset=4 + 4 * over[0])
    if header.num_elements > MAX_BLOCK_ELEMENTS:
        raise ChunkDecodeError(f"block claims {header.num_elements} elements, more than the {MAX_BLOCK_ELEMENTS} "
                               "an N5 block can hold", key=key, offset=4)
    return header


def encode_block_header(header: BlockHeader) -> bytes:
    """The bytes of ``header`` (the inverse of :func:`decode_block_header`)."""
    if header.mode not in (MODE_DEFAULT, MODE_VARLENGTH):
        raise ArgumentError(f"block mode must be 0 (default) or 1 (varlength), got {header.mode}")
    if len(header.shape) > 0xFFFF or any(not 0 <= d <= _UINT32_MAX for d in header.shape):
        raise ArgumentError(f"block dimensions must be at most 65535 uint32 values, got {header.shape}")
    out = struct.pack(f">HH{len(header.shape)}I", header.mode, len(header.shape), *header.shape)
    if header.varlength:
        if not 0 <= header.num_elements <= _UINT32_MAX:
            raise ArgumentError(f"varlength element count must be a uint32, got {header.num_elements}")
        out += struct.pack(">I", header.num_elements)
    return out


# -- data --------------------------------------------------------------------------------------


def decode_block(data: bytes, attributes: DatasetAttributes, *, key: str | None = None) -> DecodedBlock:
    """Decode a whole block (header and data) of the dataset ``attributes`` describes.

    Parameters
    ----------
    data
        The block's bytes, as stored.
    attributes
        The dataset's attributes (data type, compression, number of dimensions).
    key
        The block's key, for error messages.

    Returns
    -------
    DecodedBlock
        ``data`` is ``(z, y, x)``-shaped (reversed header dims) in default mode, 1-D in varlength mode.

    Raises
    ------
    ChunkDecodeError
        Truncated or invalid header, a dimension count differing from the dataset's (offset 2),
        a dimension larger than ``blockSize`` (offset of that dimension; TensorStore refuses such
        blocks too), too many elements (offset 4), data that does not decode or decodes to the wrong size
        (offset = where the data starts).
    """
    header = check_block_header(decode_block_header(data, key=key), attributes, key=key)
    dtype = attributes.dtype
    raw = decode_payload(data[header.nbytes:], attributes.compression, header.num_elements * dtype.itemsize,
                         key=key, offset=header.nbytes, itemsize=dtype.itemsize)
    array = np.frombuffer(raw, dtype=dtype)
    if not header.varlength:
        array = array.reshape(header.shape[::-1])
    return DecodedBlock(header, array)


def encode_block(array: npt.ArrayLike, attributes: DatasetAttributes) -> bytes:
    """Encode a default-mode block of the dataset ``attributes`` describes.

    Parameters
    ----------
    array
        The block's elements with shape ``(z, y, x)`` (reversed N5 order, as :func:`decode_block`
        returns them); cast to the dataset's data type when the cast keeps the kind of number.

    Returns
    -------
    bytes
        Header (dims = ``array.shape[::-1]``) followed by the compressed big-endian elements.
    """
    arr = np.asarray(array)
    if arr.ndim != attributes.ndim:
        raise ArgumentError(f"a block of this dataset has {attributes.ndim} dimensions, got an array of shape "
                            f"{arr.shape}")
    shape = tuple(int(s) for s in arr.shape[::-1])
    header = BlockHeader(MODE_DEFAULT, shape, math.prod(shape))
    return encode_block_header(header) + _encode_elements(arr, attributes)


def encode_varlength_block(values: npt.ArrayLike, shape: Sequence[int], attributes: DatasetAttributes) -> bytes:
    """Encode a varlength-mode block: header dims ``shape`` (x first), then ``len(values)`` elements."""
    arr = np.asarray(values).reshape(-1)
    if len(shape) != attributes.ndim:
        raise ArgumentError(f"a block of this dataset has {attributes.ndim} dimensions, got shape {tuple(shape)}")
    header = BlockHeader(MODE_VARLENGTH, tuple(int(s) for s in shape), int(arr.size))
    return encode_block_header(header) + _encode_elements(arr, attributes)


def _encode_elements(arr: npt.NDArray[Any], attributes: DatasetAttributes) -> bytes:
    dtype = attributes.dtype
    if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
        raise ArgumentError(f"cannot store {arr.dtype} values in a {attributes.data_type} dataset")
    # the compressors read the (big-endian, contiguous) array's memory: no bytes copy of the block
    contiguous = np.ascontiguousarray(arr, dtype=dtype)
    payload = contiguous.data.cast("B") if contiguous.size else b""  # (a view of no elements cannot be cast)
    return encode_payload(payload, attributes.compression, dtype.itemsize)


def read_block(store: ByteStore, attributes: DatasetAttributes, grid_position: Sequence[int]) -> DecodedBlock | None:
    """Read and decode the block at ``grid_position`` (x first), or ``None`` when it is not stored."""
    key = format_block_key(attributes, grid_position)
    data = read_block_bytes(store, attributes, key)
    return None if data is None else decode_block(data, attributes, key=key)


def max_block_bytes(attributes: DatasetAttributes) -> int:
    """Most bytes a stored block of this dataset can take: a header, and twice the raw block plus slack.

    Checked before a block file is read whole, so a damaged dataset with a terabyte (sparse) file
    where a block should be costs a ``stat``, not an allocation. Varlength blocks may hold more
    elements than ``blockSize`` (they are rare: lists, not voxels); they get the same bound.
    """
    header = 8 + 4 * attributes.ndim
    raw = math.prod(attributes.block_size) * attributes.dtype.itemsize
    return header + 2 * raw + COMPRESSION_SLACK_BYTES


def read_block_bytes(store: ByteStore, attributes: DatasetAttributes, key: str) -> bytes | None:
    """The stored bytes of the block at ``key`` (``None`` when absent); ChunkDecodeError when too large."""
    return read_bounded(store, key, max_block_bytes(attributes), "a block of this dataset", ChunkDecodeError)


def write_block(store: ByteStore, attributes: DatasetAttributes, grid_position: Sequence[int],
                array: npt.ArrayLike) -> str:
    """Encode ``array`` (shape ``(z, y, x)``) as the block at ``grid_position`` and write it atomically.

    Returns the block's key. The block is written with the array's own shape, so pass end blocks
    cropped (as Java N5 does) or full-size (as TensorStore does); both are valid N5.
    """
    if not attributes.contains_grid_position(grid_position):
        raise ArgumentError(f"grid position {tuple(grid_position)} is outside the block grid {attributes.grid_shape}")
    key = format_block_key(attributes, grid_position)
    store.write(key, encode_block(array, attributes))
    return key
