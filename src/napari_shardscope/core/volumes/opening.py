"""Format detection and the public entry points :func:`open_volume` / :func:`open_volumes`.

Detection reads only metadata, all three candidates at once (one round-trip on a remote store):
``info`` → Neuroglancer precomputed, ``zarr.json`` → zarr v3 / OME-Zarr, ``attributes.json`` → N5.
A Neuroglancer-style prefix (``precomputed://`` …) skips detection. Pointing at the metadata file
itself (``…/info``, ``…/zarr.json``, ``…/attributes.json``) opens its directory, because that is
what a user who drags the file onto napari means.
"""

from __future__ import annotations

import os
from typing import Any

from napari_shardscope.core.errors import NotADatasetError
from napari_shardscope.core.precomputed.info import parse_info
from napari_shardscope.core.volumes.context import shared_context
from napari_shardscope.core.volumes.locate import Location, parse_json_object, parse_location, read_keys
from napari_shardscope.core.volumes.model import Kind, Volume
from napari_shardscope.core.volumes.n5 import open_n5
from napari_shardscope.core.volumes.precomputed import open_precomputed
from napari_shardscope.core.volumes.zarr import open_zarr

METADATA_KEYS = {"precomputed": "info", "zarr": "zarr.json", "n5": "attributes.json"}


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
    MetadataError, FormatError, StoreError
        For broken metadata or unreachable stores (with the key and the reason).
    """
    ctx = context if context is not None else shared_context()
    loc = parse_location(url)
    if loc.name in METADATA_KEYS.values():
        loc = loc.parent()
    keys = [METADATA_KEYS[loc.format_hint]] if loc.format_hint else list(METADATA_KEYS.values())
    found = read_keys(loc, keys, ctx)
    base = loc.url.rstrip("/")
    if found.get("info") is not None:
        info = parse_info(found["info"] or b"", key=f"{base}/info")
        return [open_precomputed(loc, ctx, kind=kind, info=info)]
    if found.get("zarr.json") is not None:
        meta = parse_json_object(found["zarr.json"], f"{base}/zarr.json")
        return open_zarr(loc, ctx, kind=kind, meta=meta)
    if found.get("attributes.json") is not None:
        attrs = parse_json_object(found["attributes.json"], f"{base}/attributes.json")
        return [open_n5(loc, ctx, kind=kind, attrs=attrs)]
    wanted = " or ".join(keys)
    raise NotADatasetError(f"{loc.url}: no {wanted} here, so it is not a precomputed, zarr v3 or N5 volume")


def open_volume(url: str | os.PathLike[str], *, kind: Kind | None = None, context: Any = None) -> Volume:
    """The volume at ``url`` (for an OME-Zarr image with labels: the image).

    See :func:`open_volumes` for the accepted URLs and the errors.
    """
    return open_volumes(url, kind=kind, context=context)[0]


def location_of(url: str | os.PathLike[str]) -> Location:
    """The parsed location of ``url`` (exposed for widgets that show where a volume lives)."""
    return parse_location(url)
