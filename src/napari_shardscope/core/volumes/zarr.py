"""Zarr v3 arrays and OME-Zarr 0.5 multiscale groups (with their ``labels``) as volumes.

* A single zarr v3 array (``node_type: "array"``, sharded or not) is one single-scale volume. Axis
  names come from ``dimension_names``; zarr v3 has no voxel-size field, so the unit is ``None``
  and voxels are unit-sized.
* An OME-Zarr 0.5 image group (``attributes.ome.multiscales``) is one multiscale volume: each
  ``datasets[i]`` is a scale, its ``coordinateTransformations`` (a ``scale`` and an optional
  ``translation``) composed with the multiscale-level ones give the voxel size and offset, and
  length units on ``space`` axes are converted to nanometres. Its ``labels`` group (if any) adds
  one segmentation volume per label image, so opening an image brings its labels along, as
  the OME-Zarr spec intends.

Voxels are read by TensorStore's ``zarr3`` driver; only ``zarr.json`` documents are parsed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from napari_shardscope.core.bytestore.kvreads import read_json
from napari_shardscope.core.bytestore.url import Location
from napari_shardscope.core.errors import MetadataError, NotADatasetError
from napari_shardscope.core.volumes.lazy import LazyArray
from napari_shardscope.core.volumes.model import (
    Kind,
    ScaleLevel,
    Volume,
    dtype_contrast_limits,
    guess_kind,
    keep_decreasing,
)
from napari_shardscope.core.volumes.tsopen import open_stores
from napari_shardscope.core.volumes.units import nm_per_unit

CHANNEL_NAMES = ("c", "channel", "channels")


def open_zarr(loc: Location, context: Any, *, kind: Kind | None = None,
              meta: Mapping[str, Any] | None = None) -> list[Volume]:
    """The volumes at a zarr v3 node: one for an array, image + labels for an OME-Zarr group.

    Raises
    ------
    NotADatasetError
        When the node is a zarr v2 node or a group with neither ``multiscales`` nor ``labels``.
    MetadataError
        When OME metadata breaks the spec (names the field).
    """
    where = f"{loc.url.rstrip('/')}/zarr.json"
    meta = meta if meta is not None else read_json(loc, "zarr.json", context)
    if meta is None:
        raise NotADatasetError(f"{loc.url}: no zarr.json")
    if meta.get("zarr_format") != 3:
        raise NotADatasetError(f"{where}: zarr_format {meta.get('zarr_format')!r} is not 3")
    if meta.get("node_type") == "array":
        return [open_zarr_array(loc, meta, context, kind=kind)]
    ome = ome_attributes(meta)
    if "multiscales" in ome:
        image = open_ome_multiscale(loc, ome, context, kind=kind, where=where)
        volumes = [image]
        if not ome.get("image-label") and kind != "segmentation":
            volumes.extend(open_ome_labels(loc.child("labels"), context))
        return volumes
    if "labels" in ome:
        return open_ome_labels(loc, context, ome=ome)
    raise NotADatasetError(f"{where}: a zarr group without OME-Zarr 'multiscales' or 'labels'")


def ome_attributes(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The OME metadata of a group: ``attributes.ome`` (0.5), or the attributes themselves.

    Accepting bare ``multiscales`` in v3 attributes keeps pre-0.5 converters' output readable.
    """
    attrs = meta.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        return {}
    ome = attrs.get("ome")
    return dict(ome) if isinstance(ome, Mapping) else dict(attrs)


def default_axes(ndim: int) -> tuple[str, ...]:
    """Axis names when the metadata gives none: the last three are z, y, x."""
    names = ("t", "c", "z", "y", "x")
    return names[-ndim:] if ndim <= len(names) else tuple(f"d{i}" for i in range(ndim - 3)) + names[-3:]


