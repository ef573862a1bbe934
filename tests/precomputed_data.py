"""Precomputed volumes written by TensorStore for cross-checks (the peer writes, we read)."""

from __future__ import annotations

import json
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
        open_dataset(local).inspector().inspect()
    with pytest.raises(IndexDecodeError) as remote_error:
        open_dataset(remote).inspector().inspect()
    return local_error.value, remote_error.value


#: The sharding of :func:`write_compresso_volume`'s sharded layout: raw data encoding, so each chunk's
#: compresso stream lies verbatim in its shard (a header field can be found and changed in place).
COMPRESSO_SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                      "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def segmentation_labels(size: tuple[int, int, int], seed: int, n: int = 60) -> np.ndarray:
    """Segmentation-like uint64 labels (x, y, z), Fortran order: the nearest of ``n`` random points."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    points = rng.integers(0, size, size=(n, 3))
    grid = np.indices(size).reshape(3, -1).T
    _, nearest = cKDTree(points).query(grid)
    return np.asfortranarray(nearest.reshape(size).astype(np.uint64) * 7919 + 11)


def write_compresso_volume(root: Path, *, sharded: bool, size: tuple[int, int, int] = (64, 48, 16),
                           chunk: tuple[int, int, int] = (32, 24, 16), seed: int = 11) -> np.ndarray:
    """A uint64 segmentation in compresso chunks (the ``compresso`` package), sharded or one file per chunk.

    Returns the labels (x, y, z). Sharded: :data:`COMPRESSO_SHARDING`, shards written by our writer.
    """
    import compresso

    from napari_shardscope.core.bytestore import LocalByteStore
    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector
    from napari_shardscope.core.formats.precomputed.shard_writer import group_by_shard, write_shard
    from napari_shardscope.core.formats.precomputed.sharding import parse_sharding_spec

    labels = segmentation_labels(size, seed)
    scale: dict[str, Any] = {"key": "s0", "size": list(size), "voxel_offset": [0, 0, 0], "resolution": [8, 8, 40],
                             "chunk_sizes": [list(chunk)], "encoding": "compresso"}
    if sharded:
        scale["sharding"] = COMPRESSO_SHARDING
    info = {"@type": "neuroglancer_multiscale_volume", "type": "segmentation", "data_type": "uint64",
            "num_channels": 1, "scales": [scale]}
    root.mkdir(parents=True)
    (root / "info").write_text(json.dumps(info))
    inspector = open_dataset(root).inspector()
    assert isinstance(inspector, PrecomputedInspector)  # a precomputed dataset's inspector names its sources
    sc = inspector.source("s0").scale
    assert sc is not None
    chunks: dict[int, bytes] = {}
    for gx in range(-(-size[0] // chunk[0])):
        for gy in range(-(-size[1] // chunk[1])):
            for gz in range(-(-size[2] // chunk[2])):
                lo = (gx * chunk[0], gy * chunk[1], gz * chunk[2])
                hi = tuple(min(s, a + c) for s, a, c in zip(size, lo, chunk, strict=True))
                block = np.asfortranarray(labels[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]])
                data = bytes(compresso.compress(block))
                if sharded:
                    chunks[sc.chunk_id((gx, gy, gz))] = data
                else:
                    (root / "s0").mkdir(exist_ok=True)
                    (root / "s0" / f"{lo[0]}-{hi[0]}_{lo[1]}-{hi[1]}_{lo[2]}-{hi[2]}").write_bytes(data)
    if sharded:
        spec = parse_sharding_spec(COMPRESSO_SHARDING, key="info")
        store = LocalByteStore(root)
        for shard, ids in group_by_shard(spec, list(chunks)).items():
            write_shard(store, "s0", spec, shard, {i: chunks[i] for i in ids})
    return labels


def write_cseg_volume(root: Path, *, size: tuple[int, int, int] = (40, 36, 20),
                      chunk: tuple[int, int, int] = (16, 16, 8), seed: int = 12) -> np.ndarray:
    """A uint64 segmentation in compressed_segmentation chunk files (TensorStore writes it, unsharded, raw files)."""
    labels = segmentation_labels(size, seed)
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(root)},
        "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
        "scale_metadata": {"size": list(size), "resolution": [8, 8, 40], "chunk_size": list(chunk),
                           "encoding": "compressed_segmentation", "compressed_segmentation_block_size": [8, 8, 8],
                           "voxel_offset": [0, 0, 0]},
        "create": True,
    }
    store = ts.open(spec).result()
    store[..., 0] = labels
    return labels
