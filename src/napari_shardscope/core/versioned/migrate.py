"""``shardscope repo migrate``: bring a repository and its data to what this library writes.

A migration is a list of *steps*, each a function of an open repository that brings one part up to
date and says what it did (or ``None`` when that part was current). The repository format itself
(the DAG records, :mod:`~napari_shardscope.core.versioned.upgrade`) is upgraded when the repository
is opened writable, so its step only reports that; data types register their own steps (the
labelmap's, for its data) with :func:`register_migration`, and :func:`migrate_repository` runs
them all in registration order, then checks the whole store (``verify``).

Every step must be idempotent (running it twice does nothing the second time) and keep the store
consistent after a crash at any point (one transaction, or several that each leave a usable store).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.upgrade import FORMAT_VERSION

#: A step: brings one part of an open repository up to date; returns what it did, or None.
MigrationRun = Callable[[Repository], "str | None"]


@dataclass(frozen=True)
class MigrationStep:
    """A named migration step."""

    name: str
    run: MigrationRun


@dataclass(frozen=True)
class StepResult:
    """What one step did: ``done`` is its sentence, or None when nothing needed doing."""

    name: str
    done: str | None


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate_repository` did, and what ``verify`` found afterwards (empty: consistent)."""

    steps: tuple[StepResult, ...]
    problems: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return any(s.done is not None for s in self.steps)


_STEPS: list[MigrationStep] = []


def register_migration(name: str, run: MigrationRun) -> None:
    """Add a step run by every later :func:`migrate_repository` (a data type's module calls this once).

    Registering a name again replaces that step in place (re-imports, tests).
    """
    if not isinstance(name, str) or not name:
        raise ArgumentError("a migration step needs a name")
    for i, step in enumerate(_STEPS):
        if step.name == name:
            _STEPS[i] = MigrationStep(name, run)
            return
    _STEPS.append(MigrationStep(name, run))


def migration_steps() -> list[MigrationStep]:
    """The registered steps, in the order they run."""
    return list(_STEPS)


def migrate_repository(repo: Repository, *, verify: bool = True) -> MigrationReport:
    """Run every registered step on ``repo``, then (by default) ``repo.verify()``."""
    results = tuple(StepResult(step.name, step.run(repo)) for step in _STEPS)
    problems = tuple(repo.verify()) if verify else ()
    return MigrationReport(steps=results, problems=problems)


def _repository_format(repo: Repository) -> str | None:
    """The DAG records of format 2 (written when the repository was opened: say so if this handle did it)."""
    if repo.upgraded_from is None:
        return None
    return f"repository format {repo.upgraded_from} upgraded to {FORMAT_VERSION} (DAG records read on demand)"


register_migration("repository-format", _repository_format)
