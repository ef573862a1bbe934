"""Write sharded ``neuroglancer_multilod_draco`` mesh directories (one level of detail, one fragment per mesh).

A mesh is stored as the spec describes: a Draco fragment whose positions are integers in
``[0, 2**bits - 1]`` over a one-cell grid spanning the mesh's bounding box, and a manifest naming
that grid. In a shard, a segment's fragment bytes come immediately before its manifest, and the
minishard index points at the manifest only (Neuroglancer finds the fragments by subtracting their
sizes from the manifest's offset) — so the shard layout here differs from :mod:`.shard_writer`'s
one-blob-per-chunk, while the shard and minishard indexes are encoded by the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from napari_shardscope.core.bytestore import ByteStore, join_key
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.meshes import MULTILOD, MeshData, MultilodManifest, dump_manifest
from napari_shardscope.core.formats.precomputed.shard_index import encode_minishard_index, encode_shard_index
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids, format_shard_name

QUANTIZATION_BITS = 16


def encode_multilod_mesh(mesh: MeshData, bits: int = QUANTIZATION_BITS) -> tuple[bytes, bytes]:
    """``(fragment bytes, manifest bytes)`` of one mesh as a single-LOD, single-fragment multilod mesh.

    Positions are quantized to ``bits`` over the bounding box (so decoding is exact to
    ``extent / (2**bits - 1)``); vertices in x, y, z model units.
    """
    import DracoPy

    top = float(2**bits - 1)
    if len(mesh.faces) == 0:
        manifest = MultilodManifest(np.ones(3, np.float32), np.zeros(3, np.float32), np.ones(1, np.float32),
                                    np.zeros((1, 3), np.float32), (np.zeros((0, 3), np.uint32),),
                                    (np.zeros(0, np.uint64),))
        return b"", dump_manifest(manifest)
    v = mesh.vertices.astype(np.float64)
    lo = v.min(axis=0).astype(np.float32).astype(np.float64)
    extent = np.maximum(v.max(axis=0) - lo, 1e-3).astype(np.float32).astype(np.float64)
    q = np.clip(np.rint((v - lo) / extent * top), 0, top)
    fragment = DracoPy.encode(q.astype(np.float32), mesh.faces.astype(np.uint32), quantization_bits=bits,
                              quantization_range=top, quantization_origin=np.zeros(3), compression_level=7,
                              preserve_order=True)
    manifest = MultilodManifest(extent.astype(np.float32), lo.astype(np.float32), np.ones(1, np.float32),
                                np.zeros((1, 3), np.float32), (np.zeros((1, 3), np.uint32),),
                                (np.asarray([len(fragment)], np.uint64),))
    return bytes(fragment), dump_manifest(manifest)


def encode_mesh_shard(spec: ShardingSpec, meshes: Mapping[int, tuple[bytes, bytes]], *, shard: int) -> bytes:
    """One shard file: per minishard, each segment's fragments then its manifest, then the minishard index."""
    if spec.data_encoding != "raw":
        raise ArgumentError("multilod mesh shards need data_encoding raw (fragments are located by byte offset)")
    ids = np.asarray(sorted(meshes), dtype=np.uint64)
    a = assign_chunk_ids(spec, ids)
    if ids.size and (np.unique(a.shard).size != 1 or int(a.shard[0]) != shard):
        raise ArgumentError(f"meshes of one shard file must all hash to shard {shard}")
    pos = spec.shard_index_size
    body: list[bytes] = []
    starts = np.zeros(spec.num_minishards, dtype=np.uint64)
    ends = np.zeros(spec.num_minishards, dtype=np.uint64)
    for m in np.unique(a.minishard).tolist():
        sel = ids[a.minishard == m]
        c_starts, c_ends = [], []
        for cid in sel.tolist():
            fragments, manifest = meshes[int(cid)]
            body.append(fragments)
            pos += len(fragments)
            c_starts.append(pos)
            body.append(manifest)
            pos += len(manifest)
            c_ends.append(pos)
        index = encode_minishard_index(spec, sel, c_starts, c_ends)
        starts[m], ends[m] = pos, pos + len(index)
        body.append(index)
        pos += len(index)
    return encode_shard_index(spec, starts, ends) + b"".join(body)


def mesh_info(spec: ShardingSpec, transform: tuple[float, ...] | None = None) -> dict[str, Any]:
    """The ``info`` of a sharded multilod directory whose vertices are already in model units (nm)."""
    return {"@type": MULTILOD, "vertex_quantization_bits": QUANTIZATION_BITS,
            "transform": list(transform or (1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0)), "lod_scale_multiplier": 1.0,
            "sharding": spec.to_json()}


def write_multilod_sharded(store: ByteStore, prefix: str, spec: ShardingSpec,
                           meshes: Mapping[int, MeshData]) -> list[str]:
    """Write every shard for ``meshes`` (one atomic file each); returns the keys. ``info`` is the caller's."""
    encoded = {sid: encode_multilod_mesh(m) for sid, m in meshes.items()}
    ids = np.asarray(sorted(encoded), dtype=np.uint64)
    a = assign_chunk_ids(spec, ids)
    keys = []
    for shard in np.unique(a.shard).tolist():
        sel = ids[a.shard == shard].tolist()
        key = join_key(prefix, f"{format_shard_name(spec, int(shard))}.shard")
        store.write(key, encode_mesh_shard(spec, {int(i): encoded[int(i)] for i in sel}, shard=int(shard)))
        keys.append(key)
    return keys
