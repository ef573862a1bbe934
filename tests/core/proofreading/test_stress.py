"""Three threads on one repository at once: the proofreading controller, the Repository API and a reader.

What a proofreader's napari session does while a script works on the same repository: the
controller's thread (the GUI's) edits, undoes, commits, branches, checks out and reads its state,
and hands branch merges and splits to a worker thread as the panels do; a second thread makes
branches of key-value data, writes, commits, merges and notes through the Repository API; a third
reads versions, branches, labelmap states at committed versions and ``verify()``. Operations are
drawn from a seeded generator (the thread interleaving is the machine's). Every failure must be a
typed refusal (a committed version, a conflict, a name taken, nothing to undo…); at the end the store
verifies, and every version's labelmap state loads from a fresh handle.

A short run (~2 s per engine) runs by default; ``pytest -m slow`` runs ~30 s per engine and seed. (It was
3 s; the run's CPU is its length, one GIL-bound core. Even a 1 s run reached every kind of operation the
3 s one did but the rare undo/redo, and each the short test asserts 5 times or more: ``gui merge`` 5-8,
``api branch+commit`` 14-19, ``read labelmap`` 800+; the slow run is where depth is searched.)
"""

from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from napari_shardscope.core.errors import (
    ArgumentError,
    ConflictError,
    NotFoundError,
    RefusedWriteError,
)
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.proofreading import ProofreadingController, ProofreadingSession
from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from napari_shardscope.core.versioned.keyvalue import open_keyvalue
from tests.core.labelmap.volumes import write_precomputed
from tests.core.proofreading.test_controller import BLOB_A, BLOB_B, dumbbell

#: What a user or a script may be told: everything else (corruption, engine errors, bugs) fails the run.
REFUSALS = (ArgumentError, NotFoundError, RefusedWriteError, ConflictError)
BODIES = (5, 10, 30, 40)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dumbbell") / "seg"
    write_precomputed(path, dumbbell(), ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 8, 4), sharded=True)
    return path


class Run:
    """Shared bookkeeping of one stress run: the deadline, refusals counted, failures kept."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.refused: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def going(self) -> bool:
        return time.monotonic() < self.deadline and not self.failures

    def attempt(self, name: str, op: Callable[[], Any]) -> Any:
        try:
            out = op()
        except REFUSALS as exc:
            with self.lock:
                self.refused[f"{name}: {type(exc).__name__}"] += 1
            return None
        except BaseException:
            with self.lock:
                self.failures.append(f"{name}:\n{traceback.format_exc()}")
            return None
        with self.lock:
            self.done[name] += 1
        return out


def api_thread(run: Run, repo: Repository, seed: int) -> None:
    """Key-value branches off the root, written, committed, merged and noted through the Repository API."""
    rng = random.Random(seed)
    heads: list[str] = []  # committed api versions (all descend from the root: no labelmap edits)
    n = 0
    while run.going():
        n += 1
        api_step(run, repo, rng, heads, f"{seed}-{n}")


def api_step(run: Run, repo: Repository, rng: random.Random, heads: list[str], tag: str) -> None:
    kv = open_keyvalue(repo, "kv")
    op = rng.random()
    if op < 0.35 or len(heads) < 2:
        parent = rng.choice(heads) if heads and rng.random() < 0.5 else repo.root.uuid

        def grow() -> str:
            v = repo.new_version(parent, f"api{tag}")
            kv.put_many(v, {f"k{rng.randrange(8)}": tag.encode()})
            return repo.commit(v, f"api {tag}").uuid

        made = run.attempt("api branch+commit", grow)
        if made:
            heads.append(made)
    elif op < 0.55:
        a, b = rng.sample(heads, 2)

        def merge() -> str:
            m = repo.merge(a, b, policy=rng.choice(["ours", "theirs"]), branch=f"apim{tag}").version
            return repo.commit(m, f"api merge {tag}").uuid

        made = run.attempt("api merge+commit", merge)
        if made:
            heads.append(made)
    elif op < 0.65:
        target = rng.choice(heads)
        run.attempt("api note", lambda: repo.add_note(target, f"note {tag}"))
    else:
        target = rng.choice(heads)
        run.attempt("api read", lambda: (repo.versions(), repo.branches(), kv.get(target, "k1"),
                                         repo.ancestry(target)))


def reader_thread(run: Run, repo: Repository, seed: int) -> None:
    """Versions, branches, labelmap states at committed versions, the open head's state, ``verify``."""
    rng = random.Random(seed + 1)
    lm = open_labelmap(repo, "seg")
    while run.going():
        op = rng.random()
        if op < 0.5:
            run.attempt("read dag", lambda: (len(repo.versions()), repo.branches(), repo.head("main")))
        elif op < 0.95:
            def bodies() -> Any:
                committed = [v for v in repo.versions() if v.locked]
                v = rng.choice(committed)
                return lm.at(v.uuid).bodies_of(list(BODIES))

            run.attempt("read labelmap", bodies)
        else:
            def verify() -> None:
                problems = repo.verify()
                assert problems == [], problems

            run.attempt("verify", verify)


