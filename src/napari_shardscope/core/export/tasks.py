"""Running export tasks on Dask: the threaded scheduler, or a ``dask.distributed`` cluster.

Each task writes one output file (a whole shard), so tasks never share a file and can run in any
order on any worker. ``scheduler`` chooses where they run:

* ``None`` or ``"threads"`` — Dask's threaded scheduler in this process;
* ``"sync"`` — one at a time in this thread (debugging);
* a ``distributed.Client`` — the user's cluster;
* a string with ``://`` (``"tcp://10.0.0.5:8786"``) — connect a client to that scheduler for the
  duration of the export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.api import Progress

T = TypeVar("T")
R = TypeVar("R")


def run_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    scheduler: Any = None,
    num_workers: int | None = None,
    progress: Progress | None = None,
    label: str = "export",
) -> list[R]:
    """Run ``fn(task)`` for every task as a Dask graph; results in task order."""
    import dask

    if not tasks:
        return []
    delayed = [dask.delayed(fn, pure=False)(t, dask_key_name=f"{label}-{i}") for i, t in enumerate(tasks)]
    total = len(tasks)
    if scheduler is None or scheduler in ("threads", "sync", "synchronous", "single-threaded"):
        name = "threads" if scheduler in (None, "threads") else "sync"
        from dask.callbacks import Callback

        done = [0]

        class _Progress(Callback):  # type: ignore[misc]  # dask is untyped here
            def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
                if isinstance(key, str) and key.startswith(f"{label}-"):
                    done[0] += 1
                    if progress is not None:
                        progress(done[0], total, label)

        kwargs: dict[str, Any] = {"scheduler": name}
        if num_workers is not None and name == "threads":
            kwargs["num_workers"] = num_workers
        with _Progress():
            computed = dask.compute(*delayed, **kwargs)
        return list(computed)
    client, own = _client_for(scheduler)
    try:
        from distributed import as_completed

        futures = client.compute(delayed)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * total
        for n, future in enumerate(as_completed(futures), start=1):
            results[index[future.key]] = future.result()
            if progress is not None:
                progress(n, total, label)
        return results
    finally:
        if own:
            client.close()


def iter_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    scheduler: Any = None,
    num_workers: int | None = None,
    progress: Progress | None = None,
    label: str = "task",
    batch: int | None = None,
) -> Iterator[tuple[int, R]]:
    """Run ``fn(task)`` for every task on Dask, yielding ``(task index, result)`` as results arrive.

    Unlike :func:`run_tasks`, results are not collected: the caller consumes each one (writes it
    out) before the next arrives, so a job whose results together exceed the client's memory can
    still run. On a ``distributed`` cluster each result is released as soon as it is yielded; on
    the threaded scheduler tasks run in batches of ``batch`` (default four per thread), so at
    most one batch of results is held at once.
    """
    import os

    if not tasks:
        return
    total = len(tasks)
    if scheduler is None or scheduler in ("threads", "sync", "synchronous", "single-threaded"):
        threads = num_workers or os.cpu_count() or 1
        size = batch or max(1, 4 * threads)
        done = 0
        for start in range(0, total, size):
            chunk = list(enumerate(tasks[start:start + size], start=start))
            results = run_tasks(fn, [t for _, t in chunk], scheduler=scheduler, num_workers=num_workers, label=label)
            for (i, _), result in zip(chunk, results, strict=True):
                done += 1
                if progress is not None:
                    progress(done, total, label)
                yield i, result
            del results
        return
    import dask

    client, own = _client_for(scheduler)
    try:
        from distributed import as_completed

        delayed = [dask.delayed(fn, pure=False)(t, dask_key_name=f"{label}-{i}") for i, t in enumerate(tasks)]
        futures = client.compute(delayed)
        del delayed
        index = {f.key: i for i, f in enumerate(futures)}
        pending = as_completed(futures)
        del futures  # as_completed holds the futures until each is yielded; then only we do
        for n, future in enumerate(pending, start=1):
            result = future.result()
            i = index[future.key]
            future.release()
            del future
            if progress is not None:
                progress(n, total, label)
            yield i, result
    finally:
        if own:
            client.close()


def _client_for(scheduler: Any) -> tuple[Any, bool]:
    if isinstance(scheduler, str):
        if "://" not in scheduler:
            raise ArgumentError(
                f"scheduler {scheduler!r}: use 'threads', 'sync', a distributed.Client or an address like tcp://host:8786"
            )
        from distributed import Client

        return Client(scheduler), True
    if hasattr(scheduler, "compute") and hasattr(scheduler, "close"):
        return scheduler, False
    raise ArgumentError(f"scheduler must be 'threads', 'sync', an address or a distributed.Client, got {scheduler!r}")
