"""Two local repositories in two processes share one remote (a directory, and S3 through moto).

A makes the repository and pushes it; B clones it. Both edit (merge and cleave) different bodies,
commit, and push the same branch at the same moment: exactly one push wins, the other is refused
("fetch and merge first"), pulls (a labelmap merge version), and pushes. Afterwards every committed
version of both is on the remote and bit-identical in both repositories, both read the same
bodies, and no id made in A was made in B.

The two processes are the edits (ids reserved by two writers at once) and the racing pushes; the loser's
pull and push and the winner's pull that follow run one after another, so they run in this process through
the same calls the worker makes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.labelmap.remote import pull_merger
from napari_shardscope.core.versioned import Repository, open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.verify import remote_versions, verify_remote
from tests.core.versioned.remotes.helpers import bodies_at, made_ids, make_repo
from tests.moto_s3 import S3Server

ROOT = Path(__file__).resolve().parents[4]
STEP_TIMEOUT_S = 240


def worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.core.versioned.remotes.worker", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen[str]) -> tuple[int, dict[str, object]]:
    out, err = p.communicate(timeout=STEP_TIMEOUT_S)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"worker printed nothing (exit {p.returncode}): {err[-2000:]}"
    return p.returncode, json.loads(lines[-1])


def same_node(a: Repository, b: Repository, uuid: str) -> bool:
    return dataclasses.replace(a.read_node(uuid), branch="") == dataclasses.replace(b.read_node(uuid), branch="")


@pytest.fixture
def child_env(remote_url: str, request: pytest.FixtureRequest) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    if remote_url.startswith("s3://"):
        server: S3Server = request.getfixturevalue("s3")
        env.update(server.env())
    return env


def test_two_processes_race_merge_and_agree(base: Path, remote_url: str, child_env: dict[str, str],
                                            tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", remote_url)
    R.push(a)
    n = len(open_labelmap(a, "seg").index_summary().supervoxels)
    a.close()
    R.clone(remote_url, tmp_path / "b")
    half = n // 2
    edits = [worker(child_env, "edit", str(tmp_path / "a"), "1", "0", str(half)),
             worker(child_env, "edit", str(tmp_path / "b"), "2", str(half), str(n))]
    done = [finish(p) for p in edits]
    assert [code for code, _ in done] == [0, 0], done
    made = [[e for e in out["edits"]] for _, out in done]  # type: ignore[union-attr]
    mutations = [{e["mutation"] for e in m} for m in made]
    new_bodies = [{e["new_body"] for e in m if "new_body" in e} for m in made]
    assert all(len(x) == 2 for x in mutations) and all(new_bodies)
    assert not mutations[0] & mutations[1], "A and B made the same mutation ids"
    assert not new_bodies[0] & new_bodies[1], "A and B made the same body ids"
    go = tmp_path / "go"
    pushes = [worker(child_env, "push", str(tmp_path / name), str(go)) for name in ("a", "b")]
    go.touch()
    outcomes = [finish(p) for p in pushes]
    codes = sorted(code for code, _ in outcomes)
    assert codes == [0, 7], outcomes  # exactly one wins; the other is a conflict
    loser = ("a", "b")[[code for code, _ in outcomes].index(7)]
    winner = "b" if loser == "a" else "a"
    assert "fetch and merge first" in str(outcomes[("a", "b").index(loser)][1]["message"])
    with open_repository(tmp_path / loser) as repo:
        pulled = R.pull(repo, merge=pull_merger()).to_json()
        assert pulled["kind"] == "merge", pulled
        R.push(repo)
    with open_repository(tmp_path / winner) as repo:
        pulled = R.pull(repo, merge=pull_merger()).to_json()
        assert pulled["kind"] == "fast-forward", pulled

    ra, rb = open_repository(tmp_path / "a"), open_repository(tmp_path / "b")
    try:
        assert verify_remote(remote_url) == []
        on_remote = set(remote_versions(remote_url))
        for repo in (ra, rb):
            committed = {v.uuid for v in repo.versions() if v.locked}
            assert committed <= on_remote, "a committed version is missing on the remote"
            assert repo.verify() == []
        assert {v.uuid for v in ra.versions()} == {v.uuid for v in rb.versions()} == on_remote
        for uuid in on_remote:
            assert same_node(ra, rb, uuid), uuid
        assert ra.head("main").uuid == rb.head("main").uuid
        for x, y in zip(bodies_at(ra, "main"), bodies_at(rb, "main"), strict=True):
            assert np.array_equal(x, y)
        # both histories now hold both sides' edits, each id once
        assert made_ids(ra) == made_ids(rb) == (mutations[0] | mutations[1], new_bodies[0] | new_bodies[1])
    finally:
        ra.close()
        rb.close()
