"""Turn core volumes into napari layer data, without importing napari.

napari builds layers from ``(data, kwargs, layer_type)`` tuples, so the reader, the sample data
and the CLI share this one function and none of them needs napari at import time.

Choices made here, and why:

* ``multiscale=True`` with the lazy arrays, finest first, whenever there is more than one scale:
  napari then reads only the visible tile of the level that matches the zoom.
* ``scale`` / ``translate`` from the volume's voxel size and offset (nanometres), so volumes in
  different formats or resolutions overlay in one world.
* Names, colours, contrast limits and visibility per channel come from
  :func:`~napari_shardscope.core.volumes.display.display_of`: the metadata's (OME-Zarr ``omero``
  labels, colours, windows, ``active``), else for float images a bounded sample of the coarsest
  level, else the dtype. ``contrast_limits`` are always passed for images: without them napari
  computes the range of the data it is given, which for a non-multiscale layer is the whole volume.
* Each level of a 3-D volume prefetches the chunk layers next to the plane shown, and the window of
  the next coarser level a zoom-out would show (:mod:`napari_shardscope.core.volumes.prefetch`), on
  worker threads, never the GUI thread.
* The arrays are wrapped in :class:`~napari_shardscope.napari_plugin.shown.ShownArray`: a chunk that
  does not decode is drawn hatched between the layer's contrast limits (an image) or empty (labels),
  instead of an error inside napari's slicing, and reported once per volume, then at most every
  30 s, as a napari notification and on the layer (:mod:`.damage`).
* Segmentations become Labels layers; images become Image layers (a channel axis is split into
  one layer per channel, as napari does for multichannel images), never guessed to be RGB(A) from
  a last axis of length 3 or 4.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from napari_shardscope.core.errors import UnsupportedFeatureError
from napari_shardscope.core.volumes import Volume
from napari_shardscope.core.volumes.display import LAYER_METADATA_KEY, display_of
from napari_shardscope.napari_plugin.damage import attach
from napari_shardscope.napari_plugin.shown import DamageLog, shown

log = logging.getLogger(__name__)

LayerData = tuple[Any, dict[str, Any], str]

#: napari reads one whole plane of the coarsest level on every slice change (the layer thumbnail);
#: above this many pixels per plane that read becomes the cost of every z-step.
COARSEST_PLANE_LIMIT = 1024 * 1024

#: Key of the layer ``metadata`` entry holding where a layer came from (widgets read it): the one
#: shared constant, :data:`napari_shardscope.core.volumes.display.LAYER_METADATA_KEY`.
METADATA_KEY = LAYER_METADATA_KEY


def volume_layer_data(volume: Volume) -> LayerData:
    """The napari layer-data tuple showing ``volume``.

    Raises
    ------
    UnsupportedFeatureError
        For a volume of fewer than two axes besides a channel: napari draws images of two or more.
    """
    spatial = volume.ndim - (1 if volume.channel_axis is not None else 0)
    if spatial < 2:
        raise UnsupportedFeatureError(f"showing a {spatial}-D array in napari", key=volume.url,
                                      detail="napari draws images of 2 or more dimensions; inspect and read it "
                                      "from Python instead")
    arrays = volume.arrays
    if volume.ndim == 3 and volume.channel_axis is None:
        from napari_shardscope.core.volumes.prefetch import link_coarser

        arrays = [a.with_prefetch() for a in arrays]  # z steps find the next chunk layer decoded
        link_coarser([a.prefetcher for a in arrays])  # ... and a zoom-out the coarser level's window
    views = display_of(volume)
    limits = [v.contrast_limits for v in views if v.contrast_limits is not None]
    hatch_values = (min(lo for lo, _ in limits), max(hi for _, hi in limits)) if limits else None
    damage = DamageLog(volume.name, volume.url, drawn="hatched" if hatch_values is not None else "as background")
    attach(damage, METADATA_KEY)
    drawn = shown(list(arrays), damage, hatch_values)  # a damaged chunk is drawn hatched and reported, not raised
    multiscale = len(drawn) > 1
    coarsest = volume.levels[-1].shape
    if len(coarsest) >= 2 and math.prod(coarsest[-2:]) > COARSEST_PLANE_LIMIT:
        log.warning("%s: the coarsest scale is %s voxels per plane; napari reads a whole plane of it on "
                    "every slice change, so z-steps will be slow. Add downsampled scales to the volume.",
                    volume.url, " x ".join(str(n) for n in coarsest[-2:]))
    keep = [i for i in range(volume.ndim) if i != volume.channel_axis]
    kwargs: dict[str, Any] = {
        "name": volume.name,
        "multiscale": multiscale,
        "scale": tuple(volume.voxel_size[i] for i in keep),
        "translate": tuple(volume.translate[i] for i in keep),
        "axis_labels": tuple(volume.axes[i] for i in keep),
        "metadata": {
            METADATA_KEY: {
                "url": volume.url,
                "format": volume.format,
                "kind": volume.kind,
                "unit": volume.unit,
                "scale_keys": [level.key for level in volume.levels],
                "volume": volume,
            }
        },
    }
    if volume.unit is not None:
        kwargs["units"] = tuple(volume.unit if volume.axes[i] in ("z", "y", "x") else "pixel" for i in keep)
    data: Any = drawn if multiscale else drawn[0]
    if volume.kind == "segmentation":
        return data, kwargs, "labels"
    # Never napari's RGB guess (a last axis of 3 or 4): our formats' axes are spatial or named channels, and a
    # thin volume taken for RGB(A) is drawn wrongly or crashes napari.
    kwargs["rgb"] = False
    if volume.channel_axis is not None:  # napari splits the channels into layers, each given its entry of a list
        kwargs["channel_axis"] = volume.channel_axis
        kwargs["name"] = [v.name for v in views]
        kwargs["contrast_limits"] = [v.contrast_limits for v in views]
        kwargs["visible"] = [v.visible for v in views]
        if any(v.colormap is not None for v in views):  # else napari's own channel colours
            kwargs["colormap"] = [v.colormap or "gray" for v in views]
        return data, kwargs, "image"
    (view,) = views
    kwargs.update(name=view.name, contrast_limits=view.contrast_limits, visible=view.visible,
                  colormap=view.colormap or "gray")
    return data, kwargs, "image"
