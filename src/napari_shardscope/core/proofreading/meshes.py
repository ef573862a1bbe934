"""Which body surfaces (and skeletons) a 3-D view shows, kept in step with the proofreading controller.

The view shows the selected bodies of the checked-out version. A body's surface is current while
its *key* — the version and the body's supervoxel set — is unchanged: a merge or cleave changes the
set, a split replaces supervoxels, an undo brings the old set back, a checkout changes the version.
:meth:`SurfaceFollower.plan` compares what is shown with what should be and says what to load and
what to remove; :meth:`SurfaceFollower.load` computes the meshes (any thread: it reads the store and
touches no controller state); :meth:`SurfaceFollower.shown` records what the view now shows. A GUI
runs ``load`` in a worker; a notebook calls the three in a row (:meth:`SurfaceFollower.update`).

The level of detail read from a multi-resolution (``neuroglancer_multilod_draco``) source follows the
view: :meth:`SurfaceFollower.set_zoom` takes the camera's zoom (screen pixels per world unit) and
:func:`lod_for_zoom` picks the coarsest level whose error on screen stays under
:data:`LOD_PIXEL_ERROR` pixels (a coarse level when a voxel is far smaller than a pixel). The level is
part of a surface's key, so crossing a level boundary makes the next plan reload the surfaces.

Vertices are handed out in the viewer's world order and convention: (z, y, x), a voxel centred on
its index (napari's), whereas mesh sources use x, y, z with voxel ``i`` spanning ``[i, i + 1)``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.formats.precomputed.meshes import MeshData
from napari_shardscope.core.progress import Progress

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.skeletons import SkeletonSource
    from napari_shardscope.core.labelmap import LabelmapVersion
    from napari_shardscope.core.proofreading.controller import ProofreadingController

#: Bodies with more supervoxels than this are shown at the source's coarsest level of detail.
FINE_LOD_SUPERVOXELS = 2000
#: A level of detail is fine enough while its error on screen stays under this many pixels.
LOD_PIXEL_ERROR = 2.0


def lod_for_zoom(lod_scales: Sequence[float], zoom: float, *, world_per_unit: float = 1.0,
                 max_pixels: float = LOD_PIXEL_ERROR) -> int:
    """The coarsest level of detail whose error on screen stays under ``max_pixels``.

    ``lod_scales`` are a multilod manifest's (level ``i``'s spacing in stored model units, ``1`` for
    level 0 by convention), ``world_per_unit`` the size of a model unit in world units (the mesh
    transform's largest axis scale: nm per voxel), ``zoom`` screen pixels per world unit (napari's
    ``camera.zoom``). Level ``i`` shows detail of ``lod_scales[i] * world_per_unit * zoom`` pixels;
    the finest level (0) when every level is coarser than that, or the zoom is not positive.
    """
    if not (zoom > 0) or not len(lod_scales):
        return 0
    best = 0
    for i, scale in enumerate(lod_scales):
        if float(scale) * world_per_unit * zoom <= max_pixels:
            best = i
    return best


@dataclass(frozen=True)
class SurfaceKey:
    """What a body's surface depends on: the version and the body's supervoxels (a digest of them)."""

    version: str
    supervoxels: str
    count: int
    lod: int = 0  # the level of detail asked of the mesh source (-1: its coarsest)


@dataclass(frozen=True, eq=False)
class BodySurface:
    """One body's mesh ready for a viewer: vertices float32 (N, 3) world z, y, x; faces uint32 (M, 3)."""

    body: int
    key: SurfaceKey
    vertices: npt.NDArray[np.float32]
    faces: npt.NDArray[np.uint32]

    @property
    def bounds(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        return self.vertices.min(axis=0), self.vertices.max(axis=0)


@dataclass(frozen=True, eq=False)
class BodySkeleton:
    """The skeletons of a body's supervoxels (where the base has them): nodes and edges in world z, y, x."""

    body: int
    key: SurfaceKey
    vertices: npt.NDArray[np.float32]
    edges: npt.NDArray[np.uint32]


@dataclass(frozen=True)
class SurfacePlan:
    """What to load (body → key) and which shown bodies to remove."""

    load: tuple[tuple[int, SurfaceKey], ...]
    remove: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return not self.load and not self.remove


def surface_key(version: LabelmapVersion, body: int) -> SurfaceKey:
    return key_of(version.uuid, version.supervoxels(body))


def key_of(uuid: str, supervoxels: Sequence[int]) -> SurfaceKey:
    """The key of a surface made of ``supervoxels`` at version ``uuid``."""
    svs = np.asarray(sorted(supervoxels), dtype=np.uint64)
    return SurfaceKey(uuid, hashlib.blake2b(svs.tobytes(), digest_size=16).hexdigest(), int(svs.size))


def to_world(mesh_xyz: npt.NDArray[np.float32], voxel_size_zyx: Sequence[float]) -> npt.NDArray[np.float32]:
    """x, y, z positions, voxel ``i`` spanning ``[i, i + 1)`` → napari's z, y, x, voxel ``i`` centred on ``i``."""
    half = 0.5 * np.asarray(voxel_size_zyx, dtype=np.float64)
    return (mesh_xyz[:, ::-1].astype(np.float64) - half).astype(np.float32)


class SurfaceFollower:
    """The selected bodies' surfaces of a :class:`ProofreadingController`'s checked-out version."""

    def __init__(self, controller: ProofreadingController, *, lod: int | None = None) -> None:
        self.controller = controller
        self.lod = lod  # None: from the view's zoom, or the coarsest for bodies of many supervoxels
        self.zoom: float | None = None  # screen pixels per world unit (set_zoom)
        #: (lod_scales, world units per model unit) of the base's multilod source; None: not looked up yet;
        #: () scales: no multilod source (one level)
        self._lod_scales: tuple[tuple[float, ...], float] | None = None
        self._shown: dict[int, SurfaceKey] = {}
        self._skeletons: Any = None  # SkeletonSource | None | False (not looked up yet: None)
        self._skeletons_ready = False

    @property
    def shown_keys(self) -> dict[int, SurfaceKey]:
        return dict(self._shown)

    def wanted(self) -> dict[int, SurfaceKey]:
        """Body → key of every body that should be shown now."""
        v = self.controller.version
        if v is None:
            return {}
        out = {}
        for body in self.controller.selected:
            try:
                key = surface_key(v, int(body))
                out[int(body)] = replace(key, lod=self.lod_for(key.count))
            except ShardscopeError:  # selected, then merged away or split off: not shown
                continue
        return out

    # -- level of detail -------------------------------------------------------------------------
    @property
    def lod_scales(self) -> tuple[tuple[float, ...], float] | None:
        """The base source's level scales and world units per model unit, once :meth:`load` looked them up."""
        return self._lod_scales

    def view_lod(self) -> int:
        """The level the current zoom asks for (0 until the zoom and the source's levels are known)."""
        if self.zoom is None or not self._lod_scales:
            return 0
        scales, per_unit = self._lod_scales
        return lod_for_zoom(scales, self.zoom, world_per_unit=per_unit)

    def lod_for(self, count: int) -> int:
        """The level to read for a body of ``count`` supervoxels."""
        if self.lod is not None:
            return self.lod
        if count > FINE_LOD_SUPERVOXELS:
            return -1
        return self.view_lod()

    def set_zoom(self, zoom: float) -> bool:
        """Record the view's zoom; ``True`` when it crossed a level boundary (the surfaces should reload)."""
        before = self.view_lod()
        self.zoom = float(zoom)
        return self.view_lod() != before

    def _look_up_lod_scales(self, v: LabelmapVersion, bodies: Sequence[int]) -> None:
        """The levels of the base's multilod source, from the manifest of one of ``bodies``' supervoxels."""
        if self._lod_scales is not None:
            return
        from napari_shardscope.core.formats.precomputed.meshes import MultilodMeshSource

        source = v.labelmap.mesher().source
        if not isinstance(source, MultilodMeshSource):
            self._lod_scales = ((), 1.0)
            return
        per_unit = float(np.linalg.norm(source.info.transform_matrix()[:3, :3], axis=0).max())
        for body in bodies:
            for sv in sorted(v.supervoxels(body)):
                if sv >= v.labelmap.config.id_start:
                    continue
                found = source.manifest(int(sv))
                if found is not None and found[0].num_lods:
                    self._lod_scales = (tuple(float(x) for x in found[0].lod_scales), per_unit)
                    return
        # none of these bodies has a manifest: asked again with the next bodies

    def plan(self) -> SurfacePlan:
        want = self.wanted()
        load = tuple((b, k) for b, k in want.items() if self._shown.get(b) != k)
        remove = tuple(b for b in self._shown if b not in want)
        return SurfacePlan(load, remove)

    def load(self, plan: SurfacePlan, progress: Progress | None = None) -> list[BodySurface]:
        """Meshes of ``plan.load`` (any thread; cached supervoxel meshes make an edit's reload cheap).

        Each surface carries the key of the supervoxels it was *meshed from*, read once here, not
        the plan's: the GUI thread may edit the body between the plan and this load (a merge, then
        its undo before the load ends), and a mesh labelled with the plan's key would then match
        what is wanted again and stay shown for good. With its own key the next plan reloads it.
        """
        v = self.controller.version
        if v is None or not plan.load:
            return []
        voxel = v.scales[0].voxel_size
        self._look_up_lod_scales(v, [b for b, _k in plan.load])
        out = []
        for i, (body, key) in enumerate(plan.load):
            if key.version != v.uuid:
                continue  # the version changed since the plan: the next plan asks again
            svs = v.supervoxels(body)
            mesh: MeshData = v.labelmap.mesher(key.lod).mesh(body, v, supervoxels=svs)
            made = replace(key_of(v.uuid, svs), lod=key.lod)
            out.append(BodySurface(body, made, to_world(mesh.vertices, voxel), mesh.faces))
            if progress is not None:
                progress(i + 1, len(plan.load), f"body {body}")
        return out

    def shown(self, surfaces: Sequence[BodySurface], removed: Sequence[int]) -> None:
        """Record that the view now shows ``surfaces`` and no longer ``removed`` (the GUI thread)."""
        for b in removed:
            self._shown.pop(b, None)
        for s in surfaces:
            self._shown[s.body] = s.key

    def update(self) -> tuple[list[BodySurface], tuple[int, ...]]:
        """Plan, load and record in the calling thread (a notebook or a script)."""
        p = self.plan()
        surfaces = self.load(p)
        self.shown(surfaces, p.remove)
        return surfaces, p.remove

    # -- skeletons -----------------------------------------------------------------------------
    def skeleton_source(self) -> SkeletonSource | None:
        """The base's skeleton source (``info`` ``skeletons``), or ``None``."""
        if not self._skeletons_ready:
            v = self.controller.version
            if v is None:
                return None
            from napari_shardscope.core.errors import FormatCapabilityError
            from napari_shardscope.core.formats import open_dataset

            try:
                self._skeletons = open_dataset(v.labelmap.config.base).skeleton_source()
            except FormatCapabilityError:  # a zarr or N5 base has no skeletons
                self._skeletons = None
            self._skeletons_ready = True
        return self._skeletons  # type: ignore[no-any-return]

    def skeleton(self, body: int) -> BodySkeleton | None:
        """The union of the body's supervoxel skeletons the base holds (``None`` without a skeleton source)."""
        v = self.controller.version
        source = self.skeleton_source()
        if v is None or source is None:
            return None
        verts, edges, offset = [], [], 0
        for sv in sorted(v.supervoxels(body)):
            sk = source.skeleton(int(sv)) if sv < v.labelmap.config.id_start else None
            if sk is None or not len(sk.vertices):
                continue
            verts.append(np.ascontiguousarray(sk.vertices[:, ::-1]))  # nodes sit on voxel centres already
            edges.append(sk.edges + np.uint32(offset))
            offset += len(sk.vertices)
        if not verts:
            return BodySkeleton(body, surface_key(v, body), np.zeros((0, 3), np.float32), np.zeros((0, 2), np.uint32))
        return BodySkeleton(body, surface_key(v, body), np.concatenate(verts), np.concatenate(edges))
