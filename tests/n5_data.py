"""Shared helpers of the N5 tests (no tests here): writing datasets with our encoder and with TensorStore.

Arrays are in N5 order (x, y, z), the order TensorStore's ``n5`` driver indexes; our block codec
takes and returns ``(z, y, x)`` arrays, hence the ``.T`` where the two meet.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.formats.n5.attributes import DatasetAttributes, parse_dataset_attributes, write_attributes
from napari_shardscope.core.formats.n5.block import write_block

#: Compressions TensorStore's n5 driver reads and writes (it has no lz4).
TS_COMPRESSIONS: list[dict[str, Any]] = [
    {"type": "raw"},
    {"type": "gzip"},
    {"type": "gzip", "level": 9, "useZlib": True},
    {"type": "bzip2", "blockSize": 3},
    {"type": "xz", "preset": 2},
    {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
    {"type": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2},
    {"type": "zstd", "level": 5},
]


def compression_id(comp: dict[str, Any]) -> str:
    return "-".join(str(v) for v in comp.values())


def make_attributes(dimensions: Sequence[int], block_size: Sequence[int], data_type: str,
                    compression: dict[str, Any], path: str = "") -> DatasetAttributes:
    return parse_dataset_attributes({"dimensions": list(dimensions), "blockSize": list(block_size),
                                     "dataType": data_type, "compression": compression}, path=path)


def random_array(shape: Sequence[int], data_type: str, seed: int = 0) -> np.ndarray:
    """Random values of ``data_type``, never 0 (TensorStore skips blocks equal to the fill value)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(data_type)
    if dtype.kind == "f":
        values = rng.normal(size=shape) * 1000
        values[values == 0] = 1.5
        return values.astype(dtype)
    info = np.iinfo(dtype)
    ints = rng.integers(max(info.min, -(1 << 62)) if info.min < 0 else 1, min(info.max, 1 << 62),
                        size=shape, endpoint=True).astype(dtype)
    odd: np.ndarray = ints | np.asarray(1, dtype=dtype)
    return odd


def iter_blocks(array: np.ndarray, block_size: Sequence[int], *,
                full_end_blocks: bool = False) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """``(grid_position, block)`` of an x,y,z ``array``; blocks are (z, y, x), end blocks cropped or padded."""
    grid = [-(-s // b) for s, b in zip(array.shape, block_size, strict=True)]
    for pos in itertools.product(*(range(g) for g in grid)):
        sl = tuple(slice(p * b, (p + 1) * b) for p, b in zip(pos, block_size, strict=True))
        block = array[sl]
        if full_end_blocks and block.shape != tuple(block_size):
            padded = np.zeros(tuple(block_size), dtype=array.dtype)
            padded[tuple(slice(0, s) for s in block.shape)] = block
            block = padded
        yield tuple(pos), block.T


def write_dataset(root: Path, array: np.ndarray, block_size: Sequence[int], compression: dict[str, Any], *,
                  path: str = "", full_end_blocks: bool = False, skip: Sequence[tuple[int, ...]] = (),
                  extra: dict[str, Any] | None = None) -> DatasetAttributes:
    """Write an x,y,z ``array`` as an N5 dataset with OUR encoder; returns its attributes."""
    store = LocalByteStore(root)
    attrs = make_attributes(array.shape, block_size, array.dtype.name, compression, path=path)
    write_attributes(store, {**attrs.to_json(), **(extra or {})}, path)
    for pos, block in iter_blocks(array, block_size, full_end_blocks=full_end_blocks):
        if pos not in skip:
            write_block(store, attrs, pos, block)
    return attrs


def ts_create(root: Path, array: np.ndarray, block_size: Sequence[int], compression: dict[str, Any]) -> Any:
    """Write an x,y,z ``array`` as an N5 dataset with TensorStore."""
    store = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(root)},
                     "metadata": {"dimensions": list(array.shape), "blockSize": list(block_size),
                                  "dataType": array.dtype.name, "compression": compression},
                     "create": True, "delete_existing": True}).result()
    store[...] = array
    return store


def ts_read(root: Path) -> np.ndarray:
    """Read a whole N5 dataset with TensorStore (x,y,z)."""
    store = ts.open({"driver": "n5", "kvstore": {"driver": "file", "path": str(root)}, "open": True}).result()
    return np.asarray(store.read().result())
