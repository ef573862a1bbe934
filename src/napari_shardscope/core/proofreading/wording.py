"""The words a proofreader reads: what happened to which bodies, in one place for every view.

The napari panels, their notifications, a notebook and the ``shardscope`` command line all say the
same thing about the same edit, so the sentences are built here, from the records the core keeps
(mutations, conflicts, versions), and nowhere else. Rules the phrases follow:

* name the bodies and supervoxels an edit touched, never a mutation number ("merged 3 bodies into
  1042", "undid: split of 977");
* no Python argument names or internal relations ("make a child with new_version", "b is an
  ancestor of a");
* quantities carry their unit (voxels, supervoxels), counts agree with their noun.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from napari_shardscope.core.labelmap.branch_merge import BranchMergePlan, LabelConflict

# re-exported: the edit phrases are the labelmap's (its branch review words edits too)
from napari_shardscope.core.labelmap.edit_words import SHOWN_IDS as SHOWN_IDS
from napari_shardscope.core.labelmap.edit_words import describe_edit as describe_edit
from napari_shardscope.core.labelmap.edit_words import edit_phrase as edit_phrase
from napari_shardscope.core.labelmap.edit_words import id_list as id_list
from napari_shardscope.core.labelmap.edit_words import plural as plural
from napari_shardscope.core.labelmap.mutations import Mutation

#: The sides a conflict of a branch merge can keep, as a proofreader reads them.
SIDE_WORDS: Mapping[str, str] = {"ours": "keep mine", "theirs": "keep theirs", "both": "keep both"}


def describe_edits(count: int, bodies: Sequence[int]) -> str:
    """``"no edits"``, ``"1 edit (bodies 10 and 30)"``: a side of a diff."""
    if not count:
        return "no edits"
    return f"{plural(count, 'edit')} ({'body' if len(bodies) == 1 else 'bodies'} {id_list(bodies)})"


def describe_undo(m: Mutation, original: Mutation | None) -> str:
    """``"undid: merge of 12 into 1042"`` (``m`` the undo or redo record, ``original`` the edit it undid)."""
    verb = "undid" if m.operation == "undo" else "redid"
    return f"{verb}: {edit_phrase(original) if original is not None else edit_phrase(m)}"


def describe_relation(relation: str, a: str, b: str, base: str) -> str:
    """A diff's relation between versions ``a`` and ``b`` (short names) in words."""
    if relation == "same":
        return f"{a} and {b} are the same version"
    if relation == "a is an ancestor of b":
        return f"{b} came after {a} (it holds all of {a}'s edits)"
    if relation == "b is an ancestor of a":
        return f"{a} came after {b} (it holds all of {b}'s edits)"
    return f"{a} and {b} went separate ways after {base}"


def describe_bounds(lo: Sequence[int], hi: Sequence[int], block: Sequence[int] | None = None) -> str:
    """Scale-0 voxel bounds ``[lo, hi)`` as ``"z 0–63, y 64–191, x 0–127 voxels"``.

    ``block``: the bounds are rounded out to whole blocks of that shape, and the text says so.
    """
    axes = ", ".join(f"{n} {int(a)}–{int(b) - 1}" for n, a, b in zip("zyx", lo, hi, strict=True))
    rounded = f" (rounded out to {'×'.join(map(str, block))}-voxel blocks)" if block else ""
    return f"{axes} voxels{rounded}"


@dataclass(frozen=True)
class ConflictWords:
    """One conflict of a branch merge as a proofreader reads it.

    Attributes
    ----------
    key
        The conflict's key (``"body:12"``), what a choice is recorded under.
    label
        ``"body 12"`` or ``"supervoxel 45"``.
    mine, theirs
        What each side did to it, in plain words (``"merge of 34 into 12"``; several edits joined
        by ``"; then "``).
    """

    key: str
    label: str
    mine: str
    theirs: str

    def sentence(self, theirs_name: str) -> str:
        return f"{self.label}: you did {self.mine}; {theirs_name} did {self.theirs}"


def describe_conflicts(plan: BranchMergePlan) -> list[ConflictWords]:
    """Every conflict of ``plan`` with both sides' edits of it in words (mutations looked up in the plan)."""
    records = {m.mutation_id: m for m in (*plan.ours_mutations, *plan.theirs_mutations,
                                          *plan.ours_removed, *plan.theirs_removed)}
    removed = {m.mutation_id for m in (*plan.ours_removed, *plan.theirs_removed)}

    def side(ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            m = records.get(i)
            if m is None:
                out.append("an edit")
            else:
                out.append(("took back the " if i in removed else "") + edit_phrase(m))
        return "; then ".join(out) or "nothing"

    return [ConflictWords(c.key, f"{c.kind} {c.label}", side(c.ours), side(c.theirs)) for c in plan.conflicts]


def conflict_body(conflict: LabelConflict, plan: BranchMergePlan) -> int | None:
    """The body to show for a conflict: the body itself, or a body an edit of the supervoxel touched."""
    if conflict.kind == "body":
        return conflict.label
    for m in (*plan.ours_mutations, *plan.theirs_mutations):
        if conflict.label in m.supervoxels and m.bodies:
            return int(m.bodies[0])
    return None


def describe_branch_merge_plan(plan: BranchMergePlan, ours_name: str, theirs_name: str) -> str:
    """``"merging alt into main: 3 edits of theirs, 1 conflict (body 12) — choose a side for each"``."""
    text = (f"merging {theirs_name} into {ours_name}: {plural(len(plan.theirs_mutations), 'edit')} of theirs, "
            f"{plural(len(plan.conflicts), 'conflict')}")
    if plan.conflicts:
        labels = id_list([c.label for c in plan.conflicts])
        text += f" ({labels}) — choose keep mine, keep theirs or keep both for each, then Merge"
    return text


def describe_branch_merge(theirs_name: str, ours_name: str, applied: int, reverted: int, dropped: int,
                          bodies: Sequence[int], new_version: str) -> str:
    """The sentence after a branch merge: what came in, what went out, where editing goes on."""
    parts = [f"merged {theirs_name} into {ours_name}: {plural(applied, 'edit')} of theirs applied"]
    if reverted:
        parts.append(f"{plural(reverted, 'edit')} of mine taken back")
    if dropped:
        parts.append(f"{plural(dropped, 'edit')} of theirs left out")
    where = f"bodies {id_list(bodies)}" if bodies else "no bodies"
    return ", ".join(parts) + f" ({where}); new version {new_version} is open: check it, then commit"


def describe_commit(short: str, message: str, child_short: str | None = None, branch: str | None = None) -> str:
    """``"committed 1a2b3c4d ("fixed 12"); now editing 5e6f7a8b on main"``."""
    text = f"committed {short} (\"{message}\")"
    if child_short is not None:
        text += f"; now editing {child_short} on {branch}"
    return text


def committed_block(short: str, branch: str) -> str:
    """Why a committed version takes no edits, and the one click that goes on."""
    return (f"version {short} on {branch} is committed (read-only): to go on editing, start a new version "
            f"after it (Versions panel: New version) or check out the branch's open version")
