"""Remote-tracking names through the CLI, as two proofreaders use them (issue 31, item 6).

``origin/<branch>`` always names the head last fetched from (or pushed to) ``origin``, in every
verb that takes a version, and is never a local branch: the first divergence used to leave a local
branch literally named ``origin/main``, the second adopted the new remote head as
``origin/main+<uuid8>``, and ``review REPO origin/main`` then reviewed the *old* head ("0 body(ies)
changed") while ``pull`` merged the new one. Two repositories, two rounds of divergence, every
remote verb a ``shardscope`` command line in a child process; ``status`` after a clone reports nothing
ahead, and ``push`` says what it sent.

The command lines a test runs one after another, with no edit in between, share one child process
(``shardscope_batch``: each through the console script's ``main`` on real pipes, each opening the repository
afresh, as separate runs do); an edit between two verbs splits them into two processes.
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
from tests.core.versioned.remotes.cli import shardscope, shardscope_batch
from tests.core.versioned.remotes.helpers import write_base


def _rows(status_json: str) -> dict[str, dict[str, object]]:
    """The branches of ``status --json``'s output, by name."""
    return {r["branch"]: r for r in json.loads(status_json)["branches"]}


def _status_rows(repo: Path) -> dict[str, dict[str, object]]:
    return _rows(shardscope("status", str(repo), "--json").stdout)


def _edit(path: Path, target: int, other: int, message: str, branch: str = "main") -> None:
    """A committed merge of two bodies on ``branch`` (a new version after its committed head).

    In this process, through the library: the edits are the setting, the remote verbs under test
    run as subprocesses (and a repository is opened only between them, like a second program would).
    """
    with open_repository(path) as repo:
        v = repo.new_version(repo.head(branch))
        open_labelmap(repo, "seg").at(v).merge(target, [other])
        repo.commit(v, message)


def _names(branches_json: str) -> list[str]:
    """The local branches ``repo branches --json`` printed."""
    return [b["name"] for b in json.loads(branches_json)]


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
    _, pushed, _, _ = shardscope_batch(["remote", "add", str(a), "origin", remote], ["push", str(a), "origin", "main"],
                                       ["push", str(a), "origin", "alt"], ["clone", remote, str(b)])
    assert re.search(r"\d+ object\(s\) sent \(", pushed.stdout) and "received" not in pushed.stdout, pushed.stdout
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
    # the second clone is of one branch: main (only the root, which the remote has) is not "ahead 1" of nothing
    status, text, _, cloned = shardscope_batch(["status", str(b), "--json"], ["status", str(b)],
                                               ["clone", remote, str(tmp_path / "c"), "--branch", "alt"],
                                               ["status", str(tmp_path / "c"), "--json"])
    rows = _rows(status.stdout)
    assert set(rows) == {"main", "alt"}
    assert all((r["ahead"], r["behind"]) == (0, 0) for r in rows.values()), rows
    assert "ahead 0, behind 0" in text.stdout and "ahead 1" not in text.stdout and "ahead 2" not in text.stdout, text
    rows = _rows(cloned.stdout)
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
        # B edits another body meanwhile: the histories diverge; then A pushes and B's verbs run, one after
        # another (B's edit is its own: before or after A's push, B has not fetched it yet)
        _edit(b, svs[tb], svs[ob], f"B round {round_}")
        # round 1 is the one that reviewed the stale head; there also the same name in another verb
        also = ([["review", str(b), "origin/main"],
                 ["label", str(b), "origin/main", "seg", *map(str, _voxel_of(b, svs[oa])), "--json"]]
                if round_ == 1 else [])
        _, fetched, branches, review, *extra, status, pulled, pushed, after = (
            json.loads(p.stdout) if "--json" in p.args else p.stdout for p in shardscope_batch(
                ["push", str(a)], ["fetch", str(b), "--json"], ["repo", "branches", str(b), "--json"],
                ["review", str(b), "origin/main", "--json"], *also, ["status", str(b), "--json"],
                ["pull", str(b), "--json"], ["push", str(b)], ["status", str(b), "--json"]))
        head = fetched["tracking"]["main"]
        names |= set(fetched["renamed"].values()) | {x["name"] for x in branches}
        # review reviews the head just fetched: A's one body, in every round
        assert review["branch"] == head, (round_, review)
        bodies = {x["body"] for x in review["bodies"]}
        assert svs[ta] in bodies and bodies <= {svs[ta], svs[oa]}, (round_, review)
        if round_ == 1:
            text, label = extra
            assert "0 body(ies) changed" not in text and f"body {svs[ta]}" in text, text
            assert label["body"] == svs[ta]
        rows = {r["branch"]: r for r in status["branches"]}
        assert (rows["main"]["remote"], rows["main"]["ahead"], rows["main"]["behind"]) == (head, 1, 1), rows
        assert pulled["kind"] == "merge"
        with open_repository(b) as repo:
            assert head in repo.version(pulled["head"]).parents  # the pull merged the head review showed
        assert re.search(r"\d+ object\(s\) sent \(", pushed) and "received" not in pushed, pushed
        rows = {r["branch"]: r for r in after["branches"]}
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
    # the second name is not a remote's: an ordinary branch
    refused, _ = shardscope_batch(["repo", "branch", str(b), "main", "origin/mine", "--json"],
                                  ["repo", "branch", str(b), "main", "alice/mine"], expect=[2, 0])
    message = json.loads(refused.stdout)["error"]["message"]
    assert "origin/" in message and "remote-tracking" in message


