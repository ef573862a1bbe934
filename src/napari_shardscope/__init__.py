"""napari-shardscope: open, inspect and proofread sharded connectomics volumes, in napari, notebooks and the shell.

One import gives what a user does — open volumes and datasets, annotations and sorted tables,
versioned repositories, labelmaps and their edits, remotes, export, the Neuroglancer hand-off, the
error groups — and :mod:`napari_shardscope.gui` the napari helpers.

Nothing heavy is imported with the package: each name loads its module on first use (PEP 562), so
``import napari_shardscope`` costs a few milliseconds, and the CLI, Dask workers and notebooks pay
only for what they use. The old import paths (``napari_shardscope.core.…``) keep working; these
names are the same objects.

Examples
--------
>>> import napari_shardscope as ss
>>> sample = ss.ensure_sample_dataset()          # a synthetic EM volume and its supervoxels, made once
>>> vol = ss.open_volume(sample.segmentation)    # lazy: precomputed, zarr v3 / OME-Zarr, zarr v2 or N5
>>> vol.kind, vol.axes, vol.levels[0].shape
('segmentation', ('z', 'y', 'x'), (64, 256, 256))
>>> ds = ss.open_dataset(sample.segmentation)    # its metadata, shards and capabilities
>>> ds.format_name, ds.mesh_source()
('precomputed', None)
>>> repo = ss.init_repository("proofread.repo")  # a versioned store on DVID's model
>>> lm = ss.create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)
>>> v = lm.at("main")                            # the open root version on branch main
>>> a, b = sorted(set(sample.body_map().values()))[:2]
>>> v.size(a), v.size(b)                         # voxels
(118583, 110665)
>>> mutation = v.merge(a, [b])                   # an edit is a log entry (undo, history, branch merges)
>>> mutation.operation, mutation.bodies
('merge', (19273, 70268))
>>> v.exists(b), v.size(a)
(False, 229248)
>>> done = repo.commit("main", "merged two bodies")
>>> report = ss.export(lm.at(done), "bodies")    # the proofread bodies as a new sharded volume
>>> ss.open_volume("bodies").levels[0].shape
(64, 256, 256)
"""

from __future__ import annotations

#: ``typing.TYPE_CHECKING`` without importing ``typing`` (40 ms cold): mypy and griffe read the name.
TYPE_CHECKING = False

#: The package version: the one place it is written (``pyproject.toml`` reads it, ``[tool.hatch.version]``).
__version__ = "0.1.0"

#: Every public name and the module it lives in, or ``module:attribute`` for another name of an object
#: (``init_repository`` is ``create_repository``), or ``module:`` for a module itself. The single list:
#: ``__all__``, the ``TYPE_CHECKING`` imports and the API snapshot test (tests/public_api.txt) follow it.
_PUBLIC: dict[str, str] = {
    # volumes and datasets
    "open_volume": "napari_shardscope.core.volumes",
    "open_volumes": "napari_shardscope.core.volumes",
    "Volume": "napari_shardscope.core.volumes",
    "LazyArray": "napari_shardscope.core.volumes",
    "open_dataset": "napari_shardscope.core.formats",
    "Dataset": "napari_shardscope.core.formats",
    "open_layout": "napari_shardscope.core.layout",
    "ensure_sample_dataset": "napari_shardscope.core.sample_data",
    # annotations and sorted tables (the agglomeration a pipeline wrote, read page by page where it lives)
    "open_annotations": "napari_shardscope.core.formats",
    "open_sorted_table": "napari_shardscope.core.tables",
    "write_sorted_table": "napari_shardscope.core.tables",
    # versioned repositories
    "init_repository": "napari_shardscope.core.versioned:create_repository",
    "create_repository": "napari_shardscope.core.versioned",
    "open_repository": "napari_shardscope.core.versioned",
    "Repository": "napari_shardscope.core.versioned",
    "Version": "napari_shardscope.core.versioned",
    # labelmaps: proofreading data, and what an edit returns
    "create_labelmap": "napari_shardscope.core.labelmap",
    "open_labelmap": "napari_shardscope.core.labelmap",
    "Labelmap": "napari_shardscope.core.labelmap",
    "LabelmapVersion": "napari_shardscope.core.labelmap",
    "Mutation": "napari_shardscope.core.labelmap",
    "BodySplit": "napari_shardscope.core.labelmap",
    "plan_branch_merge": "napari_shardscope.core.labelmap.branch_merge",
    "merge_branches": "napari_shardscope.core.labelmap.branch_merge",
    "review_branch": "napari_shardscope.core.labelmap.review",
    "ProofreadingController": "napari_shardscope.core.proofreading",
    # annotations versioned beside a labelmap (synapses; their body is the labelmap's at each version)
    "create_annotation_instance": "napari_shardscope.core.annotation",
    "open_annotation_instance": "napari_shardscope.core.annotation",
    "AnnotationInstance": "napari_shardscope.core.annotation",
    "AnnotationVersion": "napari_shardscope.core.annotation",
    "Annotation": "napari_shardscope.core.annotation",
    "SynapseColumns": "napari_shardscope.core.annotation",
    "add_many": "napari_shardscope.core.annotation",
    "Connections": "napari_shardscope.core.annotation",
    "ConnectionTable": "napari_shardscope.core.annotation",
    "diff_connectivity": "napari_shardscope.core.annotation",
    "synapse_todo": "napari_shardscope.core.proofreading.synapse_todo",
    "merge_with_labelmap": "napari_shardscope.core.annotation",
    # remotes
    "add_remote": "napari_shardscope.core.versioned.remotes",
    "clone": "napari_shardscope.core.labelmap.remote",  # remotes.clone, with the labelmap's base prefetch registered
    "fetch": "napari_shardscope.core.versioned.remotes",
    "pull": "napari_shardscope.core.versioned.remotes",
    "push": "napari_shardscope.core.versioned.remotes",
    "pull_merger": "napari_shardscope.core.annotation.remote",
    "reserve_labelmap_ids": "napari_shardscope.core.labelmap.remote",
    "remotes": "napari_shardscope.core.versioned.remotes:",
    # export, Neuroglancer, the command line
    "export": "napari_shardscope.core.export.api",
    "serve": "napari_shardscope.core.serve",
    "Handoff": "napari_shardscope.core.serve",
    "shardscope": "napari_shardscope.core.cli:run",
    # the error groups (core/errors.py: one per thing a caller does, each its CLI exit code)
    "ShardscopeError": "napari_shardscope.core.errors",
    "ArgumentError": "napari_shardscope.core.errors",
    "NotFoundError": "napari_shardscope.core.errors",
    "CorruptDataError": "napari_shardscope.core.errors",
    "UnsupportedError": "napari_shardscope.core.errors",
    "RefusedWriteError": "napari_shardscope.core.errors",
    "ConflictError": "napari_shardscope.core.errors",
    "StoreError": "napari_shardscope.core.errors",
}

