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
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location, parse_url
from napari_shardscope.core.bytestore.kvreads import read_keys
from napari_shardscope.core.errors import NotADatasetError
from napari_shardscope.core.formats.api import Dataset, Format

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.annotations.reader import AnnotationSource

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
            return fmt.open(location, data, context)
    documents = _or([f.metadata_key for f in formats if "/" not in f.metadata_key])
    names = _or(list(dict.fromkeys(f.title for f in formats)))
    raise NotADatasetError(f"{location.url}: no {documents} here, so it is not a {names} dataset")


def open_annotations(url: str | os.PathLike[str] | Location, context: Any = None) -> AnnotationSource:
    """Open the precomputed annotation collection at ``url`` (``info`` with ``neuroglancer_annotations_v1``).

    Returns its :class:`~napari_shardscope.core.formats.precomputed.annotations.reader.AnnotationSource`:
    ``get``/``get_many`` by annotation id, ``related`` by segment, ``cell``/``query_box`` through the
    spatial index, ``all``/``iter_batches`` for everything, and ``locate_*`` for where each is stored.

    Raises
    ------
    NotADatasetError
        When there is no ``info`` at ``url``.
    MetadataError
        When the ``info`` is not an annotation collection's, or breaks the spec.
    """
    dataset = open_dataset(url, context)
    opener = getattr(dataset, "annotations", None)
    if not callable(opener):
        from napari_shardscope.core.errors import MetadataError

        raise MetadataError(f"is a {dataset.format_name} dataset, not a precomputed annotation collection",
                            key=dataset.url)
    source: AnnotationSource = opener()
    return source


def _or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
