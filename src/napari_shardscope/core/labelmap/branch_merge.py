"""Labelmap-aware merge of two branches: a 3-way merge of their edits since the common ancestor.

The store's own merge compares keys; two proofreaders' edits are not keys but mutations, and two
edits of different bodies usually rewrite the same keys (the freshness stamp, an overlay block
holding both supervoxels). So the labelmap merges at its own level:

1. **Contents.** What a version holds is a set of *edits* (merges, cleaves and splits, by
   mutation id), replayed from its log: an undo takes its edit out, a redo puts it back, and a
   ``merge-branches`` record stands for what it did — the edits it applied, the ones it reverted.
   Expanding merge records matters as soon as branches merge more than once: after ``alt`` was
   merged into ``main``, ``main``'s merge record holds ``alt``'s edits, which the next merge base
   (``alt``'s old head) already has; counted as a ``main`` edit it would conflict with every later
   ``alt`` edit of the same bodies, and resolving that conflict ``theirs`` would revert the whole
   first merge.
2. **Sides.** How each head's contents differ from the merge base's (the common ancestor created
   last): edits it has that the base lacks, and edits of the base it took out (a merge resolved
   ``theirs`` reverts our edits, and a later base may hold them). An edit both heads took in (a
   criss-cross merge, or a branch merged both ways) is no difference between them and is left out
   of both sides.
3. **Conflicts.** A body or supervoxel that changes of both sides touched (every record lists
   the bodies and supervoxels it touched, including the ones it came from: a cleave names the body
   it cut, a split the supervoxel it retired). Edits of different labels commute, so they replay
   cleanly in any order.
4. **Resolution, per conflict.** ``ours`` drops their changes touching the label; ``theirs``
   reverts ours; ``both`` keeps both sides' changes (theirs replayed after ours), refused when
   theirs no longer apply to ours' map (their merge of a body ours cleaved away). A later change
   of the same side that touched a label a dropped (or reverted) one touched goes with it, so
   nothing replays onto labels that are not there.
5. **The merge version.** An open version whose parents are ours and theirs (the DAG shows the
   merge). Its map is ours' map plus one new log record, ``merge-branches``, whose delta is the
   inverse of the reverted ours changes followed by their kept changes: one undo takes the
   whole merge back, and a version's map stays "first parent's map + own log". The record names
   the edits it applied and reverted (and, for changes that took an edit out, the edits it removed
   and restored), which is what step 1 expands. Overlay blocks are merged voxel by voxel at scale 0
   (their changed voxels over ours, reverted voxels back to the merge base), and coarser scales are
   recomputed where a scale-0 window changed, exactly as a supervoxel split does; label-index
   entries of the supervoxels the kept (or reverted) splits made or retired are taken from theirs
   (or the merge base).

Everything is planned and checked from the three committed versions (which never change) before
the one write transaction that creates the merge version (:func:`resolve_branch_merge` is that
check on its own, for a dry run); unresolved conflicts raise :class:`BranchMergeConflictError` and
write nothing. Steps 1–3 and the types a caller sees are :mod:`.branch_merge_plan`'s (planning only
reads); steps 4–5, which decide and write, are this module's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.branch_merge_plan import (
    BranchMergeConflictError,
    BranchMergePlan,
    BranchMergeResult,
    ContentOp,
    Label,
    LabelConflict,
    LabelKind,
    MergeOutcome,
    MergePolicy,
    Resolution,
    SideChange,
    plan_branch_merge,
    touched,
)
from napari_shardscope.core.labelmap.edits import EditPlan, Workspace, write_plan
from napari_shardscope.core.labelmap.errors import MappingError
from napari_shardscope.core.labelmap.geometry import Coord
from napari_shardscope.core.labelmap.keys import INDEX_PREFIX, index_key
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.labelmap import Labelmap, default_user
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import PatchedReader
from napari_shardscope.core.labelmap.recordmap import MapTxn
from napari_shardscope.core.labelmap.splitting import propagate_scales
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.versioned.view import VersionWriter

__all__ = [
    "BranchMergeConflictError",
    "BranchMergePlan",
    "BranchMergeResult",
    "ContentOp",
    "Label",
    "LabelConflict",
    "LabelKind",
    "MergeOutcome",
    "MergePolicy",
    "Resolution",
    "SideChange",
    "merge_branches",
    "plan_branch_merge",
    "resolve_branch_merge",
    "touched",
]
def _closure(changes: Sequence[SideChange], seeds: set[int]) -> set[int]:
    """``seeds`` plus every later change touching a label that one of them touched (in order)."""
    out = set(seeds)
    labels: set[Label] = set()
    for c in changes:
        if c.mutation_id in out or touched(c.mutation) & labels:
            out.add(c.mutation_id)
            labels |= touched(c.mutation)
    return out


def _retired(m: Mutation) -> set[int]:
    """Supervoxels the edit retired (split)."""
    return {int(k) for k, _old, new in m.delta.retired if new}


def _produced(m: Mutation) -> set[int]:
    """Supervoxels the edit created (the parts of its splits)."""
    retired = _retired(m)
    return {int(s) for s in m.supervoxels} - retired if retired else set()


def _rewritten(changes: Iterable[SideChange]) -> set[int]:
    """Base-voxel labels the changes relabel: what a split retired, or, taking a split out, its parts."""
    out: set[int] = set()
    for c in changes:
        out |= _produced(c.mutation) if c.removed else _retired(c.mutation)
    return out


def _indexed(changes: Iterable[SideChange]) -> set[int]:
    """Supervoxels whose label-index entry the changes make, retire or bring back."""
    return {s for c in changes for s in _retired(c.mutation) | _produced(c.mutation)}


# -- merging -----------------------------------------------------------------------------------------


def _check_policy(policy: str) -> None:
    if policy not in ("fail", "ours", "theirs"):
        raise ArgumentError(f"policy must be fail, ours or theirs, got {policy!r}")


def _side(side: str) -> Resolution:
    return "ours" if side == "ours" else "both" if side == "both" else "theirs"


def resolve_branch_merge(lm: Labelmap, plan: BranchMergePlan, *, resolutions: Mapping[str, Resolution] | None = None,
                         policy: MergePolicy = "fail") -> MergeOutcome:
    """Decide the merge ``plan`` describes and check it replays onto ours; writes nothing.

    :func:`merge_branches` runs exactly this before it writes, so a dry run that calls it refuses
    what the merge would refuse, for the same reason.

    Raises
    ------
    BranchMergeConflictError
        Conflicts neither ``resolutions`` nor ``policy`` resolve; ``exc.unresolved`` lists them.
    ArgumentError
        A resolution naming no conflict, or an unknown side or policy.
    MappingError
        The resolutions still leave a label changed on both sides, or their changes do not replay
        onto ours' map.
    """
    _check_policy(policy)
    chosen: dict[str, str] = dict(resolutions or {})
    keys = {c.key for c in plan.conflicts}
    for key, side in chosen.items():
        if key not in keys:
            known = ", ".join(sorted(keys)) or "none"
            raise ArgumentError(f"resolution {key!r} names no conflict (conflicts: {known})")
        if side not in ("ours", "theirs", "both"):
            raise ArgumentError(f"resolution of {key} must be 'ours', 'theirs' or 'both', got {side!r}")
    unresolved = [c for c in plan.conflicts if c.key not in chosen and policy == "fail"]
    if unresolved:
        shown = ", ".join(f"{c.kind} {c.label}" for c in unresolved[:5]) + (", …" if len(unresolved) > 5 else "")
        what = "a body or supervoxel was" if len(unresolved) == 1 else f"{len(unresolved)} bodies or supervoxels were"
        raise BranchMergeConflictError(
            f"merging {plan.theirs[:8]} into {plan.ours[:8]}: {what} edited on both sides since {plan.base[:8]} "
            f"({shown}); choose for each: keep mine (ours), keep theirs (theirs) or keep both (both)",
            plan, unresolved)
    sides: dict[str, Resolution] = {c.key: _side(chosen.get(c.key, policy)) for c in plan.conflicts}
    both = {(c.kind, c.label) for c in plan.conflicts if sides[c.key] == "both"}
    if any(kind == "supervoxel" for kind, _ in both):
        kind, label = sorted(k for k in both if k[0] == "supervoxel")[0]
        raise ArgumentError(f"{kind} {label} was split on both sides; keep ours or theirs (not both)")
    mine, other = plan.ours_changes, plan.theirs_changes
    drop_seed: set[int] = set()
    revert_seed: set[int] = set()
    for c in plan.conflicts:
        if sides[c.key] == "ours":
            drop_seed.update(c.theirs)
        elif sides[c.key] == "theirs":
            revert_seed.update(c.ours)
    dropped = _closure(other, drop_seed)
    reverted = _closure(mine, revert_seed)
    kept = tuple(c for c in other if c.mutation_id not in dropped)
    undone = tuple(c for c in mine if c.mutation_id in reverted)
    kept_mine = [c for c in mine if c.mutation_id not in reverted]
    overlap = set().union(*(touched(c.mutation) for c in kept)) & \
        set().union(*(touched(c.mutation) for c in kept_mine)) if kept and kept_mine else set()
    overlap -= both
    if overlap:
        kind, label = sorted(overlap)[0]
        raise MappingError(f"the resolutions still leave {kind} {label} edited on both sides; resolve it too")
    delta = MapDelta.concat([c.delta.inverse() for c in reversed(undone)] + [c.delta for c in kept])
    trial = _merge_txn(lm, plan)
    try:
        trial.apply_delta(delta)
    except MappingError as exc:
        raise MappingError(f"their edits do not replay onto {plan.ours[:8]} ({exc})") from exc
    return MergeOutcome(plan, sides, kept, undone, tuple(sorted(dropped)), delta)


def merge_branches(lm: Labelmap, ours: str, theirs: str, *, resolutions: Mapping[str, Resolution] | None = None,
                   policy: MergePolicy = "fail", branch: str | None = None, user: str | None = None,
                   message: str | None = None, keep_ours: Sequence[str] = (),
                   then: Callable[[VersionWriter], None] | None = None) -> BranchMergeResult:
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
    keep_ours, then
        Other instances that merge themselves (annotations bound to this labelmap): their keys
        take ours' value in the store's merge, and ``then(writer)`` writes their merge on the same
        merge version, in the same transaction.

    Raises
    ------
    BranchMergeConflictError
        Unresolved conflicts; ``exc.plan`` lists them.
    ArgumentError
        A resolution naming no conflict, or an unknown side.
    MappingError
        See :func:`resolve_branch_merge`.
    """
    _check_policy(policy)
    plan = plan_branch_merge(lm, ours, theirs)
    outcome = resolve_branch_merge(lm, plan, resolutions=resolutions, policy=policy)
    lm.top_up_ids()  # a clone's merge needs a mutation id: reserve now (a pull is online), as every edit does
    kept, undone = list(outcome.kept), list(outcome.undone)
    a, b, base = (lm.state(x) for x in (plan.ours, plan.theirs, plan.base))
    keys_out = _merged_keys(lm, a, b, base, kept, undone)
    txn = _merge_txn(lm, plan)
    for key, value in keys_out.items():  # the index entries first: the map's counts read them
        if key[:1] == INDEX_PREFIX:
            txn.put(key, value)
    txn.apply_delta(outcome.delta)
    keys_out.update(txn.pending)
    labels = sorted(set().union(*(touched(c.mutation) for c in kept + undone)) if kept or undone else set())
    edit = EditPlan(
        "merge-branches",
        {"ours": plan.ours, "theirs": plan.theirs, "base": plan.base, "applied": list(outcome.applied),
         "reverted": list(outcome.reverted), "dropped": list(outcome.dropped),
         **({"removed": list(outcome.removed)} if outcome.removed else {}),
         **({"restored": list(outcome.restored)} if outcome.restored else {}),
         "resolutions": outcome.resolutions,
         **({"message": message} if message else {})},
        outcome.delta, keys_out,
        bodies=tuple(v for k, v in labels if k == "body"),
        supervoxels=tuple(v for k, v in labels if k == "supervoxel"),
    )
    written: list[Mutation] = []

    def write(w: VersionWriter) -> None:
        written.append(write_plan(w, lm.instance, lm.name, edit, user or default_user()).mutation)
        if then is not None:
            then(w)

    result = lm.repo.merge(plan.ours, plan.theirs, branch=branch, keep_ours=[lm.name, *keep_ours], then=write)
    return BranchMergeResult(result.version, plan, written[0], outcome.applied, outcome.reverted, outcome.dropped,
                             outcome.removed, outcome.restored)


