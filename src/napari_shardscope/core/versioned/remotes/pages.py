"""An instance's unversioned data on a remote: content-addressed pages listed by a manifest.

Unversioned data (a labelmap's label index of its base, millions of keys) used to travel as one
object of all its key-values: every push re-read the whole area and re-sent it whole when it grew,
every clone downloaded it whole, and past 256 MiB inflated it could not be cloned at all. Now the
sorted key-values are cut into pages by key range (:func:`~.pack.cut_pages`: content-defined
boundaries, so an added key changes its own page and every other page keeps its name), each page an
object named by its hash, and the instance's record on the remote names a manifest object listing
the pages (itself cut into levels when large, :func:`~.pack.build_manifests`).

* A push uploads only the pages the remote lacks (existence checked in one batch).
* A fetch or clone downloads only the pages this repository lacks.
* Neither reads the local unversioned area when it did not change since it was last synced: the
  repository counts writes to each instance's unversioned data
  (:meth:`~napari_shardscope.core.versioned.repository.Repository.unversioned_generation`), and
  ``remote-state/unversioned-pages.json`` records, per instance, the pages the area was synced as
  and the count it had then. A local write moves the count, so the record no longer applies and
  the next push or fetch reads the area once and records it again.

Remotes written before pages (an instance record with one ``unversioned`` object) are still read:
that object is a page of all the keys.

The merge rule is the one unversioned data always had (it is derived from immutable data, so two
copies agree where they overlap): a fetch adds the keys of pages it lacks; a push replaces the
remote's record when this repository holds more keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from napari_shardscope.core.bytestore import write_file_atomic
from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.versioned.errors import UnknownInstanceError
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.remotes.errors import CorruptObjectError
from napari_shardscope.core.versioned.remotes.pack import (
    PageRef,
    build_manifests,
    check_object_name,
    cut_pages,
    decode_manifest,
    decode_pairs,
    encode_pairs,
    object_name,
)
from napari_shardscope.core.versioned.remotes.store import RemoteInstance, RemoteStore
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.tracking import STATE_DIR, read_json_file

RECORD_FILE = "unversioned-pages.json"
#: Pages downloaded per batch (each at most ``PAGE_MAX_BYTES`` inflated, about a quarter of it stored).
PAGES_IN_FLIGHT = 32


@dataclass(frozen=True)
class Synced:
    """An instance's unversioned data as pages: the top manifest's name, the pages, the key count.

    ``generation`` is the instance's unversioned write count it describes. ``objects`` holds the
    encoded pages and manifests when they were just built (a scan), empty when read from the record.
    """

    manifest: str | None
    pages: tuple[PageRef, ...]
    keys: int
    generation: int
    objects: dict[str, bytes]

    def to_json(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "keys": self.keys, "generation": self.generation,
                "pages": [[p.name, p.keys] for p in self.pages]}


# -- the local record ---------------------------------------------------------------------------------


def _record_path(repo: Repository) -> Path:
    if repo.path is None:
        raise ArgumentError("remotes need a repository on disk (this one lives in memory)")
    return repo.path / STATE_DIR / RECORD_FILE


def _load_record(repo: Repository) -> dict[str, Any]:
    path = _record_path(repo)
    try:
        doc = read_json_file(path)
    except ShardscopeError:  # a damaged record only costs a scan: it is a cache
        return {}
    return doc if isinstance(doc, dict) else {}


def _recorded(repo: Repository, name: str, generation: int) -> Synced | None:
    """The recorded pages of instance ``name`` if its unversioned data has not changed since."""
    r = _load_record(repo).get(name)
    try:
        if not isinstance(r, dict) or int(r["generation"]) != generation:
            return None
        manifest = r["manifest"]
        pages = tuple(PageRef(check_object_name(n, RECORD_FILE), int(k)) for n, k in r["pages"])
        return Synced(None if manifest is None else check_object_name(manifest, RECORD_FILE), pages,
                      int(r["keys"]), generation, {})
    except (KeyError, TypeError, ValueError, ShardscopeError):  # a damaged record only costs a scan
        return None


def _record(repo: Repository, name: str, synced: Synced) -> None:
    """Remember that instance ``name``'s unversioned data at ``synced.generation`` is ``synced``."""
    doc = _load_record(repo)
    doc[name] = synced.to_json()
    path = _record_path(repo)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, json.dumps(doc, sort_keys=True).encode())
    except OSError as exc:
        raise storage_fault(exc, path) from exc


