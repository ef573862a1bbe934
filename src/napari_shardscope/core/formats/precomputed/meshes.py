"""Read the meshes a precomputed segmentation's ``info`` names: legacy and multi-resolution Draco.

Two mesh formats of Neuroglancer's precomputed spec, both through the one byte store (local, http,
gs, s3) and, when sharded, the shard reader the shard browser's segment locate uses:

* ``neuroglancer_legacy_mesh`` — unsharded: a JSON manifest ``<id>:0`` listing fragment files, each
  ``uint32le num_vertices``, ``float32le[num_vertices][3]`` positions (model space), then
  ``uint32le[..][3]`` triangles; sharded: the chunk of id ``<id>`` is one such fragment. A mesh
  directory without an ``info`` is legacy (the oldest layout). CloudVolume's local layout stores
  the files as ``NAME.gz``; both spellings are read.
* ``neuroglancer_multilod_draco`` — a binary manifest (``<id>.index`` unsharded, the chunk of
  ``<id>`` sharded) describing levels of detail and Draco-encoded fragments; the fragment bytes are
  ``<id>`` (unsharded) or the bytes of the shard file just before the manifest (sharded). Decoded
  with ``DracoPy``; quantized positions are mapped to "stored model" space per the spec::

      grid_origin + vertex_offsets[lod] + chunk_shape * 2**lod * (fragment_position + q / (2**bits - 1))

Then the ``info`` ``transform`` (4x3, row-major) maps stored-model space to model space (nm for the
datasets CloudVolume/igneous write). Returned meshes are :class:`MeshData`: float32 ``(N, 3)``
vertices in x, y, z and uint32 ``(M, 3)`` faces, arrays trimesh takes as they are.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_document
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, IndexDecodeError, MetadataError
from napari_shardscope.core.formats.precomputed.segment_files import MAX_SEGMENT_FILE_BYTES, FieldReader, SegmentFiles
from napari_shardscope.core.formats.precomputed.shard_reader import ShardFile
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.json_document import load_json

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]

LEGACY = "neuroglancer_legacy_mesh"
MULTILOD = "neuroglancer_multilod_draco"
#: Most bytes one mesh file, manifest or a segment's fragment data may take.
MAX_MESH_BYTES = MAX_SEGMENT_FILE_BYTES
#: Most bytes a manifest may take (legacy JSON or a multilod binary manifest).
MAX_MANIFEST_BYTES = 64 << 20
#: Most levels of detail and fragments per level a multilod manifest may claim.
MAX_LODS = 64
MAX_FRAGMENTS = 1 << 22


@dataclass(frozen=True, eq=False)
class MeshData:
    """One segment's mesh: ``vertices`` float32 ``(N, 3)`` x, y, z in model space (nm), ``faces`` uint32 ``(M, 3)``."""

    segment_id: int
    vertices: F32
    faces: U32
    lod: int | None = None

    @property
    def bounds(self) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
        """``(min, max)`` corners of the vertices (zeros for an empty mesh)."""
        if len(self.vertices) == 0:
            return (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
        lo, hi = self.vertices.min(axis=0), self.vertices.max(axis=0)
        return (float(lo[0]), float(lo[1]), float(lo[2])), (float(hi[0]), float(hi[1]), float(hi[2]))

    @property
    def is_empty(self) -> bool:
        return len(self.faces) == 0


def empty_mesh(segment_id: int, lod: int | None = None) -> MeshData:
    return MeshData(segment_id, np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32), lod)


def concatenate_meshes(segment_id: int, meshes: Sequence[MeshData], lod: int | None = None) -> MeshData:
    """One mesh holding every face of ``meshes`` (vertices not merged: fragments meet, they do not share)."""
    meshes = [m for m in meshes if len(m.vertices)]
    if not meshes:
        return empty_mesh(segment_id, lod)
    if len(meshes) == 1:
        m = meshes[0]
        return MeshData(segment_id, m.vertices, m.faces, lod)
    offsets = np.cumsum([0] + [len(m.vertices) for m in meshes[:-1]])
    vertices = np.concatenate([m.vertices for m in meshes]).astype(np.float32, copy=False)
    faces = np.concatenate([m.faces + np.uint32(o) for m, o in zip(meshes, offsets, strict=True)])
    return MeshData(segment_id, vertices, faces.astype(np.uint32, copy=False), lod)


