"""The proofreading actions as data: one row per action with its key, its words and its enablement rule.

Every place that names an action — the controller's judgement of what is possible now (and the
sentence saying why not), a button's tooltip, the key bound on the viewer, the key help — reads
the same row, so an action's words are written once (as napari's app-model keeps one record per
action). A rule returns ``""`` when the action can run, else the sentence a disabled button shows
and a refused call raises.

The rules read the controller through :class:`ActionSubject`, so this module does not import the
controller (the controller imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import LabelmapVersion
from napari_shardscope.core.proofreading.session import NO_REPOSITORY, ProofreadingSession
from napari_shardscope.core.proofreading.state import PendingSplit


class ActionSubject(Protocol):
    """What the enablement rules read of the controller."""

    session: ProofreadingSession

    @property
    def selected(self) -> tuple[int, ...]: ...

    @property
    def picked(self) -> tuple[int, ...]: ...

    @property
    def pending_split(self) -> PendingSplit | None: ...

    @property
    def versions_selected(self) -> tuple[str, ...]: ...

    @property
    def busy(self) -> bool: ...

    @property
    def exporting(self) -> bool: ...

    def target_version(self) -> str | None: ...

    def _candidates(self) -> list[str]: ...

    def _wait_text(self) -> str: ...


#: ``rule(controller, checked_out_version)``: ``""`` when the action can run, else why not.
Rule = Callable[[ActionSubject, LabelmapVersion], str]


@dataclass(frozen=True)
class ActionRow:
    """One action: what it is called, what it does, its key, when it can run, and the method doing it.

    ``handler`` names the :class:`~napari_shardscope.core.proofreading.ProofreadingController`
    method that runs the action (a button or a key calls it); ``key`` is the viewer key a panel
    binds to it (``""``: none, or bound to a view's own toggle).
    """

    name: str
    text: str
    rule: Rule
    handler: str
    key: str = ""

    @property
    def tip(self) -> str:
        """The tooltip of an enabled button: what it does, and its key."""
        return f"{self.text} ({self.key})" if self.key else self.text


def _edit(check: Rule | None = None, *, needs_editable: bool = True) -> Rule:
    """An edit of the checked-out version: refused on a version that cannot be edited and while a job runs."""

    def rule(c: ActionSubject, v: LabelmapVersion) -> str:
        if needs_editable:
            why = c.session.why_not_editable()
            if why:
                return why
        if c.busy:
            return c._wait_text()
        return check(c, v) if check is not None else ""

    return rule


def _always(_c: ActionSubject, _v: LabelmapVersion) -> str:
    return ""


def _merge(c: ActionSubject, _v: LabelmapVersion) -> str:
    return "select two or more bodies to merge (Shift-click adds one)" if len(c.selected) < 2 else ""


def _cleave(c: ActionSubject, _v: LabelmapVersion) -> str:
    return "pick supervoxels first (mode: supervoxels, then click them)" if not c.picked else ""


def _start_split(c: ActionSubject, _v: LabelmapVersion) -> str:
    return "select the body to split" if not c.selected and c.pending_split is None else ""


def _seeded(c: ActionSubject, _v: LabelmapVersion) -> str:
    return "start a split first" if c.pending_split is None else ""


def _undo(_c: ActionSubject, v: LabelmapVersion) -> str:
    return "nothing to undo in this version" if not v.can_undo else ""


def _redo(_c: ActionSubject, v: LabelmapVersion) -> str:
    return "nothing to redo in this version" if not v.can_redo else ""


def _checkout(c: ActionSubject, _v: LabelmapVersion) -> str:
    return "select one version" if len(c.versions_selected) != 1 else ""


def _diff(c: ActionSubject, _v: LabelmapVersion) -> str:
    if len(c.versions_selected) not in (1, 2):
        return "select two versions (Ctrl-click), or one to compare with the checked-out one"
    return ""


def _commit(_c: ActionSubject, v: LabelmapVersion) -> str:
    return f"version {v.version.short} is already committed" if v.version.locked else ""


def _commit_continue(c: ActionSubject, v: LabelmapVersion) -> str:
    return _commit(c, v) or (c._wait_text() if c.busy else "")


def _target_committed(c: ActionSubject) -> bool:
    target = c.target_version()
    return target is not None and c.session.resolve(target).locked


def _branch(c: ActionSubject, _v: LabelmapVersion) -> str:
    return "" if _target_committed(c) else "a new version starts after a committed one: commit first"


def _export(c: ActionSubject, _v: LabelmapVersion) -> str:
    if not _target_committed(c):
        return "commit first: an export is a snapshot of a committed version"
    return "an export is running: wait for it to finish" if c.exporting else ""


def _branch_merge(c: ActionSubject, v: LabelmapVersion) -> str:
    if not v.version.locked:
        return "commit the checked-out version first: a merge joins two committed heads"
    return "no other branch to merge" if not c._candidates() else ""


#: Every action the controller judges, in the order a snapshot lists them.
ACTION_ROWS: tuple[ActionRow, ...] = (
    ActionRow("merge", "merge the selected bodies into the first", _edit(_merge), "merge", "Shift-M"),
    ActionRow("cleave", "move the picked supervoxels of the selected body to a new body", _edit(_cleave),
              "cleave", "Shift-C"),
    ActionRow("start_split", "seed a split of the selected body (paint labels 1, 2, …)", _edit(_start_split),
              "start_split", "Shift-S"),
    ActionRow("split", "split the body by the seeds", _edit(_seeded), "split", "Shift-S"),
    ActionRow("cancel_split", "drop the seeds of the split being prepared", _edit(_seeded, needs_editable=False),
              "cancel_split"),
    ActionRow("undo", "undo the last edit of this version", _edit(_undo), "undo", "Shift-U"),
    ActionRow("redo", "redo the last undone edit", _edit(_redo), "redo", "Shift-R"),
    ActionRow("clear_selection", "clear the selection", _always, "clear_selection", "Shift-X"),
    ActionRow("checkout", "show the selected version", _checkout, "checkout"),
    ActionRow("diff", "what changed between the two selected versions (or the selected and the checked-out one)",
              _diff, "diff"),
    ActionRow("commit", "commit the checked-out version", _commit, "commit"),
    ActionRow("commit_continue", "commit the checked-out version and go on editing a new version after it, "
              "on the same branch", _commit_continue, "commit_and_continue"),
    ActionRow("branch", "a new open version after the selected committed version (or the checked-out one)",
              _branch, "branch"),
    ActionRow("plan_merge", "list the bodies and supervoxels both branches edited (conflicts)", _branch_merge,
              "plan_branch_merge"),
    ActionRow("merge_branch", "make the merge version, with the side chosen for each conflict", _branch_merge,
              "merge_branch"),
    ActionRow("export", "write the selected committed version (or the checked-out one) as a new sharded volume",
              _export, "export"),
)

#: The rows by name.
ACTION_TABLE: Mapping[str, ActionRow] = {row.name: row for row in ACTION_ROWS}

#: Every action the controller judges, with what it does (for tooltips and key help).
ACTIONS: Mapping[str, str] = {row.name: row.text for row in ACTION_ROWS}


def action_row(name: str) -> ActionRow:
    """The row of action ``name``; an unknown name is an :class:`ArgumentError` listing the known ones."""
    row = ACTION_TABLE.get(name)
    if row is None:
        raise ArgumentError(f"unknown action {name!r}; one of {sorted(ACTIONS)}")
    return row


def why_not(subject: ActionSubject, name: str) -> str:
    """Why action ``name`` cannot run now (``""``: it can)."""
    row = action_row(name)
    v = subject.session.version
    if v is None:
        return NO_REPOSITORY
    return row.rule(subject, v)
