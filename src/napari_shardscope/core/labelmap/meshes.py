"""A body's mesh at any version, true to every merge, cleave, split and undo.

A body at a version is a set of supervoxels, and a supervoxel id's voxels never change: a split
retires the id and hands out two new ones (:mod:`.splitting`), an undo brings the old id back with
its old voxels. So a body's mesh is the union of its supervoxels' meshes, and each supervoxel mesh
is computed once and shared by every version and branch that holds the supervoxel:

* a supervoxel of the base (id below ``id_start``) whose segmentation names a mesh source
  (``info`` ``mesh``; per-supervoxel, the DVID/CAVE layout) is read from that source;
* any other supervoxel — one a split created, or every one when the base has no meshes — is meshed
  from the labels with ``zmesh`` at the coarsest scale that still resolves it (:func:`resolving_scale`:
  at least :data:`MIN_RESOLVE_VOXELS` of its voxels there, its box under :data:`MAX_MESH_VOXELS`),
  simplified, and cached in the repository as unversioned data keyed by the supervoxel id (derived
  from something immutable, which is what unversioned data is for): the next session, or another
  version, reads it back instead of meshing.

A merge or cleave therefore costs only the concatenation of cached meshes; a split meshes only the
two new supervoxels. Vertices are float32 x, y, z in world units (nm), faces uint32: trimesh takes
them as they are (``trimesh.Trimesh(m.vertices, m.faces)``).
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import IndexDecodeError, ShardscopeError
from napari_shardscope.core.formats.precomputed.meshes import (
    LegacyMeshSource,
    MeshData,
    MultilodMeshSource,
    concatenate_meshes,
    empty_mesh,
)
from napari_shardscope.core.labelmap.backend import LabelmapBackend
from napari_shardscope.core.labelmap.config import ScaleGeometry
from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.labelmap.version import LabelmapVersion

#: Most voxels read to mesh one supervoxel from the labels (a 128³ box): the scale is chosen to fit.
MAX_MESH_VOXELS = 128**3
#: A supervoxel is meshed at the coarsest scale (down to the one :data:`MAX_MESH_VOXELS` allows) whose
#: voxels still resolve it: at least this many of its voxels (a 4 x 8 x 8 box) at that scale, by the
#: label index's count. A 4 x 16 x 16 supervoxel is meshed at 2x in x, y, with ~3x fewer marching-cubes
#: faces to simplify (the simplifier's ~2 µs a face is what a body's first mesh costs).
MIN_RESOLVE_VOXELS = 256
#: Most voxels read at once to mesh a batch of supervoxels together (a 256³ box of uint64: 128 MB).
BATCH_VOXELS = 256**3
#: Supervoxel meshes kept in memory (a body of 10⁴ supervoxels fits several times over).
MEMORY_CACHE = 65536
#: Meshes from labels are simplified (quadric edge collapse, zmesh's simplifier) towards this many
#: times fewer faces: marching cubes gives ~2 faces per surface voxel, most of them coplanar.
SIMPLIFY_REDUCTION = 100
#: ... but no vertex moves further than this many voxels (the smallest side of the meshed scale's voxel).
SIMPLIFY_MAX_ERROR_VOXELS = 1.0
#: v3: simplified meshes at the coarsest resolving scale (v2 meshed at the finest scale that fit; v1 held
#: marching cubes' raw output; older entries are ignored, not reused).
CACHE_PREFIX = b"mesh/v3/"
#: Unsimplified meshes (``BodyMesher(simplify=False)``, for comparisons) are cached apart.
RAW_CACHE_PREFIX = b"mesh/v3-raw/"
#: ... and so are meshes at the finest scale that fits (``BodyMesher(coarsen=False)``, for comparisons).
FINE_CACHE_PREFIX = b"mesh/v3-fine/"
FINE_RAW_CACHE_PREFIX = b"mesh/v3-fine-raw/"
Progress = Callable[[int, int], None]


def encode_mesh(mesh: MeshData) -> bytes:
    """``uint32 nv, uint32 nf``, float32 vertices, uint32 faces (little-endian): the repository cache value."""
    return (struct.pack("<II", len(mesh.vertices), len(mesh.faces)) + mesh.vertices.astype("<f4").tobytes()
            + mesh.faces.astype("<u4").tobytes())


def decode_mesh(segment_id: int, data: bytes, *, key: str) -> MeshData:
    if len(data) < 8:
        raise IndexDecodeError("cached mesh has no header", key=key, offset=0)
    nv, nf = struct.unpack_from("<II", data, 0)
    if len(data) != 8 + 12 * nv + 12 * nf:
        raise IndexDecodeError(f"cached mesh of {nv} vertices and {nf} faces has {len(data)} bytes", key=key, offset=0)
    vertices = np.frombuffer(data, "<f4", 3 * nv, 8).reshape(nv, 3).astype(np.float32)
    faces = np.frombuffer(data, "<u4", 3 * nf, 8 + 12 * nv).reshape(nf, 3).astype(np.uint32)
    if faces.size and int(faces.max()) >= nv:
        raise IndexDecodeError("cached mesh face refers to a missing vertex", key=key, offset=8 + 12 * nv)
    return MeshData(segment_id, vertices, faces)


def cache_key(sv: int, *, simplified: bool = True, coarsened: bool = True) -> bytes:
    prefix = ((CACHE_PREFIX if simplified else RAW_CACHE_PREFIX) if coarsened
              else (FINE_CACHE_PREFIX if simplified else FINE_RAW_CACHE_PREFIX))
    return prefix + struct.pack(">Q", sv)


def mesh_labels(labels: npt.NDArray[Any], wanted: Sequence[int], *, voxel_size: Sequence[float],
                origin: Sequence[float], simplify: bool = True,
                max_error: float | None = None) -> dict[int, MeshData]:
    """Meshes of the ``wanted`` labels of a (z, y, x) block: vertices x, y, z in world units.

    ``voxel_size`` and ``origin`` (world position of the block's first voxel) are (z, y, x). Positions
    follow the precomputed convention the mesh sources use (voxel ``i`` spans ``[i, i + 1) * size``
    from ``origin``), so meshed and stored supervoxels line up. The meshes are closed where a label
    touches the block's edge (zmesh's ``close`` pads the block by one voxel, which is taken back).

    With ``simplify`` (default) the meshes are simplified towards :data:`SIMPLIFY_REDUCTION` times
    fewer faces, moving no vertex more than :func:`simplify_max_error` (a voxel): a body of 10⁴
    supervoxels drops from millions of faces to what napari draws interactively. ``max_error``
    (world units) overrides the bound: a block read at a coarser scale than the supervoxel needs keeps
    the finer scale's bound.
    """
    import zmesh

    keep = np.isin(labels, np.asarray(list(wanted), dtype=labels.dtype))
    data = np.where(keep, labels, 0).astype(np.uint64)
    xyz = np.asfortranarray(data.transpose(2, 1, 0))
    mesher = zmesh.Mesher((float(voxel_size[2]), float(voxel_size[1]), float(voxel_size[0])))
    mesher.mesh(xyz, close=True)
    size = np.asarray([voxel_size[2], voxel_size[1], voxel_size[0]], dtype=np.float64)
    shift = np.asarray([origin[2], origin[1], origin[0]], dtype=np.float64) - 0.5 * size  # undo close's pad
    out = {}
    for label in wanted:
        m = (mesher.get(int(label), normals=False, reduction_factor=SIMPLIFY_REDUCTION,
                        max_error=simplify_max_error(voxel_size) if max_error is None else max_error) if simplify
             else mesher.get(int(label), normals=False))
        if simplify and m is not None and not np.isfinite(m.vertices).all():  # a simplifier failure: unsimplified
            m = mesher.get(int(label), normals=False)
        if m is None or len(m.faces) == 0:
            out[int(label)] = empty_mesh(int(label))
            continue
        out[int(label)] = MeshData(int(label), (np.asarray(m.vertices, np.float64) + shift).astype(np.float32),
                                   np.asarray(m.faces, dtype=np.uint32).reshape(-1, 3))
    mesher.clear()
    return out


def simplify_max_error(voxel_size: Sequence[float]) -> float:
    """The simplifier's bound on a vertex's displacement, in world units: :data:`SIMPLIFY_MAX_ERROR_VOXELS` voxels."""
    return SIMPLIFY_MAX_ERROR_VOXELS * float(min(voxel_size))


class BodyMesher:
    """Meshes of a labelmap's bodies at any version (see the module docstring).

    Parameters
    ----------
    labelmap
        The labelmap whose bodies are meshed.
    source
        The base's per-supervoxel mesh source; ``"auto"`` (default) opens the one the base's
        ``info`` names, ``None`` meshes everything from the labels.
    lod
        Level of detail read from a multi-resolution source (``-1``: the coarsest).
    simplify
        Simplify meshes made from the labels (see :func:`mesh_labels`); ``False`` keeps marching
        cubes' raw output (millions of faces for a big body), for comparisons.
    coarsen
        Mesh each supervoxel at the coarsest scale that still resolves it (:func:`resolving_scale`);
        ``False`` meshes at the finest scale that fits :data:`MAX_MESH_VOXELS`, for comparisons.
    """

    def __init__(self, labelmap: LabelmapBackend, *,
                 source: MultilodMeshSource | LegacyMeshSource | str | None = "auto", lod: int = 0,
                 workers: int = 8, simplify: bool = True, coarsen: bool = True) -> None:
        self.labelmap = labelmap
        self.simplify = simplify
        self.coarsen = coarsen
        self.lod = lod
        self.workers = workers
        self._source_arg = source
        self._source: MultilodMeshSource | LegacyMeshSource | None = None
        self._source_ready = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._memory: LruCache[tuple[int, int], MeshData] = LruCache(MEMORY_CACHE)
        #: Where each supervoxel mesh came from, for tests and the status line: "source" | "labels" | "cache".
        self.origins: dict[int, str] = {}

    @property
    def source(self) -> MultilodMeshSource | LegacyMeshSource | None:
        with self._lock:
            if not self._source_ready:
                self._source = self._open_source()
                self._source_ready = True
            return self._source

    def _open_source(self) -> MultilodMeshSource | LegacyMeshSource | None:
        arg = self._source_arg
        if arg is None or isinstance(arg, (MultilodMeshSource, LegacyMeshSource)):
            return arg
        from napari_shardscope.core.errors import FormatCapabilityError
        from napari_shardscope.core.formats import open_dataset

        try:  # a precomputed base hands out its own classes
            source = open_dataset(self.labelmap.config.base).mesh_source()
            return cast("MultilodMeshSource | LegacyMeshSource | None", source)
        except FormatCapabilityError:  # a zarr or N5 base: every supervoxel is meshed from the labels
            return None

    # -- bodies --------------------------------------------------------------------------------

    def mesh(self, body: int, version: str | LabelmapVersion = "main", *,
             progress: Progress | None = None, supervoxels: Sequence[int] | None = None) -> MeshData:
        """The body's mesh at ``version`` (a branch name, a UUID or a :class:`LabelmapVersion`).

        ``supervoxels``: the body's supervoxels as the caller read them, so a caller that labels the
        mesh with its supervoxel set gets the mesh of that very set even if an edit lands meanwhile.
        """
        v = version if not isinstance(version, str) else LabelmapVersion(
            self.labelmap, self.labelmap.repo.version(version).uuid)
        svs = v.supervoxels(int(body)) if supervoxels is None else [int(s) for s in supervoxels]
        meshes = self.supervoxel_meshes(svs, v, progress=progress)
        return concatenate_meshes(int(body), [meshes[s] for s in svs])

    def supervoxel_meshes(self, svs: Sequence[int], version: LabelmapVersion, *,
                          progress: Progress | None = None) -> dict[int, MeshData]:
        """Every supervoxel's mesh: memory, then the source, then the repository cache, then meshing."""
        lod = self.lod
        out: dict[int, MeshData] = {}
        missing: list[int] = []
        for sv in svs:
            hit = self._memory.get((int(sv), lod))
            if hit is not None:
                out[int(sv)] = hit
            else:
                missing.append(int(sv))
        total, done = len(svs), len(out)
        if progress is not None:
            progress(done, total)
        source = self.source
        id_start = self.labelmap.config.id_start
        from_source = [s for s in missing if source is not None and s < id_start]
        rest = [s for s in missing if not (source is not None and s < id_start)]
        if from_source and source is not None:
            def read(s: int) -> MeshData | None:
                if isinstance(source, MultilodMeshSource):  # supervoxels may have fewer levels than asked
                    return source.mesh(s, lod, clamp=True)
                return source.mesh(s, lod)

            # Remote reads wait on round trips: overlap them. Local reads are microseconds: a pool costs more.
            parallel = len(from_source) > 1 and not source.store.cheap_size
            found = self._pool().map(read, from_source) if parallel else map(read, from_source)
            for sv, m in zip(from_source, found, strict=True):
                done += 1
                if m is None:  # the source lacks this supervoxel: mesh it from the labels
                    rest.append(sv)
                    continue
                out[sv] = m
                self._keep(sv, m, "source")
                if progress is not None:
                    progress(done, total)
        if rest:
            cached = self._from_repository(rest)
            for sv, m in cached.items():
                self._keep(sv, m, "cache")
                out[sv] = m
            todo = [s for s in rest if s not in cached]
            if todo:
                with self.labelmap.holding_edits():  # see Labelmap.holding_edits
                    made = self._mesh_from_labels(todo, version)
                self._to_repository(made)
                for sv, m in made.items():
                    self._keep(sv, m, "labels")
                    out[sv] = m
        if progress is not None:
            progress(total, total)
        return out

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="shardscope-mesh")
            return self._executor

    def _keep(self, sv: int, mesh: MeshData, origin: str) -> None:
        self._memory.put((sv, self.lod), mesh)
        self.origins[sv] = origin

    # -- repository cache ----------------------------------------------------------------------

    def _from_repository(self, svs: Sequence[int]) -> dict[int, MeshData]:
        repo, inst = self.labelmap.repo, self.labelmap.instance
        out = {}
        for sv in svs:
            raw = repo.get_unversioned(inst, cache_key(sv, simplified=self.simplify, coarsened=self.coarsen))
            if raw is not None:
                out[sv] = decode_mesh(sv, raw, key=f"{self.labelmap.name} mesh cache {sv}")
        return out

    def _to_repository(self, meshes: dict[int, MeshData]) -> None:
        if not meshes:
            return
        with contextlib.suppress(ShardscopeError):  # a read-only repository: the meshes stay in memory only
            items = [(cache_key(sv, simplified=self.simplify, coarsened=self.coarsen), encode_mesh(m))
                     for sv, m in meshes.items()]
            self.labelmap.repo.put_unversioned(self.labelmap.instance, items)

    # -- meshing from labels -------------------------------------------------------------------

    def _mesh_from_labels(self, svs: Sequence[int], version: LabelmapVersion) -> dict[int, MeshData]:
        """Mesh supervoxels from the labels, each at the finest scale whose box fits the budget.

        Supervoxels meshed at the same scale are read and meshed together, a batch per region of
        at most :data:`BATCH_VOXELS` (zmesh meshes every label of a block in one pass): a body of
        thousands of supervoxels costs a few reads, not one per supervoxel.
        """
        state = version._state()
        config = self.labelmap.config
        grid = config.grid(0)
        out: dict[int, MeshData] = {}
        scales = config.scales
        by_scale: dict[tuple[int, int], list[tuple[int, Box]]] = {}
        for sv in svs:
            entry = self.labelmap.entry(state, sv)
            if entry is None:
                out[sv] = empty_mesh(sv)
                continue
            box = Box((0, 0, 0), (0, 0, 0))
            for c in entry.block_set():
                box = box.union(grid.box(c))
            fits = self._scale_for(box)
            chosen = self._scale_for(box, entry.total) if self.coarsen else fits
            by_scale.setdefault((fits, chosen), []).append((sv, box))
        for (fits, scale), members in by_scale.items():
            error = simplify_max_error(scales[fits].voxel_size)  # the bound of the scale that fits: as before
            for batch in _batches(members, config.scales[scale]):
                made = self._mesh_batch(batch, scale, version, error)
                for sv, box0 in batch:
                    mesh = made.get(sv)
                    # a supervoxel too thin for its scale (lost to the mode downsampling) is meshed finer
                    out[sv] = mesh if mesh is not None else self._mesh_one(sv, box0, version, scale - 1)
        return out

    def _scale_for(self, box0: Box, voxels: int = 0) -> int:
        """The scale a supervoxel is meshed at: see :func:`resolving_scale` (``voxels=0``: the finest that fits)."""
        return resolving_scale(box0, voxels, self.labelmap.config.scales)

    def _mesh_batch(self, batch: Sequence[tuple[int, Box]], scale: int,
                    version: LabelmapVersion, max_error: float) -> dict[int, MeshData]:
        """Meshes of the batch's supervoxels present at ``scale`` in one read of their union box."""
        s = self.labelmap.config.scales[scale]
        box = Box((0, 0, 0), (0, 0, 0))
        for _sv, box0 in batch:
            box = box.union(_scaled(box0, s.factors, s.shape))
        labels = version.read_supervoxels(box, scale=scale)
        wanted = np.asarray([sv for sv, _ in batch], dtype=np.uint64)
        present = [int(v) for v in np.intersect1d(np.unique(labels), wanted)]
        if not present:
            return {}
        origin = [t + lo * vs for t, lo, vs in zip(s.translate, box.lo, s.voxel_size, strict=True)]
        return mesh_labels(labels, present, voxel_size=s.voxel_size, origin=origin, simplify=self.simplify,
                           max_error=max_error)

    def _mesh_one(self, sv: int, box0: Box, version: LabelmapVersion, start: int | None = None) -> MeshData:
        first = self._scale_for(box0) if start is None else start  # the finest that fits: a thin one's fallback
        for i in range(first, -1, -1):  # a supervoxel too thin for a coarse scale is meshed finer
            s = self.labelmap.config.scales[i]
            box = _scaled(box0, s.factors, s.shape)
            labels = version.read_supervoxels(box, scale=i)
            if not np.any(labels == sv):
                continue
            origin = [t + lo * vs for t, lo, vs in zip(s.translate, box.lo, s.voxel_size, strict=True)]
            return mesh_labels(labels, [sv], voxel_size=s.voxel_size, origin=origin, simplify=self.simplify)[sv]
        return empty_mesh(sv)

    def forget(self) -> None:
        """Drop the in-memory meshes (the repository cache stays)."""
        self._memory.clear()
        self.origins.clear()


