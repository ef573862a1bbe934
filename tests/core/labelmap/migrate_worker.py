"""Runs ``repo migrate`` on a format-1 labelmap repository in a process the test kills.

``python -m tests.core.labelmap.migrate_worker REPO KILL_AT WHERE``: migrates one mutation per
transaction (the smallest batches, so a history of a few dozen edits is many transactions) and SIGKILLs
itself at the ``KILL_AT``-th rewriting transaction: ``inside`` it (its writes done, before the commit)
or right ``after`` its commit. Prints ``migrating`` (flushed) first.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import napari_shardscope.core.labelmap.migrate as labelmap_migrate
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned.access import Repository
from napari_shardscope.core.versioned.migrate import migrate_repository


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(path: str, kill_at: int, where: str) -> None:
    labelmap_migrate.BATCH = 1
    labelmap_migrate.BATCH_KEYS = 1
    real = Repository.rewriting
    calls = [0]

    @contextmanager
    def counted(self: Repository, **kwargs: Any) -> Iterator[Any]:
        calls[0] += 1
        with real(self, **kwargs) as rw:
            yield rw
            if calls[0] == kill_at and where == "inside":
                die()
        if calls[0] == kill_at and where == "after":
            die()

    Repository.rewriting = counted  # type: ignore[method-assign]
    sys.stdout.write("migrating\n")
    sys.stdout.flush()
    with open_repository(path) as repo:
        report = migrate_repository(repo)
    sys.stdout.write(f"done {calls[0]} {report.problems}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
