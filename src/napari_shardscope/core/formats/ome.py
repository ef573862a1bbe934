"""OME-Zarr (NGFF 0.4/0.5) metadata: multiscales, coordinate transforms, omero, labels, and the placement of
each scale. Shared by the zarr v2 (NGFF 0.4, in ``.zattrs``) and zarr v3 (NGFF 0.5) packages.

An image group's ``multiscales[0]`` lists its scales (``datasets``, finest first), the ``axes`` with
their types and units, and per dataset a ``scale`` and an optional ``translation``, composed with
the multiscale's own (``world = (index * s + t) * S + T``). A ``labels`` group lists label images,
each itself a multiscale group with an ``image-label`` attribute. NGFF 0.5 puts all of this under
``attributes["ome"]``; a bare ``attributes["multiscales"]`` (what pre-0.5 converters wrote into v3
groups) is read the same way, as are NGFF 0.4's ``.zattrs`` in a zarr v2 group.

Parsed strictly: a wrong field is reported with its path (``multiscales[0].datasets[1]...``), as
the spec's own validators do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from napari_shardscope.core.bytestore.containment import key_problem
from napari_shardscope.core.errors import MetadataError, UnsafeMetadataPathError
from napari_shardscope.core.formats.units import nm_factors
from napari_shardscope.core.formats.volume_spec import (
    ChannelDisplay,
    LevelPlacement,
    VolumePlacement,
    permute,
    ratios,
    reader_order,
    reorder_level,
)

#: Axis names taken as a channel axis when an array has no OME axis types.
CHANNEL_NAMES = ("c", "channel", "channels")


@dataclass(frozen=True)
class OmeDataset:
    """One ``datasets[i]`` entry: its path and its voxel size and offset in the metadata's units."""

    path: str
    scale: tuple[float, ...]
    translation: tuple[float, ...]


@dataclass(frozen=True)
class OmeMultiscale:
    """The first entry of ``multiscales``, coordinate transforms composed.

    Attributes
    ----------
    name
        The multiscale's ``name`` (``None`` when unnamed).
    axes, axis_types, axis_units
        Per axis, slowest first: name, type (``"space"``, ``"channel"``, ``"time"`` or ``""``) and unit.
    datasets
        The scales, finest first; ``scale`` and ``translation`` already composed with the
        multiscale-level transforms.
    is_label
        Whether the group is a label image (``image-label`` present).
    window
        The first ``omero`` channel's display window, if any.
    channels
        How ``omero.channels`` asks each channel to be shown (:func:`omero_channels`).
    """

    name: str | None
    axes: tuple[str, ...]
    axis_types: tuple[str, ...]
    axis_units: tuple[object, ...]
    datasets: tuple[OmeDataset, ...]
    is_label: bool = False
    window: tuple[float, float] | None = None
    channels: tuple[ChannelDisplay, ...] = ()

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(ds.path for ds in self.datasets)

    @property
    def channel_axis(self) -> int | None:
        """The channel axis in presented order (:attr:`order`)."""
        types = permute(self.axis_types, self.order)
        return types.index("channel") if "channel" in types else None

    @property
    def order(self) -> tuple[int, ...] | None:
        """How the stored axes are presented: other axes first, then ``z, y, x`` (:func:`reader_order`)."""
        return reader_order(self.axes)

    @property
    def presented_axes(self) -> tuple[str, ...]:
        return permute(self.axes, self.order)

    def nm_factors(self) -> tuple[tuple[float, ...], str | None]:
        """Per-axis factors to nanometres (space axes only) and the resulting unit.

        The unit is ``"nm"`` only when every space axis names a length unit; otherwise values are
        kept as written and the unit is ``None``.
        """
        space = [i for i, t in enumerate(self.axis_types) if t == "space"]
        factors = nm_factors([self.axis_units[i] for i in space])
        if factors is None:
            return (1.0,) * self.ndim, None
        out = [1.0] * self.ndim
        for i, f in zip(space, factors, strict=True):
            out[i] = f
        return tuple(out), "nm"


def ome_attributes(attributes: object) -> dict[str, Any]:
    """The OME metadata of a group's attributes: ``attributes["ome"]`` (0.5), or the attributes themselves.

    Accepting bare ``multiscales`` in v3 attributes keeps pre-0.5 converters' output readable.
    """
    if not isinstance(attributes, Mapping):
        return {}
    ome = attributes.get("ome")
    return dict(ome) if isinstance(ome, Mapping) else dict(attributes)


def is_label_array(attributes: object) -> bool:
    """Whether a single array's attributes mark it as a label image (``image-label``)."""
    return "image-label" in ome_attributes(attributes) or (
        isinstance(attributes, Mapping) and "image-label" in attributes)


