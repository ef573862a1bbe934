"""The label index: which scale-0 blocks hold each supervoxel and each base body, and how many voxels.

DVID keeps the same index (paper §2.5: "label indices describing the blocks intersected by each
label"): it turns "where is body B" from a scan of the volume into a few key reads, and it is what
``size``, ``bbox``, ``sparsevol`` and every split start from.

Two layers:

* the **base index** covers the immutable base volume. No base format says where a label lives,
  so it is counted once over the scale-0 blocks that hold stored chunks (the format's listing says
  which: a petavoxel extent with a few thousand chunks is a few thousand blocks, never its 10¹⁰
  declared ones) and stored *unversioned* as paged tables (:mod:`.paged`), read page by page:

  - ``index/t/sv`` — per supervoxel, its blocks and voxel count in each (rows sorted by supervoxel);
  - ``index/t/totals`` — per supervoxel its total voxel count (existence and size are a lookup);
  - ``index/t/body`` — per *base body* (the agglomeration's bodies) its blocks and voxel counts, summed
    over its supervoxels: DVID's label index. Without an agglomeration a body is its supervoxel and
    this is ``index/t/sv`` itself;
  - ``index/t/bodies`` — per base body its voxels, supervoxel count and block bounding box;
  - ``index/meta`` — counts and the largest id, written last: the marker of a complete index.

* **per-version entries** (versioned keys ``i`` + supervoxel) for supervoxels created by splits.
  A split retires its supervoxel in the body map, so a retired id needs no tombstone here: the map
  is the authority on which supervoxels exist, the index on where they are.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import FormatError, MetadataError
from napari_shardscope.core.json_document import load_json_object
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.geometry import BlockGrid, Box, Coord
from napari_shardscope.core.labelmap.keys import INDEX_META_KEY
from napari_shardscope.core.labelmap.paged import PagedTable, PagedTableWriter, ReadMany
from napari_shardscope.core.labelmap.runs import run_starts
from napari_shardscope.core.progress import Progress

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
Rows = npt.NDArray[Any]
#: An entry's record layout (a split-made supervoxel's versioned index value).
ENTRY_DTYPE = np.dtype([("z", "<u4"), ("y", "<u4"), ("x", "<u4"), ("n", "<u8")])
#: The voxel box of a label inside one block: ``lo`` and ``hi`` (exclusive) per axis, relative to the block.
BOX_FIELDS = (("z0", "<u2"), ("y0", "<u2"), ("x0", "<u2"), ("z1", "<u2"), ("y1", "<u2"), ("x1", "<u2"))
BOX_NAMES = tuple(name for name, _ in BOX_FIELDS)
#: A split-made supervoxel's entry with boxes: ``b"SSX2"`` then these records.
ENTRY_BOX_DTYPE = np.dtype([("z", "<u4"), ("y", "<u4"), ("x", "<u4"), ("n", "<u8"), *BOX_FIELDS])
_ENTRY_MAGIC = b"SSX2"
SV_DTYPE = np.dtype([("sv", "<u8"), ("z", "<u4"), ("y", "<u4"), ("x", "<u4"), ("n", "<u8"), *BOX_FIELDS])
TOTALS_DTYPE = np.dtype([("sv", "<u8"), ("n", "<u8")])
BODY_DTYPE = np.dtype([("body", "<u8"), ("z", "<u4"), ("y", "<u4"), ("x", "<u4"), ("n", "<u8"), *BOX_FIELDS])
BODIES_DTYPE = np.dtype([("body", "<u8"), ("voxels", "<u8"), ("svs", "<u8"),
                         ("z0", "<u4"), ("y0", "<u4"), ("x0", "<u4"), ("z1", "<u4"), ("y1", "<u4"), ("x1", "<u4")])
SV_TABLE = b"index/t/sv"
TOTALS_TABLE = b"index/t/totals"
BODY_TABLE = b"index/t/body"
BODIES_TABLE = b"index/t/bodies"
#: Stored index format (1: the blobs of the replay era, read only by the migration).
FORMAT = 2
#: Base-body summaries a reader keeps (the bodies edits name).
SUMMARY_CACHE = 1 << 16
_ABSENT = object()


class IndexDecodeError(FormatError):
    """A stored label-index record cannot be decoded (a damaged store)."""


@dataclass(frozen=True)
class SvIndex:
    """Where one supervoxel is: scale-0 block positions (k, 3), its voxel count in each (k,), and —
    when known — its voxel box inside each block (k, 6: lo z, y, x then hi z, y, x, relative to the block)."""

    blocks: I64
    counts: I64
    boxes: I64 | None = None

    @classmethod
    def from_counts(cls, counts: Mapping[Coord, int], boxes: Mapping[Coord, tuple[int, ...]] | None = None) -> SvIndex:
        items = sorted((c, n) for c, n in counts.items() if n > 0)
        blocks = np.array([c for c, _ in items], dtype=np.int64).reshape(-1, 3)
        box = None if boxes is None else np.array([boxes[c] for c, _ in items], dtype=np.int64).reshape(-1, 6)
        return cls(blocks, np.array([n for _, n in items], dtype=np.int64), box)

    @classmethod
    def from_rows(cls, rows: Rows, *, boxes: bool = True) -> SvIndex:
        blocks = np.stack([rows["z"], rows["y"], rows["x"]], axis=1).astype(np.int64).reshape(-1, 3)
        box = None
        if boxes and rows.dtype.names is not None and "z0" in rows.dtype.names:
            box = np.stack([rows[f] for f in BOX_NAMES], axis=1).astype(np.int64).reshape(-1, 6)
        return cls(blocks, rows["n"].astype(np.int64), box)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def block_set(self) -> list[Coord]:
        return [(int(z), int(y), int(x)) for z, y, x in self.blocks]

    def to_bytes(self) -> bytes:
        if self.boxes is None:  # the replay era's layout
            rec = np.zeros(self.counts.size, dtype=ENTRY_DTYPE)
        else:
            rec = np.zeros(self.counts.size, dtype=ENTRY_BOX_DTYPE)
            for i, f in enumerate(BOX_NAMES):
                rec[f] = self.boxes[:, i]
        rec["z"], rec["y"], rec["x"] = self.blocks[:, 0], self.blocks[:, 1], self.blocks[:, 2]
        rec["n"] = self.counts
        return rec.tobytes() if self.boxes is None else _ENTRY_MAGIC + rec.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, *, key: str = "label index") -> SvIndex:
        boxed = data[:4] == _ENTRY_MAGIC and (len(data) - 4) % ENTRY_BOX_DTYPE.itemsize == 0
        dtype = ENTRY_BOX_DTYPE if boxed else ENTRY_DTYPE
        body = data[4:] if boxed else data
        if len(body) % dtype.itemsize:
            raise IndexDecodeError(f"entry of {len(data)} bytes is not a whole number of records", key=key)
        rec = np.frombuffer(body, dtype=dtype)
        return cls.from_rows(rec)


@dataclass(frozen=True)
class IndexSummary:
    """Every base supervoxel (sorted) with its total voxel count, and the largest id seen.

    Materialised whole only for small bases and tests (:meth:`BaseIndexReader.summary`); the
    labelmap itself asks :class:`BaseIndexReader`, page by page.
    """

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
        return int(self.totals_of(np.asarray([sv], dtype=np.uint64))[0])


@dataclass(frozen=True)
class BaseIndex:
    """Counted rows of (a supervoxel-id range of) the base: ``(label, block, count[, box])`` sorted by label then
    block. ``boxes`` (k, 6): each label's voxel box inside the block (None when counted without them)."""

    summary: IndexSummary
    labels: U64
    blocks: I64
    counts: I64
    voxels: int
    boxes: npt.NDArray[np.integer[Any]] | None = None

    def sv_rows(self) -> Rows:
        rec = np.zeros(self.labels.size, dtype=SV_DTYPE)
        rec["sv"] = self.labels
        rec["z"], rec["y"], rec["x"] = self.blocks[:, 0], self.blocks[:, 1], self.blocks[:, 2]
        rec["n"] = self.counts
        if self.boxes is not None:
            for i, f in enumerate(BOX_NAMES):
                rec[f] = self.boxes[:, i]
        return rec

    def totals_rows(self) -> Rows:
        rec = np.zeros(self.summary.supervoxels.size, dtype=TOTALS_DTYPE)
        rec["sv"], rec["n"] = self.summary.supervoxels, self.summary.totals
        return rec

    def entry(self, sv: int) -> SvIndex | None:
        """One supervoxel's entry (tests, small bases)."""
        lo = int(np.searchsorted(self.labels, np.uint64(sv), side="left"))
        hi = int(np.searchsorted(self.labels, np.uint64(sv), side="right"))
        if hi <= lo:
            return None
        return SvIndex(self.blocks[lo:hi].reshape(-1, 3), self.counts[lo:hi],
                       None if self.boxes is None else self.boxes[lo:hi].astype(np.int64).reshape(-1, 6))


