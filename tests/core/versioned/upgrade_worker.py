"""Opens a format-1 repository (which upgrades it) in a process the test kills.

``python -m tests.core.versioned.upgrade_worker REPO [KILL_AT]``: prints ``opening`` (flushed) right
before opening. With ``KILL_AT = n`` the process SIGKILLs itself inside the upgrade's transaction:
at the n-th ancestor set written (``n`` = 0: after every record is written, before the commit).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, cast

import napari_shardscope.core.versioned.dagcheck as dagcheck
import napari_shardscope.core.versioned.handle as handle
from napari_shardscope.core.versioned import open_repository


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(path: str, kill_at: int | None) -> None:
    if kill_at is not None:
        calls = [0]
        # the worker patches the names where the modules look them up (imported names: Any for mypy)
        dag_module, handle_module = cast(Any, dagcheck), cast(Any, handle)
        real_write, real_upgrade = dag_module.write_ancestors, handle_module.upgrade_format

        def counted(*args: Any, **kwargs: Any) -> None:
            calls[0] += 1
            if calls[0] == kill_at:
                die()
            real_write(*args, **kwargs)

        def then_die(*args: Any, **kwargs: Any) -> None:
            real_upgrade(*args, **kwargs)
            if kill_at == 0:
                die()

        dag_module.write_ancestors = counted
        handle_module.upgrade_format = then_die
    sys.stdout.write("opening\n")
    sys.stdout.flush()
    with open_repository(path) as repo:
        sys.stdout.write(f"done {repo.upgraded_from}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