def resolving_scale(box0: Box, voxels: int, scales: Sequence[ScaleGeometry]) -> int:
    """The coarsest scale that still resolves a supervoxel of ``voxels`` scale-0 voxels in scale-0 box ``box0``.

    Starts at the finest scale whose box fits :data:`MAX_MESH_VOXELS` (a big supervoxel cannot be read
    finer), then goes coarser while the supervoxel keeps at least :data:`MIN_RESOLVE_VOXELS` voxels
    there and no side of the scale's voxel exceeds the largest side of scale 0's (8 x 8 x 40 nm data is
    meshed at most at 32 x 32 x 40: no coarser than its z already is): fewer faces to mesh and simplify,
    every surface within one scale-0 voxel's largest side of the full-resolution one (the caller keeps
    the simplifier's bound of the scale that fits). ``box0`` is the union of its blocks, too coarse to
    judge thickness by; a supervoxel the downsampling loses is meshed finer by the caller.
    """
    first = next((i for i, s in enumerate(scales) if _voxels(_scaled(box0, s.factors, s.shape)) <= MAX_MESH_VOXELS),
                 len(scales) - 1)
    chosen = first
    widest = max(scales[0].voxel_size)
    for i in range(first + 1, len(scales)):
        fz, fy, fx = scales[i].factors
        if voxels // (fz * fy * fx) >= MIN_RESOLVE_VOXELS and max(scales[i].voxel_size) <= widest:
            chosen = i
        else:
            break
    return chosen


