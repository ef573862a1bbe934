"""fetch: download the remote's versions this repository lacks, verified, and adopt them (git's word).

A fetch walks the remote's history from each branch head down to versions this repository has
(:mod:`.walk`: node objects name their parents' objects, so no listing is needed), downloads the
rest, verifies every object's hash, and adopts each version in one local transaction, parents
first. A fetched version keeps its branch name when it fits this DAG; when the local branch has
moved on (a divergence), it is adopted on a branch of its own (``main+origin-1a2b3c4d``). Either
way ``<remote>/<branch>`` (``origin/main``) is the remote-tracking name of the head just fetched —
a ref kept in the remote state, never a local branch — and what ``review``, ``diff`` and a pull's
merge see.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.dag import Version, check_branch_name
from napari_shardscope.core.versioned.errors import BranchExistsError, UnknownBranchError
from napari_shardscope.core.versioned.hollow import HollowRef
from napari_shardscope.core.versioned.node import NodeContent, NodeEntry, NodeLog
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.endpoints import check_same_repository, open_remote
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.history import PackedHistory
from napari_shardscope.core.versioned.remotes.instances import adopt_instances, check_unversioned, only_instances
from napari_shardscope.core.versioned.remotes.pack import NodeHeader, decode_data, decode_keys, node_content
from napari_shardscope.core.versioned.remotes.spool import Spool
from napari_shardscope.core.versioned.remotes.store import NodeRef, Progress, RemoteStore, Transfer
from napari_shardscope.core.versioned.remotes.walk import Walk, walk_missing
from napari_shardscope.core.versioned.repository import Batch, Repository

#: Data objects downloaded together by a fetch (each holds up to ``DATA_OBJECT_BYTES`` of records), of one
#: version or of many.
DATA_WINDOW = 16
#: Fetched versions adopted per local transaction.
ADOPT_BATCH = 1000


@dataclass(frozen=True)
class FetchResult:
    """What a fetch did: versions adopted, the remote heads now tracked, bytes and objects moved.

    ``renamed``: fetched version → the local branch it went on when that is not its remote branch's
    name (a divergence); ``migrated``: local branches an older fetch had named ``<remote>/…``, renamed
    (old → new) so that name means the remote-tracking head.
    """

    remote: str
    adopted: tuple[str, ...]
    tracking: dict[str, str]
    renamed: dict[str, str]
    transfer: Transfer
    migrated: dict[str, str] = field(default_factory=dict)
    #: What ``clone(prefetch=True)``'s data types copied for offline work (the labelmap's base); ``to_json`` each.
    prefetched: tuple[Any, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "adopted": list(self.adopted), "tracking": self.tracking,
                "renamed": self.renamed, "migrated": self.migrated, **self.transfer.to_json(),
                **({"prefetched": [p.to_json() for p in self.prefetched]} if self.prefetched else {})}


class _Dag(Protocol):
    """What choosing a fetched version's branch asks of the DAG (a :class:`Batch` adopting them)."""

    def version(self, ref: str | Version) -> Version: ...

    def branch_fits(self, parents: tuple[str, ...], branch: str) -> bool: ...


def _local_branch(dag: _Dag, remote: str, header: NodeHeader, preferred: str | None,
                  chosen: dict[str, str], walk: Walk) -> str:
    """The branch name a fetched version takes here: its own when it fits, else a tracking name."""
    candidates: list[str] = []
    if preferred is not None:
        candidates.append(preferred)
    if header.parents:
        first = header.parents[0][0]
        if first in walk.headers and walk.headers[first][1].branch == header.branch:
            candidates.append(chosen[first])
        elif first not in walk.headers and dag.version(first).branch == header.branch:
            candidates.append(header.branch)
    # never ``<remote>/<branch>``: that names the remote-tracking head (a ref), not a local branch
    candidates += [header.branch, C.diverged_branch_name(remote, header.branch, header.uuid), f"fetched-{header.uuid}"]
    for name in candidates:
        try:
            check_branch_name(name)
        except ArgumentError:
            continue
        if dag.branch_fits(tuple(p for p, _ in header.parents), name):
            return name
    raise BranchExistsError(f"no free branch name for fetched version {header.uuid} (tried {', '.join(candidates)})")


def fetch(repo: Repository, remote: str = C.DEFAULT_REMOTE, branches: Sequence[str] | None = None, *,
          progress: Progress | None = None) -> FetchResult:
    """Download the versions of the remote's branches (all, or ``branches``) that this repository lacks.

    In a lazy clone, versions whose node carries a key listing are adopted *hollow*: their keys now,
    their values on first read (:mod:`~napari_shardscope.core.versioned.hollow`).
    """
    store = open_remote(repo, remote, progress)
    return fetch_from(repo, remote, store, branches)


def fetch_from(repo: Repository, remote: str, store: RemoteStore, branches: Sequence[str] | None) -> FetchResult:
    """:func:`fetch` through an open ``store`` (a clone's first fetch reuses the store it read the refs with)."""
    with C.holding_state(repo, remote):  # from reading the refs to saving what they said
        return _fetch_held(repo, remote, store, branches)


def _hollow_records(history: PackedHistory, walk: Walk) -> dict[str, list[NodeEntry | NodeLog]]:
    """The key listings of the walked versions that have one (a lazy fetch adopts those hollow)."""
    listed = [u for u in walk.order if walk.headers[u][1].keys is not None]
    names = [walk.headers[u][1].keys or "" for u in listed]
    out: dict[str, list[NodeEntry | NodeLog]] = {}
    for uuid, name, data in zip(listed, names, history.get_many(names, "key listing"), strict=True):
        header = walk.headers[uuid][1]
        records = decode_keys(name, data, header)
        node_content(header, records)  # the record counts the node declares
        out[uuid] = records
    return out


