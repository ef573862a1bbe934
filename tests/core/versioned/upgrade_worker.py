"""Opens a format-1 repository (which upgrades it) in a process the test kills.

``python -m tests.core.versioned.upgrade_worker REPO [KILL_AT]``: prints ``opening`` (flushed) right
before opening. With ``KILL_AT = n`` the process SIGKILLs itself inside the upgrade's transaction:
at the n-th ancestor set written (``n`` = 0: after every record is written, before the commit).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import napari_shardscope.core.versioned.dagindex as dagindex
import napari_shardscope.core.versioned.handle as handle
from napari_shardscope.core.versioned import open_repository


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(path: str, kill_at: int | None) -> None:
    if kill_at is not None:
        calls = [0]
        real_write, real_upgrade = dagindex.write_ancestors, handle.upgrade_format

        def counted(*args: Any, **kwargs: Any) -> None:
            calls[0] += 1
            if calls[0] == kill_at:
                die()
            real_write(*args, **kwargs)

        def then_die(*args: Any, **kwargs: Any) -> None:
            real_upgrade(*args, **kwargs)
            if kill_at == 0:
                die()

        dagindex.write_ancestors = counted  # type: ignore[assignment]
        handle.upgrade_format = then_die  # type: ignore[assignment]
    sys.stdout.write("opening\n")
    sys.stdout.flush()
    with open_repository(path) as repo:
        sys.stdout.write(f"done {repo.upgraded_from}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
