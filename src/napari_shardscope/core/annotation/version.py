"""Reads and edits of an annotation instance at one version (what the CLI and widgets will call).

An :class:`AnnotationVersion` is a light handle (instance + version UUID). Reads work at every
version; edits only at open ones (the store refuses the others with
:class:`~napari_shardscope.core.versioned.errors.CommittedVersionError`). Every edit is one write
transaction that writes the annotation records it changes, their index keys, one mutation-log
record and the undo-stack bookkeeping — nothing else, whatever the instance holds.

Which body owns an annotation is never stored: it is the body, in this version's labelmap, of the
supervoxel under the point. A merge or a cleave of bodies changes it without a write here.
"""

from __future__ import annotations

import getpass
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.base import TOMBSTONE, UNKNOWN_SUPERVOXEL, AnnotationBase
from napari_shardscope.core.annotation.errors import (
    AnnotationArgumentError,
    AnnotationExistsError,
    AnnotationRecordError,
    NothingToUndoError,
    UnknownAnnotationError,
)
from napari_shardscope.core.annotation.model import (
    INVERSE,
    Annotation,
    Point,
    Relationship,
    Stored,
    check_id,
    check_kind,
    check_point,
    check_properties,
    check_relation,
    check_tags,
    decode_record,
    encode_record,
    make_annotation,
)
from napari_shardscope.core.annotation.mutations import AnnotationMutation, KeyChange
from napari_shardscope.core.annotation.synapse_index import edge_items
from napari_shardscope.core.labelmap import Labelmap
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.view import VersionView, VersionWriter

if TYPE_CHECKING:
    from napari_shardscope.core.annotation.connectome import Connections, ConnectionTable, SynapseSite
    from napari_shardscope.core.annotation.export import AnnotationExportReport

T = TypeVar("T")


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
    """The index keys a record has (spatial and tags): derived from the record alone."""
    if s is None:
        return set()
    a = s.annotation
    return {K.spatial_key(block_of(a.point, block), a.id), *(K.tag_key(t, a.id) for t in a.tags)}


def _corner(value: object) -> list[int] | None:
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


def _top(view: VersionView, inst: Instance, key: bytes) -> int | None:
    raw = view.get(inst, key)
    return None if raw is None else K.decode_u64(raw, key=key)


def _update_stacks(w: VersionWriter, inst: Instance, m: AnnotationMutation, seq: int) -> None:
    """An edit pushes itself on the undo stack and empties the redo stack; an undo pops what it inverted
    and pushes itself on the redo stack; a redo pops that undo and pushes itself on the undo stack."""
    version = w.version.uuid
    u_key, r_key = K.undo_top_key(version), K.redo_top_key(version)
    undo, redo = _top(w, inst, u_key), _top(w, inst, r_key)

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


