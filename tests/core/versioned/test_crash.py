"""SIGKILL a writer at random moments; every reopening must find a consistent, durable store.

Each round starts a writer process (``crash_writer``: forked from its fork server, which imported the
package once per module), lets it run a random few milliseconds of puts, deletes, commits and branches,
and kills it with SIGKILL — no cleanup, no atexit, possibly mid-transaction or mid-fsync. Then the
repository is reopened and checked:

* ``verify()`` finds no structural problem (DAG, change index, keys naming known versions);
* every version seen before is still there with the same parents and branch, and a version once
  committed is still committed with the same message and reads exactly the same data (a random
  sample of them after each kill, all of them after the last: scanning every version each round
  would make the test quadratic);
* every version whose commit the writer reported is committed (durability);
* every version's data matches its manifest (each write transaction was all or nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from napari_shardscope.core.versioned import Repository, Version, open_repository
from tests.core.versioned.crash_writer import INSTANCE, setup
from tests.line_server import LineServer

ROOT = Path(__file__).resolve().parents[3]
#: Kills per engine in every run (each a writer process of its own); the ``slow`` variant
#: (``pytest -m slow``) kills ``SLOW_KILLS`` times. Half the rounds kill after a commit, half at once.
KILLS = 16
SLOW_KILLS = 100


def contents(repo: Repository, v: Version) -> dict[bytes, bytes]:
    with repo.read(v) as view:
        return dict(view.scan(INSTANCE))


class WriterServer(LineServer):
    """``crash_writer --serve``: each round's writer is forked from it (see :func:`~.crash_writer.serve`)."""

    def __init__(self) -> None:
        super().__init__(["-m", "tests.core.versioned.crash_writer", "--serve"],
                         {**os.environ, "PYTHONPATH": str(ROOT)}, "the writer server")

    def start(self, path: str, seed: int, where: Path) -> int:
        """Fork a writer on ``path``: the reading end of its stdout (unbuffered), its stderr in ``where/stderr``."""
        fifo = where / "stdout.fifo"
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
        self._send(json.dumps([path, seed, str(fifo), str(where / "stderr")]))
        started = self._line()
        assert started.startswith("started "), started
        # non-blocking: a writer that died before opening its end cannot hang the test (reads wait in select)
        return os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def kill(self) -> int:
        """SIGKILL the writer (unless it has ended) and reap it: its exit code (``-9``: killed)."""
        self._send("kill")
        answer = self._line()
        assert answer.startswith("exit "), answer
        return int(answer.split()[1])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


@pytest.fixture(scope="module")
def writers() -> Iterator[WriterServer]:
    server = WriterServer()
    yield server
    server.close()


def read_until(fd: int, done: Callable[[bytes], bool], size: int, timeout: float = 60.0) -> bytes:
    """What the writer writes on ``fd`` (its FIFO, non-blocking) until ``done(seen)``, EOF or ``timeout``,
    read ``size`` bytes at a time."""
    seen = b""
    deadline = time.monotonic() + timeout
    while not done(seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, size)
        except BlockingIOError:
            continue
        if not chunk:
            break
        seen += chunk
    return seen


def read_line(fd: int) -> bytes:
    """One line (byte by byte: nothing after it is consumed), or what came before EOF."""
    return read_until(fd, lambda seen: seen.endswith(b"\n"), 1)


def wait_for_commit(fd: int) -> bytes:
    """The writer's output up to and including its first ``committed`` line (bounded).

    The kill that follows then lands after at least one commit, so the check below that writers
    committed many versions holds on a slow or loaded machine, not only on a fast one.
    """
    return read_until(fd, lambda seen: b"committed " in seen, 4096)


def read_to_end(fd: int) -> bytes:
    """The rest of a killed writer's output (EOF: it is gone, and nothing else writes its FIFO)."""
    return read_until(fd, lambda seen: False, 1 << 16)


def check_manifest(data: dict[bytes, bytes], v: Version) -> None:
    manifest = json.loads(data.get(b"manifest", b"{}"))
    actual = {k.decode(): hashlib.sha1(val).hexdigest() for k, val in data.items() if k != b"manifest"}
    assert actual == manifest, f"version {v.uuid}: data and manifest disagree (a torn transaction)"


def identity(v: Version) -> tuple[object, ...]:
    return (v.parents, v.branch, v.created)


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_sigkill_during_writes_keeps_committed_versions(tmp_path: Path, engine: str, writers: WriterServer) -> None:
    kill_loop(tmp_path, engine, KILLS, writers, seed=1234)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_many_sigkills_during_writes_keep_committed_versions(tmp_path: Path, engine: str,
                                                             writers: WriterServer) -> None:
    kill_loop(tmp_path, engine, SLOW_KILLS, writers, seed=4321)


def kill_loop(tmp_path: Path, engine: str, kills: int, writers: WriterServer, *, seed: int) -> None:
    """``kills`` rounds of start a writer, SIGKILL it, reopen and check (the module's docstring)."""
    path = str(tmp_path / "repo")
    setup(path, engine)
    rng = random.Random(seed)
    seen: dict[str, tuple[object, ...]] = {}
    frozen: dict[str, tuple[str, dict[bytes, bytes]]] = {}  # committed uuid -> (message, data)
    reported: set[str] = set()
    killed_mid_work = 0
    for round_ in range(kills):
        stdout = writers.start(path, round_, tmp_path)
        try:
            ready = read_line(stdout)
            assert ready == b"ready\n", (tmp_path / "stderr").read_text(errors="replace") + repr(ready)
            early = b""
            if round_ % 2:  # every other round: let the writer commit once first, however slow the machine is
                early = wait_for_commit(stdout)
            time.sleep(rng.uniform(0.0, 0.08))
            code = writers.kill()
            out = early + read_to_end(stdout)
        finally:
            os.close(stdout)
        assert code == -signal.SIGKILL, (tmp_path / "stderr").read_text(errors="replace")
        killed_mid_work += 1
        reported |= {line.split()[1] for line in out.decode().splitlines() if line.startswith("committed ")}

        with open_repository(path) as repo:
            assert repo.verify() == []
            versions = {v.uuid: v for v in repo.versions()}
            for uuid, ident in seen.items():
                assert uuid in versions, f"version {uuid} vanished"
                assert identity(versions[uuid]) == ident
            for uuid in reported:
                assert versions[uuid].locked, f"reported commit of {uuid} was lost"
            last = round_ == kills - 1
            sample = frozen if last else dict(rng.sample(sorted(frozen.items()), min(12, len(frozen))))
            for uuid, (message, data) in sample.items():
                v = versions[uuid]
                assert v.locked and v.message == message
                assert contents(repo, v) == data, f"committed version {uuid} changed"
            for v in versions.values():
                if v.uuid in frozen and not last:
                    continue
                data = contents(repo, v)
                check_manifest(data, v)
                seen.setdefault(v.uuid, identity(v))
                if v.locked and v.uuid not in frozen:
                    frozen[v.uuid] = (v.message, data)
    assert killed_mid_work == kills
    # every other round waited for a commit before its kill: at least that many committed versions
    assert len(frozen) >= kills // 2, "the writers should have committed many versions"
