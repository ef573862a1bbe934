"""N5 datasets and multiscale groups as volumes.

* A dataset (``attributes.json`` with ``dimensions`` and ``dataType``) is a one-scale volume.
* A multiscale group holds datasets ``s0``, ``s1``, … as BigDataViewer and n5-viewer write them.
  The downsampling factors of scale *k* come from, in order: the dataset's own
  ``downsamplingFactors``; the group's ``scales[k]`` (n5-viewer) or ``downsamplingFactors[k]``
  (BigDataViewer's setup group); the ratio of the shapes. The voxel size is the dataset's own
  ``pixelResolution`` if it has one, else the group's ``pixelResolution`` / ``resolution``
  times the factors. ``pixelResolution`` is ``{"dimensions": [...], "unit": "nm"}`` (or a bare
  list); ``resolution`` is a list with an optional ``units`` list.

N5 lists dimensions fastest-first (x, y, z), and TensorStore's ``n5`` driver keeps that order, so
each array is transposed (lazily) to z, y, x. N5 has no standard offset field: translate is 0.
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

#: Stop probing ``s<k>`` after this many scales (a 2^32 downsampling is beyond any volume).
MAX_SCALES = 32


def is_n5_dataset(attrs: Mapping[str, Any]) -> bool:
    return "dimensions" in attrs and "dataType" in attrs


def open_n5(loc: Location, context: Any, *, kind: Kind | None = None,
            attrs: Mapping[str, Any] | None = None) -> Volume:
    """The N5 dataset or multiscale group at ``loc``.

    Raises
    ------
    NotADatasetError
        For a group with no ``s0`` dataset.
    MetadataError
        For resolution or factor fields of the wrong shape (names the field).
    """
    attrs = attrs if attrs is not None else read_json(loc, "attributes.json", context)
    if attrs is None:
        raise NotADatasetError(f"{loc.url}: no attributes.json")
    if is_n5_dataset(attrs):
        datasets: list[tuple[str, Location, Mapping[str, Any]]] = [("", loc, attrs)]
        group: Mapping[str, Any] = {}
    else:
        datasets = list(list_scale_datasets(loc, context))
        if not datasets:
            raise NotADatasetError(f"{loc.url}: an N5 group without an s0 dataset (not a multiscale volume)")
        group = attrs
    where0 = f"{loc.url.rstrip('/')}/attributes.json"
    stores = open_stores([{"driver": "n5", "kvstore": d_loc.kvstore} for _, d_loc, _ in datasets],
                         context, where=loc.url)
    shapes = [tuple(int(s) for s in store.shape) for store in stores]  # x, y, z order
    ndim = len(shapes[0])
    base_res = base_resolution(group, datasets[0][2], ndim, where0)
    levels = []
    for k, ((key, d_loc, d_attrs), store, shape) in enumerate(zip(datasets, stores, shapes, strict=True)):
        where = f"{d_loc.url.rstrip('/')}/attributes.json"
        own = pixel_resolution(d_attrs, ndim, where)
        if own is not None and k > 0:
            res = tuple(v * own[1] for v in own[0])
        else:
            factors = scale_factors(k, d_attrs, group, shapes[0], shape, where)
            res = tuple(b * f for b, f in zip(base_res, factors, strict=True))
        levels.append(ScaleLevel(key=key or d_loc.name, array=LazyArray(store.T),
                                 voxel_size=tuple(reversed(res)), translate=(0.0,) * ndim))
    names = attrs.get("axes") if is_n5_dataset(attrs) else (group.get("axes") or datasets[0][2].get("axes"))
    if isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names):
        axes = tuple(reversed([str(n) for n in names]))
    else:
        axes = ("t", "c", "z", "y", "x")[-ndim:] if ndim <= 5 else tuple(f"d{i}" for i in range(ndim))
    dtype = levels[0].array.dtype
    volume_kind: Kind = kind or guess_kind(dtype)
    return Volume(
        url=loc.url, name=loc.name, format="n5", kind=volume_kind, axes=axes,
        unit="nm" if unit_factor_known(group, datasets[0][2]) else None,
        levels=keep_decreasing(levels),
        contrast_limits=dtype_contrast_limits(dtype) if volume_kind == "image" else None,
        metadata={"attributes": dict(attrs)},
    )


def list_scale_datasets(loc: Location, context: Any) -> list[tuple[str, Location, dict[str, Any]]]:
    """``s0``, ``s1``, … under a group, probed in order (remote stores cannot always list)."""
    found = []
    for k in range(MAX_SCALES):
        child = loc.child(f"s{k}")
        attrs = read_json(child, "attributes.json", context)
        if attrs is None or not is_n5_dataset(attrs):
            break
        found.append((f"s{k}", child, attrs))
    return found


def _numbers(value: object, ndim: int) -> tuple[float, ...] | None:
    if (isinstance(value, list) and len(value) == ndim
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)):
        return tuple(float(v) for v in value)
    return None


def pixel_resolution(attrs: Mapping[str, Any], ndim: int, where: str) -> tuple[tuple[float, ...], float] | None:
    """``(resolution, nm_per_unit)`` from ``pixelResolution`` or ``resolution``, or ``None``.

    A missing unit leaves the factor at 1 (values kept as written).
    """
    pr = attrs.get("pixelResolution")
    if pr is not None:
        if isinstance(pr, Mapping):
            dims = _numbers(pr.get("dimensions"), ndim)
            if dims is None:
                raise MetadataError(f"pixelResolution.dimensions must be {ndim} numbers, got "
                                    f"{pr.get('dimensions')!r}", key=where)
            return dims, nm_per_unit(pr.get("unit")) or 1.0
        dims = _numbers(pr, ndim)
        if dims is None:
            raise MetadataError(f"pixelResolution must be {ndim} numbers or an object, got {pr!r}", key=where)
        return dims, 1.0
    res = attrs.get("resolution")
    if res is not None:
        dims = _numbers(res, ndim)
        if dims is None:
            raise MetadataError(f"resolution must be a list of {ndim} numbers, got {res!r}", key=where)
        units = attrs.get("units")
        factor = 1.0
        if isinstance(units, list) and units:
            factor = nm_per_unit(units[0]) or 1.0
        elif isinstance(units, str):
            factor = nm_per_unit(units) or 1.0
        return dims, factor
    return None


def unit_factor_known(group: Mapping[str, Any], first: Mapping[str, Any]) -> bool:
    """Whether the metadata names a length unit (so voxel sizes are in nm)."""
    for attrs in (group, first):
        pr = attrs.get("pixelResolution")
        if isinstance(pr, Mapping) and nm_per_unit(pr.get("unit")) is not None:
            return True
        units = attrs.get("units")
        if isinstance(units, list) and units and nm_per_unit(units[0]) is not None:
            return True
        if isinstance(units, str) and nm_per_unit(units) is not None:
            return True
    return False


def base_resolution(group: Mapping[str, Any], first: Mapping[str, Any], ndim: int,
                    where: str) -> tuple[float, ...]:
    """Voxel size of ``s0`` in nm (unitless when no unit is named; 1 when nothing is)."""
    for attrs in (first, group):
        found = pixel_resolution(attrs, ndim, where)
        if found is not None:
            res, factor = found
            return tuple(r * factor for r in res)
    return (1.0,) * ndim


def scale_factors(k: int, attrs: Mapping[str, Any], group: Mapping[str, Any], shape0: Sequence[int],
                  shape: Sequence[int], where: str) -> tuple[float, ...]:
    """Downsampling factors of scale ``k`` relative to ``s0`` (x, y, z order)."""
    ndim = len(shape)
    own = attrs.get("downsamplingFactors")
    if own is not None:
        factors = _numbers(own, ndim)
        if factors is None:
            raise MetadataError(f"downsamplingFactors must be {ndim} numbers, got {own!r}", key=where)
        return factors
    for name in ("scales", "downsamplingFactors"):
        table = group.get(name)
        if isinstance(table, list) and k < len(table):
            factors = _numbers(table[k], ndim)
            if factors is not None:
                return factors
    return tuple(float(max(1, round(a / b))) if b else 1.0 for a, b in zip(shape0, shape, strict=True))
