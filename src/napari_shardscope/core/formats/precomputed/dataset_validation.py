"""Validation of a whole precomputed dataset: every shard or chunk file of each source, checked.

What :meth:`PrecomputedInspector.validate <.inspector.PrecomputedInspector.validate>` runs: the walk
over a dataset's sources (unreadable entries, files no reader would open, each shard file through
:func:`.validate.validate_shard_file`, each unsharded chunk file decoded to exactly its chunk); an
annotation collection goes to :mod:`.annotations.validate`. Split from :mod:`.inspector`, which
answers questions about the layout; this module reads every byte, and asks the inspector only for
its sources, readers and shard list (:class:`InspectedDataset`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Protocol

import numpy as np

from napari_shardscope.core.bytestore import ByteStore, read_bounded
from napari_shardscope.core.encoding import gunzip, unbrotli
from napari_shardscope.core.errors import ArgumentError, ChunkDecodeError, FormatError, StoreError
from napari_shardscope.core.formats.precomputed.annotations.info import AnnotationInfo
from napari_shardscope.core.formats.precomputed.annotations.reader import AnnotationSource
from napari_shardscope.core.formats.precomputed.annotations.validate import validate_annotations
from napari_shardscope.core.formats.precomputed.chunk_encoding import (
    BROTLI_SUFFIX,
    GZIP_SUFFIX,
    OWN_ENCODINGS,
    decode_chunk_encoding,
    max_chunk_bytes,
)
from napari_shardscope.core.formats.precomputed.info import PrecomputedInfo, ScaleInfo, parse_unsharded_chunk_name
from napari_shardscope.core.formats.precomputed.meshes import MULTILOD
from napari_shardscope.core.formats.precomputed.morton import decode_morton
from napari_shardscope.core.formats.precomputed.multilod_fragments import fragments_before
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.sources import Source
from napari_shardscope.core.formats.precomputed.validate import ChunkCheck, DataBefore, validate_shard_file
from napari_shardscope.core.formats.precomputed.volume import is_data_file_name
from napari_shardscope.core.formats.problem import Problem, unreadable_problems
from napari_shardscope.core.progress import Progress


class InspectedDataset(Protocol):
    """What the validation asks of the inspector: the store, the parsed ``info``, sources and readers."""

    store: ByteStore
    volume: PrecomputedInfo | None
    annotation_info: AnnotationInfo | None
    sources: list[Source]

    @property
    def annotations(self) -> AnnotationSource: ...

    def source(self, scale: str | None) -> Source: ...

    def reader(self, source: Source) -> ShardedReader: ...

    def shards_present(self, source: Source) -> list[int]: ...


def validate_dataset(ins: InspectedDataset, scale: str | None = None,
                     progress: Progress | None = None) -> Iterator[Problem]:
    """Check every shard file of one scale (or all): see :mod:`.validate` for the checks.

    An annotation collection decodes every record of every index and, checked whole, cross-checks
    its indexes (:mod:`.annotations.validate`).
    """
    if ins.annotation_info is not None:
        index = None if scale is None else ins.source(scale).name
        yield from validate_annotations(ins.annotations, index=index, progress=progress)
        return
    sources = [ins.source(scale)] if scale is not None else ins.sources
    for source in sources:
        # dangling links, link loops, FIFOs, sockets, and directories named like shard or chunk files
        unreadable, bad = unreadable_problems(ins.store, f"{source.prefix}/" if source.prefix else "",
                                              partial(is_data_file_name, source.sharding, source.scale),
                                              "shard" if source.sharding is not None else "chunk")
        yield from unreadable
        if source.sharding is None:
            yield from _validate_unsharded(ins, source, progress, bad)
            continue
        reader = ins.reader(source)
        try:
            shards = ins.shards_present(source)
        except FormatError as exc:
            yield Problem(exc.key or source.prefix, exc.message, exc.offset)
            continue
        yield from (p for p in _unexpected_files(ins, source) if p.key not in bad)
        check = _chunk_check(ins, source)
        before: DataBefore | None = fragments_before if source.info_type == MULTILOD else None
        for i, shard in enumerate(shards):
            if progress is not None:
                progress(i, len(shards), f"{source.name} shard {shard}")
            if reader.shard_key(shard) in bad or reader.shard_key(shard, "index") in bad:
                continue  # reported above
            try:
                file = reader.shard_file(shard)
            except FormatError as exc:  # replaced by a link or special file since the scan
                yield Problem(exc.key or reader.shard_key(shard), exc.message, exc.offset)
                continue
            if file is None:
                continue
            try:
                data = reader.read_whole_file(file)
            except FormatError as exc:  # larger than any valid shard: reported, not read
                yield Problem(exc.key or file.display_key, exc.message, exc.offset)
                continue
            yield from validate_shard_file(
                source.sharding, data, key=file.display_key, shard=shard, check_chunk=check, bounds=reader.bounds,
                data_before=before,
            )
        if progress is not None:
            progress(len(shards), len(shards), f"{source.name} done")

def _unexpected_files(ins: InspectedDataset, source: Source) -> Iterator[Problem]:
    """Files in a sharded directory that no reader would ever open (wrong name or number)."""
    from napari_shardscope.core.formats.precomputed.sharding import parse_shard_name

    if source.sharding is None:
        return
    prefix = f"{source.prefix}/" if source.prefix else ""
    try:
        keys = list(ins.store.list(prefix))
    except StoreError:
        return
    for key in keys:
        name = key[len(prefix) :]
        if "/" in name or name == "info" or not name.endswith((".shard", ".index", ".data")):
            continue
        if parse_shard_name(source.sharding, name) is None:
            yield Problem(key, f"file name is not a shard of this spec (shard_bits={source.sharding.shard_bits})")

def _chunk_check(ins: InspectedDataset, source: Source) -> ChunkCheck | None:
    """For volume scales: ids inside the grid, raw chunks of exactly the clipped size, and chunks in
    the encodings decoded here (compressed_segmentation, compresso) decoding to their chunk."""
    sc = source.scale
    if sc is None or ins.volume is None:
        return None
    bytes_per_voxel = ins.volume.bytes_per_voxel
    volume = ins.volume
    grid = sc.grid_shape

    def check(chunk_id: int, data: bytes) -> str | None:
        try:
            pos = decode_morton(np.asarray([chunk_id], dtype=np.uint64), grid)[0]
        except ArgumentError:
            return f"id is not the Morton code of a position in the {grid} chunk grid"
        if sc.encoding in OWN_ENCODINGS and sc.encoding != "raw":  # decoded here: the bytes must decode
            start, stop = sc.chunk_bounds(tuple(int(p) for p in pos))
            extent = (stop[0] - start[0], stop[1] - start[1], stop[2] - start[2])
            try:
                decode_chunk_encoding(data, volume, sc, extent, key=f"chunk {chunk_id}")
            except FormatError as exc:
                return exc.message
            return None
        if sc.encoding != "raw":
            return None
        expected = int(sc.chunk_voxels(pos)) * bytes_per_voxel
        if len(data) != expected:
            return f"raw chunk decodes to {len(data)} bytes, expected {expected}"
        return None

    return check

def _validate_unsharded(ins: InspectedDataset, source: Source, progress: Progress | None,
                        bad: frozenset[str] | set[str] = frozenset()) -> Iterator[Problem]:
    """Each chunk file: its name a chunk of the grid, and its bytes decoding to exactly that chunk.

    Chunks in the encodings we decode ourselves (raw, compressed_segmentation, compresso) are
    decoded; CloudVolume's ``NAME.gz`` and ``NAME.br`` files are decompressed first; other
    encodings (jpeg, png) are left to TensorStore.
    """
    sc = source.scale
    if sc is None or ins.volume is None:
        return
    prefix = f"{source.prefix}/"
    keys = [k for k in ins.store.list(prefix) if "/" not in k[len(prefix) :] and k not in bad]
    for i, key in enumerate(keys):
        if progress is not None and i % 256 == 0:
            progress(i, len(keys), f"{source.name} chunk files")
        name = key[len(prefix) :]
        stored_as = next((x for x in (GZIP_SUFFIX, BROTLI_SUFFIX) if name.endswith(x)), "")
        name = name[: len(name) - len(stored_as)]
        if parse_unsharded_chunk_name(name) is None:
            continue
        grid = sc.grid_position_of_chunk_name(name)
        if grid is None:
            yield Problem(key, "file name is not a chunk of this scale's grid")
            continue
        if sc.encoding not in OWN_ENCODINGS:
            continue
        problem = _check_chunk_file(ins, key, stored_as, sc, grid)
        if problem is not None:
            yield problem

def _check_chunk_file(ins: InspectedDataset, key: str, stored_as: str, sc: ScaleInfo,
                      grid: tuple[int, int, int]) -> Problem | None:
    assert ins.volume is not None
    start, stop = sc.chunk_bounds(grid)
    extent = (stop[0] - start[0], stop[1] - start[1], stop[2] - start[2])
    cap = max_chunk_bytes(ins.volume, extent)
    try:
        data = read_bounded(ins.store, key, cap, "a chunk file", ChunkDecodeError)
        if data is None:
            return Problem(key, "listed but could not be read")
        if stored_as == GZIP_SUFFIX:
            data = gunzip(data, key=key, offset=0, max_size=cap)
        elif stored_as == BROTLI_SUFFIX:
            data = unbrotli(data, key=key, offset=0, max_size=cap)
        decode_chunk_encoding(data, ins.volume, sc, extent, key=key)
    except FormatError as exc:
        return Problem(key, exc.message, exc.offset)
    return None
