"""Export a source to a new sharded Neuroglancer precomputed volume.

Layout: one scale per source level, keyed ``"<rx>_<ry>_<rz>"`` as TensorStore and CloudVolume name
them; chunks in ``raw`` encoding (x fastest, little endian) inside shards whose data is gzip'd;
sharding from :func:`~napari_shardscope.core.export.sharding_params.choose_sharding` unless given.
Every chunk of the grid is written, zeros included, because CloudVolume refuses missing chunks
unless told to fill them.

Planning reads no voxel; each task then computes and writes one whole shard file (atomically), so
no two tasks write one file. ``info`` is written last: an interrupted export leaves a directory
without ``info``, which no reader mistakes for a dataset.

Work is balanced by voxels, not by files: shards are split into *parts* — runs of their chunks that
workers read and compress in parallel, whole shards first, single chunks last (:func:`plan_parts`) —
so every worker shares even one shard of the whole volume (the default sharding puts up to 2 GiB in
one) and all finish within about a chunk of each other. The shard file is assembled from its
compressed parts once they are all done; the file written is the same either way. Each chunk is
compressed as soon as it is read, from a contiguous view or a per-thread scratch buffer, so a shard's
raw voxels are never held in memory, only its compressed chunks.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.encoding import DEFAULT_GZIP_LEVEL, check_level, gzip_compress
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.prepare import claim_destination, make_room, positive_shape
from napari_shardscope.core.export.sharding_params import DEFAULT_SHARD_BYTES, choose_sharding
from napari_shardscope.core.export.source import ExportSource, LevelGeometry
from napari_shardscope.core.formats.precomputed.info import ScaleInfo, parse_info
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension, decode_morton
from napari_shardscope.core.formats.precomputed.shard_writer import write_shard
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids
from napari_shardscope.core.jobs import job_scheduler, run_gathered
from napari_shardscope.core.progress import Progress

DEFAULT_CHUNK = (64, 64, 64)
#: The voxel types of the precomputed spec: TensorStore and Neuroglancer refuse an ``info`` naming another.
DATA_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")
#: The writer allocates a shard index of ``16 * 2**minishard_bits`` bytes per shard: 16 MiB at this limit.
MAX_MINISHARD_BITS = 20
#: Guided parts: each takes about 1/(this * workers) of the voxels not yet handed out (:func:`plan_parts`).
#: 2: the first parts are large (little part overhead), sizes fall by 1/4 per part on 2 workers.
GUIDE = 2


@dataclass(frozen=True)
class ShardTask:
    """Write one shard: the chunk ids it holds are a contiguous range (identity hash) or listed."""

    dest: str
    level: int
    scale: ScaleInfo
    shard: int
    id_range: tuple[int, int] | None
    ids: tuple[int, ...] = ()
    level_gzip: int = DEFAULT_GZIP_LEVEL  # gzip level of gzip-encoded chunks and indexes
    voxels: int = 0  # voxels of the chunks inside the grid: the work the task costs

    @property
    def weight(self) -> int:
        """The work the task costs (voxels it reads and compresses): what parts are sized by."""
        return self.voxels

    def candidate_ids(self) -> npt.NDArray[np.uint64]:
        """The chunk ids the task covers, ascending (some may lie outside the grid)."""
        if self.id_range is not None:
            return np.arange(self.id_range[0], self.id_range[1], dtype=np.uint64)
        return np.asarray(self.ids, dtype=np.uint64)

    def chunks(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """Chunk ids inside the grid (ascending) and their grid positions (x, y, z)."""
        candidate = self.candidate_ids()
        positions = decode_morton(candidate, self.scale.grid_shape, check=False)
        inside = np.all(positions < np.asarray(self.scale.grid_shape), axis=1)
        return candidate[inside], positions[inside]


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
        When a list of specs does not have one spec per scale of the source, or a spec has more than
        :data:`MAX_MINISHARD_BITS` minishard bits (its shard index alone would not fit in memory).
    """
    if sharding is None or isinstance(sharding, ShardingSpec):
        specs: list[ShardingSpec | None] = [sharding] * num_scales
        names = ["sharding"] * num_scales
    else:
        specs = list(sharding)
        names = [f"sharding[{i}]" for i in range(len(specs))]
        if len(specs) != num_scales:
            raise ArgumentError(f"sharding: got {len(specs)} specs for a source of {num_scales} scales "
                                "(give one per scale, or a single spec for all)")
    for name, spec in zip(names, specs, strict=True):
        if spec is not None and spec.minishard_bits > MAX_MINISHARD_BITS:
            raise ArgumentError(f"{name}.minishard_bits is {spec.minishard_bits}; at most {MAX_MINISHARD_BITS} "
                                "(a shard index of 16 * 2**minishard_bits bytes)")
    return specs


