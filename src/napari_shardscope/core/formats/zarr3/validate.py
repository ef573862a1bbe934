"""Integrity check of a Zarr v3 array's shard files.

Unlike locating, validation reads each shard file whole: proving that every inner chunk decodes
needs its bytes anyway, and one sequential read per shard is cheaper than one request per chunk.
Each problem is reported with the file and the byte offset where it sits:

* index truncated (file shorter than the index) — offset 0;
* ``crc32c`` of the index wrong — offset of the stored checksum;
* an index entry that is half-empty, runs past the end of the file or into the index — offset of
  that entry in the index;
* two inner chunks whose byte ranges overlap — offset of the first shared byte;
* an inner chunk that does not decode through its codec chain — offset of the chunk's first byte;
* a shard file whose key lies outside the array's shard grid — no offset;
* a directory where a shard file should be (every read of it returns fill values) — no offset.

Inner chunks are named by their position inside the shard, in the array's axis order.

After a failed checksum the entries are not checked further: nothing in that index can be trusted.
"""

from __future__ import annotations

from collections.abc import Iterator

from napari_shardscope.core.bytestore import read_bounded
from napari_shardscope.core.errors import FormatError, ShardscopeError
from napari_shardscope.core.formats.problem import Problem, unreadable_problems
from napari_shardscope.core.formats.zarr3.metadata import max_chunk_file_bytes
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.sharding import decode_shard_index, find_index_problems, index_span
from napari_shardscope.core.formats.zarr3.volume import chunk_key_test
from napari_shardscope.core.progress import Progress


def validate_array(reader: Zarr3ArrayReader, progress: Progress | None = None) -> Iterator[Problem]:
    """Check every shard file of the array; yield each problem found (nothing when clean)."""
    files = reader.list_shard_files()
    what = "shard" if reader.sharding is not None else "chunk"
    # dangling links, link loops, FIFOs, sockets, and directories where a shard or chunk file should be
    unreadable, bad = unreadable_problems(reader.store, f"{reader.path}/" if reader.path else "",
                                          chunk_key_test(reader.metadata), what)
    yield from unreadable
    total = len(files)
    for done, (key, shard) in enumerate(files):
        if progress is not None:
            progress(done, total, key)
        if key in bad:
            continue
        if not reader.in_grid(shard):
            yield Problem(
                key,
                f"shard key {list(shard)} is outside the array's shard grid {list(reader.shard_grid_shape)}",
            )
            continue
        try:
            data = read_bounded(reader.store, key, max_chunk_file_bytes(reader.metadata),
                                f"a {what} file of this array")
        except FormatError as exc:  # a (sparse) file far larger than the spec allows: reported, not read
            yield Problem(key, exc.message, exc.offset)
            continue
        if data is None:  # removed while we were checking
            continue
        yield from validate_shard_bytes(reader, key, data)
    if progress is not None:
        progress(total, total, "done")


def validate_shard_bytes(reader: Zarr3ArrayReader, key: str, data: bytes) -> Iterator[Problem]:
    """Check one shard file held in memory (index, ranges, every inner chunk's decoding)."""
    config = reader.sharding
    if config is None:
        yield from _check_decodes(reader, key, data, 0)
        return
    n = config.index_size
    if len(data) < n:
        yield Problem(key, f"shard index truncated: file has {len(data)} bytes, the index needs {n}", 0)
        return
    lo, hi = index_span(config, len(data))
    try:
        index = decode_shard_index(data[lo:hi], config, key=key, offset=lo)
    except ShardscopeError as exc:
        yield _problem(key, exc)
        return
    bad = set()
    for problem in find_index_problems(index, config, len(data), reader.array_position):
        yield Problem(key, problem.message, problem.offset)
        bad.add(problem.position)
    for position in index.stored_positions():
        if position in bad:
            continue
        rng = index.byte_range(position)
        assert rng is not None
        yield from _check_decodes(reader, key, data[rng[0] : rng[1]], rng[0], position)


def _check_decodes(
    reader: Zarr3ArrayReader, key: str, data: bytes, offset: int, position: tuple[int, ...] | None = None
) -> Iterator[Problem]:
    try:
        reader.decode_inner_chunk(data, key=key, offset=offset)
    except ShardscopeError as exc:
        where = f"inner chunk {list(reader.array_position(position))}: " if position is not None else ""
        problem = _problem(key, exc)
        yield Problem(key, where + problem.message, problem.offset if problem.offset is not None else offset)


def _problem(key: str, exc: ShardscopeError) -> Problem:
    message = getattr(exc, "message", str(exc))
    offset = getattr(exc, "offset", None)
    return Problem(key, message, offset)
