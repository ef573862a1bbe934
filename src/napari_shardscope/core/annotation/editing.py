"""The one edit transaction of an annotation instance: the editor, the commit and the undo stacks.

Every edit of :class:`~napari_shardscope.core.annotation.version.AnnotationVersion` runs through an
:class:`Editor` (reads through the transaction, the base and earlier writes of the same edit; writes
the records it changes and their index keys) and :func:`commit_edit` (one mutation-log record and
the undo/redo bookkeeping). Kept apart from the version handle so the handle reads as its queries.
"""

from __future__ import annotations

import getpass
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.base import TOMBSTONE, AnnotationBase
from napari_shardscope.core.annotation.errors import (
    AnnotationRecordError,
    UnknownAnnotationError,
)
from napari_shardscope.core.annotation.model import (
    Point,
    Stored,
    decode_record,
    encode_record,
)
from napari_shardscope.core.annotation.mutations import AnnotationMutation, KeyChange
from napari_shardscope.core.annotation.synapse_index import edge_items
from napari_shardscope.core.labelmap import Labelmap
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.view import VersionView, VersionWriter

if TYPE_CHECKING:
    pass


class AnnotationBackend(Protocol):
    """What a version handle asks of its instance (:class:`~.instance.AnnotationInstance` is the one)."""

    repo: Repository
    instance: Instance
    labelmap: Labelmap
    block: tuple[int, int, int]
    shape: tuple[int, int, int]
    edit_lock: threading.RLock

    @property
    def name(self) -> str: ...

    @property
    def base(self) -> AnnotationBase | None:
        """The imported annotations every version starts from (None: the instance started empty)."""
        ...

    def top_up_ids(self) -> dict[str, int]:
        """In a clone, reserve more ids from the remote when few are left."""
        ...


def default_user() -> str:
    """Who edits, for the mutation log: ``$SHARDSCOPE_USER``, else the login name."""
    env = os.environ.get("SHARDSCOPE_USER")
    if env:
        return env
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "unknown"


def block_of(point: Point, block: tuple[int, int, int]) -> tuple[int, int, int]:
    return point[0] // block[0], point[1] // block[1], point[2] // block[2]


def index_keys(s: Stored | None, block: tuple[int, int, int]) -> set[bytes]:
    """The index keys a record has (spatial, supervoxel and tags): derived from the record alone."""
    if s is None:
        return set()
    a = s.annotation
    return {K.spatial_key(block_of(a.point, block), a.id), K.supervoxel_key(s.supervoxel, a.id),
            *(K.tag_key(t, a.id) for t in a.tags)}


def box_corner(value: object) -> list[int] | None:
    """Three integer voxel coordinates (any sign: a box may reach past the volume), or None."""
    try:
        items = list(value)  # type: ignore[call-overload]
    except TypeError:
        return None
    if len(items) != 3 or any(isinstance(v, bool) or not isinstance(v, int | np.integer) for v in items):
        return None
    return [int(v) for v in items]


def decode(aid: int, raw: bytes | None) -> Stored | None:
    """A stored record value (None: no key; a base tombstone: deleted)."""
    return None if raw is None or raw == TOMBSTONE else decode_record(aid, raw, key=f"annotation {aid}")


def effective(base: AnnotationBase | None, aid: int, raw: bytes | None) -> Stored | None:
    """Annotation ``aid`` as a version sees it: its stored record, else the base's (a tombstone hides that)."""
    if raw is None and base is not None:
        return base.stored([aid]).get(aid)
    return decode(aid, raw)


