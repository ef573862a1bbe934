"""A Neuroglancer precomputed dataset behind the format registry: ``info`` parsed once."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import Location
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.formats.base import DatasetBase
from napari_shardscope.core.formats.precomputed.info import PrecomputedInfo, parse_info
from napari_shardscope.core.json_document import load_json_object

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.annotations.info import AnnotationInfo
    from napari_shardscope.core.formats.precomputed.annotations.reader import AnnotationSource
    from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
    from napari_shardscope.core.formats.volume_spec import Kind, VolumeSpec

VOLUME_TYPE = "neuroglancer_multiscale_volume"
ANNOTATION_TYPE = "neuroglancer_annotations_v1"


class PrecomputedDataset(DatasetBase):
    """A volume ``info``, or a segment-keyed directory's (meshes, skeletons, annotations)."""

    format_name = "precomputed"
    metadata_key = "info"

    def __init__(self, location: Location, info: bytes, context: Any = None) -> None:
        super().__init__(location, info, context)
        self.document = load_json_object(info, key=self.metadata_url)
        self._info: PrecomputedInfo | None = None
        self._annotation_info: AnnotationInfo | None = None
        self._volume_inspector: Any = None
        self._reader_lock = threading.Lock()

    @property
    def is_volume(self) -> bool:
        """Whether ``info`` describes a volume (not a mesh, skeleton or annotation directory)."""
        return bool(self.document.get("@type", VOLUME_TYPE) == VOLUME_TYPE)

    @property
    def is_annotations(self) -> bool:
        """Whether ``info`` describes a precomputed annotation collection (``neuroglancer_annotations_v1``)."""
        return bool(self.document.get("@type") == ANNOTATION_TYPE)

    @property
    def annotation_info(self) -> AnnotationInfo:
        """The collection's parsed ``info`` (MetadataError for a directory that is not an annotation collection)."""
        if self._annotation_info is None:
            from napari_shardscope.core.formats.precomputed.annotations.info import parse_annotation_info

            self._annotation_info = parse_annotation_info(self.document, key=self.metadata_url)
        return self._annotation_info

    def annotations(self) -> AnnotationSource:
        """The annotation collection, read through this dataset's store and its inspector's shard readers."""
        if not self.is_annotations:
            raise MetadataError(f'"@type" {self.document.get("@type", VOLUME_TYPE)!r} is not a precomputed annotation '
                                f"collection ({ANNOTATION_TYPE})", key=self.metadata_url)
        source: AnnotationSource = self.inspector().annotations
        return source

    @property
    def info(self) -> PrecomputedInfo:
        """The volume's parsed ``info`` (MetadataError for a directory that is not a volume)."""
        if self._info is None:
            if self.is_annotations:
                raise MetadataError(f"is a precomputed annotation collection ({ANNOTATION_TYPE}: "
                                    f"{str(self.document.get('annotation_type', '?')).lower()} annotations), not a "
                                    "volume: it has no voxels to show; read it with open_annotations(url) or "
                                    "inspect it with shardscope inspect", key=self.metadata_url)
            self._info = parse_info(self.document, key=self.metadata_url)
        return self._info

    def volume_specs(self, kind: Kind | None = None) -> list[VolumeSpec]:
        """The one volume ``info`` describes (MetadataError for a segment-keyed directory)."""
        from napari_shardscope.core.formats.precomputed.volume import volume_spec

        return [volume_spec(self.location, self.info, kind=kind, store=self.store, chunk_reader=self._sharded_chunk,
                            shard_reader=self._shard_reader)]

    def _sharded_chunk(self, scale: str, chunk_id: int) -> bytes | None:
        """One chunk's bytes (data encoding undone) of a sharded scale, for :class:`.PrecomputedChunkSource`."""
        data: bytes | None = self._shard_reader(scale).read_chunk(chunk_id)
        return data

    def _shard_reader(self, scale: str) -> ShardedReader:
        """The shard reader of a sharded scale that volume reads use (:class:`.RawChunkSource`, chunk sources).

        Its own inspector (own index caches: the viewer reads from worker threads); on local disk over a
        :class:`~napari_shardscope.core.bytestore.local.KeptOpenLocalStore`, which opens each shard file once.
        """
        with self._reader_lock:
            if self._volume_inspector is None:
                from napari_shardscope.core.bytestore.local import KeptOpenLocalStore, LocalByteStore
                from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector

                store = self.store
                if type(store) is LocalByteStore:
                    store = KeptOpenLocalStore(store.root, follow_symlinks=store.follow_symlinks)
                self._volume_inspector = PrecomputedInspector(store, self.info)
            ins = self._volume_inspector
            reader: ShardedReader = ins.reader(ins.source(scale))
        return reader

    def _make_inspector(self) -> Any:
        from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector

        if self.is_annotations:
            return PrecomputedInspector(self.store, self.annotation_info)
        return PrecomputedInspector(self.store, self.info if self.is_volume else self.document)

    def _make_layout_backend(self) -> Any:
        from napari_shardscope.core.formats.precomputed.layout import PrecomputedLayout

        return PrecomputedLayout(self.inspector())


def open_dataset(location: Location, metadata: bytes, context: Any = None) -> PrecomputedDataset:
    """The registry's opener for ``info``."""
    return PrecomputedDataset(location, metadata, context)
