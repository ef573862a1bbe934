"""The format registry and :func:`open_dataset`, the one place a URL becomes a dataset.

Adding a format is adding its package under ``core/formats/`` and one line to :data:`FORMATS` (one per
metadata document that identifies it: zarr v2 has two, ``.zarray`` for arrays and ``.zgroup`` for groups;
N5 has a second for multiscale groups without attributes of their own, found by ``s0/attributes.json``).
Detection reads only metadata, every candidate at once (one round-trip on a remote store), and
the first format in :data:`FORMATS` whose document exists wins. A Neuroglancer format prefix or
suffix (``precomputed://``, ``URL|zarr3:``) or a URL naming the document itself skips detection.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from typing import Any

from napari_shardscope.core.bytestore import Location, parse_url
from napari_shardscope.core.bytestore.kvreads import read_keys
from napari_shardscope.core.errors import NotADatasetError
from napari_shardscope.core.formats.api import Dataset, Format
from napari_shardscope.core.formats.discovery import find_openable, searching

_PKG = "napari_shardscope.core.formats"  # each opener is imported on first use

#: Every format, in detection order; one line per format.
FORMATS: tuple[Format, ...] = (
    Format("precomputed", "precomputed", ("precomputed",), "info", f"{_PKG}.precomputed.dataset:open_dataset",
           f"{_PKG}.precomputed.layout:PrecomputedLayout"),
    Format("zarr3", "zarr v3", ("zarr", "zarr3"), "zarr.json", f"{_PKG}.zarr3.dataset:open_dataset",
           f"{_PKG}.zarr3.layout:Zarr3Layout"),
    Format("n5", "N5", ("n5",), "attributes.json", f"{_PKG}.n5.dataset:open_dataset", f"{_PKG}.n5.layout:N5Layout"),
    Format("zarr2", "zarr v2", ("zarr", "zarr2"), ".zarray", f"{_PKG}.zarr2.dataset:open_array",
           f"{_PKG}.zarr2.layout:Zarr2Layout"),
    Format("zarr2", "zarr v2", ("zarr", "zarr2"), ".zgroup", f"{_PKG}.zarr2.dataset:open_group",
           f"{_PKG}.zarr2.layout:Zarr2Layout"),
    Format("n5", "N5", ("n5",), "s0/attributes.json", f"{_PKG}.n5.dataset:open_scales_group",
           f"{_PKG}.n5.layout:N5Layout"),
)


def format_named(name: str) -> Format:
    """The registry entry called ``name`` (KeyError naming the known formats otherwise)."""
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise KeyError(f"no format {name!r}; formats are {[f.name for f in FORMATS]}")


def candidate_formats(location: Location) -> tuple[Format, ...]:
    """The formats worth probing at ``location``: the one its URL forces, or every one."""
    if location.format_hint is None:
        return FORMATS
    return tuple(f for f in FORMATS if location.format_hint in f.hints)


def open_dataset(url: str | os.PathLike[str] | Location, context: Any = None) -> Dataset:
    """Detect the format at ``url`` and open it as a :class:`Dataset` (metadata read once).

    Parameters
    ----------
    url
        Anything :func:`~napari_shardscope.core.bytestore.parse_url` accepts.
    context
        A ``tensorstore.Context``; default: the shared one of :mod:`napari_shardscope.core.volumes`.

    Raises
    ------
    NotADatasetError
        When none of the formats' metadata documents is there.
    ArgumentError
        For a URL scheme we cannot read.
    MetadataError, StoreError
        For broken metadata or an unreachable store (with the key and the reason).
    """
    if context is None:
        from napari_shardscope.core.bytestore.context import shared_context

        context = shared_context()
    location = parse_url(url)
    formats = candidate_formats(location)
    found = read_keys(location, [f.metadata_key for f in formats], context)
    for fmt in formats:
        data = found.get(fmt.metadata_key)
        if data is not None:
            dataset = fmt.open(location, data, context)
            adopt = getattr(dataset, "adopt_documents", None)
            if adopt is not None:  # the other documents detection read: the opener reads none of them again
                adopt({key: value for key, value in found.items() if key != fmt.metadata_key})
            return dataset
    documents = _or([f.metadata_key for f in formats if "/" not in f.metadata_key])
    names = _or(list(dict.fromkeys(f.title for f in formats)))
    raise not_a_dataset(location, f"{location.url}: no {documents} here, so it is not a {names} dataset", context)


def not_a_dataset(location: Location, message: str, context: Any = None, *,
                  named: Sequence[str] = ()) -> NotADatasetError:
    """The error for ``location`` holding no volume itself, naming the datasets found below it.

    Every format raises its "not a dataset" (a directory without metadata, an N5 container, a zarr
    group without OME-Zarr images) through here, so each names what a user can open instead: the
    bounded search of :mod:`.discovery` (local directories listed; on a remote store only ``named``,
    the children the metadata names). Inside a search, the plain error (no nested search).
    """
    if searching():
        return NotADatasetError(message, url=location.url)
    if context is None:
        from napari_shardscope.core.bytestore.context import shared_context

        context = shared_context()
    found = find_openable(location, partial(_probe, context=context), named=named)
    return NotADatasetError(f"{message}; {found.describe()}", children=tuple(c.path for c in found.children),
                            url=location.url)


def _probe(location: Location, *, context: Any) -> tuple[str, str] | None:
    """``(format, summary)`` of the volumes at ``location`` (metadata only), ``None`` without metadata there."""
    found = read_keys(location, [f.metadata_key for f in FORMATS], context)
    for fmt in FORMATS:
        data = found.get(fmt.metadata_key)
        if data is None:
            continue
        specs = fmt.open(location, data, context).volume_specs()
        if not specs:  # metadata without a volume (an OME-Zarr group whose images are all unusable)
            continue
        first = specs[0]
        title = "OME-Zarr" if first.format == "ome-zarr" else fmt.title
        level = first.levels[0]
        shape = "x".join(str(n) for n in level.shape)
        more = f", +{len(specs) - 1} label image{'s' if len(specs) > 2 else ''}" if len(specs) > 1 else ""
        return title, f"{first.kind} {level.dtype} {shape}{more}"
    return None


def _or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