def build_info(
    source: ExportSource,
    *,
    chunk_size: Sequence[int] = DEFAULT_CHUNK,
    sharding: ShardingSpec | Sequence[ShardingSpec] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> dict[str, Any]:
    """The output ``info`` (validated by our own parser) for ``source``.

    Raises
    ------
    ArgumentError
        When the source's voxel type is not one of :data:`DATA_TYPES` (OME-Zarr stores the others).
    """
    desc = source.describe()
    dtype = np.dtype(desc.dtype)
    if dtype.name not in DATA_TYPES:
        allowed = ", ".join(DATA_TYPES)
        raise ArgumentError(f"data type {dtype.name} cannot be stored in precomputed (it allows {allowed}): "
                            "export it as OME-Zarr instead (export_zarr3, CLI: --format zarr3)")
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
        "data_type": dtype.name,  # the native-order name: '>u2' is 'uint16' (chunks are written little endian)
        "num_channels": 1,
        "scales": scales,
    }
    parse_info(info)
    return info


def plan_shard_tasks(dest: str, info: dict[str, Any], gzip_level: int = DEFAULT_GZIP_LEVEL) -> list[ShardTask]:
    """One task per non-empty shard of every scale (reads nothing): coarsest scale first, each scale's
    shards largest first.

    The run's last parts decide how evenly the workers finish (:func:`plan_parts` cuts them down to
    single chunks), so the cheapest chunks should come last: a chunk of the finest scale costs the
    least to compress (a downsampled chunk of labels holds more boundaries: 64³ bodies took ~5 ms
    at scale 0 and ~20 ms at scale 2), and the finest scale holds most of the work, so its shards
    are where the guided parts shrink.

    Only shards that can hold a chunk of the grid are visited: a spec with many shard bits (one spec for
    every scale gives a small coarse scale more bits than it needs) must not loop over ``2**shard_bits``.
    """
    parsed = parse_info(info)
    tasks: list[ShardTask] = []
    for level, sc in enumerate(parsed.scales):
        spec = sc.sharding
        assert spec is not None
        total_bits = sum(bits_per_dimension(sc.grid_shape))
        covered_bits = spec.preshift_bits + spec.minishard_bits + spec.shard_bits
        if spec.hash == "identity" and covered_bits >= total_bits:  # each shard is one contiguous id range
            per_shard = 1 << (spec.preshift_bits + spec.minishard_bits)
            for shard in range(-(-(1 << total_bits) // per_shard)):  # the shards holding ids below 2**total_bits
                lo = shard * per_shard
                hi = min((shard + 1) * per_shard, 1 << total_bits)
                tasks.append(ShardTask(dest, level, sc, shard, (lo, hi), level_gzip=gzip_level))
        else:  # hashed, or identity with ids wrapping around the shard bits: group the grid's ids
            ids = sc.chunk_ids_of_grid()
            shards = assign_chunk_ids(spec, ids).shard
            for shard in np.unique(shards).tolist():
                members = tuple(int(i) for i in ids[shards == shard])
                tasks.append(ShardTask(dest, level, sc, int(shard), None, members, level_gzip=gzip_level))
    tasks = [replace(t, voxels=int(chunk_voxels(t.scale, t.chunks()[1]).sum())) for t in tasks]
    return sorted(tasks, key=lambda t: (-t.level, -t.weight))


def chunk_voxels(scale: ScaleInfo, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Voxels of the chunks at grid ``positions`` (x, y, z), edge chunks clipped to the volume."""
    chunk = np.asarray(scale.chunk_size, dtype=np.int64)
    extent = np.minimum(chunk, np.asarray(scale.size, dtype=np.int64) - positions.reshape(-1, 3) * chunk)
    return np.prod(extent, axis=1)  # type: ignore[no-any-return]


def plan_parts(tasks: Sequence[ShardTask], workers: int) -> list[tuple[ShardTask, list[ShardTask]]]:
    """Each shard task with the parts its chunks are compressed in, parts shrinking towards the end.

    The job runs the parts in this order, each worker taking the next one as it frees up, so the run
    ends unevenly by about the last parts' work: 8 + 2 + 1 equal shards on 2 workers left one worker
    idle for most of a shard (a 1.80x scaling where the same deflate work gives 1.97x), and what a
    chunk costs to compress is not known before it is read (a coarse scale's chunk of labels costs
    ~4x a fine one's), so sizes alone cannot balance it. Guided self-scheduling: walking the chunks
    in task order, each part takes about ``1 / (GUIDE * workers)`` of the voxels not yet handed out
    (at least one chunk). The first parts are whole shards (no part overhead), the last are single
    chunks, so whichever worker finishes last does so within about a chunk of the others. A shard of
    the whole volume (the default sharding) is cut the same way, so every worker shares it.

    One worker, or nothing to do: every task is its own single part.
    """
    total = sum(t.voxels for t in tasks)
    if workers <= 1 or total == 0:
        return [(t, [t]) for t in tasks]
    plan = []
    remaining = total  # voxels not yet handed out, this task's included
    for task in tasks:
        plan.append((task, guided_parts(task, remaining, GUIDE * workers)))
        remaining -= task.voxels
    return plan


def guided_parts(task: ShardTask, remaining: int, divisor: int) -> list[ShardTask]:
    """``task``'s chunks in runs of at least ``1/divisor`` of the voxels not yet handed out (one chunk at least).

    ``remaining`` counts the voxels of this task and of every task after it. Each part covers a
    contiguous run of the shard's chunk ids, so the parts' chunks together are the shard's chunks exactly
    once, in id order.
    """
    ids, positions = task.chunks()
    if ids.size <= 1 or task.voxels * divisor <= remaining:
        return [task]  # smaller than a part would be: whole
    cumulative = np.cumsum(chunk_voxels(task.scale, positions))
    bounds = [0]
    while bounds[-1] < ids.size:
        start = bounds[-1]
        base = int(cumulative[start - 1]) if start else 0
        target = (remaining - base) / divisor
        end = int(np.searchsorted(cumulative, base + target, side="left")) + 1  # the run reaches the target
        bounds.append(min(max(end, start + 1), ids.size))
    if len(bounds) == 2:
        return [task]
    parts = []
    for a, b in itertools.pairwise(bounds):
        voxels = int(cumulative[b - 1] - (cumulative[a - 1] if a else 0))
        if task.id_range is not None:  # a run of an id range is an id range: the part stays small to ship
            parts.append(replace(task, id_range=(int(ids[a]), int(ids[b - 1]) + 1), voxels=voxels))
        else:
            parts.append(replace(task, ids=tuple(int(i) for i in ids[a:b]), voxels=voxels))
    return parts


_scratch = threading.local()  # one chunk-sized buffer per worker thread, reused for every chunk it compresses
#: The largest chunk copied through the scratch buffer (each worker thread keeps one this large at most).
SCRATCH_MAX_BYTES = 16 << 20


def _contiguous(block: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """``block`` as a C-contiguous array of ``dtype``: itself when it already is, else a scratch copy.

    The scratch buffer is reused, so compressing a chunk allocates (and page-faults in) no new memory.
    """
    if block.dtype == dtype and block.flags.c_contiguous:
        return block
    nbytes = block.size * dtype.itemsize
    if nbytes > SCRATCH_MAX_BYTES:  # a thread keeps its buffer: huge chunks get a fresh array instead
        return np.ascontiguousarray(block, dtype=dtype)
    buf: npt.NDArray[np.uint8] | None = getattr(_scratch, "buf", None)
    if buf is None or buf.size < nbytes:
        buf = _scratch.buf = np.empty(nbytes, dtype=np.uint8)
    out = buf[:nbytes].view(dtype).reshape(block.shape)
    np.copyto(out, block, casting="same_kind")
    return out


def encode_chunk(block: npt.NDArray[Any], encoding: str, level: int) -> bytes:
    """One chunk's bytes in the shard: ``block`` (z, y, x) little endian, x fastest, then encoded."""
    dtype = block.dtype.newbyteorder("<")
    if encoding == "raw":
        return block.astype(dtype, copy=False).tobytes()  # one copy (C order), not two
    flat = memoryview(_contiguous(block, dtype)).cast("B")  # type: ignore[arg-type]
    return gzip_compress(flat, level)


def encode_shard_chunks(task: ShardTask, source: ExportSource) -> dict[int, bytes]:
    """Read the task's chunks from ``source`` and encode them: ``{chunk id: encoded bytes}`` (runs on a worker)."""
    sc = task.scale
    assert sc.sharding is not None
    ids, positions = task.chunks()
    out: dict[int, bytes] = {}
    for cid, pos in zip(ids.tolist(), positions.tolist(), strict=True):
        start, stop = sc.chunk_bounds(pos)
        box = tuple(slice(a - o, b - o) for a, b, o in zip(start, stop, sc.voxel_offset, strict=True))[::-1]
        out[int(cid)] = encode_chunk(np.asarray(source.read(task.level, box)), sc.sharding.data_encoding,
                                     task.level_gzip)
    return out


def finish_shard(task: ShardTask, parts: Sequence[dict[int, bytes]]) -> ShardResult:
    """Write the shard file of ``task`` from the encoded chunks of its parts (atomically; runs on a worker)."""
    sc = task.scale
    assert sc.sharding is not None
    chunks = parts[0] if len(parts) == 1 else {cid: data for part in parts for cid, data in part.items()}
    store = open_store(task.dest)
    key = write_shard(store, sc.key, sc.sharding, task.shard, chunks, encoded=True, level=task.level_gzip)
    return ShardResult(sc.key, task.shard, key, len(chunks), store.size(key) or 0)


def write_shard_task(task: ShardTask, source: ExportSource) -> ShardResult:
    """Read the shard's chunks from ``source`` and write the shard file (one task, no parts)."""
    return finish_shard(task, [encode_shard_chunks(task, source)])


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
    gzip_level: int = DEFAULT_GZIP_LEVEL,
) -> ExportReport:
    """Export ``source`` to a sharded precomputed volume at ``dest`` (a path or a writable URL).

    With ``overwrite``, a dataset already at ``dest`` is deleted (its ``info`` first) once the export is
    planned, then the new shards are written and the new ``info`` last: no stale shard of the old dataset
    survives, and a failed export leaves no ``info`` over a mix of old and new shards. The shard files an
    unfinished export left in this export's scale directories are refused without ``overwrite`` and deleted
    with it (:func:`~napari_shardscope.core.export.prepare.make_room`).

    ``gzip_level`` (0-9) compresses gzip-encoded chunks and minishard indexes (the default sharding
    gzips both); the default is TensorStore's, 9, so the output is the size TensorStore writes.

    Raises
    ------
    ArgumentError
        When ``dest`` already holds a dataset, or files of an unfinished export, and ``overwrite`` is false;
        when ``dest`` overlaps the source;
        for a ``chunk_size`` that is not 3 positive integers, a voxel type precomputed cannot store, or a
        sharding spec that does not fit the source.
    """
    chunk_size = positive_shape("chunk_size", chunk_size)
    check_level(gzip_level)
    store = open_store(dest)
    replacing = claim_destination(source, dest, store, "info", "precomputed", overwrite)
    info = build_info(source, chunk_size=chunk_size, sharding=sharding, shard_bytes=shard_bytes)
    tasks = plan_shard_tasks(dest, info, gzip_level)
    make_room(store, dest, "info", [f"{sc['key']}/" for sc in info["scales"]], replacing=replacing,
              overwrite=overwrite)
    with job_scheduler(scheduler, num_workers) as (sched, workers):
        results = run_gathered(_PartRunner(source), finish_shard, plan_parts(tasks, workers), scheduler=sched,
                               num_workers=num_workers, progress=progress, label="shard")
    store.write("info", json.dumps(info, indent=1).encode())
    return ExportReport(dest, info, tuple(results))


@dataclass(frozen=True)
class _PartRunner:
    """A picklable callable binding the source to the part function (for Dask workers)."""

    source: ExportSource

    def __call__(self, task: ShardTask) -> dict[int, bytes]:
        return encode_shard_chunks(task, self.source)


def level_geometry_of(info: dict[str, Any]) -> list[LevelGeometry]:
    """The geometry of each scale of a precomputed ``info`` (for tests and round trips)."""
    out = []
    for sc in parse_info(info).scales:
        out.append(LevelGeometry((sc.size[2], sc.size[1], sc.size[0]), sc.resolution, sc.voxel_offset))
    return out