def open_zarr_array(loc: Location, meta: Mapping[str, Any], context: Any, *,
                    kind: Kind | None = None) -> Volume:
    """A single zarr v3 array as a one-scale volume (unit-sized voxels, no offset)."""
    (store,) = open_stores([{"driver": "zarr3", "kvstore": loc.kvstore}], context, where=loc.url)
    array = LazyArray(store)
    names = meta.get("dimension_names")
    if isinstance(names, list) and len(names) == array.ndim and all(isinstance(n, str) for n in names):
        axes = tuple(str(n) for n in names)
    else:
        axes = default_axes(array.ndim)
    attrs = meta.get("attributes") or {}
    is_label = isinstance(attrs, Mapping) and ("image-label" in attrs or "image-label" in (attrs.get("ome") or {}))
    volume_kind: Kind = kind or ("segmentation" if is_label else guess_kind(array.dtype))
    level = ScaleLevel(key="", array=array, voxel_size=(1.0,) * array.ndim, translate=(0.0,) * array.ndim)
    channel = _channel_axis(axes) if volume_kind == "image" else None
    return Volume(url=loc.url, name=loc.name, format="zarr3", kind=volume_kind, axes=axes, unit=None,
                  levels=(level,),
                  contrast_limits=dtype_contrast_limits(array.dtype) if volume_kind == "image" else None,
                  channel_axis=channel, metadata={"zarr.json": dict(meta)})


def _channel_axis(axes: Sequence[str]) -> int | None:
    for i, name in enumerate(axes):
        if name.lower() in CHANNEL_NAMES:
            return i
    return None


def open_ome_multiscale(loc: Location, ome: Mapping[str, Any], context: Any, *, kind: Kind | None,
                        where: str, name: str | None = None) -> Volume:
    """One OME-Zarr multiscale image (the first entry of ``multiscales``)."""
    multiscales = ome.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales or not isinstance(multiscales[0], Mapping):
        raise MetadataError(f"'multiscales' must be a non-empty list of objects, got {multiscales!r}", key=where)
    ms = multiscales[0]
    axes_meta = ms.get("axes")
    if not isinstance(axes_meta, list) or not axes_meta:
        raise MetadataError(f"multiscales[0].axes must be a non-empty list, got {axes_meta!r}", key=where)
    axes = tuple(str(a.get("name")) if isinstance(a, Mapping) else str(a) for a in axes_meta)
    types = tuple(str(a.get("type", "")) if isinstance(a, Mapping) else "" for a in axes_meta)
    units = tuple(a.get("unit") if isinstance(a, Mapping) else None for a in axes_meta)
    ndim = len(axes)
    datasets = ms.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise MetadataError(f"multiscales[0].datasets must be a non-empty list, got {datasets!r}", key=where)
    g_scale, g_trans = parse_transforms(ms.get("coordinateTransformations"), ndim,
                                        where=where, field="multiscales[0].coordinateTransformations")
    paths: list[str] = []
    transforms: list[tuple[tuple[float, ...], tuple[float, ...]]] = []
    for i, ds in enumerate(datasets):
        field = f"multiscales[0].datasets[{i}]"
        if not isinstance(ds, Mapping) or not isinstance(ds.get("path"), str):
            raise MetadataError(f"{field}.path must be a string, got {ds!r}", key=where)
        scale, trans = parse_transforms(ds.get("coordinateTransformations"), ndim, where=where,
                                        field=f"{field}.coordinateTransformations", required=True)
        # world = (index * s + t) * g_s + g_t
        voxel = tuple(s * gs for s, gs in zip(scale, g_scale, strict=True))
        offset = tuple(t * gs + gt for t, gs, gt in zip(trans, g_scale, g_trans, strict=True))
        paths.append(ds["path"])
        transforms.append((voxel, offset))
    factors, unit = _nm_factors(types, units)
    specs = [{"driver": "zarr3", "kvstore": loc.child(p).kvstore} for p in paths]
    stores = open_stores(specs, context, where=loc.url)
    levels = []
    for path, store, (voxel, offset) in zip(paths, stores, transforms, strict=True):
        array = LazyArray(store)
        if array.ndim != ndim:
            raise MetadataError(f"dataset {path!r} has {array.ndim} dimensions but axes lists {ndim}", key=where)
        levels.append(ScaleLevel(key=path, array=array,
                                 voxel_size=tuple(v * f for v, f in zip(voxel, factors, strict=True)),
                                 translate=tuple(o * f for o, f in zip(offset, factors, strict=True))))
    is_label = "image-label" in ome
    dtype = levels[0].array.dtype
    volume_kind: Kind = kind or ("segmentation" if is_label else "image")
    channel = None
    if volume_kind == "image" and "channel" in types:
        channel = types.index("channel")
    return Volume(
        url=loc.url, name=name or str(ms.get("name") or loc.name), format="ome-zarr", kind=volume_kind,
        axes=axes, unit=unit, levels=keep_decreasing(levels),
        contrast_limits=(omero_window(ome) or dtype_contrast_limits(dtype)) if volume_kind == "image" else None,
        channel_axis=channel, metadata={"ome": dict(ome)},
    )