# -- metadata ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeshInfo:
    """A mesh directory's ``info`` (a legacy directory without one gets the defaults)."""

    type: str
    sharding: ShardingSpec | None = None
    vertex_quantization_bits: int = 16
    transform: tuple[float, ...] = (1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0)
    lod_scale_multiplier: float = 1.0

    def transform_matrix(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.transform, dtype=np.float64).reshape(3, 4)


def parse_transform(value: Any, *, key: str) -> tuple[float, ...]:
    """The 12 numbers of a precomputed 4x3 ``transform`` (identity when absent)."""
    if value is None:
        return MeshInfo(LEGACY).transform
    if (not isinstance(value, list) or len(value) != 12
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise MetadataError(f'"transform" must be a list of 12 numbers, got {value!r}', key=key)
    out = tuple(float(v) for v in value)
    if not all(np.isfinite(out)):
        raise MetadataError(f'"transform" must be finite, got {value!r}', key=key)
    return out


def parse_mesh_info(doc: Mapping[str, Any] | None, *, key: str) -> MeshInfo:
    """A mesh directory's ``info`` (``None``: a legacy directory without one)."""
    if doc is None:
        return MeshInfo(LEGACY)
    kind = doc.get("@type")
    if kind not in (LEGACY, MULTILOD):
        raise MetadataError(f'"@type" {kind!r} is not a mesh info ({LEGACY!r} or {MULTILOD!r})', key=key)
    sharding_doc = doc.get("sharding")
    sharding = None if sharding_doc is None else parse_sharding_spec(sharding_doc, key=key, where="sharding")
    transform = parse_transform(doc.get("transform"), key=key)
    if kind == LEGACY:
        return MeshInfo(LEGACY, sharding, transform=transform)
    bits = doc.get("vertex_quantization_bits")
    if bits not in (10, 16):
        raise MetadataError(f'"vertex_quantization_bits" must be 10 or 16, got {bits!r}', key=key)
    mult = doc.get("lod_scale_multiplier", 1.0)
    if not isinstance(mult, (int, float)) or isinstance(mult, bool) or not np.isfinite(mult) or mult <= 0:
        raise MetadataError(f'"lod_scale_multiplier" must be a positive number, got {mult!r}', key=key)
    return MeshInfo(MULTILOD, sharding, int(bits), transform, float(mult))


# -- multilod manifest ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MultilodManifest:
    """A decoded ``neuroglancer_multilod_draco`` manifest (see the module docstring for the layout)."""

    chunk_shape: npt.NDArray[np.float32]  # (3,)
    grid_origin: npt.NDArray[np.float32]  # (3,)
    lod_scales: npt.NDArray[np.float32]  # (num_lods,)
    vertex_offsets: npt.NDArray[np.float32]  # (num_lods, 3)
    fragment_positions: tuple[npt.NDArray[np.uint32], ...]  # per lod: (num_fragments, 3)
    fragment_sizes: tuple[npt.NDArray[np.uint64], ...]  # per lod: (num_fragments,)

    @property
    def num_lods(self) -> int:
        return len(self.lod_scales)

    def lod_bytes(self) -> list[int]:
        return [int(s.sum()) for s in self.fragment_sizes]

    @property
    def data_bytes(self) -> int:
        return sum(self.lod_bytes())


def decode_manifest(data: bytes, *, key: str, offset: int = 0) -> MultilodManifest:
    """Decode a multilod manifest; a typed error names ``key`` and the byte offset of what is wrong."""
    fields = FieldReader(data, key, offset, "mesh manifest", IndexDecodeError)
    take = fields.take

    chunk_shape = take(3, "<f4", "chunk_shape").astype(np.float32)
    grid_origin = take(3, "<f4", "grid_origin").astype(np.float32)
    num_lods = int(take(1, "<u4", "num_lods")[0])
    if num_lods > MAX_LODS:
        raise IndexDecodeError(f"mesh manifest claims {num_lods} levels of detail (at most {MAX_LODS})",
                               key=key, offset=offset + 24)
    lod_scales = take(num_lods, "<f4", "lod_scales").astype(np.float32)
    vertex_offsets = take(num_lods * 3, "<f4", "vertex_offsets").astype(np.float32).reshape(num_lods, 3)
    counts_at = fields.pos
    counts = take(num_lods, "<u4", "num_fragments_per_lod").astype(np.int64)
    if counts.sum() > MAX_FRAGMENTS:
        raise IndexDecodeError(f"mesh manifest claims {int(counts.sum())} fragments (at most {MAX_FRAGMENTS})",
                               key=key, offset=offset + counts_at)
    positions, sizes = [], []
    for lod, n in enumerate(counts.tolist()):
        positions.append(take(3 * n, "<u4", f"fragment_positions of lod {lod}").reshape(3, n).T.astype(np.uint32))
        sizes.append(take(n, "<u4", f"fragment_offsets of lod {lod}").astype(np.uint64))
    fields.check_end("field")
    if not (np.all(np.isfinite(chunk_shape)) and np.all(np.isfinite(grid_origin))
            and np.all(np.isfinite(vertex_offsets))):
        raise IndexDecodeError("mesh manifest holds a non-finite chunk_shape, grid_origin or vertex offset",
                               key=key, offset=offset)
    return MultilodManifest(chunk_shape, grid_origin, lod_scales, vertex_offsets, tuple(positions), tuple(sizes))


#: A Draco stream's header: magic, version, encoder type, method, flags (``draco/compression/decode.cc``).
DRACO_MAGIC = b"DRACO"
DRACO_HEADER_SIZE = 11
#: Draco bitstream major versions (1.x and 2.x: 2.2 is the current mesh version).
DRACO_MAJOR_VERSIONS = (1, 2)
#: Encoder type of a triangular mesh (0 is a point cloud, which a mesh fragment cannot be).
DRACO_TRIANGULAR_MESH = 1
#: Encoding methods: sequential, edgebreaker.
DRACO_METHODS = (0, 1)
#: The one header flag Draco defines: the stream holds metadata.
DRACO_METADATA_FLAG = 0x8000


def check_draco_header(data: bytes, *, key: str, offset: int) -> None:
    """Check a Draco fragment's header with Python before the Draco decoder (C++) reads the rest.

    A mesh fragment is a triangular mesh (encoder type 1) of a known bitstream version, method and
    flags; anything else (a point cloud, bytes of another format, a version from the future) is a
    :class:`ChunkDecodeError` naming the field's byte offset.
    """
    if len(data) < DRACO_HEADER_SIZE:
        raise ChunkDecodeError(f"Draco fragment of {len(data)} bytes is shorter than its {DRACO_HEADER_SIZE}-byte "
                               "header", key=key, offset=offset)
    if data[:5] != DRACO_MAGIC:
        raise ChunkDecodeError(f"Draco fragment does not start with {DRACO_MAGIC!r} (found {bytes(data[:5])!r})",
                               key=key, offset=offset)
    major, minor, kind, method = data[5], data[6], data[7], data[8]
    flags = int.from_bytes(data[9:11], "little")
    if major not in DRACO_MAJOR_VERSIONS:
        raise ChunkDecodeError(f"Draco bitstream version {major}.{minor} (this reader knows 1.x and 2.x)", key=key,
                               offset=offset + 5)
    if kind != DRACO_TRIANGULAR_MESH:
        raise ChunkDecodeError(f"Draco fragment of encoder type {kind}, not a triangular mesh (1)", key=key,
                               offset=offset + 7)
    if method not in DRACO_METHODS:
        raise ChunkDecodeError(f"Draco encoding method {method} (known: 0 sequential, 1 edgebreaker)", key=key,
                               offset=offset + 8)
    if flags & ~DRACO_METADATA_FLAG:
        raise ChunkDecodeError(f"Draco header flags {flags:#06x} hold bits Draco does not define", key=key,
                               offset=offset + 9)


def decode_draco_fragment(data: bytes, *, key: str, offset: int) -> tuple[F32, U32]:
    """Vertices (quantized integers, as floats) and faces of one Draco fragment.

    The header is checked before DracoPy (Draco's C++ decoder) sees the bytes; what it returns is
    checked after: finite vertices, triangles whose corners are vertices of the fragment.
    """
    import DracoPy

    check_draco_header(data, key=key, offset=offset)
    try:
        mesh = DracoPy.decode(bytes(data))
    except Exception as exc:  # DracoPy raises its own and ValueError/RuntimeError for bad bytes
        raise ChunkDecodeError(f"bad Draco mesh fragment ({exc})", key=key, offset=offset) from exc
    points = np.asarray(mesh.points, dtype=np.float32)
    faces = np.asarray(getattr(mesh, "faces", np.zeros((0, 3))), dtype=np.int64)
    if points.size % 3 or faces.size % 3:
        raise ChunkDecodeError(f"Draco fragment decoded to {points.size} coordinates and {faces.size} corners, "
                               "not whole 3-D vertices and triangles", key=key, offset=offset)
    points, faces = points.reshape(-1, 3), faces.reshape(-1, 3)
    if not np.isfinite(points).all():
        raise ChunkDecodeError("Draco fragment holds a vertex that is not a finite number", key=key, offset=offset)
    if faces.size and (faces.min() < 0 or faces.max() >= len(points)):
        raise ChunkDecodeError(f"Draco fragment face refers to vertex {int(faces.max())} of {len(points)}",
                               key=key, offset=offset)
    return points, faces.astype(np.uint32)


def dequantize(points: F32, manifest: MultilodManifest, lod: int, position: npt.NDArray[np.uint32],
               bits: int) -> npt.NDArray[np.float64]:
    """Quantized fragment positions → stored-model coordinates (the spec's formula)."""
    scale = manifest.chunk_shape.astype(np.float64) * float(2**lod)
    frac = points.astype(np.float64) / float(2**bits - 1)
    origin = manifest.grid_origin.astype(np.float64) + manifest.vertex_offsets[lod].astype(np.float64)
    out: npt.NDArray[np.float64] = origin + scale * (position.astype(np.float64) + frac)
    return out


def apply_transform(points: npt.NDArray[np.float64], transform: npt.NDArray[np.float64]) -> F32:
    """Stored-model → model coordinates by the 4x3 ``transform``."""
    out = points @ transform[:, :3].T + transform[:, 3]
    return out.astype(np.float32)


def decode_legacy_fragment(data: bytes, *, key: str, offset: int = 0) -> tuple[F32, U32]:
    """Vertices and faces of one legacy mesh fragment; typed errors for a truncated or inconsistent one."""
    if len(data) < 4:
        raise ChunkDecodeError(f"legacy mesh fragment of {len(data)} bytes has no vertex count", key=key, offset=offset)
    (nv,) = struct.unpack_from("<I", data, 0)
    end = 4 + 12 * nv
    if end > len(data):
        raise ChunkDecodeError(f"legacy mesh fragment claims {nv} vertices, needs {end} bytes, has {len(data)}",
                               key=key, offset=offset)
    rest = len(data) - end
    if rest % 12:
        raise ChunkDecodeError(f"legacy mesh fragment's triangle list is {rest} bytes, not a multiple of 12",
                               key=key, offset=offset + end)
    vertices = np.frombuffer(data, "<f4", 3 * nv, 4).reshape(nv, 3).astype(np.float32)
    faces = np.frombuffer(data, "<u4", rest // 4, end).reshape(-1, 3).astype(np.uint32)
    if faces.size and int(faces.max()) >= nv:
        bad = int(np.argmax(faces.max(axis=1) >= nv))
        raise ChunkDecodeError(f"legacy mesh triangle {bad} refers to vertex {int(faces[bad].max())} of {nv}",
                               key=key, offset=offset + end + 12 * bad)
    return vertices, faces


# -- sources ----------------------------------------------------------------------------------------


class MeshSource(Protocol):
    """What the viewer, the notebook API and the tests ask of a mesh directory."""

    info: MeshInfo
    prefix: str

    def mesh(self, segment_id: int, lod: int = 0) -> MeshData | None:
        """The segment's mesh (at ``lod``; ``-1`` the coarsest), ``None`` when the source has none."""
        ...

    def num_lods(self, segment_id: int) -> int:
        """Levels of detail stored for the segment (0 when the source has none)."""
        ...

    def segment_ids(self) -> list[int]:
        """Every segment id with a mesh (listing the directory, or every shard's minishard indexes)."""
        ...


class MultilodMeshSource(SegmentFiles[MeshInfo]):
    """A ``neuroglancer_multilod_draco`` directory, sharded or not."""

    file_kind = "a mesh file"

    def manifest(self, segment_id: int) -> tuple[MultilodManifest, int, str, ShardFile | None] | None:
        """The manifest, the byte offset its fragment data starts at, the key holding that data, the shard file."""
        if self.reader is not None:
            loc = self.reader.locate(segment_id)
            if not loc.present or loc.byte_range is None:
                return None
            start, end = loc.byte_range
            if end - start > MAX_MANIFEST_BYTES:
                raise IndexDecodeError(f"mesh manifest of segment {segment_id} is {end - start} bytes",
                                       key=loc.shard_file, offset=start)
            data = self.reader.read_chunk(segment_id)
            if data is None:
                return None
            manifest = decode_manifest(data, key=loc.shard_file, offset=start)
            data_start = start - manifest.data_bytes
            if data_start < self.info.sharding.shard_index_size:  # type: ignore[union-attr]
                raise IndexDecodeError(
                    f"mesh manifest of segment {segment_id} claims {manifest.data_bytes} fragment bytes before it, "
                    "more than the shard holds there", key=loc.shard_file, offset=start)
            file = self.reader.shard_file(loc.shard)
            return manifest, data_start, loc.shard_file, file
        found = self.read_file(f"{segment_id}.index", MAX_MANIFEST_BYTES)
        if found is None:
            return None
        data, where = found
        manifest = decode_manifest(data, key=where)
        return manifest, 0, join_key(self.prefix, str(segment_id)), None

    def num_lods(self, segment_id: int) -> int:
        found = self.manifest(segment_id)
        return 0 if found is None else found[0].num_lods

    def mesh(self, segment_id: int, lod: int = 0, *, clamp: bool = False) -> MeshData | None:
        """The segment's mesh at ``lod`` (``-1``: the coarsest; ``clamp``: a level past the segment's
        coarsest is read as its coarsest, for bodies whose supervoxels have different numbers of levels)."""
        found = self.manifest(segment_id)
        if found is None:
            return None
        manifest, data_start, data_key, file = found
        if manifest.num_lods == 0:
            return empty_mesh(segment_id, lod)
        if lod == -1 or (clamp and lod >= manifest.num_lods):
            lod = manifest.num_lods - 1
        if not 0 <= lod < manifest.num_lods:
            raise ArgumentError(f"lod {lod} out of range: segment {segment_id} has {manifest.num_lods} levels")
        lod_bytes = manifest.lod_bytes()
        start = data_start + sum(lod_bytes[:lod])
        size = lod_bytes[lod]
        if size > MAX_MESH_BYTES:
            raise IndexDecodeError(f"lod {lod} of segment {segment_id} claims {size} bytes", key=data_key, offset=start)
        if file is not None and self.reader is not None:
            blob = self.reader.read_file_range(file, start, start + size)
            where = data_key
        else:
            blob, where = self._unsharded_data(segment_id, manifest.data_bytes)
            blob = blob[start:start + size]
        if len(blob) < size:
            raise ChunkDecodeError(f"fragment data of segment {segment_id} lod {lod} truncated: {len(blob)} of "
                                   f"{size} bytes", key=where, offset=start + len(blob))
        transform = self.info.transform_matrix()
        parts = []
        at = 0
        positions, sizes = manifest.fragment_positions[lod], manifest.fragment_sizes[lod]
        for i in range(len(sizes)):
            n = int(sizes[i])
            if n == 0:  # an empty fragment: a child exists but this level has nothing here
                continue
            points, faces = decode_draco_fragment(blob[at:at + n], key=where, offset=start + at)
            at += n
            model = apply_transform(
                dequantize(points, manifest, lod, positions[i], self.info.vertex_quantization_bits), transform)
            parts.append(MeshData(segment_id, model, faces, lod))
        return concatenate_meshes(segment_id, parts, lod)

    def _unsharded_data(self, segment_id: int, expected: int) -> tuple[bytes, str]:
        found = self.read_file(str(segment_id), min(MAX_MESH_BYTES, expected + (1 << 16)))
        if found is None:
            if expected == 0:
                return b"", self.where(str(segment_id))
            raise ChunkDecodeError(f"segment {segment_id} has a manifest but no fragment data file",
                                   key=self.where(str(segment_id)))
        return found

    def id_of_name(self, name: str) -> int | None:
        for suffix in (".index.gz", ".index"):
            if name.endswith(suffix) and name[: -len(suffix)].isdigit():
                return int(name[: -len(suffix)])
        return None


class LegacyMeshSource(SegmentFiles[MeshInfo]):
    """A ``neuroglancer_legacy_mesh`` directory: ``<id>:0`` manifests + fragments, or sharded fragments."""

    file_kind = "a mesh file"

    def fragment_names(self, segment_id: int) -> list[str] | None:
        found = self.read_file(f"{segment_id}:0", MAX_MANIFEST_BYTES)
        if found is None:
            return None
        data, where = found
        doc = load_json(data, key=where)
        frags = doc.get("fragments") if isinstance(doc, Mapping) else None
        if not isinstance(frags, list) or not all(isinstance(f, str) for f in frags):
            raise MetadataError('legacy mesh manifest must be {"fragments": [names]}', key=where)
        for f in frags:
            if not f or f.startswith("/") or ".." in f.split("/") or "\\" in f:
                raise MetadataError(f"legacy mesh fragment name {f!r} leaves the mesh directory", key=where)
        return list(frags)

    def num_lods(self, segment_id: int) -> int:
        if self.reader is not None:
            return 1 if self.reader.locate(segment_id).present else 0
        return 0 if self.fragment_names(segment_id) is None else 1

    def mesh(self, segment_id: int, lod: int = 0) -> MeshData | None:
        if lod not in (0, -1):
            raise ArgumentError(f"legacy meshes have one level of detail; lod {lod} asked")
        transform = self.info.transform_matrix()
        if self.reader is not None:
            loc = self.reader.locate(segment_id)
            data = self.reader.read_chunk(segment_id)
            if data is None or loc.byte_range is None:
                return None
            v, f = decode_legacy_fragment(data, key=loc.shard_file, offset=loc.byte_range[0])
            return MeshData(segment_id, apply_transform(v.astype(np.float64), transform), f, 0)
        names = self.fragment_names(segment_id)
        if names is None:
            return None
        parts = []
        for name in names:
            found = self.read_file(name, MAX_MESH_BYTES)
            if found is None:
                raise ChunkDecodeError(f"fragment {name!r} listed by the manifest of segment {segment_id} is missing",
                                       key=self.where(f"{segment_id}:0"))
            data, where = found
            v, f = decode_legacy_fragment(data, key=where)
            parts.append(MeshData(segment_id, apply_transform(v.astype(np.float64), transform), f, 0))
        return concatenate_meshes(segment_id, parts, 0)

    def id_of_name(self, name: str) -> int | None:
        for suffix in (":0.gz", ":0"):
            if name.endswith(suffix) and name[: -len(suffix)].isdigit():
                return int(name[: -len(suffix)])
        return None


def open_mesh_source(store: ByteStore, prefix: str) -> MultilodMeshSource | LegacyMeshSource:
    """The mesh directory at ``prefix`` of ``store``, by its ``info`` (legacy when it has none)."""
    key = join_key(prefix, "info")
    raw = read_document(store, key)
    doc = None
    if raw is not None:
        loaded = load_json(raw, key=key)
        if not isinstance(loaded, Mapping):
            raise MetadataError(f"must be a JSON object, got {type(loaded).__name__}", key=key)
        doc = loaded
    info = parse_mesh_info(doc, key=key)
    if info.type == MULTILOD:
        return MultilodMeshSource(store, prefix, info)
    return LegacyMeshSource(store, prefix, info)


def mesh_source_of(dataset: Any) -> MultilodMeshSource | LegacyMeshSource | None:
    """The mesh source a precomputed dataset names: its volume ``info``'s ``mesh``, or itself when it is one."""
    doc = dataset.document
    if doc.get("@type") in (LEGACY, MULTILOD):
        return open_mesh_source(dataset.store, "")
    name = dataset.info.mesh_dir  # parsed: a name with "..", or absolute, was refused
    if name is None:
        return None
    return open_mesh_source(dataset.store, name)


def dump_manifest(manifest: MultilodManifest) -> bytes:
    """Encode a multilod manifest (the inverse of :func:`decode_manifest`)."""
    parts = [manifest.chunk_shape.astype("<f4").tobytes(), manifest.grid_origin.astype("<f4").tobytes(),
             struct.pack("<I", manifest.num_lods), manifest.lod_scales.astype("<f4").tobytes(),
             manifest.vertex_offsets.astype("<f4").tobytes(),
             np.asarray([len(s) for s in manifest.fragment_sizes], "<u4").tobytes()]
    for pos, sizes in zip(manifest.fragment_positions, manifest.fragment_sizes, strict=True):
        parts.append(np.ascontiguousarray(pos.T).astype("<u4").tobytes())
        parts.append(sizes.astype("<u4").tobytes())
    return b"".join(parts)


__all__ = [
    "LEGACY",
    "MULTILOD",
    "LegacyMeshSource",
    "MeshData",
    "MeshInfo",
    "MeshSource",
    "MultilodManifest",
    "MultilodMeshSource",
    "concatenate_meshes",
    "decode_legacy_fragment",
    "decode_manifest",
    "dump_manifest",
    "mesh_source_of",
    "open_mesh_source",
]
