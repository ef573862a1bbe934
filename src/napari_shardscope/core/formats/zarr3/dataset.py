"""A zarr v3 array or (OME-Zarr) group behind the format registry: ``zarr.json`` parsed once.

The root document is parsed on first use into :class:`~.metadata.ArrayMetadata` or
:class:`~.metadata.GroupMetadata`; the arrays a group points at are parsed once each, on first use,
by :meth:`Zarr3Dataset.array_metadata`, and that one parse serves both the volume specs (the
viewer, export) and the inspector (``inspect``, the shard browser).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location, join_key, read_document
from napari_shardscope.core.errors import MetadataError, NotADatasetError
from napari_shardscope.core.formats.base import DatasetBase
from napari_shardscope.core.formats.ome import label_names, ome_attributes
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, GroupMetadata, parse_node_metadata
from napari_shardscope.core.formats.zarr3.reader import read_array_metadata
from napari_shardscope.core.json_document import load_json_object

if TYPE_CHECKING:
    from napari_shardscope.core.formats.volume_spec import Kind, VolumeSpec


class Zarr3Dataset(DatasetBase):
    """A zarr v3 node: an array, or a group with OME-Zarr multiscales/labels."""

    format_name = "zarr3"
    metadata_key = "zarr.json"

    def __init__(self, location: Location, metadata: bytes, context: Any = None) -> None:
        super().__init__(location, metadata, context)
        self.document = load_json_object(metadata, key=self.metadata_url)
        self._node: ArrayMetadata | GroupMetadata | None = None
        self._arrays: dict[str, ArrayMetadata] = {}

    @property
    def node(self) -> ArrayMetadata | GroupMetadata:
        """The parsed root ``zarr.json``."""
        if self._node is None:
            self._node = parse_node_metadata(self.document, key=self.metadata_url)
        return self._node

    def array_metadata(self, path: str) -> ArrayMetadata:
        """The parsed ``zarr.json`` of the array at ``path`` (``""``: the root), read and parsed once."""
        path = path.strip("/")
        if not path and isinstance(self.node, ArrayMetadata):
            return self.node
        if path not in self._arrays:
            self._arrays[path] = read_array_metadata(self.store, path)
        return self._arrays[path]

    def volume_specs(self, kind: Kind | None = None) -> list[VolumeSpec]:
        """An array's one volume; an OME-Zarr image and its label images; a labels group's label images.

        Raises
        ------
        NotADatasetError
            For a group with neither OME-Zarr ``multiscales`` nor ``labels``.
        """
        from napari_shardscope.core.formats.zarr3.volume import array_volume_spec

        node = self.node
        if isinstance(node, ArrayMetadata):
            return [array_volume_spec(self.location, node, self.document, kind=kind, store=self.store)]
        ome = node.ome
        if "multiscales" in ome:
            specs = [self._image_spec(kind=kind)]
            if "image-label" not in ome and kind != "segmentation":
                specs.extend(self._label_specs("labels"))
            return specs
        if "labels" in ome:
            return self._label_specs("")
        raise self.not_a_dataset(f"{self.metadata_url}: a zarr group without OME-Zarr 'multiscales' or 'labels'",
                                 named=node.consolidated_array_paths)

    def _image_spec(self, *, kind: Kind | None, name: str | None = None) -> VolumeSpec:
        from napari_shardscope.core.formats.zarr3.volume import ome_volume_spec

        node = self.node
        if not isinstance(node, GroupMetadata):
            raise MetadataError("an OME-Zarr image must be a group, this is an array", key=self.metadata_url)
        ms = node.multiscale
        arrays = {path: self.array_metadata(path) for path in ms.paths}
        return ome_volume_spec(self.location, ms, arrays, node.ome, kind=kind, name=name, store=self.store)

    def _label_specs(self, prefix: str) -> list[VolumeSpec]:
        """The label images listed by the ``labels`` group at ``prefix`` (``""``: this group); none without one."""
        if prefix:
            data = read_document(self.store, join_key(prefix, "zarr.json"))
            if data is None:
                return []
            doc = load_json_object(data, key=f"{self.location.child(prefix).url}/zarr.json")
            ome = ome_attributes(doc.get("attributes"))
        else:
            ome = ome_attributes(self.document.get("attributes"))
        specs = []
        for label in label_names(ome):
            path = join_key(prefix, label)
            where = self.location.child(path)
            data = read_document(self.store, join_key(path, "zarr.json"))
            if data is None:
                raise MetadataError(f"labels lists {label!r} but it has no zarr.json", key=f"{where.url}/zarr.json")
            image = Zarr3Dataset(where, data, self.context)
            specs.append(image._image_spec(kind="segmentation", name=label))
        return specs

    def _make_inspector(self) -> Any:
        from napari_shardscope.core.formats.zarr3.inspector import Zarr3Inspector

        node = self.node
        if isinstance(node, GroupMetadata) and not node.multiscale_paths and "labels" in node.ome:
            labels = ", ".join(f"{self.location.child(n).url}" for n in label_names(node.ome))
            raise NotADatasetError(f"{self.metadata_url}: an OME-Zarr labels group; the viewer opens its label "
                                   f"images, inspect one of them: {labels or '(none listed)'}",
                                   children=tuple(label_names(node.ome)), url=self.url)
        try:
            return Zarr3Inspector(self.store, node, self.array_metadata)
        except NotADatasetError as exc:  # a group of groups: name what lies below it
            raise self.not_a_dataset(str(exc)) from None

    def _make_layout_backend(self) -> Any:
        from napari_shardscope.core.formats.zarr3.layout import Zarr3Layout

        return Zarr3Layout(self.inspector())


def open_dataset(location: Location, metadata: bytes, context: Any = None) -> Zarr3Dataset:
    """The registry's opener for ``zarr.json``."""
    return Zarr3Dataset(location, metadata, context)