def _merged_keys(lm: Labelmap, ours: VersionState, theirs: VersionState, base: VersionState,
                 kept: list[SideChange], undone: list[SideChange]) -> dict[bytes, bytes | None]:
    """Overlay blocks and index entries of the merge version, as changes to ours' keys."""
    cfg = lm.config
    r_ours = PatchedReader(lm.base, ours.overlay)
    r_theirs = PatchedReader(lm.base, theirs.overlay)
    r_base = PatchedReader(lm.base, base.overlay)
    ws = Workspace(cfg, r_ours, lm.txn(ours), lambda _n: range(0))
    blocks0: set[Coord] = {b.block for c in kept + undone for b in c.mutation.blocks if b.scale == 0}
    revert_targets = np.fromiter(_rewritten(undone), dtype=np.uint64)
    take_targets = np.fromiter(_rewritten(kept), dtype=np.uint64)
    # Voxel by voxel at scale 0: ours, with the voxels of reverted changes back to the merge base and
    # the voxels of their kept changes taken from theirs (a voxel is named by what it held at the base).
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
    # Index entries of the supervoxels the changes made or retired: theirs' for kept changes, the
    # base's for reverted ones (absent = the supervoxel does not exist there, or is a base one).
    for source, changes in ((theirs, kept), (base, undone)):
        svs = sorted(_indexed(changes))
        keys = [index_key(sv) for sv in svs]
        for key, want, have in zip(keys, source.records.get_many(keys), ours.records.get_many(keys), strict=True):
            if want != have:
                out[key] = want
    return out


def _merge_txn(lm: Labelmap, plan: BranchMergePlan) -> MapTxn:
    """A planning transaction over ours' body map that finds split-made entries on every side."""
    sides = [lm.state(x) for x in (plan.ours, plan.theirs, plan.base)]

    def entries(svs: list[int]) -> dict[int, SvIndex]:
        # a supervoxel id's entry never changes: any side that has the supervoxel has the right one
        # (ours too: the merge deletes the entries of the splits it reverts before re-counting bodies)
        out: dict[int, SvIndex] = {}
        for side in sides:
            keys = [index_key(sv) for sv in svs if sv not in out]
            wanted = [sv for sv in svs if sv not in out]
            for sv, raw in zip(wanted, side.records.get_many(keys), strict=True):
                if raw is not None:
                    out[sv] = SvIndex.from_bytes(raw, key=f"index entry of supervoxel {sv}")
        return out

    return lm.txn(sides[0], entries=entries)
