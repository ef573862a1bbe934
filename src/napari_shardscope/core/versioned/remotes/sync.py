"""fetch, push, pull, clone and status between a local repository and a remote (git's words).

* **fetch** walks the remote's history from each branch head down to versions this repository
  has (node objects name their parents' objects, so no listing is needed), downloads the rest,
  verifies every object's hash, and adopts each version in one local transaction, parents first.
  A fetched version keeps its branch name when it fits this DAG; when the local branch has moved
  on (a divergence), it is adopted on a branch of its own (``main+origin-1a2b3c4d``). Either way
  ``<remote>/<branch>`` (``origin/main``) is the remote-tracking name of the head just fetched —
  a ref kept in the remote state, never a local branch — and what ``review``, ``diff`` and a
  pull's merge see.
* **push** sends only committed versions, and only those the remote lacks (objects first), then
  moves the branch by one compare-and-swap of the refs. A push that is not a fast-forward is
  refused ("fetch and merge first") unless ``force_with_lease`` and the remote head is still the
  one last seen here. A lost swap is retried against the new refs.
* **pull** is fetch, then a fast-forward or a 3-way merge version (committed) through the merge
  the caller passes (the labelmap's branch merge from the CLI).
* **clone** builds a new repository beside the destination and renames it into place at the end,
  so an interrupted clone never leaves a half repository under the destination name.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import ArgumentError, ShardscopeError, UnsupportedError
from napari_shardscope.core.versioned.dag import Version, check_branch_name
from napari_shardscope.core.versioned.errors import (
    BranchExistsError,
    StoreCorruptError,
    UncommittedVersionError,
    UnknownBranchError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.hollow import HollowRef
from napari_shardscope.core.versioned.node import NodeContent, NodeEntry, NodeLog
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes import pages
from napari_shardscope.core.versioned.remotes.errors import (
    CorruptObjectError,
    LostRaceError,
    NonFastForwardError,
    NoRemoteRepositoryError,
)
from napari_shardscope.core.versioned.remotes.history import PackedHistory, extend_packs
from napari_shardscope.core.versioned.remotes.pack import (
    NodeHeader,
    decode_data,
    decode_keys,
    decode_node,
    encode_data_and_keys,
    encode_node,
    node_content,
    object_name,
)
from napari_shardscope.core.versioned.remotes.store import (
    CAS_ATTEMPTS,
    NodeRef,
    Progress,
    Refs,
    RemoteInstance,
    RemoteStore,
    Transfer,
)
from napari_shardscope.core.versioned.repository import Repository, create_repository

#: Data objects downloaded together by a fetch (each holds up to ``DATA_OBJECT_BYTES`` of records), of one
#: version or of many.
DATA_WINDOW = 16
#: Fetched versions adopted per local transaction.
ADOPT_BATCH = 1000
#: A push uploads its objects in waves of about this many bytes or versions (existence checks, then writes).
UPLOAD_BYTES = 64 * 1024 * 1024
UPLOAD_VERSIONS = 2000
#: How many ids a clone reserves per counter at a time.
ID_BLOCK = 100_000
#: ``merge(repo, ours_branch, theirs_uuid) -> open merge version`` (pull's 3-way merge).
Merger = Callable[[Repository, str, str], Version]
#: ``prefetch(repo) -> reports``: what a data type copies for offline work after ``clone(prefetch=True)``.
Prefetcher = Callable[[Repository], Sequence[Any]]
_prefetchers: list[Prefetcher] = []


def use_prefetcher(prefetcher: Prefetcher) -> None:
    """Have ``clone(prefetch=True)`` run ``prefetcher`` on the finished clone (a data type's offline copy:
    the labelmap registers the copy of its base segmentation, :mod:`napari_shardscope.core.labelmap.remote`)."""
    if prefetcher not in _prefetchers:
        _prefetchers.append(prefetcher)


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


@dataclass(frozen=True)
class PushResult:
    """What a push did."""

    remote: str
    branch: str
    head: str
    previous: str | None
    sent: tuple[str, ...]
    forced: bool
    transfer: Transfer

    @property
    def up_to_date(self) -> bool:
        return self.previous == self.head and not self.sent

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "branch": self.branch, "head": self.head, "previous": self.previous,
                "versions_sent": list(self.sent), "forced": self.forced, "up_to_date": self.up_to_date,
                **self.transfer.to_json()}


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


@dataclass
class _Walk:
    headers: dict[str, tuple[str, NodeHeader]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


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


def _check_same(repo: Repository, refs: Refs, url: str) -> None:
    if refs.root.node != repo.root.uuid:
        raise ArgumentError(f"{url} holds another repository (root {refs.root.node[:8]}, here {repo.root.short})")


# -- instances and unversioned data -----------------------------------------------------------------


def _instances_in(repo: Repository, refs: Refs) -> dict[str, RemoteInstance]:
    """The remote's instances this repository holds (a partial clone: only its own)."""
    only = C.instances_of(repo)
    return {name: ri for name, ri in refs.instances.items() if only is None or name in only}


