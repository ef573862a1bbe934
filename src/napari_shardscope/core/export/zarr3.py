"""Export a source to an OME-Zarr 0.5 group of Zarr v3 arrays with ``sharding_indexed``.

One array per source level (``"0"``, ``"1"``, …; axes z, y, x in nanometres, with ``scale`` and
``translation`` coordinate transformations), each sharded: inner chunks (64³ by default) encoded
``bytes`` + gzip, shard index ``bytes`` + ``crc32c`` at the end — the layout TensorStore and
zarr-python write by default. One task per shard file; the ``zarr.json`` documents are written
last, so an interrupted export is not mistaken for a dataset.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import join_key, open_store
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.precomputed import ExportReport, ShardResult
from napari_shardscope.core.export.prepare import claim_destination, make_room, positive_shape
from napari_shardscope.core.export.source import ExportSource
from napari_shardscope.core.formats.zarr3.metadata import parse_array_metadata, parse_group_metadata
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.sharding import encode_shard_array
from napari_shardscope.core.jobs import run_tasks
from napari_shardscope.core.progress import Progress

DEFAULT_INNER = (64, 64, 64)
#: Shards of at most this many uncompressed bytes (whole inner chunks per axis).
DEFAULT_SHARD_BYTES = 1 << 28


def choose_shard_shape(
    shape: Sequence[int], inner: Sequence[int], itemsize: int, shard_bytes: int = DEFAULT_SHARD_BYTES
) -> tuple[int, ...]:
    """A shard shape of whole inner chunks, grown evenly per axis until ``shard_bytes``."""
    limits = [math.ceil(s / c) for s, c in zip(shape, inner, strict=True)]
    chunk_bytes = math.prod(inner) * itemsize
    per_axis = [1] * len(shape)
    grown = True
    while grown:  # double each axis in turn while the shard stays under budget and inside the array
        grown = False
        for axis, limit in enumerate(limits):
            trial = min(per_axis[axis] * 2, limit)
            if trial > per_axis[axis] and math.prod(per_axis) // per_axis[axis] * trial * chunk_bytes <= shard_bytes:
                per_axis[axis] = trial
                grown = True
    return tuple(n * c for n, c in zip(per_axis, inner, strict=True))


def array_metadata(
    shape: Sequence[int], dtype: np.dtype[Any], shard: Sequence[int], inner: Sequence[int]
) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(inner),
                    "codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "gzip", "configuration": {"level": 5}},
                    ],
                    "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                    "index_location": "end",
                },
            }
        ],
        "dimension_names": ["z", "y", "x"],
    }


@dataclass(frozen=True)
class ZarrShardTask:
    dest: str
    level: int
    path: str
    metadata: dict[str, Any]
    shard: tuple[int, ...]


def write_zarr_shard(task: ZarrShardTask, source: ExportSource) -> ShardResult:
    """Read one shard's region, pad it with the fill value and write the shard file."""
    store = open_store(task.dest)
    meta = parse_array_metadata(task.metadata, key=join_key(task.path, "zarr.json"))
    reader = Zarr3ArrayReader(store, task.path, meta)
    assert reader.sharding is not None
    shard_shape = meta.chunk_shape
    box = tuple(slice(p * c, min((p + 1) * c, s)) for p, c, s in zip(task.shard, shard_shape, meta.shape, strict=True))
    data = source.read(task.level, box)
    block = np.zeros(shard_shape, dtype=meta.dtype)
    block[tuple(slice(0, b.stop - b.start) for b in box)] = data
    key = reader.shard_key(task.shard)
    if not np.any(block):
        return ShardResult(task.path, _flat(task.shard, reader.shard_grid_shape), key, 0, 0)
    blob = encode_shard_array(block, reader.sharding, meta.fill_scalar)
    store.write(key, blob)
    chunks = math.prod(reader.chunks_per_shard)
    return ShardResult(task.path, _flat(task.shard, reader.shard_grid_shape), key, chunks, len(blob))


def _flat(position: Sequence[int], grid: Sequence[int]) -> int:
    return int(np.ravel_multi_index(tuple(position), tuple(grid)))


@dataclass(frozen=True)
class _Runner:
    source: ExportSource

    def __call__(self, task: ZarrShardTask) -> ShardResult:
        return write_zarr_shard(task, self.source)


