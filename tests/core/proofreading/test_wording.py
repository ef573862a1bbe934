"""The words a proofreader reads: every message names the bodies an edit touched, in plain words.

The phrases are checked where a user reads them — the controller's status after each action, a
branch merge's conflicts, a body's bounds — on a real repository, and the phrase builders alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.wording import (
    SIDE_WORDS,
    describe_bounds,
    describe_conflicts,
    describe_edit,
    describe_undo,
    edit_phrase,
    id_list,
    plural,
)
from tests.core.proofreading import test_controller as shared
from tests.core.proofreading.test_controller import fresh, fresh_repo

base, repo_path, c = shared.base, shared.repo_path, shared.c  # the controller tests' dumbbell repository

#: What no message may contain: mutation numbers, Python names, internal relations, unit-less bounds.
JARGON = re.compile(r"mutation \d|new_version|is an ancestor|\(blocks\)|\(s\)|\bours\b")


def words_of(c: ProofreadingController) -> str:
    text = c.state.status.text
    assert not JARGON.search(text), text
    return text


def test_phrase_builders() -> None:
    assert plural(1, "body", "bodies") == "1 body" and plural(3, "body", "bodies") == "3 bodies"
    assert plural(12, "supervoxel") == "12 supervoxels"
    assert id_list([12]) == "12" and id_list([12, 34, 56]) == "12, 34 and 56"
    assert id_list(range(10), limit=3) == "0, 1, 2 and 7 more" and id_list([]) == "none"
    merge = Mutation(3, "merge", {"target": 1042, "others": [12, 34, 56]}, "ann", 0.0, bodies=(1042, 12, 34, 56))
    assert describe_edit(merge) == "merged 3 bodies (12, 34 and 56) into 1042"
    assert edit_phrase(merge) == "merge of 12, 34 and 56 into 1042"
    cleave = Mutation(4, "cleave", {"body": 1042, "supervoxels": list(range(12)), "new_body": 5003}, "ann", 0.0)
    assert describe_edit(cleave) == "cleaved 12 supervoxels off 1042 into new body 5003"
    split = Mutation(5, "split-body", {"body": 977, "groups": {"1": 977, "2": 5004}}, "ann", 0.0)
    assert describe_edit(split) == "split body 977 into 977 and 5004"
    undo = Mutation(6, "undo", {"mutation": 5, "inverts": 5}, "ann", 0.0, target=5)
    assert describe_undo(undo, split) == "undid: split of 977 into 977 and 5004"
    assert describe_bounds((0, 64, 0), (64, 192, 128), (64, 64, 64)) == (
        "z 0–63, y 64–191, x 0–127 voxels (rounded out to 64×64×64-voxel blocks)")
    assert SIDE_WORDS == {"ours": "keep mine", "theirs": "keep theirs", "both": "keep both"}


def test_every_message_names_the_bodies(c: ProofreadingController) -> None:
    c.select(10)
    c.add_to_selection(30)
    c.add_to_selection(40)
    c.merge()
    assert words_of(c) == "merged 2 bodies (30 and 40) into 10"
    c.undo()
    assert words_of(c) == "undid: merge of 30 and 40 into 10"
    c.redo()
    assert words_of(c) == "redid: merge of 30 and 40 into 10"
    c.undo()
    c.set_mode("supervoxels")
    c.select(10)
    c.set_mode("bodies")
    c.select(30)
    c.add_to_selection(10)
    c.merge()
    c.set_mode("supervoxels")
    c.pick_supervoxel(10)
    new = c.cleave()
    assert words_of(c) == f"cleaved 1 supervoxel off 30 into new body {new}"
    c.undo()
    assert words_of(c) == f"undid: cleave of 1 supervoxel off 30 into {new}"
    info = c.body_info(30)
    assert info.bounds_text.endswith("voxels (rounded out to 8×8×8-voxel blocks)") and info.bounds_text.startswith("z ")
    assert info.edits[-3:] == ("merge of 10 into 30", f"cleave of 1 supervoxel off 30 into {new}",
                               f"undid: cleave of 1 supervoxel off 30 into {new}")
    done = c.commit("checked")
    assert words_of(c) == f'committed {done.short} ("checked")'
    assert "start a new version after it" in c.state.edit_block and "new_version" not in c.state.edit_block


def test_commit_and_continue_leaves_an_open_child_on_the_same_branch(
        c: ProofreadingController, repo_path: Path) -> None:
    c.select(10)
    c.add_to_selection(30)
    c.merge()
    before = c.version.version  # type: ignore[union-attr]
    child = c.commit_and_continue("merged 30 into 10")
    assert words_of(c) == f'committed {before.short} ("merged 30 into 10"); now editing {child.short} on main'
    assert c.version.uuid == child.uuid and c.state.edit_block == ""  # type: ignore[union-attr]
    with fresh_repo(repo_path) as r:
        assert r.version(before.uuid).locked and not r.version(child.uuid).locked
        assert r.version(child.uuid).parents == (before.uuid,) and r.version(child.uuid).branch == "main"
        assert r.head("main").uuid == child.uuid
    c.select(10)
    c.add_to_selection(40)
    c.merge()  # editing goes on at once
    with fresh(repo_path, child.uuid) as stored:
        assert stored.body_of(40) == 10
    with pytest.raises(Exception, match="write a commit message"):
        c.commit_and_continue("  ")


def test_branch_merge_conflicts_in_plain_words_and_keep_both(
        c: ProofreadingController, repo_path: Path) -> None:
    root = c.commit("base")
    c.branch("alt")
    c.select(10)
    c.add_to_selection(40)
    c.merge()  # theirs: 40 into 10
    c.commit("alt: 40 into 10")
    c.branch(None, root.uuid)
    c.select(10)
    c.add_to_selection(30)
    c.merge()  # mine: 30 into 10
    c.commit("main: 30 into 10")
    plan = c.plan_branch_merge("alt")
    text = words_of(c)
    assert text.startswith("merging alt into main") and "1 conflict (10)" in text and "keep both" in text
    (conflict,) = describe_conflicts(plan)
    assert (conflict.label, conflict.mine, conflict.theirs) == ("body 10", "merge of 30 into 10", "merge of 40 into 10")
    assert conflict.sentence("alt") == "body 10: you did merge of 30 into 10; alt did merge of 40 into 10"
    c.choose("body:10", "both")
    result = c.merge_branch()
    text = c.state.status.text
    assert text.startswith("merged alt into main") and "1 edit of theirs applied" in text and "bodies 10 and 40" in text
    with fresh(repo_path, result.version.uuid) as stored:
        assert stored.body_of(30) == 10 and stored.body_of(40) == 10  # both edits kept


def test_keep_both_is_refused_when_their_edits_no_longer_fit(c: ProofreadingController, repo_path: Path) -> None:
    root = c.commit("base")
    c.branch("alt")
    c.select(40)
    c.add_to_selection(30)
    c.merge()  # theirs: 30 into 40
    c.commit("alt: 30 into 40")
    c.branch(None, root.uuid)
    c.select(10)
    c.add_to_selection(30)
    c.merge()  # mine: 30 into 10 — body 30 is gone here
    c.commit("main: 30 into 10")
    c.plan_branch_merge("alt")
    for key in c.merge_plan.choices:  # type: ignore[union-attr]
        c.choose(key, "both")
    with fresh_repo(repo_path) as r:
        count = len(r.versions())
    with pytest.raises(Exception, match="do not replay") as refused:
        c.merge_branch()
    assert c.last_error == str(refused.value)
    with fresh_repo(repo_path) as r:
        assert len(r.versions()) == count  # nothing written
    for key in c.merge_plan.choices:  # type: ignore[union-attr]
        c.choose(key, "ours")
    c.merge_branch()
    with fresh(repo_path, c.version.uuid) as stored:  # type: ignore[union-attr]
        assert stored.body_of(30) == 10 and stored.body_of(40) == 40


_JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                     max_leaves=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@seed(20261126)
@given(st.sampled_from(["merge", "cleave", "split-body", "split-supervoxel", "merge-branches", "undo", "redo"]),
       st.dictionaries(st.sampled_from(["target", "others", "body", "supervoxels", "new_body", "groups", "voxels",
                                        "supervoxel", "split", "remainder", "applied", "mutation"]), _JUNK))
def test_words_of_a_hostile_mutation_never_raise(operation: str, args: dict[str, object]) -> None:
    """A mutation fetched from a remote carries whatever arguments its writer put there: the words for it
    are built (leaving out what is not an id), never an exception in the panel or the CLI."""
    m = Mutation(1, operation, args, "someone", 0.0, bodies=(5,))
    assert describe_edit(m) and edit_phrase(m)


def test_numpy_ids_are_named() -> None:
    import numpy as np

    m = Mutation(1, "merge", {"target": 1042, "others": list(np.array([12, 34], dtype=np.uint64))}, "a", 0.0)
    assert describe_edit(m) == "merged 2 bodies (12 and 34) into 1042"
