"""Races between the controller's thread and its background work, each forced deterministically.

A GUI runs a job's ``run`` (a split, a branch merge) and the mesh loads in worker threads while its
own thread goes on handling clicks. Each test here puts one click *between* the moment the work was
planned on the GUI thread and the moment the worker acts (or finishes), on both file engines, and
checks the outcome on the store and in what the controller shows — the interleavings that used to
merge into the wrong version, crash a job on a closed repository, leave a selection of bodies the
shown version lacks, or show a stale body surface for good.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.proofreading import ProofreadingController, ProofreadingSession
from napari_shardscope.core.proofreading.meshes import BodySurface, SurfaceFollower
from napari_shardscope.core.versioned import open_repository
from tests.core.labelmap.volumes import write_precomputed
from tests.core.proofreading.test_controller import BLOB_A, BLOB_B, dumbbell, make_proofreading_repo

T = TypeVar("T")
ENGINES = ["lmdb", "sqlite"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dumbbell") / "seg"
    write_precomputed(path, dumbbell(), ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 8, 4), sharded=True)
    return path


@pytest.fixture(params=ENGINES)
def repo_path(request: pytest.FixtureRequest, base: Path, tmp_path: Path) -> Path:
    return make_proofreading_repo(tmp_path / "proofread.repo", base, request.param)


@pytest.fixture
def c(repo_path: Path) -> Iterator[ProofreadingController]:
    queued: list[Callable[[], None]] = []
    controller = ProofreadingController(ProofreadingSession(dispatch=queued.append))
    controller.connect(repo_path)
    controller.queued = queued  # type: ignore[attr-defined]
    yield controller
    controller.disconnect()


def deliver(c: ProofreadingController) -> None:
    """Run the session news the worker queued for the controller's thread (what Qt's queue does)."""
    queued: list[Callable[[], None]] = c.queued  # type: ignore[attr-defined]
    while queued:
        queued.pop(0)()


def in_worker(work: Callable[[], T]) -> T:
    """``work()`` in another thread, as a GUI's worker runs a job; its result or its exception."""
    out: list[T] = []
    err: list[BaseException] = []

    def target() -> None:
        try:
            out.append(work())
        except BaseException as exc:  # handed back to the test's thread
            err.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join(120)
    assert not t.is_alive()
    if err:
        raise err[0]
    return out[0]


@pytest.mark.parametrize("meanwhile", ["checkout", "theirs moves"])
def test_what_happens_while_a_branch_merge_waits_does_not_change_what_is_merged(
        c: ProofreadingController, repo_path: Path, meanwhile: str) -> None:
    """The merge job merges the two heads its plan was made for, whatever is checked out when it runs
    and wherever ``theirs`` has moved (here to a version that would conflict)."""
    root = c.commit("base")
    c.branch("alt")
    c.select(30)
    c.add_to_selection(40)
    c.merge()
    alt = c.commit("alt: 40 into 30")
    c.branch("other", root.uuid)
    other = c.commit("other: nothing")
    c.branch(None, root.uuid)  # main goes on from the base
    c.select(10)
    c.add_to_selection(5)
    c.merge()
    main = c.commit("main: 5 into 10")
    job = c.merge_branch_job("alt")  # planned on main: no conflict
    if meanwhile == "checkout":
        c.checkout(other.uuid)  # a click handled while the worker has not started yet
    else:  # another process commits on alt: 10 into 30 there conflicts with main's 5 into 10
        with open_repository(repo_path) as repo:
            child = repo.new_version(alt.uuid)
            open_labelmap(repo, "seg").at(child.uuid).merge(30, [10])
            repo.commit(child.uuid, "alt: 10 into 30")
    result = in_worker(lambda: job.run())
    deliver(c)
    job.finish(result)
    assert result.version.parents == (main.uuid, alt.uuid)
    assert c.version is not None and c.version.uuid == result.version.uuid
    with open_repository(repo_path) as repo:
        assert repo.version(result.version.uuid).parents == (main.uuid, alt.uuid)
        assert repo.version(result.version.uuid).branch == "main"
        assert [v.uuid for v in repo.children(other.uuid)] == []  # nothing was merged into other
        assert repo.verify() == []
    assert c.version.body_of(40) == 30 and c.version.body_of(5) == 10  # both sides' edits


def test_opening_another_repository_waits_for_a_running_split(c: ProofreadingController, repo_path: Path) -> None:
    """Connect and disconnect close the repository a split job writes to: refused while the job runs."""
    c.select(10)
    c.start_split()
    c.add_seeds(1, [BLOB_A])
    c.add_seeds(2, [BLOB_B])
    job = c.split_job()
    with pytest.raises(ArgumentError, match="wait: split of body 10"):
        c.disconnect()
    with pytest.raises(ArgumentError, match="wait: split of body 10"):
        c.connect(repo_path)
    assert "wait" in c.last_error
    out = in_worker(lambda: job.run())  # the repository is still open under it
    deliver(c)
    job.finish(out)
    assert not c.busy and len(set(out.bodies.values())) == 2
    c.disconnect()
    assert c.version is None
    c.connect(repo_path)
    assert c.version is not None and c.version.body_at(BLOB_A) != c.version.body_at(BLOB_B)


def test_a_split_finishing_after_a_checkout_leaves_the_new_selection_alone(c: ProofreadingController,
                                                                           repo_path: Path) -> None:
    """A split's parts are selected only while its version is shown: they need not exist elsewhere."""
    root = c.commit("base")
    alt = c.branch("alt")
    c.select(10)
    c.start_split()
    c.add_seeds(1, [BLOB_A])
    c.add_seeds(2, [BLOB_B])
    job = c.split_job()
    c.checkout(root.uuid)  # while the split runs
    c.select(30)
    out = in_worker(lambda: job.run())
    deliver(c)
    job.finish(out)
    parts = sorted(set(out.bodies.values()))
    assert c.version is not None and c.version.uuid == root.uuid
    assert c.selected == (30,) and all(c.version.exists(b) for b in c.selected)
    assert f"split body 10 into {parts[0]} and {parts[1]}" in c.state.status.text
    assert alt.short in c.state.status.text  # says where the split went
    with open_repository(repo_path) as repo:
        assert len(repo.versions()) == 2 and repo.verify() == []
    c.checkout(alt.uuid)
    assert c.version.body_at(BLOB_A) != c.version.body_at(BLOB_B)


def test_an_edit_between_planning_and_loading_a_surface_is_never_shown_for_good(c: ProofreadingController) -> None:
    """A surface is labelled with the supervoxels it was meshed from, not those of the plan.

    The mesh loads in a worker; a merge and its undo on the GUI thread meanwhile used to leave the
    merged surface labelled with the unmerged key, so the next plan found nothing to reload.
    """
    c.select(10)
    f = SurfaceFollower(c)
    plan = f.plan()
    assert [b for b, _ in plan.load] == [10]
    c.add_to_selection(30)
    c.merge()  # 30 into 10, while the load has not run yet
    surfaces = in_worker(lambda: f.load(plan))
    c.undo()
    f.shown(surfaces, plan.remove)
    shown: dict[int, BodySurface] = {s.body: s for s in surfaces}
    more, _ = f.update()  # the next sync
    shown.update({s.body: s for s in more})
    v = c.version
    assert v is not None and v.supervoxels(10) == [10]
    want = v.labelmap.mesh(10, v.uuid)
    assert len(shown[10].faces) == len(want.faces) and len(shown[10].vertices) == len(want.vertices)
    assert f.plan().empty