class AnnotationVersion:
    """An annotation instance at one version (from :meth:`AnnotationInstance.at`)."""

    def __init__(self, backend: AnnotationBackend, uuid: str) -> None:
        self.instance = backend
        self.uuid = uuid

    def __repr__(self) -> str:
        v = self.version
        return f"AnnotationVersion({self.instance.name!r}, {v.short}, branch={v.branch!r}, " \
               f"{'committed' if v.locked else 'open'})"

    @property
    def version(self) -> Version:
        return self.instance.repo.version(self.uuid)

    # -- reads -----------------------------------------------------------------------------------

    def find(self, aid: int) -> Annotation | None:
        """Annotation ``aid`` at this version (None: absent)."""
        aid = check_id(aid)
        with self.instance.repo.read(self.uuid) as view:
            raw = view.get(self.instance.instance, K.record_key(aid))
        s = effective(self.instance.base, aid, raw)
        return None if s is None else s.annotation

    def get(self, aid: int) -> Annotation:
        """Annotation ``aid`` (:class:`UnknownAnnotationError` when absent)."""
        a = self.find(aid)
        if a is None:
            raise UnknownAnnotationError(f"annotation {aid} does not exist at version {self.uuid[:8]}")
        return a

    def all(self) -> list[Annotation]:
        """Every annotation at this version, by id (costs the instance's size)."""
        with self.instance.repo.read(self.uuid) as view:
            stored = {K.id_of_record_key(k): v for k, v in view.scan(self.instance.instance, prefix=K.RECORD_PREFIX)}
        out = {aid: s.annotation for aid, raw in stored.items() if (s := decode(aid, raw)) is not None}
        base = self.instance.base
        if base is not None:
            for page in base.iter_stored():
                out.update((aid, s.annotation) for aid, s in page.items() if aid not in stored)
        return [out[i] for i in sorted(out)]

    def _records(self, view: VersionView, ids: Iterable[int]) -> list[Stored]:
        """The records of ``ids`` at this version, by id (an id the base holds and this version deleted is left out)."""
        ids = sorted(set(ids))
        raws = view.get_many(self.instance.instance, [K.record_key(i) for i in ids])
        base = self.instance.base
        from_base = {} if base is None else base.stored([i for i, r in zip(ids, raws, strict=True) if r is None])
        out = []
        for aid, raw in zip(ids, raws, strict=True):
            if raw == TOMBSTONE:
                continue
            if raw is None and aid in from_base:
                out.append(from_base[aid])
                continue
            if raw is None:
                raise AnnotationRecordError(f"an index names annotation {aid}, whose record is missing at version "
                                            f"{self.uuid[:8]}")
            s = decode(aid, raw)
            assert s is not None
            out.append(s)
        return out

    def in_box(self, lo: Sequence[int], hi: Sequence[int]) -> list[Annotation]:
        """Annotations whose point is in the box ``[lo, hi)`` (z, y, x voxels), by id.

        One range scan per row of blocks the box overlaps (clipped to the labelmap's shape), then
        the records of the candidates.
        """
        box_lo, box_hi = _corner(lo), _corner(hi)
        if box_lo is None or box_hi is None:
            raise AnnotationArgumentError(f"a box is two (z, y, x) corners of integers, got {lo!r}, {hi!r}")
        shape, block = self.instance.shape, self.instance.block
        clo = [max(0, v) for v in box_lo]
        chi = [min(s, v) for s, v in zip(shape, box_hi, strict=True)]
        if any(h <= c for c, h in zip(clo, chi, strict=True)):
            return []
        b0 = [c // b for c, b in zip(clo, block, strict=True)]
        b1 = [(h - 1) // b for h, b in zip(chi, block, strict=True)]
        ids: list[int] = []
        inst = self.instance.instance
        with self.instance.repo.read(self.uuid) as view:
            for bz in range(b0[0], b1[0] + 1):
                for by in range(b0[1], b1[1] + 1):
                    start = K.spatial_block_prefix((bz, by, b0[2]))
                    stop = K.spatial_block_prefix((bz, by, b1[2] + 1))
                    ids.extend(K.id_of_index_key(k) for k in view.keys(inst, start=start, stop=stop))
            if self.instance.base is not None:
                ids.extend(self.instance.base.ids_in_block_box(b0, b1).tolist())
            found = self._records(view, ids)
        return [s.annotation for s in found
                if all(c <= p < h for c, p, h in zip(box_lo, s.annotation.point, box_hi, strict=True))]

    def with_tag(self, tag: str) -> list[Annotation]:
        """Annotations carrying ``tag``, by id (one range scan of the tag index)."""
        (tag,) = check_tags([tag])
        with self.instance.repo.read(self.uuid) as view:
            ids = [K.id_of_index_key(k) for k in view.keys(self.instance.instance, prefix=K.tag_prefix(tag))]
            return [s.annotation for s in self._records(view, ids)]

    def body_of(self, aid: int) -> int:
        """The body owning annotation ``aid`` at this version: the labelmap's body at its point (0: none)."""
        a = self.get(aid)
        return self.instance.labelmap.at(self.uuid).body_at(a.point)

    def by_body(self, body: int) -> list[Annotation]:
        """Annotations whose point lies in ``body`` at this version, by id.

        The candidates are the annotations of the spatial blocks that hold the body (its label
        index); a candidate belongs when its recorded supervoxel still exists here and maps to the
        body, or — when a supervoxel split retired that supervoxel — when the voxel under its point
        does. No annotation record depends on the body map, so merges and cleaves need no write here.
        A body that does not exist here (merged away, never made) raises the labelmap's
        :class:`~napari_shardscope.core.labelmap.errors.UnknownLabelError`.
        """
        lm = self.instance.labelmap
        lmv = lm.at(self.uuid)
        blocks = lmv.sparsevol(int(body)).blocks
        inst = self.instance.instance
        with self.instance.repo.read(self.uuid) as view:
            ids: list[int] = []
            for bz, by, bx in blocks.tolist():
                prefix = K.spatial_block_prefix((bz, by, bx))
                ids.extend(K.id_of_index_key(k) for k in view.keys(inst, prefix=prefix))
            if self.instance.base is not None:
                ids.extend(self.instance.base.ids_in_blocks(blocks).tolist())
            found = self._records(view, ids)
        if not found:
            return []
        svs = np.asarray([s.supervoxel for s in found], dtype=np.uint64)
        known = svs != np.uint64(UNKNOWN_SUPERVOXEL)  # base records: read the voxel under the point
        exists = np.zeros(svs.size, dtype=np.bool_)
        bodies = np.zeros(svs.size, dtype=np.uint64)
        if known.any():
            exists[known] = lm.exists(lm.state(self.uuid), svs[known])
            bodies[known] = lmv.bodies_of(svs[known])
        out = []
        for s, ok, b in zip(found, exists.tolist(), bodies.tolist(), strict=True):
            if s.supervoxel == 0:
                continue
            owner = int(b) if ok else lmv.body_at(s.annotation.point)
            if owner == body:
                out.append(s.annotation)
        return out

    # -- the connectome (core/annotation/connectome.py) ------------------------------------------

    def connections(self, body: int) -> Connections:
        """Partners of ``body`` with synapse counts, outgoing (body pre) and incoming (body post).

        Costs the body's supervoxels and synapses, whatever the instance's size and history.
        """
        from napari_shardscope.core.annotation.connectome import connections

        return connections(self, body)

    def synapses(self, body: int) -> list[SynapseSite]:
        """The ``pre``/``post`` annotations in ``body`` with their partners' ids and bodies."""
        from napari_shardscope.core.annotation.connectome import synapses

        return synapses(self, body)

    def connectivity(self, bodies: Iterable[int] | None = None, *, within: bool = False) -> ConnectionTable:
        """Adjacency table (pre, post, count) of the connections touching ``bodies`` (None: all)."""
        from napari_shardscope.core.annotation.connectome import connectivity

        return connectivity(self, bodies, within=within)

    def export(self, dest: str | os.PathLike[str], *, sharded: bool = True, **options: Any) -> AnnotationExportReport:
        """Write this version's annotations as a Neuroglancer precomputed annotation collection at ``dest``.

        See :func:`~napari_shardscope.core.annotation.export.export_annotations` (``geometry``,
        ``properties``, ``tags``, ``overwrite``…); returns its
        :class:`~napari_shardscope.core.annotation.export.AnnotationExportReport`.
        """
        from napari_shardscope.core.annotation.export import export_annotations

        return export_annotations(self, dest, sharded=sharded, **options)

    def mutations(self, *, own: bool = False) -> list[AnnotationMutation]:
        """The mutation log of this version's ancestry (``own``: this version's only), oldest version first."""
        inst = self.instance.instance
        with self.instance.repo.read(self.uuid) as view:
            return [AnnotationMutation.from_bytes(e.data, key=f"annotation mutation log of version {e.version[:8]}")
                    for e in view.read_log(inst, own=own)]

    @property
    def can_undo(self) -> bool:
        with self.instance.repo.read(self.uuid) as view:
            return _top(view, self.instance.instance, K.undo_top_key(self.uuid)) is not None

    @property
    def can_redo(self) -> bool:
        with self.instance.repo.read(self.uuid) as view:
            return _top(view, self.instance.instance, K.redo_top_key(self.uuid)) is not None

    # -- edits -----------------------------------------------------------------------------------

    def _supervoxel(self, point: Point) -> int:
        return self.instance.labelmap.at(self.uuid).supervoxel_at(point)

    def _edit(self, operation: str, args: dict[str, Any], user: str | None,
              change: Callable[[Editor], T]) -> tuple[AnnotationMutation, T]:
        b = self.instance
        b.top_up_ids()
        with b.edit_lock, b.repo.write(self.uuid) as w:
            ed = Editor(w, b.instance, b.block, b.base)
            result = change(ed)
            return commit_edit(w, b, ed, operation, args, user), result

    def add(self, kind: str, point: Sequence[int], *, id: int | None = None, tags: Iterable[str] = (),
            properties: Mapping[str, Any] | None = None, user: str | None = None) -> Annotation:
        """Add an annotation; ``id`` None: the instance hands out one unique across branches.

        An explicit ``id`` already used at this version raises :class:`AnnotationExistsError`.
        """
        kind = check_kind(kind)
        p = check_point(point, self.instance.shape)
        tag_t = check_tags(tags)
        props = check_properties(properties or {})
        wanted = None if id is None else check_id(id)
        sv = self._supervoxel(p)
        counter = K.ids_counter(self.instance.name)
        # a clone hands out ids only from reserved blocks; a caller's id does not move those
        lift = self.instance.repo.id_source() is None

        def change(ed: Editor) -> Annotation:
            if wanted is None:
                aid = ed.w.allocate_ids(counter, 1, minimum=1)[0]
            else:
                aid = wanted
                if ed.get(aid) is not None:
                    raise AnnotationExistsError(f"annotation {aid} already exists at version {self.uuid[:8]}")
                if lift:
                    ed.w.allocate_ids(counter, 1, minimum=aid + 1)  # later handed-out ids pass it
            a = make_annotation(aid, kind, p, tag_t, props)
            ed.store(aid, Stored(a, sv))
            return a

        args = {"kind": kind, "point": list(p), "id": wanted, "tags": list(tag_t), "properties": props}
        return self._edit("add", args, user, change)[1]

    def move(self, aid: int, point: Sequence[int], *, user: str | None = None) -> Annotation:
        """Move annotation ``aid`` to ``point`` (its supervoxel is read again there)."""
        aid = check_id(aid)
        p = check_point(point, self.instance.shape)
        sv = self._supervoxel(p)

        def change(ed: Editor) -> Annotation:
            old = ed.require(aid)
            a = make_annotation(aid, old.annotation.kind, p, old.annotation.tags, old.annotation.properties,
                                old.annotation.relationships)
            ed.store(aid, Stored(a, sv))
            return a

        return self._edit("move", {"id": aid, "point": list(p)}, user, change)[1]

    def delete(self, aid: int, *, user: str | None = None) -> None:
        """Delete annotation ``aid``; its partners lose their relationships to it."""
        aid = check_id(aid)

        def change(ed: Editor) -> None:
            old = ed.require(aid)
            for r in old.annotation.relationships:
                other = ed.get(r.to)
                if other is not None:
                    a = other.annotation
                    keep = [x for x in a.relationships if x.to != aid]
                    ed.store(r.to, other.with_annotation(
                        make_annotation(a.id, a.kind, a.point, a.tags, a.properties, keep)))
            ed.store(aid, None)

        self._edit("delete", {"id": aid}, user, change)

    def set_properties(self, aid: int, properties: Mapping[str, Any], *, user: str | None = None) -> Annotation:
        """Replace annotation ``aid``'s properties."""
        aid = check_id(aid)
        props = check_properties(properties)

        def change(ed: Editor) -> Annotation:
            old = ed.require(aid)
            a = old.annotation
            new = make_annotation(aid, a.kind, a.point, a.tags, props, a.relationships)
            ed.store(aid, old.with_annotation(new))
            return new

        return self._edit("set-properties", {"id": aid, "properties": props}, user, change)[1]

    def set_tags(self, aid: int, tags: Iterable[str], *, user: str | None = None) -> Annotation:
        """Replace annotation ``aid``'s tags."""
        aid = check_id(aid)
        tag_t = check_tags(tags)

        def change(ed: Editor) -> Annotation:
            old = ed.require(aid)
            a = old.annotation
            new = make_annotation(aid, a.kind, a.point, tag_t, a.properties, a.relationships)
            ed.store(aid, old.with_annotation(new))
            return new

        return self._edit("set-tags", {"id": aid, "tags": list(tag_t)}, user, change)[1]

    def relate(self, source: int, target: int, rel: str = "PreSynTo", *, user: str | None = None) -> None:
        """Link ``source`` to ``target`` (both records: ``target`` gets the inverse relation).

        ``PreSynTo`` goes from a ``pre`` to a ``post`` annotation (a synapse), ``PostSynTo`` back.
        """
        source, target = check_id(source), check_id(target)
        rel = check_relation(rel)
        if source == target:
            raise AnnotationArgumentError(f"annotation {source} cannot be related to itself")

        def change(ed: Editor) -> None:
            a, b = ed.require(source), ed.require(target)
            want = {"PreSynTo": ("pre", "post"), "PostSynTo": ("post", "pre")}.get(rel)
            if want is not None and (a.annotation.kind, b.annotation.kind) != want:
                raise AnnotationArgumentError(
                    f"{rel} links a {want[0]} annotation to a {want[1]} one; {source} is a {a.annotation.kind} "
                    f"and {target} a {b.annotation.kind}")
            for s, link in ((a, Relationship(rel, target)), (b, Relationship(INVERSE[rel], source))):
                x = s.annotation
                ed.store(x.id, s.with_annotation(
                    make_annotation(x.id, x.kind, x.point, x.tags, x.properties, (*x.relationships, link))))

        self._edit("relate", {"source": source, "target": target, "rel": rel}, user, change)

    def unrelate(self, source: int, target: int, *, user: str | None = None) -> None:
        """Remove every relationship between ``source`` and ``target`` (both records)."""
        source, target = check_id(source), check_id(target)

        def change(ed: Editor) -> None:
            for one, other in ((source, target), (target, source)):
                s = ed.require(one)
                x = s.annotation
                keep = [r for r in x.relationships if r.to != other]
                ed.store(one, s.with_annotation(make_annotation(x.id, x.kind, x.point, x.tags, x.properties, keep)))

        self._edit("unrelate", {"source": source, "target": target}, user, change)

    def undo(self, *, user: str | None = None) -> AnnotationMutation:
        """Undo the latest not-yet-undone edit of this (open) version, as a new log record."""
        return self._invert(K.undo_top_key(self.uuid), "undo", user)

    def redo(self, *, user: str | None = None) -> AnnotationMutation:
        """Redo the latest undone edit (only while no new edit was made since), as a new log record."""
        return self._invert(K.redo_top_key(self.uuid), "redo", user)

    def _invert(self, stack: bytes, operation: str, user: str | None) -> AnnotationMutation:
        b = self.instance
        b.top_up_ids()
        with b.edit_lock, b.repo.write(self.uuid) as w:
            top = _top(w, b.instance, stack)
            if top is None:
                what = "edit to undo" if operation == "undo" else "undone edit to redo"
                raise NothingToUndoError(f"annotation instance {b.name!r} has no {what} at version {self.uuid[:8]}")
            entry = read_mutation(w, b.repo, b.instance, top)
            ed = Editor(w, b.instance, b.block, b.base)
            for c in entry.changes:
                if ed.read(c.key) != c.after:
                    raise AnnotationRecordError(f"{operation} of mutation {top}: key {c.key.hex()} no longer holds "
                                                f"what the mutation wrote (the store was changed under its stack)")
                ed.set(c.key, c.before)
            ed.ids.update(entry.ids)
            return commit_edit(w, b, ed, operation, {"mutation": top, "operation": entry.operation}, user, top)
