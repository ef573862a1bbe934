"""The remotes' side of the labelmap's id-reservation seam: ids reserved on the remote, the clone's region.

Implements :class:`napari_shardscope.core.labelmap.id_reservation.IdReservation` structurally (the
versioned store does not import the labelmap built on it); :mod:`napari_shardscope.core.labelmap.remote`
wires an instance in.
"""

from __future__ import annotations

from napari_shardscope.core.versioned.remotes.config import REGION_FILE, region_of
from napari_shardscope.core.versioned.remotes.id_blocks import reserve_ids
from napari_shardscope.core.versioned.repository import Repository


class RemoteIdReservation:
    """Ids from the repository's id remote (:func:`~.id_blocks.reserve_ids`), the region from its clone config."""

    def reserve_ids(self, repo: Repository, counter: str, *, minimum: int) -> range:
        return reserve_ids(repo, counter, minimum=minimum)

    def region_stamp(self, repo: Repository) -> tuple[int, int] | None:
        """The region file's (mtime, size): a changed region (``shardscope clone --region``) is seen at once."""
        if repo.path is None:
            return None
        try:
            st = (repo.path / REGION_FILE).stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def region_of(self, repo: Repository) -> list[list[int]] | None:
        return region_of(repo)
