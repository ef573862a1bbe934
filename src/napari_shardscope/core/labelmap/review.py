"""Reviewing a branch like a pull request: the bodies it changed against its target, with conflicts.

A proofreader who pulled a colleague's branch (or fetched ``origin/alice``) wants what a code
reviewer gets from a pull request: which bodies the branch changed, how each looks before (on the
target) and after (on the branch), where to look, what was done to it in plain words, and which
bodies the target changed too since they diverged (a conflict the merge will ask about). This is
the labelmap's branch-merge plan (:func:`~napari_shardscope.core.labelmap.branch_merge.plan_branch_merge`)
read per body; nothing is written. ``shardscope review`` prints it; a notebook calls
:func:`review_branch`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.labelmap.branch_merge import SideChange, plan_branch_merge, touched
from napari_shardscope.core.labelmap.edit_words import describe_edit
from napari_shardscope.core.labelmap.labelmap import Labelmap
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.version import LabelmapVersion


@dataclass(frozen=True)
class BodyReview:
    """One body the branch changed.

    Attributes
    ----------
    body
        The body id.
    conflict
        The target changed this body too since the two diverged.
    before, after
        Its voxel count on the target head and on the branch head (None: no such body there).
    location
        A voxel (z, y, x) at the centre of its blocks on the branch (or the target when gone there).
    branch_edits, target_edits
        What each side did to it, in plain words (the target's only for conflicts).
    """

    body: int
    conflict: bool
    before: int | None
    after: int | None
    location: tuple[int, int, int] | None
    branch_edits: tuple[str, ...]
    target_edits: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"body": self.body, "conflict": self.conflict, "before": self.before, "after": self.after,
                "location": None if self.location is None else list(self.location),
                "branch_edits": list(self.branch_edits), "target_edits": list(self.target_edits)}


@dataclass(frozen=True)
class BranchReview:
    """The review of ``branch`` against ``target`` (both version UUIDs) since ``base``."""

    branch: str
    target: str
    base: str
    bodies: tuple[BodyReview, ...]

    @property
    def conflicts(self) -> tuple[BodyReview, ...]:
        return tuple(b for b in self.bodies if b.conflict)

    def to_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "target": self.target, "base": self.base,
                "bodies": [b.to_json() for b in self.bodies], "conflicts": len(self.conflicts)}

    def to_text(self) -> str:
        lines = [f"review of {self.branch[:8]} against {self.target[:8]} (diverged at {self.base[:8]}): "
                 f"{len(self.bodies)} body(ies) changed, {len(self.conflicts)} conflict(s)"]
        for b in self.bodies:
            flag = "CONFLICT " if b.conflict else ""
            size = f"{_count(b.before)} -> {_count(b.after)} voxels"
            where = "" if b.location is None else f" at z,y,x {b.location[0]},{b.location[1]},{b.location[2]}"
            lines.append(f"  {flag}body {b.body}: {size}{where}")
            lines.extend(f"    branch: {e}" for e in b.branch_edits)
            lines.extend(f"    target: {e}" for e in b.target_edits)
        return "\n".join(lines)


def _count(n: int | None) -> str:
    return "absent" if n is None else str(n)


def describe(change: SideChange) -> str:
    """One edit in plain words: what it did to which bodies, who, when (no mutation numbers)."""
    m: Mutation = change.mutation
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(m.time))
    what = describe_edit(m)
    return f"{'took back: ' if change.removed else ''}{what} ({m.user}, {when} UTC)"


def _size(v: LabelmapVersion, body: int) -> int | None:
    return v.size(body) if v.exists(body) else None


def _where(v: LabelmapVersion, body: int) -> tuple[int, int, int] | None:
    if not v.exists(body):
        return None
    box = v.bbox(body, exact=False)
    return (box.lo[0] + box.shape[0] // 2, box.lo[1] + box.shape[1] // 2, box.lo[2] + box.shape[2] // 2)


def review_branch(lm: Labelmap, branch: str, target: str = "main") -> BranchReview:
    """The bodies ``branch`` changed since it diverged from ``target``, before and after, conflicts flagged."""
    plan = plan_branch_merge(lm, target, branch)
    theirs: dict[int, list[SideChange]] = {}
    ours: dict[int, list[SideChange]] = {}
    for changes, index in ((plan.theirs_changes, theirs), (plan.ours_changes, ours)):
        for c in changes:
            for kind, label in touched(c.mutation):
                if kind == "body":
                    index.setdefault(label, []).append(c)
    conflict_bodies = {c.label for c in plan.conflicts if c.kind == "body"}
    after, before = lm.at(plan.theirs), lm.at(plan.ours)
    bodies = []
    for body in sorted(theirs):
        is_conflict = body in conflict_bodies or body in ours
        bodies.append(BodyReview(
            body=body, conflict=is_conflict, before=_size(before, body), after=_size(after, body),
            location=_where(after, body) or _where(before, body),
            branch_edits=tuple(describe(c) for c in theirs[body]),
            target_edits=tuple(describe(c) for c in ours.get(body, [])) if is_conflict else ()))
    return BranchReview(plan.theirs, plan.ours, plan.base, tuple(bodies))
