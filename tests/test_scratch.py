"""Where a test run's scratch files go (``tests/scratch.py``): RAM when there is room, one ``TMPDIR`` per run
removed at its end, and nothing changed where the caller chose."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests import scratch


def test_a_run_gets_its_own_tmpdir_under_the_ram_filesystem_or_the_disk_and_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.delenv("PYTEST_DEBUG_TEMPROOT", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # restored afterwards: the suite's own run directory
    expected_root = scratch.ram_filesystem() or Path(tempfile.gettempdir())
    tempfile.tempdir = None

    run = scratch.use_run_scratch()
    assert run is not None and run.is_dir() and run.parent == expected_root
    assert os.environ["PYTEST_DEBUG_TEMPROOT"] == str(expected_root)  # where pytest puts its tmp_path directories
    assert os.environ["TMPDIR"] == str(run) == tempfile.gettempdir()  # tempfile and every child process
    left = Path(tempfile.mkdtemp(prefix="left-behind-"))
    (left / "f").write_bytes(b"x")
    assert left.parent == run

    scratch.remove_run_scratch(run)
    assert not run.exists()
    scratch.remove_run_scratch(None)  # a run that made none: nothing to do


def test_a_killed_runs_directory_is_removed_by_the_next_run_and_a_live_ones_kept(tmp_path: Path) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{scratch.RUN_PREFIX}{int(gone.stdout)}-abc"
    live = tmp_path / f"{scratch.RUN_PREFIX}{os.getpid()}-def"
    other = tmp_path / "shardscope-test-run-notapid-x"
    for d in (dead, live, other):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "f").write_bytes(b"x")
    scratch.remove_abandoned_runs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


EXITING_CHILD = """
import multiprocessing, sys
from tests.scratch import remove_at_exit, use_run_scratch
run = use_run_scratch()
remove_at_exit(run)
with multiprocessing.get_context("forkserver").Pool(1) as pool:  # multiprocessing's own directory, in TMPDIR
    assert pool.map(abs, [-1]) == [1]
print(run)
"""


def test_the_run_directory_goes_at_exit_after_multiprocessings_own() -> None:
    """As a run's process exits: multiprocessing removes its ``pymp-*`` directory, then the run's goes, and
    nothing complains (removed earlier, it made multiprocessing print a traceback at exit)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "PYTEST_DEBUG_TEMPROOT")}
    done = subprocess.run([sys.executable, "-c", EXITING_CHILD], env=env, cwd=Path(__file__).parents[1],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    run = Path(done.stdout.strip())
    assert run.name.startswith(scratch.RUN_PREFIX) and not run.exists()


@pytest.mark.parametrize("variable", ["TMPDIR", "PYTEST_DEBUG_TEMPROOT"])
def test_a_directory_the_caller_chose_is_kept(variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.delenv("PYTEST_DEBUG_TEMPROOT", raising=False)
    monkeypatch.setenv(variable, str(tmp_path))
    before = dict(os.environ)
    assert scratch.use_run_scratch() is None
    assert dict(os.environ) == before
    assert list(tmp_path.iterdir()) == []


def test_the_ram_filesystem_needs_room(monkeypatch: pytest.MonkeyPatch) -> None:
    found = scratch.ram_filesystem()
    if found is None:  # no tmpfs at /dev/shm (macOS), or one too small (a container's 64 MB) or read-only
        small = scratch.SHM.is_dir() and os.statvfs(scratch.SHM).f_bavail * os.statvfs(scratch.SHM).f_frsize \
            < scratch.MIN_FREE_BYTES
        assert not scratch.SHM.is_dir() or small or not os.access(scratch.SHM, os.W_OK)
        return
    assert found == scratch.SHM
    free = os.statvfs(found).f_bavail * os.statvfs(found).f_frsize
    monkeypatch.setattr(scratch, "MIN_FREE_BYTES", free + (1 << 40))
    assert scratch.ram_filesystem() is None
    monkeypatch.setattr(scratch, "SHM", Path("/proc"))  # a mount point, but not a tmpfs
    monkeypatch.setattr(scratch, "MIN_FREE_BYTES", 0)
    assert scratch.ram_filesystem() is None
