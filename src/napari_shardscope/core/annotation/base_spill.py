"""Sorting more rows than memory holds: sorted runs spilled to files, merged back one key range at a time.

An import of 10⁷ synapses is 2·10⁷ sites, each needed in three orders (by labelmap block, by id,
by supervoxel). Holding them all and sorting them three times was 3.5 GB at 10⁷ synapses and grew
with the table. Here each piece of input is sorted on its own and written out as a *run* (one raw
file per column); a merge then picks *splitters* from a sample of every run's keys and, for each
key range between two splitters, reads that range's rows of every run (a binary search in each
run's keys, then one slice per column), so the rows in memory at once are about one range's,
whatever the table's size. The search reads one window of keys from the key file (every
``sample_every``-th key is kept in memory to find it) and every slice is read into its place: no
file is mapped, so its pages never add up in the process's resident memory.

A range holds every row of its keys: one key with more rows than a range (every synapse in one
labelmap block, one supervoxel) makes that range larger, never splits the key.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Columns = dict[str, npt.NDArray[Any]]
#: Keys kept per run to choose splitters (one in SAMPLE_EVERY, unless the spill says fewer).
SAMPLE_EVERY = 1024
#: Runs a :class:`SpillWriter` may hold unwritten (the memory ahead of the disk: one piece's columns).
PENDING_RUNS = 1


class SpillWriter:
    """One thread writing the spills' files behind the merge, so the caller sorts the next piece meanwhile.

    Writing a run into the page cache is a third of an import's main-thread CPU (the kernel's
    copy and page allocation); NumPy's ``tofile`` releases the GIL, so on a second core it costs the
    import no wall time. At most :data:`PENDING_RUNS` runs wait (bounded memory); a failed write is
    raised by the next :meth:`write` or :meth:`wait`.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()

    def write(self, files: list[tuple[npt.NDArray[Any], Path]]) -> Future[None]:
        """Write ``files`` (array, path) behind the caller; wait first while too many runs are unwritten."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="base-spill")
        while len(self._pending) >= PENDING_RUNS:
            self._pending.popleft().result()
        job = self._pool.submit(_write_files, files)
        self._pending.append(job)
        return job

    def wait(self) -> None:
        """Every run handed over is on disk (or its error raised)."""
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        """Wait for the writes (their errors dropped: the caller is failing already or has waited) and stop."""
        while self._pending:
            with contextlib.suppress(Exception):
                self._pending.popleft().result()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _write_files(files: list[tuple[npt.NDArray[Any], Path]]) -> None:
    for arr, path in files:
        arr.tofile(path)


@dataclass
class Run:
    """One spilled run: its row count and, per column, the raw file and dtype (column ``key`` sorted)."""

    rows: int
    files: dict[str, tuple[Path, np.dtype[np.generic]]]
    sample: npt.NDArray[np.uint64]
    #: ``keys[::every]`` in the key column's own dtype: a bound is looked up in one window of ``every`` keys.
    marks: npt.NDArray[Any] = field(default_factory=lambda: np.empty(0, np.uint64))
    every: int = 1


@dataclass
class Spill:
    """The runs of one ordering (key column ``key``, ascending in every run), in directory ``root``."""

    root: Path
    key: str
    #: One key in this many is kept per run to choose splitters (at most a range's sixteenth: even ranges).
    sample_every: int = SAMPLE_EVERY
    #: Writes the run files in the background (None: written by :meth:`add` itself).
    writer: SpillWriter | None = None
    runs: list[Run] = field(default_factory=list)
    _count: itertools.count[int] = field(default_factory=itertools.count)
    _writes: list[Future[None]] = field(default_factory=list)
    #: The last upper bound :meth:`read_range` looked up and its position in every run: the next range starts
    #: there (ranges are read in ascending order), so each bound is searched once, not twice.
    _last_bound: tuple[int, list[int]] | None = None

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.runs)

    def add(self, cols: Mapping[str, npt.NDArray[np.generic]]) -> None:
        """Spill one run: ``cols[key]`` must already be ascending (the caller sorted the piece)."""
        keys = np.asarray(cols[self.key])
        if not keys.size:
            return
        i = next(self._count)
        self.root.mkdir(parents=True, exist_ok=True)
        files: dict[str, tuple[Path, np.dtype[np.generic]]] = {}
        writes: list[tuple[npt.NDArray[Any], Path]] = []
        for name, arr in cols.items():
            a = np.ascontiguousarray(arr)
            path = self.root / f"{self.key}-{i:05d}-{name}.bin"
            writes.append((a, path))
            files[name] = (path, a.dtype)
        marks = keys[::self.sample_every].copy()
        self._last_bound = None  # positions are per run: a new run has none
        sample = marks if marks.dtype == np.uint64 else marks.astype(np.uint64)
        self.runs.append(Run(int(keys.size), files, sample, marks, self.sample_every))
        if self.writer is not None:  # the caller hands the arrays over: it never changes them afterwards
            self._writes = [f for f in self._writes if not f.done() or f.exception() is not None]
            self._writes.append(self.writer.write(writes))
        else:
            _write_files(writes)

    def splitters(self, range_rows: int, *, align: int = 1) -> list[int]:
        """Ascending key values cutting the runs into ranges of about ``range_rows`` rows.

        ``align=2`` makes every splitter odd (a synapse's sites ``2S + 1`` and ``2S + 2`` stay in one range).
        """
        if not self.runs:
            return []
        sample = np.sort(np.concatenate([r.sample for r in self.runs]))
        step = max(1, range_rows // self.sample_every)
        cuts = sample[step::step]
        if align == 2:
            cuts = cuts - (cuts % np.uint64(2) == 0).astype(np.uint64)  # 2S + 2 -> 2S + 1
        return [int(c) for c in np.unique(cuts) if c > 0]

    def ranges(self, range_rows: int, *, align: int = 1) -> Iterator[Columns]:
        """Every row, a key range at a time (ascending ranges; rows within a range in no set order)."""
        if not self.runs:
            return
        cuts = self.splitters(range_rows, align=align)
        bounds: list[int | None] = [None, *cuts, None]
        for lo, hi in itertools.pairwise(bounds):
            part = self.read_range(lo, hi)
            if part[self.key].size:
                yield part

    def read_range(self, lo: int | None, hi: int | None) -> Columns:
        """The rows of every run with ``lo <= key < hi`` (None: unbounded), columns concatenated.

        Each column's output is allocated once and every run's slice read straight into its place
        (``readinto``): no array per run and no concatenated copy (a third of the system time of a
        merge was faulting in and copying those).
        """
        self.wait()
        last = self._last_bound
        starts = (last[1] if last is not None and lo is not None and last[0] == lo
                  else [0 if lo is None else self._position(run, lo) for run in self.runs])
        stops = [run.rows if hi is None else self._position(run, hi) for run in self.runs]
        self._last_bound = None if hi is None else (hi, stops)
        spans = [(run, a, b) for run, a, b in zip(self.runs, starts, stops, strict=True) if b > a]
        total = sum(b - a for _, a, b in spans)
        out: Columns = {}
        if not self.runs:
            return out
        for name, (_, dtype) in self.runs[0].files.items():
            col = np.empty(total, dtype)
            at = 0
            for run, a, b in spans:
                path, d = run.files[name]
                _read_into(path, col[at:at + b - a], a * d.itemsize)
                at += b - a
            out[name] = col
        return out

    def _position(self, run: Run, value: int) -> int:
        """The first row of ``run`` whose key is ``>= value`` (``searchsorted(keys, value, "left")``).

        The run's marks (every ``every``-th key, kept in memory) narrow it to one window of ``every`` keys,
        and only that window is read from the key file. Mapping the whole key file once per run and range
        instead cost a merge of many runs into many ranges most of its CPU (``np.memmap`` resolves the path
        and maps the file each time); the window read keeps the rows in memory at a few kilobytes as well.
        """
        path, dtype = run.files[self.key]
        v = dtype.type(value)
        j = int(np.searchsorted(run.marks, v, side="left"))
        if j == 0:  # keys[0] >= value
            return 0
        start = (j - 1) * run.every + 1  # keys[start - 1] < value
        stop = min(j * run.every, run.rows)  # keys[stop] >= value (or stop is the end)
        if stop <= start:
            return stop
        window = np.empty(stop - start, dtype)
        _read_into(path, window, start * dtype.itemsize)
        return start + int(np.searchsorted(window, v, side="left"))

    def wait(self) -> None:
        """This spill's runs are on disk (a failed write raised here)."""
        while self._writes:
            self._writes.pop(0).result()

    def remove(self) -> None:
        """Delete the run files (the merge read them; their bytes are not needed again)."""
        self.wait()
        for run in self.runs:
            for path, _ in run.files.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        self.runs = []
        self._last_bound = None



def _read_into(path: Path, target: npt.NDArray[Any], offset: int) -> None:
    """Fill ``target`` (contiguous) with the bytes of ``path`` from ``offset`` (a spill file: its size is known)."""
    view = memoryview(target).cast("B")  # type: ignore[arg-type]
    fd = os.open(path, os.O_RDONLY)  # no file object: a merge reads tens of thousands of small slices
    try:
        got = 0
        while got < len(view):
            k = os.preadv(fd, [view[got:]], offset + got)  # positioned: no seek call per slice
            if not k:
                raise OSError(f"{path}: ends {len(view) - got} bytes early (a spill file was cut)")
            got += k
    finally:
        os.close(fd)
