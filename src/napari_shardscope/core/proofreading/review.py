"""Reviewing a branch in the viewer like a pull request: the Qt-free part of "Review branch…".

The panel draws what this object holds and forwards clicks to it; a notebook makes the same calls::

    reviewer = BranchReviewer(controller)   # the viewer's ProofreadingController
    review = reviewer.open("origin/alice")   # against the checked-out (committed) version
    reviewer.keep(body, "theirs")            # per conflicting body: "mine", "theirs" or "both"
    reviewer.accept()                        # the merge version (open, checked out)
    controller.commit("merged alice's branch")   # then `shardscope push`

The rows come from :func:`~napari_shardscope.core.labelmap.review.review_branch` (bodies the branch
changed since it diverged from the target, before/after sizes, a location, both edit histories in
plain words); the choices are the controller's branch-merge choices (conflict key ``body:N`` or
``supervoxel:N``), so accepting is exactly the Versions panel's Merge. "Mine" is the checked-out
target (the merge's ``ours``), "theirs" the reviewed branch.

Where to look (:meth:`BranchReviewer.target`) is the proofreading go-to's target of the body on the
branch head (the "after" side, where a body the branch made exists), or on the checked-out version
for a body the branch merged away: the same box, plane and zoom as the Navigate panel's go-to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.branch_merge import BranchMergeResult, Resolution
from napari_shardscope.core.labelmap.review import BodyReview, BranchReview, review_branch
from napari_shardscope.core.labelmap.version import LabelmapVersion
from napari_shardscope.core.proofreading.controller import ProofreadingController
from napari_shardscope.core.proofreading.navigation import NavTarget, body_target

Keep = Literal["mine", "theirs", "both"]
KEEPS: tuple[Keep, ...] = ("mine", "theirs", "both")
_SIDE: dict[str, Resolution] = {"mine": "ours", "theirs": "theirs", "both": "both"}
_KEEP: dict[str, Keep] = {"ours": "mine", "theirs": "theirs", "both": "both"}


@dataclass(frozen=True)
class ReviewRow:
    """One row of the review: a body the branch changed, or a supervoxel both sides split.

    ``key`` is the merge's conflict key (``body:N`` / ``supervoxel:N``); ``keep`` the side chosen
    (None: none yet, or no conflict to choose for).
    """

    key: str
    body: BodyReview | None
    conflict: bool
    keep: Keep | None

    @property
    def title(self) -> str:
        return self.key.replace(":", " ")


class BranchReviewer:
    """The review of one branch against the controller's checked-out committed version."""

    def __init__(self, controller: ProofreadingController) -> None:
        self.controller = controller
        self.branch: str | None = None
        self.review: BranchReview | None = None

    def open(self, branch: str) -> BranchReview:
        """Review ``branch`` against the checked-out version; lists its conflicts in the controller."""
        c = self.controller
        branch = branch.strip()
        if not branch:
            raise ArgumentError("name the branch to review")
        plan = c.plan_branch_merge(branch)  # checks a committed version is checked out; raises a typed error
        lm = c.session.labelmap
        assert lm is not None
        self.review = review_branch(lm, plan.theirs, target=plan.ours)
        self.branch = branch
        c.report(f"review of {branch}: {len(self.review.bodies)} body(ies) changed, "
                 f"{len(plan.conflicts)} conflict(s)" + (" — keep mine, theirs or both for each, then Accept"
                                                          if plan.conflicts else " — Accept merges them"))
        return self.review

    def _current(self) -> tuple[str, BranchReview]:
        if self.branch is None or self.review is None:
            raise ArgumentError("open a branch to review first")
        return self.branch, self.review

    def rows(self) -> list[ReviewRow]:
        """Body rows (conflicts first), then supervoxel conflicts no body row names."""
        if self.review is None:
            return []
        plan = self.controller.merge_plan
        choices = dict(plan.choices) if plan is not None else {}
        out = [ReviewRow(f"body:{b.body}", b, b.conflict or f"body:{b.body}" in choices,
                         _keep(choices.get(f"body:{b.body}")))
               for b in self.review.bodies]
        listed = {r.key for r in out}
        out += [ReviewRow(k, None, True, _keep(side)) for k, side in choices.items() if k not in listed]
        return sorted(out, key=lambda r: not r.conflict)

    def keep(self, key: str | int, keep: Keep | None) -> None:
        """Keep ``mine``, ``theirs`` or ``both`` for conflict ``key`` (a body id or a conflict key)."""
        self._current()
        name = f"body:{key}" if isinstance(key, int) else key
        if keep is not None and keep not in _SIDE:
            raise ArgumentError(f"keep 'mine', 'theirs' or 'both', got {keep!r}")
        self.controller.choose(name, None if keep is None else _SIDE[keep])

    def after(self) -> LabelmapVersion:
        """The branch head (the "after" side) as a read-only labelmap version."""
        _, review = self._current()
        lm = self.controller.session.labelmap
        assert lm is not None
        return lm.at(review.branch)

    def target(self, key: str | int) -> NavTarget:
        """Where to look at a body of the review: its go-to target after the branch, else before it."""
        self._current()
        body = key if isinstance(key, int) else int(key.split(":")[1])
        after = self.after()
        if after.exists(body):
            return body_target(after, body)
        version = self.controller.version
        if version is not None and version.exists(body):
            return body_target(version, body)
        raise ArgumentError(f"body {body} exists neither on the reviewed branch nor on the checked-out version")

    def accept(self) -> BranchMergeResult:
        """Write the merge version (open, checked out) with the sides chosen; commit and push it after."""
        branch, _ = self._current()
        result = self.controller.merge_branch(branch)
        self.branch = self.review = None
        return result


def _keep(side: Resolution | None) -> Keep | None:
    return None if side is None else _KEEP[side]
