"""The versioned store's errors, each a subclass of the package's tree.

Callers (the CLI, the Versions widget, the labelmap) need to tell "you may not write here" from
"no such version" from "the store is damaged" without parsing messages, so every rule of the
version DAG has its own type. Lookup failures also derive from :class:`LookupError` so ordinary
Python code that catches ``LookupError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from napari_shardscope.core.errors import (
    ArgumentError,
    ConflictError,
    CorruptDataError,
    NotADatasetError,
    NotFoundError,
    RefusedWriteError,
    StoreUnreachableError,
    UnsupportedError,
    VersionError,
)


class CommittedVersionError(VersionError, RefusedWriteError):
    """A write (data, log entry or commit) was aimed at a committed, hence locked, version."""


class UncommittedVersionError(VersionError, RefusedWriteError):
    """An operation needs a committed version (e.g. making a child, merging) but got an open one."""


class OpenParentError(UncommittedVersionError):
    """A new version was asked for as the child of an open version (a branch whose head is still open).

    Attributes
    ----------
    version
        UUID of the open version.
    committed_parent
        UUID of its committed parent, the version to branch from instead (``None`` for an open root).
    """

    def __init__(self, message: str, *, version: str, committed_parent: str | None) -> None:
        self.version = version
        self.committed_parent = committed_parent
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_open_parent, (type(self), str(self), self.version, self.committed_parent))


def _rebuild_open_parent(cls: type[OpenParentError], message: str, version: str,
                         committed_parent: str | None) -> OpenParentError:
    return cls(message, version=version, committed_parent=committed_parent)


class UnknownVersionError(VersionError, NotFoundError):
    """No version's UUID starts with the given text (and it names no branch)."""


class AmbiguousVersionError(VersionError, ArgumentError, LookupError):
    """A UUID prefix matches several versions; a longer prefix is needed."""


class UnknownBranchError(VersionError, NotFoundError):
    """No version carries the given branch name."""


class BranchExistsError(VersionError, ConflictError):
    """A branch name is already used in the DAG, or a parent already has a child continuing its branch."""


class NestedTransactionError(VersionError, RefusedWriteError):
    """A thread opened a write transaction while already holding one (it would deadlock)."""


@dataclass(frozen=True)
class MergeConflict:
    """One key changed differently on both sides of a merge since their common ancestor.

    Attributes
    ----------
    instance
        Name of the data instance holding the key.
    key
        The type-specific key (bytes, as the instance type stores it).
    """

    instance: str
    key: bytes


class MergeConflictError(VersionError, ConflictError):
    """A merge with policy ``fail`` found conflicts; nothing was written.

    Attributes
    ----------
    conflicts
        Every conflicting key, so a caller can show them or retry with ``ours``/``theirs``.
    """

    def __init__(self, message: str, conflicts: Sequence[MergeConflict]) -> None:
        self.conflicts: tuple[MergeConflict, ...] = tuple(conflicts)
        super().__init__(message)


class UnknownInstanceError(NotFoundError, ArgumentError):
    """No data instance has the given name."""


class InstanceExistsError(ConflictError, ArgumentError):
    """A data instance with that name already exists in the repository."""


class NotARepositoryError(NotADatasetError):
    """A path is not a versioned repository (missing, a plain file, or another program's data)."""


class StoreCorruptError(CorruptDataError):
    """The repository's files exist but cannot be read as a consistent store."""


class LockTimeoutError(ConflictError):
    """Another writer held the repository's write lock for longer than the timeout."""


class IdsExhaustedError(ConflictError):
    """A clone used up the ids it reserved from its remote: reserve more (needs the remote) and retry.

    Attributes
    ----------
    counter, count, minimum
        The request that could not be met, so the caller can reserve enough.
    """

    def __init__(self, message: str, counter: str, count: int, minimum: int) -> None:
        super().__init__(message)
        self.counter = counter
        self.count = count
        self.minimum = minimum


class RepositoryFormatError(VersionError, UnsupportedError):
    """A repository in an older format that could not be upgraded where it is (e.g. a read-only copy).

    The message names ``shardscope repo migrate``, which upgrades it where it can be written.
    """


class RegionError(RefusedWriteError):
    """An edit outside the region a region clone holds.

    Raised by the labelmap's region check, about a repository setting the remotes record
    (``shardscope clone --region``): it lives here, below both (also exported by
    :mod:`napari_shardscope.core.versioned.remotes.errors`).
    """


class NotLocalError(StoreUnreachableError):
    """A lazy clone needed version data it does not hold, and the remote holding it could not be read.

    A lazy clone (``shardscope clone`` without ``--prefetch``) keeps each version's data on the remote
    until it is first read; offline, a read of data never read before fails with this error naming the
    remote and the object, never with wrong or missing values. Clone with ``--prefetch`` to work offline.
    """

    def __init__(self, message: str, *, remote: str, key: str, path: str | None = None) -> None:
        self.remote = remote
        self.key = key
        super().__init__(message, path=path)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_not_local, (self.message, self.remote, self.key, self.path))


def _rebuild_not_local(message: str, remote: str, key: str, path: str | None) -> NotLocalError:
    return NotLocalError(message, remote=remote, key=key, path=path)
