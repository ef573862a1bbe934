"""Reads and edits of a labelmap at one version: what the Proofreading widget and the CLI call.

A :class:`LabelmapVersion` is a light handle (labelmap + version UUID); the state lives in the
:class:`~napari_shardscope.core.labelmap.labelmap.Labelmap`, so any number of handles on one
version share it. Reads work at every version; edits only at open (uncommitted) ones — the store
refuses the others with :class:`~napari_shardscope.core.versioned.errors.CommittedVersionError`.

For napari: :meth:`LabelmapVersion.supervoxel_arrays` and :meth:`LabelmapVersion.body_arrays` are
multiscale lists of lazy arrays. After a merge or cleave the body arrays read the new mapping (a
``layer.refresh()`` shows it); after a split (or its undo) ask for fresh arrays — unchanged chunks
still come from the shared cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.body_split import BodySplit, split_body
from napari_shardscope.core.labelmap.bodymap import remap_labels
from napari_shardscope.core.labelmap.config import LabelmapConfig, ScaleGeometry
from napari_shardscope.core.labelmap.edits import EditPlan, Planner, Workspace, plan_inverse
from napari_shardscope.core.labelmap.errors import MappingError, NothingToUndoError, UnknownLabelError
from napari_shardscope.core.labelmap.geometry import Box, Coord, VoxelMask, as_coord, box_from_key, voxel_mask
from napari_shardscope.core.labelmap.label_index import IndexSummary, SvIndex
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import BaseSource, virtual_array
from napari_shardscope.core.labelmap.splitting import split_supervoxel
from napari_shardscope.core.labelmap.state import VersionState
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.view import VersionWriter
from napari_shardscope.core.volumes.lazy import LazyArray

U64 = npt.NDArray[np.uint64]
T = TypeVar("T")


class LabelmapBackend(Protocol):
    """What a version handle asks of its labelmap: shared state, the label index and the edit transaction.

    :class:`~napari_shardscope.core.labelmap.labelmap.Labelmap` is the one implementation. The handle
    names it by this Protocol because the labelmap hands out handles (:meth:`Labelmap.at`), so this
    module cannot import it back.
    """

    @property
    def name(self) -> str: ...

    @property
    def repo(self) -> Repository: ...

    @property
    def instance(self) -> Instance: ...

    @property
    def config(self) -> LabelmapConfig: ...

    @property
    def base(self) -> BaseSource: ...

    def state(self, ref: str | Version) -> VersionState:
        """The current in-memory state of a version."""
        ...

    def index_summary(self, progress: Progress | None = None) -> IndexSummary:
        """The base index summary (every base supervoxel and its voxel count)."""
        ...

    def entry(self, state: VersionState, sv: int) -> SvIndex | None:
        """Where supervoxel ``sv`` is at a version (None: it does not exist there)."""
        ...

    def exists(self, state: VersionState, svs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``svs`` exist at a version."""
        ...

    def edit(self, version: str | Version, planner: Planner[T], user: str | None = None) -> tuple[Mutation, T]:
        """Plan and write one edit at an open version as one transaction."""
        ...

    def new_ids(self, w: VersionWriter, count: int) -> range:
        """``count`` new body/supervoxel ids reserved in ``w``'s transaction."""
        ...

    def holding_edits(self) -> AbstractContextManager[None]:
        """A context in which edits of the labelmap wait."""
        ...

    def mesher(self, lod: int = 0) -> Any:
        """The labelmap's :class:`~napari_shardscope.core.labelmap.meshes.BodyMesher` for ``lod``."""
        ...


@dataclass(frozen=True)
class SparseVolume:
    """Where a body is: the scale-0 blocks (k, 3) holding it and its voxel count in each (k,)."""

    blocks: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]

    @property
    def size(self) -> int:
        return int(self.counts.sum())


@dataclass(frozen=True)
class HistoryEntry:
    """One mutation of a body's history, with the version whose log holds it."""

    version: str
    mutation: Mutation