# -- local pages ----------------------------------------------------------------------------------------


def _generation(repo: Repository, inst: Instance | str) -> int:
    try:
        return repo.unversioned_generation(inst)
    except UnknownInstanceError:
        return 0


def build_pages(pairs: list[tuple[bytes, bytes]], generation: int) -> Synced:
    """The pages and manifests of sorted ``pairs`` (kept in ``objects`` for an upload)."""
    objects: dict[str, bytes] = {}
    refs: list[PageRef] = []
    for page in cut_pages(pairs):
        data = encode_pairs(page)
        name = object_name(data)
        objects[name] = data
        refs.append(PageRef(name, len(page)))
    if not refs:
        return Synced(None, (), 0, generation, {})
    lower, top = build_manifests(refs)
    for data in (*lower, top):
        objects[object_name(data)] = data
    return Synced(object_name(top), tuple(refs), len(pairs), generation, objects)


def local_pages(repo: Repository, inst: Instance | str, *, need_objects: bool = False) -> Synced:
    """The instance's unversioned data as pages: from the record when nothing changed, else read and cut.

    ``need_objects``: the page bytes are wanted (an upload), so a recorded state is rebuilt by a read.
    """
    name = inst if isinstance(inst, str) else inst.name
    generation = _generation(repo, inst)
    if not need_objects:
        got = _recorded(repo, name, generation)
        if got is not None:
            return got
    if generation == 0:
        return Synced(None, (), 0, 0, {})
    synced = build_pages(repo.scan_unversioned(inst), generation)
    _record(repo, name, replace(synced, objects={}))
    return synced


# -- push -----------------------------------------------------------------------------------------------


def _wants(keys: int, have: RemoteInstance | None) -> bool:
    """Does a local area of ``keys`` keys replace the remote's record ``have``?"""
    if keys == 0:
        return False
    if have is None:
        return True
    if have.pages is None and have.unversioned is not None:
        return keys >= have.keys  # an old single-object record: re-sent as pages when no smaller
    return keys > have.keys


def push_pages(repo: Repository, store: RemoteStore, inst: Instance,
               have: RemoteInstance | None) -> RemoteInstance | None:
    """The remote record of ``inst`` after sending the pages the remote lacks (None: keep ``have``)."""
    synced = local_pages(repo, inst)
    if have is not None and synced.manifest is not None and have.pages == synced.manifest:
        return None
    if not _wants(synced.keys, have):
        return None
    if not synced.objects:
        synced = local_pages(repo, inst, need_objects=True)
        if not _wants(synced.keys, have) or synced.manifest is None:
            return None
    store.put_objects(list(synced.objects.values()), f"unversioned pages of {inst.name}")
    return RemoteInstance(inst.type, dict(inst.config), None, synced.keys, synced.manifest)


# -- fetch ----------------------------------------------------------------------------------------------


def remote_pages(store: RemoteStore, manifest: str) -> list[PageRef]:
    """The pages a manifest object lists (its levels read a batch at a time)."""
    (data,) = store.get_objects([manifest], "unversioned manifest")
    level, entries = decode_manifest(manifest, data)
    while level > 0:
        lower: list[PageRef] = []
        datas = store.get_objects([e.name for e in entries], "unversioned manifest")
        for e, d in zip(entries, datas, strict=True):
            sub_level, sub = decode_manifest(e.name, d)
            if sub_level != level - 1:
                raise CorruptObjectError(f"object {e.name}: manifest level {sub_level}, expected {level - 1}")
            lower.extend(sub)
        level, entries = level - 1, lower
    return entries


