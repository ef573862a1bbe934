"""Id blocks a repository reserves from its remote, so offline edits in many clones never collide."""

from __future__ import annotations

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.endpoints import open_remote
from napari_shardscope.core.versioned.remotes.store import RemoteStore
from napari_shardscope.core.versioned.repository import Repository

#: How many ids a clone reserves per counter at a time.
ID_BLOCK = 100_000


def start_reservations(repo: Repository, remote: str, store: RemoteStore, writer: str) -> None:
    """Switch this repository to ids reserved from ``remote``, above every id it handed out itself."""
    for counter, next_id in repo.counters().items():
        repo.add_id_block(counter, store.reserve_ids(counter, ID_BLOCK, next_id, writer))
    repo.set_id_source(remote)


def reserve_ids(repo: Repository, counter: str, count: int = ID_BLOCK, minimum: int = 0, *,
                remote: str | None = None) -> range:
    """Reserve ``count`` more ids of ``counter`` from the repository's id remote (needs the network)."""
    name = remote or repo.id_source()
    if name is None:
        raise ArgumentError("this repository reserves no ids from a remote (it hands out its own)")
    store = open_remote(repo, name)
    block = store.reserve_ids(counter, count, minimum, C.writer_id(repo))
    repo.add_id_block(counter, block)
    return block


def remaining_ids(repo: Repository) -> dict[str, int]:
    """Counter → how many reserved ids are left (offline work can use exactly these)."""
    return {c: sum(b - a for a, b in repo.id_blocks(c)) for c in repo.counters()}
