"""What a labelmap branch merge would do: each head's edits since the merge base, and their conflicts.

Steps 1–3 of :mod:`.branch_merge` (contents, sides, conflicts), and the data types a caller sees of
a merge (the plan, its conflicts, the outcome and the result). Split from the merge itself because
planning only reads the three committed versions: the proofreading controller, ``shardscope
merge-branches --dry-run`` and the review of a merge ask for a plan without ever writing, and
:func:`.branch_merge.merge_branches` decides and writes from the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from napari_shardscope.core.errors import ArgumentError, ConflictError
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.errors import LabelmapError, LabelmapStateError
from napari_shardscope.core.labelmap.labelmap import Labelmap
from napari_shardscope.core.labelmap.logs import LogRecord, ordered_log
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError

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
