"""The door to precomputed annotation collections (``neuroglancer_annotations_v1``).

Kept beside the registry, not in it: the registry is imported by every format package (through
:mod:`.base`), and the formats must not import each other, so the one function that names the
precomputed package's annotation reader lives here.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.formats.registry import open_dataset

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.annotations.reader import AnnotationSource


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