def _check_unversioned(repo: Repository, store: RemoteStore, refs: Refs, spool: _Spool) -> list[pages.Incoming]:
    """Download, verify and decode the unversioned pages this repository lacks, into ``spool``."""
    out = []
    for name, ri in _instances_in(repo, refs).items():
        incoming = pages.plan_fetch(repo, store, name, ri, spool.put)
        if incoming is not None:
            out.append(incoming)
    return out


def _adopt_instances(repo: Repository, refs: Refs, spool: _Spool, incoming: list[pages.Incoming]) -> None:
    """Add the remote's instances and the unversioned pages :func:`_check_unversioned` verified."""
    for name, ri in _instances_in(repo, refs).items():
        repo.adopt_instance(name, ri.type, ri.config)
    for got in incoming:
        pages.adopt_pages(repo, got, spool.get)


def _sync_instances_in(repo: Repository, store: RemoteStore, refs: Refs) -> None:
    with _Spool(C.spool_directory(repo)) as spool:
        _adopt_instances(repo, refs, spool, _check_unversioned(repo, store, refs, spool))


class _Spool:
    """A fetch's verified objects, kept on disk between checking all of them and adopting any.

    A fetch downloads, hash-checks and decodes every object first (one at a time in memory) and
    writes nothing to the repository until all passed, so a damaged or hostile object (a zlib bomb,
    a bad record) refuses the whole fetch with nothing adopted; the objects wait here meanwhile.
    The directory is per remote, used under the remote's state lock, emptied at the start of
    every fetch (one killed midway leaves it behind) and removed at the end.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)
        try:
            directory.mkdir(parents=True)
        except OSError as exc:
            raise storage_fault(exc, directory) from exc

    def __enter__(self) -> _Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def put(self, name: str, data: bytes) -> None:
        try:
            (self.directory / name).write_bytes(data)
        except OSError as exc:
            raise storage_fault(exc, self.directory / name) from exc

    def get(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()


def _instances_out(repo: Repository, store: RemoteStore, refs: Refs | None) -> dict[str, RemoteInstance]:
    out = dict(refs.instances) if refs is not None else {}
    for inst in repo.instances():
        have = out.get(inst.name)
        if have is not None and (have.type != inst.type or dict(have.config) != dict(inst.config)):
            raise ArgumentError(f"instance {inst.name!r} has another type or configuration on {store.url}")
        sent = pages.push_pages(repo, store, inst, have)
        if sent is not None:
            out[inst.name] = sent
        elif have is None:
            out[inst.name] = RemoteInstance(inst.type, dict(inst.config))
    return out


# -- fetch ----------------------------------------------------------------------------------------


def _only(node: NodeContent, instances: set[str] | None) -> NodeContent:
    """``node`` without the data of instances a partial clone leaves out."""
    if instances is None:
        return node
    return dataclasses.replace(node, entries=tuple(e for e in node.entries if e.instance in instances),
                               logs=tuple(g for g in node.logs if g.instance in instances))


def _walk(repo: Repository, history: PackedHistory, starts: Iterable[NodeRef], known: dict[str, str]) -> _Walk:
    """Node headers the remote has and this repository lacks, parents first.

    Node objects come from the remote's history packs (newest first, :mod:`.history`), so a walk of
    any length costs a few requests; a version no pack holds is read on its own.
    """
    walk = _Walk()
    done: set[str] = set()
    here = _local_versions(repo)
    stack: list[tuple[str, str, bool]] = [(r.node, r.object, False) for r in starts]
    while stack:
        uuid, obj, expanded = stack.pop()
        if uuid in done:
            continue
        if expanded:
            walk.order.append(uuid)
            done.add(uuid)
            continue
        if uuid not in walk.headers and here(uuid):
            known[uuid] = obj
            done.add(uuid)
            continue
        if uuid not in walk.headers:
            header = decode_node(obj, history.get(obj, "version record"))
            if header.uuid != uuid:
                raise StoreCorruptError(f"{history.url}: node object {obj} holds version {header.uuid}, not {uuid}")
            walk.headers[uuid] = (obj, header)
        stack.append((uuid, obj, True))
        for parent, pobj in reversed(walk.headers[uuid][1].parents):
            if parent not in done:
                stack.append((parent, pobj, False))
    return walk


#: Up to this many local versions, a walk reads their UUIDs once instead of one look-up per walked version.
WALK_LOCAL_SET = 4096


def _local_versions(repo: Repository) -> Callable[[str], bool]:
    """Whether a (full) UUID is a local version: a set for a small repository (a clone walks its whole
    history against one root), else a look-up each (a fetch of k versions into a long history)."""
    if repo.version_count() <= WALK_LOCAL_SET:
        return {v.uuid for v in repo.versions()}.__contains__
    return lambda uuid: has_version(repo, uuid)


class _Dag(Protocol):
    """What choosing a fetched version's branch asks of the DAG (a :class:`Batch` adopting them)."""

    def version(self, ref: str | Version) -> Version: ...

    def branch_fits(self, parents: tuple[str, ...], branch: str) -> bool: ...


