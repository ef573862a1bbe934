"""What the per-format datasets share: the root, a lazily opened byte store, made-once consumers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.bytestore import ByteStore, Location, open_store
from napari_shardscope.core.errors import ArgumentError, FormatCapabilityError, NotADatasetError

if TYPE_CHECKING:
    from napari_shardscope.core.formats.layout_model import LayoutBackend, ScaleGeometry
    from napari_shardscope.core.formats.volume_spec import Kind, VolumeSpec


class DatasetBase:
    """The parts of a :class:`~napari_shardscope.core.formats.api.Dataset` that no format changes.

    Subclasses set :attr:`format_name` and :attr:`metadata_key`, parse their document once (on
    first use), and implement ``volume_specs``, ``_make_inspector`` and ``_make_layout_backend``;
    the inspector and layout backend are made on first use and shared, so the shard browser and
    the CLI reuse one set of index caches. The volume specs are opened by
    :mod:`napari_shardscope.core.volumes`, the layer above the formats.

    The capabilities only some formats have (:meth:`mesh_source`, :meth:`skeleton_source`,
    :meth:`locate_chunk_id`, :meth:`locate_segment`, :meth:`annotations`) raise
    :class:`~napari_shardscope.core.errors.FormatCapabilityError` here; a format that has one
    overrides it. Callers ask the dataset, never its class.
    """

    format_name: str = ""
    metadata_key: str = ""

    def __init__(self, location: Location, metadata: bytes, context: Any = None) -> None:
        self.location = location
        self.context = context
        self._metadata_size = len(metadata)
        self._store: ByteStore | None = None
        self._known: dict[str, bytes | None] = {}
        self._inspector: Any = None
        self._layout_backend: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    @property
    def url(self) -> str:
        return self.location.url

    @property
    def metadata_url(self) -> str:
        """The metadata document's URL, as errors name it."""
        return f"{self.url.rstrip('/')}/{self.metadata_key}"

    @property
    def store(self) -> ByteStore:
        if self._store is None:
            self._store = open_store(self.location, context=self.context)
            self._store.stats.add(self._metadata_size)  # the detection read belongs to this dataset
            self._hand_over_documents()
        return self._store

    def adopt_documents(self, documents: dict[str, bytes | None]) -> None:
        """The documents format detection read at this root (``None``: absent), so this open reads none again.

        A remote store answers its next read of each from them (``TensorStoreByteStore.remember``):
        detection asks for every format's document at once, and an opener then needing one of them
        (N5's ``s0/attributes.json``) costs no request and no round trip.
        """
        self._known.update(documents)
        if self._store is not None:
            self._hand_over_documents()

    def _hand_over_documents(self) -> None:
        remember = getattr(self._store, "remember", None)
        if remember is not None and self._known:
            remember(self._known)
        self._known = {}

    def volume_specs(self, kind: Kind | None = None) -> list[VolumeSpec]:
        raise NotImplementedError

    def inspector(self) -> Any:
        if self._inspector is None:
            self._inspector = self._make_inspector()
        return self._inspector

    def new_inspector(self) -> Any:
        """An inspector with caches of its own (the shard browser validates on one in a worker thread)."""
        return self._make_inspector()

    def layout_backend(self) -> Any:
        if self._layout_backend is None:
            self._layout_backend = self._make_layout_backend()
        return self._layout_backend

    def locate_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """Where the chunk holding ``voxel`` (z, y, x from 0, the reader's index) is stored; see
        :meth:`~napari_shardscope.core.formats.api.Dataset.locate_voxel`."""
        geo = self.geometry(scale)
        record = self.inspector().locate_format_voxel(list(geo.format_voxel(voxel)), geo.scale)
        return geo.reader_record(record)

    def geometry(self, scale: str | None = None) -> ScaleGeometry:
        """The voxel grid of ``scale`` (a scale key; default the finest) as the format's metadata places it."""
        backend: LayoutBackend = self.layout_backend()
        scales = backend.spatial_scales()
        if scale is None:
            if not scales:
                raise ArgumentError(f"{self.url} has no voxel scales (it is keyed by segment id)")
            scale = scales[0]
        elif scale not in scales:
            raise ArgumentError(f"no scale {scale!r} in {self.url}: the scale keys are {', '.join(scales)}")
        return backend.geometry(scale)

    def _make_inspector(self) -> Any:
        raise NotImplementedError

    def not_a_dataset(self, message: str, *, named: Sequence[str] = ()) -> NotADatasetError:
        """The error for this location holding no volume itself (a group, a container), naming the datasets
        found below it (:func:`~napari_shardscope.core.formats.registry.not_a_dataset`; ``named``: the
        children the metadata lists)."""
        from napari_shardscope.core.formats.registry import not_a_dataset

        return not_a_dataset(self.location, message, self.context, named=named)

    def _make_layout_backend(self) -> Any:
        raise NotImplementedError

    # -- capabilities only some formats have --------------------------------------------------------------
    def lacks(self, capability: str, hint: str = "") -> FormatCapabilityError:
        """The error for asking this dataset for ``capability`` (``"meshes"``) its format does not have."""
        return FormatCapabilityError(self.format_name, capability, self.url, hint)

    def mesh_source(self) -> Any:
        """The mesh source the dataset names (see :meth:`~napari_shardscope.core.formats.api.Dataset.mesh_source`)."""
        raise self.lacks("meshes", "meshes are Neuroglancer precomputed's (an info naming a mesh directory)")

    def skeleton_source(self) -> Any:
        """The skeletons the dataset names (:meth:`~napari_shardscope.core.formats.api.Dataset.skeleton_source`)."""
        raise self.lacks("skeletons", "skeletons are Neuroglancer precomputed's (an info naming a skeletons "
                                      "directory)")

    def locate_chunk_id(self, chunk_id: int, scale: str | None = None) -> dict[str, Any]:
        """Where a chunk id is stored (:meth:`~napari_shardscope.core.formats.api.Dataset.locate_chunk_id`)."""
        raise self.lacks("chunk ids", "locate a voxel or a grid position instead")

    def locate_segment(self, segment_id: int) -> list[dict[str, Any]]:
        """Where a segment's files are (:meth:`~napari_shardscope.core.formats.api.Dataset.locate_segment`)."""
        raise self.lacks("segment-keyed data", "locate a voxel or a chunk instead")

    def annotations(self) -> Any:
        """The annotation collection this dataset is (:meth:`.api.Dataset.annotations`)."""
        raise self.lacks("annotations", "annotations are Neuroglancer precomputed's (an info of @type "
                                        "neuroglancer_annotations_v1)")