def _download_data(store: RemoteStore, walk: Walk, uuids: Sequence[str], spool: Spool) -> None:
    """Download, verify and spool the data objects of ``uuids``, many versions' objects in flight together."""
    names = [(u, d) for u in uuids for d in walk.headers[u][1].data]
    counts: dict[str, list[int]] = {u: [0, 0] for u in uuids}
    for first in range(0, len(names), DATA_WINDOW):
        part = names[first:first + DATA_WINDOW]
        datas = store.get_objects([d for _, d in part], "version data", in_flight=DATA_WINDOW)
        for (uuid, data_name), data in zip(part, datas, strict=True):
            for r in decode_data(data_name, data, walk.headers[uuid][1].instances):
                counts[uuid][0 if isinstance(r, NodeEntry) else 1] += 1
            spool.put(data_name, data)
    for uuid in uuids:
        header = walk.headers[uuid][1]
        if counts[uuid] != [header.entries, header.logs]:
            raise CorruptObjectError(f"node {uuid}: {counts[uuid][0]} entries and {counts[uuid][1]} log records, "
                                     f"expected {header.entries} and {header.logs}")


def _fetch_held(repo: Repository, remote: str, store: RemoteStore, branches: Sequence[str] | None) -> FetchResult:
    refs, _ = store.require_refs()
    check_same_repository(repo, refs, store.url)
    migrated = C.migrate_tracking_branches(repo, remote)
    state = C.load_state(repo, remote)
    if branches:
        missing = [b for b in branches if b not in refs.branches]
        if missing:
            raise UnknownBranchError(f"{store.url} has no branch {missing[0]!r} "
                                     f"(branches: {', '.join(sorted(refs.branches)) or 'none'})")
    wanted = {b: r for b, r in refs.branches.items() if not branches or b in branches}
    state.objects[refs.root.node] = refs.root.object
    lazy = C.is_lazy(repo, remote)
    history = PackedHistory(store, refs.packs)
    with Spool(C.spool_directory(repo, remote)) as spool:
        # every object is verified before anything is written: a bad one leaves the repository as it was
        incoming = check_unversioned(repo, store, refs, spool)
        walk = walk_missing(repo, history, wanted.values(), state.objects)
        hollow = _hollow_records(history, walk) if lazy else {}
        _download_data(store, walk, [u for u in walk.order if u not in hollow], spool)
        adopt_instances(repo, refs, spool, incoming)
        renamed = _adopt_walk(repo, remote, walk, wanted, spool, state, hollow)
    if branches:
        state.tracking.update(wanted)
    else:
        state.tracking = dict(wanted)
    C.save_state(repo, remote, state)
    return FetchResult(remote, tuple(walk.order), {b: r.node for b, r in state.tracking.items()}, renamed,
                       store.transfer, migrated)


def _adopt_walk(repo: Repository, remote: str, walk: Walk, wanted: dict[str, NodeRef], spool: Spool,
                state: C.RemoteState, hollow: dict[str, list[NodeEntry | NodeLog]]) -> dict[str, str]:
    """Adopt the verified versions of ``walk``, parents first, ``ADOPT_BATCH`` per transaction.

    Returns fetched version → local branch, for those renamed.
    """
    preferred: dict[str, str] = {}
    for name, ref in wanted.items():
        cur: str | None = ref.node
        while cur is not None and cur in walk.headers and walk.headers[cur][1].branch == name:
            preferred.setdefault(cur, name)
            parents = walk.headers[cur][1].parents
            cur = parents[0][0] if parents else None
    chosen: dict[str, str] = {}
    renamed: dict[str, str] = {}
    only = C.instances_of(repo)
    for first in range(0, len(walk.order), ADOPT_BATCH):
        with repo.batch() as batch:
            # one by one, each adopted before the next is named (its branch depends on the DAG so far);
            # the batch's records are built in memory and written with one bulk put
            batch.adopt_nodes(_nodes_to_adopt(batch, remote, walk.order[first:first + ADOPT_BATCH], walk, spool,
                                              hollow, preferred, chosen, renamed, only))
        for uuid in walk.order[first:first + ADOPT_BATCH]:  # committed: the remote has them, as these objects
            state.objects[uuid] = walk.headers[uuid][0]
    return renamed


def _nodes_to_adopt(batch: Batch, remote: str, uuids: Sequence[str], walk: Walk, spool: Spool,
                    hollow: dict[str, list[NodeEntry | NodeLog]], preferred: dict[str, str], chosen: dict[str, str],
                    renamed: dict[str, str], only: set[str] | None,
                    ) -> Iterator[tuple[NodeContent, str | None, HollowRef | None]]:
    """``(node, local branch, hollow)`` of each of ``uuids``, named once the previous one was adopted."""
    for uuid in uuids:
        header = walk.headers[uuid][1]
        name = _local_branch(batch, remote, header, preferred.get(uuid), chosen, walk)
        records = hollow.get(uuid)
        where: HollowRef | None = None
        if records is None:
            records = []
            for data_name in header.data:
                records.extend(decode_data(data_name, spool.get(data_name), header.instances))
        else:
            where = HollowRef(remote, header.data)
        chosen[uuid] = name
        if name != header.branch:
            renamed[uuid] = name
        yield only_instances(node_content(header, records), only), name, where
