"""A zarr v2 array or OME-Zarr 0.4 group behind the format registry: ``.zarray`` / ``.zattrs`` parsed once.

The registry finds a v2 node by its ``.zarray`` (an array) or ``.zgroup`` (a group) and hands the
document's bytes to :func:`open_array` or :func:`open_group`. A group is read through its
``.zattrs``: NGFF 0.4 ``multiscales`` make it an image (with the label images its ``labels``
group lists), a bare ``labels`` list makes it a labels group. The arrays a group points at are
parsed once each, on first use, and that one parse serves the volume specs (viewer, export) and
the inspector (``inspect``, the shard browser).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import ByteStore, Location, join_key, read_document
from napari_shardscope.core.errors import MetadataError, NotADatasetError
from napari_shardscope.core.formats.base import DatasetBase
from napari_shardscope.core.formats.ome import OmeMultiscale, label_names, parse_multiscale
from napari_shardscope.core.formats.zarr2.metadata import (
    ARRAY_FILE,
    ATTRIBUTES_FILE,
    GROUP_FILE,
    Zarr2ArrayMetadata,
    parse_zarray,
)
from napari_shardscope.core.json_document import load_json_object

if TYPE_CHECKING:
    from napari_shardscope.core.formats.volume_spec import Kind, VolumeSpec


def read_attributes(store: ByteStore, path: str, *, url: str) -> dict[str, Any]:
    """The ``.zattrs`` of the node at ``path`` (empty when it has none)."""
    data = read_document(store, join_key(path, ATTRIBUTES_FILE))
    return {} if data is None else load_json_object(data, key=f"{url.rstrip('/')}/{ATTRIBUTES_FILE}")


def read_array(store: ByteStore, path: str, *, url: str) -> Zarr2ArrayMetadata:
    """The parsed ``.zarray`` (with its ``.zattrs``) of the array at ``path`` under ``store``'s root."""
    key = f"{url.rstrip('/')}/{ARRAY_FILE}"
    data = read_document(store, join_key(path, ARRAY_FILE))
    if data is None:
        raise MetadataError(f"no {ARRAY_FILE}: the group lists an array that is not there", key=key)
    return parse_zarray(load_json_object(data, key=key), key=key,
                        attributes=read_attributes(store, path, url=url))


