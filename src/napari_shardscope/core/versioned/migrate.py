"""``shardscope repo migrate``: bring a repository and its data to what this library writes.

A migration is a list of *steps*, each a function of an open repository that brings one part up to
date and says what it did (or ``None`` when that part was current). The repository format itself
(the DAG records, :mod:`~napari_shardscope.core.versioned.upgrade`) is upgraded when the repository
is opened writable, so its step only reports that; data types register their own steps (the
labelmap's, for its data) with :func:`register_migration`, and :func:`migrate_repository` runs
them all in registration order, then checks the whole store (``verify``). ``shardscope repo migrate``
is that one call, so one command upgrades everything; it imports the data types' modules first
(:data:`napari_shardscope.core.cli.repo.MIGRATING_TYPES`), whose import registers their steps.

Every step must be idempotent (running it twice does nothing the second time) and keep the store
consistent after a crash at any point (one transaction, or several that each leave a usable store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.upgrade import FORMAT_VERSION


@dataclass(frozen=True)
class StepOutcome:
    """What a step did, when a sentence is not enough: the sentence, figures for ``--json``, and
    what it left for the user (e.g. versions it could not convert), reported as problems."""

    done: str
    details: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


#: A step: brings one part of an open repository up to date, reporting to ``progress`` (may be None);
#: returns what it did (a sentence or a :class:`StepOutcome`), or None when that part was current.
MigrationRun = Callable[[Repository, "Progress | None"], "StepOutcome | str | None"]


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
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.details, "name": self.name, "done": self.done}


@dataclass(frozen=True)
class MigrationReport:
    """What :func:`migrate_repository` did: each step's result, what steps left undone and what
    ``verify`` found afterwards (``problems``; empty: consistent and complete)."""

    steps: tuple[StepResult, ...]
    problems: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return any(s.done is not None for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        """The ``repo migrate --json`` document."""
        return {"ok": not self.problems, "changed": self.changed, "problems": list(self.problems),
                "steps": [s.to_json() for s in self.steps]}


_STEPS: list[MigrationStep] = []


def register_migration(name: str, run: MigrationRun) -> None:
    """Add a step run by every later :func:`migrate_repository` (a data type's module calls this once).

    Steps run in registration order; the repository format's own step is registered first (this
    module), so data types always migrate a store whose DAG records are current. Registering a name
    again replaces that step in place (re-imports, tests).
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


def migrate_repository(repo: Repository, *, verify: bool = True, progress: Progress | None = None) -> MigrationReport:
    """Run every registered step on ``repo``, then (by default) ``repo.verify()``."""
    results: list[StepResult] = []
    left: list[str] = []
    for step in list(_STEPS):
        out = step.run(repo, progress)
        if isinstance(out, StepOutcome):
            results.append(StepResult(step.name, out.done, dict(out.details)))
            left.extend(out.problems)
        else:
            results.append(StepResult(step.name, out))
    problems = tuple(left) + (tuple(repo.verify()) if verify else ())
    return MigrationReport(steps=tuple(results), problems=problems)


def _repository_format(repo: Repository, progress: Progress | None) -> StepOutcome | None:
    """The DAG records of format 2 (written when the repository was opened: say so if this handle did it)."""
    if repo.upgraded_from is None:
        return None
    return StepOutcome(f"repository format {repo.upgraded_from} upgraded to {FORMAT_VERSION} "
                       f"(DAG records read on demand)", {"from": repo.upgraded_from, "to": FORMAT_VERSION})


register_migration("repository-format", _repository_format)
