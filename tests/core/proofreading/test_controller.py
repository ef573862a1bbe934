"""The proofreading controller without a viewer: what a notebook, a script and the panels all drive.

Every edit is checked on the store through a fresh repository handle (what another process would
read), never through the controller's own objects; messages and disabled reasons are checked where a
user would read them (``state.status``, ``state.actions``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.errors import ArgumentError, ConflictError
from napari_shardscope.core.labelmap import LabelmapVersion, create_labelmap, open_labelmap
from napari_shardscope.core.proofreading import (
    ACTIONS,
    ControllerState,
    ProofreadingController,
    ProofreadingSession,
)
from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from tests.core.labelmap.volumes import write_precomputed

# sv 10: two blobs joined by a thin neck along x; sv 30 and 40 touch one blob each; sv 5 around
BLOB_A, BLOB_B, NECK = (4, 8, 5), (4, 8, 25), (4, 8, 16)
NEXT_TO_A, NEXT_TO_B = (4, 14, 5), (4, 14, 25)  # in sv 30, in sv 40


def dumbbell() -> np.ndarray:
    vol = np.full((8, 16, 32), 5, dtype=np.uint64)
    vol[2:6, 3:13, 2:12] = 10
    vol[3:5, 7:9, 12:20] = 10
    vol[2:6, 3:13, 20:30] = 10
    vol[2:6, 13:16, 2:12] = 30
    vol[2:6, 13:16, 20:30] = 40
    return vol


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dumbbell") / "seg"
    write_precomputed(path, dumbbell(), ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 8, 4), sharded=True)
    return path


def make_proofreading_repo(path: Path, base: Path, engine: str | None = None) -> Path:
    """A repository at ``path`` with one labelmap over the dumbbell; every supervoxel is its own body."""
    repo = create_repository(path, engine=engine)
    try:
        create_labelmap(repo, "seg", base, block=8)
    finally:
        repo.close()
    return path


@pytest.fixture
def repo_path(base: Path, tmp_path: Path) -> Path:
    return make_proofreading_repo(tmp_path / "proofread.repo", base)


@pytest.fixture
def c(repo_path: Path) -> Iterator[ProofreadingController]:
    controller = ProofreadingController()
    controller.connect(repo_path)
    yield controller
    controller.disconnect()


@contextmanager
def fresh(repo_path: Path, ref: str = "main") -> Iterator[LabelmapVersion]:
    """The labelmap at ``ref`` through a new repository handle: what the store holds."""
    repo = open_repository(repo_path)
    try:
        yield open_labelmap(repo, "seg").at(ref)
    finally:
        repo.close()


@contextmanager
def fresh_repo(repo_path: Path) -> Iterator[Repository]:
    repo = open_repository(repo_path)
    try:
        yield repo
    finally:
        repo.close()


def test_create_connects_and_reports(base: Path, tmp_path: Path) -> None:
    c = ProofreadingController()
    states: list[ControllerState] = []
    c.subscribe(states.append)
    assert not c.state.connected and not c.state.actions["merge"].enabled
    assert "repository" in c.state.actions["merge"].reason
    with pytest.raises(ArgumentError, match="directory"):
        c.create("", str(base))
    assert "directory" in c.last_error and c.state.status.level == "error"
    v = c.create(tmp_path / "new.repo", str(base), agglomeration={30: 10, 40: 10})
    assert c.state.connected and v.version.branch == "main" and not c.busy
    assert c.state.status.text.startswith("created") and c.last_error == ""
    assert states and states[-1] == c.state  # listeners got the latest snapshot
    with fresh(tmp_path / "new.repo") as stored:
        assert stored.supervoxels(10) == [10, 30, 40]
    c.disconnect()
    assert not c.state.connected and c.version is None


def test_selection_merge_undo_redo(c: ProofreadingController, repo_path: Path) -> None:
    assert c.pick_at(BLOB_A) == 10 and c.selected == (10,)
    assert c.state.actions["merge"] == c.action("merge") and not c.action("merge").enabled
    assert "two or more" in c.action("merge").reason
    c.add_to_selection(30)
    c.add_to_selection(30)  # kept once
    c.select(40, add=True)  # a shift-click toggles
    assert c.selected == (10, 30, 40)
    c.select(40, add=True)
    assert c.selected == (10, 30)
    c.select(0, add=True)  # a shift-click on background keeps the selection
    assert c.selected == (10, 30)
    with pytest.raises(ArgumentError, match="does not exist"):
        c.select(12345)
    assert "12345" in c.state.status.text and c.selected == (10, 30)
    assert c.action("merge").enabled
    c.merge()
    assert c.selected == (10,) and "merged body 30 into 10" in c.state.status.text and c.last_error == ""
    with fresh(repo_path) as stored:
        assert stored.body_of(30) == 10 and not stored.exists(30)
        assert stored.body_at(NEXT_TO_A) == 10
    info = c.body_info(10)
    assert info.supervoxels == 2 and info.history[-1][0] == "merge"
    assert c.action("undo").enabled and not c.action("redo").enabled
    c.undo()
    with fresh(repo_path) as stored:
        assert stored.exists(30) and stored.body_of(30) == 30
    assert c.action("redo").enabled
    c.redo()
    with fresh(repo_path) as stored:
        assert stored.body_of(30) == 10
    c.select(0)  # a click on background clears
    assert c.selected == ()


def test_cleave_picked_supervoxels(c: ProofreadingController, repo_path: Path) -> None:
    c.select(10)
    c.add_to_selection(30)
    c.merge()
    c.set_mode("supervoxels")
    with pytest.raises(ArgumentError, match="mode must be"):
        c.set_mode("voxels")
    assert c.pick_at(NEXT_TO_A) == 30 and c.picked == (30,)
    with pytest.raises(ArgumentError, match="not in body 10"):
        c.pick_supervoxel(40)
    assert c.action("cleave").enabled
    new = c.cleave()
    assert c.selected == (10, new) and c.picked == ()
    with fresh(repo_path) as stored:
        assert stored.body_of(30) == new and stored.supervoxels(new) == [30] and stored.supervoxels(10) == [10]


def test_split_with_seeds_and_painted_seeds(c: ProofreadingController, repo_path: Path) -> None:
    assert not c.action("start_split").enabled and "select the body" in c.action("start_split").reason
    c.select(10)
    pending = c.start_split()
    assert pending.body == 10 and pending.version == c.version.uuid  # type: ignore[union-attr]
    assert c.start_split() is pending  # started once
    assert not c.action("split").enabled or len(pending.seeds) < 2
    with pytest.raises(ArgumentError, match="at least two seed labels"):
        c.split()
    c.add_seeds(1, [BLOB_A, (4, 14, 5)])  # the second voxel is in sv 30, another body: left out
    assert [tuple(p) for p in c.pending_split.seeds[1]] == [BLOB_A]  # type: ignore[union-attr]
    # painted seeds over the split's region replace them: label 2 on blob B, label 1 spilling onto sv 5
    box = pending.box
    painted = np.zeros(box.shape, dtype=np.uint8)
    painted[tuple(np.subtract(BLOB_A, box.lo))] = 1
    painted[tuple(np.subtract(BLOB_B, box.lo))] = 2
    painted[0, 0, 0] = 1  # background (body 5): not a seed of this split
    seeds = c.set_painted_seeds(painted).seeds
    assert {g: [tuple(p) for p in pts] for g, pts in seeds.items()} == {1: [BLOB_A], 2: [BLOB_B]}
    with fresh(repo_path) as stored:
        size = stored.size(10)
    out = c.split()
    parts = sorted(set(out.bodies.values()))
    assert c.pending_split is None and c.selected == tuple(parts) and not c.busy
    assert "split body 10 into" in c.state.status.text
    with fresh(repo_path) as stored:
        a, b = stored.body_at(BLOB_A), stored.body_at(BLOB_B)
        assert a != b and {a, b} == set(parts) and a == 10
        assert stored.size(a) + stored.size(b) == size


def test_split_job_runs_in_a_worker_thread(repo_path: Path) -> None:
    """What the panel does: ``run`` off the controller's thread, edits reach listeners through ``dispatch``."""
    queued: list[Callable[[], None]] = []
    c = ProofreadingController(ProofreadingSession(dispatch=queued.append))
    c.connect(repo_path)
    c.select(10)
    c.start_split()
    c.add_seeds(1, [BLOB_A])
    c.add_seeds(2, [BLOB_B])
    job = c.split_job()
    assert c.busy and not c.action("merge").enabled and "wait" in c.action("merge").reason
    with pytest.raises(ArgumentError, match="wait"):
        c.split_job()
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(job.run()))
    worker.start()
    worker.join(60)
    assert result and queued  # the edit's news waits for the controller's thread
    revision = c.state.revision
    for call in queued:
        call()
    assert c.state.revision > revision
    job.finish(result[0])
    job.close()  # a GUI closes the job when its worker ends, whatever happened: harmless after finish
    assert not c.busy and c.pending_split is None and len(c.selected) == 2
    with fresh(repo_path) as stored:
        assert stored.body_at(BLOB_A) != stored.body_at(BLOB_B)
    c.disconnect()


