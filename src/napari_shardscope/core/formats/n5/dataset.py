"""An N5 dataset or multiscale group behind the format registry: ``attributes.json`` parsed once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.formats.base import DatasetBase
from napari_shardscope.core.json_document import load_json_object

if TYPE_CHECKING:
    from napari_shardscope.core.volumes.model import Kind, Volume


class N5Dataset(DatasetBase):
    """An N5 dataset (``dimensions`` + ``dataType``) or a group of ``s0``, ``s1``, … datasets."""

    format_name = "n5"
    metadata_key = "attributes.json"

    def __init__(self, location: Location, metadata: bytes, context: Any = None) -> None:
        super().__init__(location, metadata, context)
        self.document = load_json_object(metadata, key=self.metadata_url)

    def open_volumes(self, *, kind: Kind | None = None) -> list[Volume]:
        from napari_shardscope.core.volumes.n5 import open_n5

        return [open_n5(self.location, self.context, kind=kind, attrs=self.document)]

    def _make_inspector(self) -> Any:
        from napari_shardscope.core.formats.n5.inspector import N5Inspector

        return N5Inspector(self.store)

    def _make_layout_backend(self) -> Any:
        from napari_shardscope.core.formats.n5.layout import N5Layout

        return N5Layout(self.inspector())


def open_dataset(location: Location, metadata: bytes, context: Any = None) -> N5Dataset:
    """The registry's opener for ``attributes.json``."""
    return N5Dataset(location, metadata, context)