#: Submodules reachable as attributes before they are imported (``ss.gui``); not in ``__all__``, so
#: ``from napari_shardscope import *`` never loads napari.
_SUBMODULES = ("gui", "core", "cli", "napari_plugin", "widgets")

__all__ = [
    "Annotation",
    "AnnotationInstance",
    "AnnotationVersion",
    "ArgumentError",
    "BodySplit",
    "ConflictError",
    "ConnectionTable",
    "Connections",
    "CorruptDataError",
    "Dataset",
    "Handoff",
    "Labelmap",
    "LabelmapVersion",
    "LazyArray",
    "Mutation",
    "NotFoundError",
    "ProofreadingController",
    "RefusedWriteError",
    "Repository",
    "ShardscopeError",
    "StoreError",
    "SynapseColumns",
    "UnsupportedError",
    "Version",
    "Volume",
    "__version__",
    "add_many",
    "add_remote",
    "clone",
    "create_annotation_instance",
    "create_labelmap",
    "create_repository",
    "diff_connectivity",
    "ensure_sample_dataset",
    "export",
    "fetch",
    "init_repository",
    "merge_branches",
    "merge_with_labelmap",
    "open_annotation_instance",
    "open_annotations",
    "open_dataset",
    "open_labelmap",
    "open_layout",
    "open_repository",
    "open_sorted_table",
    "open_volume",
    "open_volumes",
    "plan_branch_merge",
    "pull",
    "pull_merger",
    "push",
    "remotes",
    "reserve_labelmap_ids",
    "review_branch",
    "serve",
    "shardscope",
    "synapse_todo",
    "write_sorted_table",
]

if TYPE_CHECKING:  # what mypy, IDEs and the API reference (griffe) read; at run time __getattr__ loads them
    from napari_shardscope.core.annotation import (
        Annotation,
        AnnotationInstance,
        AnnotationVersion,
        Connections,
        ConnectionTable,
        SynapseColumns,
        add_many,
        create_annotation_instance,
        diff_connectivity,
        merge_with_labelmap,
        open_annotation_instance,
    )
    from napari_shardscope.core.annotation.remote import pull_merger
    from napari_shardscope.core.cli import run as shardscope
    from napari_shardscope.core.errors import (
        ArgumentError,
        ConflictError,
        CorruptDataError,
        NotFoundError,
        RefusedWriteError,
        ShardscopeError,
        StoreError,
        UnsupportedError,
    )
    from napari_shardscope.core.export.api import export
    from napari_shardscope.core.formats import Dataset, open_annotations, open_dataset
    from napari_shardscope.core.labelmap import (
        BodySplit,
        Labelmap,
        LabelmapVersion,
        Mutation,
        create_labelmap,
        open_labelmap,
    )
    from napari_shardscope.core.labelmap.branch_merge import merge_branches, plan_branch_merge
    from napari_shardscope.core.labelmap.remote import clone, reserve_labelmap_ids
    from napari_shardscope.core.labelmap.review import review_branch
    from napari_shardscope.core.layout import open_layout
    from napari_shardscope.core.proofreading import ProofreadingController
    from napari_shardscope.core.proofreading.synapse_todo import synapse_todo
    from napari_shardscope.core.sample_data import ensure_sample_dataset
    from napari_shardscope.core.serve import Handoff, serve
    from napari_shardscope.core.tables import open_sorted_table, write_sorted_table
    from napari_shardscope.core.versioned import Repository, Version, create_repository, open_repository, remotes
    from napari_shardscope.core.versioned import create_repository as init_repository
    from napari_shardscope.core.versioned.remotes import add_remote, fetch, pull, push
    from napari_shardscope.core.volumes import LazyArray, Volume, open_volume, open_volumes
else:
    from napari_shardscope._lazy import attach

    __getattr__, __dir__ = attach(globals(), _PUBLIC, _SUBMODULES)
    del attach
