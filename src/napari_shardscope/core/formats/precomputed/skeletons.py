"""Read precomputed skeletons (``neuroglancer_skeletons``), sharded or not, through the byte store.

One segment's skeleton is ``uint32le num_vertices``, ``uint32le num_edges``,
``float32le[num_vertices][3]`` positions (stored-model space), ``uint32le[num_edges][2]`` edges,
then one ``[num_vertices][num_components]`` little-endian array per ``vertex_attributes`` entry of
the ``info``, in order. The ``info`` ``transform`` maps positions to model space (nm). Unsharded:
the file ``<id>`` (CloudVolume's local layout: ``<id>.gz``); sharded: the chunk of id ``<id>``,
found with the same shard reader the shard browser uses.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore import ByteStore, join_key, read_document
from napari_shardscope.core.errors import ChunkDecodeError, MetadataError
from napari_shardscope.core.formats.precomputed.meshes import parse_transform
from napari_shardscope.core.formats.precomputed.segment_files import MAX_SEGMENT_FILE_BYTES, FieldReader, SegmentFiles
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.json_document import load_json

SKELETONS = "neuroglancer_skeletons"
ATTRIBUTE_TYPES = ("float32", "int8", "uint8", "int16", "uint16", "int32", "uint32")


@dataclass(frozen=True)
class VertexAttribute:
    id: str
    data_type: str
    num_components: int


@dataclass(frozen=True)
class SkeletonInfo:
    sharding: ShardingSpec | None = None
    transform: tuple[float, ...] = (1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0)
    vertex_attributes: tuple[VertexAttribute, ...] = ()


@dataclass(frozen=True, eq=False)
class SkeletonData:
    """One segment's skeleton: ``vertices`` float32 ``(N, 3)`` x, y, z (nm), ``edges`` uint32 ``(E, 2)``."""

    segment_id: int
    vertices: npt.NDArray[np.float32]
    edges: npt.NDArray[np.uint32]
    attributes: Mapping[str, npt.NDArray[Any]] = field(default_factory=dict)


def parse_skeleton_info(doc: Mapping[str, Any], *, key: str) -> SkeletonInfo:
    if doc.get("@type") != SKELETONS:
        raise MetadataError(f'"@type" {doc.get("@type")!r} is not {SKELETONS!r}', key=key)
    sharding_doc = doc.get("sharding")
    sharding = None if sharding_doc is None else parse_sharding_spec(sharding_doc, key=key, where="sharding")
    attrs = []
    for i, a in enumerate(doc.get("vertex_attributes") or []):
        if (not isinstance(a, Mapping) or not isinstance(a.get("id"), str) or a.get("data_type") not in ATTRIBUTE_TYPES
                or not isinstance(a.get("num_components"), int) or isinstance(a.get("num_components"), bool)
                or not 1 <= a["num_components"] <= 1024):
            raise MetadataError(f"vertex_attributes[{i}] must have id, data_type in {ATTRIBUTE_TYPES} and "
                                f"num_components 1..1024, got {a!r}", key=key)
        attrs.append(VertexAttribute(a["id"], a["data_type"], a["num_components"]))
    return SkeletonInfo(sharding, parse_transform(doc.get("transform"), key=key), tuple(attrs))


def decode_skeleton(data: bytes, info: SkeletonInfo, segment_id: int, *, key: str, offset: int = 0) -> SkeletonData:
    """Decode one skeleton; a typed error names ``key`` and the byte offset where it breaks."""
    if len(data) < 8:
        raise ChunkDecodeError(f"skeleton of {len(data)} bytes has no header", key=key, offset=offset)
    nv, ne = struct.unpack_from("<II", data, 0)
    fields = FieldReader(data, key, offset, "skeleton", ChunkDecodeError, pos=8)
    take = fields.take

    vertices = take(3 * nv, "<f4", "vertex positions").reshape(nv, 3).astype(np.float64)
    edges_at = fields.pos
    edges = take(2 * ne, "<u4", "edges").reshape(ne, 2).astype(np.uint32)
    if edges.size and int(edges.max()) >= nv:
        bad = int(np.argmax(edges.max(axis=1) >= nv))
        raise ChunkDecodeError(f"skeleton edge {bad} refers to vertex {int(edges[bad].max())} of {nv}",
                               key=key, offset=offset + edges_at + 8 * bad)
    attrs = {}
    for a in info.vertex_attributes:
        values = take(nv * a.num_components, "<" + np.dtype(a.data_type).str[1:], f"attribute {a.id!r}")
        attrs[a.id] = values.reshape(nv, a.num_components).astype(a.data_type)
    fields.check_end("attribute")
    t = np.asarray(info.transform, dtype=np.float64).reshape(3, 4)
    model = (vertices @ t[:, :3].T + t[:, 3]).astype(np.float32)
    return SkeletonData(segment_id, model, edges, attrs)


class SkeletonSource(SegmentFiles[SkeletonInfo]):
    """A ``neuroglancer_skeletons`` directory."""

    file_kind = "a skeleton file"

    def skeleton(self, segment_id: int) -> SkeletonData | None:
        """The segment's skeleton, ``None`` when the source has none."""
        if self.reader is not None:
            loc = self.reader.locate(segment_id)
            data = self.reader.read_chunk(segment_id)
            if data is None or loc.byte_range is None:
                return None
            return decode_skeleton(data, self.info, segment_id, key=loc.shard_file, offset=loc.byte_range[0])
        found = self.read_file(str(segment_id), MAX_SEGMENT_FILE_BYTES)
        return None if found is None else decode_skeleton(found[0], self.info, segment_id, key=found[1])


def open_skeleton_source(store: ByteStore, prefix: str) -> SkeletonSource:
    key = join_key(prefix, "info")
    raw = read_document(store, key)
    if raw is None:
        raise MetadataError("skeleton directory has no info", key=key)
    doc = load_json(raw, key=key)
    if not isinstance(doc, Mapping):
        raise MetadataError(f"must be a JSON object, got {type(doc).__name__}", key=key)
    return SkeletonSource(store, prefix, parse_skeleton_info(doc, key=key))


def skeleton_source_of(dataset: Any) -> SkeletonSource | None:
    """The skeleton source a precomputed dataset names (``skeletons``), or itself when it is one.

    ``None`` when the volume names no skeleton directory, and for a mesh or annotation directory.
    """
    doc = dataset.document
    if doc.get("@type") == SKELETONS:
        return open_skeleton_source(dataset.store, "")
    if not dataset.is_volume:
        return None
    name = dataset.info.skeletons_dir  # parsed: a path leaving the dataset was refused
    if name is None:
        return None
    return open_skeleton_source(dataset.store, name)
