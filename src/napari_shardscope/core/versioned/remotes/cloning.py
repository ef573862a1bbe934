"""clone: a new repository holding a remote's history, lazy by default.

A clone builds the new repository beside the destination and renames it into place at the end,
so an interrupted clone never leaves a half repository under the destination name; the hidden
directories killed clones leave are removed by the next clone to the same destination.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.hollow import HollowRef
from napari_shardscope.core.versioned.node import NodeEntry, NodeLog
from napari_shardscope.core.versioned.remotes import config as C
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError, NoRemoteRepositoryError
from napari_shardscope.core.versioned.remotes.fetching import DATA_WINDOW, FetchResult, fetch_from
from napari_shardscope.core.versioned.remotes.id_blocks import ID_BLOCK
from napari_shardscope.core.versioned.remotes.instances import only_instances, sync_instances_in
from napari_shardscope.core.versioned.remotes.pack import decode_data, decode_keys, decode_node, node_content
from napari_shardscope.core.versioned.remotes.store import Progress, RemoteStore
from napari_shardscope.core.versioned.repository import Repository, create_repository

#: ``prefetch(repo) -> reports``: what a data type copies for offline work after ``clone(prefetch=True)``.
Prefetcher = Callable[[Repository], Sequence[Any]]
_prefetchers: list[Prefetcher] = []


def use_prefetcher(prefetcher: Prefetcher) -> None:
    """Have ``clone(prefetch=True)`` run ``prefetcher`` on the finished clone (a data type's offline copy:
    the labelmap registers the copy of its base segmentation, :mod:`napari_shardscope.core.labelmap.remote`)."""
    if prefetcher not in _prefetchers:
        _prefetchers.append(prefetcher)


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
    root = only_instances(node_content(header, records), set(instances) if instances is not None else None)
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
        sync_instances_in(repo, store, refs)
        repo.fill_root(root, hollow=hollow_root)
        result = fetch_from(repo, remote, store, [branch] if branch else None)
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
