"""Pull's 3-way merge for repositories holding a labelmap: its branch merge, not a key merge.

Two clones' edits of different bodies rewrite the same keys (the freshness stamp, a block holding
both bodies' supervoxels), so the store's key merge would call them conflicts; the labelmap's own
merge (:func:`~napari_shardscope.core.labelmap.branch_merge.merge_branches`) merges edits and calls
only edits of the same body conflicts.

This module is the one place the labelmap package meets the transport (the import contract
``labelmap-not-remotes`` allows it alone): it gives pull the labelmap's merge, and gives every
labelmap the remotes' id reservation and region lookup (:mod:`.id_reservation`), wired in when
the package is imported.
"""

from __future__ import annotations

from collections.abc import Mapping

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.branch_merge import MergePolicy, Resolution, merge_branches
from napari_shardscope.core.labelmap.config import TYPE_NAME
from napari_shardscope.core.labelmap.id_reservation import use_id_reservation
from napari_shardscope.core.labelmap.opening import open_labelmap
from napari_shardscope.core.labelmap.prefetch import PrefetchReport, prefetch_base
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.remotes.cloning import clone as clone  # ss.clone: with the hook below registered
from napari_shardscope.core.versioned.remotes.cloning import use_prefetcher
from napari_shardscope.core.versioned.remotes.pulling import Merger, default_merge
from napari_shardscope.core.versioned.remotes.reservation import RemoteIdReservation
from napari_shardscope.core.versioned.repository import Repository

use_id_reservation(RemoteIdReservation())


def pull_merger(policy: MergePolicy = "fail", resolutions: Mapping[str, Resolution] | None = None,
                user: str | None = None) -> Merger:
    """A merge for :func:`~napari_shardscope.core.versioned.remotes.pull`: the labelmap's when there is one."""

    def merge(repo: Repository, ours: str, theirs: str) -> Version:
        labelmaps = [i.name for i in repo.instances() if i.type == TYPE_NAME]
        if not labelmaps:
            return default_merge(repo, ours, theirs)
        if len(labelmaps) > 1:
            raise ArgumentError(f"pull merges one labelmap at a time; this repository has {', '.join(labelmaps)} "
                                f"(fetch, then branch merge each)")
        lm = open_labelmap(repo, labelmaps[0])
        return merge_branches(lm, ours, theirs, resolutions=resolutions, policy=policy, user=user).version

    return merge


def reserve_labelmap_ids(repo: Repository) -> dict[str, int]:
    """Reserve every labelmap's ids from the repository's remote now (while online); ids left per counter.

    A clone reserves the counters the remote already knows; a labelmap whose origin never made a
    new body has no such counter yet, and its first cleave would need the network. Call this right
    after :func:`~napari_shardscope.core.versioned.remotes.clone` (``shardscope clone`` does).
    """
    left: dict[str, int] = {}
    if repo.id_source() is None:
        return left
    for inst in repo.instances():
        if inst.type == TYPE_NAME:
            left.update(open_labelmap(repo, inst.name).top_up_ids())
    return left


def prefetch_labelmaps(repo: Repository) -> list[PrefetchReport]:
    """Copy every labelmap's base objects holding the clone's region (or the whole base) for offline work.

    ``shardscope clone --prefetch`` calls it right after the clone, while the network is there.
    """
    from napari_shardscope.core.versioned.remotes.config import region_of

    region = region_of(repo)
    return [prefetch_base(repo, inst.name, region) for inst in repo.instances() if inst.type == TYPE_NAME]


use_prefetcher(prefetch_labelmaps)  # clone(prefetch=True) also copies each labelmap's base for offline work