def open_ome_labels(loc: Location, context: Any, ome: Mapping[str, Any] | None = None) -> list[Volume]:
    """The label images listed by a ``labels`` group (none when the group does not exist)."""
    if ome is None:
        meta = read_json(loc, "zarr.json", context)
        if meta is None:
            return []
        ome = ome_attributes(meta)
    names = ome.get("labels")
    if not isinstance(names, list):
        return []
    volumes = []
    for label in names:
        if not isinstance(label, str):
            continue
        child = loc.child(label)
        where = f"{child.url.rstrip('/')}/zarr.json"
        meta = read_json(child, "zarr.json", context)
        if meta is None:
            raise MetadataError(f"labels lists {label!r} but it has no zarr.json", key=where)
        volumes.append(open_ome_multiscale(child, ome_attributes(meta), context, kind="segmentation",
                                           where=where, name=label))
    return volumes


def parse_transforms(obj: object, ndim: int, *, where: str, field: str,
                     required: bool = False) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(scale, translation)`` from an OME ``coordinateTransformations`` list.

    The spec allows one ``scale`` followed by at most one ``translation`` (or ``identity``);
    anything else is reported with its field path.
    """
    scale = (1.0,) * ndim
    trans = (0.0,) * ndim
    if obj is None:
        if required:
            raise MetadataError(f"{field} is required", key=where)
        return scale, trans
    if not isinstance(obj, list):
        raise MetadataError(f"{field} must be a list, got {obj!r}", key=where)
    for i, t in enumerate(obj):
        kind = t.get("type") if isinstance(t, Mapping) else None
        if kind == "identity":
            continue
        if kind not in ("scale", "translation"):
            raise MetadataError(f"{field}[{i}].type must be 'scale' or 'translation', got {kind!r}", key=where)
        assert isinstance(t, Mapping)
        values = t.get(kind)
        if (not isinstance(values, list) or len(values) != ndim
                or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values)):
            raise MetadataError(f"{field}[{i}].{kind} must be a list of {ndim} numbers, got {values!r}", key=where)
        if kind == "scale":
            scale = tuple(float(v) for v in values)
        else:
            trans = tuple(float(v) for v in values)
    return scale, trans


def _nm_factors(types: Sequence[str], units: Sequence[object]) -> tuple[tuple[float, ...], str | None]:
    """Per-axis factors to nanometres for space axes, and the volume's unit.

    The unit is ``"nm"`` only when every space axis names a length unit; otherwise values are
    kept as written and the unit is ``None`` (unitless voxels).
    """
    space = [i for i, t in enumerate(types) if t == "space"]
    nm = [nm_per_unit(units[i]) for i in space]
    if not space or any(f is None for f in nm):
        return (1.0,) * len(types), None
    factors = [1.0] * len(types)
    for i, f in zip(space, nm, strict=True):
        assert f is not None
        factors[i] = f
    return tuple(factors), "nm"


def omero_window(ome: Mapping[str, Any]) -> tuple[float, float] | None:
    """The display window of the first ``omero`` channel, if the metadata has one."""
    omero = ome.get("omero")
    if not isinstance(omero, Mapping):
        return None
    channels = omero.get("channels")
    if not isinstance(channels, list) or not channels or not isinstance(channels[0], Mapping):
        return None
    window = channels[0].get("window")
    if not isinstance(window, Mapping):
        return None
    start, end = window.get("start"), window.get("end")
    if isinstance(start, int | float) and isinstance(end, int | float) and end > start:
        return float(start), float(end)
    return None