def label_names(ome: Mapping[str, Any]) -> list[str]:
    """The label images a ``labels`` group lists (non-strings are ignored, as viewers do)."""
    names = ome.get("labels")
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and n.strip("/")]


def dataset_path(value: object, field: str, *, key: str) -> str:
    """A ``datasets[i].path``: a relative path inside the group, returned without a trailing slash.

    Anything that could lead outside the group — ``..``, an absolute path, empty or ``.``
    components, NUL bytes, backslashes — is :class:`UnsafeMetadataPathError`: no consumer of the
    parsed metadata may read there.
    """
    if not isinstance(value, str) or not value.strip("/"):
        raise MetadataError(f"{field}.path must be a relative path, got {value!r}", key=key)
    problem = key_problem(value.rstrip("/"))
    if problem is not None:
        raise UnsafeMetadataPathError(f"{field}.path must be a relative path inside the group, "
                                      f"got {value!r} ({problem})", key=key)
    return value.rstrip("/")


def parse_multiscale(ome: Mapping[str, Any], *, key: str) -> OmeMultiscale:
    """The first multiscale image of a group's OME metadata.

    Raises
    ------
    MetadataError
        For ``multiscales``, ``axes``, ``datasets`` or ``coordinateTransformations`` that break the
        spec (naming the field path and the value).
    """
    multiscales = ome.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales or not isinstance(multiscales[0], Mapping):
        raise MetadataError(f"'multiscales' must be a non-empty list of objects, got {multiscales!r}", key=key)
    ms = multiscales[0]
    axes_meta = ms.get("axes")
    if not isinstance(axes_meta, list) or not axes_meta:
        raise MetadataError(f"multiscales[0].axes must be a non-empty list, got {axes_meta!r}", key=key)
    axes = tuple(str(a.get("name")) if isinstance(a, Mapping) else str(a) for a in axes_meta)
    types = tuple(str(a.get("type", "")) if isinstance(a, Mapping) else "" for a in axes_meta)
    units = tuple(a.get("unit") if isinstance(a, Mapping) else None for a in axes_meta)
    ndim = len(axes)
    datasets = ms.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise MetadataError(f"multiscales[0].datasets must be a non-empty list, got {datasets!r}", key=key)
    g_scale, g_trans = parse_transforms(ms.get("coordinateTransformations"), ndim, key=key,
                                        field="multiscales[0].coordinateTransformations")
    parsed = []
    for i, ds in enumerate(datasets):
        field = f"multiscales[0].datasets[{i}]"
        if not isinstance(ds, Mapping):
            raise MetadataError(f"{field} must be an object, got {ds!r}", key=key)
        path = dataset_path(ds.get("path"), field, key=key)
        scale, trans = parse_transforms(ds.get("coordinateTransformations"), ndim, key=key,
                                        field=f"{field}.coordinateTransformations", required=True)
        parsed.append(OmeDataset(
            path,
            tuple(s * gs for s, gs in zip(scale, g_scale, strict=True)),
            tuple(t * gs + gt for t, gs, gt in zip(trans, g_scale, g_trans, strict=True)),
        ))
    name = ms.get("name")
    return OmeMultiscale(name=str(name) if name else None, axes=axes, axis_types=types, axis_units=units,
                         datasets=tuple(parsed), is_label="image-label" in ome, window=omero_window(ome),
                         channels=omero_channels(ome))


