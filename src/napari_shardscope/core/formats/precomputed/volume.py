"""A precomputed volume's :class:`~napari_shardscope.core.formats.volume_spec.VolumeSpec`, from its parsed ``info``.

Every scale is opened with TensorStore's ``neuroglancer_precomputed`` driver (``scale_index``),
which presents it as ``(x, y, z, channel)`` with the domain starting at ``voxel_offset``. The
presented array drops the channel of a single-channel volume and reverses the axes — a lazy view
— to napari's slowest-first ``(z, y, x)`` or ``(c, z, y, x)``. Resolutions are nanometres by the
spec; a scale's world offset is ``voxel_offset * resolution`` and its downsampling factors are its
resolution over the first scale's, which is how Neuroglancer relates the scales too.

Scales that driver does not read — ``compresso`` chunks, CloudVolume's ``NAME.gz`` chunk files — are
read by :class:`~.chunk_encoding.PrecomputedChunkSource` in the same ``(x, y, z, channel)`` shape.
Raw-encoded scales on local disk, which it reads, are decoded faster here
(:class:`~.raw_source.RawChunkSource`: libdeflate, no copies); the spec still names the driver.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from napari_shardscope.core.bytestore import ByteStore, Location, check_level_tree
from napari_shardscope.core.formats.precomputed.chunk_encoding import (
    BROTLI_SUFFIX,
    GZIP_SUFFIX,
    PrecomputedChunkSource,
    gzipped_layout,
)
from napari_shardscope.core.formats.precomputed.info import PrecomputedInfo, ScaleInfo
from napari_shardscope.core.formats.precomputed.raw_source import raw_chunk_source
from napari_shardscope.core.formats.volume_spec import (
    ArrayTransform,
    ChunkSource,
    Kind,
    LevelPlacement,
    LevelSpec,
    VolumePlacement,
    VolumeSpec,
    image_contrast_limits,
    ratios,
)

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
    from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec


def volume_placement(info: PrecomputedInfo) -> VolumePlacement:
    """Axes, unit (nm) and every scale's placement, from ``info`` alone."""
    multichannel = info.num_channels > 1
    base = tuple(reversed(info.scales[0].resolution))
    levels = []
    for scale in info.scales:
        spatial = tuple(reversed(scale.resolution))
        offset = tuple(float(o) * r for o, r in zip(reversed(scale.voxel_offset), spatial, strict=True))
        shape = tuple(reversed(scale.size))
        factors = ratios(spatial, base)
        if multichannel:
            shape, spatial, offset, factors = ((info.num_channels, *shape), (1.0, *spatial), (0.0, *offset),
                                               (1.0, *factors))
        levels.append(LevelPlacement(scale.key, shape, info.dtype.name, spatial, offset, factors))
    axes = ("c", "z", "y", "x") if multichannel else ("z", "y", "x")
    return VolumePlacement(axes, "nm", tuple(levels))


def array_transform(info: PrecomputedInfo) -> ArrayTransform:
    """``(x, y, z, c)`` → ``(z, y, x)`` (one channel, dropped) or ``(c, z, y, x)``."""
    if info.num_channels > 1:
        return ArrayTransform(order=(3, 2, 1, 0))
    return ArrayTransform(fixed=((3, 0),), order=(2, 1, 0))


#: Room an encoding may add over a chunk's raw bytes (gzip, png, jpeg framing); the rest is slack.
ENCODING_SLACK_BYTES = 1 << 16


def max_file_bytes(info: PrecomputedInfo, scale: ScaleInfo) -> int:
    """Most bytes a chunk file (unsharded) or shard file of ``scale`` can take: twice each raw chunk, plus slack.

    A shard holds at most every chunk of the scale, each with a 24-byte minishard index entry.
    """
    chunk = math.prod(scale.chunk_size) * info.bytes_per_voxel
    if scale.sharding is None:
        return 2 * chunk + ENCODING_SLACK_BYTES
    return (16 << scale.sharding.minishard_bits) + scale.num_chunks * (24 + 2 * chunk) + ENCODING_SLACK_BYTES


def chunk_source(location: Location, info: PrecomputedInfo, scale: ScaleInfo, store: ByteStore | None,
                 chunk_reader: Callable[[str, int], bytes | None] | None,
                 shard_reader: Callable[[str], ShardedReader] | None = None) -> ChunkSource | None:
    """Our own reader of a scale: one TensorStore's driver does not read (compresso, CloudVolume's ``NAME.gz``),
    or one we decode faster than it does (:func:`~.raw_source.raw_chunk_source`); ``None``: the driver reads it."""
    if store is None:
        return None
    root = str(location.kvstore["path"]) if location.is_local else None
    if scale.encoding == "compresso" or gzipped_layout(root, scale):
        reader = partial(chunk_reader, scale.key) if chunk_reader is not None else None
        return PrecomputedChunkSource(store, info, scale, reader)
    return raw_chunk_source(store, info, scale, partial(shard_reader, scale.key) if shard_reader is not None else None)


def is_data_file_name(sharding: ShardingSpec | None, scale: ScaleInfo | None, rel: str) -> bool:
    """Whether ``rel`` (a name in a scale's directory) is one its reader opens: a shard file, or a chunk file
    of the scale's grid (plain, or CloudVolume's ``NAME.gz`` / ``NAME.br``)."""
    if sharding is not None:
        from napari_shardscope.core.formats.precomputed.sharding import parse_shard_name

        return parse_shard_name(sharding, rel) is not None
    if scale is None:
        return False
    for suffix in (GZIP_SUFFIX, BROTLI_SUFFIX):
        if rel.endswith(suffix):
            rel = rel[: -len(suffix)]
            break
    return scale.grid_position_of_chunk_name(rel) is not None


def volume_spec(location: Location, info: PrecomputedInfo, *, kind: Kind | None = None,
                store: ByteStore | None = None,
                chunk_reader: Callable[[str, int], bytes | None] | None = None,
                shard_reader: Callable[[str], ShardedReader] | None = None) -> VolumeSpec:
    """The volume at ``location`` whose parsed ``info`` is ``info``; ``kind`` overrides ``info.type``.

    ``store`` (rooted at ``location``), ``chunk_reader`` (``(scale key, chunk id) -> bytes`` of a
    sharded scale) and ``shard_reader`` (scale key -> its :class:`ShardedReader`) serve the scales
    read here rather than by TensorStore's driver (:func:`chunk_source`).
    """
    placement = volume_placement(info)
    transform = array_transform(info)
    for scale in info.scales:  # TensorStore reads <root>/<key>/…: keep it inside the dataset, files in bounds
        check_level_tree(location, scale.key, max_file_bytes=max_file_bytes(info, scale),
                         is_data_key=partial(is_data_file_name, scale.sharding, scale))
    levels = tuple(
        LevelSpec.of(level, {"driver": "neuroglancer_precomputed", "kvstore": location.kvstore, "scale_index": i},
                     transform, chunk_source(location, info, scale, store, chunk_reader, shard_reader))
        for i, (level, scale) in enumerate(zip(placement.levels, info.scales, strict=True))
    )
    volume_kind: Kind = kind or ("segmentation" if info.type == "segmentation" else "image")
    return VolumeSpec(
        url=location.url, name=location.name, format="precomputed", kind=volume_kind, axes=placement.axes,
        unit=placement.unit, levels=levels, contrast_limits=image_contrast_limits(volume_kind, info.dtype),
        channel_axis=0 if info.num_channels > 1 else None, metadata={"info": dict(info.raw)},
    )
