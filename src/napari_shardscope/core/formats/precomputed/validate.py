"""Integrity checks of precomputed shard files.

Decoding (``shard_index``) rejects what makes an index unusable; validation goes further and
reports everything a writer can get wrong while the file still half-works: overlapping ranges,
unsorted or duplicate ids, ids stored in the wrong shard or minishard (a hash or preshift mismatch
between writer and reader — the classic cause of "chunk missing" reports), undecodable data and raw
chunks of the wrong size, and bytes no index entry claims (prepended, appended or left behind: a
prepended block shifts every offset, so reads return other bytes or fill values). Every problem
names the file and the byte offset where it starts.

An index entry usually claims exactly the bytes it points at. A sharded
``neuroglancer_multilod_draco`` mesh source is the exception the format defines: the index points
at a segment's manifest only, and the segment's fragments are stored immediately before it (the
manifest lists their sizes; ``data_encoding`` applies to the manifest, never to the fragments).
For such a source the caller passes ``data_before``, which reads the decoded manifest and says how
many bytes before it the entry owns; those bytes are then claimed like any other region, so gaps,
overlaps and fragments reaching into the shard index are reported as for chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from napari_shardscope.core.encoding import decode_bytes
from napari_shardscope.core.errors import FormatError
from napari_shardscope.core.formats.precomputed.shard_index import decode_minishard_index, decode_shard_index
from napari_shardscope.core.formats.precomputed.shard_reader import DecodeBounds
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, assign_chunk_ids
from napari_shardscope.core.formats.problem import Problem

#: Given a chunk id and its decoded bytes, return a problem message or ``None`` when fine.
ChunkCheck = Callable[[int, bytes], str | None]
#: Given a chunk id, its decoded bytes and where they are stored, the number of bytes just before them that
#: the entry also owns (a multilod mesh's fragments); raises :class:`FormatError` when it cannot tell.
DataBefore = Callable[[int, bytes, int], int]


def validate_shard_file(
    spec: ShardingSpec,
    data: bytes,
    *,
    key: str,
    shard: int,
    check_chunk: ChunkCheck | None = None,
    bounds: DecodeBounds | None = None,
    data_before: DataBefore | None = None,
) -> Iterator[Problem]:
    """Yield every problem of one (logical) shard file's bytes.

    Parameters
    ----------
    spec
        The sharding spec the file must follow.
    data
        The whole file (``.index`` + ``.data`` concatenated for the obsolete layout).
    key
        The file name used in the problems.
    shard
        The shard number the file name claims; every chunk id must hash to it.
    check_chunk
        Extra per-chunk check on decoded bytes (e.g. the expected size of a raw volume chunk).
    bounds
        Decoded sizes the metadata implies: indexes and chunks are never inflated past them.
    data_before
        For sources whose entries own bytes stored just before the data the index points at (sharded
        multilod meshes: the fragments before each manifest): how many (see the module docstring).
    """
    bounds = bounds or DecodeBounds()
    size = len(data)
    try:
        index = decode_shard_index(data[: spec.shard_index_size], spec, key=key)
    except FormatError as exc:
        yield Problem(key, exc.message, exc.offset)
        return

    # (start, end, what, offset-of-the-entry-describing-it) of every occupied region.
    regions: list[tuple[int, int, str]] = [(0, spec.shard_index_size, "shard index")]
    complete = True  # every index decoded, so ``regions`` holds every byte a reader would use
    for m in index.nonempty_minishards().tolist():
        start, end = index.minishard_range(m)
        if end > size:  # reported per entry, so the other minishards are still checked
            complete = False
            yield Problem(
                key, f"minishard {m} index range [{start}, {end}) runs past the end of the {size}-byte file", 16 * m
            )
            continue
        regions.append((start, end, f"minishard {m} index"))
        try:
            mi = decode_minishard_index(
                data[start:end], spec, key=key, offset=start, file_size=size, max_entries=bounds.max_chunks
            )
        except FormatError as exc:
            complete = False
            yield Problem(key, f"minishard {m}: {exc.message}", exc.offset)
            continue
        if len(mi) == 0:
            continue
        ids = mi.chunk_ids
        if np.any(ids[1:] <= ids[:-1]):
            bad = int(np.flatnonzero(ids[1:] <= ids[:-1])[0]) + 1
            kind = "duplicate" if ids[bad] == ids[bad - 1] else "unsorted"
            yield Problem(key, f"minishard {m} index has {kind} chunk id {int(ids[bad])} at entry {bad}", start)
        a = assign_chunk_ids(spec, ids)
        wrong = np.flatnonzero((a.shard != np.uint64(shard)) | (a.minishard != np.uint64(m)))
        for i in wrong[:16].tolist():
            yield Problem(
                key,
                f"chunk {int(ids[i])} hashes to shard {int(a.shard[i])} minishard {int(a.minishard[i])} but is "
                f"stored in shard {shard} minishard {m}",
                int(mi.starts[i]),
            )
        if wrong.size > 16:
            yield Problem(
                key, f"{wrong.size - 16} more chunks of minishard {m} are in the wrong shard/minishard", start
            )
        for i in range(len(mi)):
            c_start, c_end = int(mi.starts[i]), int(mi.ends[i])
            cid = int(ids[i])
            regions.append((c_start, c_end, f"chunk {cid}"))
            if spec.data_encoding == "raw":  # its size is check_chunk's to judge
                decoded = data[c_start:c_end]
            else:
                try:
                    decoded = decode_bytes(
                        data[c_start:c_end],
                        spec.data_encoding,
                        key=key,
                        offset=c_start,
                        max_size=bounds.max_chunk_bytes,
                    )
                except FormatError as exc:
                    yield Problem(key, f"chunk {cid}: {exc.message}", c_start)
                    continue
            if check_chunk is not None:
                message = check_chunk(cid, decoded)
                if message is not None:
                    yield Problem(key, f"chunk {cid}: {message}", c_start)
            if data_before is not None:
                problem, known = _claim_before(data_before, cid, decoded, c_start, spec.shard_index_size, key,
                                               regions)
                complete = complete and known  # an entry whose bytes are unknown leaves gaps unjudgeable
                if problem is not None:
                    yield problem
    yield from _overlaps(regions, key)
    if complete:
        yield from _unclaimed(regions, size, key)


def _claim_before(data_before: DataBefore, cid: int, decoded: bytes, start: int, index_size: int, key: str,
                  regions: list[tuple[int, int, str]]) -> tuple[Problem | None, bool]:
    """Add the bytes entry ``cid`` owns before ``start`` to ``regions``.

    Returns a problem (or ``None``) and whether the entry's bytes are known: not when its manifest does
    not decode, nor when it counts more fragment bytes than lie between the shard index and it.
    """
    try:
        n = data_before(cid, decoded, start)
    except FormatError as exc:
        return Problem(key, f"chunk {cid}: {exc.message}", exc.offset if exc.offset is not None else start), False
    if n <= 0:
        return None, True
    if start - n < index_size:
        return Problem(key, f"the manifest of segment {cid} counts {n} fragment bytes before it, but only "
                            f"{max(start - index_size, 0)} lie between the shard index and the manifest",
                       start), False
    regions.append((start - n, start, f"fragments of segment {cid}"))
    return None, True


def _unclaimed(regions: list[tuple[int, int, str]], size: int, key: str) -> Iterator[Problem]:
    """Report bytes of the file no index entry claims.

    Writers pack a shard with no gaps; unclaimed bytes mean the file was edited around its index
    (bytes prepended shift every offset, so a read returns other bytes or fill values).
    Only called when every index decoded: an undecodable one leaves its chunks unknown.
    """
    pos = 0
    gaps = 0
    for start, end, _ in sorted((s, e, what) for s, e, what in regions if e > s):
        if start > pos:
            gaps += 1
            if gaps <= 16:
                yield Problem(key, _gap_message(pos, start), pos)
        pos = max(pos, end)
    if size > pos:
        gaps += 1
        if gaps <= 16:
            yield Problem(key, _gap_message(pos, size), pos)
    if gaps > 16:
        yield Problem(key, f"{gaps - 16} more byte ranges belong to no index entry")


def _gap_message(start: int, end: int) -> str:
    return f"{end - start} bytes [{start}, {end}) belong to no index entry (bytes prepended, appended or left behind)"


def _overlaps(regions: list[tuple[int, int, str]], key: str) -> Iterator[Problem]:
    """Report regions of the file claimed twice (zero-length regions claim nothing)."""
    spans = sorted((s, e, what) for s, e, what in regions if e > s)
    reach_end, reach_what = -1, ""
    for start, end, what in spans:
        if start < reach_end:
            yield Problem(key, f"{what} [{start}, {end}) overlaps {reach_what}", start)
        if end > reach_end:
            reach_end, reach_what = end, what
