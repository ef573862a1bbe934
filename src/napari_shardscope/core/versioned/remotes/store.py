"""A remote repository: a prefix on any store the byte-store door reaches, no server of ours.

Layout under the prefix::

    refs.json             the commit point: branches → (node UUID, node object), the root, the
                          instances; replaced only by compare-and-swap
    ids.json              id counters handed out in blocks to clones (DVID's nextlabel reservations),
                          also compare-and-swap
    objects/ab/cdef…      immutable objects named by the SHA-256 of their bytes (:mod:`.pack`)

Objects are always written before the refs that name them, so a reader following refs never meets
a missing object; a writer killed in between leaves only unreferenced objects, which the next
push reuses. ``refs.json`` and ``ids.json`` carry a sequence number and the writer's id: an S3
generation is the content's MD5, and without them a value going A → B → A would let a writer
holding A's generation overwrite B's successor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from napari_shardscope.core.bytestore import (
    ByteStore,
    open_store,
    read_bounded,
    read_bounded_many,
    read_ranges,
    write_many,
)
from napari_shardscope.core.bytestore.conditional import ConditionalStore, Versioned, probe_cas
from napari_shardscope.core.bytestore.context import shared_context
from napari_shardscope.core.errors import ArgumentError, FormatError
from napari_shardscope.core.versioned.remotes.errors import (
    CorruptObjectError,
    LostRaceError,
    NoCompareAndSwapError,
    NoRemoteRepositoryError,
    ReadOnlyRemoteError,
)
from napari_shardscope.core.versioned.remotes.pack import (
    MAX_OBJECT_BYTES,
    check_object_name,
    check_remote_branch,
    check_remote_instance,
    check_uuid,
    load_remote_json,
    object_key,
    object_name,
    verify,
)

REFS_KEY = "refs.json"
IDS_KEY = "ids.json"
REFS_FORMAT = "napari-shardscope remote"
REFS_VERSION = 1
#: Compare-and-swap attempts before a push or a reservation gives up on a busy remote.
CAS_ATTEMPTS = 50
MAX_REFS_BYTES = 16 * 1024 * 1024
#: Objects a batched transfer keeps in flight (existence checks, writes, small downloads).
OBJECTS_IN_FLIGHT = 64
#: Ids are uint64 (label ids, mutation ids): a counter the remote pushes past this is damage.
MAX_ID = 2**64 - 1


@dataclass(frozen=True)
class NodeRef:
    """A version on the remote: its UUID and its node object."""

    node: str
    object: str

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "object": self.object}


@dataclass(frozen=True)
class RemoteInstance:
    """A data instance as the remote records it, with its unversioned data and its key count.

    ``pages`` names the manifest object of the unversioned data's pages (:mod:`.pages`);
    ``unversioned`` the single object of all its key-values that remotes written before pages hold.
    """

    type: str
    config: Mapping[str, Any]
    unversioned: str | None = None
    keys: int = 0
    pages: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"type": self.type, "config": dict(self.config), "unversioned": self.unversioned, "keys": self.keys}
        if self.pages is not None:
            doc["pages"] = self.pages
        return doc


@dataclass(frozen=True)
class PackRef:
    """A history pack on the remote (:func:`~.pack.encode_pack`) and how many versions it holds."""

    name: str
    count: int

    def to_json(self) -> list[Any]:
        return [self.name, self.count]


@dataclass(frozen=True)
class Refs:
    """The refs object: the remote's branches, root and instances, with the CAS guard fields."""

    seq: int
    writer: str
    root: NodeRef
    branches: Mapping[str, NodeRef] = field(default_factory=dict)
    instances: Mapping[str, RemoteInstance] = field(default_factory=dict)
    regions: Mapping[str, Any] = field(default_factory=dict)
    #: History packs, oldest and largest first: every pushed version's node object and key listing in
    #: O(log versions) objects (:mod:`.history`). Remotes written before packs have none; a fetch then
    #: walks node by node.
    packs: tuple[PackRef, ...] = ()

    def to_bytes(self) -> bytes:
        doc = {"format": REFS_FORMAT, "version": REFS_VERSION, "seq": self.seq, "writer": self.writer,
               "root": self.root.to_json(), "branches": {b: r.to_json() for b, r in sorted(self.branches.items())},
               "instances": {n: i.to_json() for n, i in sorted(self.instances.items())},
               "regions": dict(self.regions)}
        if self.packs:
            doc["packs"] = [p.to_json() for p in self.packs]
        return json.dumps(doc, sort_keys=True, indent=1).encode()

    @staticmethod
    def from_bytes(data: bytes, where: str) -> Refs:
        """Decode a refs object read from a remote, checking every name in it.

        A remote is hostile input: branch and instance names must pass the local grammars, version
        UUIDs and object names must be hex of the right length (object names become store keys),
        and the document goes through the bounded JSON loader (size, nesting).
        """
        d = load_remote_json(data, where, MAX_REFS_BYTES)
        try:
            if d.get("format") != REFS_FORMAT:
                raise ValueError("not a napari-shardscope refs object")
            if int(d.get("version", 0)) > REFS_VERSION:
                raise ValueError(f"refs format {d['version']} is newer than this library")
            seq = int(d["seq"])
            if seq < 0:
                raise ValueError(f"negative sequence number {seq}")
            return Refs(seq=seq, writer=str(d["writer"]), root=_node_ref(d["root"], where),
                        branches={check_remote_branch(b, where): _node_ref(r, where)
                                  for b, r in d["branches"].items()},
                        instances={check_remote_instance(n, where): _remote_instance(i, where)
                                   for n, i in d["instances"].items()},
                        regions={check_remote_branch(b, where): r for b, r in dict(d.get("regions", {})).items()},
                        packs=tuple(_pack_ref(p, where) for p in d.get("packs", [])))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise CorruptObjectError(f"{where}: unreadable refs object ({exc})") from exc

    def bumped(self, writer: str, **changes: Any) -> Refs:
        """The successor of these refs written by ``writer`` (sequence number + 1)."""
        return replace(self, seq=self.seq + 1, writer=writer, **changes)


