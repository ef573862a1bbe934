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

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.base import TOMBSTONE, UNKNOWN_SUPERVOXEL
from napari_shardscope.core.annotation.editing import (
    AnnotationBackend,
    Editor,
    box_corner,
    commit_edit,
    decode,
    effective,
    read_mutation,
    stack_top,
)
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
    make_annotation,
    record_point,
)
from napari_shardscope.core.annotation.mutations import AnnotationMutation
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.view import VersionView

if TYPE_CHECKING:
    from napari_shardscope.core.annotation.connections import Connections, ConnectionTable, SynapseSite
    from napari_shardscope.core.annotation.export import AnnotationExportReport


T = TypeVar("T")


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

    def _records(self, view: VersionView, ids: Iterable[int],
                 keep: Callable[[Point], bool] | None = None) -> list[Stored]:
        """The records of ``ids`` at this version, by id (an id the base holds and this version deleted is left out).

        ``keep``: only records whose point it accepts, judged from the record's fixed head before its
        tail is decoded (a box query drops most of its candidates: decoding their JSON was its cost).
        """
        ids = sorted(set(ids))
        raws = view.get_many(self.instance.instance, [K.record_key(i) for i in ids])
        base = self.instance.base
        from_base = {} if base is None else base.stored([i for i, r in zip(ids, raws, strict=True) if r is None])
        out = []
        for aid, raw in zip(ids, raws, strict=True):
            if raw == TOMBSTONE:
                continue
            if raw is None and aid in from_base:
                if keep is None or keep(from_base[aid].annotation.point):
                    out.append(from_base[aid])
                continue
            if raw is None:
                raise AnnotationRecordError(f"an index names annotation {aid}, whose record is missing at version "
                                            f"{self.uuid[:8]}")
            if keep is not None and not keep(record_point(raw, key=f"annotation {aid}")):
                continue
            s = decode(aid, raw)
            assert s is not None
            out.append(s)
        return out

    def in_box(self, lo: Sequence[int], hi: Sequence[int]) -> list[Annotation]:
        """Annotations whose point is in the box ``[lo, hi)`` (z, y, x voxels), by id.

        One range scan per row of blocks the box overlaps (clipped to the labelmap's shape), then
        the records of the candidates.
        """
        box_lo, box_hi = box_corner(lo), box_corner(hi)
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
        (z0, y0, x0), (z1, y1, x1) = box_lo, box_hi

        def inside(p: Point) -> bool:
            return z0 <= p[0] < z1 and y0 <= p[1] < y1 and x0 <= p[2] < x1

        with self.instance.repo.read(self.uuid) as view:
            for bz in range(b0[0], b1[0] + 1):
                for by in range(b0[1], b1[1] + 1):
                    start = K.spatial_block_prefix((bz, by, b0[2]))
                    stop = K.spatial_block_prefix((bz, by, b1[2] + 1))
                    ids.extend(K.id_of_index_key(k) for k in view.keys(inst, start=start, stop=stop))
            if self.instance.base is not None:
                ids.extend(self.instance.base.ids_in_block_box(b0, b1).tolist())
            found = self._records(view, ids, keep=inside)
        return [s.annotation for s in found]  # each kept by its head's point, the annotation's

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
        from napari_shardscope.core.annotation.body_sites import synapses

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
            return stack_top(view, self.instance.instance, K.undo_top_key(self.uuid)) is not None

    @property
    def can_redo(self) -> bool:
        with self.instance.repo.read(self.uuid) as view:
            return stack_top(view, self.instance.instance, K.redo_top_key(self.uuid)) is not None

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
            top = stack_top(w, b.instance, stack)
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