BlockCounts = tuple[Coord, U64, I64]
#: A block's labels, their voxel counts, and their voxel boxes in the block (k, 6).
BoxedCounts = tuple[Coord, U64, I64, I64]


def count_block_boxes(c: Coord, data: npt.NDArray[Any]) -> BoxedCounts:
    """:func:`count_block` plus each label's voxel box inside the block (lo z, y, x, hi z, y, x).

    The box is what makes a body's exact bounding box an index read (no voxel is read again): runs
    along x, cut at row ends, give each run's z, y and x extent; the per-label minima and maxima are
    one ``reduceat`` over the runs sorted by label.
    """
    arr = np.asarray(data)
    if arr.ndim != 3 or not arr.size:
        return c, np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros((0, 6), np.int64)
    _, ys, xs = arr.shape
    flat = np.ascontiguousarray(arr).reshape(-1)
    change = np.empty(flat.size, dtype=bool)
    change[0] = True
    np.not_equal(flat[1:], flat[:-1], out=change[1:])
    change[::xs] = True  # a run never wraps to the next row
    starts = np.flatnonzero(change)
    lengths = np.diff(np.r_[starts, flat.size])
    values = flat[starts]
    order = np.argsort(values, kind="stable")
    values, starts, lengths = values[order], starts[order], lengths[order]
    first = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    labels = values[first]
    counts = np.add.reduceat(lengths, first)
    row = starts // xs
    z, y, x0 = row // ys, row % ys, starts % xs
    boxes = np.stack([np.minimum.reduceat(z, first), np.minimum.reduceat(y, first), np.minimum.reduceat(x0, first),
                      np.maximum.reduceat(z, first) + 1, np.maximum.reduceat(y, first) + 1,
                      np.maximum.reduceat(x0 + lengths, first)], axis=1).astype(np.int64)
    keep = labels != 0
    return c, labels[keep].astype(np.uint64), counts[keep].astype(np.int64), boxes[keep].reshape(-1, 6)


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


