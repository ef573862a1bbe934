"""The one export call a notebook makes: :func:`export` of a volume or a labelmap version, in either format.

The exporters (:func:`~napari_shardscope.core.export.precomputed.export_precomputed`,
:func:`~napari_shardscope.core.export.zarr3.export_zarr3`) take an :class:`~.source.ExportSource`, a
picklable description each Dask worker opens for itself. A user holds something else — a path or URL,
a :class:`~napari_shardscope.core.volumes.Volume`, a
:class:`~napari_shardscope.core.labelmap.LabelmapVersion` — so :func:`export` makes the source from
what it is given, as ``shardscope export`` does from its arguments, and picks the exporter by format.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.precomputed import ExportReport, export_precomputed
from napari_shardscope.core.export.source import ExportSource, LabelKind, VolumeSource, labelmap_source
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.labelmap import LabelmapVersion
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.repository import MARKER_FILE
from napari_shardscope.core.volumes import Volume

ExportFormat = Literal["precomputed", "zarr3"]
#: The exporter of each output format.
EXPORTERS: dict[str, Callable[..., ExportReport]] = {"precomputed": export_precomputed, "zarr3": export_zarr3}


def export(source: str | os.PathLike[str] | Volume | LabelmapVersion | ExportSource, dest: str | os.PathLike[str],
           *, format: ExportFormat = "precomputed", labels: LabelKind = "bodies", allow_open: bool = False,
           overwrite: bool = False, scheduler: Any = None, num_workers: int | None = None,
           progress: Progress | None = None, **options: Any) -> ExportReport:
    """Write ``source`` as a new sharded volume at ``dest``: Neuroglancer precomputed or OME-Zarr v3.

    One Dask task per output shard, on the threaded scheduler unless ``scheduler`` is a
    ``dask.distributed`` client (or its address).

    Parameters
    ----------
    source
        A path or URL of any volume shardscope reads (a format conversion), a
        :class:`~napari_shardscope.core.volumes.Volume` (exported from its URL), a
        :class:`~napari_shardscope.core.labelmap.LabelmapVersion` (its body ids, or with
        ``labels="supervoxels"`` its supervoxel ids, at every scale of its base), or an
        :class:`~napari_shardscope.core.export.source.ExportSource` made by hand.
    dest
        A new directory or writable URL.
    format
        ``"precomputed"`` (sharded, gzip chunks) or ``"zarr3"`` (OME-Zarr 0.5 of sharded Zarr v3 arrays).
    labels, allow_open
        For a labelmap version: which ids to write, and whether an open (still editable) version may be
        exported as it is when each chunk is read; a committed version is a reproducible snapshot.
    overwrite, scheduler, num_workers, progress
        As the exporters take them: replace a dataset at ``dest``; the Dask scheduler; worker threads;
        a ``progress(done, total)`` callback.
    **options
        The format's own options: ``chunk_size``, ``sharding``, ``shard_bytes``, ``gzip_level`` for
        precomputed (:func:`~napari_shardscope.core.export.precomputed.export_precomputed`);
        ``inner_chunk``, ``shard_shape``, ``shard_bytes``, ``name`` for zarr3
        (:func:`~napari_shardscope.core.export.zarr3.export_zarr3`).

    Returns
    -------
    ExportReport
        What was written: ``report.to_json()`` gives the scales, shard files, chunks and bytes.

    Raises
    ------
    ArgumentError
        An unknown format or option, a repository directory as ``source`` (export one of its versions),
        ``labels``/``allow_open`` for a source that is not a labelmap version, an in-memory repository's
        version (workers open the repository by its path), or an open version without ``allow_open``;
        the exporters' own refusals (an occupied or overlapping ``dest``) also derive from it.

    Examples
    --------
    A format conversion, and a proofread version as body ids:

    >>> import napari_shardscope as ss
    >>> sample = ss.ensure_sample_dataset()
    >>> ss.export(sample.image, "image.zarr", format="zarr3").to_json()["scales"]
    ['0', '1', '2', '3']
    >>> repo = ss.init_repository("export.repo")
    >>> lm = ss.create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)
    >>> version = lm.at(repo.commit("main", "the agglomeration as it came"))
    >>> report = ss.export(version, "bodies")
    >>> report.to_json()["scales"]
    ['8_8_40', '16_16_40', '32_32_80', '64_64_160']
    >>> ss.open_volume("bodies").kind
    'segmentation'
    """
    exporter = EXPORTERS.get(format)
    if exporter is None:
        raise ArgumentError(f"format must be one of {', '.join(EXPORTERS)}, got {format!r}")
    accepted = _options_of(exporter)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ArgumentError(f"{', '.join(unknown)}: not an option of a {format} export; its options are "
                            f"{', '.join(sorted(accepted))}")
    return exporter(export_source(source, labels=labels, allow_open=allow_open), str(dest), overwrite=overwrite,
                    scheduler=scheduler, num_workers=num_workers, progress=progress, **options)


def export_source(source: Any, *, labels: LabelKind = "bodies", allow_open: bool = False) -> ExportSource:
    """The :class:`~.source.ExportSource` of what :func:`export` was given (see its ``source``)."""
    if isinstance(source, LabelmapVersion):
        path = source.labelmap.repo.path
        if path is None:
            raise ArgumentError("a version of an in-memory repository cannot be exported: the export's workers "
                                "open the repository by its path (make it with a path)")
        return labelmap_source(str(path), source.labelmap.name, source.uuid, labels=labels, allow_open=allow_open)
    given = [name for name, value in (("labels", labels != "bodies"), ("allow_open", allow_open)) if value]
    if given:
        raise ArgumentError(f"{', '.join(given)}: only for a labelmap version; this source is {type(source).__name__}")
    if isinstance(source, Volume):
        return VolumeSource(source.url)
    if isinstance(source, str | os.PathLike):
        if (Path(source) / MARKER_FILE).is_file():
            raise ArgumentError(f"{os.fspath(source)} is a repository: export one of its labelmap versions "
                                "(open_labelmap(repo, NAME).at(REF))")
        return VolumeSource(os.fspath(source))
    if all(callable(getattr(source, name, None)) for name in ("describe", "read", "locations")):
        return source  # type: ignore[no-any-return]
    raise ArgumentError(f"cannot export a {type(source).__name__}: give a path or URL, a Volume, a LabelmapVersion "
                        "or an ExportSource")


def _options_of(exporter: Any) -> set[str]:
    """The keyword-only options of an exporter that :func:`export` does not name itself."""
    own = {"overwrite", "scheduler", "num_workers", "progress"}
    params = inspect.signature(exporter).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in own}
