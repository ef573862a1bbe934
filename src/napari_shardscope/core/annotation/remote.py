"""Pull's three-way merge for repositories holding annotations: the labelmap's branch merge and each
annotation instance's id-level merge, on one merge version (:func:`.branch_merge.merge_with_labelmap`).

Push, fetch and clone need nothing of this type: they move every instance's versioned keys,
unversioned keys and logs as they are. A clone hands out annotation ids only from blocks reserved
from its remote (:meth:`~.instance.AnnotationInstance.top_up_ids`), so two clones never add two
annotations under one id.
"""

from __future__ import annotations

from collections.abc import Mapping

from napari_shardscope.core.annotation.branch_merge import merge_with_labelmap
from napari_shardscope.core.annotation.instance import TYPE_NAME, annotation_config, open_annotation_instance
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.labelmap.remote import pull_merger as labelmap_pull_merger
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.remotes.pulling import Merger
from napari_shardscope.core.versioned.repository import Repository


def pull_merger(policy: str = "fail", resolutions: Mapping[str, str] | None = None,
                user: str | None = None) -> Merger:
    """A merge for :func:`~napari_shardscope.core.versioned.remotes.pull` that merges annotations too."""

    def merge(repo: Repository, ours: str, theirs: str) -> Version:
        annotations = [i for i in repo.instances() if i.type == TYPE_NAME]
        if not annotations:
            return labelmap_pull_merger(policy, resolutions, user)(repo, ours, theirs)  # type: ignore[arg-type]
        bound = {str(annotation_config(i)["labelmap"]) for i in annotations}
        if len(bound) > 1:
            raise ArgumentError(f"pull merges one labelmap at a time; annotations here are bound to "
                                f"{', '.join(sorted(bound))} (fetch, then branch merge each)")
        lm = open_labelmap(repo, bound.pop())
        backends = [open_annotation_instance(repo, i.name, labelmap=lm) for i in annotations]
        return merge_with_labelmap(lm, backends, ours, theirs, resolutions=resolutions, policy=policy,
                                   user=user).version

    return merge
