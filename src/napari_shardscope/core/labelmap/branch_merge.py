"""Labelmap-aware merge of two branches: a 3-way merge of their mutations since the common ancestor.

The store's own merge compares keys; two proofreaders' edits are not keys but mutations, and two
edits of different bodies usually rewrite the same keys (the freshness stamp, an overlay block
holding both supervoxels). So the labelmap merges at its own level:

1. **Sides.** The mutations each head has that the merge base (the common ancestor created last)
   lacks. An edit undone on the same side cancels out (it touched nothing in the end).
2. **Conflicts.** A body or supervoxel that mutations of both sides touched (every record lists
   the bodies and supervoxels it touched, including the ones it came from: a cleave names the body
   it cut, a split the supervoxel it retired). Edits of different labels commute, so they replay
   cleanly in any order.
3. **Resolution, per conflict.** ``ours`` drops their mutations touching the label; ``theirs``
   reverts ours. A later mutation of the same side that touched a label a dropped (or reverted)
   one touched goes with it, so nothing replays onto labels that are not there.
4. **The merge version.** An open version whose parents are ours and theirs (the DAG shows the
   merge). Its map is ours' map plus one new log record, ``merge-branches``, whose delta is the
   inverse of the reverted ours mutations followed by their kept mutations: one undo takes the
   whole merge back, and a version's map stays "first parent's map + own log". Overlay blocks are
   merged voxel by voxel at scale 0 (their changed voxels over ours, reverted voxels back to the
   merge base), and coarser scales are recomputed where a scale-0 window changed, exactly as a
   supervoxel split does; label-index entries of their kept split-made supervoxels are copied.

Everything is planned from the three committed versions (which never change) before the one write
transaction that creates the merge version; unresolved conflicts raise
:class:`BranchMergeConflictError` and write nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.edits import EditPlan, Workspace, write_plan
from napari_shardscope.core.labelmap.errors import LabelmapError, MappingError
from napari_shardscope.core.labelmap.geometry import Coord
from napari_shardscope.core.labelmap.keys import index_key
from napari_shardscope.core.labelmap.labelmap import Labelmap, default_user
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import PatchedReader
from napari_shardscope.core.labelmap.splitting import propagate_scales
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError
from napari_shardscope.core.versioned.view import VersionWriter

Resolution = Literal["ours", "theirs"]
MergePolicy = Literal["fail", "ours", "theirs"]
LabelKind = Literal["body", "supervoxel"]
Label = tuple[LabelKind, int]


@dataclass(frozen=True)
class LabelConflict:
    """A body or supervoxel both sides touched since the merge base.

    Attributes
    ----------
    kind, label
        ``"body"`` or ``"supervoxel"``, and its id.
    ours, theirs
        Ids of each side's mutations that touched it.
    """

    kind: LabelKind
    label: int
    ours: tuple[int, ...]
    theirs: tuple[int, ...]

    @property
    def key(self) -> str:
        """How a resolution names this conflict: ``"body:123"`` or ``"supervoxel:45"``."""
        return f"{self.kind}:{self.label}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "label": self.label, "ours": list(self.ours),
                "theirs": list(self.theirs)}


@dataclass(frozen=True)
class BranchMergePlan:
    """What merging ``theirs`` into ``ours`` involves (read from the store, nothing written)."""

    ours: str
    theirs: str
    base: str
    ours_mutations: tuple[Mutation, ...]
    theirs_mutations: tuple[Mutation, ...]
    conflicts: tuple[LabelConflict, ...]

    def to_json(self) -> dict[str, Any]:
        def side(ms: tuple[Mutation, ...]) -> list[dict[str, Any]]:
            return [{"id": m.mutation_id, "operation": m.operation, "user": m.user, "time": m.time,
                     "bodies": list(m.bodies), "supervoxels": list(m.supervoxels)} for m in ms]

        return {"ours": self.ours, "theirs": self.theirs, "base": self.base,
                "ours_mutations": side(self.ours_mutations), "theirs_mutations": side(self.theirs_mutations),
                "conflicts": [c.to_json() for c in self.conflicts]}


@dataclass(frozen=True)
class BranchMergeResult:
    """The merge version made, and which mutations it took and left out."""

    version: Version
    plan: BranchMergePlan
    mutation: Mutation
    applied: tuple[int, ...]
    reverted: tuple[int, ...]
    dropped: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version.uuid, "branch": self.version.branch, "mutation": self.mutation.mutation_id,
                "applied": list(self.applied), "reverted": list(self.reverted), "dropped": list(self.dropped),
                "plan": self.plan.to_json()}


class BranchMergeConflictError(LabelmapError):
    """Labels edited on both branches and no resolution given for them; nothing was written."""

    def __init__(self, message: str, plan: BranchMergePlan, unresolved: Sequence[LabelConflict]) -> None:
        super().__init__(message)
        self.plan = plan
        self.unresolved = tuple(unresolved)


# -- planning ----------------------------------------------------------------------------------------


def touched(m: Mutation) -> set[Label]:
    """The labels a mutation touched."""
    return {("body", int(b)) for b in m.bodies} | {("supervoxel", int(s)) for s in m.supervoxels}


def effective(mutations: Iterable[Mutation]) -> list[Mutation]:
    """The mutations whose effect remains: an undone edit and its undo cancel; a redo stands for its edit.

    Undo only ever inverts the latest remaining edit of its version, so everything between an edit
    and its undo was undone too, and dropping the pair leaves the rest's order valid.
    """
    out: dict[int, Mutation] = {}
    for m in mutations:
        if m.operation == "undo" and m.target in out:
            del out[m.target]
        else:
            out[m.mutation_id] = m
    return list(out.values())


def side_mutations(lm: Labelmap, base: VersionState, head: VersionState) -> list[Mutation]:
    """The mutations ``head`` has that ``base`` lacks (mutation ids are unique in a repository)."""
    known = {r.mutation.mutation_id for r in base.log}
    return [r.mutation for r in head.log if r.mutation.mutation_id not in known]


def _merge_base(lm: Labelmap, ours: Version, theirs: Version) -> Version:
    anc = {v.uuid for v in lm.repo.ancestry(ours)}
    return max((v for v in lm.repo.ancestry(theirs) if v.uuid in anc), key=lambda v: v.vid)


def _committed(lm: Labelmap, ref: str) -> Version:
    v = lm.repo.version(ref)
    if not v.locked:
        raise UncommittedVersionError(f"version {v.short} (branch {v.branch!r}) is open: commit it before merging")
    return v


def plan_branch_merge(lm: Labelmap, ours: str, theirs: str) -> BranchMergePlan:
    """The mutations of each side since the merge base and the labels both touched (reads only)."""
    a, b = _committed(lm, ours), _committed(lm, theirs)
    if a.uuid == b.uuid:
        raise ArgumentError("cannot merge a version with itself")
    base = _merge_base(lm, a, b)
    sb = lm.state(base)
    mine = side_mutations(lm, sb, lm.state(a))
    other = side_mutations(lm, sb, lm.state(b))
    by_label_ours: dict[Label, list[int]] = {}
    for m in effective(mine):
        for lab in touched(m):
            by_label_ours.setdefault(lab, []).append(m.mutation_id)
    by_label_theirs: dict[Label, list[int]] = {}
    for m in effective(other):
        for lab in touched(m):
            by_label_theirs.setdefault(lab, []).append(m.mutation_id)
    conflicts = [LabelConflict(kind, label, tuple(by_label_ours[(kind, label)]), tuple(ids))
                 for (kind, label), ids in sorted(by_label_theirs.items()) if (kind, label) in by_label_ours]
    return BranchMergePlan(a.uuid, b.uuid, base.uuid, tuple(mine), tuple(other), tuple(conflicts))


def _closure(mutations: list[Mutation], seeds: set[int]) -> set[int]:
    """``seeds`` plus every later mutation touching a label that one of them touched (in order)."""
    out = set(seeds)
    labels: set[Label] = set()
    for m in mutations:
        if m.mutation_id in out or touched(m) & labels:
            out.add(m.mutation_id)
            labels |= touched(m)
    return out


def _split_targets(ms: Iterable[Mutation]) -> set[int]:
    """Supervoxels the mutations retired (split)."""
    return {int(k) for m in ms for k, _old, new in m.delta.retired if new}


def _produced(ms: Iterable[Mutation]) -> set[int]:
    """Supervoxels the mutations created (the parts of their splits)."""
    out: set[int] = set()
    for m in ms:
        retired = {int(k) for k, _o, n in m.delta.retired if n}
        if retired:
            out |= {int(s) for s in m.supervoxels} - retired
    return out


# -- merging -----------------------------------------------------------------------------------------


def merge_branches(lm: Labelmap, ours: str, theirs: str, *, resolutions: Mapping[str, Resolution] | None = None,
                   policy: MergePolicy = "fail", branch: str | None = None, user: str | None = None,
                   message: str | None = None) -> BranchMergeResult:
    """Merge branch head ``theirs`` into ``ours`` as a new open version (parents ours, theirs).

    Parameters
    ----------
    resolutions
        Conflict key (``"body:123"``) → ``"ours"`` or ``"theirs"``.
    policy
        The side for conflicts not in ``resolutions``; ``"fail"`` raises
        :class:`BranchMergeConflictError` (nothing written) when any is left.
    branch
        A new branch name for the merge version (default: continue ``ours``'s branch).

    Raises
    ------
    BranchMergeConflictError
        Unresolved conflicts; ``exc.plan`` lists them.
    ArgumentError
        A resolution naming no conflict, or an unknown side.
    """
    if policy not in ("fail", "ours", "theirs"):
        raise ArgumentError(f"policy must be fail, ours or theirs, got {policy!r}")
    plan = plan_branch_merge(lm, ours, theirs)
    chosen: dict[str, str] = dict(resolutions or {})
    keys = {c.key for c in plan.conflicts}
    for key, side in chosen.items():
        if key not in keys:
            known = ", ".join(sorted(keys)) or "none"
            raise ArgumentError(f"resolution {key!r} names no conflict (conflicts: {known})")
        if side not in ("ours", "theirs"):
            raise ArgumentError(f"resolution of {key} must be 'ours' or 'theirs', got {side!r}")
    unresolved = [c for c in plan.conflicts if c.key not in chosen and policy == "fail"]
    if unresolved:
        shown = ", ".join(c.key for c in unresolved[:5]) + (", …" if len(unresolved) > 5 else "")
        raise BranchMergeConflictError(
            f"merging {plan.theirs[:8]} into {plan.ours[:8]}: {len(unresolved)} label(s) edited on both sides "
            f"since {plan.base[:8]} ({shown}); choose ours or theirs for each", plan, unresolved)
    mine, other = effective(plan.ours_mutations), effective(plan.theirs_mutations)
    drop_seed: set[int] = set()
    revert_seed: set[int] = set()
    for c in plan.conflicts:
        if chosen.get(c.key, policy) == "ours":
            drop_seed.update(c.theirs)
        else:
            revert_seed.update(c.ours)
    dropped = _closure(other, drop_seed)
    reverted = _closure(mine, revert_seed)
    kept = [m for m in other if m.mutation_id not in dropped]
    undone = [m for m in mine if m.mutation_id in reverted]
    kept_mine = [m for m in mine if m.mutation_id not in reverted]
    overlap = set().union(*(touched(m) for m in kept)) & set().union(*(touched(m) for m in kept_mine)) \
        if kept and kept_mine else set()
    if overlap:
        kind, label = sorted(overlap)[0]
        raise MappingError(f"the resolutions still leave {kind} {label} edited on both sides; resolve it too")
    delta = MapDelta.concat([m.delta.inverse() for m in reversed(undone)] + [m.delta for m in kept])
    a, b, base = (lm.state(x) for x in (plan.ours, plan.theirs, plan.base))
    with a.lock:
        trial = a.map.copy()
    try:
        trial.apply(delta)
    except MappingError as exc:
        raise MappingError(f"their edits do not replay onto {plan.ours[:8]} ({exc})") from exc
    keys_out = _merged_keys(lm, a, b, base, kept, undone)
    labels = sorted(set().union(*(touched(m) for m in kept + undone)) if kept or undone else set())
    edit = EditPlan(
        "merge-branches",
        {"ours": plan.ours, "theirs": plan.theirs, "base": plan.base, "applied": [m.mutation_id for m in kept],
         "reverted": [m.mutation_id for m in undone], "dropped": sorted(dropped & {m.mutation_id for m in other}),
         "resolutions": {c.key: chosen.get(c.key, policy) for c in plan.conflicts},
         **({"message": message} if message else {})},
        delta, keys_out,
        bodies=tuple(v for k, v in labels if k == "body"),
        supervoxels=tuple(v for k, v in labels if k == "supervoxel"),
    )
    written: list[Mutation] = []

    def write(w: VersionWriter) -> None:
        m, _data = write_plan(w, lm.instance, lm.name, edit, user or default_user())
        written.append(m)

    result = lm.repo.merge(plan.ours, plan.theirs, branch=branch, keep_ours=[lm.name], then=write)
    return BranchMergeResult(result.version, plan, written[0], tuple(m.mutation_id for m in kept),
                             tuple(m.mutation_id for m in undone), tuple(sorted(dropped)))


def _merged_keys(lm: Labelmap, ours: VersionState, theirs: VersionState, base: VersionState,
                 kept: list[Mutation], undone: list[Mutation]) -> dict[bytes, bytes | None]:
    """Overlay blocks and index entries of the merge version, as changes to ours' keys."""
    cfg = lm.config
    r_ours = PatchedReader(lm.base, ours.overlay)
    r_theirs = PatchedReader(lm.base, theirs.overlay)
    r_base = PatchedReader(lm.base, base.overlay)
    ws = Workspace(cfg, r_ours, ours.map, lambda _sv: None, lambda _n: range(0), multi_step=False)
    blocks0: set[Coord] = {b.block for m in kept + undone for b in m.blocks if b.scale == 0}
    revert_targets = np.fromiter(_split_targets(undone), dtype=np.uint64)
    take_targets = np.fromiter(_split_targets(kept), dtype=np.uint64)
    # Voxel by voxel at scale 0: ours, with the voxels of reverted splits back to the merge base and
    # the voxels of their kept splits taken from theirs (a voxel is named by what it held at the base).
    changed: dict[Coord, np.ndarray] = {}
    for c in sorted(blocks0):
        b0, bo, bt = r_base.block(0, c), r_ours.block(0, c), r_theirs.block(0, c)
        result = bo.copy()
        back = (bo != b0) & np.isin(b0, revert_targets)
        result[back] = b0[back]
        take = (bt != b0) & np.isin(b0, take_targets)
        result[take] = bt[take]
        diff = result != bo
        if diff.any():
            r_ours.pending[(0, c)] = result
            changed[c] = diff
    propagate_scales(ws, changed)
    out = ws.keys()
    for sv in sorted(_produced(kept)):
        entry = theirs.index.get(sv)
        if entry is not None:
            out[index_key(sv)] = entry
    for sv in sorted(_produced(undone)):
        if sv in ours.index:
            out[index_key(sv)] = None
    return out

