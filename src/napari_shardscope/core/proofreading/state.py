"""What the proofreading controller shows: frozen snapshots its views render.

A view (a napari panel, a notebook cell, a test) never reads the controller's fields one by one
while they change: it gets a :class:`ControllerState` after each change and draws it. Each record
here is frozen so a snapshot cannot be edited behind the controller's back.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap import Box
from napari_shardscope.core.labelmap.branch_merge import BranchMergePlan, Resolution
from napari_shardscope.core.labelmap.diff import VersionDiff
from napari_shardscope.core.versioned import Version

Mode = Literal["bodies", "supervoxels"]
MODES: tuple[Mode, ...] = ("bodies", "supervoxels")
Level = Literal["info", "ok", "warning", "error"]


@dataclass(frozen=True)
class ActionState:
    """Whether an action can run now; ``reason`` says why not (empty when enabled)."""

    enabled: bool
    reason: str = ""


@dataclass(frozen=True)
class Status:
    """The last message: what was done, what is running, or what was refused."""

    text: str
    level: Level = "info"
    time: float = field(default_factory=time.time)

    def render(self) -> str:
        """The text, with the time for completed actions (a repeated action shows a new time)."""
        if self.level == "ok" and self.text:
            return f"{self.text} ({datetime.fromtimestamp(self.time).strftime('%H:%M:%S')})"
        return self.text


@dataclass(frozen=True, eq=False)
class PendingSplit:
    """A split being seeded: the body, the version the seeds belong to, where they may be painted.

    Attributes
    ----------
    box
        The scale-0 region (z, y, x) a painting tool covers: the body's block bounds, or one z
        plane of them for a large body.
    seeds
        Seed group label → scale-0 voxels (n, 3) inside the body.
    """

    body: int
    version: str
    box: Box
    seeds: Mapping[int, npt.NDArray[np.int64]] = field(default_factory=dict)


@dataclass(frozen=True)
class MergePlanState:
    """A checked branch merge: the plan (tied to both heads) and the side chosen for each conflict."""

    theirs: str
    plan: BranchMergePlan
    choices: Mapping[str, Resolution | None]

    @property
    def unresolved(self) -> tuple[str, ...]:
        return tuple(k for k, side in self.choices.items() if side is None)

    @property
    def resolutions(self) -> dict[str, Resolution]:
        return {k: side for k, side in self.choices.items() if side is not None}


@dataclass(frozen=True)
class BodyInfo:
    """What the Body box shows: id, size, supervoxel count, block bounds, recent history.

    ``history`` holds (operation, user, time, version) of the body's last mutations, oldest first;
    ``edits`` the same mutations in words (``"merge of 12 into 34"``), ``bounds_text`` the bounds
    labelled as what they are (scale-0 voxels rounded out to overlay blocks).
    """

    id: int
    size: int
    supervoxels: int
    bounds: tuple[tuple[int, int, int], tuple[int, int, int]]
    history: tuple[tuple[str, str, float, str], ...]
    bounds_text: str = ""
    edits: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerState:
    """A snapshot of the controller, what its views render.

    Attributes
    ----------
    version
        The checked-out version (its branch and lock at the time of the snapshot).
    revision
        The session's change counter: a view re-reads the version list only when it moved
        (selections and messages change far more often than the DAG).
    actions
        Every action of :data:`~napari_shardscope.core.proofreading.actions.ACTIONS`: enabled,
        or the reason it is not.
    edit_block
        Why the checked-out version takes no edits (``''`` when it does).
    busy, exporting
        A job that blocks edits (create, split) runs; an export runs.
    versions_selected
        The versions chosen in a version list (Checkout, Diff, Branch and Export act on them).
    merge_candidates, merge_theirs, merge_plan
        Branches that can be merged in, the one chosen, and its checked plan with the choices.
    """

    connected: bool
    version: Version | None
    revision: int
    mode: Mode
    selected: tuple[int, ...]
    picked: tuple[int, ...]
    pending_split: PendingSplit | None
    actions: Mapping[str, ActionState]
    status: Status
    last_error: str
    edit_block: str
    busy: bool
    exporting: bool
    versions_selected: tuple[str, ...]
    merge_candidates: tuple[str, ...]
    merge_theirs: str | None
    merge_plan: MergePlanState | None
    diff: VersionDiff | None
    diff_summary: str
