"""One zarr v2 chunk: its key in the store, and its bytes decoded into an array.

A v2 chunk is the array's ``chunks`` shape in full (edge chunks are padded), laid out in the
array's ``order`` and compressed as a whole by the ``compressor`` (or stored raw). Decoding is
capped at that size (:func:`napari_shardscope.core.encoding.decompress`), so a compression bomb
costs no more than one chunk, and a chunk that decodes to any other size is an error: a reader
would otherwise show a shifted or partly-filled chunk as if it were data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_bounded
from napari_shardscope.core.encoding import BLOSC_COMPRESSOR_CODES, BloscExpected, decompress
from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats.zarr2.metadata import ARRAY_FILE, ATTRIBUTES_FILE, Zarr2ArrayMetadata


def decode_chunk(data: bytes, meta: Zarr2ArrayMetadata, *, key: str) -> npt.NDArray[Any]:
    """The chunk stored as ``data`` (at ``key``), as an array of ``meta.chunks`` in ``meta.dtype``.

    Raises
    ------
    ChunkDecodeError
        When the bytes do not decompress, or decode to other than ``meta.chunk_nbytes`` bytes.
    """
    expected = meta.chunk_nbytes
    codec = meta.compressor_id
    raw = bytes(data) if codec is None else decompress(codec, data, max_size=expected, key=key, offset=0, exact=True,
                                                       blosc=blosc_expected(meta))
    if len(raw) != expected:
        what = "stored raw" if codec is None else f"{codec} data decodes to"
        raise ChunkDecodeError(f"chunk {what} {len(raw)} bytes, expected {expected} "
                               f"({'x'.join(map(str, meta.chunks))} x {meta.dtype.itemsize} bytes)",
                               key=key, offset=0)
    return np.frombuffer(raw, dtype=meta.dtype).reshape(meta.chunks, order=meta.order)


def blosc_expected(meta: Zarr2ArrayMetadata) -> BloscExpected | None:
    """What a blosc header must say for this array: numcodecs' compressor, shuffle and the data's element size.

    numcodecs' ``Blosc`` compresses the chunk's array, so its type size is the data type's; its
    ``shuffle`` -1 (``AUTOSHUFFLE``) means bit shuffle for 1-byte elements, byte shuffle otherwise.
    """
    cfg = meta.compressor
    if cfg is None or cfg.get("id") != "blosc":
        return None
    itemsize = meta.dtype.itemsize
    shuffle = cfg.get("shuffle", 1)
    if shuffle == -1:
        shuffle = 2 if itemsize == 1 else 1
    cname = cfg.get("cname")
    return BloscExpected(cname=cname if isinstance(cname, str) and cname in BLOSC_COMPRESSOR_CODES else None,
                         shuffle=shuffle if shuffle in (0, 1, 2) else None, typesizes=(itemsize,))


def read_chunk_bytes(store: ByteStore, meta: Zarr2ArrayMetadata, key: str) -> bytes | None:
    """A chunk's stored bytes (``None`` when absent); ChunkDecodeError when the file is larger than a chunk can be."""
    return read_bounded(store, key, meta.max_chunk_file_bytes, "a chunk of this array", ChunkDecodeError)


def list_chunks(store: ByteStore, path: str, meta: Zarr2ArrayMetadata) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(key, grid position)`` of every stored chunk of the array at ``path``, in key order.

    Positions may lie outside the chunk grid (a shrunk array leaves chunks behind); callers that
    show chunks filter with :meth:`Zarr2ArrayMetadata.contains_grid_position`.
    """
    prefix = f"{path}/" if path else ""
    for key in store.list(prefix):
        grid = meta.parse_chunk_key(key[len(prefix):])
        if grid is not None:
            yield key, grid


def looks_like_chunk(rel: str) -> bool:
    """Whether a key under an array looks like a chunk (digits and separators), valid or not."""
    if rel in (ARRAY_FILE, ATTRIBUTES_FILE) or not rel:
        return False
    return all(p.isascii() and p.isdigit() for p in rel.replace("/", ".").split("."))


def chunk_store_key(path: str, meta: Zarr2ArrayMetadata, grid: tuple[int, ...]) -> str:
    """The store key of chunk ``grid`` of the array at ``path``."""
    return join_key(path, meta.chunk_key(grid))


@dataclass(frozen=True)
class Zarr2ChunkSource:
    """The chunks of one v2 array decoded here, for compressors TensorStore's ``zarr`` driver lacks (``lz4``, ``lzma``).

    A :class:`~napari_shardscope.core.formats.volume_spec.ChunkSource`: the volumes layer wraps it in
    TensorStore's ``virtual_chunked`` driver.
    """

    store: ByteStore
    path: str
    meta: Zarr2ArrayMetadata

    @property
    def shape(self) -> tuple[int, ...]:
        return self.meta.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.meta.dtype

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return self.meta.chunks

    @property
    def fill_value(self) -> Any:
        return self.meta.fill_value

    def read_chunk(self, grid: tuple[int, ...]) -> npt.NDArray[Any] | None:
        key = chunk_store_key(self.path, self.meta, grid)
        data = read_chunk_bytes(self.store, self.meta, key)
        return None if data is None else decode_chunk(data, self.meta, key=f"{self.store.url.rstrip('/')}/{key}")
