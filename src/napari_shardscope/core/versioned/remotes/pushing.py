"""push: send a branch's committed versions the remote lacks, then move the remote branch (git's word).

A push sends only committed versions, and only those the remote lacks (objects first), then moves
the branch by one compare-and-swap of the refs. A push that is not a fast-forward is refused
("fetch and merge first") unless ``force_with_lease`` and the remote head is still the one last
seen here. A lost swap is retried against the new refs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from napari_shardscope.core.errors import UnsupportedError
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.endpoints import (
    check_same_repository,
    has_version,
    last_committed,
    open_remote,
)
from napari_shardscope.core.versioned.remotes.errors import LostRaceError, NonFastForwardError
from napari_shardscope.core.versioned.remotes.history import extend_packs
from napari_shardscope.core.versioned.remotes.id_blocks import start_reservations
from napari_shardscope.core.versioned.remotes.instances import instances_out
from napari_shardscope.core.versioned.remotes.pack import encode_data_and_keys, encode_node, object_name
from napari_shardscope.core.versioned.remotes.store import CAS_ATTEMPTS, NodeRef, Progress, Refs, RemoteStore, Transfer
from napari_shardscope.core.versioned.repository import Repository

#: A push uploads its objects in waves of about this many bytes or versions (existence checks, then writes).
UPLOAD_BYTES = 64 * 1024 * 1024
UPLOAD_VERSIONS = 2000


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
            check_same_repository(repo, refs, store.url)
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
            instances = instances_out(repo, store, refs)
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
                start_reservations(repo, remote, store, writer)
            return PushResult(remote, branch, head.uuid, None if current is None else current.node,
                              tuple(upload.sent), forced, store.transfer)
    raise LostRaceError(f"{store.url}: the refs kept changing; push of {branch!r} gave up after {CAS_ATTEMPTS} tries")
