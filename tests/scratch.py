"""Where a test run's scratch files go: a RAM file system when the machine has one with room, else the disk.

Why RAM: the suite writes about a gigabyte of small files (datasets, repositories, shards) and its stores
``fsync`` what they commit, as they must. On a disk file system every one of those ``fsync`` calls waits for
the disk and journals in the kernel: on the 2-core CI machine (ext4) the whole run spent 75 CPU s in the
kernel and 8 s waiting on the disk; with the same files on tmpfs, 63 and 0.5, and the README's test command
took 278 s instead of 296 s. No test's meaning depends on the file system: the crash tests kill processes (what
an ``fsync`` must survive is a power cut, which no test can make), and the files' bytes, names, renames, locks
and sparse holes behave alike on both.

Why one directory per run: tests and the children they start make temporary directories of their own
(``tempfile.mkdtemp``: a model's base volume, a fuzz campaign's cases, the screenshot script's repositories),
and many live as long as their process. Left in ``/tmp`` they piled up run after run; in RAM they would hold
memory. With ``TMPDIR`` set to a directory of this run, they go when the run ends, and pytest's own
directories (``tmp_path``) follow ``tmp_path_retention_policy`` in ``pyproject.toml``: a passing run leaves
nothing, a failing one keeps its failed tests' directories.

A ``TMPDIR`` or ``PYTEST_DEBUG_TEMPROOT`` the caller set is kept as it is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

#: Linux's RAM file system for everyone (``shm_open``'s home).
SHM = Path("/dev/shm")
#: The free space the RAM file system must have for the run to put its files there. A whole run writes about
#: 1 GB (much less at once: a passing test's directory is removed when it ends); a container's 64 MB
#: ``/dev/shm`` is left alone.
MIN_FREE_BYTES = 4 << 30
#: A run's ``TMPDIR`` is named for the process that made it: ``shardscope-test-run-<pid>-<random>``.
RUN_PREFIX = "shardscope-test-run-"


def ram_filesystem(min_free: int | None = None) -> Path | None:
    """``/dev/shm`` when it is a tmpfs this user can write with ``min_free`` bytes free (default
    :data:`MIN_FREE_BYTES`), else None."""
    min_free = MIN_FREE_BYTES if min_free is None else min_free
    try:
        mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
        stat = os.statvfs(SHM)
    except OSError:
        return None
    tmpfs = any(line.split()[1:3] == [str(SHM), "tmpfs"] for line in mounts if len(line.split()) >= 3)
    if not tmpfs or not os.access(SHM, os.W_OK | os.X_OK) or stat.f_bavail * stat.f_frsize < min_free:
        return None
    return SHM


def use_run_scratch() -> Path | None:
    """Point pytest's directories at the RAM file system (or leave them on the disk) and ``TMPDIR`` at a new
    directory of this run under it; return that directory (see :func:`remove_at_exit`).

    Called once, in the process the user started (xdist's workers and every child inherit the environment).
    Nothing changes where the caller chose a ``TMPDIR`` or ``PYTEST_DEBUG_TEMPROOT``.
    """
    if os.environ.get("TMPDIR") or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return None
    root = ram_filesystem() or Path(tempfile.gettempdir())
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(root)
    remove_abandoned_runs(root)
    run = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-", dir=root))
    os.environ["TMPDIR"] = str(run)
    tempfile.tempdir = None  # tempfile caches the directory it found first
    return run


def remove_abandoned_runs(root: Path) -> None:
    """Remove the ``TMPDIR`` of earlier runs whose process is gone without removing it (killed: ``kill -9``, a
    closed terminal), which in RAM would hold memory until the machine restarts. A run still going (its process
    alive, as when two checkouts test at once) is left alone; so is a directory whose process id was reused."""
    for path in root.glob(f"{RUN_PREFIX}*-*"):
        pid = path.name.removeprefix(RUN_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or not path.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive, another user's
            continue


def remove_run_scratch(run: Path | None) -> None:
    """Remove the run's ``TMPDIR`` with whatever its tests and children left in it."""
    if run is not None:
        shutil.rmtree(run, ignore_errors=True)


def remove_at_exit(run: Path | None) -> None:
    """Remove the run's ``TMPDIR`` when the process exits, after everything that cleans up inside it.

    ``multiprocessing`` keeps a directory of its own in ``TMPDIR`` (``pymp-*``) and removes it at exit with a
    finalizer of exit priority -100: a run's directory removed before that (when pytest ends) made it print a
    ``FileNotFoundError`` traceback as the process exited. This is a finalizer of the same kind, one priority
    lower, so it runs after that one.
    """
    if run is not None:
        from multiprocessing import util

        util.Finalize(None, remove_run_scratch, args=(run,), exitpriority=-101)
