"""Merging two committed versions into a new one with two parents (DVID's repo merge).

Keys whose values differ between the parents are found through the per-version change index —
only versions below the common ancestors are looked at, so a merge costs the size of the two
sides' changes, not the size of the store — and decided by three-way comparison with the merge
base (the common ancestor created last): a key changed on one side takes that side's value, a
key changed differently on both sides is a conflict, settled by the caller's policy.

Every key whose parents disagree is *written* into the merge version, even when only one side
changed it. That keeps the store's read rule ("the entry of the ancestor with the largest id
wins") exact after merges: without it, ours re-storing the base value in a version created after
theirs' change would shadow theirs' change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.dagindex import DagReader
from napari_shardscope.core.versioned.engines.protocol import ReadTxn
from napari_shardscope.core.versioned.errors import MergeConflict
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.view import read_visible

MergePolicy = Literal["fail", "ours", "theirs"]
MERGE_POLICIES: tuple[str, ...] = ("fail", "ours", "theirs")


@dataclass(frozen=True)
class MergeResult:
    """What a merge did.

    Attributes
    ----------
    version
        The new (open) merge version; commit it when satisfied.
    base
        UUID of the merge base (the common ancestor compared against).
    conflicts
        Keys changed differently on both sides (resolved by the policy unless it was ``fail``).
    merged
        How many keys the merge version had to store.
    """

    version: Version
    base: str
    conflicts: tuple[MergeConflict, ...]
    merged: int


@dataclass(frozen=True)
class MergePlan:
    """What a merge must write: the base, the decided ``(stem, value or None)`` pairs, the conflicts."""

    base: Version
    decided: tuple[tuple[bytes, bytes | None], ...]
    conflicts: tuple[MergeConflict, ...]


def plan_merge(txn: ReadTxn, dag: DagReader, instances: list[Instance], ours: Version, theirs: Version,
               policy: MergePolicy, keep_ours: frozenset[int] = frozenset()) -> MergePlan:
    """Decide every key whose value differs between ``ours`` and ``theirs`` (reads only).

    Keys of the instances whose ids are in ``keep_ours`` take our value and are never conflicts:
    their type merges them itself (the labelmap's branch merge) on top of the merge version.
    """
    anc_a, anc_b = dag.ancestors(ours), dag.ancestors(theirs)
    base = dag.merge_base(ours, theirs)
    anc_base = dag.ancestors(base)
    common = anc_a & anc_b
    stems: set[bytes] = set()
    for vid in (anc_a | anc_b) - common:
        lo = K.change_prefix(vid)
        stems.update(K.stem_of_change_key(k) for k in txn.scan_keys(lo, K.next_prefix(lo)))
    by_iid = {i.iid: i for i in instances}
    decided: list[tuple[bytes, bytes | None]] = []
    conflicts: list[MergeConflict] = []
    for stem in sorted(stems):
        va = read_visible(txn, stem, anc_a)
        vb = read_visible(txn, stem, anc_b)
        if va == vb:
            continue
        if K.unpack_u32(stem[:4]) in keep_ours:
            decided.append((stem, va))
            continue
        v0 = read_visible(txn, stem, anc_base)
        if vb == v0:
            decided.append((stem, va))
        elif va == v0:
            decided.append((stem, vb))
        else:
            inst = by_iid.get(K.unpack_u32(stem[:4]))
            conflicts.append(MergeConflict(instance=inst.name if inst else "?", key=K.tkey_of_stem(stem)))
            decided.append((stem, va if policy == "ours" else vb))
    return MergePlan(base=base, decided=tuple(decided), conflicts=tuple(conflicts))
