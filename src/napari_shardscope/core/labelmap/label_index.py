"""The label index: for each supervoxel, the scale-0 blocks that contain it and its voxel count there.

DVID keeps the same index (paper §2.5: "label indices describing the blocks intersected by each
label"): it turns "where is body B" from a scan of the volume into a few key reads, and it is what
``size``, ``bbox``, ``sparsevol`` and every split start from.

Two layers:

* the **base index** covers the immutable base volume. No base format says where a label lives,
  so it is built in one pass over scale 0 (threads, one overlay block at a time) the first time a
  labelmap needs it, and stored *unversioned*: it is the same for every version, and the root may
  have been committed long before. Next to the per-supervoxel entries, a summary (every base
  supervoxel with its total count) stays in memory: existence and size checks are a binary search.
* **per-version entries** (versioned keys) for supervoxels created by splits. A split retires its
  supervoxel in the body map, so a retired id needs no tombstone here: the map is the authority on
  which supervoxels exist, the index on where they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.encoding import inflate, zlib_compress
from napari_shardscope.core.errors import FormatError
from napari_shardscope.core.labelmap.geometry import BlockGrid, Box, Coord
from napari_shardscope.core.labelmap.keys import INDEX_META_KEY, INDEX_SUMMARY_KEY, base_index_key
from napari_shardscope.core.labelmap.runs import run_starts
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
ENTRY_DTYPE = np.dtype([("z", "<u4"), ("y", "<u4"), ("x", "<u4"), ("n", "<u8")])
FORMAT = 1


class IndexDecodeError(FormatError):
    """A stored label-index record cannot be decoded (a damaged store)."""


@dataclass(frozen=True)
class SvIndex:
    """Where one supervoxel is: scale-0 block positions (k, 3) and its voxel count in each (k,)."""

    blocks: I64
    counts: I64

    @classmethod
    def from_counts(cls, counts: Mapping[Coord, int]) -> SvIndex:
        items = sorted((c, n) for c, n in counts.items() if n > 0)
        blocks = np.array([c for c, _ in items], dtype=np.int64).reshape(-1, 3)
        return cls(blocks, np.array([n for _, n in items], dtype=np.int64))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def block_set(self) -> list[Coord]:
        return [(int(z), int(y), int(x)) for z, y, x in self.blocks]

    def to_bytes(self) -> bytes:
        rec = np.zeros(self.counts.size, dtype=ENTRY_DTYPE)
        rec["z"], rec["y"], rec["x"] = self.blocks[:, 0], self.blocks[:, 1], self.blocks[:, 2]
        rec["n"] = self.counts
        return rec.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, *, key: str = "label index") -> SvIndex:
        if len(data) % ENTRY_DTYPE.itemsize:
            raise IndexDecodeError(f"entry of {len(data)} bytes is not a whole number of records", key=key)
        rec = np.frombuffer(data, dtype=ENTRY_DTYPE)
        blocks = np.stack([rec["z"], rec["y"], rec["x"]], axis=1).astype(np.int64).reshape(-1, 3)
        return cls(blocks, rec["n"].astype(np.int64))


@dataclass(frozen=True)
class IndexSummary:
    """Every base supervoxel (sorted) with its total voxel count, and the largest id seen."""

    supervoxels: U64
    totals: U64
    max_id: int

    def contains(self, svs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        arr = np.asarray(svs, dtype=np.uint64)
        if not self.supervoxels.size:
            return np.zeros(arr.shape, dtype=bool)
        pos = np.minimum(np.searchsorted(self.supervoxels, arr), self.supervoxels.size - 1)
        hit: npt.NDArray[np.bool_] = self.supervoxels[pos] == arr
        return hit

    def totals_of(self, svs: npt.ArrayLike) -> U64:
        """Voxel counts of many supervoxels at once (0 for ids the base does not have)."""
        arr = np.asarray(svs, dtype=np.uint64)
        if not self.supervoxels.size:
            return np.zeros(arr.shape, dtype=np.uint64)
        pos = np.minimum(np.searchsorted(self.supervoxels, arr), self.supervoxels.size - 1)
        out: U64 = np.where(self.supervoxels[pos] == arr, self.totals[pos], np.uint64(0))
        return out

    def total(self, sv: int) -> int:
        """Voxel count of a base supervoxel (0 when the base has none)."""
        i = int(np.searchsorted(self.supervoxels, np.uint64(sv)))
        if i < self.supervoxels.size and int(self.supervoxels[i]) == sv:
            return int(self.totals[i])
        return 0

    def to_bytes(self) -> bytes:
        head = np.array([self.supervoxels.size, self.max_id], dtype="<u8").tobytes()
        return zlib_compress(head + self.supervoxels.astype("<u8").tobytes() + self.totals.astype("<u8").tobytes(), 1)

    @classmethod
    def from_bytes(cls, data: bytes) -> IndexSummary:
        try:
            # Bounded: the summary's size is only known once decoded, so the memory budget caps it.
            raw = inflate(data, key="index/summary", error=IndexDecodeError)
            n, max_id = (int(v) for v in np.frombuffer(raw, dtype="<u8", count=2))
            if len(raw) != 16 + 16 * n:
                raise ValueError(f"{len(raw)} bytes for {n} supervoxels")
            svs = np.frombuffer(raw, dtype="<u8", count=n, offset=16).astype(np.uint64)
            totals = np.frombuffer(raw, dtype="<u8", count=n, offset=16 + 8 * n).astype(np.uint64)
        except ValueError as exc:
            raise IndexDecodeError(f"label index summary is damaged ({exc})", key="index/summary") from exc
        return cls(svs, totals, max_id)


@dataclass(frozen=True)
class BaseIndex:
    """The result of one pass over the base: the summary and the per-supervoxel entries to store."""

    summary: IndexSummary
    labels: U64
    blocks: I64
    counts: I64
    voxels: int

    def entries(self) -> Iterator[tuple[bytes, bytes]]:
        """``(unversioned key, encoded SvIndex)`` for every supervoxel, ascending.

        Every entry is encoded at once (one record array, as :meth:`SvIndex.to_bytes` lays each out)
        and sliced: a base has millions of supervoxels, and a record array per entry cost most of the
        time of storing the index.
        """
        if not self.labels.size:
            return
        rec = np.zeros(self.labels.size, dtype=ENTRY_DTYPE)
        rec["z"], rec["y"], rec["x"] = self.blocks[:, 0], self.blocks[:, 1], self.blocks[:, 2]
        rec["n"] = self.counts
        raw = rec.tobytes()
        size = ENTRY_DTYPE.itemsize
        starts = np.flatnonzero(np.r_[True, self.labels[1:] != self.labels[:-1]])
        ends = np.r_[starts[1:], self.labels.size]
        for label, s, e in zip(self.labels[starts].tolist(), starts.tolist(), ends.tolist(), strict=True):
            yield base_index_key(label), raw[s * size:e * size]

    def meta(self) -> bytes:
        return json.dumps({"format": FORMAT, "supervoxels": int(self.summary.supervoxels.size),
                           "max_id": self.summary.max_id, "voxels": self.voxels}).encode()


BlockCounts = tuple[Coord, U64, I64]


def count_block(c: Coord, data: npt.NDArray[Any]) -> BlockCounts:
    """The labels of one scale-0 block and their voxel counts (0 is background, not indexed).

    Supervoxels are spatially coherent, so a block is a few runs of one label along x: the runs are
    found in one pass and only the run labels are sorted (weighted by their lengths), not every voxel
    — about half the time of ``np.unique`` on real segmentations. A block of mostly one-voxel runs
    (noise) is sorted voxel by voxel instead. Same labels (ascending) and counts either way.
    """
    flat = np.asarray(data).reshape(-1)
    if not flat.size:
        labels, n = flat[:0], np.zeros(0, dtype=np.int64)
    else:
        starts = run_starts(flat)
        if starts.size * 2 > flat.size:
            labels, n = np.unique(flat, return_counts=True)
        else:
            lengths = np.diff(np.r_[starts, flat.size])
            order = np.argsort(flat[starts], kind="stable")
            values, lengths = flat[starts][order], lengths[order]
            first = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
            labels, n = values[first], np.add.reduceat(lengths, first)
    keep = labels != 0
    return c, labels[keep].astype(np.uint64), n[keep].astype(np.int64)


def combine_counts(parts: Iterable[BlockCounts]) -> BaseIndex:
    """The index from per-block counts (any order in, one canonical result out).

    Parts are put in block order first, so a thread pool, a Dask cluster or a single loop that
    counted the same blocks all store byte-identical indexes.
    """
    ordered = sorted(parts, key=lambda p: p[0])
    if ordered:
        labels = np.concatenate([p[1] for p in ordered])
        counts = np.concatenate([p[2] for p in ordered])
        blocks = np.repeat(np.asarray([p[0] for p in ordered], dtype=np.int64).reshape(-1, 3),
                           [p[1].size for p in ordered], axis=0)
    else:
        labels, counts, blocks = np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    order = np.argsort(labels, kind="stable")  # blocks stay z-major within a label
    labels, counts, blocks = labels[order], counts[order], blocks[order].reshape(-1, 3)
    first = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]]) if labels.size else np.zeros(0, np.intp)
    svs = labels[first]
    totals = np.add.reduceat(counts, first).astype(np.uint64) if labels.size else np.zeros(0, np.uint64)
    summary = IndexSummary(svs.astype(np.uint64), totals, int(svs[-1]) if svs.size else 0)
    return BaseIndex(summary, labels, blocks, counts, int(counts.sum()))


def build_base_index(read_block: Callable[[Box], npt.NDArray[Any]], grid: BlockGrid, *, workers: int = 2,
                     progress: Progress | None = None) -> BaseIndex:
    """Index the base in one pass over its scale-0 blocks (``workers`` threads read and count).

    ``read_block(box)`` returns the base's voxels in ``box``. Label 0 is background and not indexed.
    ``progress(done, total, what)`` is called after each block (for a progress bar). For bases too large
    for one machine's reading, :func:`~napari_shardscope.core.labelmap.index_job.build_label_index`
    runs the same counting as a Dask job.
    """
    coords = list(grid.blocks_in(Box.of_shape(grid.shape)))

    def count(c: Coord) -> BlockCounts:
        return count_block(c, read_block(grid.box(c)))

    parts: list[BlockCounts] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for i, part in enumerate(pool.map(count, coords)):
            parts.append(part)
            if progress is not None:
                progress(i + 1, len(coords), "base blocks")
    return combine_counts(parts)


def store_base_index(repo: Repository, instance: Instance, built: BaseIndex) -> None:
    """Write the base index in one transaction: entries, summary, then meta (the marker of a complete index)."""

    def items() -> Iterator[tuple[bytes, bytes]]:
        yield from built.entries()
        yield INDEX_SUMMARY_KEY, built.summary.to_bytes()
        yield INDEX_META_KEY, built.meta()

    repo.put_unversioned(instance, items())
