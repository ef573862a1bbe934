"""A synthetic supervoxel base for the proofreading benchmark: blocky cells, 2 scales, sharded precomputed.

Blocky labels make gzip do real work, and a base of a known size is written in seconds, so the
benchmarks measure the labelmap, not the data generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorstore as ts


def write_blocky_base(path: Path, shape: Sequence[int], cell: Sequence[int], chunk_xyz: Sequence[int],
                      shard_bits: int) -> np.ndarray:
    """Supervoxels of ``cell``-sized boxes (z, y, x) in a (z, y, x) ``shape``; scales 1 and 2 (x, y)."""
    z, y, x = np.ogrid[0 : shape[0], 0 : shape[1], 0 : shape[2]]
    nx, ny = -(-shape[2] // cell[2]), -(-shape[1] // cell[1])
    sv = (1 + (x // cell[2]) + nx * (y // cell[1]) + nx * ny * (z // cell[0])).astype(np.uint64)
    for i, f in enumerate((1, 2)):
        level = sv[:, ::f, ::f]
        spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)},
                "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
                "scale_metadata": {"size": [level.shape[2], level.shape[1], level.shape[0]],
                                   "resolution": [8.0 * f, 8.0 * f, 40.0], "encoding": "raw",
                                   "chunk_size": list(chunk_xyz),
                                   "sharding": {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                                                "preshift_bits": 3, "minishard_bits": 1, "shard_bits": shard_bits,
                                                "minishard_index_encoding": "gzip", "data_encoding": "gzip"}},
                "create": True, "open": i > 0}
        ts.open(spec).result()[..., 0].write(level.T).result()
    return sv