class Zarr2Dataset(DatasetBase):
    """A zarr v2 node: an array, or a group with OME-Zarr 0.4 multiscales/labels."""

    format_name = "zarr2"

    def __init__(self, location: Location, metadata: bytes, context: Any = None, *, is_array: bool) -> None:
        super().__init__(location, metadata, context)
        self.is_array = is_array
        self.metadata_key = ARRAY_FILE if is_array else ATTRIBUTES_FILE
        document_key = self.metadata_url if is_array else f"{self.url.rstrip('/')}/{GROUP_FILE}"
        document = load_json_object(metadata, key=document_key)  # a JSON object, or refused
        self.document = document if is_array else {}
        self.attributes = read_attributes(self.store, "", url=self.url)
        self._arrays: dict[str, Zarr2ArrayMetadata] = {}
        self._multiscale: OmeMultiscale | None = None

    def array_metadata(self, path: str = "") -> Zarr2ArrayMetadata:
        """The parsed ``.zarray`` of the array at ``path`` (``""``: the root array), parsed once."""
        path = path.strip("/")
        if path not in self._arrays:
            if not path and self.is_array:
                self._arrays[path] = parse_zarray(self.document, key=self.metadata_url, attributes=self.attributes)
            else:
                url = self.location.child(path).url if path else self.url
                self._arrays[path] = read_array(self.store, path, url=url)
        return self._arrays[path]

    @property
    def multiscale(self) -> OmeMultiscale | None:
        """The group's NGFF 0.4 multiscale image, ``None`` for an array or a group without one."""
        if self._multiscale is None and not self.is_array and "multiscales" in self.attributes:
            self._multiscale = parse_multiscale(self.attributes, key=self.metadata_url)
        return self._multiscale

    def scale_paths(self) -> list[str]:
        """The arrays the inspector and the shard browser show: ``[""]`` for an array, else the scales."""
        if self.is_array:
            return [""]
        ms = self.multiscale
        if ms is None and "labels" in self.attributes:
            labels = ", ".join(self.location.child(n).url for n in label_names(self.attributes))
            raise NotADatasetError(f"{self.metadata_url}: an OME-Zarr labels group; the viewer opens its label "
                                   f"images, inspect one of them: {labels or '(none listed)'}",
                                   children=tuple(label_names(self.attributes)), url=self.url)
        if ms is None:
            raise self.not_a_dataset(f"{self.metadata_url}: a zarr v2 group without OME-Zarr 'multiscales'")
        return list(ms.paths)

    def volume_specs(self, kind: Kind | None = None) -> list[VolumeSpec]:
        """An array's one volume; an OME-Zarr image and its label images; a labels group's label images.

        Raises
        ------
        NotADatasetError
            For a group with neither ``multiscales`` nor ``labels``.
        """
        from napari_shardscope.core.formats.zarr2.volume import array_volume_spec

        if self.is_array:
            return [array_volume_spec(self.location, self.store, self.array_metadata(), self.document, kind=kind)]
        if self.multiscale is not None:
            specs = [self._image_spec(kind=kind)]
            if "image-label" not in self.attributes and kind != "segmentation":
                specs.extend(self._label_specs("labels"))
            return specs
        if "labels" in self.attributes:
            return self._label_specs("")
        raise self.not_a_dataset(f"{self.metadata_url}: a zarr v2 group without OME-Zarr 'multiscales' or 'labels'")

    def _image_spec(self, *, kind: Kind | None, name: str | None = None) -> VolumeSpec:
        from napari_shardscope.core.formats.zarr2.volume import ome_volume_spec

        ms = self.multiscale
        assert ms is not None
        arrays = {path: self.array_metadata(path) for path in ms.paths}
        return ome_volume_spec(self.location, self.store, ms, arrays, self.attributes, kind=kind, name=name)

    def _label_specs(self, prefix: str) -> list[VolumeSpec]:
        """The label images listed by the ``labels`` group at ``prefix`` (``""``: this group); none without one."""
        attributes = read_attributes(self.store, prefix, url=self.location.child(prefix).url) if prefix else \
            self.attributes
        specs = []
        for label in label_names(attributes):
            path = join_key(prefix, label)
            where = self.location.child(path)
            data = read_document(self.store, join_key(path, GROUP_FILE))
            if data is None:
                raise MetadataError(f"labels lists {label!r} but it has no {GROUP_FILE}",
                                    key=f"{where.url}/{GROUP_FILE}")
            image = Zarr2Dataset(where, data, self.context, is_array=False)
            if image.multiscale is None:
                raise MetadataError(f"label image {label!r} has no 'multiscales'", key=image.metadata_url)
            specs.append(image._image_spec(kind="segmentation", name=label))
        return specs

    def _make_inspector(self) -> Any:
        from napari_shardscope.core.formats.zarr2.inspector import Zarr2Inspector

        return Zarr2Inspector(self)

    def _make_layout_backend(self) -> Any:
        from napari_shardscope.core.formats.zarr2.layout import Zarr2Layout

        return Zarr2Layout(self.inspector())


def open_array(location: Location, metadata: bytes, context: Any = None) -> Zarr2Dataset:
    """The registry's opener for ``.zarray``."""
    return Zarr2Dataset(location, metadata, context, is_array=True)


def open_group(location: Location, metadata: bytes, context: Any = None) -> Zarr2Dataset:
    """The registry's opener for ``.zgroup``."""
    return Zarr2Dataset(location, metadata, context, is_array=False)