def _local_branch(dag: _Dag, remote: str, header: NodeHeader, preferred: str | None,
                  chosen: dict[str, str], walk: _Walk) -> str:
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
    return _fetch(repo, remote, store, branches)


def _fetch(repo: Repository, remote: str, store: RemoteStore, branches: Sequence[str] | None) -> FetchResult:
    with C.holding_state(repo, remote):  # from reading the refs to saving what they said
        return _fetch_held(repo, remote, store, branches)


def _hollow_records(history: PackedHistory, walk: _Walk) -> dict[str, list[NodeEntry | NodeLog]]:
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


def _download_data(store: RemoteStore, walk: _Walk, uuids: Sequence[str], spool: _Spool) -> None:
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
    _check_same(repo, refs, store.url)
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
    with _Spool(C.spool_directory(repo, remote)) as spool:
        # every object is verified before anything is written: a bad one leaves the repository as it was
        incoming = _check_unversioned(repo, store, refs, spool)
        walk = _walk(repo, history, wanted.values(), state.objects)
        hollow = _hollow_records(history, walk) if lazy else {}
        _download_data(store, walk, [u for u in walk.order if u not in hollow], spool)
        _adopt_instances(repo, refs, spool, incoming)
        renamed = _adopt_walk(repo, remote, walk, wanted, spool, state, hollow)
    if branches:
        state.tracking.update(wanted)
    else:
        state.tracking = dict(wanted)
    C.save_state(repo, remote, state)
    return FetchResult(remote, tuple(walk.order), {b: r.node for b, r in state.tracking.items()}, renamed,
                       store.transfer, migrated)


