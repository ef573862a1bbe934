"""Small supervoxel volumes written by TensorStore for the labelmap tests (precomputed, several scales).

Coarser scales are TensorStore's own ``mode`` downsampling of scale 0, computed here independently
of the labelmap code, so "every coarse scale equals the mode downsampling of scale 0" holds for the
base and must keep holding after splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tensorstore as ts

U64 = npt.NDArray[np.uint64]


def mode_downsample(data: npt.NDArray[np.uint64], factors: Sequence[int]) -> U64:
    """TensorStore's mode downsampling of a whole (z, y, x) array."""
    if tuple(factors) == (1, 1, 1):
        return np.asarray(data, dtype=np.uint64)
    view = ts.downsample(ts.array(np.ascontiguousarray(data, dtype=np.uint64)), list(factors), "mode")
    return np.asarray(view.read().result(), dtype=np.uint64)


def voronoi_supervoxels(shape: Sequence[int], n: int, seed: int, *, id_base: int = 1000) -> U64:
    """Supervoxels as nearest-seed cells of ``n`` random seeds, ids spread out above ``id_base``."""
    rng = np.random.default_rng(seed)
    seeds = rng.random((n, 3)) * np.asarray(shape)
    grid = np.stack(np.meshgrid(*(np.arange(s) + 0.5 for s in shape), indexing="ij"), axis=-1)
    d = ((grid[..., None, :] - seeds) ** 2 * np.array([4.0, 1.0, 1.0])).sum(-1)
    nearest = d.argmin(-1)
    ids = id_base + np.sort(rng.choice(50_000, size=n, replace=False)).astype(np.uint64)
    cells: U64 = ids[nearest].astype(np.uint64)
    return cells


def write_precomputed(path: Path, data: U64, factors: Sequence[Sequence[int]], *,
                      chunk_xyz: Sequence[int] = (8, 8, 4), resolution_xyz: Sequence[float] = (4.0, 4.0, 40.0),
                      dtype: str = "uint64", sharded: bool = False) -> list[U64]:
    """Write ``data`` (z, y, x) and its mode downsamplings (factors z, y, x) as precomputed; returns the levels."""
    levels = []
    for i, f in enumerate(factors):
        level = mode_downsample(data, f)
        levels.append(level)
        fxyz = list(reversed([int(v) for v in f]))
        size = [int(s) for s in reversed(level.shape)]
        chunk = [min(int(c), s) for c, s in zip(chunk_xyz, size, strict=True)]
        scale: dict[str, object] = {"size": size, "voxel_offset": [0, 0, 0],
                                    "resolution": [float(r) * k for r, k in zip(resolution_xyz, fxyz, strict=True)],
                                    "chunk_size": chunk, "encoding": "raw"}
        if sharded:
            scale["sharding"] = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
                                 "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip",
                                 "data_encoding": "gzip"}
        spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path) + "/"},
                "multiscale_metadata": {"type": "segmentation", "data_type": dtype, "num_channels": 1},
                "scale_metadata": scale, "create": True, "open": i > 0}
        store = ts.open(spec).result()
        store[ts.d[:].translate_to[0]].write(level.astype(dtype).T[..., np.newaxis]).result()
    return levels
