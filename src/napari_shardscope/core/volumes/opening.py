"""The public entry points :func:`open_volume` / :func:`open_volumes`: the format registry's datasets as volumes.

Detection is :func:`~napari_shardscope.core.formats.open_dataset`'s (metadata only, one round-trip);
this module only asks the dataset for its volumes, so the viewer sees what ``inspect`` sees.
"""

from __future__ import annotations

import os
from typing import Any

from napari_shardscope.core.bytestore.url import Location, parse_url
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.volumes.context import shared_context
from napari_shardscope.core.volumes.model import Kind, Volume


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
    return open_dataset(url, context=ctx).open_volumes(kind=kind)


def open_volume(url: str | os.PathLike[str], *, kind: Kind | None = None, context: Any = None) -> Volume:
    """The volume at ``url`` (for an OME-Zarr image with labels: the image).

    See :func:`open_volumes` for the accepted URLs and the errors.
    """
    return open_volumes(url, kind=kind, context=context)[0]


def location_of(url: str | os.PathLike[str]) -> Location:
    """The parsed location of ``url`` (exposed for widgets that show where a volume lives)."""
    return parse_url(url)
