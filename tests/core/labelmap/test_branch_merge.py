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
from napari_shardscope.core.labelmap.errors import UnknownLabelError
from napari_shardscope.core.versioned import Repository, UncommittedVersionError, create_repository, open_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

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
    # the sides list the edits that remain: theirs' undone merge and its undo cancel out
    assert len(plan.ours_mutations) == 4 and len(plan.theirs_mutations) == 2
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


def conflicted(lm: Labelmap, second: tuple[int, int] = (8, 9)) -> tuple[str, list[int]]:
    """Both branches edit body svs[0]: ours merges svs[1] into it, theirs merges it into svs[2]; our head.

    Ours also merges svs[6] into svs[5]; theirs merges svs[second[1]] into svs[second[0]] (a second
    conflict when it names svs[5]).
    """
    repo = lm.repo
    svs = lm.index_summary().supervoxels.tolist()
    root = repo.commit(repo.root.uuid, "base")
    a = repo.new_version(root.uuid)
    lm.at(a.uuid).merge(svs[0], [svs[1]])
    lm.at(a.uuid).merge(svs[5], [svs[6]])
    repo.commit(a.uuid, "ours")
    b = repo.new_version(root.uuid, "alt")
    lm.at(b.uuid).merge(svs[2], [svs[0]])
    lm.at(b.uuid).merge(svs[second[0]], [svs[second[1]]])
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
    assert run(["branch", "merge", path, "main", "alt", "seg", "--json"]) == 7  # conflict
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [c["key"] for c in out["conflicts"]] == [f"body:{svs[0]}"] and out["error"]["group"] == "conflict"
    assert len(captured.err.splitlines()) == 1
    assert run(["branch", "merge", path, "main", "alt", "seg", "--resolve", f"body:{svs[0]}=theirs", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["reverted"] and not done["dropped"]
    v = open_labelmap(open_repository(path), "seg").at(done["version"])
    assert v.body_of(svs[0]) == svs[2]


def test_cli_dry_run_checks_resolutions_like_the_merge(lm: Labelmap, capsys: pytest.CaptureFixture[str]) -> None:
    """A dry run exits (and says) what the merge would: 7 while a conflict is left, 2 for a stray resolution."""
    repo = lm.repo
    _, svs = conflicted(lm, second=(7, 5))  # two conflicts: bodies svs[0] and svs[5]
    path = str(repo.path)
    repo.close()

    def stored(where: str) -> dict[str, str]:  # the data, not LMDB's reader-slot lock file
        return {k: v for k, v in tree_digest(Path(where)).items() if not k.endswith("lock.mdb")}

    before = stored(path)
    merge = ["branch", "merge", path, "main", "alt", "seg"]
    one = ["--resolve", f"body:{svs[0]}=ours"]
    for extra, code in (([], 7), (one, 7), (["--resolve", "body:1=ours"], 2), ([*one, "--policy", "fail"], 7)):
        assert run([*merge, "--dry-run", *extra]) == code, extra
        dry = capsys.readouterr().err
        assert stored(path) == before
        assert run([*merge, *extra]) == code  # refused: writes nothing either
        assert capsys.readouterr().err == dry and stored(path) == before
    assert run([*merge, "--dry-run", *one, "--json"]) == 7
    out = json.loads(capsys.readouterr().out)
    assert [c["key"] for c in out["conflicts"]] == [f"body:{svs[5]}"]
    assert "edited on both sides" in out["error"]["message"]
    both = [*one, "--resolve", f"body:{svs[5]}=theirs"]
    assert run([*merge, "--dry-run", *both, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] and len(out["applied"]) == 1 and len(out["reverted"]) == 1 and len(out["dropped"]) == 1
    assert stored(path) == before
    assert run([*merge, *both]) == 0


def play(v: Any, script: list[tuple[str, int, int]]) -> None:
    """Run a drawn script of merges and cleaves, skipping steps the current bodies make meaningless."""
    for op, x, y in script:
        bx, by = v.body_of(x), v.body_of(y)
        if op == "merge" and bx != by:
            v.merge(bx, [by])
        elif op == "cleave" and bx == by and len(v.supervoxels(bx)) > 1:
            v.cleave(bx, [x])


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_disjoint_map_edits_equal_sequential(base_volume: tuple[Path, np.ndarray], tmp_path_factory: Any,
                                                     data: st.DataObject) -> None:
    """Random merges and cleaves on two branches over disjoint pools of bodies, merged again and again.

    Each round both branches edit, then main takes alt, alt takes main, or both take each other
    from the same heads (criss-cross). The model: a branch holds the first ``i`` rounds of main's
    edits and the first ``j`` of alt's, and its bodies are main's own replay after ``i`` rounds on
    main's pool and alt's after ``j`` on alt's. Every merge must be conflict-free, revert and drop
    nothing, and hold what both parents held.
    """
    repo: Repository = create_repository(tmp_path_factory.mktemp("bmh") / "repo")
    try:
        volume = base_volume[1]
        ids = [int(s) for s in np.unique(volume)]
        lm = create_labelmap(repo, "seg", base_volume[0], block=8)
        root = repo.commit(repo.root.uuid, "base")
        pools = (ids[: len(ids) // 2], ids[len(ids) // 2:])
        in_main_pool = np.isin(volume, pools[0])
        # each side's edits alone, replayed on a version of its own: bodies after 0, 1, 2… rounds
        refs = [repo.new_version(root.uuid, "ref-main"), repo.new_version(root.uuid, "ref-alt")]
        snapshots = [[lm.at(r.uuid).read_bodies()] for r in refs]
        head = {"main": root.uuid, "alt": root.uuid}
        held = {"main": (0, 0), "alt": (0, 0)}

        def check(uuid: str, rounds: tuple[int, int]) -> None:
            expected = np.where(in_main_pool, snapshots[0][rounds[0]], snapshots[1][rounds[1]])
            assert same_partition(lm.at(uuid).read_bodies(), expected), f"holding rounds {rounds}"

        for rnd in range(data.draw(st.integers(1, 3), label="rounds")):
            for k, name in enumerate(("main", "alt")):
                script = data.draw(st.lists(st.tuples(st.sampled_from(["merge", "cleave"]), st.sampled_from(pools[k]),
                                                      st.sampled_from(pools[k])), max_size=3), label=f"{name} edits")
                v = repo.new_version(head[name], "alt" if name == "alt" and rnd == 0 else None)
                play(lm.at(v.uuid), script)
                repo.commit(v.uuid, "edits")
                play(lm.at(refs[k].uuid), script)
                snapshots[k].append(lm.at(refs[k].uuid).read_bodies())
                head[name] = v.uuid
                held[name] = (rnd + 1, held[name][1]) if k == 0 else (held[name][0], rnd + 1)
            how = data.draw(st.sampled_from(["main takes alt", "alt takes main", "criss-cross"]), label="merge")
            pairs = {"main takes alt": [("main", "alt")], "alt takes main": [("alt", "main")],
                     "criss-cross": [("main", "alt"), ("alt", "main")]}[how]
            before, held_before = dict(head), dict(held)
            for ours, theirs in pairs:
                assert plan_branch_merge(lm, before[ours], before[theirs]).conflicts == ()
                result = merge_branches(lm, before[ours], before[theirs])
                assert result.reverted == () and result.dropped == ()
                repo.commit(result.version.uuid, how)
                head[ours] = result.version.uuid
                a, b = held_before[ours], held_before[theirs]
                held[ours] = (max(a[0], b[0]), max(a[1], b[1]))
                check(head[ours], held[ours])
        last = merge_branches(lm, head["main"], head["alt"], branch="final").version
        check(last.uuid, (len(snapshots[0]) - 1, len(snapshots[1]) - 1))
    finally:
        repo.close()


# -- merging again: merge records stand for the edits they took in -------------------------------------


def _one_edit_each(lm: Labelmap) -> tuple[list[int], Any, Any, Any]:
    """A committed base, then one committed merge on each side: main svs[1] into svs[0], alt svs[11] into svs[10].

    Returns the supervoxel ids, main's and alt's versions, and main's mutation.
    """
    repo = lm.repo
    svs = [int(s) for s in lm.index_summary().supervoxels]
    root = repo.commit(repo.root.uuid, "base")
    m1 = repo.new_version(root.uuid)
    main_edit = lm.at(m1.uuid).merge(svs[0], [svs[1]])
    repo.commit(m1.uuid, "main edit 1")
    a1 = repo.new_version(root.uuid, "alt")
    lm.at(a1.uuid).merge(svs[10], [svs[11]])
    repo.commit(a1.uuid, "alt edit 1")
    return svs, m1, a1, main_edit


def test_merging_a_branch_again_takes_only_its_new_edits(lm: Labelmap) -> None:
    """alt merged into main, then alt edits a body again: the second merge is clean and reverts nothing.

    main's first merge record holds alt's first edit, which the new merge base (alt's old head)
    has; counting it as a main edit made every later alt edit of that body a conflict, and
    resolving it ``theirs`` reverted the whole first merge (alt's first edit lost).
    """
    repo = lm.repo
    svs, _, a1, main_edit = _one_edit_each(lm)
    repo.commit(merge_branches(lm, "main", "alt").version.uuid, "merge 1")
    a2 = repo.new_version(a1.uuid)
    alt_edit = lm.at(a2.uuid).merge(svs[10], [svs[12]])
    repo.commit(a2.uuid, "alt edit 2")

    plan = plan_branch_merge(lm, "main", "alt")
    assert plan.base == a1.uuid and plan.conflicts == ()
    assert [m.mutation_id for m in plan.ours_mutations] == [main_edit.mutation_id]
    assert [m.mutation_id for m in plan.theirs_mutations] == [alt_edit.mutation_id]
    for policy in ("fail", "theirs"):
        result = merge_branches(lm, "main", "alt", policy=policy, branch=f"again-{policy}")  # type: ignore[arg-type]
        assert result.applied == (alt_edit.mutation_id,) and result.reverted == () and result.dropped == ()
        v = lm.at(result.version.uuid)
        assert v.body_of(svs[1]) == svs[0]
        assert v.body_of(svs[11]) == v.body_of(svs[12]) == v.body_of(svs[10])


def test_merging_back_a_branch_that_merged_ours(lm: Labelmap) -> None:
    """The other direction: alt took main in, main edits the same body again, then main merges alt."""
    repo = lm.repo
    svs, m1, _, _ = _one_edit_each(lm)
    repo.commit(merge_branches(lm, "alt", "main").version.uuid, "alt takes main")
    a2 = repo.new_version("alt")
    lm.at(a2.uuid).merge(svs[10], [svs[12]])
    repo.commit(a2.uuid, "alt edit 2")
    m2 = repo.new_version(m1.uuid)
    lm.at(m2.uuid).merge(svs[0], [svs[2]])  # the body alt's merge record touched
    repo.commit(m2.uuid, "main edit 2")

    plan = plan_branch_merge(lm, "main", "alt")
    assert plan.base == m1.uuid and plan.conflicts == ()
    assert len(plan.ours_mutations) == 1 and len(plan.theirs_mutations) == 2
    assert all(m.operation == "merge" for m in plan.theirs_mutations)  # the merge record expanded
    result = merge_branches(lm, "main", "alt")
    v = lm.at(result.version.uuid)
    assert v.body_of(svs[1]) == v.body_of(svs[2]) == svs[0]
    assert v.body_of(svs[11]) == v.body_of(svs[12]) == svs[10]


def test_criss_cross_merges(lm: Labelmap) -> None:
    """Both branches merge each other from the same heads: merging again changes nothing, then edits merge."""
    repo = lm.repo
    svs, m1, a1, _ = _one_edit_each(lm)
    mm = merge_branches(lm, m1.uuid, a1.uuid).version
    ma = merge_branches(lm, a1.uuid, m1.uuid).version
    repo.commit(mm.uuid, "main takes alt")
    repo.commit(ma.uuid, "alt takes main")

    plan = plan_branch_merge(lm, "main", "alt")
    assert plan.conflicts == () and plan.ours_mutations == () and plan.theirs_mutations == ()
    again = lm.at(merge_branches(lm, "main", "alt", branch="again").version.uuid)
    assert_same_everywhere(again, lm.at(mm.uuid))
    m2 = repo.new_version(mm.uuid)
    lm.at(m2.uuid).merge(svs[0], [svs[2]])
    repo.commit(m2.uuid, "main 2")
    a2 = repo.new_version(ma.uuid)
    lm.at(a2.uuid).merge(svs[10], [svs[12]])
    repo.commit(a2.uuid, "alt 2")
    for ours, theirs in (("main", "alt"), ("alt", "main")):
        plan = plan_branch_merge(lm, ours, theirs)
        assert plan.conflicts == () and len(plan.ours_mutations) == len(plan.theirs_mutations) == 1
    v = lm.at(merge_branches(lm, "main", "alt").version.uuid)
    assert v.body_of(svs[1]) == v.body_of(svs[2]) == svs[0]
    assert v.body_of(svs[11]) == v.body_of(svs[12]) == svs[10]


def test_a_split_reverted_by_a_merge_stays_reverted_when_merged_on(lm: Labelmap,
                                                                     base_volume: tuple[Path, np.ndarray]) -> None:
    """main's split conflicted with alt and was reverted ("theirs"); a branch that has the split takes main in.

    The branch's merge base has the split and main took it out: that removal is main's change, so
    the merge takes it out too, voxels and index included, at every scale.
    """
    repo = lm.repo
    s = svs_sharing_a_block(base_volume[1])[0]
    svs = [int(x) for x in lm.index_summary().supervoxels if int(x) != s]
    root = repo.commit(repo.root.uuid, "base")
    v1 = repo.new_version(root.uuid)
    parts = lm.at(v1.uuid).split_supervoxel(s, half_of(lm.at(v1.uuid), s))
    repo.commit(v1.uuid, "split")
    a1 = repo.new_version(root.uuid, "alt")
    lm.at(a1.uuid).merge(s, [svs[0]])
    repo.commit(a1.uuid, "alt merges the body")
    took = merge_branches(lm, "main", "alt", policy="theirs")
    assert took.reverted and not took.dropped
    repo.commit(took.version.uuid, "alt wins")
    b1 = repo.new_version(v1.uuid, "b")
    lm.at(b1.uuid).merge(svs[5], [svs[6]])
    repo.commit(b1.uuid, "b edit")
    seq = repo.new_version(root.uuid, "sequential")
    lm.at(seq.uuid).merge(s, [svs[0]])
    lm.at(seq.uuid).merge(svs[5], [svs[6]])

    for ours, theirs in (("b", "main"), ("main", "b")):
        plan = plan_branch_merge(lm, ours, theirs)
        assert plan.base == v1.uuid and plan.conflicts == ()
        removed = plan.theirs_removed if ours == "b" else plan.ours_removed
        assert [m.operation for m in removed] == ["split-supervoxel"]
        result = merge_branches(lm, ours, theirs, branch=f"{ours}-takes-{theirs}")
        merged = lm.at(result.version.uuid)
        assert_same_everywhere(merged, lm.at(seq.uuid))
        assert merged.body_of(s) == merged.body_of(svs[0]) and merged.body_of(svs[6]) == svs[5]
        assert merged.size(merged.body_of(s)) == lm.at(seq.uuid).size(lm.at(seq.uuid).body_of(s))
        for part in parts:
            with pytest.raises(UnknownLabelError):
                merged.supervoxel_size(part)
        repo.commit(result.version.uuid, "merged")
        assert_same_everywhere(lm.at(result.version.uuid), lm.at(seq.uuid))


def test_keeping_both_sides_of_a_conflict(lm: Labelmap) -> None:
    """``both`` keeps our merge and theirs: their delta is replayed after ours where it applies."""
    _, svs = conflicted(lm)
    key = f"body:{svs[0]}"
    both = merge_branches(lm, "main", "alt", resolutions={key: "both"}, branch="m-both")
    assert both.dropped == () and both.reverted == ()
    v = lm.at(both.version.uuid)
    assert v.body_of(svs[0]) == v.body_of(svs[1]) == svs[2]  # ours merged 1 into 0, theirs 0 into 2: all one
    assert v.body_of(svs[9]) == svs[8] and v.body_of(svs[6]) == svs[5]
