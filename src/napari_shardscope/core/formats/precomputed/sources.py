"""The directories of chunks a precomputed dataset holds, and what the file names in each mean.

A precomputed directory is a multiscale volume (one :class:`Source` per scale), or a directory keyed
by segment or annotation id: skeletons, multi-resolution or legacy meshes, or an annotation
collection whose ``by_id``, relationship and spatial indexes are each a :class:`Source` (each may be
sharded). The CLI's ``--scale`` names one. Split from :mod:`.inspector` (which re-exports these
names): the layout backend and the dataset's validation walk the same sources, and which file of an
unsharded source holds a segment or annotation is a rule of the format, not of the inspector.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.bytestore import ByteStore, join_key, read_document
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.formats.precomputed.annotations.info import (
    AnnotationInfo,
    SpatialLevel,
    parse_annotation_info,
)
from napari_shardscope.core.formats.precomputed.annotations.spatial import parse_cell_key
from napari_shardscope.core.formats.precomputed.chunk_encoding import GZIP_SUFFIX
from napari_shardscope.core.formats.precomputed.info import ScaleInfo
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.json_document import load_json

VOLUME_TYPE = "neuroglancer_multiscale_volume"
SEGMENT_TYPES = ("neuroglancer_skeletons", "neuroglancer_multilod_draco", "neuroglancer_legacy_mesh")
ANNOTATION_TYPE = "neuroglancer_annotations_v1"

@dataclass(frozen=True)
class Source:
    """One directory of chunks: a volume scale, a segment-keyed dir or an annotation index."""

    name: str
    kind: str  # "volume" | "segment" | "annotation_by_id" | "annotation_relationship" | "annotation_spatial"
    prefix: str
    sharding: ShardingSpec | None
    scale: ScaleInfo | None = None
    info_type: str | None = None  # the "@type" of a segment-keyed directory's info
    level: SpatialLevel | None = None  # an annotation spatial index level
    level_index: int | None = None  # its position in ``info["spatial"]`` (0 is the coarsest)
    relationship: str | None = None  # an annotation relationship index's id


def _load_json(store: ByteStore, key: str) -> Any:
    data = read_document(store, key)
    if data is None:
        raise MetadataError("not found", key=key)
    return load_json(data, key=key)


def read_segment_sources(store: ByteStore, prefix: str, name: str, doc: Any = None) -> list[Source]:
    """Sources of a segment-id-keyed directory (skeletons, meshes or annotations) at ``prefix``.

    ``doc`` is the directory's decoded ``info`` when the caller has already read it.
    """
    key = join_key(prefix, "info")
    obj = _load_json(store, key) if doc is None else doc
    if not isinstance(obj, Mapping):
        raise MetadataError(f"must be a JSON object, got {type(obj).__name__}", key=key)
    type_at = obj.get("@type")

    def sharding(value: Any, where: str) -> ShardingSpec | None:
        return None if value is None else parse_sharding_spec(value, key=key, where=where)

    if type_at in SEGMENT_TYPES:
        return [Source(name, "segment", prefix, sharding(obj.get("sharding"), "sharding"), info_type=type_at)]
    if type_at == ANNOTATION_TYPE:
        return annotation_sources(parse_annotation_info(obj, key=key), prefix, name)
    raise MetadataError(f'"@type" {type_at!r} is not a precomputed volume, skeleton, mesh or annotation info', key=key)


def annotation_sources(info: AnnotationInfo, prefix: str, name: str) -> list[Source]:
    """The index directories of an annotation collection: ``by_id``, ``relationships/<id>``, ``spatial/<key>``."""
    out = [Source(join_key(name, "by_id"), "annotation_by_id", join_key(prefix, info.by_id.key), info.by_id.sharding)]
    for rel in info.relationships:
        out.append(Source(join_key(name, f"relationships/{rel.id}"), "annotation_relationship",
                          join_key(prefix, rel.key), rel.sharding, relationship=rel.id))
    for i, level in enumerate(info.spatial):
        out.append(Source(join_key(name, f"spatial/{level.key}"), "annotation_spatial", join_key(prefix, level.key),
                          level.sharding, level=level, level_index=i))
    return out


def annotation_file_fields(source: Source, name: str, *, sharded: bool = False) -> dict[str, Any]:
    """What an annotation index key says: the cell (an unsharded file name), annotation id or segment it holds."""
    stem = name.removesuffix(GZIP_SUFFIX)
    if source.level is not None:
        if sharded:
            return {}  # the cell is the grid position decoded from the Morton code
        cell = parse_cell_key(stem, source.level)
        return {"grid_position": list(cell)} if cell is not None else {}
    if source.kind in ("annotation_by_id", "annotation_relationship") and stem.isdigit() and int(stem) < 1 << 64:
        return {"annotation_id" if source.kind == "annotation_by_id" else "segment": int(stem)}
    return {}


def unsharded_segment_name(source: Source, segment_id: int) -> str:
    """The file an unsharded directory stores a segment's data (or its manifest) under.

    Skeletons: ``<id>``; multi-resolution meshes: the manifest ``<id>.index``; legacy meshes: the
    manifest ``<id>:0``; annotation ``by_id`` / relationship indexes: ``<id>``.
    """
    if source.info_type == "neuroglancer_multilod_draco":
        return f"{segment_id}.index"
    if source.info_type == "neuroglancer_legacy_mesh":
        return f"{segment_id}:0"
    return str(segment_id)
