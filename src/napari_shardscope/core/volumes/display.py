"""How a volume is shown: per channel a name, a colour, contrast limits and whether it starts visible.

Why in core and not in the napari glue: for float images the decision reads voxels (a bounded
sample), so it must run where the volume was opened — in the worker thread of a remote open, never
on napari's GUI thread — and a notebook, ``shardscope open`` and napari's reader must agree on it.

Per channel (one entry for an image without a channel axis, or for a segmentation):

* **name** — the metadata's label (OME-Zarr ``omero.channels[i].label``); else the volume's name,
  ``"name [i]"`` for channel ``i > 0`` (napari's own naming of split channels);
* **colour** — the metadata's colour (``"#rrggbb"``); else, for an image of exactly three channels of which
  the metadata colours none, ``red``, ``green``, ``blue`` (:data:`RGB_CHANNELS`: napari's split of an RGB
  image; napari's own cycle for a channel axis would draw them cyan, magenta and yellow, so a colour
  picture stored as three channels, e.g. an N5 ``c, y, x`` image, came out in false colours); else ``None``:
  the viewer's default (gray for one channel, napari's channel colours for several);
* **contrast limits** — the metadata's window (``start``/``end``, else ``min``/``max``); else, for a
  float image, the range of its values (a float dtype says nothing about its range: ``(0, 1)``
  drew a field of 0..99 as a solid white square): the coarsest level when it holds at most
  :data:`SAMPLE_VOXELS` voxels per channel (as napari does for a multiscale layer), else a box of
  whole chunks around its centre of at most that many voxels — never the whole volume. NaN and
  ±inf are left out; a constant image gets ``(v, v + 1)``; no finite value, or a sample that does
  not read, falls back to the dtype's ``(0, 1)``. Integer images keep the dtype's full range
  (0–255 for 8 bits), as before; segmentations have none;
* **visible** — the metadata's ``active``, else ``True``.

The outcome is worked out once per volume (:func:`display_of` remembers it while the volume lives).
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.formats.volume_spec import ChannelDisplay, dtype_contrast_limits
from napari_shardscope.core.volumes.model import Volume

#: The most voxels (per channel) read to estimate a float image's contrast limits.
SAMPLE_VOXELS = 1 << 20

#: Key of the napari layer ``metadata`` entry saying where a layer came from (url, format, kind, the
#: volume): written by the reader, read by the panels. Defined once here, below both.
LAYER_METADATA_KEY = "shardscope"

#: Chunk edge assumed when a level does not say how it is chunked.
DEFAULT_CHUNK = 64

#: The colours of a three-channel image whose metadata colours no channel (napari's split of an RGB image).
RGB_CHANNELS = ("red", "green", "blue")

LimitsSource = Literal["metadata", "data", "dtype", "none"]


@dataclass(frozen=True)
class ChannelView:
    """How one channel (or a volume without channels) is shown; see the module docstring for the rules.

    ``source`` says where the contrast limits came from: ``"metadata"``, ``"data"`` (a bounded
    sample), ``"dtype"``, or ``"none"`` (a segmentation).
    """

    name: str
    colormap: str | None
    contrast_limits: tuple[float, float] | None
    visible: bool
    source: LimitsSource


_MEMO: weakref.WeakKeyDictionary[Volume, tuple[ChannelView, ...]] = weakref.WeakKeyDictionary()
_MEMO_LOCK = threading.Lock()


def display_of(volume: Volume) -> tuple[ChannelView, ...]:
    """How each channel of ``volume`` is shown (one entry without a channel axis), worked out once per volume.

    Reads voxels only for a float image without a metadata window (at most :data:`SAMPLE_VOXELS`
    per channel, from the coarsest level); call it off the GUI thread for a remote volume.
    """
    with _MEMO_LOCK:
        known = _MEMO.get(volume)
    if known is not None:
        return known
    views = _work_out(volume)
    with _MEMO_LOCK:
        return _MEMO.setdefault(volume, views)


def _work_out(volume: Volume) -> tuple[ChannelView, ...]:
    if volume.kind == "segmentation":
        return (ChannelView(volume.name, None, None, True, "none"),)
    axis = volume.channel_axis
    count = volume.shape[axis] if axis is not None else 1
    meta = volume.channels
    said_all = [meta[c] if c < len(meta) else ChannelDisplay() for c in range(count)]
    uncoloured = axis is not None and count == len(RGB_CHANNELS) and all(d.color is None for d in said_all)
    views = []
    for c, said in enumerate(said_all):
        name = said.label or (volume.name if c == 0 else f"{volume.name} [{c}]")
        limits, source = _limits(volume, c if axis is not None else None, said.window)
        colour = RGB_CHANNELS[c] if uncoloured else said.color
        views.append(ChannelView(name, colour, limits, said.visible, source))
    return tuple(views)


def _limits(volume: Volume, channel: int | None,
            window: tuple[float, float] | None) -> tuple[tuple[float, float], LimitsSource]:
    if window is not None:
        return window, "metadata"
    if volume.dtype.kind == "f":
        sampled = sample_range(volume, channel)
        if sampled is not None:
            return sampled, "data"
    return dtype_contrast_limits(volume.dtype), "dtype"


def sample_range(volume: Volume, channel: int | None = None,
                 max_voxels: int = SAMPLE_VOXELS) -> tuple[float, float] | None:
    """The finite value range of a bounded sample of ``volume``'s coarsest level (``channel`` of it).

    ``None`` when the sample holds no finite value or cannot be read (a damaged chunk: the viewer
    reports that when it draws).
    """
    array = volume.levels[-1].array
    index = sample_index(array.shape, _chunks(array), volume.channel_axis, channel, max_voxels)
    try:
        data = np.asarray(array[index].read() if not _is_scalar(index) else array[index])
    except ShardscopeError:
        return None
    finite = data[np.isfinite(data)] if data.dtype.kind == "f" else data.ravel()
    if finite.size == 0:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def _chunks(array: Any) -> tuple[int, ...] | None:
    try:
        chunks = array.chunks
    except ShardscopeError:  # the level does not open: the read below reports it as None too
        return None
    return tuple(int(c) for c in chunks) if chunks is not None else None


def _is_scalar(index: tuple[Any, ...]) -> bool:
    return all(isinstance(k, int) for k in index)


def sample_index(shape: tuple[int, ...], chunks: tuple[int, ...] | None, channel_axis: int | None,
                 channel: int | None, max_voxels: int = SAMPLE_VOXELS) -> tuple[Any, ...]:
    """The part of an array of ``shape`` a range estimate reads: at most ``max_voxels`` voxels of one channel.

    The whole array (the channel) when it is that small; otherwise the middle of every axis but
    the last three (time, …), and on those a box of whole chunks around the centre, grown one chunk
    at a time on each side of the last two axes (y, x) while it stays within ``max_voxels`` — so a
    read decodes no more than it keeps.
    """
    ndim = len(shape)
    fixed: dict[int, int] = {}
    if channel_axis is not None:
        fixed[channel_axis] = channel or 0
    free = [i for i in range(ndim) if i not in fixed]
    if math.prod(shape[i] for i in free) <= max_voxels:
        return tuple(fixed[i] if i in fixed else slice(0, shape[i]) for i in range(ndim))
    spatial = free[-3:]
    for i in free[:-3]:
        fixed[i] = shape[i] // 2
    edge = {i: max(1, (chunks[i] if chunks is not None else DEFAULT_CHUNK)) for i in spatial}
    box: dict[int, tuple[int, int]] = {}
    for i in spatial:
        lo = (shape[i] // 2) // edge[i] * edge[i]
        box[i] = (lo, min(lo + edge[i], shape[i]))

    def voxels(b: dict[int, tuple[int, int]]) -> int:
        return math.prod(hi - lo for lo, hi in b.values())

    if voxels(box) > max_voxels:  # one chunk is already more than the budget: its centre, on one plane
        for i in spatial[:-2]:
            box[i] = (shape[i] // 2, shape[i] // 2 + 1)
        for i in spatial[-2:]:
            half = max(1, int(math.sqrt(max_voxels)) // 2)
            box[i] = (max(0, shape[i] // 2 - half), min(shape[i], shape[i] // 2 + half))
    grew = True
    while grew:
        grew = False
        for i in spatial[-2:]:
            lo, hi = box[i]
            wider = (max(0, lo - edge[i]), min(shape[i], hi + edge[i]))
            if wider != (lo, hi) and voxels({**box, i: wider}) <= max_voxels:
                box[i] = wider
                grew = True
    return tuple(fixed[i] if i in fixed else slice(*box[i]) for i in range(ndim))
