"""Reads and edits of a labelmap at one version: what the Proofreading widget and the CLI call.

A :class:`LabelmapVersion` is a light handle (labelmap + version UUID); the state lives in the
:class:`~napari_shardscope.core.labelmap.labelmap.Labelmap`, so any number of handles on one
version share it. Reads work at every version; edits only at open (uncommitted) ones — the store
refuses the others with :class:`~napari_shardscope.core.versioned.errors.CommittedVersionError`.

For napari: :meth:`LabelmapVersion.supervoxel_arrays` and :meth:`LabelmapVersion.body_arrays` are
multiscale lists of lazy arrays. After a merge or cleave the body arrays read the new mapping (a
``layer.refresh()`` shows it); after a split (or its undo) ask for fresh arrays — unchanged chunks
still come from the shared cache.

What the handle asks of its labelmap is the :class:`~.backend.LabelmapBackend` Protocol; the history
reads (:meth:`LabelmapVersion.history`, :meth:`LabelmapVersion.mutations`) are :mod:`.history`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.backend import LabelmapBackend
from napari_shardscope.core.labelmap.body_split import BodySplit, split_body
from napari_shardscope.core.labelmap.bodymap import remap_labels
from napari_shardscope.core.labelmap.config import ScaleGeometry
from napari_shardscope.core.labelmap.edits import (
    EditPlan,
    Workspace,
    plan_inverse,
    read_link,
    read_mutation,
    read_top,
)
from napari_shardscope.core.labelmap.errors import MappingError, NothingToUndoError, UnknownLabelError
from napari_shardscope.core.labelmap.geometry import Box, VoxelMask, as_coord, box_from_key, voxel_mask
from napari_shardscope.core.labelmap.history import HistoryEntry, read_history, read_mutations
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import virtual_array
from napari_shardscope.core.labelmap.recordmap import MapReader, box_of
from napari_shardscope.core.labelmap.records import (
    LOGICAL_PREFIX,
    REDO_TOP_KEY,
    UNDO_TOP_KEY,
    RootInfo,
    node_of_key,
)
from napari_shardscope.core.labelmap.splitting import split_supervoxel
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.view import VersionWriter
from napari_shardscope.core.volumes.lazy import LazyArray

U64 = npt.NDArray[np.uint64]

__all__ = ["HistoryEntry", "LabelmapBackend", "LabelmapVersion", "SparseVolume"]



@dataclass(frozen=True)
class SparseVolume:
    """Where a body is: the scale-0 blocks (k, 3) holding it and its voxel count in each (k,)."""

    blocks: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]

    @property
    def size(self) -> int:
        return int(self.counts.sum())


class LabelmapVersion:
    """A labelmap at one version (from :meth:`Labelmap.at`)."""

    def __init__(self, labelmap: LabelmapBackend, uuid: str, *, state: VersionState | None = None) -> None:
        self.labelmap = labelmap
        self.uuid = uuid
        self._committed: VersionState | None = None  # a committed version's state never changes (read_once)
        #: The state every read of this handle uses (None: the labelmap's, looked up (and its freshness
        #: stamp checked) per call). A query pins the state it took once, so its reads agree with each
        #: other and do not probe the store again per read.
        self._pinned = state

    def __repr__(self) -> str:
        v = self.version
        state = "committed" if v.locked else "open"
        return f"LabelmapVersion({self.labelmap.name!r}, {v.short}, branch={v.branch!r}, {state})"

    @property
    def version(self) -> Version:
        """The version (current locked flag and message)."""
        return self.labelmap.repo.version(self.uuid)

    @property
    def scales(self) -> tuple[ScaleGeometry, ...]:
        """Shape, downsampling factors, voxel size and translate of each scale, finest first."""
        return self.labelmap.config.scales

    def pinned(self) -> LabelmapVersion:
        """A handle whose reads all use the version's state as of now (looked up once, not per read).

        For one batch of reads (a bulk add's hundreds of block reads): one store probe, and every read
        sees the same body map. Edits through the handle still refresh that state object.
        """
        return LabelmapVersion(self.labelmap, self.uuid, state=self._state())

    def _state(self) -> VersionState:
        return self._pinned if self._pinned is not None else self.labelmap.state(self.uuid)

    # -- lazy arrays for napari ------------------------------------------------------------------

    def supervoxel_array(self, scale: int = 0) -> LazyArray:
        """Lazy uint64 supervoxel ids (z, y, x) of one scale: the base patched by this version's splits."""
        self._check_scale(scale)
        state = self._state()
        with state.lock:
            return self._sv_array(state, scale)

    def body_array(self, scale: int = 0) -> LazyArray:
        """Lazy uint64 body ids of one scale: the supervoxel array mapped through the live body map.

        The mapping is applied to what is read (visible tiles only); merges and cleaves show after
        a re-read without a new array.
        """
        self._check_scale(scale)
        state = self._state()
        with state.lock:  # one overlay snapshot for both arrays: a split on another thread cannot mix them
            key = (state.overlay.snapshot, scale, "body")
            arr = state.arrays.get(key)
            if arr is None:

                def to_bodies(data: npt.NDArray[Any]) -> npt.NDArray[Any]:
                    return self._bodies_of(state, data)

                sv = self._sv_array(state, scale)
                arr = state.arrays[key] = LazyArray(sv.store, transform=to_bodies, dtype=np.uint64)
            return arr

    def _sv_array(self, state: VersionState, scale: int) -> LazyArray:
        """The supervoxel array of ``state``'s current overlay (caller holds ``state.lock``)."""
        key = (state.overlay.snapshot, scale, "sv")
        arr = state.arrays.get(key)
        if arr is None:
            arr = state.arrays[key] = virtual_array(self.labelmap.base, state.overlay, scale)
        return arr

    def supervoxel_arrays(self) -> list[LazyArray]:
        """:meth:`supervoxel_array` of every scale, finest first (napari multiscale data)."""
        return [self.supervoxel_array(s) for s in range(len(self.scales))]

    def body_arrays(self) -> list[LazyArray]:
        """:meth:`body_array` of every scale, finest first (napari multiscale data)."""
        return [self.body_array(s) for s in range(len(self.scales))]

    # -- region and point reads ------------------------------------------------------------------

    def read_supervoxels(self, region: Any = ..., scale: int = 0) -> U64:
        """Supervoxel ids of a region at ``scale``.

        ``region`` is a :class:`Box` or a NumPy-style key of ints and step-1 slices (an int drops
        its axis, as in NumPy).
        """
        box, dropped = self._box(region, scale)
        data = np.asarray(self.supervoxel_array(scale)[box.slices].read(), dtype=np.uint64)
        return data.squeeze(axis=dropped) if dropped else data

    def read_bodies(self, region: Any = ..., scale: int = 0) -> U64:
        """Body ids of a region at ``scale`` (see :meth:`read_supervoxels`)."""
        return self.bodies_of(self.read_supervoxels(region, scale))

    def read_once(self, region: Any = ..., scale: int = 0, *, bodies: bool = True) -> U64:
        """Body ids (or with ``bodies=False`` supervoxel ids) of a region read past the chunk caches.

        For reads that visit each chunk once (an export): the base is decoded straight into the
        result where its format allows (:meth:`BaseSource.read_uncached`), the overlay blocks
        pasted over it and the ids mapped, all against one snapshot of the version's state. No
        ``virtual_chunked`` callback and no lazy view per call, so parallel workers hold the GIL
        far less than through :meth:`read_bodies` (which fills the shared cache for browsing).
        Same values as :meth:`read_bodies` / :meth:`read_supervoxels`.
        """
        box, dropped = self._box(region, scale)
        state = self._committed
        if state is None:  # resolving the version per call held the GIL longer than decoding a chunk
            state = self._state()
            if state.version.locked:
                self._committed = state
        with state.lock:
            overlay = state.overlay
        data = self.labelmap.base.read_uncached(scale, box)
        overlay.paste(scale, box, data)
        if bodies:
            data = self._bodies_of(state, data)
        return data.squeeze(axis=dropped) if dropped else data

    def supervoxel_at(self, voxel: Sequence[int], scale: int = 0) -> int:
        """The supervoxel id at one voxel (z, y, x) of ``scale``."""
        z, y, x = as_coord(voxel, "voxel")
        return int(self.read_supervoxels((z, y, x), scale))

    def body_at(self, voxel: Sequence[int], scale: int = 0) -> int:
        """The body id at one voxel (z, y, x) of ``scale``."""
        return self.body_of(self.supervoxel_at(voxel, scale))

    def body_of(self, sv: int) -> int:
        """The body holding supervoxel ``sv`` (0 stays 0)."""
        return int(self.bodies_of(np.asarray([sv], dtype=np.uint64))[0])

    def bodies_of(self, svs: npt.ArrayLike) -> U64:
        """Vectorised :meth:`body_of` (any shape)."""
        return self._bodies_of(self._state(), svs)

    def bodies_of_unique(self, svs: npt.ArrayLike) -> U64:
        """:meth:`bodies_of` of distinct ids (1-d): one body-map look-up, no search for runs or distinct ids.

        For queries that already hold the distinct supervoxels (the partners of a body's synapses):
        :meth:`bodies_of` would find them again and build a remapping table per call.
        """
        state = self._state()
        with state.lock:
            return self.labelmap.reader(state).bodies_of_unique(svs)

    def _bodies_of(self, state: VersionState, svs: npt.ArrayLike) -> U64:
        """Map ``svs`` through ``state``'s body map, holding its lock only to look up the distinct ids."""
        labelmap = self.labelmap

        def lookup(uniq: U64) -> U64:
            with state.lock:
                return labelmap.reader(state).bodies_of_unique(uniq)

        return remap_labels(svs, lookup)

    # -- label index queries ---------------------------------------------------------------------

    def _body(self, state: VersionState, body: int, error: type[MappingError] = UnknownLabelError
              ) -> tuple[MapReader, int, RootInfo]:
        """The reader, root and root info of visible body ``body`` (``error`` when merged away, absent)."""
        reader = self.labelmap.reader(state)
        root, info = reader.resolve(body)
        if info.name != body:
            raise error(f"body {body} was merged into body {info.name}")
        if info.svs <= 0:
            raise UnknownLabelError(f"body {body} does not exist at version {self.uuid[:8]}")
        return reader, root, info

    def supervoxels(self, body: int) -> list[int]:
        """The supervoxels of ``body`` (sorted). Costs the body's size."""
        return [int(s) for s in self._members(self._state(), body)]

    def exists(self, body: int) -> bool:
        """True when ``body`` is a body here (not merged away, at least one supervoxel): two record reads."""
        state = self._state()
        with state.lock:
            _, info = self.labelmap.reader(state).resolve(int(body))
        return info.name == body and info.svs > 0

    def size(self, body: int) -> int:
        """Voxel count of ``body`` at scale 0: its root record, whatever the history."""
        state = self._state()
        with state.lock:
            return self._body(state, body)[2].voxels

    def supervoxel_size(self, sv: int) -> int:
        """Voxel count of supervoxel ``sv`` at scale 0 (:class:`UnknownLabelError` if it does not exist)."""
        entry = self.labelmap.entry(self._state(), sv)
        if entry is None:
            raise UnknownLabelError(f"supervoxel {sv} does not exist at version {self.uuid[:8]}")
        return entry.total

    def sparsevol(self, body: int) -> SparseVolume:
        """The scale-0 blocks holding ``body`` and its voxel count in each (DVID's coarse sparse volume).

        O(blocks): the per-body label index of its base bodies, corrected by what edits moved.
        """
        state = self._state()
        with state.lock:
            reader, root, _ = self._body(state, body)
            blocks, counts = reader.node_blocks(reader.ring(root))
        return SparseVolume(blocks.astype(np.int64).reshape(-1, 3), counts.astype(np.int64))

    def bbox(self, body: int, *, exact: bool = True) -> Box:
        """Bounding box of ``body`` at scale 0; ``exact=False``: of its blocks (no voxel read).

        The block box comes from the body's root record when no cleave may have shrunk it, else
        from its blocks (O(blocks)); the exact box from the label index's voxel box of each
        supervoxel in each block (O(blocks), no voxel read), or — for an index without them (one
        converted from format 1) — from the body's blocks on the six faces of its block box.
        """
        state = self._state()
        grid = self.labelmap.config.grid(0)
        with state.lock:
            reader, root, info = self._body(state, body)
            blocks: npt.NDArray[np.int64] | None = None
            if info.exact and not info.empty_box and not exact:
                lo, hi = info.lo, info.hi
            else:
                nodes = reader.ring(root)
                if exact:
                    box = reader.voxel_box(nodes, grid.block)
                    if box is not None:
                        return Box(*box)
                blocks, _ = reader.node_blocks(nodes)
                lo, hi = box_of(blocks)
        shape = self.labelmap.config.shape
        block = grid.block
        if not exact or blocks is None or not blocks.size:
            if any(h <= a for a, h in zip(lo, hi, strict=True)):
                return Box((0, 0, 0), (0, 0, 0))
            return Box((lo[0] * block[0], lo[1] * block[1], lo[2] * block[2]),
                       (min(hi[0] * block[0], shape[0]), min(hi[1] * block[1], shape[1]),
                        min(hi[2] * block[2], shape[2])))
        low = np.asarray(lo, dtype=np.int64)
        high = np.asarray(hi, dtype=np.int64) - 1
        on_face = np.any((blocks == low) | (blocks == high), axis=1)
        best_lo = np.full(3, np.iinfo(np.int64).max, dtype=np.int64)
        best_hi = np.full(3, -1, dtype=np.int64)
        for c in blocks[on_face]:
            c3 = (int(c[0]), int(c[1]), int(c[2]))
            if not any(c3[a] in (lo[a], hi[a] - 1) for a in range(3)):
                continue
            bbox = grid.box(c3)
            where = np.argwhere(self.read_bodies(bbox) == np.uint64(body))
            if where.size:
                best_lo = np.minimum(best_lo, where.min(axis=0) + bbox.lo)
                best_hi = np.maximum(best_hi, where.max(axis=0) + bbox.lo + 1)
        # an axis's extreme lies in that axis's extreme plane of blocks, which was read
        return Box((int(best_lo[0]), int(best_lo[1]), int(best_lo[2])),
                   (int(best_hi[0]), int(best_hi[1]), int(best_hi[2])))

    def mask(self, body: int, region: Any = ..., scale: int = 0) -> npt.NDArray[np.bool_]:
        """Boolean mask of ``body`` within a region (a :class:`Box` or a key) at ``scale``."""
        state = self._state()
        with state.lock:
            self._body(state, body)
        mask: npt.NDArray[np.bool_] = self.read_bodies(region, scale) == np.uint64(body)
        return mask

    def mesh(self, body: int, *, lod: int = 0) -> Any:
        """The body's mesh at this version (:class:`~napari_shardscope.core.formats.precomputed.meshes.MeshData`:
        float32 x, y, z vertices in nm and uint32 faces, trimesh-compatible); see :mod:`.meshes`."""
        return self.labelmap.mesher(lod).mesh(body, self)

    def mutations(self, *, own: bool = False) -> list[HistoryEntry]:
        """The mutation log of this version's ancestry, oldest first (``own``: this version's only).

        Reads the log (costs the history): what a view or an edit needs never does (see :mod:`.history`).
        """
        return read_mutations(self.labelmap, self.uuid, own=own)

    def history(self, body: int) -> list[HistoryEntry]:
        """Mutations that shaped ``body``, across the ancestry, oldest first (DVID's ``history``).

        Walking back from the newest, a mutation belongs to the history when it touched the body
        or a body it was made of; the bodies it touched then join the lineage (see :mod:`.history`):
        the cost of the lineage, not of the log.
        """
        return read_history(self.labelmap, self.uuid, body)

    def merged_sets(self) -> dict[int, list[int]]:
        """Every body that holds merged bodies → the bodies (union-find nodes) it is made of.

        Reads the version's logical-parent records (one per merged body), so it costs the merges.
        """
        lm = self.labelmap
        with lm.repo.read(self.uuid) as view:
            merged = [node_of_key(k) for k in view.keys(lm.instance, prefix=LOGICAL_PREFIX)]
        state = self._state()
        with state.lock:
            reader = lm.reader(state)
            roots = reader.roots(np.asarray(merged, dtype=np.uint64)) if merged else np.zeros(0, np.uint64)
            out: dict[int, list[int]] = {}
            for r in sorted({int(x) for x in roots}):
                info = reader.info(r)
                out[info.name] = sorted(reader.ring(r))
        return out

    # -- edits -----------------------------------------------------------------------------------

    def merge(self, target: int, others: Sequence[int], *, user: str | None = None) -> Mutation:
        """Merge bodies ``others`` into ``target`` (a few records change: cost independent of body size and history)."""
        others = [_label(o, "body") for o in others]
        target = _label(target, "body")

        def plan(_w: VersionWriter, _state: VersionState, ws: Workspace) -> tuple[EditPlan, None]:
            for b in (target, *others):
                self._require_body(ws.map, b)
            delta = ws.map.merge(target, others)
            return EditPlan("merge", {"target": target, "others": others}, delta, ws.keys(),
                            bodies=(target, *others)), None

        return self.labelmap.edit(self.uuid, plan, user)[0]

    def cleave(self, body: int, supervoxels: Sequence[int], *, user: str | None = None) -> int:
        """Move ``supervoxels`` (all in ``body``) to a new body; returns its id. Only the map changes."""
        body = _label(body, "body")
        svs = sorted({_label(s, "supervoxel") for s in supervoxels})
        if not svs:
            raise ArgumentError("cleave needs at least one supervoxel")

        def plan(w: VersionWriter, _state: VersionState, ws: Workspace) -> tuple[EditPlan, int]:
            info = self._require_body(ws.map, body)
            arr = np.asarray(svs, dtype=np.uint64)
            missing = arr[~ws.map.exists(arr)]
            if missing.size:
                raise UnknownLabelError(f"supervoxel {int(missing[0])} does not exist at version {self.uuid[:8]}")
            owners = ws.map.bodies_of_unique(arr)
            wrong = np.flatnonzero(owners != np.uint64(body))
            if wrong.size:
                sv = int(arr[wrong[0]])
                raise MappingError(f"supervoxel {sv} is in body {int(owners[wrong[0]])}, not in body {body}")
            if info.svs <= len(svs):
                raise MappingError(f"the cleave would take every supervoxel of body {body}, leaving it empty")
            new_body = self.labelmap.new_ids(w, 1)[0]
            delta = ws.map.cleave(body, svs, new_body)
            return EditPlan("cleave", {"body": body, "supervoxels": svs, "new_body": new_body}, delta, ws.keys(),
                            bodies=(body, new_body), supervoxels=tuple(svs)), new_body

        return self.labelmap.edit(self.uuid, plan, user)[1]

    def split_supervoxel(self, sv: int, voxels: VoxelMask | npt.ArrayLike, *,
                         user: str | None = None) -> tuple[int, int]:
        """Split supervoxel ``sv``: ``voxels`` (scale 0, in ``sv``) get a new id, the rest another.

        Returns ``(split_id, remainder_id)``; both keep ``sv``'s body. Rewrites only the blocks
        holding ``sv``, at every scale.
        """
        sv = _label(sv, "supervoxel")
        chosen = voxel_mask(voxels)

        def plan(_w: VersionWriter, _state: VersionState, ws: Workspace) -> tuple[EditPlan, tuple[int, int]]:
            body = ws.map.body_of(sv)
            pair = split_supervoxel(ws, sv, chosen)
            return EditPlan("split-supervoxel", {"supervoxel": sv, "voxels": chosen.count, "split": pair[0],
                                                 "remainder": pair[1]}, ws.delta(), ws.keys(), bodies=(body,),
                            supervoxels=(sv, *pair)), pair

        return self.labelmap.edit(self.uuid, plan, user)[1]

    def split_body(self, body: int, seeds: Mapping[int, VoxelMask | npt.ArrayLike], *,
                   user: str | None = None) -> BodySplit:
        """The proofreader's split of ``body`` by painted seed groups (group id → scale-0 voxels).

        See :mod:`~napari_shardscope.core.labelmap.body_split`. One mutation (one undo).
        """
        body = _label(body, "body")
        masks = {int(g): voxel_mask(v) for g, v in seeds.items()}
        voxel_size = self.scales[0].voxel_size

        def plan(_w: VersionWriter, _state: VersionState, ws: Workspace) -> tuple[EditPlan, BodySplit]:
            self._require_body(ws.map, body)
            members = [int(s) for s in self._members_of(ws.map, body)]
            out = split_body(ws, body, masks, members, voxel_size)
            touched = tuple(sorted(set(out.bodies.values())))
            svs = tuple(sorted({s for parts in out.cut.values() for s in parts} | set(out.cut)))
            args = {"body": body, "groups": {str(g): b for g, b in out.bodies.items()},
                    "seeds": {str(g): m.count for g, m in masks.items()},
                    "cut": {str(s): list(p) for s, p in out.cut.items()}}
            return EditPlan("split-body", args, ws.delta(), ws.keys(), bodies=touched, supervoxels=svs), out

        return self.labelmap.edit(self.uuid, plan, user)[1]

    def undo(self, *, user: str | None = None) -> Mutation:
        """Undo the latest not-yet-undone edit of this (open) version, as a new log entry.

        The stack's top record names the edit and where its log record is: a few reads, whatever
        the history, before and after a restart.
        """
        lm = self.labelmap

        def plan(w: VersionWriter, _state: VersionState, _ws: Workspace) -> tuple[EditPlan, None]:
            entry = self._stack_entry(w, UNDO_TOP_KEY)
            if entry is None:
                raise NothingToUndoError(f"version {self.uuid[:8]} has no edit to undo")
            original = int(entry.args.get("mutation", entry.mutation_id)) if entry.operation == "redo" \
                else entry.mutation_id
            return plan_inverse(w, lm.instance, entry, "undo", original), None

        return lm.edit(self.uuid, plan, user)[0]

    def redo(self, *, user: str | None = None) -> Mutation:
        """Redo the latest undone edit (only while no new edit was made since), as a new log entry."""
        lm = self.labelmap

        def plan(w: VersionWriter, _state: VersionState, _ws: Workspace) -> tuple[EditPlan, None]:
            entry = self._stack_entry(w, REDO_TOP_KEY)
            if entry is None:
                raise NothingToUndoError(f"version {self.uuid[:8]} has no undone edit to redo")
            return plan_inverse(w, lm.instance, entry, "redo", int(entry.args["mutation"])), None

        return lm.edit(self.uuid, plan, user)[0]

    def _stack_entry(self, view: Any, stack: bytes) -> Mutation | None:
        """The mutation on top of the undo or redo stack (None: empty)."""
        lm = self.labelmap
        top = read_top(view, lm.instance, stack)
        if top is None:
            return None
        link = read_link(view, lm.instance, top.mutation_id)
        return read_mutation(view, lm.instance, lm.repo.version(link.version).vid, link.seq, where=link.version[:8])

    def _has_top(self, stack: bytes) -> bool:
        with self.labelmap.repo.read(self.uuid) as view:
            return read_top(view, self.labelmap.instance, stack) is not None

    @property
    def can_undo(self) -> bool:
        return self._has_top(UNDO_TOP_KEY)

    @property
    def can_redo(self) -> bool:
        return self._has_top(REDO_TOP_KEY)

    # -- helpers ---------------------------------------------------------------------------------

    def _check_scale(self, scale: int) -> None:
        if not 0 <= scale < len(self.scales):
            raise ArgumentError(f"scale {scale} out of range 0..{len(self.scales) - 1}")

    def _box(self, region: Any, scale: int) -> tuple[Box, tuple[int, ...]]:
        self._check_scale(scale)
        shape = self.scales[scale].shape
        if isinstance(region, Box):
            if region.intersect(Box.of_shape(shape)) != region:
                raise ArgumentError(f"region {region} reaches outside scale {scale}'s shape {shape}")
            return region, ()
        return box_from_key(region, shape)

    def _require_body(self, reader: MapReader, body: int) -> RootInfo:
        """The root info of visible body ``body``; :class:`MappingError` when merged away, unknown when absent."""
        _, info = reader.resolve(body)
        if info.name != body:
            raise MappingError(f"body {body} was merged into body {info.name}")
        if info.svs <= 0:
            raise UnknownLabelError(f"body {body} does not exist at version {self.uuid[:8]}")
        return info

    def _members(self, state: VersionState, body: int) -> U64:
        with state.lock:
            return self._members_of(self.labelmap.reader(state), body)

    def _members_of(self, reader: MapReader, body: int) -> U64:
        root, info = reader.resolve(body)
        if info.name != body:
            raise UnknownLabelError(f"body {body} was merged into body {info.name}")
        out = reader.node_members(reader.ring(root)) if info.svs > 0 else np.zeros(0, dtype=np.uint64)
        if not out.size:
            raise UnknownLabelError(f"body {body} does not exist at version {self.uuid[:8]}")
        return out


def _label(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 < int(value) < 2**64:
        raise ArgumentError(f"a {what} id must be a positive integer, got {value!r}")
    return int(value)
