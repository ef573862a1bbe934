"""Export a source to a new sharded Neuroglancer precomputed volume.

Layout: one scale per source level, keyed ``"<rx>_<ry>_<rz>"`` as TensorStore and CloudVolume name
them; chunks in ``raw`` encoding (x fastest, little endian) inside shards whose data is gzip'd;
sharding from :func:`~napari_shardscope.core.export.sharding_params.choose_sharding` unless given.
Every chunk of the grid is written, zeros included, because CloudVolume refuses missing chunks
unless told to fill them.

Planning reads no voxel; each task then computes and writes one whole shard file (atomically), so
no two tasks write one file. ``info`` is written last: an interrupted export leaves a directory
without ``info``, which no reader mistakes for a dataset.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.dataset import Progress
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.sharding_params import DEFAULT_SHARD_BYTES, choose_sharding
from napari_shardscope.core.export.source import ExportSource, LevelGeometry
from napari_shardscope.core.export.tasks import run_tasks
from napari_shardscope.core.precomputed.info import ScaleInfo, parse_info
from napari_shardscope.core.precomputed.morton import bits_per_dimension, decode_morton
from napari_shardscope.core.precomputed.shard_writer import write_shard
from napari_shardscope.core.precomputed.sharding import ShardingSpec, assign_chunk_ids

DEFAULT_CHUNK = (64, 64, 64)


@dataclass(frozen=True)
class ShardTask:
    """Write one shard: the chunk ids it holds are a contiguous range (identity hash) or listed."""

    dest: str
    level: int
    scale: ScaleInfo
    shard: int
    id_range: tuple[int, int] | None
    ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ShardResult:
    scale: str
    shard: int
    key: str
    chunks: int
    nbytes: int


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote."""

    dest: str
    info: dict[str, Any]
    shards: tuple[ShardResult, ...]

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "dest": self.dest,
            "scales": [s["key"] for s in self.info["scales"]],
            "shard_files": len(self.shards),
            "chunks": sum(s.chunks for s in self.shards),
            "bytes": self.nbytes,
        }


def scale_key(resolution: Sequence[float]) -> str:
    """``"8_8_40"`` — integers print without a decimal point, as other tools name scales."""
    return "_".join(str(int(r)) if float(r).is_integer() else str(r) for r in resolution)


def per_scale_sharding(
    sharding: ShardingSpec | Sequence[ShardingSpec] | None, num_scales: int
) -> list[ShardingSpec | None]:
    """One spec (or ``None``: choose one) per scale; a single spec applies to every scale.

    Raises
    ------
    ArgumentError
        When a list of specs does not have one spec per scale of the source.
    """
    if sharding is None or isinstance(sharding, ShardingSpec):
        return [sharding] * num_scales
    specs = list(sharding)
    if len(specs) != num_scales:
        raise ArgumentError(f"sharding: got {len(specs)} specs for a source of {num_scales} scales "
                            "(give one per scale, or a single spec for all)")
    return list(specs)


