"""What every format offers, whatever its spec: the :class:`Format` entry and the :class:`Dataset` it opens.

A :class:`Dataset` is the one door to a stored volume. It parses its metadata once and hands each
consumer what it needs, so the viewer, the CLI, the shard browser, export and the labelmap all see
the same levels, voxel sizes, translations, axes and dtype:

* :meth:`Dataset.volume_specs` — the volumes as pure data (levels, shapes, voxel sizes,
  translations, axes, kind; :mod:`.volume_spec`), computed from the parsed metadata;
  :func:`napari_shardscope.core.volumes.open_dataset_volumes` opens them as lazy multiscale volumes
  (the viewer, export, the labelmap base);
* :meth:`Dataset.inspector` — ``inspect``/``locate``/``ls``/``validate`` (:class:`DatasetInspector`);
* :meth:`Dataset.layout_backend` — the format's part of the shard browser's tree;
* the capabilities only some formats have, as methods every dataset answers —
  :meth:`Dataset.mesh_source`, :meth:`Dataset.skeleton_source`, :meth:`Dataset.locate_chunk_id`,
  :meth:`Dataset.locate_segment`, :meth:`Dataset.annotations`: a format without one raises
  :class:`~napari_shardscope.core.errors.FormatCapabilityError` naming itself, so no caller checks
  a dataset's class.

Records are plain JSON-ready dicts so ``--json`` output and the GUI share one shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from napari_shardscope.core.bytestore import ByteStore, Location
from napari_shardscope.core.errors import UnsupportedFeatureError
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.progress import Progress

if TYPE_CHECKING:
    from napari_shardscope.core.formats.layout_model import LayoutBackend, ScaleGeometry
    from napari_shardscope.core.formats.volume_spec import Kind, VolumeSpec

class DatasetInspector(Protocol):
    """Read-only view of a sharded dataset's layout: scales, shards, chunks, byte ranges."""

    #: ``"precomputed"``, ``"zarr3"`` or ``"n5"``.
    format_name: str
    store: ByteStore

    def scale_keys(self) -> list[str]:
        """Names of the scales/arrays, finest first (a single array has one)."""
        ...

    def inspect(self, scale: str | None = None) -> dict[str, Any]:
        """Summary of the layout (per scale: spec, shard files, chunk counts, bytes)."""
        ...

    def locate_format_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """Where the chunk holding ``voxel`` is stored, the voxel given as the format stores it (its own axis
        order, absolute: a precomputed voxel_offset included). People type the reader's z, y, x from 0:
        :meth:`Dataset.locate_voxel` and ``LayoutTree.locate_voxel`` take that."""
        ...

    def list_chunks(self, scale: str | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """One record per stored chunk, with the same fields ``locate`` gives."""
        ...

    def validate(self, scale: str | None = None, progress: Progress | None = None) -> Iterator[Problem]:
        """Check every shard/block and yield each problem found (nothing when clean)."""
        ...


class SegmentMeshSource(Protocol):
    """A directory of per-segment meshes (precomputed's legacy or multi-resolution Draco meshes).

    What :meth:`Dataset.mesh_source` hands out, whatever the directory's kind; the classes are
    :mod:`napari_shardscope.core.formats.precomputed.meshes`' ``MultilodMeshSource`` and ``LegacyMeshSource``.
    """

    def mesh(self, segment_id: int, lod: int = 0) -> Any:
        """The segment's ``MeshData`` (vertices x, y, z in nm; faces) at ``lod``, ``None`` when it has none."""
        ...

    def num_lods(self, segment_id: int) -> int:
        """Levels of detail stored for the segment (0 when the source has none)."""
        ...

    def segment_ids(self) -> list[int]:
        """Every segment id with a mesh."""
        ...


class SegmentSkeletonSource(Protocol):
    """A directory of per-segment skeletons (precomputed's ``neuroglancer_skeletons``)."""

    def skeleton(self, segment_id: int) -> Any:
        """The segment's ``SkeletonData`` (vertices, edges, attributes), ``None`` when it has none."""
        ...

    def segment_ids(self) -> list[int]:
        """Every segment id with a skeleton."""
        ...


class Dataset(Protocol):
    """A stored dataset of one format, its metadata parsed once."""

    #: The format's registry name (``"precomputed"``, ``"zarr3"``, ``"n5"``).
    format_name: str
    #: Where it lives (the one URL grammar's result).
    location: Location
    #: The ``tensorstore.Context`` it was opened with (shared with the volumes opened from it).
    context: Any

    @property
    def url(self) -> str:
        """The dataset's root as the user typed it (format prefix removed)."""
        ...

    @property
    def store(self) -> ByteStore:
        """The byte store rooted at the dataset (opened on first use)."""
        ...

    def volume_specs(self, kind: Kind | None = None) -> list[VolumeSpec]:
        """The volumes as pure data: one, or an OME-Zarr image followed by its label images.

        Nothing is opened: the specs are computed from the metadata the dataset parsed (reading
        the metadata documents of the scales and label images it points at).
        """
        ...

    def inspector(self) -> DatasetInspector:
        """The inspector for ``inspect``/``locate``/``ls``/``validate`` (made once, then shared)."""
        ...

    def new_inspector(self) -> DatasetInspector:
        """An inspector with caches of its own, for a long check that must see the files as they are now."""
        ...

    def layout_backend(self) -> LayoutBackend:
        """The format's backend of the shard browser's layout tree, over :meth:`inspector` (made once)."""
        ...

    def mesh_source(self) -> SegmentMeshSource | None:
        """The segment meshes the dataset names: a precomputed volume's ``info`` ``mesh`` directory, or the
        dataset itself when it is a mesh directory; ``None`` when it names none.

        Raises
        ------
        FormatCapabilityError
            The format has no meshes (zarr, N5).
        """
        ...

    def skeleton_source(self) -> SegmentSkeletonSource | None:
        """The skeletons the dataset names (``info`` ``skeletons``, or itself); ``None`` when it names none.

        Raises
        ------
        FormatCapabilityError
            The format has no skeletons (zarr, N5).
        """
        ...

    def locate_chunk_id(self, chunk_id: int, scale: str | None = None) -> dict[str, Any]:
        """Where the chunk with precomputed id ``chunk_id`` (a compressed Morton code) is stored: the record
        ``inspect``/``locate`` give (shard file, minishard, byte range).

        Raises
        ------
        FormatCapabilityError
            The format's chunks have no ids (zarr, N5: locate a voxel or a grid position).
        """
        ...

    def locate_segment(self, segment_id: int) -> list[dict[str, Any]]:
        """Where segment ``segment_id``'s meshes, skeletons or annotations are stored, one record per source.

        Raises
        ------
        FormatCapabilityError
            The format has no segment-keyed data (zarr, N5).
        """
        ...

    def annotations(self) -> Any:
        """The precomputed annotation collection this dataset is (``neuroglancer_annotations_v1``): an
        :class:`~napari_shardscope.core.formats.precomputed.annotations.reader.AnnotationSource` (typed
        ``Any`` here: this module cannot import a format package); :func:`open_annotations` is the door.

        Raises
        ------
        FormatCapabilityError
            The format has no annotations (zarr, N5).
        MetadataError
            A precomputed ``info`` that is not an annotation collection's.
        """
        ...

    def geometry(self, scale: str | None = None) -> ScaleGeometry:
        """A scale's voxel grid (default: the finest), with the conversions between the reader's index and
        the format's coordinates (:meth:`ScaleGeometry.format_voxel`, :meth:`ScaleGeometry.reader_index`)."""
        ...

    def locate_voxel(self, voxel: Sequence[int], scale: str | None = None) -> dict[str, Any]:
        """Where the chunk holding ``voxel`` is stored: ``voxel`` is z, y, x from 0, as the reader (napari,
        ``open_volume``) indexes the volume, at ``scale`` (a scale key; default the finest). The record is
        the inspector's in the reader's terms (:meth:`ScaleGeometry.reader_record`): ``voxel`` and grid
        positions z, y, x, the format's own beside as ``format_voxel`` … where they differ."""
        ...


#: ``open(location, metadata_bytes, context) -> Dataset``.
DatasetOpener = Callable[[Location, bytes, Any], Dataset]


@dataclass(frozen=True)
class Format:
    """One registry entry: how a format is recognised and opened.

    Attributes
    ----------
    name
        The format's name in records and ``--json`` output (``"precomputed"``, ``"zarr3"``).
    title
        The name people use for it in messages (``"zarr v3"``, ``"N5"``).
    hints
        The format names a URL may force it with (``precomputed://``, ``URL|zarr3:`` give
        ``"precomputed"``/``"zarr"``; see :mod:`napari_shardscope.core.bytestore.url`).
    metadata_key
        The document whose presence at the root identifies the format (``info``).
    opener
        ``"module:function"`` of the :data:`DatasetOpener`, imported on first use so that a
        format's code loads only when a dataset of that format is opened.
    layout
        ``"module:class"`` of the format's layout backend, made from its inspector (imported on
        first use, like :attr:`opener`).
    """

    name: str
    title: str
    hints: tuple[str, ...]
    metadata_key: str
    opener: str
    layout: str = ""

    def open(self, location: Location, metadata: bytes, context: Any = None) -> Dataset:
        """Open the dataset at ``location`` whose metadata document holds ``metadata``."""
        opener: DatasetOpener = _import_named(self.opener)
        return opener(location, metadata, context)

    def layout_backend(self, inspector: DatasetInspector) -> LayoutBackend:
        """The layout backend over an inspector of this format (one made without a :class:`Dataset`)."""
        if not self.layout:
            raise UnsupportedFeatureError(f"{self.title} datasets have no layout tree")
        backend: Callable[[DatasetInspector], LayoutBackend] = _import_named(self.layout)
        return backend(inspector)


def _import_named(spec: str) -> Any:
    """The object a ``"module:name"`` string names (the module imported on first use)."""
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)
