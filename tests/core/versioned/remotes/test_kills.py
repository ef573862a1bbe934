"""kill -9 at random points of a push and of a fetch: nothing is ever half there.

After every kill: the remote's refs reach only complete, hash-verified objects; the local
repository opens, passes ``verify`` and holds every committed version it had (bit-identical); and a
retry finishes the job. Kill points are drawn (seeded) over the measured length of the operation,
counted from the moment the worker has finished importing. A short subset runs by default; the
full run (>= 100 kills) is marked slow.

Only what is killed, and the run that measures how long the killed operation takes, is a separate process:
the remote a fetch reads is pushed, and the retry after each kill is run, in this process through the same
library call the worker makes (``push``/``fetch``: the retry is about the state the kill left, not about a
process starting).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.versioned import Repository, open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.verify import remote_versions, verify_remote
from tests.core.versioned.remotes.helpers import edit, make_repo
from tests.moto_s3 import S3Server

ROOT = Path(__file__).resolve().parents[4]
WAIT_S = 120.0
EDITS = 8


def env_for(s3: S3Server | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    if s3 is not None:
        env.update(s3.env())
    return env


def run_worker(env: dict[str, str], verb: str, repo: Path, kill_after: float | None) -> tuple[bool, float]:
    """Run a worker; with ``kill_after``, SIGKILL it that long after it is ready. (killed, seconds it ran)."""
    p = subprocess.Popen([sys.executable, "-m", "tests.core.versioned.remotes.worker", verb, str(repo)], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()  # {"ready": true}: imports done, the operation starts now
    assert "ready" in line, line
    start = time.monotonic()
    if kill_after is None:
        p.communicate(timeout=WAIT_S)
        assert p.returncode == 0
        return False, time.monotonic() - start
    try:
        p.wait(timeout=kill_after)
        return False, time.monotonic() - start
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate(timeout=WAIT_S)
        return True, time.monotonic() - start


def nodes(repo: Repository) -> dict[str, object]:
    return {v.uuid: dataclasses.replace(repo.read_node(v), branch="") for v in repo.versions() if v.locked}


def check_local(path: Path, before: dict[str, object]) -> dict[str, object]:
    repo = open_repository(path)
    try:
        assert repo.verify() == []
        now = nodes(repo)
        for uuid, node in before.items():
            assert now[uuid] == node, f"committed version {uuid} changed"
        return now
    finally:
        repo.close()


@dataclasses.dataclass(frozen=True)
class Pristine:
    full: Path  # a repository with a root and several committed edits
    digest: dict[str, object]  # its committed versions
    root_only: Path  # the same repository when only its root was committed (a fetch brings every edit)
    root_digest: dict[str, object]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, base: Path) -> Pristine:
    work = tmp_path_factory.mktemp("kills")
    repo = make_repo(work / "a", base)
    root_digest = nodes(repo)
    repo.close()
    shutil.copytree(work / "a", work / "root-only")
    repo = open_repository(work / "a")
    rng = np.random.default_rng(42)
    for i in range(EDITS):
        edit(repo, ("merge", "cleave")[i % 2], rng)
    digest = nodes(repo)
    repo.close()
    return Pristine(work / "a", digest, work / "root-only", root_digest)


def retry(kind: str, path: Path) -> None:
    """The retry after a kill, in this process: the worker's own call (``push`` or ``fetch``) on the state left."""
    repo = open_repository(path)
    try:
        R.push(repo) if kind == "push" else R.fetch(repo)
    finally:
        repo.close()


def with_remote(source: Path, dest: Path, url: str) -> Path:
    shutil.copytree(source, dest)
    repo = open_repository(dest)
    R.add_remote(repo, "origin", url)
    repo.close()
    return dest


def kill_rounds(kind: str, remote_base: str, env: dict[str, str], p: Pristine, work: Path, rounds: int,
                seed: int) -> int:
    """``rounds`` kills of a push (to a fresh remote each) or a fetch (into a fresh copy each); how many killed."""
    rng = np.random.default_rng(seed)
    full_url = f"{remote_base}/full"
    if kind == "push":
        _, length = run_worker(env, "push", with_remote(p.full, work / "full", full_url), None)
    else:  # the remote a fetch reads: pushed here; the fetch's own length is measured in a worker
        retry("push", with_remote(p.full, work / "full", full_url))
        _, length = run_worker(env, "fetch", with_remote(p.root_only, work / "probe", full_url), None)
    killed = 0
    for i in range(rounds):
        # over the first 70% of the measured length: an operation that runs faster this time is still cut
        delay = float(rng.uniform(0.0, max(0.7 * length, 0.02)))
        if kind == "push":
            url = f"{remote_base}/push-{i}"
            here = with_remote(p.full, work / f"push-{i}", url)
            was_killed, _ = run_worker(env, "push", here, delay)
            found = verify_remote(url)
            assert found in ([], [f"{url}: no refs object"]), found  # refs reach only complete objects
            check_local(here, p.digest)
            retry("push", here)  # the retry finishes
            assert verify_remote(url) == []
            assert set(remote_versions(url)) == set(p.digest)
        else:
            here = with_remote(p.root_only, work / f"fetch-{i}", full_url)
            was_killed, _ = run_worker(env, "fetch", here, delay)
            got = check_local(here, p.root_digest)
            assert all(got[u] == p.digest[u] for u in got)  # whatever arrived is whole and exact
            retry("fetch", here)  # the retry finishes
            assert check_local(here, p.digest).keys() == p.digest.keys()
        killed += was_killed
    return killed


@pytest.mark.parametrize("kind", ["push", "fetch"])
def test_kill_dir_short(kind: str, pristine: Pristine, tmp_path: Path) -> None:
    kill_rounds(kind, str(tmp_path / "remotes"), env_for(None), pristine, tmp_path, rounds=3, seed=1)


@pytest.mark.parametrize("kind", ["push", "fetch"])
def test_kill_s3_short(kind: str, pristine: Pristine, s3: S3Server, tmp_path: Path) -> None:
    kill_rounds(kind, s3.url("kills"), env_for(s3), pristine, tmp_path, rounds=2, seed=2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["push", "fetch"])
def test_kill_many(kind: str, pristine: Pristine, s3: S3Server, tmp_path: Path) -> None:
    """>= 100 kills in all (>= 50 per verb): 60 rounds per verb on a directory, 15 on S3."""
    # (each round is a fresh copy and a fresh remote or clone, so every kill cuts a full operation)
    killed = kill_rounds(kind, str(tmp_path / "remotes"), env_for(None), pristine, tmp_path / "d", rounds=60,
                         seed=10)
    killed += kill_rounds(kind, s3.url(f"many-{kind}"), env_for(s3), pristine, tmp_path / "s", rounds=15, seed=11)
    print(f"{kind}: {killed} of 75 rounds killed the worker mid-operation")
    assert killed >= 50  # kill points are drawn over the operation's measured length: most land inside it
