"""The branch merge being drafted: the branch chosen, its conflicts listed, a side chosen for each.

Merging a branch is planned over several user actions (choose the branch, list the conflicts,
choose keep mine / keep theirs / keep both per conflict, merge), so the draft
(:class:`~napari_shardscope.core.proofreading.state.MergePlanState`) is state of the controller,
tied to both heads it was planned for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.branch_merge import BranchMergePlan, BranchMergeResult, Resolution
from napari_shardscope.core.proofreading.controller_base import ControllerBase
from napari_shardscope.core.proofreading.jobs import Job
from napari_shardscope.core.proofreading.session import JobProgress
from napari_shardscope.core.proofreading.state import MergePlanState
from napari_shardscope.core.proofreading.wording import describe_branch_merge, describe_branch_merge_plan, plural


class BranchMergeDrafting(ControllerBase):
    """Choose the branch to merge, list its conflicts, choose a side for each, write the merge version."""

    def set_merge_theirs(self, branch: str | None) -> None:
        """Choose the branch to merge; the conflicts and choices listed for another branch are dropped."""
        with self._action():
            branch = branch or None
            if branch != self._merge_theirs:
                self._merge_theirs = branch
                if self._plan is not None and self._plan.theirs != branch:
                    self._plan = None
                self._touch()

    def plan_branch_merge(self, theirs: str | None = None) -> BranchMergePlan:
        """List the conflicts of merging ``theirs`` into the checked-out version, each waiting for a side."""
        with self._action():
            self._require("plan_merge")
            theirs = theirs or self._merge_theirs
            if not theirs:
                raise ArgumentError("choose the branch to merge")
            self.set_merge_theirs(theirs)
            plan = self.session.plan_branch_merge(theirs)
            self._plan = MergePlanState(theirs, plan, {c.key: None for c in plan.conflicts})
            self._ok(describe_branch_merge_plan(plan, self._ours_name(), theirs))
            return plan

    def choose(self, key: str, side: str | None) -> None:
        """Keep ``side`` for conflict ``key`` of the checked merge: ``ours`` (keep mine), ``theirs``,
        ``both`` (their edits replayed after mine), ``None`` unsets."""
        with self._action():
            if self._plan is None or key not in self._plan.choices:
                raise ArgumentError(f"no conflict {key!r} listed: check the merge first")
            if side not in ("ours", "theirs", "both", None):
                raise ArgumentError(f"a conflict is resolved keep mine ('ours'), keep theirs ('theirs') or "
                                    f"keep both ('both'), got {side!r}")
            self._plan = replace(self._plan, choices={**self._plan.choices, key: side})  # type: ignore[dict-item]
            self._touch()

    def _plan_is_current(self, plan: MergePlanState, theirs: str) -> bool:
        v = self.session.version
        return (v is not None and plan.theirs == theirs and plan.plan.ours == v.uuid
                and plan.plan.theirs == self.session.resolve(theirs).uuid)

    def merge_branch(self, theirs: str | None = None,
                     resolutions: Mapping[str, Resolution] | None = None) -> BranchMergeResult:
        """Merge branch ``theirs`` into the checked-out version and check out the (open) merge version.

        ``resolutions`` (conflict key → side) default to the sides chosen with :meth:`choose` for
        a plan of these two heads; without one, the merge is checked first and refused while it
        has conflicts (nothing is written). Runs in the calling thread (see :meth:`merge_branch_job`).
        """
        return self.merge_branch_job(theirs, resolutions).run_here()

    def merge_branch_job(self, theirs: str | None = None,
                         resolutions: Mapping[str, Resolution] | None = None) -> Job[BranchMergeResult]:
        """:meth:`merge_branch` as a job: ``run`` writes the merge version (seconds on a large log),
        ``finish`` checks it out and says what came in."""
        with self._action():
            self._require("merge_branch")
            if self.busy:
                raise ArgumentError(self._wait_text())
            theirs = theirs or self._merge_theirs
            if not theirs:
                raise ArgumentError("choose the branch to merge")
            self.set_merge_theirs(theirs)
            if resolutions is None:
                plan = self._plan
                if plan is None or not self._plan_is_current(plan, theirs):
                    fresh = self.plan_branch_merge(theirs)  # the listed choices were for another merge
                    if fresh.conflicts:
                        raise ArgumentError(f"merging {theirs}: {plural(len(fresh.conflicts), 'conflict')} listed — "
                                            "choose keep mine, keep theirs or keep both for each, then Merge")
                    plan = self._plan
                assert plan is not None
                resolutions = plan.resolutions
                head = plan.plan.theirs
            else:
                head = self.session.resolve(theirs).uuid
            ours_name = self._ours_name()
            chosen = dict(resolutions)
            name = theirs
            session = self.session
            # Both heads are fixed here, on this thread (``head`` above, ``ours`` now): the worker runs
            # later, and meanwhile this thread may check out another version or a commit may move
            # ``theirs``; the merge must still be the one planned here, which the resolutions are for.
            ours = self.session.require()[2].uuid

            def work(_progress: JobProgress | None) -> BranchMergeResult:
                return session.write_branch_merge(head, chosen, ours=ours)

            def done(result: BranchMergeResult) -> str:
                self.session.show_branch_merge(result)
                self._plan = None
                return describe_branch_merge(name, ours_name, len(result.applied), len(result.reverted),
                                             len(result.dropped), result.mutation.bodies, result.version.short)

            job = self._begin_job("merge", f"merge of {theirs} into {ours_name}", work, done)
            self._set_status(f"merging {theirs} into {ours_name} …", "info")
            return job
