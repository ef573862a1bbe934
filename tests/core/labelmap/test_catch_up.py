"""A warm labelmap handle after another handle (another process) edited its open version.

The warm handle forgets only the records the other handle's mutations wrote (:mod:`.catch_up`): what
it answers must be what a handle that read nothing answers, after every kind of edit, after several
edits between two reads, and when it cannot follow the log (it then forgets everything).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.labelmap import Labelmap, create_labelmap, open_labelmap
from napari_shardscope.core.labelmap import catch_up as C
from napari_shardscope.core.labelmap.keys import undo_prefix
from napari_shardscope.core.labelmap.undo_records import decode_undo_record
from napari_shardscope.core.versioned import Repository, create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

SHAPE = (8, 24, 24)


@pytest.fixture
def volume(tmp_path: Path) -> tuple[Path, np.ndarray]:
    svs = voronoi_supervoxels(SHAPE, 16, seed=11)
    write_precomputed(tmp_path / "seg", svs, ((1, 1, 1), (1, 2, 2)))
    return tmp_path / "seg", svs


@pytest.fixture(params=["lmdb", "memory"])
def repo(request: pytest.FixtureRequest, tmp_path: Path, volume: tuple[Path, np.ndarray]) -> Iterator[Repository]:
    path, svs = volume
    r = create_repository(tmp_path / "repo" if request.param == "lmdb" else None, engine=request.param)
    ids = sorted(int(v) for v in np.unique(svs))
    create_labelmap(r, "seg", path, agglomeration={ids[i]: ids[i - 1] for i in range(1, len(ids), 4)},
                    block=(4, 8, 8))
    yield r
    r.close()


def answers(lm: Labelmap, svs: np.ndarray) -> tuple[list[int], np.ndarray, dict[int, list[int]], dict[int, int]]:
    """Everything a query reads of the body map at main: bodies of every supervoxel, the voxels, members, sizes."""
    v = lm.at("main")
    ids = np.unique(svs)
    bodies = v.bodies_of(ids).tolist()
    voxels = np.asarray(v.supervoxel_arrays()[0])
    live = sorted({int(b) for b in bodies if b})
    return bodies, voxels, {b: v.supervoxels(b) for b in live}, {b: v.size(b) for b in live}


def check_agrees(mine: Labelmap, repo: Repository, svs: np.ndarray) -> None:
    fresh = open_labelmap(repo, "seg")  # a handle that read nothing
    got, want = answers(mine, svs), answers(fresh, svs)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2] and got[3] == want[3]


def written_by(repo: Repository, mid: int) -> set[bytes]:
    """The keys mutation ``mid`` wrote (its undo record)."""
    lm = open_labelmap(repo, "seg")
    with repo.read("main") as view:
        return set(decode_undo_record(view.get(lm.instance, undo_prefix(mid)), where="test"))


def test_a_warm_handle_forgets_only_what_another_handles_edit_wrote(repo: Repository,
                                                                    volume: tuple[Path, np.ndarray]) -> None:
    _, svs = volume
    mine = open_labelmap(repo, "seg")
    answers(mine, svs)  # warm: every record a query of any supervoxel reads
    held = set(mine.state("main").records.keys())
    assert held
    theirs = open_labelmap(repo, "seg").at("main")
    bodies = sorted({int(b) for b in theirs.bodies_of(np.unique(svs)).tolist() if b})
    wrote = written_by(repo, theirs.merge(bodies[0], [bodies[1]]).mutation_id)
    state = mine.state("main")  # notices the new stamp and catches up
    kept = set(state.records.keys())
    assert kept - wrote == {k for k in held - wrote if C.is_cached_record(k)}
    assert kept - wrote, "every record was forgotten"
    # what it held of the records the merge rewrote was read again as the store holds it now
    assert kept & wrote == held & wrote
    with repo.read("main") as view:
        now = [view.get(mine.instance, k) for k in sorted(kept & wrote)]
    assert state.records.get_many(sorted(kept & wrote)) == now
    check_agrees(mine, repo, svs)


def test_a_warm_handle_agrees_with_a_fresh_one_after_every_kind_of_edit(repo: Repository,
                                                                        volume: tuple[Path, np.ndarray]) -> None:
    _, svs = volume
    mine = open_labelmap(repo, "seg")
    theirs = open_labelmap(repo, "seg").at("main")
    check_agrees(mine, repo, svs)
    bodies = sorted({int(b) for b in theirs.bodies_of(np.unique(svs)).tolist() if b})
    theirs.merge(bodies[0], [bodies[1], bodies[2]])
    check_agrees(mine, repo, svs)
    members = theirs.supervoxels(bodies[0])
    cleaved = theirs.cleave(bodies[0], members[:2])
    check_agrees(mine, repo, svs)
    sv = members[0]
    voxels = np.argwhere(np.asarray(theirs.supervoxel_arrays()[0]) == sv)
    theirs.split_supervoxel(sv, voxels[: len(voxels) // 2])
    check_agrees(mine, repo, svs)
    theirs.undo()  # the split: its supervoxel back, the two it made retired
    check_agrees(mine, repo, svs)
    theirs.redo()
    check_agrees(mine, repo, svs)
    # several edits between two reads: one catch-up over all of them
    theirs.merge(cleaved, [bodies[3]])
    theirs.undo()
    theirs.undo()
    theirs.merge(bodies[4], [bodies[5]])
    check_agrees(mine, repo, svs)
    # and edits through the warm handle itself, then another's
    mine.at("main").merge(bodies[4], [bodies[6]])
    theirs.undo()
    check_agrees(mine, repo, svs)
    own = mine.at("main")
    big = next(b for b in sorted({int(x) for x in own.bodies_of(np.unique(svs)).tolist() if x})
               if len(own.supervoxels(b)) >= 2)
    own.cleave(big, own.supervoxels(big)[:1])  # a page of explicit assignments written here
    check_agrees(mine, repo, svs)
    theirs.undo()  # and removed by another
    check_agrees(mine, repo, svs)


def test_a_warm_handle_forgets_everything_when_too_many_edits_came_between(
        repo: Repository, volume: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    _, svs = volume
    monkeypatch.setattr(C, "MAX_CATCH_UP", 2)
    mine = open_labelmap(repo, "seg")
    answers(mine, svs)
    theirs = open_labelmap(repo, "seg").at("main")
    bodies = sorted({int(b) for b in theirs.bodies_of(np.unique(svs)).tolist() if b})
    for other in bodies[1:4]:
        theirs.merge(bodies[0], [other])
    assert mine.state("main").records.keys() == []  # three mutations: more than it reads to catch up
    check_agrees(mine, repo, svs)
    theirs.merge(bodies[0], [bodies[4]])
    theirs.undo()
    check_agrees(mine, repo, svs)  # two: caught up


def test_background_maps_to_background_whatever_the_cache_holds(repo: Repository,
                                                                volume: tuple[Path, np.ndarray]) -> None:
    _, svs = volume
    v = open_labelmap(repo, "seg").at("main")
    ids = np.unique(svs)
    want = v.bodies_of(ids).tolist()
    for asked in ([0], [0, int(ids[0])], [int(ids[1]), 0, int(ids[0])]):  # 0 alone, with kept ones, new ones
        got = v.bodies_of(np.asarray(asked, dtype=np.uint64)).tolist()
        assert got == [0 if s == 0 else want[int(np.searchsorted(ids, s))] for s in asked]
