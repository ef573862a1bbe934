"""A local repository's remotes: their names and URLs, and what it last saw of each.

Kept as two small JSON files in the repository directory (written atomically: temp + rename),
beside the engine's files rather than inside the versioned store, because none of it is versioned
data and all of it can be rebuilt by a fetch:

* ``remotes.json`` — ``{"writer": id, "remotes": {name: {"url": url}}}``; ``writer`` names this
  repository in the remote's refs and id counters;
* ``remote-state/<name>.json`` — the remote-tracking heads (``origin/main`` …), O(branches);
* ``remote-state/<name>.objects`` — which of this repository's versions are on the remote as which
  node object (so a push sends only the rest): an append-only record, so a push or fetch writes
  what it changed, not the whole history (:mod:`.object_record`).

``<remote>/<branch>`` is a remote-tracking name, never a local branch
(:mod:`~napari_shardscope.core.versioned.tracking` resolves it); versions a fetch adopts beside a
local branch that moved on go on :func:`diverged_branch_name`, and branches an older fetch left
under a remote-tracking name are renamed to it by :func:`migrate_tracking_branches`.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from napari_shardscope.core.bytestore import parse_url, write_file_atomic
from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.dag import check_branch_name
from napari_shardscope.core.versioned.errors import StoreCorruptError
from napari_shardscope.core.versioned.remotes.errors import RemoteExistsError, UnknownRemoteError
from napari_shardscope.core.versioned.remotes.object_record import ObjectRecord, record_path
from napari_shardscope.core.versioned.remotes.store import NodeRef
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.tracking import CONFIG_FILE, STATE_DIR, read_json_file, state_path
from napari_shardscope.core.versioned.writer_lock import WriterLock

DEFAULT_REMOTE = "origin"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass
class RemoteState:
    """What this repository knows of one remote.

    Attributes
    ----------
    tracking
        Remote branch → its head when last fetched or pushed (``origin/<branch>``).
    objects
        Version UUID → its node object on the remote (kept in its own append-only file).
    cas_checked
        The remote's compare-and-swap was probed and held (probed once per remote, not per push).
    """

    tracking: dict[str, NodeRef] = field(default_factory=dict)
    objects: ObjectRecord = field(default_factory=ObjectRecord)
    cas_checked: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**self.heads_json(), "objects": dict(sorted(self.objects.items()))}

    def heads_json(self) -> dict[str, Any]:
        """What the state file holds: the tracking heads and the CAS probe (the objects have a file of their own)."""
        return {"tracking": {b: r.to_json() for b, r in sorted(self.tracking.items())},
                "cas_checked": self.cas_checked}


def _directory(repo: Repository) -> Path:
    if repo.path is None:
        raise ArgumentError("remotes need a repository on disk (this one lives in memory)")
    return repo.path


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n")
    except OSError as exc:
        raise storage_fault(exc, path) from exc


def load_config(repo: Repository) -> dict[str, Any]:
    """The remotes file (with a writer id, created on first use)."""
    path = _directory(repo) / CONFIG_FILE
    doc = read_json_file(path)
    if "writer" not in doc:
        doc = {"writer": uuid.uuid4().hex, "remotes": dict(doc.get("remotes", {}))}
        _write_json(path, doc)
    doc.setdefault("remotes", {})
    return doc


def writer_id(repo: Repository) -> str:
    """This repository's id in the remotes' refs and id counters."""
    return str(load_config(repo)["writer"])


def check_remote_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ArgumentError(f"bad remote name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    return name


def add_remote(repo: Repository, name: str, url: str, *, anonymous: bool = False) -> dict[str, str]:
    """Configure remote ``name`` at ``url`` (any URL the byte-store door parses); ``anonymous``: no credentials.

    From now on ``name/<branch>`` names that remote's branches, so local branches already named so
    are renamed (:func:`migrate_tracking_branches`); returns what was renamed (old → new name).
    """
    check_remote_name(name)
    parse_url(url)  # a bad URL is an argument error now, not at the first fetch
    doc = load_config(repo)
    if name in doc["remotes"]:
        raise RemoteExistsError(f"a remote named {name!r} exists already ({doc['remotes'][name]['url']})")
    doc["remotes"][name] = {"url": url, **({"anonymous": True} if anonymous else {})}
    _write_json(_directory(repo) / CONFIG_FILE, doc)
    return migrate_tracking_branches(repo, name)


def diverged_branch_name(remote: str, branch: str, first: str) -> str:
    """The local branch of versions fetched from ``remote``'s ``branch`` beside a local branch that moved on.

    ``main+origin-1a2b3c4d`` (``first``: the UUID of the first such version): never ``origin/main``,
    which names the remote-tracking head, and unique per divergence. A name over the length limit
    falls back to ``fetched-<first UUID>``.
    """
    name = f"{branch}+{remote}-{first[:8]}"
    try:
        return check_branch_name(name)
    except ArgumentError:
        return f"fetched-{first}"


def migrate_tracking_branches(repo: Repository, remote: str) -> dict[str, str]:
    """Rename local branches named ``<remote>/…`` (left by fetches before remote-tracking names were refs).

    Each becomes :func:`diverged_branch_name` of its first version, so ``<remote>/<branch>`` always
    names the remote-tracking head and never a stale local chain. Returns old → new name.
    """
    renamed: dict[str, str] = {}
    for b in repo.branches():
        if b.name.startswith(f"{remote}/"):
            new = diverged_branch_name(remote, b.name[len(remote) + 1:], b.base)
            repo.rename_branch(b.name, new)
            renamed[b.name] = new
    return renamed


def remove_remote(repo: Repository, name: str) -> None:
    """Forget remote ``name`` and what was known of it (the remote itself is untouched)."""
    doc = load_config(repo)
    if name not in doc["remotes"]:
        raise UnknownRemoteError(f"no remote named {name!r}")
    del doc["remotes"][name]
    _write_json(_directory(repo) / CONFIG_FILE, doc)
    state_path(_directory(repo), name).unlink(missing_ok=True)
    record_path(state_path(_directory(repo), name)).unlink(missing_ok=True)


def list_remotes(repo: Repository) -> dict[str, str]:
    """Remote name → URL."""
    return {n: str(r["url"]) for n, r in sorted(load_config(repo)["remotes"].items())}


def remote_url(repo: Repository, name: str) -> str:
    remotes = list_remotes(repo)
    if name not in remotes:
        shown = ", ".join(remotes) or "none"
        raise UnknownRemoteError(f"no remote named {name!r} (remotes: {shown}); add one with `remote add`")
    return remotes[name]


def is_anonymous(repo: Repository, name: str) -> bool:
    """Whether remote ``name`` is read without credentials (a public bucket)."""
    remote_url(repo, name)
    return bool(load_config(repo)["remotes"][name].get("anonymous", False))


def set_lazy(repo: Repository, name: str, lazy: bool = True) -> None:
    """Make fetches from remote ``name`` adopt versions hollow (data read on first use: a lazy clone) or not."""
    doc = load_config(repo)
    if name not in doc["remotes"]:
        raise UnknownRemoteError(f"no remote named {name!r}")
    if lazy:
        doc["remotes"][name]["lazy"] = True
    else:
        doc["remotes"][name].pop("lazy", None)
    _write_json(_directory(repo) / CONFIG_FILE, doc)


def is_lazy(repo: Repository, name: str) -> bool:
    """Whether fetches from remote ``name`` leave version data on the remote until it is read."""
    remote_url(repo, name)
    return bool(load_config(repo)["remotes"][name].get("lazy", False))


def load_state(repo: Repository, name: str) -> RemoteState:
    path = state_path(_directory(repo), check_remote_name(name))
    doc = read_json_file(path)
    objects = ObjectRecord.load(record_path(path))
    try:
        state = RemoteState(tracking={str(b): NodeRef(str(r["node"]), str(r["object"]))
                                      for b, r in doc.get("tracking", {}).items()},
                            objects=objects, cas_checked=bool(doc.get("cas_checked", False)))
        # a state file written before the record: its objects move to the record on the next save
        for uuid, obj in doc.get("objects", {}).items():
            if str(uuid) not in objects:
                objects[str(uuid)] = str(obj)
    except (KeyError, TypeError, AttributeError) as exc:
        raise StoreCorruptError(f"remote state of {name!r} is damaged ({exc}); delete it and fetch again") from exc
    return state


def save_state(repo: Repository, name: str, state: RemoteState) -> None:
    """Append the objects learned since loading to the record, then replace the (small) state file.

    In that order: a kill between the two leaves true entries in the record and the old heads, as
    if the last save had not happened, and an older state file's objects are in the record before
    the state file stops holding them.
    """
    path = state_path(_directory(repo), check_remote_name(name))
    record = record_path(path)
    if state.objects.path != record:  # a state made rather than loaded: add to the record, never replace it
        loaded = ObjectRecord.load(record)
        loaded.update(state.objects)
        state.objects = loaded
    state.objects.save()
    _write_json(path, state.heads_json())


def spool_directory(repo: Repository, name: str | None = None) -> Path:
    """Where a fetch from remote ``name`` keeps verified objects until it adopts them (None: a clone's)."""
    return _directory(repo) / STATE_DIR / (f"{check_remote_name(name)}.incoming" if name else "clone.incoming")


#: Seconds a fetch or push waits for another fetch or push of the same remote from this repository.
STATE_LOCK_TIMEOUT = 600.0
_STATE_LOCKS: dict[Path, WriterLock] = {}
_STATE_LOCKS_GUARD = threading.Lock()


@contextmanager
def holding_state(repo: Repository, name: str, timeout: float = STATE_LOCK_TIMEOUT) -> Iterator[None]:
    """Exclusive use of remote ``name``'s state file, from :func:`load_state` to the last :func:`save_state`.

    A fetch or push loads the state, works for a while (network transfers), and saves it: without
    this lock a second one (another thread, another ``shardscope`` process) that loaded the state
    earlier and saves later drops what the first recorded — its remote-tracking head, so ``status``
    keeps reporting a pushed branch as ahead, and its objects, which the next push uploads again.
    The lock is the repository's kind (:class:`~napari_shardscope.core.versioned.writer_lock.WriterLock`:
    a thread lock and an ``flock``, which the kernel drops for a killed process) on
    ``remote-state/<name>.lock``, one per file in this process.
    """
    directory = _directory(repo) / STATE_DIR
    file = f"{check_remote_name(name)}.lock"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_fault(exc, directory) from exc
    with _STATE_LOCKS_GUARD:
        lock = _STATE_LOCKS.setdefault(directory / file, WriterLock(
            directory, STATE_LOCK_TIMEOUT, file=file, what=f"the state of remote {name!r} (a fetch or push)"))
    with lock.hold(timeout):
        try:
            yield
        finally:
            lock.close()  # still held by this thread: the flock goes with the descriptor, no file stays open


REGION_FILE = "region.json"


def parse_region(text: str) -> list[list[int]]:
    """``"z0:z1,y0:y1,x0:x1"`` (voxels at scale 0, half-open) as ``[[z0, z1], [y0, y1], [x0, x1]]``."""
    try:
        parts = [p.split(":") for p in text.split(",")]
        region = [[int(a), int(b)] for a, b in parts]
    except ValueError:
        raise ArgumentError(f"--region takes z0:z1,y0:y1,x0:x1 (integers), got {text!r}") from None
    if len(region) != 3 or any(a < 0 or b <= a for a, b in region):
        raise ArgumentError(f"--region needs three non-empty ranges z0:z1,y0:y1,x0:x1, got {text!r}")
    return region


def set_region(repo: Repository, region: list[list[int]]) -> None:
    """Record that this repository (a region clone) edits only inside ``region``."""
    _write_json(_directory(repo) / REGION_FILE, {"region": region})


def region_of(repo: Repository) -> list[list[int]] | None:
    """The region a region clone may edit (None: anywhere)."""
    if repo.path is None:
        return None
    doc = read_json_file(repo.path / REGION_FILE)
    region = doc.get("region")
    if region is None:
        return None
    try:
        return [[int(a), int(b)] for a, b in region]
    except (TypeError, ValueError) as exc:
        raise StoreCorruptError(f"{repo.path / REGION_FILE}: unreadable region ({exc})") from exc


INSTANCES_FILE = "instances.json"


def set_instances(repo: Repository, names: list[str]) -> None:
    """Record that this clone holds only these data instances (fetches leave the others out)."""
    _write_json(_directory(repo) / INSTANCES_FILE, {"instances": sorted(names)})


def instances_of(repo: Repository) -> set[str] | None:
    """The instances a partial clone holds (None: all)."""
    if repo.path is None:
        return None
    names = read_json_file(repo.path / INSTANCES_FILE).get("instances")
    return None if names is None else {str(n) for n in names}
