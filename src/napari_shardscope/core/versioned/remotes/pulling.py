"""pull: fetch, then a fast-forward or a 3-way merge version (committed) through the merge the caller
passes (the labelmap's branch merge from the CLI)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError, UnknownBranchError
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.fetching import FetchResult, fetch
from napari_shardscope.core.versioned.remotes.store import Progress
from napari_shardscope.core.versioned.repository import Repository

#: ``merge(repo, ours_branch, theirs_uuid) -> open merge version`` (pull's 3-way merge).
Merger = Callable[[Repository, str, str], Version]


@dataclass(frozen=True)
class PullResult:
    """What a pull did: ``up-to-date``, ``fast-forward`` or ``merge`` (with the committed merge version)."""

    remote: str
    branch: str
    kind: Literal["up-to-date", "fast-forward", "merge"]
    head: str
    fetch: FetchResult

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "branch": self.branch, "kind": self.kind, "head": self.head,
                "fetch": self.fetch.to_json()}


def default_merge(repo: Repository, ours: str, theirs: str) -> Version:
    """Pull's merge for repositories without a type-aware one: the store's key merge (conflicts fail)."""
    return repo.merge(ours, theirs, policy="fail").version


def pull(repo: Repository, remote: str = C.DEFAULT_REMOTE, branch: str = "main", *,
         merge: Merger | None = None, progress: Progress | None = None) -> PullResult:
    """Fetch ``branch`` and bring the local branch up to it: a fast-forward, or a committed merge version."""
    result = fetch(repo, remote, [branch], progress=progress)
    theirs = repo.version(result.tracking[branch])
    try:
        head = repo.head(branch)
    except UnknownBranchError:
        head = None
    if head is None or head.uuid == theirs.uuid:
        return PullResult(remote, branch, "fast-forward" if result.adopted else "up-to-date", theirs.uuid, result)
    if theirs.uuid in {v.uuid for v in repo.ancestry(head)}:  # the local branch is ahead
        return PullResult(remote, branch, "up-to-date", head.uuid, result)
    if not head.locked:
        raise UncommittedVersionError(f"branch {branch!r} has an open version {head.short}; commit it before pulling")
    m = (merge or default_merge)(repo, branch, theirs.uuid)
    done = repo.commit(m, f"merge {remote}/{branch} ({theirs.short}) into {branch}")
    return PullResult(remote, branch, "merge", done.uuid, result)
