"""The seam between the labelmap and the transport that reserves its ids: a protocol the labelmap owns.

A labelmap in a clone of a remote hands out body and supervoxel ids only from blocks reserved on
the remote (so two clones never make the same id), and a region clone edits only inside its
region. Both are facts the transport knows (:mod:`napari_shardscope.core.versioned.remotes`), but
the data type must not depend on the transport: the labelmap asks an :class:`IdReservation`, and
the remotes provide the implementation, wired in by the adapter :mod:`.remote` (imported with the
package) through :func:`use_id_reservation`.
"""

from __future__ import annotations

from typing import Protocol

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.repository import Repository


class IdReservation(Protocol):
    """Where a clone's labelmap gets more ids, and which region it may edit."""

    def reserve_ids(self, repo: Repository, counter: str, *, minimum: int) -> range:
        """Reserve a block of ids of ``counter`` (none below ``minimum``) from ``repo``'s id remote, recorded in
        ``repo``; needs the network (a typed :class:`~napari_shardscope.core.errors.ShardscopeError` offline)."""
        ...

    def region_stamp(self, repo: Repository) -> tuple[int, int] | None:
        """A value that changes when ``repo``'s region changes (``None``: no region recorded), read cheaply
        before every edit so the region itself is re-read only when it changed."""
        ...

    def region_of(self, repo: Repository) -> list[list[int]] | None:
        """The region (``[[z0, z1], [y0, y1], [x0, x1]]``, scale-0 voxels) a region clone may edit (``None``: any)."""
        ...


class _NoTransport:
    """Before any transport is wired in: no region, and a clear refusal to reserve."""

    def reserve_ids(self, repo: Repository, counter: str, *, minimum: int) -> range:
        raise ArgumentError(f"{repo.path}: this repository reserves ids of {counter} from remote "
                            f"{repo.id_source()!r}, but no remote transport is loaded")

    def region_stamp(self, repo: Repository) -> tuple[int, int] | None:
        return None

    def region_of(self, repo: Repository) -> list[list[int]] | None:
        return None


_current: IdReservation = _NoTransport()


def use_id_reservation(reservation: IdReservation) -> None:
    """Make ``reservation`` the one every labelmap asks (the remotes' adapter calls this on import)."""
    global _current
    _current = reservation


def id_reservation() -> IdReservation:
    """The id reservation and region lookup labelmaps use now."""
    return _current
