"""The base label index as a Dask job: count every scale-0 block of the base on a cluster.

Indexing reads the whole base once. In the GUI process a thread pool does it on first need
(:meth:`~napari_shardscope.core.labelmap.labelmap.Labelmap.index_summary`); for a base too large
for that, this job spreads the reading and counting over Dask — the threaded scheduler, or a
``dask.distributed`` cluster whose workers read the base where it lives (a bucket URL) — and the
client combines the per-block counts and stores them in the repository in one transaction.
Only label counts travel back, never voxels: a 64³ block of uint64 (2 MiB) becomes a few hundred
bytes. The stored index is byte-identical to the thread-built one (tested).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.dataset import Progress
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.tasks import run_tasks
from napari_shardscope.core.labelmap.config import TYPE_NAME, LabelmapConfig
from napari_shardscope.core.labelmap.geometry import Box, Coord
from napari_shardscope.core.labelmap.keys import INDEX_META_KEY
from napari_shardscope.core.labelmap.label_index import BaseIndex, BlockCounts, combine_counts, count_block
from napari_shardscope.core.versioned.repository import Repository, open_repository

#: Scale-0 blocks one task counts (a task then reads about 64 × 2 MiB of uint64 at 64³ blocks).
BLOCKS_PER_TASK = 64

_BASES: dict[str, Any] = {}
_BASES_LOCK = threading.Lock()


@dataclass(frozen=True)
class CountTask:
    """Count the labels of some scale-0 blocks of the base at ``base`` (picklable, opens the base once per process)."""

    base: str
    block: Coord
    shape: Coord
    blocks: tuple[Coord, ...]

    def __call__(self) -> list[BlockCounts]:
        from napari_shardscope.core.labelmap.reading import BaseSource
        from napari_shardscope.core.volumes.opening import open_volume

        with _BASES_LOCK:
            source = _BASES.get(self.base)
            if source is None:
                source = _BASES[self.base] = BaseSource(open_volume(self.base, kind="segmentation"))
        out = []
        for c in self.blocks:
            lo = tuple(i * b for i, b in zip(c, self.block, strict=True))
            hi = tuple(min(low + b, s) for low, b, s in zip(lo, self.block, self.shape, strict=True))
            out.append(count_block(c, source.read(0, Box(lo, hi))))  # type: ignore[arg-type]
        return out


def _run(task: CountTask) -> list[BlockCounts]:
    return task()


def plan_count_tasks(config: LabelmapConfig, blocks_per_task: int = BLOCKS_PER_TASK) -> list[CountTask]:
    """Tasks covering every scale-0 block, in z-major runs of ``blocks_per_task`` blocks."""
    if blocks_per_task < 1:
        raise ArgumentError(f"blocks_per_task must be >= 1, got {blocks_per_task}")
    grid = config.grid(0)
    coords = list(grid.blocks_in(Box.of_shape(grid.shape)))
    return [CountTask(config.base, config.block, config.shape, tuple(coords[i:i + blocks_per_task]))
            for i in range(0, len(coords), blocks_per_task)]


def build_label_index(repo: Repository | str, name: str, *, scheduler: Any = None, num_workers: int | None = None,
                      progress: Progress | None = None, overwrite: bool = False,
                      blocks_per_task: int = BLOCKS_PER_TASK) -> BaseIndex:
    """Build and store the base label index of labelmap ``name`` as a Dask job; returns it.

    Parameters
    ----------
    repo
        The repository, or its directory.
    scheduler
        ``None``/``"threads"``, ``"sync"``, a ``distributed.Client`` or a scheduler address.
    overwrite
        Rebuild an index that is already stored (the base never changes, so this only repairs).

    Raises
    ------
    ArgumentError
        The instance is not a labelmap, or its index exists and ``overwrite`` is false.
    """
    from napari_shardscope.core.labelmap.label_index import store_base_index

    own = isinstance(repo, str)
    r = open_repository(repo) if isinstance(repo, str) else repo
    try:
        inst = r.instance(name)
        if inst.type != TYPE_NAME:
            raise ArgumentError(f"instance {name!r} is a {inst.type}, not a {TYPE_NAME}")
        if r.get_unversioned(inst, INDEX_META_KEY) is not None and not overwrite:
            raise ArgumentError(f"labelmap {name!r} already has a base label index; pass overwrite=True "
                                f"(CLI: --force) to rebuild it")
        config = LabelmapConfig.from_json(inst.config, name=name)
        tasks = plan_count_tasks(config, blocks_per_task)
        results = run_tasks(_run, tasks, scheduler=scheduler, num_workers=num_workers, progress=progress,
                            label="index")
        built = combine_counts(part for parts in results for part in parts)
        store_base_index(r, inst, built)
        return built
    finally:
        if own:
            r.close()
