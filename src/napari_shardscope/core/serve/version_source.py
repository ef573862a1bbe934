"""A labelmap version as an unsharded Neuroglancer precomputed segmentation, computed on request.

Nothing is exported: ``info`` describes the base's scales (uint64 body ids, ``raw`` encoding, one
chunk per overlay block, edges capped at :data:`MAX_CHUNK_EDGE`) and names a ``mesh`` directory;
only those chunks are answered (any other box is a 404, so a request computes at most 64³ ids),
each with
:meth:`~napari_shardscope.core.labelmap.version.LabelmapVersion.read_bodies` of that box — the base
blocks patched by the version's overlay and mapped through its body map, the very reads napari
shows and export writes. The version's UUID is part of the URL, so a browser cache never serves
one version's chunk for another; an open version is sent ``no-store`` (it can still change).

The ``mesh`` directory is ``neuroglancer_legacy_mesh`` computed on request too: ``mesh/<body>:0``
is a manifest naming one fragment, ``mesh/<body>:0:body`` that fragment — the body's mesh at the
version (:meth:`~napari_shardscope.core.labelmap.Labelmap.mesh`: the union of its supervoxels'
meshes, from the base's mesh source or meshed from the labels and cached), so Neuroglancer's 3-D
panel shows edited bodies as they are at the version.

:func:`merge_equivalences` is the server-less hand-over of a version whose edits are only merges:
Neuroglancer's ``equivalences`` over the base's own ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import ArgumentError, NotFoundError, UnsupportedError
from napari_shardscope.core.labelmap import Labelmap, UnknownLabelError
from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.serve.bodies import BytesBody
from napari_shardscope.core.serve.messages import local_root

# ASCII numbers of at most 19 digits: a coordinate or body id beyond that is no chunk or body (and Python
# refuses int() of over 4,300 digits), so a longer one is simply no match (404).
_CHUNK = re.compile(r"^([0-9]{1,19})-([0-9]{1,19})_([0-9]{1,19})-([0-9]{1,19})_([0-9]{1,19})-([0-9]{1,19})$")
_MESH_MANIFEST = re.compile(r"^([0-9]{1,20}):0$")
_MESH_FRAGMENT = re.compile(r"^([0-9]{1,20}):0:body$")
#: The mesh directory named by a served version's ``info``.
MESH_DIR = "mesh"
#: Computed chunks kept per committed version, and their bytes at most.
CHUNK_CACHE = 64
CHUNK_CACHE_BYTES = 256 << 20
#: The largest chunk edge a served version's ``info`` declares (a chunk is at most 64³ uint64, 2 MiB):
#: an overlay block larger than that is served as several chunks, so no request computes more.
MAX_CHUNK_EDGE = 64


def served_chunk(block: tuple[int, int, int]) -> tuple[int, int, int]:
    """The chunk shape (z, y, x) a version is served in: the overlay block, each edge at most :data:`MAX_CHUNK_EDGE`."""
    return (min(block[0], MAX_CHUNK_EDGE), min(block[1], MAX_CHUNK_EDGE), min(block[2], MAX_CHUNK_EDGE))


def scale_key(index: int) -> str:
    """The URL key of scale ``index`` (``s0``, ``s1``…; the base's own keys may hold any character)."""
    return f"s{index}"


def version_info(labelmap: Labelmap) -> dict[str, Any]:
    """The precomputed ``info`` of any version of ``labelmap`` (x, y, z order; nm)."""
    cfg = labelmap.config
    bz, by, bx = served_chunk(cfg.block)
    scales = []
    for i, g in enumerate(cfg.scales):
        vz, vy, vx = g.voxel_size
        offset = [round(t / v) for t, v in zip(g.translate, g.voxel_size, strict=True)]
        scales.append({
            "key": scale_key(i),
            "size": [int(g.shape[2]), int(g.shape[1]), int(g.shape[0])],
            "resolution": [float(vx), float(vy), float(vz)],
            "voxel_offset": [int(offset[2]), int(offset[1]), int(offset[0])],
            "chunk_sizes": [[int(bx), int(by), int(bz)]],
            "encoding": "raw",
        })
    return {"@type": "neuroglancer_multiscale_volume", "type": "segmentation", "data_type": "uint64",
            "num_channels": 1, "scales": scales, "mesh": MESH_DIR}


def encode_legacy_fragment(vertices: Any, faces: Any) -> bytes:
    """A ``neuroglancer_legacy_mesh`` fragment: ``uint32`` vertex count, float32 x, y, z, uint32 triangles."""
    v = np.ascontiguousarray(vertices, dtype="<f4").reshape(-1, 3)
    f = np.ascontiguousarray(faces, dtype="<u4").reshape(-1, 3)
    return np.asarray([len(v)], dtype="<u4").tobytes() + v.tobytes() + f.tobytes()


class VersionMount:
    """Serves one version of one labelmap as precomputed (a :class:`~.server.Mount`).

    The labelmap object is shared with whoever opened it (napari's proofreading session, the
    CLI), so edits made to an open version show on the next request.
    """

    def __init__(self, labelmap: Labelmap, ref: str) -> None:
        self.labelmap = labelmap
        self.version = labelmap.repo.version(ref)
        self.uuid = self.version.uuid
        self.cacheable = bool(self.version.locked)
        self._info = json.dumps(version_info(labelmap)).encode()
        self._chunks: LruCache[str, bytes | None] = LruCache(CHUNK_CACHE, weigh=lambda b: len(b or b""),
                                                              max_weight=CHUNK_CACHE_BYTES)

    def _compute(self, key: str) -> bytes | None:
        if key == "info":
            return self._info
        scale_name, _, name = key.partition("/")
        if scale_name == MESH_DIR:
            return self._mesh(name)
        cfg = self.labelmap.config
        index = next((i for i in range(len(cfg.scales)) if scale_key(i) == scale_name), None)
        m = _CHUNK.match(name)
        if index is None or m is None:
            return None
        g = cfg.scales[index]
        offset = [round(t / v) for t, v in zip(g.translate, g.voxel_size, strict=True)]  # z, y, x
        x0, x1, y0, y1, z0, z1 = (int(v) for v in m.groups())
        lo = (z0 - offset[0], y0 - offset[1], x0 - offset[2])
        hi = (z1 - offset[0], y1 - offset[1], x1 - offset[2])
        if any(a < 0 or b > s or a >= b for a, b, s in zip(lo, hi, g.shape, strict=True)):
            raise NotFoundError(f"chunk {key!r} lies outside scale {scale_name} of version {self.version.short}")
        chunk = served_chunk(cfg.block)
        if any(a % c or b != min(a + c, s) for a, b, c, s in zip(lo, hi, chunk, g.shape, strict=True)):
            # only the info's chunks: a box of any size would let one request compute the whole scale
            raise NotFoundError(f"{key!r} is not a chunk of scale {scale_name} (chunks are {chunk[::-1]} x, y, z)")
        data = self.labelmap.at(self.uuid).read_bodies(Box(lo, hi), index)
        # precomputed raw chunks are x fastest: (z, y, x) C order is exactly that
        return np.ascontiguousarray(data, dtype="<u8").tobytes()

    def _mesh(self, name: str) -> bytes | None:
        """The legacy mesh directory's files (``info``, a body's manifest, its one fragment); ``None``: no body."""
        if name == "info":
            return json.dumps({"@type": "neuroglancer_legacy_mesh"}).encode()
        manifest, fragment = _MESH_MANIFEST.match(name), _MESH_FRAGMENT.match(name)
        if manifest is None and fragment is None:
            return None
        body = int((manifest or fragment).group(1))  # type: ignore[union-attr]
        if body >= 1 << 64:
            return None  # no uint64 body id
        v = self.labelmap.at(self.uuid)
        try:
            if manifest is not None:
                v.supervoxels(body)  # an unknown body: no manifest (Neuroglancer shows nothing for it)
                return json.dumps({"fragments": [f"{body}:0:body"]}).encode()
            mesh = self.labelmap.mesh(body, self.uuid)
        except UnknownLabelError:
            return None
        return encode_legacy_fragment(mesh.vertices, mesh.faces)

    def read(self, key: str) -> bytes | None:
        """The bytes of ``key`` at the version (computed, or from the cache of a committed version)."""
        if not self.cacheable:
            return self._compute(key)
        return self._chunks.get_or_load(key, lambda: self._compute(key))

    def open(self, key: str) -> BytesBody | None:
        """``key`` computed once for the whole answer (an open version may change between two reads)."""
        data = self.read(key)
        return None if data is None else BytesBody(data)

    def local_roots(self) -> Mapping[str, str]:
        """The base (``<base>``) and the repository (``<repository>``) as an error sent to a client names them."""
        roots = local_root(self.labelmap.config.base, "<base>")
        if self.labelmap.repo.path is not None:
            roots[str(self.labelmap.repo.path)] = "<repository>"
        return roots


def merge_equivalences(labelmap: Labelmap, ref: str) -> list[list[int]]:
    """Neuroglancer ``equivalences`` that turn the base into version ``ref``, when it only merged bodies.

    Each group lists the base ids (supervoxels, or the base's own bodies' supervoxels when the base
    carries an agglomeration) that the version shows as one body.

    Raises
    ------
    UnsupportedError
        When the version's history holds anything but merges (a cleave or split cannot be
        expressed as equivalences over the base's ids): serve the version instead.
    """
    v = labelmap.at(ref)
    ops = sorted({e.mutation.operation for e in v.mutations()})
    if any(op != "merge" for op in ops):
        raise UnsupportedError(f"version {v.version.short} has {', '.join(o for o in ops if o != 'merge')} "
                               f"edits: only a merge-only version can be handed over as equivalences")
    groups = []
    for _name, bodies in sorted(v.merged_sets().items()):
        members: set[int] = set()
        for body in bodies:
            if labelmap.config.agglomeration:
                arr = np.asarray([body], dtype=np.uint64)
                members.update(int(s) for s in labelmap.agglomeration.members_of(arr))
                if not bool(labelmap.agglomeration.listed_mask(arr)[0]):
                    members.add(body)
            else:
                members.add(body)
        groups.append(sorted(members))
    return groups


def check_ref(labelmap: Labelmap, ref: str) -> str:
    """The UUID of ``ref`` in the labelmap's repository (typed error naming it when unknown)."""
    try:
        return labelmap.repo.version(ref).uuid
    except LookupError as exc:
        raise ArgumentError(f"no version {ref!r} in the repository: {exc}") from exc
