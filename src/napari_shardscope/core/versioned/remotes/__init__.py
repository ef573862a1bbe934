"""Remotes: push, fetch, pull and clone versions through a bucket or a directory, with no server.

Notebook API (the CLI's ``shardscope remote|clone|fetch|push|pull|status`` call the same)::

    from napari_shardscope.core.versioned import remotes

    remotes.add_remote(repo, "origin", "s3://bucket/team/repo")
    remotes.push(repo, "origin", "main")            # committed versions the remote lacks, then one CAS
    path, _ = remotes.clone("s3://bucket/team/repo", "work")    # elsewhere
    remotes.fetch(repo, "origin")                   # origin/<branch> heads, verified objects
    remotes.pull(repo, "origin", "main")            # fast-forward or a committed merge version
    remotes.status(repo, "origin")                  # ahead / behind per branch
    remotes.remaining_ids(repo)                     # ids left in this clone's reserved blocks

Modules: :mod:`.store` (the remote's layout: objects, refs and id counters by compare-and-swap),
:mod:`.pack` (object encodings), :mod:`.config` (a local repository's remotes and tracking state);
the verbs, one module each (named so no module shadows the function the package exports):
:mod:`.fetching` (with :mod:`.walk`, the ref negotiation, and :mod:`.spool`), :mod:`.pushing`,
:mod:`.pulling`, :mod:`.branch_status`, :mod:`.cloning`, :mod:`.verify`; what they share:
:mod:`.instances` (instances and their unversioned data), :mod:`.id_blocks` (ids reserved from
the remote), :mod:`.endpoints` (the remote's store, the local branch's last committed version).
"""

from napari_shardscope.core.versioned.remotes.branch_status import BranchStatus, status
from napari_shardscope.core.versioned.remotes.cloning import clone
from napari_shardscope.core.versioned.remotes.config import (
    DEFAULT_REMOTE,
    add_remote,
    list_remotes,
    load_state,
    remove_remote,
)
from napari_shardscope.core.versioned.remotes.errors import (
    CorruptObjectError,
    LostRaceError,
    NoCompareAndSwapError,
    NonFastForwardError,
    NoRemoteRepositoryError,
    ReadOnlyRemoteError,
    RemoteExistsError,
    UnknownRemoteError,
)
from napari_shardscope.core.versioned.remotes.fetching import FetchResult, fetch
from napari_shardscope.core.versioned.remotes.id_blocks import remaining_ids, reserve_ids
from napari_shardscope.core.versioned.remotes.objects import RemoteObjects  # registers the lazy clone's source
from napari_shardscope.core.versioned.remotes.pulling import PullResult, pull
from napari_shardscope.core.versioned.remotes.pushing import PushResult, push
from napari_shardscope.core.versioned.remotes.store import RemoteStore, Transfer

__all__ = [
    "DEFAULT_REMOTE",
    "BranchStatus",
    "CorruptObjectError",
    "FetchResult",
    "LostRaceError",
    "NoCompareAndSwapError",
    "NoRemoteRepositoryError",
    "NonFastForwardError",
    "PullResult",
    "PushResult",
    "ReadOnlyRemoteError",
    "RemoteExistsError",
    "RemoteObjects",
    "RemoteStore",
    "Transfer",
    "UnknownRemoteError",
    "add_remote",
    "clone",
    "fetch",
    "list_remotes",
    "load_state",
    "pull",
    "push",
    "remaining_ids",
    "remove_remote",
    "reserve_ids",
    "status",
]