def combine_counts(parts: Iterable[BlockCounts | BoxedCounts]) -> BaseIndex:
    """The index from per-block counts (any order in, one canonical result out).

    Parts are put in block order first, so a thread pool, a Dask cluster or a single loop that
    counted the same blocks all store byte-identical indexes. Boxes are kept when every part has them.
    """
    ordered = sorted(parts, key=lambda p: p[0])
    boxes: I64 | None = None
    if ordered:
        labels = np.concatenate([p[1] for p in ordered])
        counts = np.concatenate([p[2] for p in ordered])
        blocks = np.repeat(np.asarray([p[0] for p in ordered], dtype=np.int64).reshape(-1, 3),
                           [p[1].size for p in ordered], axis=0)
        if all(len(p) == 4 for p in ordered):
            # in-block offsets fit 16 bits (blocks are at most 65,535 voxels a side): 12 bytes a row, not 48
            boxes = np.concatenate([np.asarray(p[3], dtype=np.uint16).reshape(-1, 6) for p in ordered])  # type: ignore[misc]
    else:
        labels, counts, blocks = np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
        boxes = np.zeros((0, 6), np.uint16)
    order = np.argsort(labels, kind="stable")  # blocks stay z-major within a label
    labels, counts, blocks = labels[order], counts[order], blocks[order].reshape(-1, 3)
    if boxes is not None:
        boxes = boxes[order].reshape(-1, 6)
    first = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]]) if labels.size else np.zeros(0, np.intp)
    svs = labels[first]
    totals = np.add.reduceat(counts, first).astype(np.uint64) if labels.size else np.zeros(0, np.uint64)
    summary = IndexSummary(svs.astype(np.uint64), totals, int(svs[-1]) if svs.size else 0)
    return BaseIndex(summary, labels, blocks, counts, int(counts.sum()), boxes)