class Editor:
    """The keys one edit writes, with what each held before (reads see the edit's own writes)."""

    def __init__(self, w: VersionWriter, instance: Instance, block: tuple[int, int, int],
                 base: AnnotationBase | None = None) -> None:
        self.w = w
        self.instance = instance
        self.block = block
        self.base = base
        self.before: dict[bytes, bytes | None] = {}
        self.after: dict[bytes, bytes | None] = {}
        self.ids: set[int] = set()

    def read(self, key: bytes) -> bytes | None:
        return self.after[key] if key in self.after else self.w.get(self.instance, key)

    def set(self, key: bytes, value: bytes | None) -> None:
        if key not in self.before:
            self.before[key] = self.w.get(self.instance, key)
        self.after[key] = value

    def get(self, aid: int) -> Stored | None:
        return effective(self.base, aid, self.read(K.record_key(aid)))

    def require(self, aid: int) -> Stored:
        s = self.get(aid)
        if s is None:
            raise UnknownAnnotationError(f"annotation {aid} does not exist at version {self.w.version.short}")
        return s

    def store(self, aid: int, new: Stored | None) -> None:
        """Replace annotation ``aid``'s record (None: delete it) and its index keys."""
        old = self.get(aid)
        self.ids.add(aid)
        had, has = index_keys(old, self.block), index_keys(new, self.block)
        for k in sorted(had - has):
            self.set(k, None)
        for k in sorted(has - had):
            self.set(k, b"")
        edges_before = edge_items(old, self.get)
        gone = TOMBSTONE if self.base is not None and self.base.stored([aid]) else None
        self.set(K.record_key(aid), gone if new is None else encode_record(new))
        edges_after = edge_items(new, self.get)
        for k in sorted(set(edges_before) - set(edges_after)):
            self.set(k, None)
        for k, v in sorted(edges_after.items()):
            if edges_before.get(k) != v:
                self.set(k, v)

    def changes(self) -> tuple[KeyChange, ...]:
        return tuple(KeyChange(k, self.before[k], self.after[k]) for k in sorted(self.after)
                     if self.before[k] != self.after[k])


def commit_edit(w: VersionWriter, backend: AnnotationBackend, ed: Editor, operation: str, args: dict[str, Any],
                user: str | None, target: int | None = None) -> AnnotationMutation:
    """Write ``ed``'s keys, the mutation-log record and the stack bookkeeping, in ``w``'s transaction."""
    inst = backend.instance
    changes = ed.changes()
    for c in changes:
        if c.after is None:
            w.delete(inst, c.key)
        else:
            w.put(inst, c.key, c.after)
    mid = w.allocate_ids(K.mutations_counter(backend.name), 1, minimum=1)[0]
    m = AnnotationMutation(mid, operation, tuple(sorted(ed.ids)), args, user or default_user(), time.time(),
                           target, changes)
    seq = w.append_log(inst, m.to_bytes())
    _update_stacks(w, inst, m, seq)
    return m


def stack_top(view: VersionView, inst: Instance, key: bytes) -> int | None:
    raw = view.get(inst, key)
    return None if raw is None else K.decode_u64(raw, key=key)


def _update_stacks(w: VersionWriter, inst: Instance, m: AnnotationMutation, seq: int) -> None:
    """An edit pushes itself on the undo stack and empties the redo stack; an undo pops what it inverted
    and pushes itself on the redo stack; a redo pops that undo and pushes itself on the undo stack."""
    version = w.version.uuid
    u_key, r_key = K.undo_top_key(version), K.redo_top_key(version)
    undo, redo = stack_top(w, inst, u_key), stack_top(w, inst, r_key)

    def push(stack: bytes, top: int | None) -> None:
        w.put(inst, K.link_key(m.mutation_id), K.encode_link(top or 0, version, seq))
        w.put(inst, stack, K.encode_u64(m.mutation_id))

    def pop(stack: bytes, top: int) -> None:
        below = read_link(w, inst, top)[0]
        if below:
            w.put(inst, stack, K.encode_u64(below))
        else:
            w.delete(inst, stack)

    if m.operation == "undo":
        assert undo is not None and undo == m.target
        pop(u_key, undo)
        push(r_key, redo)
    elif m.operation == "redo":
        assert redo is not None and redo == m.target
        pop(r_key, redo)
        push(u_key, undo)
    else:
        push(u_key, undo)
        if redo is not None:
            w.delete(inst, r_key)


def read_link(view: VersionView, inst: Instance, mid: int) -> tuple[int, str, int]:
    key = K.link_key(mid)
    raw = view.get(inst, key)
    if raw is None:
        raise AnnotationRecordError(f"the undo stack names mutation {mid}, whose link record is missing")
    return K.decode_link(raw, key=key)


def read_mutation(view: VersionView, repo: Repository, inst: Instance, mid: int) -> AnnotationMutation:
    _, uuid, seq = read_link(view, inst, mid)
    data = view.log_entry(inst, repo.version(uuid).vid, seq)
    if data is None:
        raise AnnotationRecordError(f"the undo stack names log entry {seq} of version {uuid[:8]}, which is missing")
    return AnnotationMutation.from_bytes(data, key=f"annotation mutation log of version {uuid[:8]}")
