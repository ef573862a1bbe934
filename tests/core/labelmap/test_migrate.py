"""Migrating a repository written by the replay-era code (format 1) to versioned records (format 2).

The old repository is built by the code of commit 0a4bfea itself (``git archive`` of its source tree,
run in a subprocess by tests/core/labelmap/legacy_builder.py), which also records what every version
read then. After ``shardscope repo migrate`` every version reads the same — every voxel's body,
bodies, sizes, supervoxels, histories, logs, undo/redo availability — the store verifies, and the
open head's last edit undoes and redoes as if it had been made now.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.labelmap import LabelmapFormatError, open_labelmap
from napari_shardscope.core.labelmap.migrate import labelmaps_to_migrate, migrate_labelmap, migrate_repository
from napari_shardscope.core.versioned import open_repository
from tests.cli_batch import run_commands

#: Commits whose code wrote format 1: the one the records format was designed against, and main's last
#: before the records format landed (remote-tracking names, bounded reads, tables, Progress(done, total, what)).
OLD_COMMITS = ("0a4bfea", "25a0b04")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", params=OLD_COMMITS)
def legacy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository the old code built, with what it read (built once per session and commit)."""
    commit = str(request.param)
    git = shutil.which("git")
    if git is None or subprocess.run([git, "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                                     capture_output=True).returncode != 0:
        pytest.skip(f"commit {commit} (the replay-era format) is not in this checkout's history")
    tmp = tmp_path_factory.mktemp("legacy")
    archive = subprocess.run([git, "-C", str(ROOT), "archive", commit, "src"], capture_output=True, check=True,
                             timeout=120)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp / "old", filter="data")
    out = tmp / "built"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "old" / "src"), str(ROOT)])}
    subprocess.run([sys.executable, str(ROOT / "tests" / "core" / "labelmap" / "legacy_builder.py"), str(out)],
                   env=env, check=True, timeout=600, capture_output=True)
    return out


@pytest.fixture
def work(legacy: Path, tmp_path: Path) -> Path:
    shutil.copytree(legacy, tmp_path / "w")
    return tmp_path / "w"


def shardscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *args], capture_output=True, text=True,
                          timeout=600)


