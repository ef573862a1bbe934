"""Labelmap proofreading on the versioned store (DVID's ``labelmap`` type; its layer: docs/architecture.md).

The base segmentation (supervoxel ids, any format the reader opens) is never modified or copied.
A version stores only what changed, as small records read on demand: its supervoxel → body map
(pages of explicit assignments and a union-find over bodies, :mod:`.records`), overlay blocks
rewritten by supervoxel splits, label-index entries of the supervoxels splits made, and an
append-only mutation log (history; never replayed to open a version). Public API::

    from napari_shardscope.core.labelmap import create_labelmap, open_labelmap

    lm = create_labelmap(repo, "seg", sample.segmentation, agglomeration=sample.bodies)
    v = lm.at("main")
    v.body_arrays()                        # lazy multiscale arrays for napari
    v.merge(a, [b]); v.cleave(a, [sv]); v.split_supervoxel(sv, voxels); v.split_body(a, seeds)
    v.undo(); v.redo()
    v.size(a), v.supervoxels(a), v.bbox(a), v.sparsevol(a), v.history(a)
    lm.subscribe(callback)                 # told after every edit (EditEvent)
"""

from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource, MappingSource
from napari_shardscope.core.labelmap.body_split import BodySplit
from napari_shardscope.core.labelmap.bodymap import BaseAgglomeration, BodyMap, MapDelta
from napari_shardscope.core.labelmap.config import DEFAULT_BLOCK, TYPE_NAME, LabelmapConfig, ScaleGeometry
from napari_shardscope.core.labelmap.errors import (
    IndexNotBuiltError,
    LabelmapError,
    LabelmapFormatError,
    LabelmapStateError,
    MappingError,
    NothingToUndoError,
    SplitError,
    UnknownLabelError,
)
from napari_shardscope.core.labelmap.geometry import Box, VoxelMask, voxel_mask
from napari_shardscope.core.labelmap.labelmap import EditEvent, Labelmap
from napari_shardscope.core.labelmap.mutations import BlockChange, Mutation
from napari_shardscope.core.labelmap.opening import create_labelmap, open_labelmap

# The adapter to the remotes: wires their id reservation and region lookup into every labelmap
# (see .id_reservation), so a clone's edits take ids from its remote whoever opened the labelmap.
from napari_shardscope.core.labelmap import remote as _remote  # noqa: F401  isort: skip
from napari_shardscope.core.labelmap.version import HistoryEntry, LabelmapVersion, SparseVolume

__all__ = [
    "DEFAULT_BLOCK",
    "TYPE_NAME",
    "AgglomerationSource",
    "BaseAgglomeration",
    "BlockChange",
    "BodyMap",
    "BodySplit",
    "Box",
    "EditEvent",
    "HistoryEntry",
    "IndexNotBuiltError",
    "Labelmap",
    "LabelmapConfig",
    "LabelmapError",
    "LabelmapFormatError",
    "LabelmapStateError",
    "LabelmapVersion",
    "MapDelta",
    "MappingError",
    "MappingSource",
    "Mutation",
    "NothingToUndoError",
    "ScaleGeometry",
    "SparseVolume",
    "SplitError",
    "UnknownLabelError",
    "VoxelMask",
    "create_labelmap",
    "open_labelmap",
    "voxel_mask",
]
