"""The labelmap-aware branch merge: disjoint edits merge cleanly and equal applying both; overlaps conflict.

"Equal" is up to the ids new bodies and supervoxels get (two runs allocate different ids): two label
arrays are equal when one is the other relabelled one-to-one, checked at every scale.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.cli import run
from napari_shardscope.core.labelmap import Labelmap, create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.branch_merge import (
    BranchMergeConflictError,
    merge_branches,
    plan_branch_merge,
)
from napari_shardscope.core.labelmap.diff import diff_versions
from napari_shardscope.core.versioned import Repository, UncommittedVersionError, create_repository, open_repository
from tests.labelmap.volumes import voronoi_supervoxels, write_precomputed

FACTORS = ((1, 1, 1), (1, 2, 2), (2, 4, 4))
SHAPE = (8, 32, 32)


@pytest.fixture(scope="module")
def base_volume(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("bm") / "seg"
    data = voronoi_supervoxels(SHAPE, 24, seed=11)
    write_precomputed(path, data, FACTORS, chunk_xyz=(16, 16, 4), sharded=True)
    return path, data


@pytest.fixture
def lm(base_volume: tuple[Path, np.ndarray], tmp_path: Path) -> Iterator[Labelmap]:
    repo = create_repository(tmp_path / "repo")
    svs = [int(s) for s in np.unique(base_volume[1])]
    yield create_labelmap(repo, "seg", base_volume[0], agglomeration={s: s for s in svs}, block=8)
    repo.close()


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``b`` is ``a`` relabelled one-to-one (0 stays 0)."""
    if a.shape != b.shape or not np.array_equal(a == 0, b == 0):
        return False
    pairs = np.unique(np.stack([a.ravel(), b.ravel()]), axis=1)
    return len(np.unique(pairs[0])) == pairs.shape[1] == len(np.unique(pairs[1]))


def assert_same_everywhere(x: Any, y: Any) -> None:
    for scale in range(len(FACTORS)):
        assert same_partition(x.read_bodies(scale=scale), y.read_bodies(scale=scale)), f"bodies, scale {scale}"
        assert same_partition(x.read_supervoxels(scale=scale), y.read_supervoxels(scale=scale)), f"svs, {scale}"