def _scaled(box0: Box, factors: Sequence[int], shape: Sequence[int]) -> Box:
    """A scale-0 box at a coarser scale, grown by one voxel (closed meshes) and clipped to the scale."""
    lo = tuple(max(0, lo // f - 1) for lo, f in zip(box0.lo, factors, strict=True))
    hi = tuple(min(n, -(-h // f) + 1) for h, f, n in zip(box0.hi, factors, shape, strict=True))
    return Box((lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2]))


def _batches(members: list[tuple[int, Box]], scale: ScaleGeometry) -> list[list[tuple[int, Box]]]:
    """Split supervoxels (with their scale-0 boxes) into groups whose union box at ``scale`` fits :data:`BATCH_VOXELS`.

    Halves along the axis the group spreads most, by box centre, until each group fits (or is one supervoxel).
    """
    box = Box((0, 0, 0), (0, 0, 0))
    for _sv, b in members:
        box = box.union(_scaled(b, scale.factors, scale.shape))
    if len(members) == 1 or _voxels(box) <= BATCH_VOXELS:
        return [members]
    centres = np.asarray([[(lo + hi) / 2 for lo, hi in zip(b.lo, b.hi, strict=True)] for _sv, b in members])
    axis = int(np.argmax(centres.max(axis=0) - centres.min(axis=0)))
    order = np.argsort(centres[:, axis], kind="stable")
    half = len(members) // 2
    low = [members[i] for i in order[:half]]
    high = [members[i] for i in order[half:]]
    return _batches(low, scale) + _batches(high, scale)


def _voxels(box: Box) -> int:
    z, y, x = box.shape
    return z * y * x


__all__ = ["BodyMesher", "decode_mesh", "encode_mesh", "mesh_labels", "resolving_scale", "simplify_max_error"]