def build_base_index(read_block: Callable[[Box], npt.NDArray[Any]], grid: BlockGrid, *,
                     blocks: Sequence[Coord] | None = None, workers: int = 2,
                     progress: Progress | None = None) -> BaseIndex:
    """Index the base in one pass over scale-0 blocks (``workers`` threads read and count).

    ``blocks``: the blocks to count — those holding stored chunks (:mod:`.present`); default every
    block of the grid (small bases, tests). ``read_block(box)`` returns the base's voxels in ``box``.
    Label 0 is background and not indexed. ``progress(done, total, what)`` is called after each block. For
    bases too large for one machine's reading,
    :func:`~napari_shardscope.core.labelmap.index_job.build_label_index` runs the same counting as a Dask job.
    """
    coords = list(grid.blocks_in(Box.of_shape(grid.shape))) if blocks is None else sorted(blocks)

    def count(c: Coord) -> BoxedCounts:
        return count_block_boxes(c, read_block(grid.box(c)))

    parts: list[BoxedCounts] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for i, part in enumerate(pool.map(count, coords)):
            parts.append(part)
            if progress is not None:
                progress(i + 1, len(coords), "base blocks")
    return combine_counts(parts)


# -- storing ------------------------------------------------------------------------------------------


class _BodyRows:
    """Per-body rows gathered from supervoxel-ordered parts, then given back in body order.

    In memory, or — ``spill`` set — through body-range files on disk, so a cluster job's client
    never holds the whole table.
    """

    def __init__(self, bound: int, spill: bool, scratch: str | os.PathLike[str] | None) -> None:
        self._spill = spill
        self._rows: list[Rows] = []
        self._totals: list[Rows] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._edges = np.zeros(0, dtype=np.uint64)
        if spill:
            self._tmp = tempfile.TemporaryDirectory(prefix="shardscope-bodies-", dir=scratch)
            parts = 16
            self._edges = np.linspace(0, max(bound, 1) + 1, parts + 1)[1:-1].astype(np.uint64)
            self._files = [(Path(self._tmp.name) / f"rows-{i:03d}", Path(self._tmp.name) / f"svs-{i:03d}")
                           for i in range(parts)]

    def add(self, rows: Rows, totals: Rows) -> None:
        if not self._spill:
            self._rows.append(rows)
            self._totals.append(totals)
            return
        for arr, which in ((rows, 0), (totals, 1)):
            part = np.searchsorted(self._edges, arr["body"], side="right")
            order = np.argsort(part, kind="stable")
            cuts = np.searchsorted(part[order], np.arange(1, len(self._files)))
            for i, piece in enumerate(np.split(arr[order], cuts)):
                if piece.size:
                    with self._files[i][which].open("ab") as f:
                        f.write(piece.tobytes())

    def parts(self) -> Iterator[tuple[Rows, Rows]]:
        """``(block rows, supervoxel totals)`` per body range, ascending."""
        try:
            if not self._spill:
                yield _concat(self._rows, _BODY_ROW), _concat(self._totals, _BODY_SV)
                self._rows, self._totals = [], []
                return
            for rows_file, svs_file in self._files:
                rows = np.fromfile(rows_file, dtype=_BODY_ROW) if rows_file.exists() else np.zeros(0, _BODY_ROW)
                svs = np.fromfile(svs_file, dtype=_BODY_SV) if svs_file.exists() else np.zeros(0, _BODY_SV)
                yield rows, svs
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