def _adopt_walk(repo: Repository, remote: str, walk: _Walk, wanted: dict[str, NodeRef], spool: _Spool,
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
            for uuid in walk.order[first:first + ADOPT_BATCH]:
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
                batch.adopt_node(_only(node_content(header, records), only), branch=name, hollow=where)
                chosen[uuid] = name
                if name != header.branch:
                    renamed[uuid] = name
        for uuid in walk.order[first:first + ADOPT_BATCH]:  # committed: the remote has them, as these objects
            state.objects[uuid] = walk.headers[uuid][0]
    return renamed


# -- push -----------------------------------------------------------------------------------------


@dataclass
class _Upload:
    """A push's progress: versions sent, and the node objects and key listings its history pack holds."""

    sent: list[str] = field(default_factory=list)
    packed: list[bytes] = field(default_factory=list)


def _upload_history(repo: Repository, store: RemoteStore, head: Version, state: C.RemoteState,
                    upload: _Upload) -> None:
    """Send every ancestor of ``head`` (itself included) the remote lacks, objects first.

    Objects are named by their hashes, so a version's node object (which names its parents' node
    objects and its data objects) is made locally; many versions' objects go up together
    (``UPLOAD_BYTES`` at a time, existence checked in one wave, written in another), and a version
    counts as on the remote (``state.objects``) only once its wave is written.
    """
    partial = C.instances_of(repo) is not None
    names = dict(state.objects)
    wave: list[bytes] = []
    wave_versions: list[tuple[str, str]] = []
    size = 0

    def flush() -> None:
        nonlocal wave, wave_versions, size
        if wave:
            store.put_objects(wave, "version objects")
            for uuid, obj in wave_versions:
                state.objects[uuid] = obj
                upload.sent.append(uuid)
        wave, wave_versions, size = [], [], 0

    for v in reversed(repo.ancestry(head)):  # ascending local id: parents first
        if v.uuid in names:
            continue
        if partial and len(v.parents) > 1:
            # a merge version must hold every key its parents disagree on, in every instance; a
            # partial clone cannot write those of the instances it left out
            raise UnsupportedError(f"merge version {v.short} was made in a partial clone (--instances), which "
                                   f"cannot merge the instances it lacks; merge in a full clone and push from there")
        content = repo.read_node(v)
        datas, instances, keys = encode_data_and_keys(content)
        node = encode_node(content, names, [object_name(d) for d in datas], instances, region=C.region_of(repo),
                           keys=object_name(keys))
        names[v.uuid] = object_name(node)
        wave += [*datas, keys, node]
        wave_versions.append((v.uuid, names[v.uuid]))
        upload.packed += [node, keys]
        size += sum(len(d) for d in datas) + len(keys) + len(node)
        if size >= UPLOAD_BYTES or len(wave_versions) >= UPLOAD_VERSIONS:
            flush()
    flush()


def push(repo: Repository, remote: str = C.DEFAULT_REMOTE, branch: str = "main", *,
         force_with_lease: bool = False, progress: Progress | None = None) -> PushResult:
    """Send ``branch``'s newest committed version and its missing ancestors, then move the remote branch.

    Raises
    ------
    NonFastForwardError
        The remote branch holds versions this one lacks ("fetch and merge first").
    NoCompareAndSwapError, ReadOnlyRemoteError
        The remote cannot be pushed to safely.
    """
    store = open_remote(repo, remote, progress)
    return _push(repo, remote, store, branch, force_with_lease)


def _push(repo: Repository, remote: str, store: RemoteStore, branch: str, force_with_lease: bool) -> PushResult:
    with C.holding_state(repo, remote):  # the state loaded below is saved last, with nothing lost between
        return _push_held(repo, remote, store, branch, force_with_lease)


def _push_held(repo: Repository, remote: str, store: RemoteStore, branch: str, force_with_lease: bool) -> PushResult:
    head = last_committed(repo, branch)
    writer = C.writer_id(repo)
    state = C.load_state(repo, remote)
    if state.cas_checked:
        store.trust_cas()
    else:
        store.check_cas()
        state.cas_checked = True
    upload = _Upload()
    for _ in range(CAS_ATTEMPTS):
        refs, generation = store.read_refs()
        if refs is not None:
            _check_same(repo, refs, store.url)
        current = refs.branches.get(branch) if refs is not None else None
        if current is not None and current.node == head.uuid:
            state.tracking[branch] = current
            state.objects[head.uuid] = current.object
            C.save_state(repo, remote, state)
            return PushResult(remote, branch, head.uuid, current.node, tuple(upload.sent), False, store.transfer)
        forced = False
        if current is not None:
            ahead = has_version(repo, current.node) and current.node in {a.uuid for a in repo.ancestry(head)}
            if not ahead:
                lease = state.tracking.get(branch)
                if not force_with_lease or lease is None or lease.node != current.node:
                    why = ("the remote head was not the one last fetched here" if force_with_lease
                           else "fetch and merge first")
                    raise NonFastForwardError(
                        f"push of {branch!r} to {remote} refused: the remote branch is at {current.node[:8]}, which "
                        f"{head.short} does not contain; {why} (`shardscope pull`), or push with --force-with-lease")
                forced = True
        try:
            _upload_history(repo, store, head, state, upload)
            instances = _instances_out(repo, store, refs)
        finally:
            C.save_state(repo, remote, state)
        # this push's versions (every try's: a lost swap's pack was never named) join the history packs
        packs = extend_packs(store, refs.packs if refs is not None else (), upload.packed, len(upload.sent))
        ref = NodeRef(head.uuid, state.objects[head.uuid])
        if refs is None:
            root = repo.root
            refs = Refs(seq=0, writer=writer, root=NodeRef(root.uuid, state.objects[root.uuid]))
        region = C.region_of(repo)
        regions = {**refs.regions, branch: region} if region is not None else dict(refs.regions)
        new = refs.bumped(writer, branches={**refs.branches, branch: ref}, instances=instances, regions=regions,
                          packs=packs)
        if store.swap_refs(new, generation) is not None:
            state.tracking[branch] = ref
            C.save_state(repo, remote, state)
            if repo.id_source() is None:
                _start_reservations(repo, remote, store, writer)
            return PushResult(remote, branch, head.uuid, None if current is None else current.node,
                              tuple(upload.sent), forced, store.transfer)
    raise LostRaceError(f"{store.url}: the refs kept changing; push of {branch!r} gave up after {CAS_ATTEMPTS} tries")


# -- ids --------------------------------------------------------------------------------------------


def _start_reservations(repo: Repository, remote: str, store: RemoteStore, writer: str) -> None:
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


# -- pull, status ---------------------------------------------------------------------------------


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


# -- clone ----------------------------------------------------------------------------------------


def clone(url: str, dest: str | os.PathLike[str], *, branch: str | None = None, engine: str | None = None,
          remote: str = C.DEFAULT_REMOTE, region: str | None = None, instances: Sequence[str] | None = None,
          anonymous: bool = False, progress: Progress | None = None,
          prefetch: bool = False) -> tuple[Path, FetchResult]:
    """A new repository at ``dest`` holding the remote's branches (or ``branch``), with ``origin`` configured.

    Built in a hidden sibling directory and renamed into place when complete; reserves a block of
    ids per counter from a writable remote so offline edits never collide with other clones'.
    ``region`` (``"z0:z1,y0:y1,x0:x1"``, scale-0 voxels) makes a region clone: its labelmap edits
    are refused outside the region, and its pushes record the region on the branch. ``instances``
    makes a partial clone holding only those data instances (its fetches leave the others out).
    ``anonymous`` reads a public bucket without credentials (and remembers it for later fetches).

    Lazy by default: the clone holds the refs, every version's DAG record and the keys each version
    wrote (from the remote's history packs, a few requests whatever the history's length), and
    downloads a version's values the first time they are read, keeping them (hash-verified) in the
    repository directory; later fetches stay lazy. ``prefetch`` downloads every version's data now,
    for offline work (versions pushed before key listings existed are always downloaded).
    """
    box = C.parse_region(region) if region is not None else None
    target = Path(dest)
    remove_stale_clones(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ArgumentError(f"{target} already exists and is not an empty directory")
    store = RemoteStore(url, anonymous=anonymous, progress=progress)
    refs, _ = store.read_refs()
    if refs is None:
        raise NoRemoteRepositoryError(f"{url}: no remote repository here")
    if instances is not None:
        unknown = sorted(set(instances) - set(refs.instances))
        if unknown:
            raise ArgumentError(f"{url} has no data instance {unknown[0]!r} "
                                f"(instances: {', '.join(sorted(refs.instances)) or 'none'})")
    header = decode_node(refs.root.object, store.get_object(refs.root.object, "root version"))
    if header.uuid != refs.root.node or header.parents:
        raise CorruptObjectError(f"{url}: root object {refs.root.object} holds version {header.uuid}"
                                 f"{' with parents' if header.parents else ''}, not the root {refs.root.node}")
    records: list[NodeEntry | NodeLog] = []
    hollow_root = None
    if not prefetch and header.keys is not None:
        records = decode_keys(header.keys, store.get_object(header.keys, "root key listing"), header)
        hollow_root = HollowRef(remote, header.data)
    else:
        for data_name, data in zip(header.data, store.get_objects(header.data, "root data", in_flight=DATA_WINDOW),
                                   strict=True):
            records.extend(decode_data(data_name, data, header.instances))
    root = _only(node_content(header, records), set(instances) if instances is not None else None)
    work = target.parent / f".{target.name}.clone-{uuidlib.uuid4().hex[:8]}"
    repo = create_repository(work, engine=engine, root=root)
    ok = False
    try:
        (work / CLONE_OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        C.add_remote(repo, remote, url, anonymous=anonymous)
        if box is not None:
            C.set_region(repo, box)
        if instances is not None:
            C.set_instances(repo, list(instances))
        if not prefetch:
            C.set_lazy(repo, remote)
        _sync_instances_in(repo, store, refs)
        repo.fill_root(root, hollow=hollow_root)
        result = _fetch(repo, remote, store, [branch] if branch else None)
        if not store.read_only and not anonymous:
            writer = C.writer_id(repo)
            for counter in store.counter_names():
                repo.add_id_block(counter, store.reserve_ids(counter, ID_BLOCK, 0, writer))
            repo.set_id_source(remote)
        ok = True
    finally:
        repo.close()
        if not ok:  # a failed clone leaves nothing behind (a killed one leaves only the hidden directory)
            shutil.rmtree(work, ignore_errors=True)
    (work / CLONE_OWNER).unlink(missing_ok=True)
    if target.exists():
        target.rmdir()
    os.replace(work, target)
    if prefetch and _prefetchers:  # after the rename: the copies record paths under the final directory
        from napari_shardscope.core.versioned.repository import open_repository

        with open_repository(target) as done:
            reports = tuple(r for fn in _prefetchers for r in fn(done))
        result = dataclasses.replace(result, prefetched=reports)
    return target, result


CLONE_OWNER = "clone-owner"  # "host pid" of the process building a hidden clone directory


def _owner_alive(work: Path) -> bool:
    """Is the process that is building ``work`` still running (on this host)? Unknown owners count as alive
    for a minute (a clone between creating its directory and naming itself)."""
    try:
        host, pid = (work / CLONE_OWNER).read_text().split()
    except (OSError, ValueError):
        try:
            return time.time() - work.stat().st_mtime < 60
        except OSError:
            return False
    if host != socket.gethostname():
        return True  # another machine's clone on a shared disk: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def remove_stale_clones(target: Path) -> list[Path]:
    """Remove the hidden ``.DEST.clone-*`` directories killed clones to ``target`` left; return them.

    A clone builds in such a directory and renames it into place when complete, so one whose
    builder is gone holds nothing worth resuming beyond what a new clone fetches again (objects
    are content-addressed and small per node); a clone still running elsewhere is left alone.
    """
    removed = []
    for work in target.parent.glob(f".{target.name}.clone-*"):
        if work.is_dir() and not _owner_alive(work):
            shutil.rmtree(work, ignore_errors=True)
            removed.append(work)
    return removed


# -- checking a remote ------------------------------------------------------------------------------


def verify_remote(url: str) -> list[str]:
    """Problems of the remote at ``url`` (empty when sound): every object its refs reach must exist and verify.

    Walks the whole history from the root and every branch head, reading (and hash-checking) every
    node, data and unversioned object; what a crashed push may leave — objects no ref reaches — is
    not a problem.
    """
    store = RemoteStore(url)
    problems: list[str] = []
    refs, _ = store.read_refs()
    if refs is None:
        return [f"{url}: no refs object"]
    seen: set[str] = set()
    stack = [refs.root, *refs.branches.values()]
    while stack:
        ref = stack.pop()
        if ref.object in seen:
            continue
        seen.add(ref.object)
        try:
            header = decode_node(ref.object, store.get_object(ref.object))
            if header.uuid != ref.node:
                problems.append(f"node object {ref.object} holds {header.uuid}, not {ref.node}")
            records: list[NodeEntry | NodeLog] = []
            for data_name in header.data:
                records.extend(decode_data(data_name, store.get_object(data_name), header.instances))
            node_content(header, records)
        except ShardscopeError as exc:  # every typed failure is a finding here, not a reason to stop
            problems.append(f"version {ref.node}: {exc}")
            continue
        stack.extend(NodeRef(p, o) for p, o in header.parents)
    try:
        store.counter_names()  # a clone reserves ids from these: a damaged or huge ids.json breaks every clone
    except ShardscopeError as exc:
        problems.append(f"id counters: {exc}")
    for name, inst in refs.instances.items():
        if inst.unversioned is not None or inst.pages is not None:
            try:
                pages.verify_pages(store, inst)
            except ShardscopeError as exc:
                problems.append(f"unversioned data of {name}: {exc}")
    return problems


def remote_versions(url: str) -> dict[str, str]:
    """Every version the remote's refs reach: UUID → node object."""
    store = RemoteStore(url)
    refs, _ = store.require_refs()
    out: dict[str, str] = {}
    stack = [refs.root, *refs.branches.values()]
    while stack:
        ref = stack.pop()
        if ref.node in out:
            continue
        out[ref.node] = ref.object
        header = decode_node(ref.object, store.get_object(ref.object))
        stack.extend(NodeRef(p, o) for p, o in header.parents)
    return out