def test_commit_disables_edits_with_the_reason(c: ProofreadingController, repo_path: Path) -> None:
    c.select(10)
    c.add_to_selection(30)
    assert c.action("merge").enabled and not c.action("branch").enabled
    with pytest.raises(ArgumentError, match="commit message"):
        c.commit("  ")
    done = c.commit("nothing yet")
    with fresh_repo(repo_path) as r:
        assert r.version(done.uuid).locked and r.version(done.uuid).message == "nothing yet"
    for name in ("merge", "cleave", "start_split", "undo", "commit"):
        state = c.state.actions[name]
        assert not state.enabled and "committed" in state.reason, name
    assert "branch" in c.state.actions["merge"].reason and c.state.edit_block == c.state.actions["merge"].reason
    assert c.action("branch").enabled and c.action("export").enabled
    with pytest.raises(ArgumentError, match="committed") as refused:
        c.merge()
    assert str(refused.value) == c.last_error == c.state.actions["merge"].reason
    with fresh(repo_path, done.uuid) as stored:
        assert stored.mutations() == [] and stored.exists(30)


def test_branch_and_checkout_cancel_pending_seeds(c: ProofreadingController, repo_path: Path) -> None:
    root = c.commit("base")
    alt = c.branch("alt")
    with fresh_repo(repo_path) as r:
        assert r.version(alt.uuid).branch == "alt" and not r.version(alt.uuid).locked
        assert r.version(alt.uuid).parents == (root.uuid,)
    assert c.version.uuid == alt.uuid and c.action("merge").reason != c.action("commit").reason  # type: ignore[union-attr]
    c.select(10)
    c.start_split()
    c.add_seeds(1, [BLOB_A])
    c.checkout(root.uuid)  # another version: the seeds were painted on alt
    assert c.pending_split is None
    assert "checked out" in c.state.status.text and "split cancelled" in c.state.status.text
    c.checkout("alt")
    c.start_split()
    c.session.checkout(root.uuid)  # a checkout made on the session directly (a notebook): the controller follows
    assert c.pending_split is None and c.state.status.level == "warning"
    assert "split cancelled" in c.state.status.text
    c.checkout("alt")
    c.start_split()
    c.select_versions(root.uuid)
    other = c.branch("other")  # from the selected committed version, checked out: the split is cancelled
    assert c.pending_split is None and "split cancelled" in c.state.status.text
    with fresh_repo(repo_path) as r:
        assert r.version(other.uuid).parents == (root.uuid,) and r.version(other.uuid).branch == "other"
    # the version list: checkout and diff act on the selection
    c.select_versions(root.uuid)
    assert c.action("checkout").enabled
    c.checkout()
    assert c.version.uuid == root.uuid  # type: ignore[union-attr]
    c.checkout("alt")
    c.select(10)
    c.add_to_selection(30)
    c.merge()
    c.select_versions(root.uuid, "alt")
    d = c.diff()
    assert d.relation == "a is an ancestor of b" and [e.mutation.operation for e in d.only_b] == ["merge"]
    assert "1 edit (bodies 10 and 30)" in c.state.diff_summary and "came after" in c.state.diff_summary
    c.select_versions()
    assert not c.action("checkout").enabled and c.action("checkout").reason == "select one version"


