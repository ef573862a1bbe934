"""The public entry points :func:`open_volume` / :func:`open_volumes`, and the one way a spec becomes a volume.

Detection and metadata are the format registry's (:func:`~napari_shardscope.core.formats.open_dataset`
parses each dataset's metadata once and turns it into
:class:`~napari_shardscope.core.formats.volume_spec.VolumeSpec` records); this module only opens
what a spec names through TensorStore (:func:`open_volume_specs`), so the viewer sees what
``inspect`` and the shard browser see. Each level opens on its first read (:mod:`.deferred`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore.context import shared_context
from napari_shardscope.core.bytestore.url import Location, parse_url
from napari_shardscope.core.errors import FormatError
from napari_shardscope.core.formats import Dataset, open_dataset
from napari_shardscope.core.formats.volume_spec import ArrayTransform, DirectChunkSource, Kind, LevelSpec, VolumeSpec
from napari_shardscope.core.volumes.deferred import DeferredStore
from napari_shardscope.core.volumes.direct import DirectReader
from napari_shardscope.core.volumes.lazy import LazyArray, zero_origin
from napari_shardscope.core.volumes.model import ScaleLevel, Volume, keep_decreasing
from napari_shardscope.core.volumes.tsopen import open_chunk_source, open_stores


def open_volumes(url: str | os.PathLike[str], *, kind: Kind | None = None, context: Any = None) -> list[Volume]:
    """Every volume at ``url``: one, or an OME-Zarr image followed by its label images.

    Parameters
    ----------
    url
        A local path, ``file://``, ``http(s)://``, ``gs://`` or ``s3://`` URL, optionally with a
        ``precomputed://`` / ``zarr3://`` / ``n5://`` prefix.
    kind
        Force ``"image"`` or ``"segmentation"`` instead of what the metadata (or the dtype) says.
    context
        A ``tensorstore.Context``; default: the shared one (:func:`shared_context`).

    Raises
    ------
    NotADatasetError
        When ``url`` holds none of the formats.
    ArgumentError
        For a URL scheme we cannot read.
    MetadataError, UnsupportedFeatureError, FormatError, StoreError
        For broken or unsupported metadata or unreachable stores (with the key and the reason).
    """
    ctx = context if context is not None else shared_context()
    return open_dataset_volumes(open_dataset(url, context=ctx), kind=kind)


def open_dataset_volumes(dataset: Dataset, *, kind: Kind | None = None) -> list[Volume]:
    """The volumes of an opened dataset: its volume specs, each level opened through TensorStore on first use."""
    return open_volume_specs(dataset.volume_specs(kind), dataset.context)


def open_volume(url: str | os.PathLike[str], *, kind: Kind | None = None, context: Any = None) -> Volume:
    """The volume at ``url`` (for an OME-Zarr image with labels: the image).

    See :func:`open_volumes` for the accepted URLs and the errors.
    """
    return open_volumes(url, kind=kind, context=context)[0]


def open_volume_specs(specs: Sequence[VolumeSpec], context: Any = None) -> list[Volume]:
    """Present every spec as a volume whose levels open through TensorStore on first use.

    Nothing is opened here (see :mod:`.deferred`): a level answers its shape and dtype from the
    metadata, and opens its TensorStore — once, thread-safe — when it is first read, so the first
    frame pays for the level it shows and no other. Levels that do not shrink are dropped
    (:func:`~.model.keep_decreasing`: napari needs a strictly decreasing pyramid). When a level is
    opened, the array is checked against its spec: a shape or dtype TensorStore reads differently
    from our metadata parse is a :class:`FormatError` at that read, never a silent disagreement
    between the viewer and ``inspect``.
    """
    ctx = context if context is not None else shared_context()
    volumes = []
    for spec in specs:
        scale_levels = tuple(_scale_level(spec, level, ctx) for level in keep_decreasing(spec.levels))
        volumes.append(Volume(
            url=spec.url, name=spec.name, format=spec.format, kind=spec.kind, axes=spec.axes, unit=spec.unit,
            levels=scale_levels, contrast_limits=spec.contrast_limits, channel_axis=spec.channel_axis,
            metadata=dict(spec.metadata), channels=spec.channels,
        ))
    return volumes


def _scale_level(spec: VolumeSpec, level: LevelSpec, context: Any) -> ScaleLevel:
    where = f"{spec.url.rstrip('/')}/{level.key}".rstrip("/")
    deferred = DeferredStore(partial(open_level, spec, level, context), shape=level.shape, dtype=level.dtype,
                             where=where)
    array = LazyArray(deferred, direct=_direct_reader(level))
    return ScaleLevel(key=level.key, array=array, voxel_size=level.voxel_size,
                      translate=level.translate, downsampling_factors=level.downsampling_factors)


def _direct_reader(level: LevelSpec) -> DirectReader | None:
    """The uncached reader of a level whose format decodes it into given buffers (see :mod:`.direct`)."""
    source = level.chunk_source
    return DirectReader(source) if isinstance(source, DirectChunkSource) else None


def open_level(spec: VolumeSpec, level: LevelSpec, context: Any) -> Any:
    """Open ``level`` of ``spec`` now: the zero-origin TensorStore view in presented order.

    Raises
    ------
    FormatError
        When TensorStore reads another shape or dtype than the metadata gives.
    NotFoundError, UnsupportedError, StoreError
        TensorStore's failure to open, translated (naming the volume).
    """
    if level.chunk_source is not None:
        where = f"{spec.url.rstrip('/')}/{level.key}".rstrip("/")
        store = open_chunk_source(level.chunk_source, context, where=where)
    else:
        (store,) = open_stores([level.tensorstore], context, where=spec.url)
    view = zero_origin(apply_transform(store, level.transform))
    shape, dtype = tuple(int(n) for n in view.shape), np.dtype(view.dtype.numpy_dtype)
    if shape != level.shape or dtype.name != level.dtype:
        raise FormatError(f"scale {level.key!r}: TensorStore reads {shape} {dtype.name} where the "
                          f"metadata gives {level.shape} {level.dtype}", key=spec.url)
    return view


def apply_transform(store: Any, transform: ArrayTransform) -> Any:
    """``store`` with ``transform`` applied: a lazy TensorStore view, nothing read."""
    import tensorstore as ts

    view = store
    for dim, index in sorted(transform.fixed, reverse=True):  # highest first: lower dims keep their numbers
        view = view[ts.d[dim][index]]
    if transform.order is not None:
        view = view[ts.d[tuple(transform.order)].transpose[:]]
    return view


def location_of(url: str | os.PathLike[str]) -> Location:
    """The parsed location of ``url`` (exposed for widgets that show where a volume lives)."""
    return parse_url(url)