def export_zarr3(
    source: ExportSource,
    dest: str,
    *,
    inner_chunk: Sequence[int] = DEFAULT_INNER,
    shard_shape: Sequence[int] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    name: str = "volume",
    scheduler: Any = None,
    num_workers: int | None = None,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Export ``source`` as an OME-Zarr 0.5 multiscale group of sharded Zarr v3 arrays at ``dest``.

    Shards holding only zeros are not written (a missing shard reads as the fill value 0). A segmentation
    source gets OME-Zarr ``image-label`` metadata, so readers open the group as labels, not as an image.

    With ``overwrite``, a dataset already at ``dest`` is deleted (every ``zarr.json`` first) once the export is
    planned: a shard of the old dataset where the new one is all zero must not survive, since a missing
    shard is what says "zero". For the same reason the shards an unfinished export left in this export's
    array directories are refused without ``overwrite`` and deleted with it. The ``zarr.json`` documents
    are written last.

    Raises
    ------
    ArgumentError
        When ``dest`` already holds a dataset, or files of an unfinished export, and ``overwrite`` is false;
        when ``dest`` overlaps the source;
        for an ``inner_chunk`` or ``shard_shape`` that is not 3 positive integers (whole inner chunks).
    """
    inner_chunk = positive_shape("inner_chunk", inner_chunk)
    store = open_store(dest)
    replacing = claim_destination(source, dest, store, "zarr.json", "zarr", overwrite)
    desc = source.describe()
    dtype = np.dtype(desc.dtype)
    if shard_shape is not None:
        shard_shape = positive_shape("shard_shape", shard_shape)
        if any(v % c for v, c in zip(shard_shape, inner_chunk, strict=True)):
            raise ArgumentError(
                f"shard_shape {list(shard_shape)} must be 3 positive multiples of the inner chunk {list(inner_chunk)}"
            )
    tasks: list[ZarrShardTask] = []
    metas: list[dict[str, Any]] = []
    datasets = []
    for level, geo in enumerate(desc.levels):
        inner = tuple(min(int(c), s) for c, s in zip(inner_chunk, geo.shape, strict=True))
        if shard_shape is None:
            shard = choose_shard_shape(geo.shape, inner, dtype.itemsize, shard_bytes)
        else:  # an axis shorter than the inner chunk (coarse levels) is one chunk, so one chunk per shard there
            shard = tuple(sh if i == int(c) else i for sh, i, c in zip(shard_shape, inner, inner_chunk, strict=True))
        meta = array_metadata(geo.shape, dtype, shard, inner)
        parse_array_metadata(meta, key=f"{level}/zarr.json")
        metas.append(meta)
        grid = [math.ceil(s / c) for s, c in zip(geo.shape, shard, strict=True)]
        tasks.extend(ZarrShardTask(dest, level, str(level), meta, pos) for pos in product(*(range(g) for g in grid)))
        res_zyx = [geo.resolution[2], geo.resolution[1], geo.resolution[0]]
        off_zyx = [geo.voxel_offset[2] * res_zyx[0], geo.voxel_offset[1] * res_zyx[1], geo.voxel_offset[0] * res_zyx[2]]
        datasets.append(
            {
                "path": str(level),
                "coordinateTransformations": [
                    {"type": "scale", "scale": res_zyx},
                    {"type": "translation", "translation": off_zyx},
                ],
            }
        )
    make_room(store, dest, "zarr.json", [f"{level}/" for level in range(len(metas))], replacing=replacing,
              overwrite=overwrite)
    results = run_tasks(
        _Runner(source), tasks, scheduler=scheduler, num_workers=num_workers, progress=progress, label="shard"
    )
    for level, meta in enumerate(metas):
        store.write(f"{level}/zarr.json", json.dumps(meta, indent=1).encode())
    ome: dict[str, Any] = {
        "version": "0.5",
        "multiscales": [
            {
                "name": name,
                "axes": [{"name": a, "type": "space", "unit": "nanometer"} for a in ("z", "y", "x")],
                "datasets": datasets,
            }
        ],
    }
    if desc.kind == "segmentation":
        ome["image-label"] = {}  # every field of OME-Zarr 0.5 image-label is optional; its presence says "labels"
    group = {"zarr_format": 3, "node_type": "group", "attributes": {"ome": ome}}
    parse_group_metadata(group, key="zarr.json")
    store.write("zarr.json", json.dumps(group, indent=1).encode())
    info = {"format": "ome-zarr", "scales": [{"key": str(i)} for i in range(len(metas))]}
    return ExportReport(dest, info, tuple(r for r in results if r.nbytes))