def conflicting_branches(c: ProofreadingController) -> str:
    """main and alt both edit bodies 10 and 30 after a common base; main is checked out (committed)."""
    root = c.commit("base")
    c.branch("alt")
    c.select(30)
    c.add_to_selection(10)
    c.merge()  # theirs: 10 into 30
    c.commit("alt: 10 into 30")
    c.branch(None, root.uuid)  # main continues from the base
    c.select(10)
    c.add_to_selection(30)
    c.merge()  # ours: 30 into 10
    c.commit("main: 30 into 10")
    return root.uuid


def test_merge_plan_needs_a_side_per_conflict(c: ProofreadingController, repo_path: Path) -> None:
    conflicting_branches(c)
    assert c.state.merge_candidates == ("alt",) and c.state.merge_theirs == "alt"
    assert c.action("merge_branch").enabled
    with fresh_repo(repo_path) as r:
        count = len(r.versions())
    # Merge without Check: the conflicts are listed and the merge refused, nothing written
    with pytest.raises(ArgumentError, match="conflict"):
        c.merge_branch()
    plan = c.merge_plan
    assert plan is not None and plan.theirs == "alt" and plan.unresolved == tuple(plan.choices)
    assert {"body:10", "body:30"} <= set(plan.choices)
    with pytest.raises(ConflictError, match="edited on both sides"):
        c.merge_branch()  # listed but no side chosen
    with fresh_repo(repo_path) as r:
        assert len(r.versions()) == count
    with pytest.raises(ArgumentError, match="no conflict"):
        c.choose("body:999", "ours")
    for key in plan.choices:
        c.choose(key, "theirs")
    assert c.merge_plan.unresolved == ()  # type: ignore[union-attr]
    result = c.merge_branch()
    assert c.version.uuid == result.version.uuid and c.merge_plan is None  # type: ignore[union-attr]
    assert c.action("merge").enabled or "two or more" in c.action("merge").reason  # open: edits allowed
    with fresh_repo(repo_path) as r:
        assert r.version(result.version.uuid).parents[1] == r.head("alt").uuid
    with fresh(repo_path, result.version.uuid) as stored:
        assert stored.body_of(10) == 30 and stored.body_of(30) == 30  # theirs kept, ours reverted


