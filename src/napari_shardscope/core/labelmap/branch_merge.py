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
write nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from napari_shardscope.core.errors import ArgumentError, ConflictError
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.edits import EditPlan, Workspace, write_plan
from napari_shardscope.core.labelmap.errors import LabelmapError, LabelmapStateError, MappingError
from napari_shardscope.core.labelmap.geometry import Coord
from napari_shardscope.core.labelmap.keys import INDEX_PREFIX, index_key
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.labelmap import Labelmap, default_user
from napari_shardscope.core.labelmap.logs import LogRecord, ordered_log
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import PatchedReader
from napari_shardscope.core.labelmap.recordmap import MapTxn
from napari_shardscope.core.labelmap.splitting import propagate_scales
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError
from napari_shardscope.core.versioned.view import VersionWriter

Resolution = Literal["ours", "theirs", "both"]
MergePolicy = Literal["fail", "ours", "theirs"]
LabelKind = Literal["body", "supervoxel"]
Label = tuple[LabelKind, int]
#: One step of what a log record did to its version's contents: an edit put in (True) or taken out (False).
ContentOp = tuple[bool, Mutation]


@dataclass(frozen=True)
class SideChange:
    """One way a side differs from the merge base: an edit it has that the base lacks, or the reverse.

    Attributes
    ----------
    mutation
        The edit (a merge, cleave or split record).
    removed
        False: the side made (or took in) the edit. True: the base has the edit and the side took it
        out (a merge resolved ``theirs`` reverted it); replaying the change is inverting the edit.
    """

    mutation: Mutation
    removed: bool = False

    @property
    def mutation_id(self) -> int:
        return self.mutation.mutation_id

    @property
    def delta(self) -> MapDelta:
        """The map change this difference makes, applied forwards."""
        return self.mutation.delta.inverse() if self.removed else self.mutation.delta