def parse_transforms(obj: object, ndim: int, *, key: str, field: str,
                     required: bool = False) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(scale, translation)`` from an OME ``coordinateTransformations`` list.

    The spec allows one ``scale`` followed by at most one ``translation`` (or ``identity``);
    anything else is reported with its field path. A scale must be finite and non-zero (a zero
    voxel size places every voxel at one point), a translation finite.
    """
    scale = (1.0,) * ndim
    trans = (0.0,) * ndim
    if obj is None:
        if required:
            raise MetadataError(f"{field} is required", key=key)
        return scale, trans
    if not isinstance(obj, list):
        raise MetadataError(f"{field} must be a list, got {obj!r}", key=key)
    for i, t in enumerate(obj):
        kind = t.get("type") if isinstance(t, Mapping) else None
        if kind == "identity":
            continue
        if kind not in ("scale", "translation"):
            raise MetadataError(f"{field}[{i}].type must be 'scale' or 'translation', got {kind!r}", key=key)
        assert isinstance(t, Mapping)
        values = t.get(kind)
        if (not isinstance(values, list) or len(values) != ndim
                or any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                       or (kind == "scale" and v == 0) for v in values)):
            what = "non-zero numbers" if kind == "scale" else "numbers"
            raise MetadataError(f"{field}[{i}].{kind} must be a list of {ndim} finite {what}, got {values!r}",
                                key=key)
        if kind == "scale":
            scale = tuple(float(v) for v in values)
        else:
            trans = tuple(float(v) for v in values)
    return scale, trans


def omero_window(ome: Mapping[str, Any]) -> tuple[float, float] | None:
    """The display window of the first ``omero`` channel, if the metadata has one."""
    channels = omero_channels(ome)
    return channels[0].window if channels else None


#: At most this many ``omero.channels`` entries are read (a channel axis longer than that is unusual).
MAX_OMERO_CHANNELS = 1024


def omero_channels(ome: Mapping[str, Any]) -> tuple[ChannelDisplay, ...]:
    """How ``omero.channels`` asks each channel to be shown: label, colour, window, visibility.

    The transitional ``omero`` block (NGFF 0.4 in ``.zattrs``, 0.5 under ``attributes.ome``) is
    advisory, so it is read leniently, field by field: an unusable field is left to the viewer's
    default (a label that is not a non-empty string, a colour that is not six hex digits, a window
    whose end is not above its start, an ``active`` that is not a boolean), never an error.
    """
    omero = ome.get("omero")
    channels = omero.get("channels") if isinstance(omero, Mapping) else None
    if not isinstance(channels, list):
        return ()
    return tuple(_channel_display(c) for c in channels[:MAX_OMERO_CHANNELS])


def _channel_display(channel: object) -> ChannelDisplay:
    if not isinstance(channel, Mapping):
        return ChannelDisplay()
    label = channel.get("label")
    color = channel.get("color")
    hex_color = color.removeprefix("#").lower() if isinstance(color, str) else ""
    active = channel.get("active")
    return ChannelDisplay(
        label=label.strip() if isinstance(label, str) and label.strip() else None,
        color=f"#{hex_color}" if len(hex_color) == 6 and all(c in "0123456789abcdef" for c in hex_color) else None,
        window=_window(channel.get("window")),
        visible=active if isinstance(active, bool) else True,
    )


def _window(window: object) -> tuple[float, float] | None:
    """``start``/``end`` (the display range), else ``min``/``max`` (the data range), when finite and increasing."""
    if not isinstance(window, Mapping):
        return None
    for low, high in (("start", "end"), ("min", "max")):
        lo, hi = window.get(low), window.get(high)
        if (isinstance(lo, int | float) and isinstance(hi, int | float) and not isinstance(lo, bool)
                and not isinstance(hi, bool) and math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            return float(lo), float(hi)
    return None


def channel_axis_by_name(axes: Sequence[str]) -> int | None:
    """A channel axis named ``c``/``channel``/``channels``, for arrays whose axes have no types."""
    for i, name in enumerate(axes):
        if name.lower() in CHANNEL_NAMES:
            return i
    return None


class ArrayShape(Protocol):
    """What placing a scale needs of an array's parsed metadata (zarr v2 or v3)."""

    @property
    def ndim(self) -> int: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...


def ome_level_placement(ms: OmeMultiscale, index: int, meta: ArrayShape, *, key: str) -> LevelPlacement:
    """Scale ``index`` of an OME multiscale whose array metadata is ``meta`` (``key``: the group's document),
    in presented order (:attr:`OmeMultiscale.order`).

    Raises
    ------
    MetadataError
        When the array's rank differs from the number of axes.
    """
    ds = ms.datasets[index]
    if meta.ndim != ms.ndim:
        raise MetadataError(f"dataset {ds.path!r} has {meta.ndim} dimensions but axes lists {ms.ndim}", key=key)
    nm, _ = ms.nm_factors()
    return reorder_level(LevelPlacement(
        ds.path, meta.shape, meta.dtype.name,
        tuple(s * f for s, f in zip(ds.scale, nm, strict=True)),
        tuple(t * f for t, f in zip(ds.translation, nm, strict=True)),
        ratios(ds.scale, ms.datasets[0].scale),
    ), ms.order)


def ome_placement(ms: OmeMultiscale, arrays: Mapping[str, ArrayShape], *, key: str) -> VolumePlacement:
    """Every scale of an OME multiscale in presented order; ``arrays`` maps each dataset path to its metadata."""
    levels = tuple(ome_level_placement(ms, i, arrays[ds.path], key=key) for i, ds in enumerate(ms.datasets))
    return VolumePlacement(ms.presented_axes, ms.nm_factors()[1], levels)