def test_a_branch_left_by_an_older_fetch_is_migrated(shared: tuple[Path, Path, str, list[int]]) -> None:
    """A repository whose fetch (before this fix) put a divergence on a local branch ``origin/main``:
    ``origin/main`` resolves to the remote-tracking head at once, and the next fetch renames the old
    branch and says so."""
    a, b, _, svs = shared
    _edit(a, svs[0], svs[1], "A")
    _edit(b, svs[2], svs[3], "B")  # B's own edit: before or after A's push, B has not fetched it yet
    _, fetch = shardscope_batch(["push", str(a)], ["fetch", str(b), "--json"])
    fetched = json.loads(fetch.stdout)
    (diverged,) = set(fetched["renamed"].values())
    head = fetched["tracking"]["main"]
    # make it the repository an older fetch left: the divergence on a branch named origin/main
    config = b / "remotes.json"
    shutil.move(config, b / "remotes.json.aside")
    with open_repository(b) as repo:
        repo.rename_branch(diverged, "origin/main")
    shutil.move(b / "remotes.json.aside", config)
    before, review, out, after, again, pulled = (p.stdout for p in shardscope_batch(
        ["repo", "branches", str(b), "--json"], ["review", str(b), "origin/main", "--json"], ["fetch", str(b)],
        ["repo", "branches", str(b), "--json"], ["review", str(b), "origin/main", "--json"],
        ["pull", str(b), "--json"]))
    assert "origin/main" in _names(before)
    assert json.loads(review)["branch"] == head  # the tracking head, first
    assert "origin/main" in out and "renamed" in out, out
    assert not any(n.startswith("origin/") for n in _names(after))
    assert json.loads(again)["branch"] == head
    assert json.loads(pulled)["kind"] == "merge"


def test_adding_a_remote_renames_branches_under_its_name(shared: tuple[Path, Path, str, list[int]]) -> None:
    _, b, remote, _ = shared
    _, added, branches = (p.stdout for p in shardscope_batch(
        ["repo", "branch", str(b), "main", "upstream/topic"], ["remote", "add", str(b), "upstream", remote],
        ["repo", "branches", str(b), "--json"]))
    assert "upstream/topic" in added and "renamed" in added, added
    names = _names(branches)
    assert "upstream/topic" not in names and any(n.startswith("topic+upstream-") for n in names), names
