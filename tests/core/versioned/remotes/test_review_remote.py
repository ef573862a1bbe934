"""The pull-request flow through a remote, Qt-free (what the Review branch… panel drives): A pushes
an edit, B edits the same body and fetches, reviews ``origin/main`` against its ``main`` (the
conflict listed, both histories in words), keeps theirs, accepts, commits and pushes; the remote's
``main`` then holds A's edit, read through a fresh clone."""

from __future__ import annotations

from pathlib import Path

from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.review import BranchReviewer
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from tests.core.versioned.remotes.helpers import make_repo


def test_review_a_fetched_branch_keep_theirs_and_push(base: Path, tmp_path: Path) -> None:
    remote = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", remote)
    R.push(a, "origin", "main")
    path_b, _ = R.clone(remote, tmp_path / "b")
    lm_a = open_labelmap(a, "seg")
    svs = [int(s) for s in lm_a.index_summary().supervoxels[:3]]
    va = a.new_version(a.head("main"))
    lm_a.at(va).merge(svs[1], [svs[0]])  # A: body 0 into 1
    a.commit(va, "A: 0 into 1")
    R.push(a, "origin", "main")
    a.close()

    c = ProofreadingController()
    c.connect(path_b)
    c.branch(None)
    c.version.merge(svs[2], [svs[0]])  # B: body 0 into 2 — the same body: a conflict
    c.commit("B: 0 into 2")
    R.fetch(c.session.repo, "origin")
    assert "origin/main" in c.state.merge_candidates  # the Review panel offers the remote-tracking head
    reviewer = BranchReviewer(c)
    review = reviewer.open("origin/main")
    assert c.last_error == ""
    rows = {r.key: r for r in reviewer.rows()}
    assert rows[f"body:{svs[0]}"].conflict
    body0 = rows[f"body:{svs[0]}"].body
    assert body0 is not None and body0.branch_edits and body0.target_edits
    assert f"into {svs[1]} (" in body0.branch_edits[0] and f"into {svs[2]} (" in body0.target_edits[0]
    assert len(review.conflicts) >= 1
    for r in reviewer.rows():
        if r.conflict:
            reviewer.keep(r.key, "theirs")
    reviewer.accept()
    c.commit("merged origin/main after review")
    pushed = R.push(c.session.repo, "origin", "main")
    assert pushed.sent
    c.disconnect()
    path_c, _ = R.clone(remote, tmp_path / "c")
    with open_repository(path_c) as fresh:
        v = open_labelmap(fresh, "seg").at("main")
        assert v.body_of(svs[0]) == svs[1] and v.body_of(svs[2]) == svs[2]  # A's edit kept, B's reverted
