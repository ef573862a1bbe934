"""The bulk label index: index a whole base segmentation as a Dask job, for bases too large to index lazily.

:func:`~napari_shardscope.core.labelmap.label_index.build_base_index` indexes the base in one pass
with threads in one process, holding every entry in memory. That is right for a sample and wrong
for a petavoxel base: the counting must run on a cluster, and the client must never hold the
whole index. The job therefore runs in two phases:

1. **count** — one Dask task per *brick* (a box of whole scale-0 overlay blocks) reads the base and
   returns, for every block of the brick, each supervoxel and its voxel count there. The tasks are
   pure functions of a small picklable :class:`BrickTask` (the base URL and a block range); each
   worker process opens the base volume once.
2. **combine** — on a cluster, as each brick's counts arrive, the client splits them by *supervoxel-id range*
   and appends each part to that range's scratch file, then forgets them. When every brick is in,
   the ranges are combined one at a time (sorted, grouped per supervoxel) and their entries are
   streamed into one write transaction, the summary and then ``index/meta`` last. One range is
   in memory at a time; the only whole-volume structure is the summary (every supervoxel and its
   total, 16 bytes each), which the labelmap keeps in memory anyway. On a local scheduler (threads,
   sync) the counting already runs in this process, like the thread builder: unless ``ranges`` is
   given, the counts stay in memory and are combined once, with no scratch files.

Only the blocks that hold stored chunks are counted (:mod:`.present`: the format's listing), so a
petavoxel extent with a few thousand chunks is a few thousand blocks of work. The per-body tables
(DVID's label index per body) need every range first — a body's supervoxels lie anywhere — and are
built from body-range scratch files on a cluster. The stored bytes are exactly those of the thread
builder (same tables, same pages, same metadata), so every reader of the base index is unchanged.
Because the whole store happens in one transaction, a rebuild (``overwrite=True``) replaces an
existing index atomically: readers see the old index or the new, never a mix, and an interrupted
job leaves the old one intact.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore.url import parse_url
from napari_shardscope.core.errors import OVERWRITE, ArgumentError
from napari_shardscope.core.jobs import is_local, iter_tasks, job_scheduler, open_once, run_tasks
from napari_shardscope.core.labelmap.config import TYPE_NAME, LabelmapConfig
from napari_shardscope.core.labelmap.geometry import BlockGrid, Box, Coord
from napari_shardscope.core.labelmap.label_index import (
    BOX_FIELDS,
    BOX_NAMES,
    BaseIndex,
    BoxedCounts,
    IndexSummary,
    combine_counts,
    count_block_boxes,
    index_items,
    load_index_meta,
)
from napari_shardscope.core.labelmap.reading import BaseSource
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.repository import Repository, open_repository
from napari_shardscope.core.volumes import open_volume

#: One count: supervoxel, scale-0 block (z, y, x) and its voxels there (28 bytes, packed).
RECORD_DTYPE = np.dtype([("sv", "<u8"), ("z", "<u4"), ("y", "<u4"), ("x", "<u4"), ("n", "<u8"), *BOX_FIELDS])
#: Default brick: at most this many scale-0 blocks per task (16 blocks of 64³ uint64: 32 MiB read at once,
#: well above Dask's per-task overhead, small enough to spread a modest base over a few workers).
BLOCKS_PER_TASK = 16
#: Count tasks per thread on a local scheduler: each Dask task costs ~0.4 ms of scheduling (on the
#: bench's 128-block base, 32 tasks of 4 blocks cost the job 14 ms of its ~120), while a few tasks
#: per thread still let a thread that finishes early take another. Bricks hold 4 to 16 blocks.
LOCAL_TASKS_PER_THREAD = 4
#: Blocks a count task has requested ahead of the one it counts from a remote base: the round trips
#: overlap counting, memory stays bounded. A local base is read one block at a time (decoding ahead
#: only competed with counting for the cores: 13% slower on the bench's base).
READ_AHEAD = 2
#: Default number of scratch entries per supervoxel-id range (the most the client combines at once).
RANGE_BLOCKS = 64
MAX_RANGES = 256

Records = npt.NDArray[np.void]


@dataclass(frozen=True)
class BrickTask:
    """One count task: some scale-0 blocks (grid positions, z-major) of the base at ``base``."""

    base: str
    shape: Coord
    block: Coord
    blocks: tuple[Coord, ...]


@dataclass(frozen=True)
class IndexJobReport:
    """What a bulk index job stored: the summary (every supervoxel and its total) and how the job ran."""

    labelmap: str
    summary: IndexSummary
    voxels: int
    tasks: int
    ranges: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"labelmap": self.labelmap, "supervoxels": int(self.summary.supervoxels.size),
                "max_id": self.summary.max_id, "voxels": self.voxels, "tasks": self.tasks,
                "ranges": self.ranges, "seconds": round(self.seconds, 3)}


def _is_remote(url: str) -> bool:
    """Whether the base at ``url`` is reached over a network (not a local file)."""
    return open_once(("label-index base is remote", url), lambda: parse_url(url).kvstore.get("driver") != "file")


def _base_reader(url: str) -> BaseSource:
    return open_once(("label-index base", url), lambda: BaseSource(open_volume(url, kind="segmentation")))


def count_brick(task: BrickTask) -> list[BoxedCounts]:
    """Per-block supervoxel counts of one brick, blocks z-major (the thread builder's counts, block by block).

    Each block is read as its own contiguous array with the next reads already issued (a remote
    base costs about one round trip per brick, and decoding overlaps counting), and counted by the
    thread builder's :func:`count_block_boxes`.
    """
    grid = BlockGrid(task.shape, task.block)
    coords = list(task.blocks)
    ahead = READ_AHEAD if _is_remote(task.base) else 0
    reads = _base_reader(task.base).read_many(0, [grid.box(c) for c in coords], ahead=ahead, once=True)
    return [count_block_boxes(c, data) for c, data in zip(coords, reads, strict=True)]


def as_records(parts: list[BoxedCounts]) -> Records:
    """Block counts as packed records (supervoxel, block, count): what the range files of a cluster job hold."""
    sizes = [p[1].size for p in parts]
    rec = np.zeros(sum(sizes), dtype=RECORD_DTYPE)
    if parts:
        rec["sv"] = np.concatenate([p[1] for p in parts])
        rec["n"] = np.concatenate([p[2] for p in parts])
        coords = np.repeat(np.asarray([p[0] for p in parts], dtype=np.uint32).reshape(-1, 3), sizes, axis=0)
        rec["z"], rec["y"], rec["x"] = coords[:, 0], coords[:, 1], coords[:, 2]
        boxes = np.concatenate([p[3] for p in parts]).reshape(-1, 6)
        for i, f in enumerate(BOX_NAMES):
            rec[f] = boxes[:, i]
    return rec


def plan_bricks(base: str, grid: BlockGrid, blocks_per_task: int = BLOCKS_PER_TASK,
                blocks: list[Coord] | None = None) -> list[BrickTask]:
    """Tasks of at most ``blocks_per_task`` blocks each, z-major.

    ``blocks``: the blocks to count (those holding stored chunks); default every block of the grid,
    cut into bricks filling x, then y, then z (for small bases whose store cannot list).
    """
    if blocks_per_task < 1:
        raise ArgumentError(f"blocks_per_task must be >= 1, got {blocks_per_task}")
    if blocks is None:
        g = grid.grid
        budget = blocks_per_task
        nx = min(g[2], budget)
        ny = min(g[1], max(1, budget // nx))
        nz = min(g[0], max(1, budget // (nx * ny)))
        out = []
        for z in range(0, g[0], nz):
            for y in range(0, g[1], ny):
                for x in range(0, g[2], nx):
                    lo, hi = (z, y, x), (min(z + nz, g[0]), min(y + ny, g[1]), min(x + nx, g[2]))
                    box = Box((lo[0] * grid.block[0], lo[1] * grid.block[1], lo[2] * grid.block[2]),
                              grid.box((hi[0] - 1, hi[1] - 1, hi[2] - 1)).hi)
                    out.append(BrickTask(base, grid.shape, grid.block, tuple(grid.blocks_in(box))))
        return out
    ordered = sorted(blocks)
    return [BrickTask(base, grid.shape, grid.block, tuple(ordered[i:i + blocks_per_task]))
            for i in range(0, len(ordered), blocks_per_task)]


def range_bounds(id_start: int, ranges: int) -> npt.NDArray[np.uint64]:
    """Inner bounds splitting supervoxel ids [1, id_start) into ``ranges`` ranges (ids above go to the last)."""
    edges = np.linspace(1, max(2, id_start), ranges + 1)[1:-1]
    return np.unique(np.ceil(edges).astype(np.uint64))


def _count_into_ranges(bricks: list[BrickTask], bounds: npt.NDArray[np.uint64], files: list[Path], scheduler: Any,
                       num_workers: int | None, progress: Progress) -> None:
    """Count the bricks, appending each brick's records to the scratch file of their supervoxel-id range."""
    handles = [f.open("wb") for f in files]
    try:
        for _, parts in iter_tasks(count_brick, bricks, scheduler=scheduler, num_workers=num_workers,
                                   progress=progress, label="count bricks"):
            rec = as_records(parts)
            which = np.searchsorted(bounds, rec["sv"], side="right")
            order = np.argsort(which, kind="stable")
            cuts = np.searchsorted(which[order], np.arange(1, bounds.size + 1))
            for i, part in enumerate(np.split(rec[order], cuts)):
                if part.size:
                    handles[i].write(part.tobytes())
    finally:
        for h in handles:
            h.close()


def _combine_range(records: Records) -> BaseIndex:
    """The entries of one range, ordered as the thread builder orders them (supervoxel, then block z-major)."""
    order = np.lexsort((records["x"], records["y"], records["z"], records["sv"]))
    rec = records[order]
    labels = rec["sv"].astype(np.uint64)
    counts = rec["n"].astype(np.int64)
    blocks = np.stack([rec["z"], rec["y"], rec["x"]], axis=1).astype(np.int64).reshape(-1, 3)
    boxes = np.stack([rec[f] for f in BOX_NAMES], axis=1).astype(np.uint16).reshape(-1, 6)
    svs, first = np.unique(labels, return_index=True)
    totals = np.add.reduceat(counts, first).astype(np.uint64) if labels.size else np.zeros(0, np.uint64)
    summary = IndexSummary(svs.astype(np.uint64), totals, int(svs[-1]) if svs.size else 0)
    return BaseIndex(summary, labels, blocks, counts, int(counts.sum()), boxes)


def build_label_index(repo: Repository | str | os.PathLike[str], name: str, *, scheduler: Any = None,
                      num_workers: int | None = None, progress: Progress | None = None,
                      overwrite: bool = False, blocks_per_task: int | None = None, ranges: int | None = None,
                      scratch: str | os.PathLike[str] | None = None) -> IndexJobReport:
    """Build the base label index of labelmap ``name`` as a Dask job and store it in the repository.

    Parameters
    ----------
    repo
        The repository, or its directory.
    name
        Labelmap instance name.
    scheduler
        ``None``/``"threads"`` (Dask's threaded scheduler), ``"sync"``, a ``distributed.Client``,
        or a scheduler address ``"tcp://host:8786"``. Workers must be able to open the base URL.
    num_workers
        Threads for the threaded scheduler.
    progress
        ``progress(done, total, what)`` after each counted brick and each combined range
        (``total`` counts both).
    overwrite
        Replace an existing index (atomically). Without it an existing index is refused: the
        base is immutable, so a complete index never needs rebuilding unless it is damaged.
    blocks_per_task
        At most how many scale-0 blocks one task reads. Default: 16 on a cluster (fewer, larger
        round trips); on a local scheduler about 4 tasks per thread, of 4 to 16 blocks each.
    ranges
        How many supervoxel-id ranges the combination is split into, through scratch files (default:
        none on a local scheduler, whose process holds the counts anyway and combines them once in
        memory; on a cluster about one per 64 blocks, at most 256). More ranges, less client memory.
    scratch
        Directory for the scratch files of the combination (default: the system's temporary
        directory); removed afterwards.

    Raises
    ------
    ArgumentError
        Not a labelmap, an index that exists without ``overwrite``, or a bad parameter.
    """
    own = not isinstance(repo, Repository)
    r: Repository = open_repository(repo) if not isinstance(repo, Repository) else repo
    try:
        return _build(r, name, scheduler=scheduler, num_workers=num_workers, progress=progress,
                      overwrite=overwrite, blocks_per_task=blocks_per_task, ranges=ranges, scratch=scratch)
    finally:
        if own:
            r.close()


def _build(repo: Repository, name: str, *, scheduler: Any, num_workers: int | None, progress: Progress | None,
           overwrite: bool, blocks_per_task: int | None, ranges: int | None,
           scratch: str | os.PathLike[str] | None) -> IndexJobReport:
    from napari_shardscope.core.labelmap.index_build import INDEX_PREFIXES, blocks_to_index
    from napari_shardscope.core.labelmap.opening import labelmap_config, open_agglomeration

    started = time.perf_counter()
    inst = repo.instance(name)
    if inst.type != TYPE_NAME:
        raise ArgumentError(f"instance {name!r} is a {inst.type}, not a {TYPE_NAME}")
    if ranges is not None and ranges < 1:
        raise ArgumentError(f"ranges must be >= 1, got {ranges}")

    def read(keys: Any) -> list[bytes | None]:
        return repo.get_unversioned_many(inst, keys)

    meta = load_index_meta(read)
    if meta is not None and int(meta.get("format", 0)) >= 2 and not overwrite:
        raise ArgumentError(f"labelmap {name!r} already has a complete base label index; rebuild it only if it is "
                            f"damaged: pass {OVERWRITE}").suggesting(OVERWRITE)
    config: LabelmapConfig = labelmap_config(repo, name)
    agglomeration = open_agglomeration(repo, inst, config) if config.agglomeration else None
    grid = config.grid(0)
    present = blocks_to_index(config, _base_reader(config.base), command=f"shardscope index {repo.path} {name}")
    n_blocks = len(present) if present is not None else grid.grid[0] * grid.grid[1] * grid.grid[2]
    if blocks_per_task is None:
        blocks_per_task = BLOCKS_PER_TASK
        if is_local(scheduler):
            with job_scheduler(scheduler, num_workers) as (_, threads):
                blocks_per_task = min(16, max(4, -(-n_blocks // (LOCAL_TASKS_PER_THREAD * threads))))
    bricks = plan_bricks(config.base, grid, blocks_per_task, present)
    # A local scheduler runs in this process, which holds every count anyway (as the thread builder
    # does): the counts stay in memory and are combined once, with no range files to split and re-read.
    # Ranges on disk are for clusters, where the client must not hold the whole index.
    in_memory = ranges is None and is_local(scheduler)
    n_ranges = 1 if in_memory else ranges if ranges is not None else max(1, min(MAX_RANGES, n_blocks // RANGE_BLOCKS))
    bounds = range_bounds(config.id_start, n_ranges)
    steps = len(bricks) + bounds.size + 1

    def counted(done: int, total: int, what: str) -> None:
        if progress is not None:
            progress(done, steps, what)

    n_files = bounds.size + 1
    with nullcontext(None) if in_memory else tempfile.TemporaryDirectory(prefix="shardscope-index-",
                                                                        dir=scratch) as tmp:
        files = [Path(tmp) / f"range-{i:04d}.rec" for i in range(n_files)] if tmp is not None else []
        held: list[list[BoxedCounts]] = []
        if in_memory:  # one graph: no batch of tasks waits for its slowest brick while a thread idles
            held = run_tasks(count_brick, bricks, scheduler=scheduler, num_workers=num_workers, progress=counted,
                             label="count bricks")
        else:
            _count_into_ranges(bricks, bounds, files, scheduler, num_workers, counted)

        def combine_range(i: int) -> BaseIndex:
            if in_memory:  # the thread builder's combination of the same block counts
                whole = combine_counts(part for brick in held for part in brick)
                held.clear()
                return whole
            records = np.fromfile(files[i], dtype=RECORD_DTYPE)
            files[i].unlink()
            return _combine_range(records)

        summaries: list[IndexSummary] = []
        voxels = [0]

        def parts() -> Iterator[BaseIndex]:
            for i in range(n_files):
                part = combine_range(i)
                summaries.append(part.summary)
                voxels[0] += part.voxels
                yield part
                if progress is not None:
                    progress(len(bricks) + i + 1, steps, "combine ranges")

        bound = max(config.id_start, agglomeration.max_id if agglomeration is not None else 0)
        items = index_items(parts(), agglomeration, bound=bound, spill=not in_memory, scratch=scratch)
        repo.replace_unversioned(inst, INDEX_PREFIXES, items)
    svs = np.concatenate([x.supervoxels for x in summaries]).astype(np.uint64) if summaries else np.zeros(0, np.uint64)
    totals = np.concatenate([x.totals for x in summaries]).astype(np.uint64) if summaries else np.zeros(0, np.uint64)
    summary = IndexSummary(svs, totals, int(svs[-1]) if svs.size else 0)
    return IndexJobReport(name, summary, voxels[0], len(bricks), n_files, time.perf_counter() - started)