def _node_ref(r: Any, where: str) -> NodeRef:
    """A :class:`NodeRef` read from a remote: a 32-hex UUID and a 64-hex object name."""
    if not isinstance(r, dict):
        raise TypeError(f"a node reference is not an object: {str(r)[:80]!r}")
    return NodeRef(check_uuid(r["node"], where), check_object_name(r["object"], where))


def _pack_ref(p: Any, where: str) -> PackRef:
    """A :class:`PackRef` read from a remote: an object name and a non-negative count."""
    name, count = p
    if int(count) < 0:
        raise ValueError(f"negative pack count {count}")
    return PackRef(check_object_name(name, where), int(count))


def _remote_instance(i: Any, where: str) -> RemoteInstance:
    """A :class:`RemoteInstance` read from a remote (its unversioned object name checked)."""
    if not isinstance(i, dict) or not isinstance(i.get("config"), dict):
        raise TypeError(f"an instance record is not an object with a config: {str(i)[:80]!r}")
    unversioned = i.get("unversioned")
    pages = i.get("pages")
    keys = int(i.get("keys", 0))
    if keys < 0:
        raise ValueError(f"negative key count {keys}")
    return RemoteInstance(str(i["type"]), dict(i["config"]),
                          None if unversioned is None else check_object_name(unversioned, where), keys,
                          None if pages is None else check_object_name(pages, where))


