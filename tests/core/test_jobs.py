"""The one Dask job runner export and the bulk label index share: order, progress, streaming, schedulers."""

from __future__ import annotations

import threading

import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.jobs import is_local, iter_tasks, job_scheduler, open_once, run_gathered, run_tasks


def square(x: int) -> int:
    return x * x


@pytest.mark.parametrize("scheduler", [None, "threads", "sync"])
def test_run_tasks_returns_results_in_task_order_and_reports_each_task(scheduler: str | None) -> None:
    seen: list[tuple[int, int, str]] = []
    out = run_tasks(square, list(range(20)), scheduler=scheduler, num_workers=3,
                    progress=lambda d, t, w: seen.append((d, t, w)), label="sq")
    assert out == [x * x for x in range(20)]
    assert [d for d, _, _ in seen] == list(range(1, 21)) and {(t, w) for _, t, w in seen} == {(20, "sq")}
    assert run_tasks(square, [], scheduler=scheduler) == []


def test_iter_tasks_streams_in_batches_so_at_most_one_batch_is_held() -> None:
    started: list[int] = []
    consumed: list[int] = []

    def record(x: int) -> int:
        started.append(x)
        return x * x

    seen: list[int] = []
    for i, result in iter_tasks(record, list(range(10)), scheduler="sync", batch=4,
                                progress=lambda d, t, w: seen.append(d)):
        assert result == i * i
        # tasks of later batches have not run yet while this result is consumed
        assert max(started) < (i // 4 + 1) * 4
        consumed.append(i)
    assert sorted(consumed) == list(range(10)) and seen == list(range(1, 11))


def test_schedulers_named_wrongly_are_argument_errors() -> None:
    assert is_local(None) and is_local("threads") and is_local("sync") and not is_local("tcp://h:1")
    with pytest.raises(ArgumentError, match="an address like tcp://host:8786"):
        run_tasks(square, [1], scheduler="cluster")
    with pytest.raises(ArgumentError, match=r"a distributed\.Client"):
        list(iter_tasks(square, [1], scheduler=42))


def test_a_scheduler_address_gets_its_own_client_for_the_job() -> None:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        assert run_tasks(square, list(range(6)), scheduler=cluster.scheduler_address) == [x * x for x in range(6)]
        with Client(cluster) as client:
            got = dict(iter_tasks(square, list(range(6)), scheduler=client))
            assert got == {x: x * x for x in range(6)}
            assert client.status == "running"  # a client the caller passed stays open


def test_open_once_opens_each_key_once_per_process() -> None:
    calls: list[str] = []

    def opener(name: str) -> object:
        calls.append(name)
        return object()

    key = ("test-jobs", id(calls))
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(open_once(key, lambda: opener("a"))))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["a"] and all(r is results[0] for r in results)
    assert open_once((*key, "other"), lambda: opener("b")) is not results[0] and calls == ["a", "b"]


def concat(task: str, parts: list[int]) -> str:
    return f"{task}:{','.join(str(p) for p in parts)}"


@pytest.mark.parametrize("scheduler", [None, "sync"])
def test_run_gathered_finishes_each_task_from_its_parts_in_order(scheduler: str | None) -> None:
    seen: list[tuple[int, int, str]] = []
    groups = [("a", [1, 2, 3]), ("b", [4]), ("c", [5, 6])]
    out = run_gathered(square, concat, groups, scheduler=scheduler, num_workers=2,
                       progress=lambda d, t, w: seen.append((d, t, w)), label="g")
    assert out == ["a:1,4,9", "b:16", "c:25,36"]
    assert seen == [(1, 3, "g"), (2, 3, "g"), (3, 3, "g")]  # progress counts tasks, not parts
    assert run_gathered(square, concat, [], scheduler=scheduler) == []


def test_run_gathered_spreads_the_parts_of_one_task_over_the_threads() -> None:
    barrier = threading.Barrier(2, timeout=30)  # both parts must run at once, or this times out
    threads: set[int] = set()

    def part(x: int) -> int:
        threads.add(threading.get_ident())
        barrier.wait()
        return x

    assert run_gathered(part, concat, [("only", [1, 2])], num_workers=2) == ["only:1,2"]
    assert len(threads) == 2


