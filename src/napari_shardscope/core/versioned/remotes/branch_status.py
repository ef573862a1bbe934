"""status: each local branch against its remote-tracking head, in committed versions ahead and behind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError, UnknownBranchError
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.endpoints import has_version, last_committed
from napari_shardscope.core.versioned.repository import Repository


@dataclass(frozen=True)
class BranchStatus:
    """A local branch against its remote-tracking head: committed versions ahead and behind."""

    branch: str
    local: str | None
    remote: str | None
    ahead: int
    behind: int
    open: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "local": self.local, "remote": self.remote, "ahead": self.ahead,
                "behind": self.behind, "open_version": self.open}


def status(repo: Repository, remote: str = C.DEFAULT_REMOTE) -> list[BranchStatus]:
    """Each branch against ``<remote>/<branch>`` as last fetched or pushed: committed versions ahead and behind.

    A branch the remote-tracking state knows is compared with that head (git's ahead/behind). A
    local branch it does not know is "ahead" by the committed versions the remote lacks (what a push
    would send), and listed only when there are some or it has an open version: a branch whose
    versions all came from the remote (a fetched divergence, a branch only reachable through another
    one's history) has nothing to report.
    """
    state = C.load_state(repo, remote)
    names = sorted({b.name for b in repo.branches() if not b.name.startswith(f"{remote}/")} | set(state.tracking))
    out: list[BranchStatus] = []
    for name in names:
        local: Version | None = None
        is_open = False
        try:
            is_open = not repo.head(name).locked
            local = last_committed(repo, name)
        except (UnknownBranchError, UncommittedVersionError):
            pass
        ref = state.tracking.get(name)
        mine = {v.uuid for v in repo.ancestry(local)} if local is not None else set()
        if ref is None:
            ahead = len(mine - set(state.objects))
            if ahead or is_open:
                out.append(BranchStatus(name, None if local is None else local.uuid, None, ahead, 0, is_open))
            continue
        theirs = {v.uuid for v in repo.ancestry(ref.node)} if has_version(repo, ref.node) else set()
        out.append(BranchStatus(name, None if local is None else local.uuid, ref.node,
                                len(mine - theirs), len(theirs - mine), is_open))
    return out