_BODY_ROW = BODY_DTYPE
_BODY_SV = np.dtype([("body", "<u8"), ("sv", "<u8"), ("n", "<u8")])


def _concat(parts: list[Rows], dtype: np.dtype[Any]) -> Rows:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _reduce_body_rows(rows: Rows) -> Rows:
    """Rows summed per (body, block), sorted by body then block (z-major)."""
    if not rows.size:
        return np.zeros(0, dtype=BODY_DTYPE)
    order = np.lexsort((rows["x"], rows["y"], rows["z"], rows["body"]))
    r = rows[order]
    new = np.r_[True, (r["body"][1:] != r["body"][:-1]) | (r["z"][1:] != r["z"][:-1])
                | (r["y"][1:] != r["y"][:-1]) | (r["x"][1:] != r["x"][:-1])]
    first = np.flatnonzero(new)
    out = np.zeros(first.size, dtype=BODY_DTYPE)
    for f in ("body", "z", "y", "x"):
        out[f] = r[f][first]
    out["n"] = np.add.reduceat(r["n"], first)
    for f in BOX_NAMES[:3]:
        out[f] = np.minimum.reduceat(r[f], first)
    for f in BOX_NAMES[3:]:
        out[f] = np.maximum.reduceat(r[f], first)
    return out


def _body_summaries(rows: Rows, svs: Rows) -> Rows:
    """Per body: voxels, supervoxel count and block bounding box, from its block rows and supervoxel totals."""
    bodies = np.unique(svs["body"])
    out = np.zeros(bodies.size, dtype=BODIES_DTYPE)
    if not bodies.size:
        return out
    out["body"] = bodies
    order = np.argsort(svs["body"], kind="stable")
    sb = svs["body"][order]
    first = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]])
    out["svs"] = np.diff(np.r_[first, sb.size])
    out["voxels"] = np.add.reduceat(svs["n"][order], first)
    if rows.size:  # rows come sorted by body (one body's rows contiguous)
        rb = rows["body"]
        rfirst = np.flatnonzero(np.r_[True, rb[1:] != rb[:-1]])
        where = np.searchsorted(bodies, rb[rfirst])
        for f, lo, hi in (("z", "z0", "z1"), ("y", "y0", "y1"), ("x", "x0", "x1")):
            out[lo][where] = np.minimum.reduceat(rows[f], rfirst)
            out[hi][where] = np.maximum.reduceat(rows[f], rfirst) + 1
    return out


