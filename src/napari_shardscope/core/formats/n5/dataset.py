"""An N5 dataset or multiscale group behind the format registry: ``attributes.json`` parsed once.

The scales (:class:`~.attributes.ScaleLevel`: dataset attributes, downsampling factors, resolution)
are parsed once, on first use, by :func:`~.attributes.list_scales` from the root document already
read and the ``sN`` documents; that one list serves the volume spec and the inspector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.errors import NotADatasetError
from napari_shardscope.core.formats.base import DatasetBase
from napari_shardscope.core.formats.n5.attributes import ScaleLevel, list_scales
from napari_shardscope.core.json_document import load_json_object

if TYPE_CHECKING:
    from napari_shardscope.core.formats.volume_spec import Kind, VolumeSpec


class N5Dataset(DatasetBase):
    """An N5 dataset (``dimensions`` + ``dataType``) or a group of ``s0``, ``s1``, … datasets."""

    format_name = "n5"
    metadata_key = "attributes.json"

    def __init__(self, location: Location, metadata: bytes, context: Any = None) -> None:
        super().__init__(location, metadata, context)
        self.document = load_json_object(metadata, key=self.metadata_url)
        self._levels: list[ScaleLevel] | None = None

    @property
    def levels(self) -> list[ScaleLevel]:
        """The scales, finest first (one with key ``""`` for a plain dataset)."""
        if self._levels is None:
            try:
                self._levels = list_scales(self.store, "", self.document)
            except NotADatasetError as exc:  # an N5 container: name the datasets inside it
                raise self.not_a_dataset(str(exc)) from None
        return self._levels

    def volume_specs(self, kind: Kind | None = None) -> list[VolumeSpec]:
        from napari_shardscope.core.formats.n5.volume import volume_spec

        return [volume_spec(self.location, self.levels, self.document, kind=kind, store=self.store)]

    def _make_inspector(self) -> Any:
        from napari_shardscope.core.formats.n5.inspector import N5Inspector

        return N5Inspector(self.store, self.levels, self.document)

    def _make_layout_backend(self) -> Any:
        from napari_shardscope.core.formats.n5.layout import N5Layout

        return N5Layout(self.inspector())


def open_dataset(location: Location, metadata: bytes, context: Any = None) -> N5Dataset:
    """The registry's opener for ``attributes.json``."""
    return N5Dataset(location, metadata, context)


def open_scales_group(location: Location, metadata: bytes, context: Any = None) -> N5Dataset:
    """The registry's opener for a multiscale group without an ``attributes.json`` of its own.

    N5 does not require a group to have attributes; n5-spark and hand-made pyramids often leave a
    plain directory of ``s0``, ``s1``, … datasets. The registry finds it by ``s0/attributes.json``
    (``metadata``, read again by :func:`~.attributes.list_scales` with the other scales).
    """
    return N5Dataset(location, b"{}", context)
