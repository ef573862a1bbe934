"""A zarr v3 array or (OME-Zarr) group behind the format registry: ``zarr.json`` parsed once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.formats.base import DatasetBase
from napari_shardscope.core.json_document import load_json_object

if TYPE_CHECKING:
    from napari_shardscope.core.volumes.model import Kind, Volume


class Zarr3Dataset(DatasetBase):
    """A zarr v3 node: an array, or a group with OME-Zarr multiscales/labels."""

    format_name = "zarr3"
    metadata_key = "zarr.json"

    def __init__(self, location: Location, metadata: bytes, context: Any = None) -> None:
        super().__init__(location, metadata, context)
        self.document = load_json_object(metadata, key=self.metadata_url)

    def open_volumes(self, *, kind: Kind | None = None) -> list[Volume]:
        from napari_shardscope.core.volumes.zarr import open_zarr

        return open_zarr(self.location, self.context, kind=kind, meta=self.document)

    def _make_inspector(self) -> Any:
        from napari_shardscope.core.formats.zarr3.inspector import Zarr3Inspector

        return Zarr3Inspector(self.store)

    def _make_layout_backend(self) -> Any:
        from napari_shardscope.core.formats.zarr3.layout import Zarr3Layout

        return Zarr3Layout(self.inspector())


def open_dataset(location: Location, metadata: bytes, context: Any = None) -> Zarr3Dataset:
    """The registry's opener for ``zarr.json``."""
    return Zarr3Dataset(location, metadata, context)