def index_items(parts: Iterable[BaseIndex], agglomeration: AgglomerationSource | None, *, bound: int = 0,
                spill: bool = False, scratch: str | os.PathLike[str] | None = None,
                blocks: int = 0, on_part: Callable[[BaseIndex], None] | None = None
                ) -> Iterator[tuple[bytes, bytes]]:
    """Every stored item of the base index from parts that come in ascending supervoxel ranges; meta last.

    The per-supervoxel tables stream from the parts; the per-body ones are built once every part is
    in (a body's supervoxels may lie in every range), in memory or, with ``spill``, through
    body-range files. ``bound``: the largest body id expected (for the ranges).
    """
    sv_writer = PagedTableWriter(SV_TABLE, SV_DTYPE, "sv")
    totals_writer = PagedTableWriter(TOTALS_TABLE, TOTALS_DTYPE, "sv", unique=True)
    body_writer = PagedTableWriter(BODY_TABLE, BODY_DTYPE, "body") if agglomeration is not None else None
    bodies_writer = PagedTableWriter(BODIES_TABLE, BODIES_DTYPE, "body", unique=True)
    gathered = _BodyRows(bound, spill, scratch) if agglomeration is not None else None
    n_svs = voxels = 0
    max_id = 0
    boxed = True
    for part in parts:
        boxed &= part.boxes is not None
        if on_part is not None:
            on_part(part)
        sv_rows = part.sv_rows()
        yield from sv_writer.add(sv_rows)
        yield from totals_writer.add(part.totals_rows())
        n_svs += int(part.summary.supervoxels.size)
        voxels += part.voxels
        max_id = max(max_id, part.summary.max_id)
        if gathered is None or agglomeration is None:  # a body is its supervoxel: summaries stream too
            yield from bodies_writer.add(_identity_summaries(part))
            continue
        body_of_label = agglomeration.lookup(part.labels)
        sv_rows = part.sv_rows()
        rows = np.zeros(part.labels.size, dtype=_BODY_ROW)
        rows["body"] = body_of_label
        for f in ("z", "y", "x", "n", *BOX_NAMES):
            rows[f] = sv_rows[f]
        totals = np.zeros(part.summary.supervoxels.size, dtype=_BODY_SV)
        totals["body"] = agglomeration.lookup(part.summary.supervoxels)
        totals["sv"], totals["n"] = part.summary.supervoxels, part.summary.totals
        gathered.add(rows, totals)
    yield from sv_writer.finish()
    yield from totals_writer.finish()
    n_bodies = n_svs
    if gathered is not None and body_writer is not None:
        n_bodies = 0
        for rows, totals in gathered.parts():
            reduced = _reduce_body_rows(rows)
            yield from body_writer.add(reduced)
            summaries = _body_summaries(reduced, totals)
            n_bodies += int(summaries.size)
            yield from bodies_writer.add(summaries)
        yield from body_writer.finish()
    yield from bodies_writer.finish()
    meta = {"format": FORMAT, "supervoxels": n_svs, "bodies": n_bodies, "max_id": max_id, "voxels": voxels,
            "blocks": blocks, "agglomeration": agglomeration is not None, "boxes": boxed}
    yield INDEX_META_KEY, json.dumps(meta).encode()


def _identity_summaries(part: BaseIndex) -> Rows:
    """Body summaries when every supervoxel is its own body (rows already sorted by supervoxel)."""
    rows = part.sv_rows()
    svs = np.zeros(part.summary.supervoxels.size, dtype=_BODY_SV)
    svs["body"] = svs["sv"] = part.summary.supervoxels
    svs["n"] = part.summary.totals
    body_rows = np.zeros(rows.size, dtype=_BODY_ROW)
    body_rows["body"] = rows["sv"]
    for f in ("z", "y", "x", "n", *BOX_NAMES):
        body_rows[f] = rows[f]
    return _body_summaries(body_rows, svs)


# -- reading ------------------------------------------------------------------------------------------


