"""The fragment bytes a sharded multi-resolution mesh entry owns before its manifest.

Neuroglancer's sharded ``neuroglancer_multilod_draco`` format stores a segment's fragments just
before its manifest and indexes only the manifest; the manifest lists the fragment sizes. So an
entry's bytes are the manifest's plus those sizes, and reading the manifest (tens of bytes) is the
only way to know them. ``inspect`` counts them (:func:`fragment_bytes`) and validation claims them
(:func:`fragments_before`, a :data:`~.validate.DataBefore`), so both live here rather than in either.
"""

from __future__ import annotations

from napari_shardscope.core.errors import IndexDecodeError
from napari_shardscope.core.formats.precomputed.meshes import MAX_MANIFEST_BYTES, decode_manifest
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader, ShardFile, decode_chunk


def fragment_bytes(reader: ShardedReader, file: ShardFile, segment_id: int, start: int, end: int) -> int:
    """The fragment bytes a sharded multilod entry owns before its manifest at ``[start, end)`` of ``file``.

    The format stores a segment's fragments just before its manifest and indexes only the manifest, so its
    bytes are the manifest's plus the sizes the manifest lists; reading the manifest (tens of bytes) is the
    only way to know them.
    """
    key = file.display_key
    if end - start > MAX_MANIFEST_BYTES:
        raise IndexDecodeError(f"mesh manifest of segment {segment_id} is {end - start} bytes (at most "
                               f"{MAX_MANIFEST_BYTES})", key=key, offset=start)
    data = reader.read_file_range(file, start, end)
    if len(data) < end - start:
        raise IndexDecodeError(f"mesh manifest of segment {segment_id} [{start}, {end}) is truncated", key=key,
                               offset=start + len(data))
    data = decode_chunk(reader.spec, reader.bounds, segment_id, data, key=key, offset=start)
    fragments = decode_manifest(data, key=key, offset=start).data_bytes
    if fragments > start - reader.spec.shard_index_size:
        raise IndexDecodeError(f"mesh manifest of segment {segment_id} claims {fragments} fragment bytes before "
                               "it, more than the shard holds there", key=key, offset=start)
    return fragments


def fragments_before(chunk_id: int, manifest: bytes, offset: int) -> int:
    """A sharded multilod mesh entry's fragment bytes, stored just before its manifest (the sizes it lists)."""
    return decode_manifest(manifest, key=f"mesh manifest of segment {chunk_id}", offset=offset).data_bytes
