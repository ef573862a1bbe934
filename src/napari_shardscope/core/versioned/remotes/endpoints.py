"""The two ends of a sync: a configured remote's store, and the local repository's committed versions."""

from __future__ import annotations

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError, UnknownVersionError
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.store import Progress, Refs, RemoteStore
from napari_shardscope.core.versioned.repository import Repository


def open_remote(repo: Repository, remote: str, progress: Progress | None = None) -> RemoteStore:
    """The store of a configured remote."""
    return RemoteStore(C.remote_url(repo, remote), anonymous=C.is_anonymous(repo, remote), progress=progress)


def has_version(repo: Repository, uuid: str) -> bool:
    try:
        return repo.version(uuid).uuid == uuid
    except (UnknownVersionError, ArgumentError):
        return False


def last_committed(repo: Repository, branch: str) -> Version:
    """The newest committed version of ``branch`` (its head, or the head's parent while it is open)."""
    v = repo.head(branch)
    while not v.locked:
        parent = repo.parents(v)
        if not parent or parent[0].branch != branch:
            raise UncommittedVersionError(f"branch {branch!r} has no committed version yet; commit it first")
        v = parent[0]
    return v


def check_same_repository(repo: Repository, refs: Refs, url: str) -> None:
    if refs.root.node != repo.root.uuid:
        raise ArgumentError(f"{url} holds another repository (root {refs.root.node[:8]}, here {repo.root.short})")
