"""Writing a base from its sites a piece at a time, in memory bounded by a piece, not by the table.

The input arrives in pieces (a Parquet row group, a block of CSV text, a batch of a precomputed
source): :meth:`BaseBuilder.add` checks nothing more than the piece needs, sorts it by labelmap
block and spills it (:mod:`.base_spill`). :meth:`BaseBuilder.finish` then merges, one key range at
a time, in the orders the tables need:

1. by **block** (and id): the ``spatial`` table is written as it goes; each block's supervoxels are
   read once, for the sites of that block; the sites go on, with their supervoxel, to
2. by **id**: duplicates are found (adjacent), the ``records`` table is written, and a synapse's two
   sites (ids ``2S + 1``, ``2S + 2``: one range always holds both) give its synapse index rows,
   summed within the range, spilled by supervoxel to
3. by **supervoxel**: the ``sites`` table (ids by supervoxel at import) and the ``synapses`` table
   (the index rows of the ranges summed again).

Each table is written by its own thread from a short queue (pyarrow compresses with the GIL
released while the next range is sorted); the spills' run files are written by one more thread
(:class:`~.base_spill.SpillWriter`, one run ahead), and the input's next piece is read and converted
by another (:func:`~.base_input.prefetched`), so the main thread only sorts and gathers.

Everything is written into a hidden directory beside
``base_dir`` and renamed into place at the end: a failure at any step — a bad row in the last
piece of a CSV — leaves no base, and no half of one. The tables are exactly those of the earlier
whole-table import (same rows, same order, same columns), so bases written by either read alike.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.base import MAX_BLOCKS, BaseConfig, BaseProperty
from napari_shardscope.core.annotation.base_order import (
    id_order,
    index_order,
    key_order,
    order_by,
    synapse_aggregates,
)
from napari_shardscope.core.annotation.base_position import codec_of, supervoxels_of_offsets
from napari_shardscope.core.annotation.base_spill import SAMPLE_EVERY, Columns, Spill, SpillWriter
from napari_shardscope.core.annotation.errors import AnnotationTableError
from napari_shardscope.core.errors import RefusedWriteError, UnsupportedFeatureError
from napari_shardscope.core.labelmap.version import LabelmapVersion
from napari_shardscope.core.tables import TableSummary, write_sorted_table
from napari_shardscope.core.tables.destination import TEMP_PREFIX

U64 = npt.NDArray[np.uint64]
#: Sites merged per key range (about 60 bytes each in memory while a range is sorted).
RANGE_SITES = 1 << 20
#: Chunks a table's writer thread may have queued (bounds the memory ahead of the writer).
QUEUE_CHUNKS = 2


@dataclass
class SiteChunk:
    """One piece of the input's sites: ids, (n, 3) int32 z, y, x voxels, and one array per property.

    A synapse piece's ids alternate pre (``2S + 1``) and post (``2S + 2``) and its properties hold one
    value per synapse (both sites carry it); a point piece's properties one per point.
    """

    ids: U64
    zyx: npt.NDArray[np.int32]
    properties: list[npt.NDArray[Any]]


class _TableThread:
    """One table written by a thread from a bounded queue of sorted ``(keys, columns)`` chunks."""

    _END = object()

    def __init__(self, url: str, key: str, unique: bool, options: dict[str, Any]) -> None:
        self.url = url
        self._queue: queue.Queue[Any] = queue.Queue(QUEUE_CHUNKS)
        self._summary: TableSummary | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, args=(key, unique, options), daemon=True,
                                        name=f"base-table-{Path(url).name}")
        self._thread.start()

    def _chunks(self) -> Iterator[tuple[U64, Columns]]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _run(self, key: str, unique: bool, options: dict[str, Any]) -> None:
        try:
            self._summary = write_sorted_table(self.url, self._chunks(), key=key, unique=unique, **options)
        except BaseException as exc:  # handed to the caller by close()
            self._error = exc
            while True:  # let a producer blocked on a full queue go on (it finds the error at its next put)
                try:
                    if self._queue.get_nowait() is self._END:
                        break
                except queue.Empty:
                    break

    def put(self, keys: U64, cols: Columns) -> None:
        self._offer((keys, cols))

    def _offer(self, item: Any) -> None:
        while self._thread.is_alive():
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
        self.close()  # the writer died: its error

    def end(self) -> None:
        """No more chunks: the writer finishes the table on its own while the caller goes on (no wait
        for it, unless its queue is full); :meth:`close` joins it."""
        if not self._ended:
            self._ended = True
            self._offer(self._END)

    def close(self) -> TableSummary:
        if not self._stopped:
            self._stopped = True
            if self._thread.is_alive() and not self._ended:
                self._queue.put(self._END)
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._summary is not None
        return self._summary

    def abort(self) -> None:
        if not self._stopped:
            self._stopped = True
            if self._thread.is_alive() and not self._ended:  # an ended table finishes (then is removed)
                self._queue.put(RuntimeError("the base import failed"))
            self._thread.join()


class BaseBuilder:
    """Builds a base's tables from :class:`SiteChunk` pieces (module docstring); :meth:`finish` commits."""

    def __init__(self, base_dir: str | os.PathLike[str], *, block: tuple[int, int, int],
                 shape: tuple[int, int, int], source: str, layout: str, properties: list[BaseProperty],
                 format: str = "parquet", overwrite: bool = False, labelmap: LabelmapVersion | None = None,
                 duplicate: Callable[[int], AnnotationTableError] | None = None,
                 range_sites: int = RANGE_SITES) -> None:
        self.grid = [-(-s // b) for s, b in zip(shape, block, strict=True)]
        if max(self.grid) > MAX_BLOCKS:
            raise UnsupportedFeatureError(f"a labelmap of {self.grid} blocks per axis",
                                          detail=f"a base indexes at most {MAX_BLOCKS} blocks per axis")
        self.root = Path(base_dir)
        if self.root.exists() and any(self.root.iterdir()) and not overwrite:
            raise RefusedWriteError(f"{self.root}: a base is already there; choose another base_dir or pass "
                                    "overwrite=True")
        self.block, self.shape, self.source, self.layout = block, shape, source, layout
        self.properties = properties
        self.format = format
        self.overwrite = overwrite
        self.labelmap = labelmap
        self.duplicate = duplicate
        self.range_sites = range_sites
        self.root.parent.mkdir(parents=True, exist_ok=True)
        self.temp = self.root.parent / f"{TEMP_PREFIX}{self.root.name}-{uuid.uuid4().hex[:12]}"
        self.temp.mkdir()
        self.tables = self.temp / "tables"
        self.tables.mkdir()
        self.sample = max(1, min(SAMPLE_EVERY, range_sites // 16))
        self.codec = codec_of(block, self.grid)
        #: sites per property value: a synapse's two sites share its properties (spilled once, repeated
        #: when its records are written)
        self.per_value = 2 if layout == "synapses" else 1
        self.spill_writer = SpillWriter()
        # by block: (block index, offset in the block, id), 16 bytes a site; the properties go by id apart
        self.by_block = Spill(self.temp / "spill", "lin", self.sample, self.spill_writer)
        self.values = Spill(self.temp / "spill" / "values", "id", self.sample, self.spill_writer)
        self.rows = 0
        self.max_id = 0
        self._threads: list[_TableThread] = []

    # -- pieces in ------------------------------------------------------------------------------------------
    def add(self, chunk: SiteChunk) -> None:
        """Sort one piece by labelmap block and spill it."""
        n = int(chunk.ids.size)
        if not n:
            return
        self.rows += n
        self.max_id = max(self.max_id, int(chunk.ids.max()))
        lin, off = self.codec.pack(chunk.zyx)
        order = key_order(lin)
        self.by_block.add({"lin": lin[order], "off": off[order], "id": chunk.ids[order]})
        if self.properties:  # once per synapse (the pre site's id is its key), sorted by that id
            keys = chunk.ids[::self.per_value]
            by_key = id_order(keys)
            vals: Columns = {"id": keys if by_key is None else keys[by_key]}
            for p, arr in zip(self.properties, chunk.properties, strict=True):
                vals[p.column] = arr if by_key is None else arr[by_key]
            self.values.add(vals)

    # -- the merges -----------------------------------------------------------------------------------------
    def _table(self, name: str, key: str, unique: bool) -> _TableThread:
        ext = ".parquet" if self.format == "parquet" else ".zarr"
        # lz4: a Parquet base is written 3x faster than with zstd, for a fifth more bytes; no dictionary
        # encoding: points, ids and scores are distinct values (it was half the CPU of the writes)
        options: dict[str, Any] = {"format": self.format, "overwrite": True}
        if self.format == "parquet":
            options.update(compression="lz4", dictionary=False)
        t = _TableThread(str(self.tables / f"{name}{ext}"), key, unique, options)
        self._threads.append(t)
        return t

    def _prop_dtypes(self) -> dict[str, np.dtype[Any]]:
        if self.values.runs:
            return {p.column: self.values.runs[0].files[p.column][1] for p in self.properties}
        return {p.column: np.dtype(np.float64 if p.type == "float" else np.bool_ if p.type == "bool" else np.int64)
                for p in self.properties}

    def _by_block(self, by_id: Spill, by_sv: Spill | None) -> None:
        """Merge 1: the spatial table; supervoxels read per block; runs by id (and by supervoxel) spilled.

        A range's supervoxels are read, and its runs spilled, by a thread while the main thread reads and
        sorts the next range: the labelmap's blocks are decoded by TensorStore's threads, and the main
        thread waited for them (a third of this merge's wall time). One range at most is ahead (memory).
        """
        spatial = self._table("spatial", "block", False)
        spatial.put(np.zeros(0, np.uint64), {"id": np.zeros(0, np.uint64)})
        indexed = self.labelmap is not None and by_sv is not None
        with _OneBehind("base-supervoxels") as behind:
            for part in self.by_block.ranges(self.range_sites):
                ids, lin, off = part.pop("id"), part.pop("lin"), part.pop("off")
                # packed sorts, never an argsort of 10⁶ u64 (:mod:`.base_order`); every column gathered once
                by_id_order = key_order(ids)
                run: Columns = {"id": ids[by_id_order], "lin": lin[by_id_order], "off": off[by_id_order]}
                del ids, lin, off, by_id_order, part
                order = key_order(run["lin"])  # stable over the id order: by (block, id)
                lin_s, ids_s = run["lin"][order], run["id"][order]
                spatial.put(self.codec.block_codes(lin_s), {"id": ids_s})
                if not indexed:
                    by_id.add(run)
                    continue
                behind.submit(self._supervoxels_of_range, run, order, lin_s, ids_s, by_id, by_sv)
                del run, order, lin_s, ids_s
        self.by_block.remove()
        spatial.end()  # written behind the next merges; closed (joined) by finish

    def _supervoxels_of_range(self, run: Columns, order: npt.NDArray[np.intp], lin_s: npt.NDArray[Any],
                              ids_s: U64, by_id: Spill, by_sv: Spill | None) -> None:
        """One range of merge 1's supervoxels (sites in (block, id) order), spilled by id and by supervoxel."""
        assert self.labelmap is not None and by_sv is not None
        starts = np.flatnonzero(np.append(True, lin_s[1:] != lin_s[:-1]))
        svs_s = supervoxels_of_offsets(self.labelmap, self.codec, lin_s, run["off"][order], starts)
        run["sv"] = np.empty(svs_s.size, np.uint64)
        run["sv"][order] = svs_s
        o_sv = key_order(svs_s)
        by_sv.add({"sv": svs_s[o_sv], "id": ids_s[o_sv]})
        by_id.add(run)

    def _by_id(self, by_id: Spill, ends: Spill | None) -> None:
        """Merge 2: the records table (duplicates refused); each range's synapse index rows spilled."""
        records = self._table("records", "id", True)
        empty: Columns = {a: np.zeros(0, np.int32) for a in "zyx"}
        empty.update({c: np.zeros(0, d) for c, d in self._prop_dtypes().items()})
        if self.labelmap is not None:
            empty["sv"] = np.zeros(0, np.uint64)
        records.put(np.zeros(0, np.uint64), empty)
        cuts: list[int | None] = [None, *by_id.splitters(self.range_sites, align=self.per_value), None]
        # a range's synapse index rows are counted and spilled by a thread while the next range is read
        with _OneBehind("base-index") as behind:
            for lo, hi in itertools.pairwise(cuts):
                cols = self._records_of_range(by_id, lo, hi, records)
                if cols is not None and ends is not None:
                    behind.submit(_spill_index_rows, cols["sv"], ends)
        by_id.remove()
        self.values.remove()
        records.end()

    def _records_of_range(self, by_id: Spill, lo: int | None, hi: int | None,
                          records: _TableThread) -> Columns | None:
        """One id range of merge 2 (see :meth:`_by_id`) put in the records table; its columns (None: empty)."""
        part = by_id.read_range(lo, hi)
        ids = part.pop("id", None)
        if ids is None or not ids.size:
            return None
        order = id_order(ids)
        if order is not None:
            ids = ids[order]
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if dup.size:
            raise self._duplicate(int(ids[dup[0]]))

        def by_id_of(col: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return col if order is None else col[order]

        z, y, x = self.codec.unpack(by_id_of(part.pop("lin")), by_id_of(part.pop("off")))
        cols: Columns = {"z": z, "y": y, "x": x}
        cols.update(self._values_of(ids, lo, hi))
        if "sv" in part:
            cols["sv"] = by_id_of(part.pop("sv"))
        del part, z, y, x
        records.put(ids, cols)
        return cols

    def _values_of(self, ids: U64, lo: int | None, hi: int | None) -> Columns:
        """The property columns of the records ``ids`` (sorted, distinct, ``lo <= id < hi``), each synapse's
        values repeated for its two sites (a range holds both sites of its synapses: odd splitters)."""
        if not self.properties:
            return {}
        vals = self.values.read_range(lo, hi)
        keys = vals.pop("id")
        order = id_order(keys)
        if order is not None:
            keys = keys[order]
        if not np.array_equal(keys, ids[::self.per_value]):  # the two spills hold the same annotations
            raise RuntimeError(f"a base import's spills disagree in ids {lo}..{hi} (a spill file was changed)")
        out: Columns = {}
        for p in self.properties:
            v = vals.pop(p.column)
            if order is not None:
                v = v[order]
            out[p.column] = np.repeat(v, self.per_value) if self.per_value > 1 else v
        return out

    def _duplicate(self, aid: int) -> AnnotationTableError:
        sid = (aid - 1) // 2 if self.layout == "synapses" else aid
        if self.duplicate is not None:
            return self.duplicate(sid)
        return AnnotationTableError(f"id {sid} is given twice", key=self.source)

    def _sites(self, by_sv: Spill) -> None:
        """Merge 3a: the ids by supervoxel at import."""
        sites = self._table("sites", "sv", False)
        sites.put(np.zeros(0, np.uint64), {"id": np.zeros(0, np.uint64)})
        for part in by_sv.ranges(self.range_sites):
            order = order_by(part["sv"], part["id"])
            sites.put(part["sv"][order], {"id": part["id"][order]})
        by_sv.remove()
        sites.end()

    def _synapses(self, ends: Spill) -> _TableThread:
        """Merge 3b: the synapse index, the ranges' rows summed per (supervoxel, direction, partner)."""
        table = self._table("synapses", "sv", False)
        table.put(np.zeros(0, np.uint64), {"partner": np.zeros(0, np.uint64), "dir": np.zeros(0, np.uint8),
                                           "n": np.zeros(0, np.uint32)})
        for part in ends.ranges(self.range_sites):
            order = index_order(part["sv"], part["dir"], part["partner"])
            sv, partner, d, cnt = (part[c][order] for c in ("sv", "partner", "dir", "n"))
            new = np.ones(sv.size, dtype=bool)
            new[1:] = (sv[1:] != sv[:-1]) | (d[1:] != d[:-1]) | (partner[1:] != partner[:-1])
            starts = np.flatnonzero(new)
            total = np.add.reduceat(cnt.astype(np.uint64), starts).astype(np.uint32)
            table.put(sv[starts], {"partner": partner[starts], "dir": d[starts], "n": total})
        ends.remove()
        table.end()
        return table

    def finish(self) -> BaseConfig:
        """Merge, write the tables and put them in place at ``base_dir``; on any error, nothing is left."""
        try:
            spill = self.temp / "spill"
            indexed = self.labelmap is not None
            w = self.spill_writer
            by_id = Spill(spill, "id", self.sample, w)
            by_sv = Spill(spill, "sv", self.sample, w) if indexed else None
            ends = Spill(spill / "ends", "sv", self.sample, w) if indexed and self.layout == "synapses" else None
            self._by_block(by_id, by_sv)
            self._by_id(by_id, ends)
            if by_sv is not None:
                self._sites(by_sv)
            synapses = self._synapses(ends) if ends is not None else None
            # the table writers finish behind the merges: the main thread waits for them only here, once
            for t in self._threads:
                t.close()
            synapse_rows = synapses.close().num_rows if synapses is not None else 0
            self.spill_writer.close()
            shutil.rmtree(spill, ignore_errors=True)
            self._commit()
        except BaseException:
            self.abort()
            raise
        ext = ".parquet" if self.format == "parquet" else ".zarr"
        root = self.root
        return BaseConfig(str(root / f"records{ext}"), str(root / f"spatial{ext}"), self.rows, self.max_id,
                          self.block, self.source, self.layout, tuple(self.properties),
                          synapses=str(root / f"synapses{ext}") if ends is not None else None,
                          supervoxels=indexed, synapse_rows=synapse_rows,
                          sites=str(root / f"sites{ext}") if indexed else None,
                          site_rows=self.rows if indexed else 0)

    def _commit(self) -> None:
        old: Path | None = None
        if self.root.exists():
            if any(self.root.iterdir()):
                if not self.overwrite:
                    raise RefusedWriteError(f"{self.root} was filled by someone else while the base was imported")
                old = self.root.parent / f"{TEMP_PREFIX}old-{self.root.name}-{uuid.uuid4().hex[:12]}"
                os.replace(self.root, old)
            else:
                self.root.rmdir()
        os.replace(self.tables, self.root)
        shutil.rmtree(self.temp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        """Stop the writers and remove everything written (the hidden directory)."""
        for t in self._threads:
            t.abort()
        self.spill_writer.close()  # no write may land in the directory after it is removed
        shutil.rmtree(self.temp, ignore_errors=True)


class _OneBehind:
    """Jobs run one at a time on a thread of their own, the caller at most one job ahead (so at most two
    ranges are in memory); leaving the ``with`` waits for the last job, and its error is raised."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._pending: Future[None] | None = None

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(fn, *args)

    def __enter__(self) -> _OneBehind:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._pending is not None and exc[0] is None:
                self._pending.result()
        finally:
            self._pool.shutdown(wait=True)


def _spill_index_rows(svs: U64, ends: Spill) -> None:
    """One id range's synapse index rows (its sites alternate pre, post: ids ``2S + 1``, ``2S + 2``), spilled."""
    sv, partner, d, cnt = synapse_aggregates(svs[0::2], svs[1::2])
    ends.add({"sv": sv, "partner": partner, "dir": d, "n": cnt})