class Gui:
    """The controller's thread: what a proofreader clicks, with merges and splits in a worker thread."""

    def __init__(self, run: Run, c: ProofreadingController, queued: list[Callable[[], None]], seed: int) -> None:
        self.run, self.c, self.queued = run, c, queued
        self.rng = random.Random(seed + 2)
        self.mine = {"main"}  # the branches the controller made: it checks out and merges only these
        self.n = 0

    def deliver(self) -> None:
        while self.queued:
            self.queued.pop(0)()

    def in_worker(self, job: Any) -> None:
        """Run ``job`` in a worker while this thread keeps reading the controller's state, then finish it."""
        out: list[Any] = []
        err: list[BaseException] = []

        def work() -> None:
            try:
                out.append(job.run())
            except BaseException as exc:  # given to job.fail on this thread, as a GUI does
                err.append(exc)

        t = threading.Thread(target=work)
        t.start()
        while t.is_alive():
            self.run.attempt("gui state while a job runs", lambda: self.c.state)
            self.deliver()
            t.join(0.01)
        self.deliver()
        if err:
            job.fail(err[0])
            raise err[0]
        job.finish(out[0])

    def step(self) -> None:
        c, rng = self.c, self.rng
        self.n += 1
        v = c.version
        assert v is not None
        op = rng.random()
        if not v.version.locked:
            if op < 0.45:
                def merge() -> None:
                    bodies = sorted({v.body_of(sv) for sv in BODIES})  # distinct bodies that exist here
                    if len(bodies) < 2:
                        c.undo()
                        return
                    a, b = rng.sample(bodies, 2)
                    c.select(a)
                    c.add_to_selection(b)
                    c.merge()

                self.run.attempt("gui merge", merge)
            elif op < 0.55:
                def split() -> None:
                    c.select(v.body_at(BLOB_A))
                    c.start_split()
                    c.add_seeds(1, [BLOB_A])
                    c.add_seeds(2, [BLOB_B])
                    self.in_worker(c.split_job())

                self.run.attempt("gui split job", split)
                c.cancel_split()
            elif op < 0.7:
                self.run.attempt("gui undo", c.undo)
            elif op < 0.78:
                self.run.attempt("gui redo", c.redo)
            else:
                self.run.attempt("gui commit", lambda: c.commit(f"gui {self.n}"))
            return
        if op < 0.3:
            name = f"c{self.n}"
            if self.run.attempt("gui branch", lambda: c.branch(name)) is not None:
                self.mine.add(name)
        elif op < 0.5:
            self.run.attempt("gui continue", lambda: c.branch(None))
        elif op < 0.75:
            theirs = [b for b in c.state.merge_candidates if b in self.mine]
            if theirs:
                def merge_branch() -> None:
                    plan = c.plan_branch_merge(rng.choice(theirs))
                    for conflict in plan.conflicts:
                        c.choose(conflict.key, rng.choice(["ours", "theirs"]))
                    self.in_worker(c.merge_branch_job())

                self.run.attempt("gui branch merge job", merge_branch)
        else:
            branch = rng.choice(sorted(self.mine))
            self.run.attempt("gui checkout", lambda: c.checkout(branch))
        self.run.attempt("gui state", lambda: c.state)
        self.deliver()


def stress(path: Path, base: Path, engine: str, seed: int, seconds: float) -> Run:
    repo = create_repository(path, engine=engine)
    try:
        create_labelmap(repo, "seg", base, block=8)
        open_keyvalue(repo, "kv", create=True)
    finally:
        repo.close()
    queued: list[Callable[[], None]] = []
    c = ProofreadingController(ProofreadingSession(dispatch=queued.append))
    c.connect(path)
    c.commit("base")  # the root: api branches start from it
    c.branch(None)
    repo = c.session.repo
    assert repo is not None
    run = Run(seconds)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # many more thread switches (GIL hand-overs) than the 5 ms default
    threads = [threading.Thread(target=api_thread, args=(run, repo, seed), name="api"),
               threading.Thread(target=reader_thread, args=(run, repo, seed), name="reader")]
    for t in threads:
        t.start()
    gui = Gui(run, c, queued, seed)
    try:
        while run.going():
            gui.step()
    finally:
        sys.setswitchinterval(switch)
        run.deadline = 0.0
        for t in threads:
            t.join(120)
        alive = [t.name for t in threads if t.is_alive()]
        assert not alive, alive
    gui.deliver()
    assert not run.failures, "\n".join(run.failures)
    assert repo.verify() == []
    c.disconnect()
    with open_repository(path) as again:
        assert again.verify() == []
        lm = open_labelmap(again, "seg")
        for v in again.versions():  # every version's state replays from the store
            lm.at(v.uuid).bodies_of(list(BODIES))
    return run


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_three_threads_on_one_repository_briefly(tmp_path: Path, base: Path, engine: str) -> None:
    run = stress(tmp_path / "repo", base, engine, seed=7, seconds=2.0)
    assert run.done["gui merge"] and run.done["api branch+commit"] and run.done["read labelmap"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_three_threads_on_one_repository_for_half_a_minute(tmp_path: Path, base: Path, engine: str,
                                                           seed: int) -> None:
    run = stress(tmp_path / "repo", base, engine, seed=seed, seconds=30.0)
    for op in ("gui merge", "gui commit", "gui branch", "gui branch merge job", "gui split job",
               "api branch+commit", "api merge+commit", "read labelmap", "verify"):
        assert run.done[op], (op, run.done, run.refused)