def test_job_scheduler_counts_the_slots_and_connects_an_address_once() -> None:
    from distributed import LocalCluster

    with job_scheduler(None, 3) as (sched, slots):
        assert sched is None and slots == 3
    with job_scheduler("sync", 3) as (sched, slots):
        assert sched == "sync" and slots == 1
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with job_scheduler(cluster.scheduler_address) as (client, slots):
            assert slots == 2
            assert run_gathered(square, concat, [("x", [1, 2]), ("y", [3])], scheduler=client) == ["x:1,4", "y:9"]
        assert client.status in ("closed", "closing")  # the job's own client is closed after


def test_run_gathered_in_threads_starts_parts_in_plan_order_and_finishes_each_task_after_its_last_part() -> None:
    """Each thread takes the next part of the plan (its own sequence rises); the thread ending a task's last part
    finishes it before taking another; progress is reported on the calling thread, task by task."""
    lock = threading.Lock()
    log: list[tuple[int, str, object]] = []  # (thread, "part"/"finish", what)
    caller = threading.get_ident()
    progress_threads: set[int] = set()

    def part(x: int) -> int:
        with lock:
            log.append((threading.get_ident(), "part", x))
        return x

    def finish(task: str, parts: list[int]) -> str:
        with lock:
            log.append((threading.get_ident(), "finish", task))
        return concat(task, parts)

    groups = [(f"t{i}", list(range(10 * i, 10 * i + n))) for i, n in enumerate([3, 1, 4, 1, 5, 9, 2, 6])]
    out = run_gathered(part, finish, groups, num_workers=3,
                       progress=lambda d, t, w: progress_threads.add(threading.get_ident()))
    assert out == [concat(t, parts) for t, parts in groups]
    assert progress_threads == {caller}
    for thread in {t for t, _, _ in log}:
        taken = [x for t, kind, x in log if t == thread and kind == "part"]
        assert taken == sorted(taken)  # in plan order, one list for all threads
    for task, parts in groups:  # the finish comes after all the task's parts, right after the last on its thread
        at = next(j for j, (_, kind, x) in enumerate(log) if kind == "finish" and x == task)
        assert {x for _, kind, x in log[:at] if kind == "part"} >= set(parts)
        own = [(kind, x) for t, kind, x in log[:at] if t == log[at][0]]
        assert own[-1][0] == "part" and own[-1][1] in parts


@pytest.mark.parametrize("workers", [1, 2])
def test_run_gathered_in_one_thread_runs_the_plan_in_order(workers: int) -> None:
    seen: list[object] = []

    def part(x: int) -> int:
        seen.append(x)
        return x

    def finish(task: str, parts: list[int]) -> str:
        seen.append(task)
        return task

    groups = [("a", [1, 2, 3]), ("b", [4]), ("c", [5, 6])]
    scheduler = "sync" if workers == 2 else None  # sync ignores num_workers; threads with one worker
    assert run_gathered(part, finish, groups, scheduler=scheduler, num_workers=workers) == ["a", "b", "c"]
    assert seen == [1, 2, 3, "a", 4, "b", 5, 6, "c"]


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failing_part_raises_its_own_error_and_stops_the_plan(workers: int) -> None:
    """The part's typed error comes out as it is; parts after it in the plan are not started (one thread), or
    only those the other threads took before the failure stopped the plan."""
    started: list[int] = []
    lock = threading.Lock()

    def part(x: int) -> int:
        with lock:
            started.append(x)
        if x == 5:
            raise ArgumentError(f"bad part {x}")
        return x

    groups = [(f"t{i}", [i]) for i in range(400)]
    with pytest.raises(ArgumentError, match="bad part 5"):
        run_gathered(part, concat, groups, num_workers=workers)
    assert len(started) < len(groups)
    if workers == 1:
        assert started == list(range(6))
    with pytest.raises(ArgumentError, match="bad finish"):
        run_gathered(square, lambda t, p: (_ for _ in ()).throw(ArgumentError("bad finish")), groups,
                     num_workers=workers)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_progress_callback_that_raises_stops_the_plan_and_leaves_no_thread_running(workers: int) -> None:
    """A caller cancels by raising from its progress callback: the error comes out, the job's threads are gone
    (one worker: nothing after the first task ran)."""
    started: list[int] = []

    def stop(done: int, total: int, label: str) -> None:
        raise ArgumentError("cancelled")

    before = threading.active_count()
    groups = [(f"t{i}", [i]) for i in range(400)]
    with pytest.raises(ArgumentError, match="cancelled"):
        run_gathered(lambda x: started.append(x) or x, concat, groups, num_workers=workers, progress=stop)
    assert threading.active_count() == before
    if workers == 1:
        assert started == [0]
