"""Versioned point annotations bound to a labelmap (DVID's ``annotation`` type; its layer: docs/architecture.md).

Synapse sites (``pre``/``post``) and generic points, stored as versioned records keyed by id with
a spatial and a tag index, so an edit touches only the records it changes. Which body owns an
annotation is read through the bound labelmap at the same version: merges and splits change it
without a write here. Public API::

    from napari_shardscope.core.annotation import create_annotation_instance, open_annotation_instance

    syn = create_annotation_instance(repo, "synapses", labelmap="seg")
    syn = create_annotation_instance(repo, "synapses", labelmap="seg", base="cave.parquet")  # imported base
    v = syn.at("main")
    pre = v.add("pre", (z, y, x)); post = v.add("post", (z, y, x + 3)); v.relate(pre.id, post.id)
    v.move(pre.id, (z, y, x + 1)); v.set_tags(pre.id, ["checked"]); v.set_properties(pre.id, {"score": 0.9})
    v.in_box(lo, hi); v.with_tag("checked"); v.by_body(body); v.body_of(pre.id)
    v.undo(); v.redo(); v.mutations()
    merge_annotation_branches(syn, "main", "alt", resolutions={"annotation:12": "theirs"})
    merge_with_labelmap(lm, [syn], "main", "alt")   # labelmap and annotations edited on both sides
"""

from napari_shardscope.core.annotation.base_import import SynapseColumns, synapse_ids
from napari_shardscope.core.annotation.branch_merge import (
    AnnotationConflict,
    AnnotationMergeConflictError,
    AnnotationMergePlan,
    AnnotationMergeResult,
    CombinedMergeResult,
    merge_annotation_branches,
    merge_with_labelmap,
    plan_annotation_merge,
)
from napari_shardscope.core.annotation.connections import (
    ConnectionChange,
    Connections,
    ConnectionTable,
    ConnectivityDiff,
    Partner,
    SynapseSite,
)
from napari_shardscope.core.annotation.connectome import diff_connectivity, recount_connectivity
from napari_shardscope.core.annotation.errors import (
    AnnotationArgumentError,
    AnnotationError,
    AnnotationExistsError,
    AnnotationRecordError,
    AnnotationTableError,
    NothingToUndoError,
    UnknownAnnotationError,
)
from napari_shardscope.core.annotation.instance import (
    TYPE_NAME,
    AnnotationInstance,
    add_many,
    create_annotation_instance,
    open_annotation_instance,
)
from napari_shardscope.core.annotation.model import KINDS, Annotation, Relationship
from napari_shardscope.core.annotation.mutations import AnnotationMutation, KeyChange
from napari_shardscope.core.annotation.version import AnnotationVersion

__all__ = [
    "KINDS",
    "TYPE_NAME",
    "Annotation",
    "AnnotationArgumentError",
    "AnnotationConflict",
    "AnnotationError",
    "AnnotationExistsError",
    "AnnotationInstance",
    "AnnotationMergeConflictError",
    "AnnotationMergePlan",
    "AnnotationMergeResult",
    "AnnotationMutation",
    "AnnotationRecordError",
    "AnnotationTableError",
    "AnnotationVersion",
    "CombinedMergeResult",
    "ConnectionChange",
    "ConnectionTable",
    "Connections",
    "ConnectivityDiff",
    "KeyChange",
    "NothingToUndoError",
    "Partner",
    "Relationship",
    "SynapseColumns",
    "SynapseSite",
    "UnknownAnnotationError",
    "add_many",
    "create_annotation_instance",
    "diff_connectivity",
    "merge_annotation_branches",
    "merge_with_labelmap",
    "open_annotation_instance",
    "plan_annotation_merge",
    "recount_connectivity",
    "synapse_ids",
]
