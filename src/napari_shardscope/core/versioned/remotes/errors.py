"""Errors of remotes, each in the group that says what the user does next."""

from __future__ import annotations

from napari_shardscope.core.errors import (
    ArgumentError,
    ConflictError,
    CorruptDataError,
    NotFoundError,
    RefusedWriteError,
    UnsupportedError,
)
from napari_shardscope.core.versioned.errors import RegionError as RegionError  # raised by the labelmap


class NonFastForwardError(ConflictError):
    """The remote branch moved past what this repository has: fetch and merge first (or force with lease)."""


class LostRaceError(ConflictError):
    """Another writer kept changing the remote's refs; the push or reservation gave up after its retries."""


class UnknownRemoteError(NotFoundError, ArgumentError):
    """No remote of that name is configured in the repository."""


class RemoteExistsError(ConflictError, ArgumentError):
    """A remote of that name is configured already."""


class NoRemoteRepositoryError(NotFoundError):
    """The URL holds no remote repository (no refs object)."""


class CorruptObjectError(CorruptDataError):
    """An object on the remote does not match its content hash, or does not decode."""


class NoCompareAndSwapError(UnsupportedError):
    """The store does not refuse a stale compare-and-swap, so pushing to it could lose commits."""


class ReadOnlyRemoteError(RefusedWriteError):
    """The remote is read-only (http(s)://): clone and fetch only."""