@dataclass
class Transfer:
    """What a fetch, push or clone moved (the bytes and objects a progress bar shows)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    objects_sent: int = 0
    objects_received: int = 0
    objects_skipped: int = 0

    def to_json(self) -> dict[str, int]:
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "objects_sent": self.objects_sent, "objects_received": self.objects_received,
                "objects_skipped": self.objects_skipped}


#: ``progress(transfer, what)``: called after every object moved (``what`` names the step).
Progress = Callable[[Transfer, str], None]


class RemoteStore:
    """Objects, refs and id counters of one remote repository at ``url``."""

    def __init__(self, url: str | os.PathLike[str], *, anonymous: bool = False,
                 progress: Progress | None = None) -> None:
        self.url = os.fspath(url)
        self.cas = ConditionalStore(self.url, anonymous=anonymous)
        self.objects: ByteStore = open_store(self.cas.location, context=shared_context())
        self.transfer = Transfer()
        self._progress = progress
        self._cas_checked = False

    @property
    def read_only(self) -> bool:
        return self.cas.read_only

    def where(self, key: str) -> str:
        """The URL of ``key`` on the remote, for messages (the remote's URL may or may not end with ``/``)."""
        return f"{self.url.rstrip('/')}/{key}"

    def _tick(self, what: str) -> None:
        if self._progress is not None:
            self._progress(self.transfer, what)

    # -- objects ----------------------------------------------------------------------------------

    def has_object(self, name: str) -> bool:
        return self.objects.read_range(object_key(name), 0, 0) is not None

    def has_objects(self, names: Sequence[str]) -> list[bool]:
        """:meth:`has_object` of each name, the requests in flight together (one round trip per window)."""
        got = read_ranges(self.objects, [(object_key(n), 0, 0) for n in names], max_gap=None)
        return [g is not None for g in got]

    def put_objects(self, datas: Sequence[bytes], what: str = "object") -> list[str]:
        """:meth:`put_object` of each, batched: one wave of existence checks, one of writes; their names."""
        if self.read_only:
            raise ReadOnlyRemoteError(f"{self.url} is read-only (http); push to s3://, gs:// or a directory")
        names = [object_name(d) for d in datas]
        todo: dict[str, bytes] = {}
        unique = list(dict.fromkeys(names))
        for name, there in zip(unique, self.has_objects(unique), strict=True):
            if there:
                self.transfer.objects_skipped += 1
            else:
                todo[name] = datas[names.index(name)]
        write_many(self.objects, [(object_key(n), d) for n, d in todo.items()], in_flight=OBJECTS_IN_FLIGHT)
        for d in todo.values():
            self.transfer.bytes_sent += len(d)
            self.transfer.objects_sent += 1
            self._tick(what)
        return names

    def get_objects(self, names: Sequence[str], what: str = "object", *,
                    in_flight: int | None = None) -> list[bytes]:
        """:meth:`get_object` of each name, downloads in flight together (bounded windows)."""
        for name in names:
            check_object_name(name, self.url)
        keys = [object_key(n) for n in names]
        window = max(1, in_flight or OBJECTS_IN_FLIGHT)
        got: list[bytes | None] = []
        try:
            for first in range(0, len(keys), window):
                got += read_bounded_many(self.objects, keys[first:first + window], MAX_OBJECT_BYTES,
                                         "a remote object")
        except FormatError as exc:
            raise CorruptObjectError(f"{self.where(exc.key or '')}: {exc.message}") from exc
        out: list[bytes] = []
        for name, key, data in zip(names, keys, got, strict=True):
            if data is None:
                raise CorruptObjectError(f"{self.where(key)}: object {name} is missing")
            self.transfer.bytes_received += len(data)
            self.transfer.objects_received += 1
            self._tick(what)
            out.append(verify(name, data))
        return out

    def put_object(self, data: bytes, what: str = "object") -> str:
        """Store ``data`` under its hash unless it is there already; its name."""
        if self.read_only:
            raise ReadOnlyRemoteError(f"{self.url} is read-only (http); push to s3://, gs:// or a directory")
        name = object_name(data)
        if self.has_object(name):
            self.transfer.objects_skipped += 1
        else:
            self.objects.write(object_key(name), data)
            self.transfer.bytes_sent += len(data)
            self.transfer.objects_sent += 1
        self._tick(what)
        return name

    def get_object(self, name: str, what: str = "object") -> bytes:
        """The verified bytes of object ``name`` (a missing or damaged object is a corrupt remote).

        Read through the bounded door: an object over :data:`MAX_OBJECT_BYTES` is refused before
        its bytes arrive.
        """
        check_object_name(name, self.url)
        key = object_key(name)
        try:
            data = read_bounded(self.objects, key, MAX_OBJECT_BYTES, "a remote object")
        except FormatError as exc:
            raise CorruptObjectError(f"{self.where(key)}: {exc.message}") from exc
        if data is None:
            raise CorruptObjectError(f"{self.where(key)}: object {name} is missing")
        self.transfer.bytes_received += len(data)
        self.transfer.objects_received += 1
        self._tick(what)
        return verify(name, data)

    # -- refs ---------------------------------------------------------------------------------------

    def read_refs(self) -> tuple[Refs | None, bytes]:
        """The refs (None: no repository here yet) and the generation to compare-and-swap against."""
        got = self._read_document(REFS_KEY, "a refs object")
        if got.value is None:
            return None, got.generation
        self.transfer.bytes_received += len(got.value)
        return Refs.from_bytes(got.value, self.where(REFS_KEY)), got.generation

    def _read_document(self, key: str, what: str) -> Versioned:
        """``refs.json`` or ``ids.json`` with its generation, refused over :data:`MAX_REFS_BYTES` before reading."""
        try:
            return self.cas.read_generation(key, MAX_REFS_BYTES, what)
        except FormatError as exc:
            raise CorruptObjectError(str(exc)) from exc

    def require_refs(self) -> tuple[Refs, bytes]:
        refs, gen = self.read_refs()
        if refs is None:
            raise NoRemoteRepositoryError(f"{self.url}: no remote repository here (no {REFS_KEY}); push to create one")
        return refs, gen

    def check_cas(self) -> None:
        """Refuse to write refs where a stale compare-and-swap is not refused (probed once per store)."""
        if self.read_only:
            raise ReadOnlyRemoteError(f"{self.url} is read-only (http); push to s3://, gs:// or a directory")
        if not self._cas_checked:
            if not probe_cas(self.cas):
                raise NoCompareAndSwapError(
                    f"{self.url}: the store accepted a stale conditional write, so two pushers could lose each "
                    f"other's commits; use a store with conditional writes (S3 with If-Match, GCS, a local disk)")
            self._cas_checked = True

    def trust_cas(self) -> None:
        """Skip the probe: it held for this remote before (recorded in the local remote state)."""
        if self.read_only:
            raise ReadOnlyRemoteError(f"{self.url} is read-only (http); push to s3://, gs:// or a directory")
        self._cas_checked = True

    def swap_refs(self, refs: Refs, generation: bytes) -> bytes | None:
        """Write ``refs`` if the refs are still at ``generation``; the new generation or None (lost)."""
        self.check_cas()
        data = refs.to_bytes()
        new = self.cas.write_if(REFS_KEY, data, generation)
        if new is not None:
            self.transfer.bytes_sent += len(data)
        return new

    # -- id counters --------------------------------------------------------------------------------

    def counter_names(self) -> list[str]:
        """The id counters the remote hands out (none before the first reservation).

        A damaged ``ids.json`` is a :class:`CorruptObjectError`, not "no counters": a clone that
        silently skipped its reservations would later hand out ids another clone owns.
        """
        got = self._read_document(IDS_KEY, "the id counters")
        if got.value is None:
            return []
        where = self.where(IDS_KEY)
        counters = load_remote_json(got.value, where, MAX_REFS_BYTES).get("counters")
        if not isinstance(counters, dict):
            raise CorruptObjectError(f"{where}: unreadable id counters (no counters object)")
        return sorted(str(c) for c in counters)

    def reserve_ids(self, counter: str, count: int, minimum: int, writer: str) -> range:
        """Reserve ``count`` ids of ``counter`` (never below ``minimum``) by compare-and-swap on ``ids.json``.

        Every clone asks the same counter, so the blocks handed out never overlap; a writer killed
        after the swap only wastes its block.
        """
        if count < 1 or minimum < 0:
            raise ArgumentError(f"bad id reservation: count={count}, minimum={minimum}")
        self.check_cas()
        self.require_refs()  # a directory remote that vanished (unmounted) must not start a fresh counter
        for _ in range(CAS_ATTEMPTS):
            got = self._read_document(IDS_KEY, "the id counters")
            if got.value is None:
                doc: dict[str, Any] = {"seq": 0, "writer": writer, "counters": {}}
            else:
                where = self.where(IDS_KEY)
                doc = load_remote_json(got.value, where, MAX_REFS_BYTES)
                if not isinstance(doc.get("counters"), dict):
                    raise CorruptObjectError(f"{where}: unreadable id counters (no counters object)")
            try:
                start = max(int(doc["counters"].get(counter, 0)), minimum)
                doc["seq"] = int(doc.get("seq", 0)) + 1
            except (ValueError, TypeError, OverflowError) as exc:
                raise CorruptObjectError(f"{self.where(IDS_KEY)}: unreadable id counters ({exc})") from exc
            if start + count > MAX_ID:  # ids are uint64 everywhere downstream
                raise CorruptObjectError(f"{self.where(IDS_KEY)}: counter {counter!r} at {start} leaves no "
                                         f"{count} ids below 2**64")
            doc["counters"][counter] = start + count
            doc["writer"] = writer
            if self.cas.write_if(IDS_KEY, json.dumps(doc, sort_keys=True).encode(), got.generation) is not None:
                return range(start, start + count)
        raise LostRaceError(f"{self.url}: could not reserve ids of {counter!r} after {CAS_ATTEMPTS} attempts")
