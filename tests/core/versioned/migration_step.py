"""A data type's migration step, registered on import (what labelmap/migrate.py does for the labelmap).

``repo migrate`` imports the modules in ``cli.repo.MIGRATING_TYPES``; the test adds this one there.
"""

from __future__ import annotations

from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.migrate import StepOutcome, register_migration
from napari_shardscope.core.versioned.repository import Repository


def _step(repo: Repository, progress: Progress | None) -> StepOutcome | None:
    done = repo.get_unversioned("kv", b"migrated")
    if done is not None:
        return None
    if progress is not None:
        progress(1, 1, "kv")
    repo.put_unversioned("kv", {b"migrated": b"yes"})
    return StepOutcome("marked kv migrated", {"instances": ["kv"]})


register_migration("test-kv", _step)
