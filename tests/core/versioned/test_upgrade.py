"""Format-1 repositories (every version record read at open) are upgraded to format 2 in place, in one
transaction, the first time they are opened writable; SIGKILL at any moment of the upgrade leaves the
old store untouched or the new one complete; a read-only one is refused naming ``repo migrate``;
``shardscope repo migrate`` reports what it did, then verifies.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned import (
    Repository,
    RepositoryFormatError,
    create_repository,
    open_keyvalue,
    open_repository,
)
from napari_shardscope.core.versioned.migrate import StepOutcome, migrate_repository, register_migration
from napari_shardscope.core.versioned.repository import MARKER_FILE
from tests.cli_batch import run_commands
from tests.core.versioned.format1 import downgrade_to_format_1, stored_format

ROOT = Path(__file__).resolve().parents[3]
ENGINES = ["lmdb", "sqlite"]


def make_history(path: Path, engine: str, n: int = 30) -> None:
    """Branches, merges, data and notes, committed and open versions, closed again."""
    with create_repository(path, engine=engine) as repo:
        kv = open_keyvalue(repo, "kv", create=True)
        kv.put("main", "k", b"root")
        repo.commit("main", "root")
        with repo.batch() as b:
            for i in range(n):
                if i % 7 == 3:
                    side = b.new_version(b.version("main"), f"side{i}")
                    b.write(side).put(kv.instance, b"side", b"%d" % i)
                    b.commit(side, f"side {i}")
                    v = b.merge(b.version("main"), side, policy="ours").version
                else:
                    v = b.new_version(b.version("main"))
                b.write(v).put(kv.instance, b"k", b"%d" % i)
                b.add_note(v, f"note {i}")
                b.commit(v, f"v{i}")
        repo.new_version("main")  # an open head


def observe(repo: Repository) -> list[object]:
    """Everything a user sees of the DAG and the data, for before/after comparisons."""
    out: list[object] = [repo.versions(), repo.branches(), [v.uuid for v in repo.log("main")]]
    kv = open_keyvalue(repo, "kv")
    for v in repo.versions():
        out.append((v.uuid, dict(kv.items(v)), [n.text for n in repo.notes(v)]))
    return out


@pytest.fixture(params=ENGINES)
def old_repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, list[object]]]:
    """A format-1 repository and what it shows (as the current library reads it after upgrading)."""
    path = tmp_path / "repo"
    make_history(path, request.param)
    with open_repository(path) as repo:
        expected = observe(repo)
    downgrade_to_format_1(path)
    assert stored_format(path) == (1, 0)
    yield path, expected


def test_opening_upgrades_in_place_once(old_repo: tuple[Path, list[object]]) -> None:
    path, expected = old_repo
    with open_repository(path) as repo:
        assert repo.upgraded_from == 1
        assert observe(repo) == expected
        assert repo.verify() == []
    assert stored_format(path)[0] == 2
    assert json.loads((path / MARKER_FILE).read_text())["version"] == 2
    with open_repository(path) as repo:
        assert repo.upgraded_from is None  # done once
        assert observe(repo) == expected


def test_an_open_handle_of_the_old_store_sees_the_generation_move(old_repo: tuple[Path, list[object]]) -> None:
    """The upgrade bumps the generation: a handle of an older library re-reads the format record then
    (and refuses format 2, as its own check does), instead of writing format-1 records into it."""
    path, _ = old_repo
    from napari_shardscope.core.versioned.engines import open_engine
    from tests.core.versioned.format1 import engine_of

    def generation() -> int:
        kv = open_engine(engine_of(path), path, create=False, durable=True)
        try:
            with kv.read() as txn:
                return K.unpack_u64(txn.get(K.GENERATION_KEY) or b"")
        finally:
            kv.close()

    before = generation()
    open_repository(path).close()
    assert generation() == before + 1


def test_migrate_reports_the_upgrade_then_nothing(old_repo: tuple[Path, list[object]]) -> None:
    path, expected = old_repo
    # the three runs follow each other: one child process runs them (tests/cli_batch.py, real pipes)
    cmd = ["repo", "migrate", str(path), "--json"]
    first, again, text = run_commands([cmd, cmd, cmd[:-1]], timeout=300)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["ok"] and report["changed"] and report["problems"] == []
    assert report["steps"][0] == {"name": "repository-format", "from": 1, "to": 2,
                                  "done": "repository format 1 upgraded to 2 (DAG records read on demand)"}
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False
    assert text.returncode == 0
    assert text.stdout.splitlines() == ["repository-format: up to date", "labelmap: up to date",
                                        "annotation: up to date", "ok"]
    with open_repository(path) as repo:
        assert observe(repo) == expected


def test_registered_steps_run_in_order_then_verify(tmp_path: Path) -> None:
    """The hook another data type's migration plugs into: steps run in registration order."""
    ran: list[str] = []
    register_migration("test-a", lambda repo, progress: ran.append("a") or "did a")
    register_migration("test-b", lambda repo, progress: ran.append("b") and None)
    try:
        with create_repository(tmp_path / "r") as repo:
            report = migrate_repository(repo)
        assert ran == ["a", "b"]
        assert [(s.name, s.done) for s in report.steps][-2:] == [("test-a", "did a"), ("test-b", None)]
        assert report.problems == () and report.changed
    finally:
        from napari_shardscope.core.versioned import migrate

        migrate._STEPS[:] = [s for s in migrate._STEPS if not s.name.startswith("test-")]