@dataclass
class Incoming:
    """What a fetch will add to one instance's unversioned data: verified pages waiting in the spool."""

    instance: str
    pages: list[str]
    remote: Synced | None  # what the area is after adoption, when it becomes exactly the remote's
    generation: int


def plan_fetch(repo: Repository, store: RemoteStore, name: str, ri: RemoteInstance,
               spool_put: Any) -> Incoming | None:
    """Download and verify the pages of ``ri`` this repository lacks into the spool; None: nothing to add."""
    generation = _generation(repo, name)
    if ri.pages is None:
        if ri.unversioned is None:
            return None
        mine = local_pages(repo, name) if generation else Synced(None, (), 0, 0, {})
        if mine.keys >= ri.keys:
            return None
        (data,) = store.get_objects([ri.unversioned], f"unversioned data of {name}")
        decode_pairs(ri.unversioned, data)
        spool_put(ri.unversioned, data)
        return Incoming(name, [ri.unversioned], None, generation)
    recorded = _recorded(repo, name, generation) if generation else Synced(None, (), 0, 0, {})
    if recorded is not None and recorded.manifest == ri.pages:
        return None
    mine = recorded if recorded is not None else local_pages(repo, name)
    if mine.manifest == ri.pages:
        return None
    theirs = remote_pages(store, ri.pages)
    have = {p.name for p in mine.pages}
    lacking = list(dict.fromkeys(p.name for p in theirs if p.name not in have))
    for first in range(0, len(lacking), PAGES_IN_FLIGHT):
        batch = lacking[first:first + PAGES_IN_FLIGHT]
        for page, data in zip(batch, store.get_objects(batch, f"unversioned pages of {name}",
                                                       in_flight=PAGES_IN_FLIGHT), strict=True):
            decode_pairs(page, data)
            spool_put(page, data)
    theirs_names = {p.name for p in theirs}
    # the area becomes exactly the remote's when every local page is one of the remote's
    exact = have <= theirs_names
    after = Synced(ri.pages, tuple(theirs), ri.keys, generation, {}) if exact else None
    return Incoming(name, lacking, after, generation)


def adopt_pages(repo: Repository, incoming: Incoming, spool_get: Any) -> None:
    """Add the spooled pages' key-values (one transaction) and record the area when it is the remote's."""
    def pairs() -> Iterator[tuple[bytes, bytes]]:
        for page in incoming.pages:
            yield from decode_pairs(page, spool_get(page))

    if incoming.pages:
        repo.put_unversioned(incoming.instance, pairs())
    now = _generation(repo, incoming.instance)
    if incoming.remote is not None and now == incoming.generation + (1 if incoming.pages else 0):
        # no other write in between: the area is exactly the remote's pages
        _record(repo, incoming.instance, Synced(incoming.remote.manifest, incoming.remote.pages,
                                                incoming.remote.keys, now, {}))
    elif incoming.pages:
        # the union of what was here and the remote's pages: read once now (it changed), so the next
        # push or fetch finds it recorded instead of reading it
        local_pages(repo, incoming.instance)


def verify_pages(store: RemoteStore, ri: RemoteInstance) -> None:
    """Read and check every manifest and page of ``ri`` (``remote check``)."""
    if ri.pages is not None:
        pages = remote_pages(store, ri.pages)
        total = 0
        for first in range(0, len(pages), PAGES_IN_FLIGHT):
            batch = [p.name for p in pages[first:first + PAGES_IN_FLIGHT]]
            for page, data in zip(batch, store.get_objects(batch, in_flight=PAGES_IN_FLIGHT), strict=True):
                total += len(decode_pairs(page, data))
        if total != ri.keys:
            raise CorruptObjectError(f"{ri.pages}: pages hold {total} keys, the record says {ri.keys}")
    elif ri.unversioned is not None:
        decode_pairs(ri.unversioned, store.get_object(ri.unversioned))
