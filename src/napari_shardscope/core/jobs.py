"""The Dask job runner behind export and the bulk label index: one task per output, anywhere.

Export writes one output shard per task and the label-index job counts one brick of the base per
task; both are many independent tasks whose inputs are small picklable descriptions, so both run
here, the same way. ``scheduler`` chooses where tasks run:

* ``None`` or ``"threads"`` — Dask's threaded scheduler in this process (``num_workers`` threads);
  :func:`run_gathered` (export's shards from parts) runs its plan in order on its own threads here;
* ``"sync"`` — one at a time in this thread (debugging);
* a ``distributed.Client`` — the user's cluster (left open afterwards);
* a string with ``://`` (``"tcp://10.0.0.5:8786"``) — a client connected to that scheduler for the
  duration of the job.

:func:`run_tasks` returns every result in task order (export keeps one small record per shard);
:func:`iter_tasks` streams results as they complete so the caller can write each one out before
the next arrives (the label index, whose counts together exceed the client's memory). Both call
``progress(done, total, label)`` after each task. Workers open what a task describes once per
process through :func:`open_once`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.progress import Progress

T = TypeVar("T")
R = TypeVar("R")
P = TypeVar("P")
Q = TypeVar("Q")

#: Scheduler names that run in this process (Dask's local schedulers).
LOCAL_SCHEDULERS = ("threads", "sync", "synchronous", "single-threaded")


def run_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    scheduler: Any = None,
    num_workers: int | None = None,
    progress: Progress | None = None,
    label: str = "task",
) -> list[R]:
    """Run ``fn(task)`` for every task as a Dask graph; results in task order."""
    if not tasks:
        return []
    return _collect(_delayed(fn, tasks, label), scheduler, num_workers, progress, label)


def run_gathered(
    part_fn: Callable[[P], Q],
    finish_fn: Callable[[T, list[Q]], R],
    groups: Sequence[tuple[T, Sequence[P]]],
    *,
    scheduler: Any = None,
    num_workers: int | None = None,
    progress: Progress | None = None,
    label: str = "task",
) -> list[R]:
    """``finish_fn(task, [part_fn(part) for part in parts])`` for every ``(task, parts)``; results in order.

    The parts of one task run separately (on any worker, in parallel) and its finish runs once they
    are all done: one output that is too big a unit of work for the workers to share (one shard file
    holding the whole volume) is still spread over all of them. Progress counts finished tasks, not parts.

    In this process (threads, sync) the parts start in the order given — each thread takes the next
    one as it frees up, and the thread finishing a task's last part runs its finish — so a caller
    that plans big parts first and small ones last (export's guided parts) ends with every thread
    busy until about the last part (:func:`_gather_in_threads`). On a cluster they are a Dask graph:
    each part a Dask task, the finish a task depending on them; a task of one part is one Dask task
    (no intermediate result travels).
    """
    if not groups:
        return []
    if is_local(scheduler):
        return _gather_in_threads(part_fn, finish_fn, groups, _local_threads(scheduler, num_workers), progress,
                                  label)
    import dask

    graph = []
    for i, (task, parts) in enumerate(groups):
        key = f"{label}-{i:09d}"
        if len(parts) == 1:
            graph.append(dask.delayed(_part_then_finish, pure=False)(part_fn, finish_fn, _Opaque(task),
                                                                     _Opaque(parts[0]), dask_key_name=key))
            continue
        done = [dask.delayed(_call, pure=False)(part_fn, _Opaque(p), dask_key_name=f"part-{key}-{j:06d}")
                for j, p in enumerate(parts)]
        graph.append(dask.delayed(_finish, pure=False)(finish_fn, _Opaque(task), done, dask_key_name=key))
    return _collect(graph, scheduler, num_workers, progress, label)


def _local_threads(scheduler: str | None, num_workers: int | None) -> int:
    """Threads a local scheduler runs: ``num_workers`` (Dask's CPU count by default), 1 for ``sync``."""
    if scheduler not in (None, "threads"):
        return 1
    from dask.system import CPU_COUNT

    return max(1, num_workers or CPU_COUNT)


def _gather_in_threads(part_fn: Callable[[P], Q], finish_fn: Callable[[T, list[Q]], R],
                       groups: Sequence[tuple[T, Sequence[P]]], threads: int, progress: Progress | None,
                       label: str) -> list[R]:
    """:func:`run_gathered` in this process: parts started in the order given, on ``threads`` threads.

    Not Dask's threaded scheduler: its ``dask.order`` runs independent tasks in an order of its own
    (the tasks with the fewest parts first, each task's parts last to first: the reverse of an
    export's largest-first plan, which left one worker compressing a whole shard while the other
    idled), and it spent ~0.35 ms holding the GIL per task, which a plan of many small parts pays
    on every part. Here a thread takes the next part from one list under a lock (a few µs), and
    the thread completing a task's last part runs its finish at once, so outputs complete (and
    free their parts) in plan order.

    Progress is reported from the calling thread, as Dask's callbacks were. The first error stops
    the parts not yet started, waits for the running ones and is raised as it is (typed errors stay
    typed); ``threads == 1`` runs everything in the calling thread.
    """
    results: list[Any] = [None] * len(groups)
    total = len(groups)
    if threads <= 1:
        for i, (task, parts) in enumerate(groups):
            results[i] = finish_fn(task, [part_fn(p) for p in parts])
            if progress is not None:
                progress(i + 1, total, label)
        return results
    import queue

    order = [(i, j) for i, (_, parts) in enumerate(groups) for j in range(len(parts))]
    outputs: list[list[Any]] = [[None] * len(parts) for _, parts in groups]
    left = [len(parts) for _, parts in groups]
    lock = threading.Lock()
    taken = 0  # parts handed out; len(order) once stopped
    events: queue.SimpleQueue[tuple[int, BaseException | None]] = queue.SimpleQueue()

    def work() -> None:
        nonlocal taken
        while True:
            with lock:
                if taken >= len(order):
                    return
                i, j = order[taken]
                taken += 1
            try:
                out = part_fn(groups[i][1][j])
                with lock:
                    outputs[i][j] = out
                    left[i] -= 1
                    last = left[i] == 0
                if last:
                    results[i] = finish_fn(groups[i][0], outputs[i])
                    outputs[i] = []  # the parts are in the output now: free them
                    events.put((i, None))
            except BaseException as exc:  # handed to the calling thread, raised there as it is
                with lock:
                    taken = len(order)  # stop: no part starts after a failure
                events.put((i, exc))
                return

    pool = [threading.Thread(target=work, name=f"shardscope-{label}-{n}", daemon=True)
            for n in range(min(threads, len(order)))]
    for t in pool:
        t.start()
    try:
        done = 0
        while done < total:
            try:
                _, error = events.get(timeout=1.0)
            except queue.Empty:  # every part finishes its task or reports an error; a lost thread is a bug
                if not any(t.is_alive() for t in pool):
                    raise RuntimeError(f"{label} job: its threads ended with {total - done} tasks unfinished") from None
                continue
            if error is not None:
                raise error
            done += 1
            if progress is not None:
                progress(done, total, label)
    finally:
        with lock:
            taken = len(order)  # stop: no part starts after this
        for t in pool:
            t.join()
    return results


class _Opaque:
    """A task argument Dask passes on as it is.

    Dask looks inside tuples, lists, dicts and dataclasses for collections to compute first; a task
    description (a dataclass of tuples, a shard's list of chunk ids) has none, and walking it cost
    the graph's construction more than the tasks' scheduling.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple[type[_Opaque], tuple[Any]]:
        return _Opaque, (self.value,)


def _call(fn: Callable[[T], R], task: _Opaque) -> R:
    return fn(task.value)


def _finish(finish_fn: Callable[[T, list[Q]], R], task: _Opaque, parts: list[Q]) -> R:
    return finish_fn(task.value, parts)


def _part_then_finish(part_fn: Callable[[P], Q], finish_fn: Callable[[T, list[Q]], R], task: _Opaque,
                      part: _Opaque) -> R:
    return finish_fn(task.value, [part_fn(part.value)])


@contextmanager
def job_scheduler(scheduler: Any = None, num_workers: int | None = None) -> Iterator[tuple[Any, int]]:
    """``(scheduler, slots)``: the scheduler to pass on, and how many tasks it runs at once.

    A job that plans its tasks by the number of workers (to split a big unit of work only when
    workers would otherwise idle) needs ``slots`` before it builds its graph. A scheduler address
    is connected here, once, for the duration of the block (the job's calls get the client).
    """
    if is_local(scheduler):
        if scheduler in (None, "threads"):
            from dask.system import CPU_COUNT

            yield scheduler, max(1, num_workers or CPU_COUNT)
        else:
            yield scheduler, 1
        return
    client, own = _client_for(scheduler)
    try:
        yield client, max(1, sum(client.nthreads().values()))
    finally:
        if own:
            client.close()


def _collect(graph: list[Any], scheduler: Any, num_workers: int | None, progress: Progress | None,
             label: str) -> list[Any]:
    """Every result of ``graph`` (delayed objects keyed ``<label>-<index>``), in graph order."""
    if is_local(scheduler):
        return _compute_local(graph, len(graph), scheduler, num_workers, progress, label)
    results: list[Any] = [None] * len(graph)
    for i, result in _stream_distributed(graph, scheduler, progress, label):
        results[i] = result
    return results


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
    if not tasks:
        return
    if not is_local(scheduler):
        yield from _stream_distributed(_delayed(fn, tasks, label), scheduler, progress, label)
        return
    total = len(tasks)
    threads = num_workers or os.cpu_count() or 1
    size = batch or max(1, 4 * threads)
    done = 0
    for start in range(0, total, size):
        chunk = tasks[start:start + size]
        results = _compute_local(_delayed(fn, chunk, label), len(chunk), scheduler, num_workers, None, label)
        for i, result in enumerate(results, start=start):
            done += 1
            if progress is not None:
                progress(done, total, label)
            yield i, result
        del results


def is_local(scheduler: Any) -> bool:
    """True when ``scheduler`` names one of Dask's in-process schedulers (or is None: threads)."""
    return scheduler is None or (isinstance(scheduler, str) and scheduler in LOCAL_SCHEDULERS)


_OPENED: dict[Hashable, Any] = {}
_OPENED_LOCK = threading.Lock()


def open_once(key: Hashable, opener: Callable[[], T]) -> T:
    """What ``opener()`` returns, made once per process for ``key`` and shared by every task after.

    Tasks travel to workers as small picklable descriptions (a URL, a repository path): a live
    TensorStore view or an open repository should not be pickled. Each worker process therefore
    opens what a task describes on first use and keeps it; ``key`` says what was opened (include
    a kind, e.g. ``("volume", url)``, so two openers of one URL do not share an entry).
    """
    with _OPENED_LOCK:
        if key not in _OPENED:
            _OPENED[key] = opener()
        return cast(T, _OPENED[key])


def _delayed(fn: Callable[[T], R], tasks: Sequence[T], label: str) -> list[Any]:
    import dask

    return [dask.delayed(_call, pure=False)(fn, _Opaque(t), dask_key_name=f"{label}-{i:09d}")
            for i, t in enumerate(tasks)]


def _compute_local(graph: list[Any], total: int, scheduler: str | None, num_workers: int | None,
                   progress: Progress | None, label: str) -> list[Any]:
    """``graph`` (delayed objects) on Dask's threaded (or synchronous) scheduler; results in graph order."""
    import dask
    from dask.callbacks import Callback

    done = [0]

    class _Progress(Callback):  # type: ignore[misc]  # dask is untyped here
        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if isinstance(key, str) and key.startswith(f"{label}-"):
                done[0] += 1
                if progress is not None:
                    progress(done[0], total, label)

    name = "threads" if scheduler in (None, "threads") else "sync"
    kwargs: dict[str, Any] = {"scheduler": name}
    if num_workers is not None and name == "threads":
        kwargs["num_workers"] = num_workers
    with _Progress():
        computed = dask.compute(*graph, optimize_graph=False, **kwargs)  # nothing to fuse: the tasks are independent
    return list(computed)


def _stream_distributed(delayed: list[Any], scheduler: Any, progress: Progress | None,
                        label: str) -> Iterator[tuple[int, Any]]:
    """``(task index, result)`` from a ``dask.distributed`` cluster as each task completes.

    Each future is released as soon as its result is yielded, so the cluster forgets results the
    caller has taken.
    """
    client, own = _client_for(scheduler)
    try:
        from distributed import as_completed

        total = len(delayed)
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
    """The ``distributed`` client ``scheduler`` names, and whether this job owns (closes) it."""
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
