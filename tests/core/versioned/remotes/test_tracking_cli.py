"""Remote-tracking names through the CLI, as two proofreaders use them (issue 31, item 6).

``origin/<branch>`` always names the head last fetched from (or pushed to) ``origin``, in every
verb that takes a version, and is never a local branch: the first divergence used to leave a local
branch literally named ``origin/main``, the second adopted the new remote head as
``origin/main+<uuid8>``, and ``review REPO origin/main`` then reviewed the *old* head ("0 body(ies)
changed") while ``pull`` merged the new one. Two repositories, two rounds of divergence, every
remote verb a ``shardscope`` subprocess; ``status`` after a clone reports nothing ahead, and ``push`` says
what it sent.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.versioned import create_repository, open_repository
from tests.core.versioned.remotes.cli import shardscope, shardscope_json
from tests.core.versioned.remotes.helpers import write_base


def _status_rows(repo: Path) -> dict[str, dict[str, object]]:
    doc = shardscope_json("status", str(repo))
    return {r["branch"]: r for r in doc["branches"]}


def _edit(path: Path, target: int, other: int, message: str, branch: str = "main") -> None:
    """A committed merge of two bodies on ``branch`` (a new version after its committed head).

    In this process, through the library: the edits are the setting, the remote verbs under test
    run as subprocesses (and a repository is opened only between them, like a second program would).
    """
    with open_repository(path) as repo:
        v = repo.new_version(repo.head(branch))
        open_labelmap(repo, "seg").at(v).merge(target, [other])
        repo.commit(v, message)


def _local_branches(repo: Path) -> list[str]:
    return [b["name"] for b in shardscope_json("repo", "branches", str(repo))]


@pytest.fixture(scope="module")
def shared_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """A (made the repository, pushed main and a branch ``alt``) and B (a clone) beside their remote, built once:
    the remote verbs that build it are the same in every test (and checked here once)."""
    root = tmp_path_factory.mktemp("tracking")
    data = write_base(root / "seg")
    svs = [int(s) for s in np.unique(data) if s]
    a, b, remote = root / "a", root / "b", str(root / "remote")
    repo = create_repository(a)
    create_labelmap(repo, "seg", root / "seg", block=8)
    repo.commit(repo.root, "base")
    v = repo.new_version(repo.root, "alt")
    open_labelmap(repo, "seg").at(v).merge(svs[-1], [svs[-2]])
    repo.commit(v, "alt edit")
    repo.close()
    shardscope("remote", "add", str(a), "origin", remote)
    pushed = shardscope("push", str(a), "origin", "main").stdout
    assert re.search(r"\d+ object\(s\) sent \(", pushed) and "received" not in pushed, pushed
    shardscope("push", str(a), "origin", "alt")
    shardscope("clone", remote, str(b))
    return root, svs


@pytest.fixture
def shared(shared_template: tuple[Path, list[int]], tmp_path: Path) -> tuple[Path, Path, str, list[int]]:
    """A fresh copy of A, B and the remote for one test (each changes them); A's and B's remote points at the
    copy's. The labelmap's base stays the template's (read only, never changed)."""
    template, svs = shared_template
    world = tmp_path / "world"
    shutil.copytree(template, world)
    for config in [*world.glob("[ab]/*.json"), *world.glob("[ab]/remote-state/*.json")]:
        text = config.read_text()
        if str(template) in text:
            config.write_text(text.replace(str(template), str(world)))
    return world / "a", world / "b", str(world / "remote"), svs


def test_status_after_a_clone_reports_nothing_ahead(shared: tuple[Path, Path, str, list[int]],
                                                    tmp_path: Path) -> None:
    _, b, remote, svs = shared
    rows = _status_rows(b)
    assert set(rows) == {"main", "alt"}
    assert all((r["ahead"], r["behind"]) == (0, 0) for r in rows.values()), rows
    text = shardscope("status", str(b)).stdout
    assert "ahead 0, behind 0" in text and "ahead 1" not in text and "ahead 2" not in text, text
    # a clone of one branch: main (only the root, which the remote has) is not "ahead 1" of nothing
    shardscope("clone", remote, str(tmp_path / "c"), "--branch", "alt")
    rows = _status_rows(tmp_path / "c")
    assert all((r["ahead"], r["behind"]) == (0, 0) for r in rows.values()), rows
    assert rows["alt"]["remote"] == rows["alt"]["local"]
    # work done locally is what status reports
    _edit(b, svs[0], svs[1], "B: local edit")
    rows = _status_rows(b)
    assert (rows["main"]["ahead"], rows["main"]["behind"]) == (1, 0)