def test_merge_choices_belong_to_the_heads_they_were_made_for(c: ProofreadingController, repo_path: Path) -> None:
    root = conflicting_branches(c)
    c.plan_branch_merge("alt")
    for key in c.merge_plan.choices:  # type: ignore[union-attr]
        c.choose(key, "theirs")
    # alt moves on: the plan was for its old head
    main = c.version.uuid  # type: ignore[union-attr]
    c.checkout("alt")
    c.branch()
    c.select(40)
    c.add_to_selection(5)
    c.merge()
    c.commit("alt: more")
    c.checkout(main)
    assert c.merge_plan is None
    c.plan_branch_merge("alt")
    c.set_merge_theirs("alt")
    assert c.merge_plan is not None
    c.branch("alt2", root)
    c.commit("alt2: nothing")
    c.checkout(main)
    c.plan_branch_merge("alt")
    c.set_merge_theirs("alt2")  # another branch chosen: alt's conflicts and choices are dropped
    assert c.merge_plan is None and c.state.merge_theirs == "alt2"


def test_export_refuses_open_versions_then_writes(c: ProofreadingController, repo_path: Path,
                                                  tmp_path: Path) -> None:
    import tensorstore as ts

    c.select(10)
    c.add_to_selection(30)
    c.merge()
    assert not c.action("export").enabled and "commit first" in c.action("export").reason
    with pytest.raises(ArgumentError, match="is open"):
        c.export(str(tmp_path / "open"))
    assert not (tmp_path / "open").exists() and "is open" in c.last_error
    done = c.commit("merged")
    report = c.export()
    dest = c.default_export_dest(done.uuid)
    assert report.dest == str(dest) and c.last_export is report and not c.exporting
    assert dest.parent == repo_path.parent and done.short in c.state.status.text
    out = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(dest)}}).result()
    with fresh(repo_path, done.uuid) as stored:
        np.testing.assert_array_equal(out[..., 0].read().result().T, stored.read_bodies())
    with pytest.raises(ArgumentError, match="format"):
        c.export(fmt="tiff")  # type: ignore[arg-type]


def test_listeners_hear_once_per_action_and_every_action_is_judged(c: ProofreadingController) -> None:
    heard: list[ControllerState] = []
    unsubscribe = c.subscribe(heard.append)
    c.select(10)
    assert len(heard) == 1 and heard[0].selected == (10,)
    c.select(10)  # no change: nothing to hear
    assert len(heard) == 1
    assert set(c.state.actions) == set(ACTIONS)
    with pytest.raises(ArgumentError, match="unknown action"):
        c.action("paint")
    assert c.attempt(c.merge) is None and "two or more" in c.last_error  # a button: a message, no traceback
    unsubscribe()
    c.clear_selection()
    assert heard[-1].selected == (10,)
