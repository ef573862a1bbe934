"""Precomputed volumes written by TensorStore for cross-checks (the peer writes, we read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

SHARDING_MURMUR_GZIP = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 1,
    "hash": "murmurhash3_x86_128",
    "minishard_bits": 2,
    "shard_bits": 3,
    "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}
SHARDING_IDENTITY_RAW = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 0,
    "hash": "identity",
    "minishard_bits": 1,
    "shard_bits": 2,
    "minishard_index_encoding": "raw",
    "data_encoding": "raw",
}


def write_ts_volume(
    path: Path,
    sharding: dict[str, Any] | None,
    *,
    size: tuple[int, int, int] = (50, 37, 21),
    chunk: tuple[int, int, int] = (16, 16, 8),
    offset: tuple[int, int, int] = (3, 5, 7),
    dtype: str = "uint32",
    scales: int = 2,
    seed: int = 0,
) -> list[np.ndarray]:
    """Write a multiscale precomputed volume with TensorStore; return each scale's (x, y, z) data."""
    rng = np.random.default_rng(seed)
    out = []
    for level in range(scales):
        factor = 2**level
        lsize = [max(1, (s + factor - 1) // factor) for s in size]
        scale_md: dict[str, Any] = {
            "size": lsize,
            "resolution": [8.0 * factor, 8.0 * factor, 40.0],
            "chunk_size": list(chunk),
            "encoding": "raw",
            "voxel_offset": [o // factor for o in offset],
        }
        if sharding is not None:
            scale_md["sharding"] = sharding
        spec = {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path)},
            "multiscale_metadata": {"type": "segmentation", "data_type": dtype, "num_channels": 1},
            "scale_metadata": scale_md,
            "create": True,
        }
        store = ts.open(spec).result()
        data = rng.integers(0, 2**31, size=store.shape, dtype=np.dtype(dtype))
        store[...] = data
        out.append(data[..., 0])
    return out


def garble_minishard_index(path: Path, index: Any, minishard: int) -> int:
    """Overwrite ``minishard``'s index in the shard file ``path`` with a gzip header then garbage; its start offset."""
    start, end = index.minishard_range(minishard)
    blob = bytearray(path.read_bytes())
    blob[start:end] = b"\x1f\x8b" + b"\xff" * (end - start - 2)
    path.write_bytes(bytes(blob))
    return int(start)


def inspect_errors(local: Any, remote: str) -> tuple[Any, Any]:
    """The IndexDecodeError that inspect raises on the local dataset and on its remote URL (each must raise)."""
    import pytest

    from napari_shardscope.core.errors import IndexDecodeError
    from napari_shardscope.core.formats import open_dataset

    with pytest.raises(IndexDecodeError) as local_error:
        open_dataset(local).inspector().inspect()  # type: ignore[attr-defined]
    with pytest.raises(IndexDecodeError) as remote_error:
        open_dataset(remote).inspector().inspect()  # type: ignore[attr-defined]
    return local_error.value, remote_error.value