def test_origin_main_names_the_last_fetched_head_across_divergences(
        shared: tuple[Path, Path, str, list[int]]) -> None:
    a, b, _, svs = shared
    names: set[str] = set()
    for round_, (ta, oa, tb, ob) in enumerate([(0, 1, 2, 3), (4, 5, 6, 7)]):
        # A pulls what B pushed last round (a fast-forward), edits one body, pushes
        shardscope("pull", str(a))
        _edit(a, svs[ta], svs[oa], f"A round {round_}")
        shardscope("push", str(a))
        # B edits another body meanwhile: the histories diverge
        _edit(b, svs[tb], svs[ob], f"B round {round_}")
        fetched = shardscope_json("fetch", str(b))
        head = fetched["tracking"]["main"]
        names |= set(fetched["renamed"].values()) | set(_local_branches(b))
        # review reviews the head just fetched: A's one body, in every round
        review = shardscope_json("review", str(b), "origin/main")
        assert review["branch"] == head, (round_, review)
        bodies = {x["body"] for x in review["bodies"]}
        assert svs[ta] in bodies and bodies <= {svs[ta], svs[oa]}, (round_, review)
        if round_ == 1:  # the round that reviewed the stale head; and the same name in another verb
            text = shardscope("review", str(b), "origin/main").stdout
            assert "0 body(ies) changed" not in text and f"body {svs[ta]}" in text, text
            assert shardscope_json("label", str(b), "origin/main", "seg", *map(str, _voxel_of(b, svs[oa])))[
                "body"] == svs[ta]
        rows = _status_rows(b)
        assert (rows["main"]["remote"], rows["main"]["ahead"], rows["main"]["behind"]) == (head, 1, 1), rows
        pulled = shardscope_json("pull", str(b))
        assert pulled["kind"] == "merge"
        with open_repository(b) as repo:
            assert head in repo.version(pulled["head"]).parents  # the pull merged the head review showed
        pushed = shardscope("push", str(b)).stdout
        assert re.search(r"\d+ object\(s\) sent \(", pushed) and "received" not in pushed, pushed
        rows = _status_rows(b)
        assert (rows["main"]["ahead"], rows["main"]["behind"]) == (0, 0), rows
    # no divergence was adopted on a branch named like the remote-tracking head
    assert not any(n.startswith("origin/") for n in names), names
    # the last round's merge holds every edit of both
    with open_repository(b) as repo:
        at = open_labelmap(repo, "seg").at("main")
        assert all(at.body_of(svs[oa]) == svs[ta] for ta, oa in ((0, 1), (4, 5), (2, 3), (6, 7)))


_VOXELS: dict[tuple[Path, int], tuple[int, int, int]] = {}


def _voxel_of(repo: Path, supervoxel: int) -> tuple[int, int, int]:
    """A voxel (z, y, x) of ``supervoxel`` in the base beside the repository."""
    key = (repo.parent, supervoxel)
    if key not in _VOXELS:
        import tensorstore as ts

        data = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{repo.parent / 'seg'}/",
                        "scale_index": 0}).result().read().result()[..., 0].T  # x y z c -> z y x
        _VOXELS[key] = tuple(int(i[0]) for i in np.nonzero(data == supervoxel))  # type: ignore[assignment]
    return _VOXELS[key]


def test_no_local_branch_may_take_a_remote_tracking_name(shared: tuple[Path, Path, str, list[int]]) -> None:
    _, b, _, _ = shared
    refused = shardscope("repo", "branch", str(b), "main", "origin/mine", "--json", expect=2)
    message = json.loads(refused.stdout)["error"]["message"]
    assert "origin/" in message and "remote-tracking" in message
    shardscope("repo", "branch", str(b), "main", "alice/mine")  # not a remote's name: an ordinary branch


def test_a_branch_left_by_an_older_fetch_is_migrated(shared: tuple[Path, Path, str, list[int]]) -> None:
    """A repository whose fetch (before this fix) put a divergence on a local branch ``origin/main``:
    ``origin/main`` resolves to the remote-tracking head at once, and the next fetch renames the old
    branch and says so."""
    a, b, _, svs = shared
    _edit(a, svs[0], svs[1], "A")
    shardscope("push", str(a))
    _edit(b, svs[2], svs[3], "B")
    fetched = shardscope_json("fetch", str(b))
    (diverged,) = set(fetched["renamed"].values())
    head = fetched["tracking"]["main"]
    # make it the repository an older fetch left: the divergence on a branch named origin/main
    config = b / "remotes.json"
    shutil.move(config, b / "remotes.json.aside")
    with open_repository(b) as repo:
        repo.rename_branch(diverged, "origin/main")
    shutil.move(b / "remotes.json.aside", config)
    assert "origin/main" in _local_branches(b)
    assert shardscope_json("review", str(b), "origin/main")["branch"] == head  # the tracking head, first
    out = shardscope("fetch", str(b)).stdout
    assert "origin/main" in out and "renamed" in out, out
    assert not any(n.startswith("origin/") for n in _local_branches(b))
    assert shardscope_json("review", str(b), "origin/main")["branch"] == head
    assert shardscope_json("pull", str(b))["kind"] == "merge"


def test_adding_a_remote_renames_branches_under_its_name(shared: tuple[Path, Path, str, list[int]]) -> None:
    _, b, remote, _ = shared
    shardscope("repo", "branch", str(b), "main", "upstream/topic")
    added = shardscope("remote", "add", str(b), "upstream", remote).stdout
    assert "upstream/topic" in added and "renamed" in added, added
    names = _local_branches(b)
    assert "upstream/topic" not in names and any(n.startswith("topic+upstream-") for n in names), names