class LabelmapVersion:
    """A labelmap at one version (from :meth:`Labelmap.at`)."""

    def __init__(self, labelmap: LabelmapBackend, uuid: str) -> None:
        self.labelmap = labelmap
        self.uuid = uuid
        self._committed: VersionState | None = None  # a committed version's state never changes (read_once)

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

    def _state(self) -> VersionState:
        return self.labelmap.state(self.uuid)

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
                    return LabelmapVersion._bodies_of(state, data)

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

    @staticmethod
    def _bodies_of(state: VersionState, svs: npt.ArrayLike) -> U64:
        """Map ``svs`` through ``state``'s body map, holding its lock only to look up the distinct ids."""

        def lookup(uniq: U64) -> U64:
            with state.lock:
                return state.map.bodies_of_unique(uniq)

        return remap_labels(svs, lookup)

    # -- label index queries ---------------------------------------------------------------------

    def supervoxels(self, body: int) -> list[int]:
        """The supervoxels of ``body`` (sorted). Costs the body's size."""
        return [int(s) for s in self._members(self._state(), body)]

    def exists(self, body: int) -> bool:
        """True when ``body`` is a body here (not merged away, at least one supervoxel)."""
        return self._body_exists(self._state(), body)

    def _body_exists(self, state: VersionState, body: int) -> bool:
        """Looks at a few candidate supervoxels only: a merge must not cost the body's size."""
        with state.lock:
            if body in state.map.parent:
                return False
            return any(bool(self.labelmap.exists(state, c).any()) for c in state.map.member_chunks(body, size=64))

    def size(self, body: int) -> int:
        """Voxel count of ``body`` at scale 0."""
        state = self._state()
        members = self._members(state, body)
        with state.lock:
            split_made = np.fromiter(state.index, dtype=np.uint64, count=len(state.index))
        own = [int(sv) for sv in np.intersect1d(split_made, members)]
        total = int(self.labelmap.index_summary().totals_of(members).sum())  # vectorised: bodies can be huge
        for sv in own:  # supervoxels made by splits (never in the base)
            entry = state.sv_index(sv)
            total += entry.total if entry is not None else 0
        return total

    def supervoxel_size(self, sv: int) -> int:
        """Voxel count of supervoxel ``sv`` at scale 0 (:class:`UnknownLabelError` if it does not exist)."""
        entry = self.labelmap.entry(self._state(), sv)
        if entry is None:
            raise UnknownLabelError(f"supervoxel {sv} does not exist at version {self.uuid[:8]}")
        return entry.total

    def sparsevol(self, body: int) -> SparseVolume:
        """The scale-0 blocks holding ``body`` and its voxel count in each (DVID's coarse sparse volume)."""
        state = self._state()
        counts: dict[Coord, int] = {}
        for sv in self._members(state, body):
            entry = self.labelmap.entry(state, int(sv))
            if entry is None:  # pragma: no cover - members exist by construction
                continue
            for c, n in zip(entry.block_set(), entry.counts, strict=True):
                counts[c] = counts.get(c, 0) + int(n)
        order = sorted(counts)
        return SparseVolume(np.array(order, dtype=np.int64).reshape(-1, 3),
                            np.array([counts[c] for c in order], dtype=np.int64))

    def bbox(self, body: int, *, exact: bool = True) -> Box:
        """Bounding box of ``body`` at scale 0; ``exact=False``: of its blocks (no voxel read)."""
        state = self._state()
        members = self._members(state, body)
        grid = self.labelmap.config.grid(0)
        blocks = self.sparsevol(body).blocks
        if not exact:
            out = Box((0, 0, 0), (0, 0, 0))
            for c in blocks:
                out = out.union(grid.box((int(c[0]), int(c[1]), int(c[2]))))
            return out
        lo = np.full(3, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(3, -1, dtype=np.int64)
        for c in blocks:
            bbox = grid.box((int(c[0]), int(c[1]), int(c[2])))
            where = np.argwhere(np.isin(self.read_supervoxels(bbox), members))
            if where.size:
                lo = np.minimum(lo, where.min(axis=0) + bbox.lo)
                hi = np.maximum(hi, where.max(axis=0) + bbox.lo + 1)
        return Box((int(lo[0]), int(lo[1]), int(lo[2])), (int(hi[0]), int(hi[1]), int(hi[2])))

    def mask(self, body: int, region: Any = ..., scale: int = 0) -> npt.NDArray[np.bool_]:
        """Boolean mask of ``body`` within a region (a :class:`Box` or a key) at ``scale``."""
        members = self._members(self._state(), body)
        return np.isin(self.read_supervoxels(region, scale), members)

    def mesh(self, body: int, *, lod: int = 0) -> Any:
        """The body's mesh at this version (:class:`~napari_shardscope.core.formats.precomputed.meshes.MeshData`:
        float32 x, y, z vertices in nm and uint32 faces, trimesh-compatible); see :mod:`.meshes`."""
        return self.labelmap.mesher(lod).mesh(body, self)

    def mutations(self, *, own: bool = False) -> list[HistoryEntry]:
        """The mutation log of this version's ancestry, oldest first (``own``: this version's only)."""
        state = self._state()
        return [HistoryEntry(r.version, r.mutation) for r in state.log if not own or r.version == self.uuid]

    def history(self, body: int) -> list[HistoryEntry]:
        """Mutations that shaped ``body``, across the ancestry, oldest first (DVID's ``history``).

        Walking back from the newest, a mutation belongs to the history when it touched the body
        or a body it was made of; the bodies it touched then join the lineage (the body a cleave
        came from, the bodies a merge took in).
        """
        state = self._state()
        with state.lock:
            lineage = set(state.map.merged_bodies(body)) | {body}
        out: list[HistoryEntry] = []
        for rec in reversed(state.log):
            m = rec.mutation
            touched = set(m.bodies)
            if touched & lineage:
                out.append(HistoryEntry(rec.version, m))
                lineage |= touched
        out.reverse()
        return out

    # -- edits -----------------------------------------------------------------------------------

    def merge(self, target: int, others: Sequence[int], *, user: str | None = None) -> Mutation:
        """Merge bodies ``others`` into ``target`` (only the map changes: cost independent of body size)."""
        others = [_label(o, "body") for o in others]
        target = _label(target, "body")

        def plan(_w: VersionWriter, state: VersionState, _ws: Any) -> tuple[EditPlan, None]:
            for b in (target, *others):
                self._require_body(state, b)
            with state.lock:
                delta = state.map.plan_merge(target, others)
            return EditPlan("merge", {"target": target, "others": others}, delta,
                            bodies=(target, *others)), None

        return self.labelmap.edit(self.uuid, plan, user)[0]

    def cleave(self, body: int, supervoxels: Sequence[int], *, user: str | None = None) -> int:
        """Move ``supervoxels`` (all in ``body``) to a new body; returns its id. Only the map changes."""
        body = _label(body, "body")
        svs = sorted({_label(s, "supervoxel") for s in supervoxels})
        if not svs:
            raise ArgumentError("cleave needs at least one supervoxel")

        def plan(w: VersionWriter, state: VersionState, ws: Any) -> tuple[EditPlan, int]:
            self._require_body(state, body)
            arr = np.asarray(svs, dtype=np.uint64)
            missing = arr[~self.labelmap.exists(state, arr)]
            if missing.size:
                raise UnknownLabelError(f"supervoxel {int(missing[0])} does not exist at version {self.uuid[:8]}")
            with state.lock:
                for sv in svs:
                    if state.map.body_of(sv) != body:
                        raise MappingError(f"supervoxel {sv} is in body {state.map.body_of(sv)}, not in body {body}")
            if not self._keeps_member(state, body, set(svs)):
                raise MappingError(f"the cleave would take every supervoxel of body {body}, leaving it empty")
            new_body = self.labelmap.new_ids(w, 1)[0]
            with state.lock:
                delta = state.map.plan_cleave(body, svs, new_body)
            return EditPlan("cleave", {"body": body, "supervoxels": svs, "new_body": new_body}, delta,
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

        def plan(_w: VersionWriter, state: VersionState,
                 workspace: Any) -> tuple[EditPlan, tuple[int, int]]:
            ws: Workspace = workspace(False)
            with state.lock:
                body = state.map.body_of(sv)
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

        def plan(_w: VersionWriter, state: VersionState, workspace: Any) -> tuple[EditPlan, BodySplit]:
            self._require_body(state, body)
            members = [int(s) for s in self._members(state, body)]
            ws: Workspace = workspace(True)
            out = split_body(ws, body, masks, members, voxel_size)
            touched = tuple(sorted(set(out.bodies.values())))
            svs = tuple(sorted({s for parts in out.cut.values() for s in parts} | set(out.cut)))
            args = {"body": body, "groups": {str(g): b for g, b in out.bodies.items()},
                    "seeds": {str(g): m.count for g, m in masks.items()},
                    "cut": {str(s): list(p) for s, p in out.cut.items()}}
            return EditPlan("split-body", args, ws.delta(), ws.keys(), bodies=touched, supervoxels=svs), out

        return self.labelmap.edit(self.uuid, plan, user)[1]

    def undo(self, *, user: str | None = None) -> Mutation:
        """Undo the latest not-yet-undone edit of this (open) version, as a new log entry."""

        def plan(w: VersionWriter, state: VersionState, _ws: Any) -> tuple[EditPlan, None]:
            stacks = state.stacks()
            if not stacks.undo:
                raise NothingToUndoError(f"version {self.uuid[:8]} has no edit to undo")
            entry = stacks.undo[-1]
            original = int(entry.args.get("mutation", entry.mutation_id)) if entry.operation == "redo" \
                else entry.mutation_id
            return plan_inverse(w, self.labelmap.instance, entry, "undo", original), None

        return self.labelmap.edit(self.uuid, plan, user)[0]

    def redo(self, *, user: str | None = None) -> Mutation:
        """Redo the latest undone edit (only while no new edit was made since), as a new log entry."""

        def plan(w: VersionWriter, state: VersionState, _ws: Any) -> tuple[EditPlan, None]:
            stacks = state.stacks()
            if not stacks.redo:
                raise NothingToUndoError(f"version {self.uuid[:8]} has no undone edit to redo")
            entry = stacks.redo[-1]
            return plan_inverse(w, self.labelmap.instance, entry, "redo", int(entry.args["mutation"])), None

        return self.labelmap.edit(self.uuid, plan, user)[0]

    @property
    def can_undo(self) -> bool:
        return bool(self._state().stacks().undo)

    @property
    def can_redo(self) -> bool:
        return bool(self._state().stacks().redo)

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

    def _require_body(self, state: VersionState, body: int) -> None:
        with state.lock:
            if body in state.map.parent:
                raise MappingError(f"body {body} was merged into body {state.map.root(body)}")
        if not self._body_exists(state, body):
            raise UnknownLabelError(f"body {body} does not exist at version {self.uuid[:8]}")

    def _members(self, state: VersionState, body: int) -> U64:
        with state.lock:
            if body in state.map.parent:
                raise UnknownLabelError(f"body {body} was merged into body {state.map.root(body)}")
            candidates = state.map.member_array(body)
        out = candidates[self.labelmap.exists(state, candidates)]
        if not out.size:
            raise UnknownLabelError(f"body {body} does not exist at version {self.uuid[:8]}")
        return out

    def _keeps_member(self, state: VersionState, body: int, excluded: set[int]) -> bool:
        """True when ``body`` has an existing supervoxel outside ``excluded`` (looks at few ids)."""
        with state.lock:
            chunks = state.map.member_chunks(body)
            for chunk in chunks:
                rest = chunk[~np.isin(chunk, np.fromiter(excluded, dtype=np.uint64, count=len(excluded)))]
                if rest.size and bool(self.labelmap.exists(state, rest).any()):
                    return True
        return False


def _label(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 < int(value) < 2**64:
        raise ArgumentError(f"a {what} id must be a positive integer, got {value!r}")
    return int(value)