@dataclass(frozen=True)
class LabelConflict:
    """A body or supervoxel both sides touched since the merge base.

    Attributes
    ----------
    kind, label
        ``"body"`` or ``"supervoxel"``, and its id.
    ours, theirs
        Ids of each side's changes (edits made or taken out) that touched it.
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
    """What merging ``theirs`` into ``ours`` involves (read from the store, nothing written).

    Attributes
    ----------
    ours_mutations, theirs_mutations
        The edits each side has that the merge base lacks and the other side does not share
        (``merge-branches`` records expanded into their edits), oldest first.
    ours_removed, theirs_removed
        Edits of the merge base each side took out (and the other did not), newest first.
    """

    ours: str
    theirs: str
    base: str
    ours_mutations: tuple[Mutation, ...]
    theirs_mutations: tuple[Mutation, ...]
    conflicts: tuple[LabelConflict, ...]
    ours_removed: tuple[Mutation, ...] = ()
    theirs_removed: tuple[Mutation, ...] = ()

    @property
    def ours_changes(self) -> tuple[SideChange, ...]:
        """Our differences from the base in replay order: the removals, then the edits."""
        return _changes(self.ours_mutations, self.ours_removed)

    @property
    def theirs_changes(self) -> tuple[SideChange, ...]:
        """Their differences from the base in replay order: the removals, then the edits."""
        return _changes(self.theirs_mutations, self.theirs_removed)

    def to_json(self) -> dict[str, Any]:
        def side(ms: tuple[Mutation, ...]) -> list[dict[str, Any]]:
            return [{"id": m.mutation_id, "operation": m.operation, "user": m.user, "time": m.time,
                     "bodies": list(m.bodies), "supervoxels": list(m.supervoxels)} for m in ms]

        return {"ours": self.ours, "theirs": self.theirs, "base": self.base,
                "ours_mutations": side(self.ours_mutations), "theirs_mutations": side(self.theirs_mutations),
                "ours_removed": side(self.ours_removed), "theirs_removed": side(self.theirs_removed),
                "conflicts": [c.to_json() for c in self.conflicts]}


def _changes(added: Sequence[Mutation], removed: Sequence[Mutation]) -> tuple[SideChange, ...]:
    return tuple(SideChange(m, True) for m in removed) + tuple(SideChange(m) for m in added)


@dataclass(frozen=True)
class MergeOutcome:
    """A merge decided and checked but not written: which changes it takes, reverts and leaves out.

    Attributes
    ----------
    resolutions
        The side kept for every conflict (explicit resolutions, else the policy).
    kept
        Their changes the merge applies, in replay order.
    undone
        Our changes the merge reverts, in the order they were made (reverted newest first).
    dropped
        Ids of their changes left out.
    delta
        The merge record's map delta: ``undone`` inverted, then ``kept``; it replays onto ours' map.
    """

    plan: BranchMergePlan
    resolutions: dict[str, Resolution]
    kept: tuple[SideChange, ...]
    undone: tuple[SideChange, ...]
    dropped: tuple[int, ...]
    delta: MapDelta = field(repr=False)

    @property
    def applied(self) -> tuple[int, ...]:
        """Ids of their edits applied."""
        return tuple(c.mutation_id for c in self.kept if not c.removed)

    @property
    def removed(self) -> tuple[int, ...]:
        """Ids of base edits their side took out, taken out here too."""
        return tuple(c.mutation_id for c in self.kept if c.removed)

    @property
    def reverted(self) -> tuple[int, ...]:
        """Ids of our edits reverted."""
        return tuple(c.mutation_id for c in self.undone if not c.removed)

    @property
    def restored(self) -> tuple[int, ...]:
        """Ids of base edits our side had taken out, put back."""
        return tuple(c.mutation_id for c in self.undone if c.removed)

    def to_json(self) -> dict[str, Any]:
        return {"applied": list(self.applied), "removed": list(self.removed), "reverted": list(self.reverted),
                "restored": list(self.restored), "dropped": list(self.dropped), "resolutions": self.resolutions}


@dataclass(frozen=True)
class BranchMergeResult:
    """The merge version made, and which edits it took and left out."""

    version: Version
    plan: BranchMergePlan
    mutation: Mutation
    applied: tuple[int, ...]
    reverted: tuple[int, ...]
    dropped: tuple[int, ...]
    removed: tuple[int, ...] = ()
    restored: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version.uuid, "branch": self.version.branch, "mutation": self.mutation.mutation_id,
                "applied": list(self.applied), "reverted": list(self.reverted), "dropped": list(self.dropped),
                "removed": list(self.removed), "restored": list(self.restored), "plan": self.plan.to_json()}


class BranchMergeConflictError(LabelmapError, ConflictError):
    """Labels edited on both branches and no resolution given for them; nothing was written."""

    def __init__(self, message: str, plan: BranchMergePlan, unresolved: Sequence[LabelConflict]) -> None:
        super().__init__(message)
        self.plan = plan
        self.unresolved = tuple(unresolved)


# -- contents: logs as sets of edits -----------------------------------------------------------------


def touched(m: Mutation) -> set[Label]:
    """The labels a mutation touched."""
    return {("body", int(b)) for b in m.bodies} | {("supervoxel", int(s)) for s in m.supervoxels}


def _invert(ops: Sequence[ContentOp]) -> tuple[ContentOp, ...]:
    return tuple((not add, m) for add, m in reversed(ops))


class _Contents:
    """Replays version logs into their contents: the edits (merges, cleaves, splits) each one holds.

    A record's effect on the contents is a list of edits put in and taken out: an edit puts itself
    in; an undo inverts the record it inverted (a redo inverts an undo, so it puts the edit back
    under the edit's own id: the same edit, wherever it was redone); a ``merge-branches`` record
    puts in what it applied and takes out what it reverted, expanded recursively (records written
    before merges named edits directly may name an earlier merge record instead of its edits).

    Records are looked up by id in the three states' logs, and, when a merge record names one
    that none of those first-parent logs holds (an edit merged in from a third branch), in the
    whole ancestry's log of the two heads, read once.
    """

    def __init__(self, lm: Labelmap, versions: Sequence[Version]) -> None:
        self._lm = lm
        self._heads = list(versions)
        self._records: dict[int, Mutation] = {}
        self.logs: dict[str, list[LogRecord]] = {}
        for v in versions:
            with lm.repo.read(v) as view:
                log = ordered_log(view, lm.instance, lambda uuid: lm.repo.version(uuid).parents)
            self.logs[v.uuid] = log
            for r in log:
                m = r.mutation
                self._records[m.mutation_id] = m
        self._read_all = False
        self._ops: dict[int, tuple[ContentOp, ...]] = {}

    def record(self, mutation_id: int) -> Mutation:
        m = self._records.get(mutation_id)
        if m is None and not self._read_all:
            self._read_all = True
            for v in self._heads:
                with self._lm.repo.read(v) as view:
                    for e in view.read_log(self._lm.instance):
                        rec = Mutation.from_bytes(e.data, key=f"mutation log of version {e.version}")
                        self._records.setdefault(rec.mutation_id, rec)
            m = self._records.get(mutation_id)
        if m is None:
            raise LabelmapStateError(f"mutation {mutation_id} is named in a mutation log but no log holds it")
        return m

    def ops(self, m: Mutation) -> tuple[ContentOp, ...]:
        """What log record ``m`` did to its version's contents, in order."""
        hit = self._ops.get(m.mutation_id)
        if hit is not None:
            return hit
        if m.operation in ("undo", "redo"):
            if m.target is None:
                raise LabelmapStateError(f"mutation log: {m.operation} {m.mutation_id} names no record it inverts")
            out = _invert(self.ops(self.record(m.target)))
        elif m.operation == "merge-branches":
            out = self._merge_ops(m)
        else:
            out = ((True, m),)
        self._ops[m.mutation_id] = out
        return out

    def _merge_ops(self, m: Mutation) -> tuple[ContentOp, ...]:
        def ids(name: str) -> list[int]:
            return [int(i) for i in m.args.get(name, [])]

        out: list[ContentOp] = []
        for i in reversed(ids("reverted")):  # the record's delta inverts them newest first
            out.extend(_invert(self.ops(self.record(i))))
        out.extend((True, self.record(i)) for i in ids("restored"))
        out.extend((False, self.record(i)) for i in ids("removed"))
        for i in ids("applied"):
            out.extend(self.ops(self.record(i)))
        return tuple(out)

    def of(self, version: Version) -> dict[int, Mutation]:
        """The edits ``version`` holds, by id, in the order they went in."""
        out: dict[int, Mutation] = {}
        for r in self.logs[version.uuid]:
            for add, e in self.ops(r.mutation):
                if add:
                    out[e.mutation_id] = e
                else:
                    out.pop(e.mutation_id, None)
        return out


def _merge_base(lm: Labelmap, ours: Version, theirs: Version) -> Version:
    anc = {v.uuid for v in lm.repo.ancestry(ours)}
    return max((v for v in lm.repo.ancestry(theirs) if v.uuid in anc), key=lambda v: v.vid)


def _committed(lm: Labelmap, ref: str) -> Version:
    v = lm.repo.version(ref)
    if not v.locked:
        raise UncommittedVersionError(f"version {v.short} (branch {v.branch!r}) is open: commit it before merging")
    return v


def plan_branch_merge(lm: Labelmap, ours: str, theirs: str) -> BranchMergePlan:
    """The changes of each side since the merge base and the labels both touched (reads only)."""
    a, b = _committed(lm, ours), _committed(lm, theirs)
    if a.uuid == b.uuid:
        raise ArgumentError("cannot merge a version with itself")
    base = _merge_base(lm, a, b)
    contents = _Contents(lm, (a, b, base))
    at_base, at_ours, at_theirs = contents.of(base), contents.of(a), contents.of(b)

    def added(head: dict[int, Mutation]) -> dict[int, Mutation]:
        return {i: m for i, m in head.items() if i not in at_base}

    def removed(head: dict[int, Mutation]) -> dict[int, Mutation]:
        return {i: m for i, m in at_base.items() if i not in head}

    add_o, add_t, rem_o, rem_t = added(at_ours), added(at_theirs), removed(at_ours), removed(at_theirs)
    # an edit both sides took in (or both took out) is no difference between them
    both = (add_o.keys() & add_t.keys()) | (rem_o.keys() & rem_t.keys())

    def ordered(ms: dict[int, Mutation], *, newest_first: bool = False) -> tuple[Mutation, ...]:
        # ids grow with creation, and an edit only ever builds on older ones: id order is a replay order
        return tuple(sorted((m for i, m in ms.items() if i not in both), key=lambda m: m.mutation_id,
                            reverse=newest_first))

    mine_added, mine_removed = ordered(add_o), ordered(rem_o, newest_first=True)
    other_added, other_removed = ordered(add_t), ordered(rem_t, newest_first=True)
    by_label: tuple[dict[Label, list[int]], dict[Label, list[int]]] = ({}, {})
    for changes, index in ((_changes(mine_added, mine_removed), by_label[0]),
                           (_changes(other_added, other_removed), by_label[1])):
        for c in changes:
            for lab in touched(c.mutation):
                index.setdefault(lab, []).append(c.mutation_id)
    conflicts = tuple(LabelConflict(kind, label, tuple(by_label[0][(kind, label)]), tuple(ids))
                      for (kind, label), ids in sorted(by_label[1].items()) if (kind, label) in by_label[0])
    return BranchMergePlan(a.uuid, b.uuid, base.uuid, mine_added, other_added, conflicts, mine_removed, other_removed)


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
