"""Shard index and minishard index: the two-level index of a precomputed shard file.

Shard file layout (spec, "Shard index format" / "Minishard index format"):

* bytes ``[0, 16 * 2**minishard_bits)``: the *shard index*, one ``(start, end)`` uint64le pair
  per minishard, relative to ``shard_index_end``, locating that minishard's encoded index;
* each *minishard index* decodes (``minishard_index_encoding``) to a ``[3, n]`` uint64le array:
  delta-encoded chunk ids, delta-encoded data offsets (relative to the end of the previous chunk,
  the first relative to ``shard_index_end``) and data sizes.

Decoding checks everything that makes an index unusable (length, ranges past the file, offsets
that overflow) and names the file and byte offset; ``validate`` adds the softer checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.encoding import DEFAULT_GZIP_LEVEL, MAX_DECODED_BYTES, decode_bytes, encode_bytes
from napari_shardscope.core.errors import ArgumentError, FormatError, IndexDecodeError
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec

U64 = npt.NDArray[np.uint64]

#: Bytes of one decoded minishard index entry (chunk id delta, offset delta, size: 3 x uint64).
ENTRY_BYTES = 24


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """Decoded shard index: absolute ``[start, end)`` of each minishard index in the shard file."""

    starts: U64
    ends: U64

    def minishard_range(self, minishard: int) -> tuple[int, int]:
        return int(self.starts[minishard]), int(self.ends[minishard])

    def nonempty_minishards(self) -> npt.NDArray[np.int64]:
        return np.flatnonzero(self.ends > self.starts)


@dataclass(frozen=True, eq=False)
class MinishardIndex:
    """Decoded minishard index: chunk ids and absolute ``[start, end)`` of their data."""

    chunk_ids: U64
    starts: U64
    ends: U64

    def __len__(self) -> int:
        return int(self.chunk_ids.size)

    @property
    def sizes(self) -> U64:
        return self.ends - self.starts

    def sorted_view(self) -> tuple[npt.NDArray[np.intp], U64]:
        """``(sorter, ids[sorter])``: ids are sorted when written to spec, but other writers may not."""
        cached = self.__dict__.get("_sorted")
        if cached is None:
            ids = self.chunk_ids
            if ids.size < 2 or bool(np.all(ids[1:] > ids[:-1])):
                cached = (np.arange(ids.size), ids)
            else:
                sorter = np.argsort(ids, kind="stable")
                cached = (sorter, ids[sorter])
            object.__setattr__(self, "_sorted", cached)
        return cached

    def find(self, chunk_id: int) -> int | None:
        """Position of ``chunk_id`` in the index (ids are sorted when written to spec), or ``None``."""
        ids = self.chunk_ids
        i = int(np.searchsorted(ids, np.uint64(chunk_id)))
        if i < ids.size and int(ids[i]) == chunk_id:
            return i
        # Tolerate unsorted indexes written by other tools: fall back to a scan.
        hits = np.flatnonzero(ids == np.uint64(chunk_id))
        return int(hits[0]) if hits.size else None


def decode_shard_index(data: bytes, spec: ShardingSpec, *, key: str, file_size: int | None = None) -> ShardIndex:
    """Decode the fixed-size shard index at the head of a shard file.

    Parameters
    ----------
    data
        The first ``spec.shard_index_size`` bytes of the shard file (fewer means truncated).
    spec
        The sharding spec (gives the number of minishards).
    key
        The shard file, for error messages.
    file_size
        When known, ranges reaching past it are reported as errors.
    """
    size = spec.shard_index_size
    if len(data) < size:
        raise IndexDecodeError(f"shard index truncated: {len(data)} of {size} bytes", key=key, offset=len(data))
    pairs = np.frombuffer(data, dtype="<u8", count=2 * spec.num_minishards).reshape(-1, 2).astype(np.uint64)
    rel_start, rel_end = pairs[:, 0], pairs[:, 1]
    bad = np.flatnonzero(rel_end < rel_start)
    if bad.size:
        m = int(bad[0])
        raise IndexDecodeError(
            f"minishard {m} index range ends before it starts ({int(rel_start[m])} > {int(rel_end[m])})",
            key=key,
            offset=16 * m,
        )
    limit = np.uint64((1 << 64) - 1 - size)
    over = np.flatnonzero(rel_end > limit)
    if over.size:
        m = int(over[0])
        raise IndexDecodeError(f"minishard {m} index offset {int(rel_end[m])} overflows", key=key, offset=16 * m)
    starts = rel_start + np.uint64(size)
    ends = rel_end + np.uint64(size)
    if file_size is not None:
        past = np.flatnonzero((ends > np.uint64(file_size)) & (ends > starts))
        if past.size:
            m = int(past[0])
            raise IndexDecodeError(
                f"minishard {m} index range [{int(starts[m])}, {int(ends[m])}) runs past the end of the "
                f"{file_size}-byte file",
                key=key,
                offset=16 * m,
            )
    return ShardIndex(starts, ends)


def encode_shard_index(spec: ShardingSpec, starts: npt.ArrayLike, ends: npt.ArrayLike) -> bytes:
    """Encode absolute minishard-index ranges as a shard index (inverse of :func:`decode_shard_index`)."""
    s = np.asarray(starts, dtype=np.uint64)
    e = np.asarray(ends, dtype=np.uint64)
    if s.shape != (spec.num_minishards,) or e.shape != s.shape:
        raise ArgumentError(f"need {spec.num_minishards} start/end pairs, got {s.shape} and {e.shape}")
    base = np.uint64(spec.shard_index_size)
    empty = e == s
    if np.any(~empty & ((s < base) | (e < s))):
        raise ArgumentError("minishard index ranges must lie after the shard index and not be reversed")
    rel_s = np.where(empty, np.uint64(0), s - base)
    rel_e = np.where(empty, np.uint64(0), e - base)
    return np.stack([rel_s, rel_e], axis=1).astype("<u8").tobytes()


def decode_minishard_index(
    data: bytes,
    spec: ShardingSpec,
    *,
    key: str,
    offset: int,
    file_size: int | None = None,
    max_entries: int | None = None,
) -> MinishardIndex:
    """Decode one (encoded) minishard index.

    Parameters
    ----------
    data
        The encoded bytes, as stored at ``offset`` in the shard file.
    spec
        Gives ``minishard_index_encoding`` and ``shard_index_end``.
    key, offset
        Where the bytes are stored, for error messages.
    file_size
        When known, chunk ranges past it are reported.
    max_entries
        The most chunks the index can list (a volume scale's grid size); decoding stops, with an
        error, before inflating more than ``24 * max_entries`` bytes.
    """
    raw = _inflate_minishard_index(data, spec, key=key, offset=offset, max_entries=max_entries)
    n = len(raw) // 24
    arr = np.frombuffer(raw, dtype="<u8").reshape(3, n)  # read only: every result below is a new array
    with np.errstate(over="ignore"):
        ids = np.cumsum(arr[0], dtype=np.uint64)
        # start_i = base + sum(delta[:i+1]) + sum(size[:i])
        steps = arr[1].astype(np.uint64)
        steps[1:] += arr[2][:-1]
        starts = np.cumsum(steps, dtype=np.uint64) + np.uint64(spec.shard_index_size)
        ends = starts + arr[2]
    # Every offset is a partial sum of the non-negative deltas and sizes: when their total (summed in
    # float64, off by far less than the margin) stays below 2**63, none wrapped, and the ends never
    # decrease, so the last one is the largest. Otherwise the exact checks find the entry.
    small = bool(n) and float(arr[1:].sum(dtype=np.float64)) + spec.shard_index_size < 2.0**63
    if n and not small:
        _check_no_overflow(arr, starts, ends, spec, key=key, offset=offset)
    if file_size is not None and n and (not small or int(ends[-1]) > file_size):
        past = np.flatnonzero(ends > np.uint64(file_size))
        if past.size:
            i = int(past[0])
            raise IndexDecodeError(
                f"chunk {int(ids[i])} data [{int(starts[i])}, {int(ends[i])}) runs past the end of the "
                f"{file_size}-byte file",
                key=key,
                offset=offset,
            )
    return MinishardIndex(ids, starts, ends)


def _inflate_minishard_index(data: bytes, spec: ShardingSpec, *, key: str, offset: int,
                             max_entries: int | None) -> bytes:
    """The decoded entries of one minishard index (a whole number of 24-byte entries), capped by ``max_entries``."""
    cap = MAX_DECODED_BYTES if max_entries is None else min(MAX_DECODED_BYTES, ENTRY_BYTES * max_entries)
    raw = decode_bytes(
        data, spec.minishard_index_encoding, key=key, offset=offset, max_size=cap, error=IndexDecodeError
    )
    if len(raw) % 24:
        raise IndexDecodeError(
            f"minishard index decodes to {len(raw)} bytes, not a multiple of 24", key=key, offset=offset
        )
    return raw


def decode_minishard_indexes(
    parts: Sequence[tuple[bytes, int]],
    spec: ShardingSpec,
    *,
    key: str,
    file_size: int | None = None,
    max_entries: int | None = None,
) -> list[MinishardIndex | FormatError]:
    """:func:`decode_minishard_index` of each ``(data, offset)`` of one shard file: each index, or its error.

    Why: ``inspect`` decodes every minishard index of every shard, and for small indexes the numpy
    calls, not the arithmetic, are the cost (about 12 us each, 256 per 16-shard inspect). The
    entries of all parts are summed in one pass; a part whose offsets could wrap past 2**64 or run
    past ``file_size`` (checked as in :func:`decode_minishard_index`) is decoded on its own, so the
    answers and errors are exactly that function's.
    """
    out: list[MinishardIndex | FormatError | None] = [None] * len(parts)
    batch: list[tuple[int, npt.NDArray[np.uint64]]] = []
    for i, (data, offset) in enumerate(parts):
        try:
            raw = _inflate_minishard_index(data, spec, key=key, offset=offset, max_entries=max_entries)
        except FormatError as exc:
            out[i] = exc
            continue
        if len(raw) >= 24:
            batch.append((i, np.frombuffer(raw, dtype="<u8").reshape(3, len(raw) // 24)))
    if batch:
        counts = np.array([a.shape[1] for _, a in batch], dtype=np.intp)
        ends_at = np.cumsum(counts)
        begins = ends_at - counts
        entries = np.concatenate([a for _, a in batch], axis=1)
        with np.errstate(over="ignore"):
            ids_sum = np.cumsum(entries[0], dtype=np.uint64)
            steps = entries[1].astype(np.uint64)
            steps[1:] += entries[2][:-1]
            steps[begins] = entries[1][begins]  # a part's first start adds no size of the part before
            pos_sum = np.cumsum(steps, dtype=np.uint64)
            zero = np.zeros(1, dtype=np.uint64)
            ids = ids_sum - np.repeat(np.concatenate([zero, ids_sum[ends_at[:-1] - 1]]), counts)
            starts = pos_sum - np.repeat(np.concatenate([zero, pos_sum[ends_at[:-1] - 1]]), counts) \
                + np.uint64(spec.shard_index_size)
            ends = starts + entries[2]
        totals = np.add.reduceat(entries[1].astype(np.float64) + entries[2].astype(np.float64), begins)
        small = totals + spec.shard_index_size < 2.0**63  # see decode_minishard_index
        fits = small if file_size is None else small & (ends[ends_at - 1] <= np.uint64(file_size))
        for j, (i, _) in enumerate(batch):
            if fits[j]:
                a, b = int(begins[j]), int(ends_at[j])
                out[i] = MinishardIndex(ids[a:b], starts[a:b], ends[a:b])
    for i, value in enumerate(out):
        if value is None:  # empty, or a part for the exact checks
            data, offset = parts[i]
            try:
                out[i] = decode_minishard_index(data, spec, key=key, offset=offset, file_size=file_size,
                                                max_entries=max_entries)
            except FormatError as exc:
                out[i] = exc
    return [v for v in out if v is not None]


def _check_no_overflow(arr: U64, starts: U64, ends: U64, spec: ShardingSpec, *, key: str, offset: int) -> None:
    """Data offsets are sums of non-negative terms: a decrease means one wrapped past 2**64.

    (Chunk ids are summed modulo 2**64 like every reader does; unsorted ids are a ``validate``
    finding, not a decoding failure.)
    """
    if int(arr[1][0]) + spec.shard_index_size >= 1 << 64:
        raise IndexDecodeError("chunk data offset at entry 0 overflows uint64", key=key, offset=offset)
    prev_end = np.concatenate([starts[:1], ends[:-1]])
    wrapped = np.flatnonzero((starts < prev_end) | (ends < starts))
    if wrapped.size:
        raise IndexDecodeError(f"chunk data offset at entry {int(wrapped[0])} overflows uint64", key=key, offset=offset)


def encode_minishard_index(
    spec: ShardingSpec,
    chunk_ids: npt.ArrayLike,
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    level: int = DEFAULT_GZIP_LEVEL,
) -> bytes:
    """Encode a minishard index (then ``minishard_index_encoding``); inverse of the decoder.

    Entries must be in storage order with non-decreasing starts (each chunk after the previous
    one's end), as the delta encoding of offsets requires; ids must be strictly increasing.
    """
    ids = np.asarray(chunk_ids, dtype=np.uint64)
    s = np.asarray(starts, dtype=np.uint64)
    e = np.asarray(ends, dtype=np.uint64)
    if not ids.shape == s.shape == e.shape or ids.ndim != 1:
        raise ArgumentError("chunk_ids, starts and ends must be 1-D arrays of one length")
    if ids.size:
        if np.any(ids[1:] <= ids[:-1]):
            raise ArgumentError("chunk ids of a minishard must be strictly increasing")
        if np.any(e < s) or int(s[0]) < spec.shard_index_size or np.any(s[1:] < e[:-1]):
            raise ArgumentError("chunk data must follow the shard index, in order and without overlap")
    arr = np.empty((3, ids.size), dtype="<u8")
    arr[0] = np.diff(ids, prepend=np.uint64(0))
    prev_end = np.concatenate([[np.uint64(spec.shard_index_size)], e[:-1]]).astype(np.uint64)
    arr[1] = s - prev_end
    arr[2] = e - s
    return encode_bytes(arr.tobytes(), spec.minishard_index_encoding, level)