PLUGGED = """
import sys
import napari_shardscope.core.cli.repo as R
R.MIGRATING_TYPES += ("tests.core.versioned.migration_step",)
from napari_shardscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_repo_migrate_runs_a_data_types_step_after_the_format(old_repo: tuple[Path, list[object]]) -> None:
    """One verb upgrades everything: the format, then each data type's registered step, with progress on stderr."""
    path, _ = old_repo
    cmd = [sys.executable, "-c", PLUGGED, "repo", "migrate", str(path)]
    first = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    steps = json.loads(first.stdout)["steps"]
    assert [s["name"] for s in steps] == ["repository-format", "labelmap", "annotation", "test-kv"]
    assert steps[0]["from"] == 1 and steps[3] == {"name": "test-kv", "done": "marked kv migrated", "instances": ["kv"]}
    assert "migrate: 1/1 kv" in first.stderr
    again = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0 and again.stderr == ""
    assert again.stdout.splitlines() == [
        "repository-format: up to date", "labelmap: up to date", "annotation: up to date", "test-kv: up to date",
        "ok"]


def test_a_step_reports_figures_and_what_it_left(tmp_path: Path) -> None:
    """A data type's step (the labelmap's) gives figures for --json and what it could not do: the
    latter are problems (exit 1), listed before what verify finds; progress reaches the step."""
    seen: list[tuple[int, int, str]] = []

    def step(repo: object, progress: object) -> StepOutcome:
        assert callable(progress)
        progress(1, 1, "seg")
        return StepOutcome("migrated labelmap(s) seg", {"labelmaps": ["seg"], "versions": 3}, ("seg@abc: left",))

    register_migration("test-figures", step)
    try:
        with create_repository(tmp_path / "r") as repo:
            report = migrate_repository(repo, progress=lambda d, t, w: seen.append((d, t, w)))
        doc = report.to_json()
        assert seen == [(1, 1, "seg")]
        assert doc["steps"][-1] == {"name": "test-figures", "done": "migrated labelmap(s) seg",
                                    "labelmaps": ["seg"], "versions": 3}
        assert doc["problems"] == ["seg@abc: left"] and doc["ok"] is False and doc["changed"] is True
    finally:
        from napari_shardscope.core.versioned import migrate

        migrate._STEPS[:] = [s for s in migrate._STEPS if not s.name.startswith("test-")]


# -- kill -9 during the upgrade ------------------------------------------------------------------------


def _spawn(path: Path, kill_at: int | None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.core.versioned.upgrade_worker", str(path)]
    return subprocess.Popen([*args, *([] if kill_at is None else [str(kill_at)])], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("engine", ENGINES)
def test_sigkill_during_the_upgrade_leaves_the_old_or_the_new_store(tmp_path: Path, engine: str) -> None:
    """Every deliberate kill point (the 1st, a middle and the last ancestor set; after every record, before the
    commit) and two kills at random moments of a normal run."""
    kill_during_the_upgrade(tmp_path, engine, random_kills=2)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_sigkill_during_the_upgrade_many_random_moments(tmp_path: Path, engine: str) -> None:
    """The deliberate kill points and 30 kills at random moments of a normal run."""
    kill_during_the_upgrade(tmp_path, engine, random_kills=30)


def kill_during_the_upgrade(tmp_path: Path, engine: str, random_kills: int) -> None:
    """Kill a process upgrading a copy of one format-1 repository at each point; each copy is the old store or
    the new one, complete, with the same history and data."""
    pristine = tmp_path / "pristine"
    make_history(pristine, engine, n=300)
    with open_repository(pristine) as repo:
        expected = observe(repo)
    downgrade_to_format_1(pristine)
    rng = random.Random(5)
    outcomes = {1: 0, 2: 0}
    # kills inside the transaction at chosen points (the 1st, a middle, the last ancestor set; after every
    # record, before the commit), then kills at random moments of a normal run
    plan: list[tuple[int | None, float]] = [(1, 0.0), (150, 0.0), (303, 0.0), (0, 0.0)]
    plan += [(None, rng.uniform(0.0, 1.0)) for _ in range(random_kills)]
    for round_, (kill_at, delay) in enumerate(plan):
        path = tmp_path / f"round{round_}"
        shutil.copytree(pristine, path)
        proc = _spawn(path, kill_at)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"opening\n", proc.stderr.read() if proc.stderr else b""
        if kill_at is None:
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        if kill_at is not None:
            assert proc.returncode == -signal.SIGKILL, err.decode()
        version, extra = stored_format(path)
        outcomes[version] += 1
        if version == 1:
            assert extra == 0, f"round {round_}: a format-1 store holds {extra} format-2 records (torn upgrade)"
        else:
            assert version == 2
        with open_repository(path) as repo:  # finishes the upgrade if it was cut short
            assert repo.upgraded_from == (1 if version == 1 else None)
            assert repo.verify() == []
            assert observe(repo) == expected, f"round {round_}: the store changed"
        shutil.rmtree(path)
    assert outcomes[1] >= 4  # every deliberate kill left the old store


# -- a read-only format-1 repository ---------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs (remounted read-only by the test); root ignores ``chmod``, so this is how to refuse writes."""
    where = tmp_path / "fs"
    where.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != "lock.mdb"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_read_only_format_1_repository_is_refused_naming_migrate(small_fs: Path, engine: str) -> None:
    path = small_fs / "repo"
    make_history(path, engine, n=5)
    downgrade_to_format_1(path)
    before = _tree(path)
    done = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")
    try:
        with pytest.raises(RepositoryFormatError, match="shardscope repo migrate"):
            open_repository(path)
        cli = subprocess.run([sys.executable, "-m", "napari_shardscope", "repo", "log", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 5 and "repo migrate" in cli.stderr and "Traceback" not in cli.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True, timeout=30)
    assert _tree(path) == before
    assert stored_format(path) == (1, 0)