def half_of(v: Any, sv: int) -> np.ndarray:
    where = np.argwhere(v.read_supervoxels() == sv)
    return where[: len(where) // 2]


def svs_sharing_a_block(data: np.ndarray) -> tuple[int, int]:
    """Two supervoxels present in the first 8³ block (their splits rewrite the same overlay block)."""
    ids, counts = np.unique(data[:8, :8, :8], return_counts=True)
    order = [int(i) for i in ids[np.argsort(counts)[::-1]]]
    return order[0], order[1]


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def ours_edits(v: Any, svs: list[int], s1: int) -> None:
    v.merge(svs[2], [svs[3]])
    v.split_supervoxel(s1, half_of(v, s1))
    v.cleave(svs[2], [svs[3]])
    v.merge(svs[4], [svs[5]])


def theirs_edits(v: Any, svs: list[int], s2: int) -> None:
    v.merge(svs[10], [svs[11], svs[12]])
    v.split_supervoxel(s2, half_of(v, s2))
    v.merge(svs[13], [svs[14]])
    v.undo()  # undone on its side: touches nothing in the end


def test_disjoint_edits_merge_cleanly_and_equal_applying_both(lm: Labelmap,
                                                              base_volume: tuple[Path, np.ndarray]) -> None:
    repo = lm.repo
    data = base_volume[1]
    s1, s2 = svs_sharing_a_block(data)
    svs = [s for s in (int(i) for i in np.unique(data)) if s not in (s1, s2)]
    root = repo.commit(repo.root.uuid, "base")
    ours_v = repo.new_version(root.uuid)
    ours_edits(lm.at(ours_v.uuid), svs, s1)
    repo.commit(ours_v.uuid, "ours")
    alt = repo.new_version(root.uuid, "alt")
    theirs_edits(lm.at(alt.uuid), svs, s2)
    repo.commit(alt.uuid, "theirs")
    seq = repo.new_version(root.uuid, "sequential")
    ours_edits(lm.at(seq.uuid), svs, s1)
    theirs_edits(lm.at(seq.uuid), svs, s2)

    plan = plan_branch_merge(lm, "main", "alt")
    assert plan.conflicts == () and plan.base == root.uuid
    assert len(plan.ours_mutations) == 4 and len(plan.theirs_mutations) == 4
    result = merge_branches(lm, "main", "alt", user="tester")
    m = result.version
    assert m.parents == (ours_v.uuid, alt.uuid) and m.branch == "main" and not m.locked
    assert result.reverted == () and result.dropped == ()
    merged = lm.at(m.uuid)
    assert_same_everywhere(merged, lm.at(seq.uuid))
    # the label index and history work at the merge version
    assert merged.size(svs[10]) == lm.at(seq.uuid).size(svs[10])
    assert [h.mutation.operation for h in merged.history(svs[10])] == ["merge-branches"]
    assert merged.mutations(own=True)[0].mutation.operation == "merge-branches"
    # undo takes the whole merge back to ours; redo brings it again
    merged.undo()
    assert_same_everywhere(merged, lm.at(ours_v.uuid))
    merged.redo()
    assert_same_everywhere(merged, lm.at(seq.uuid))
    # committed, continued and reopened: the same reads
    repo.commit(m.uuid, "merged")
    child = repo.new_version(m.uuid)
    path = repo.path
    repo.close()
    again = open_labelmap(open_repository(path), "seg")
    assert_same_everywhere(again.at(child.uuid), again.at(seq.uuid))
    d = diff_versions(again, ours_v.uuid, m.uuid)
    assert d.relation == "a is an ancestor of b"
    assert [e.mutation.operation for e in d.only_b] == ["merge-branches", "undo", "redo"]
    again.repo.close()


def conflicted(lm: Labelmap) -> tuple[str, list[int]]:
    """Both branches edit body svs[0]: ours merges svs[1] into it, theirs merges it into svs[2]; our head."""
    repo = lm.repo
    svs = lm.index_summary().supervoxels.tolist()
    root = repo.commit(repo.root.uuid, "base")
    a = repo.new_version(root.uuid)
    lm.at(a.uuid).merge(svs[0], [svs[1]])
    lm.at(a.uuid).merge(svs[5], [svs[6]])
    repo.commit(a.uuid, "ours")
    b = repo.new_version(root.uuid, "alt")
    lm.at(b.uuid).merge(svs[2], [svs[0]])
    lm.at(b.uuid).merge(svs[8], [svs[9]])
    repo.commit(b.uuid, "theirs")
    return a.uuid, [int(s) for s in svs]


def test_overlapping_edits_conflict_and_write_nothing(lm: Labelmap) -> None:
    _, svs = conflicted(lm)
    plan = plan_branch_merge(lm, "main", "alt")
    assert [c.key for c in plan.conflicts] == [f"body:{svs[0]}"]
    c = plan.conflicts[0]
    assert len(c.ours) == 1 and len(c.theirs) == 1
    before = tree_digest(Path(lm.repo.path))
    versions = len(lm.repo.versions())
    with pytest.raises(BranchMergeConflictError) as info:
        merge_branches(lm, "main", "alt")
    assert info.value.plan.conflicts == plan.conflicts and info.value.unresolved == plan.conflicts
    assert tree_digest(Path(lm.repo.path)) == before and len(lm.repo.versions()) == versions


def test_resolving_a_conflict_for_ours_or_theirs(lm: Labelmap) -> None:
    _, svs = conflicted(lm)
    key = f"body:{svs[0]}"
    ours = merge_branches(lm, "main", "alt", resolutions={key: "ours"}, branch="m-ours")
    v = lm.at(ours.version.uuid)
    assert v.body_of(svs[1]) == svs[0] and v.body_of(svs[2]) == svs[2]  # their merge of svs[0] dropped
    assert v.body_of(svs[9]) == svs[8] and v.body_of(svs[6]) == svs[5]  # the rest of both sides kept
    assert len(ours.dropped) == 1 and ours.reverted == ()
    theirs = merge_branches(lm, "main", "alt", policy="theirs", branch="m-theirs")
    w = lm.at(theirs.version.uuid)
    assert w.body_of(svs[0]) == svs[2] and w.body_of(svs[1]) == svs[1]  # our merge reverted, theirs applied
    assert w.body_of(svs[9]) == svs[8] and w.body_of(svs[6]) == svs[5]
    assert len(theirs.reverted) == 1 and theirs.dropped == ()


def test_open_heads_and_bad_resolutions_are_refused(lm: Labelmap) -> None:
    a, _ = conflicted(lm)
    with pytest.raises(Exception, match="names no conflict"):
        merge_branches(lm, "main", "alt", resolutions={"body:1": "ours"})
    child = lm.repo.new_version(a)
    with pytest.raises(UncommittedVersionError):
        plan_branch_merge(lm, child.uuid, "alt")


def test_cli_reports_conflicts_then_merges(lm: Labelmap, capsys: pytest.CaptureFixture[str]) -> None:
    _, svs = conflicted(lm)
    path = str(lm.repo.path)
    lm.repo.close()
    assert run(["merge-branches", path, "main", "alt", "seg", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [c["key"] for c in out["conflicts"]] == [f"body:{svs[0]}"]
    assert run(["merge-branches", path, "main", "alt", "seg", "--resolve", f"body:{svs[0]}=theirs", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["reverted"] and not done["dropped"]
    v = open_labelmap(open_repository(path), "seg").at(done["version"])
    assert v.body_of(svs[0]) == svs[2]


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_disjoint_map_edits_equal_sequential(base_volume: tuple[Path, np.ndarray], tmp_path_factory: Any,
                                                     data: st.DataObject) -> None:
    """Random merges and cleaves on two branches over disjoint pools of bodies: no conflict, and equal to both."""
    repo: Repository = create_repository(tmp_path_factory.mktemp("bmh") / "repo")
    try:
        ids = [int(s) for s in np.unique(base_volume[1])]
        lm = create_labelmap(repo, "seg", base_volume[0], block=8)
        root = repo.commit(repo.root.uuid, "base")
        pools = (ids[: len(ids) // 2], ids[len(ids) // 2:])
        scripts = [data.draw(st.lists(st.tuples(st.sampled_from(["merge", "cleave"]), st.sampled_from(p),
                                                st.sampled_from(p)), max_size=4)) for p in pools]
        heads = [repo.new_version(root.uuid), repo.new_version(root.uuid, "alt")]
        seq = repo.new_version(root.uuid, "seq")

        def play(v: Any, script: list[tuple[str, int, int]]) -> None:
            for op, x, y in script:
                bx, by = v.body_of(x), v.body_of(y)
                if op == "merge" and bx != by:
                    v.merge(bx, [by])
                elif op == "cleave" and bx == by and len(v.supervoxels(bx)) > 1:
                    v.cleave(bx, [x])

        for head, script in zip(heads, scripts, strict=True):
            play(lm.at(head.uuid), script)
            repo.commit(head.uuid, "edits")
            play(lm.at(seq.uuid), script)
        assert plan_branch_merge(lm, "main", "alt").conflicts == ()
        m = merge_branches(lm, "main", "alt").version
        assert same_partition(lm.at(m.uuid).read_bodies(), lm.at(seq.uuid).read_bodies())
    finally:
        repo.close()