def test_an_old_labelmap_is_refused_until_migrated(work: Path) -> None:
    with open_repository(work / "repo") as repo:
        assert labelmaps_to_migrate(repo) == ["seg"]
        with pytest.raises(LabelmapFormatError, match=f"shardscope repo migrate {work / 'repo'}"):
            open_labelmap(repo, "seg")
    done = shardscope("labelmap", "info", str(work / "repo"), "seg")
    assert done.returncode != 0 and "repo migrate" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_migration_keeps_every_version_and_its_history(work: Path) -> None:
    expected = json.loads((work / "expected.json").read_text())
    # migrate, then verify: one child process runs both command lines (tests/cli_batch.py, real pipes)
    done, verified = run_commands([["repo", "migrate", str(work / "repo"), "--json"],
                                   ["repo", "verify", str(work / "repo")]], timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    step = next(s for s in report["steps"] if s["name"] == "labelmap")
    assert step["labelmaps"] == ["seg"] and report["ok"] and step["unreconciled"] == []
    assert step["versions"] == len(expected["versions"]) and step["mutations"] > 10
    assert verified.returncode == 0, verified.stderr
    with open_repository(work / "repo") as repo:
        lm = open_labelmap(repo, "seg")
        for uuid, want in expected["versions"].items():
            v = lm.at(uuid)
            np.testing.assert_array_equal(v.read_bodies(), np.load(work / f"bodies-{uuid}.npy"))
            svs = np.asarray([int(s) for s in want["bodies"]], dtype=np.uint64)
            assert v.bodies_of(svs).tolist() == list(want["bodies"].values())
            for body, size in want["sizes"].items():
                assert v.size(int(body)) == size
                assert v.supervoxels(int(body)) == want["supervoxels"][body]
                assert [h.mutation.mutation_id for h in v.history(int(body))] == want["history"][body]
                box = v.bbox(int(body))  # the converted index has no in-block boxes: the face blocks are read
                assert [list(box.lo), list(box.hi)] == want["bbox"][body]
            assert [e.mutation.mutation_id for e in v.mutations()] == want["mutations"]
            assert (v.can_undo, v.can_redo) == (want["can_undo"], want["can_redo"])
        # the open head's last edit, made before the migration, undoes and redoes now
        head = lm.at(expected["head"])
        head.undo()
        np.testing.assert_array_equal(head.read_bodies(), np.load(work / "before-last.npy"))
        head.redo()
        np.testing.assert_array_equal(head.read_bodies(), np.load(work / f"bodies-{expected['head']}.npy"))
        # a rebuilt index (shardscope index --force) keeps voxel boxes: the same boxes without reading voxels
        from napari_shardscope.core.labelmap.index_job import build_label_index

        build_label_index(repo, "seg", overwrite=True)
        lm = open_labelmap(repo, "seg")
        head = lm.at(expected["head"])
        assert lm.base_index().has_boxes
        for uuid, want in expected["versions"].items():
            v = lm.at(uuid)
            for body in want["bbox"]:
                box = v.bbox(int(body))
                assert [list(box.lo), list(box.hi)] == want["bbox"][body]
        # and editing goes on: new ids above every old one
        ids = expected["ids"]
        new = head.cleave(ids[8], [ids[10]])
        assert new > max(expected["split"] + [expected["cleaved"]])
        assert repo.verify() == []
        again = migrate_repository(repo)
        assert again.labelmaps == () and again.problems == ()


def test_a_killed_migration_loses_nothing(work: Path) -> None:
    """SIGKILL while ``repo migrate`` rewrites the labelmap (after its first progress line): the labelmap is
    whole in one format or the other, the store verifies, and migrating again gives every version as it was."""
    expected = json.loads((work / "expected.json").read_text())
    repo_path = work / "repo"
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "repo", "migrate", str(repo_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the first progress line: the rewrite has started
        assert line.startswith("migrate: "), line
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with open_repository(repo_path) as repo:
        assert repo.verify() == []
        left = labelmaps_to_migrate(repo)
        assert left in (["seg"], [])
        if left:  # the killed transaction left nothing: still the old format, refused as before
            with pytest.raises(LabelmapFormatError):
                open_labelmap(repo, "seg")
    done = shardscope("repo", "migrate", str(repo_path), "--json")
    assert done.returncode == 0, done.stderr
    with open_repository(repo_path) as repo:
        assert labelmaps_to_migrate(repo) == [] and repo.verify() == []
        lm = open_labelmap(repo, "seg")
        for uuid, want in expected["versions"].items():
            v = lm.at(uuid)
            np.testing.assert_array_equal(v.read_bodies(), np.load(work / f"bodies-{uuid}.npy"))
            assert [e.mutation.mutation_id for e in v.mutations()] == want["mutations"]
            assert (v.can_undo, v.can_redo) == (want["can_undo"], want["can_redo"])


# -- migrating in batches: each transaction moves the marker on; a kill between them loses nothing ----------


def stored(path: Path) -> tuple[list[tuple[bytes, int, bool, bytes]], list[tuple[bytes, bytes]], dict[str, object]]:
    """Every entry of the labelmap at every version, its unversioned keys and its configuration."""
    with open_repository(path) as repo:
        inst = repo.instance("seg")
        with repo.rewriting() as rw:  # the one reader of every version's entries; writes nothing here
            entries = list(rw.scan_all(inst, b""))
        return entries, repo.scan_unversioned(inst), dict(inst.config)


def reads_as_before(path: Path, work: Path) -> None:
    """Every version reads what the format-1 code read (voxels' bodies, logs, undo/redo availability)."""
    expected = json.loads((work / "expected.json").read_text())
    with open_repository(path) as repo:
        assert labelmaps_to_migrate(repo) == [] and repo.verify() == []
        lm = open_labelmap(repo, "seg")
        for uuid, want in expected["versions"].items():
            v = lm.at(uuid)
            np.testing.assert_array_equal(v.read_bodies(), np.load(work / f"bodies-{uuid}.npy"))
            for body, size in want["sizes"].items():
                assert v.size(int(body)) == size
                assert [h.mutation.mutation_id for h in v.history(int(body))] == want["history"][body]
            assert [e.mutation.mutation_id for e in v.mutations()] == want["mutations"]
            assert (v.can_undo, v.can_redo) == (want["can_undo"], want["can_redo"])


def transactions(path: Path, **batch: int) -> int:
    """Migrate ``path`` in process with the given batch sizes; how many rewriting transactions it took."""
    with open_repository(path) as repo:
        real = repo.rewriting
        count = [0]

        def counted(**kwargs: float | None):  # type: ignore[no-untyped-def]
            count[0] += 1
            return real(**kwargs)

        repo.rewriting = counted  # type: ignore[method-assign]
        migrate_labelmap(repo, "seg", **batch)  # type: ignore[arg-type]
        return count[0]


def test_migration_in_batches_equals_one_transaction(work: Path, tmp_path: Path) -> None:
    """One mutation per transaction writes exactly what one transaction for the whole history writes."""
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    shutil.copytree(work / "repo", whole)
    shutil.copytree(work / "repo", pieces)
    mutations = 0
    with open_repository(work / "repo") as repo:
        merges = sum(1 for v in repo.versions() if len(v.parents) > 1)
        for v in repo.versions():
            with repo.read(v) as view:
                mutations += sum(1 for _ in view.read_log("seg", own=True))
    # the base tables, then the history: each merge's start a transaction of its own, between two of the rest
    assert transactions(whole, batch=10**9, batch_keys=10**9) == 2 + 2 * merges
    assert transactions(pieces, batch=1, batch_keys=1) > mutations  # at least one per mutation
    assert stored(pieces) == stored(whole)
    reads_as_before(pieces, work)


def _kill_worker(path: Path, kill_at: int, where: str) -> None:
    worker = [sys.executable, "-m", "tests.core.labelmap.migrate_worker", str(path), str(kill_at), where]
    proc = subprocess.Popen(worker, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    out, err = proc.communicate(timeout=300)
    assert out.startswith(b"migrating\n"), err.decode()
    assert proc.returncode == -signal.SIGKILL, (out + err).decode()


# The kill-and-resume rounds run over the later old commit's repository only: resuming reads the migration's
# own marker and the format-1 records, which both commits write alike; what differs between them (remote-tracking
# names, tables) is converted by the same code whether or not a run was killed first, and the tests above and
# below check that conversion for both. (Each round is a migration killed, then one run to the end: eight of
# them per commit were the file's largest cost.) The default run kills at the six chosen points; `-m slow` adds
# seeded random ones over both commits. The runs to the end share one `shardscope` process (`run_commands`).
@pytest.mark.parametrize("legacy", [OLD_COMMITS[-1]], indirect=True)
def test_a_migration_killed_between_batches_completes_when_run_again(work: Path, tmp_path: Path) -> None:
    """SIGKILL inside or right after chosen transactions of the migration (the first, the second, the middle,
    the last two): the store verifies, the labelmap is refused until migrated (naming ``repo migrate``), and
    ``shardscope repo migrate`` run again ends with what an uninterrupted migration writes, byte for byte."""
    kill_between_batches(work, tmp_path, random_kills=0)


@pytest.mark.slow
@pytest.mark.parametrize("legacy", OLD_COMMITS, indirect=True)
def test_a_migration_killed_at_random_transactions_completes_when_run_again(work: Path, tmp_path: Path) -> None:
    """The chosen kill points and twelve seeded random ones, over both old commits."""
    kill_between_batches(work, tmp_path, random_kills=12)


def kill_between_batches(work: Path, tmp_path: Path, random_kills: int) -> None:
    """Kill one migration per planned point (each a copy of the old repository), check each copy, then migrate
    every copy again with ``shardscope repo migrate`` (one command line per copy, the runs sharing one child
    process) and compare each with an uninterrupted migration."""
    reference = tmp_path / "reference"
    shutil.copytree(work / "repo", reference)
    total = transactions(reference, batch=1, batch_keys=1)
    want = stored(reference)
    rng = random.Random(28)
    plan = [(1, "inside"), (1, "after"), (2, "after"), (total // 2, "inside"), (total - 1, "after"),
            (total, "inside")]
    plan += [(rng.randint(2, total - 1), rng.choice(["inside", "after"])) for _ in range(random_kills)]
    paths = [tmp_path / f"round{round_}" for round_ in range(len(plan))]
    for round_, ((kill_at, where), path) in enumerate(zip(plan, paths, strict=True)):
        shutil.copytree(work / "repo", path)
        _kill_worker(path, kill_at, where)
        with open_repository(path) as repo:
            assert repo.verify() == [], f"round {round_}"
            assert labelmaps_to_migrate(repo) == ["seg"], f"round {round_}: killed before the last commit"
            with pytest.raises(LabelmapFormatError, match="repo migrate"):
                open_labelmap(repo, "seg")
    runs = run_commands([["repo", "migrate", str(path), "--json"] for path in paths], timeout=600)
    for round_, ((kill_at, where), path, done) in enumerate(zip(plan, paths, runs, strict=True)):
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["ok"]
        assert stored(path) == want, f"round {round_}: killed {where} transaction {kill_at} of {total}"
        reads_as_before(path, work)
        shutil.rmtree(path)


def test_two_processes_migrating_one_repository_end_with_the_one_run_result(work: Path, tmp_path: Path) -> None:
    """Two ``repo migrate`` processes at once, one mutation per transaction each: every transaction starts
    from the marker it reads in the store, so however they interleave the store ends as one run leaves it."""
    reference, path = tmp_path / "reference", tmp_path / "both"
    shutil.copytree(work / "repo", reference)
    shutil.copytree(work / "repo", path)
    transactions(reference, batch=1, batch_keys=1)
    worker = [sys.executable, "-m", "tests.core.labelmap.migrate_worker", str(path), "0", "never"]
    procs = [subprocess.Popen(worker, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.splitlines()[-1].startswith(b"done"), (out + err).decode()
    assert stored(path) == stored(reference)
    reads_as_before(path, work)


@pytest.mark.parametrize("legacy", [OLD_COMMITS[-1]], indirect=True)
@pytest.mark.parametrize("other", ["finished", "begun"])
def test_a_run_whose_tables_another_run_replaced_meanwhile_ends_as_one_run(work: Path, tmp_path: Path, other: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The interleaving the two-process test above meets only by chance, made certain: this run reads no
    marker, then another ``repo migrate`` process runs before this one reads the format-1 tables — to the end
    (``finished``), or killed after its first transaction, the one that replaces those tables and stores the
    marker (``begun``). The old tables are then gone; this run must not call that an interrupted creation
    (it did: ``LabelmapStateError``), but resume from the other run's marker, or find nothing to do."""
    import napari_shardscope.core.labelmap.migrate as labelmap_migrate

    reference, path = tmp_path / "reference", tmp_path / "raced"
    shutil.copytree(work / "repo", reference)
    shutil.copytree(work / "repo", path)
    transactions(reference, batch=1, batch_keys=1)
    real = labelmap_migrate._base_tables

    def another_run_first(*args: object) -> object:
        if other == "finished":
            done = shardscope("repo", "migrate", str(path), "--json")
            assert done.returncode == 0, done.stderr
        else:
            _kill_worker(path, 1, "after")
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(labelmap_migrate, "_base_tables", another_run_first)
    with open_repository(path) as repo:
        migrate_labelmap(repo, "seg", batch=1, batch_keys=1)
        assert repo.verify() == []
    assert stored(path) == stored(reference)
    reads_as_before(path, work)