class BaseIndexReader:
    """The stored base index of one labelmap, read page by page (vectorised lookups)."""

    def __init__(self, read: ReadMany, meta: Mapping[str, Any]) -> None:
        self.meta = dict(meta)
        self.max_id = int(meta.get("max_id", 0))
        self.supervoxels = int(meta.get("supervoxels", 0))
        self.voxels = int(meta.get("voxels", 0))
        self.has_bodies = bool(meta.get("agglomeration", False))
        #: Whether rows carry each label's voxel box in its blocks (indexes converted from format 1 do not).
        self.has_boxes = bool(meta.get("boxes", False))
        self._sv = PagedTable(SV_TABLE, read, what="label index")
        self._totals = PagedTable(TOTALS_TABLE, read, what="label index totals")
        self._body = PagedTable(BODY_TABLE, read, what="body label index") if self.has_bodies else self._sv
        self._bodies = PagedTable(BODIES_TABLE, read, what="body label index summary")
        self._summary_cache: dict[int, Any] = {}

    def totals(self, svs: npt.ArrayLike) -> tuple[npt.NDArray[np.bool_], U64]:
        """Which base supervoxels exist among ``svs`` and their voxel counts (0 where absent)."""
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        found = np.zeros(arr.shape, dtype=bool)
        out = np.zeros(arr.shape, dtype=np.uint64)
        candidates = (arr != 0) & (arr <= np.uint64(self.max_id))
        if candidates.any():
            f, rows = self._totals.find(arr[candidates])
            found[candidates] = f
            out[candidates] = np.where(f, rows["n"], 0).astype(np.uint64)
        return found, out

    def contains(self, svs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        arr = np.asarray(svs, dtype=np.uint64)
        return self.totals(arr)[0].reshape(arr.shape)

    def sv_rows(self, svs: npt.ArrayLike) -> Rows:
        """Index rows (sv, z, y, x, n) of base supervoxels, sorted by supervoxel."""
        arr = np.asarray(svs, dtype=np.uint64).reshape(-1)
        arr = arr[(arr != 0) & (arr <= np.uint64(self.max_id))]
        return self._sv.select(arr)

    def body_rows(self, bodies: npt.ArrayLike) -> Rows:
        """Index rows of base bodies: ``body`` (the key), z, y, x, n — summed over the body's base supervoxels."""
        rows = self._body.select(bodies)
        if self.has_bodies:
            return rows
        out = np.zeros(rows.size, dtype=BODY_DTYPE)
        out["body"] = rows["sv"]
        for f in ("z", "y", "x", "n", *BOX_NAMES):
            out[f] = rows[f]
        return out

    def body_summaries(self, bodies: npt.ArrayLike) -> tuple[npt.NDArray[np.bool_], Rows]:
        """Voxels, supervoxel count and block bounding box of base bodies (found mask, rows).

        The few bodies an edit names are asked for again and again (each is a root without a record
        until edited): their rows are kept (the base never changes).
        """
        q = np.asarray(bodies, dtype=np.uint64).reshape(-1)
        if q.size > 16:
            return self._bodies.find(q)
        found = np.zeros(q.size, dtype=bool)
        out = np.zeros(q.size, dtype=BODIES_DTYPE)
        missing = []
        for i, b in enumerate(q.tolist()):
            hit = self._summary_cache.get(b)
            if hit is None:
                missing.append(i)
            elif hit is not _ABSENT:
                found[i], out[i] = True, hit
        if missing:
            f, rows = self._bodies.find(q[missing])
            for j, i in enumerate(missing):
                self._summary_cache[int(q[i])] = rows[j].copy() if f[j] else _ABSENT
                if f[j]:
                    found[i], out[i] = True, rows[j]
            while len(self._summary_cache) > SUMMARY_CACHE:
                self._summary_cache.pop(next(iter(self._summary_cache)))
        return found, out

    def entry(self, sv: int) -> SvIndex | None:
        rows = self.sv_rows(np.asarray([sv], dtype=np.uint64))
        return SvIndex.from_rows(rows, boxes=self.has_boxes) if rows.size else None

    def summary(self) -> IndexSummary:
        """Every base supervoxel and its total, materialised (O(supervoxels): small bases and tests)."""
        rows = self._totals.all_rows()
        return IndexSummary(rows["sv"].astype(np.uint64), rows["n"].astype(np.uint64), self.max_id)


def load_index_meta(read: ReadMany) -> dict[str, Any] | None:
    """The stored index metadata (None when no complete index is stored)."""
    raw = read([INDEX_META_KEY])[0]
    if raw is None:
        return None
    try:
        return load_json_object(raw, key="index/meta")
    except MetadataError as exc:
        raise IndexDecodeError(f"label index metadata is damaged ({exc})", key="index/meta") from exc