def build_info(
    source: ExportSource,
    *,
    chunk_size: Sequence[int] = DEFAULT_CHUNK,
    sharding: ShardingSpec | Sequence[ShardingSpec] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> dict[str, Any]:
    """The output ``info`` (validated by our own parser) for ``source``."""
    desc = source.describe()
    dtype = np.dtype(desc.dtype)
    specs = per_scale_sharding(sharding, len(desc.levels))
    scales = []
    for i, level in enumerate(desc.levels):
        size = (level.shape[2], level.shape[1], level.shape[0])
        chunk = tuple(min(int(c), s) for c, s in zip(chunk_size, size, strict=True))
        grid = tuple(math.ceil(s / c) for s, c in zip(size, chunk, strict=True))
        spec = specs[i] or choose_sharding(grid, math.prod(chunk) * dtype.itemsize, shard_bytes=shard_bytes)
        scales.append(
            {
                "key": scale_key(level.resolution),
                "size": list(size),
                "resolution": list(level.resolution),
                "voxel_offset": list(level.voxel_offset),
                "chunk_sizes": [list(chunk)],
                "encoding": "raw",
                "sharding": spec.to_json(),
            }
        )
    keys = [s["key"] for s in scales]
    if len(set(keys)) != len(keys):
        raise ArgumentError(f"source levels have repeated resolutions {keys}")
    info = {
        "@type": "neuroglancer_multiscale_volume",
        "type": desc.kind,
        "data_type": desc.dtype,
        "num_channels": 1,
        "scales": scales,
    }
    parse_info(info)
    return info


def plan_shard_tasks(dest: str, info: dict[str, Any]) -> list[ShardTask]:
    """One task per non-empty shard of every scale (reads nothing)."""
    parsed = parse_info(info)
    tasks: list[ShardTask] = []
    for level, sc in enumerate(parsed.scales):
        spec = sc.sharding
        assert spec is not None
        total_bits = sum(bits_per_dimension(sc.grid_shape))
        covered_bits = spec.preshift_bits + spec.minishard_bits + spec.shard_bits
        if spec.hash == "identity" and covered_bits >= total_bits:  # each shard is one contiguous id range
            per_shard = 1 << (spec.preshift_bits + spec.minishard_bits)
            for shard in range(spec.num_shards):
                lo = shard * per_shard
                hi = min((shard + 1) * per_shard, 1 << total_bits)
                if lo < hi:
                    tasks.append(ShardTask(dest, level, sc, shard, (lo, hi)))
        else:  # hashed, or identity with ids wrapping around the shard bits: group the grid's ids
            ids = sc.chunk_ids_of_grid()
            shards = assign_chunk_ids(spec, ids).shard
            for shard in np.unique(shards).tolist():
                tasks.append(ShardTask(dest, level, sc, int(shard), None, tuple(int(i) for i in ids[shards == shard])))
    return tasks


def write_shard_task(task: ShardTask, source: ExportSource) -> ShardResult:
    """Read the shard's chunks from ``source`` and write the shard file (runs on a worker)."""
    sc = task.scale
    assert sc.sharding is not None
    if task.id_range is not None:
        candidate = np.arange(task.id_range[0], task.id_range[1], dtype=np.uint64)
    else:
        candidate = np.asarray(task.ids, dtype=np.uint64)
    grid = np.asarray(sc.grid_shape)
    positions = decode_morton(candidate, sc.grid_shape, check=False)
    inside = np.all(positions < grid, axis=1)
    chunks: dict[int, bytes] = {}
    dtype = None
    for cid, pos in zip(candidate[inside].tolist(), positions[inside].tolist(), strict=True):
        start, stop = sc.chunk_bounds(pos)
        box = tuple(slice(a - o, b - o) for a, b, o in zip(start, stop, sc.voxel_offset, strict=True))[::-1]
        block = source.read(task.level, box)
        dtype = dtype or block.dtype.newbyteorder("<")
        chunks[int(cid)] = np.ascontiguousarray(block, dtype=dtype).tobytes()
    store = open_store(task.dest)
    key = write_shard(store, sc.key, sc.sharding, task.shard, chunks)
    return ShardResult(sc.key, task.shard, key, len(chunks), store.size(key) or 0)


def export_precomputed(
    source: ExportSource,
    dest: str,
    *,
    chunk_size: Sequence[int] = DEFAULT_CHUNK,
    sharding: ShardingSpec | Sequence[ShardingSpec] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    scheduler: Any = None,
    num_workers: int | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Export ``source`` to a sharded precomputed volume at ``dest`` (a path or a writable URL).

    Raises
    ------
    ArgumentError
        When ``dest`` already holds a dataset and ``overwrite`` is false.
    """
    store = open_store(dest)
    if store.read("info") is not None and not overwrite:
        raise ArgumentError(
            f"{dest} already holds a precomputed dataset (info exists); pass overwrite=True (CLI: --overwrite)"
        )
    info = build_info(source, chunk_size=chunk_size, sharding=sharding, shard_bytes=shard_bytes)
    tasks = plan_shard_tasks(dest, info)
    results = run_tasks(
        _TaskRunner(source), tasks, scheduler=scheduler, num_workers=num_workers, progress=progress, label="shard"
    )
    store.write("info", json.dumps(info, indent=1).encode())
    return ExportReport(dest, info, tuple(results))


@dataclass(frozen=True)
class _TaskRunner:
    """A picklable callable binding the source to the task function (for Dask workers)."""

    source: ExportSource

    def __call__(self, task: ShardTask) -> ShardResult:
        return write_shard_task(task, self.source)


def level_geometry_of(info: dict[str, Any]) -> list[LevelGeometry]:
    """The geometry of each scale of a precomputed ``info`` (for tests and round trips)."""
    out = []
    for sc in parse_info(info).scales:
        out.append(LevelGeometry((sc.size[2], sc.size[1], sc.size[0]), sc.resolution, sc.voxel_offset))
    return out
