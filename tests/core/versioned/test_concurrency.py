"""Several processes on one repository: writers serialise with no lost update, readers see snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from napari_shardscope.core.versioned import (
    InstanceExistsError,
    LockTimeoutError,
    Repository,
    create_repository,
    open_repository,
)
from napari_shardscope.core.versioned.keyvalue import open_keyvalue
from tests.core.versioned.engine_hooks import HookedEngine

ROOT = Path(__file__).resolve().parents[3]
N = 120


def spawn(*args: str) -> subprocess.Popen[bytes]:
    """A worker process (``tests/core/versioned/concurrent_worker.py``); its standard input a pipe (``hold``
    holds the write transaction until it closes)."""
    return subprocess.Popen([sys.executable, "-m", "tests.core.versioned.concurrent_worker", *args], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_two_writer_processes_lose_nothing(tmp_path: Path, engine: str) -> None:
    path = str(tmp_path / "repo")
    with create_repository(path, engine=engine) as repo:
        repo.create_instance("kv", "keyvalue")
        repo.commit(repo.root, "root")
        work = repo.new_version(repo.root).uuid
    reader = spawn("read", path, str(2 * N), work)  # reads until the writers are done
    writers = [spawn("write", path, name, str(N), work) for name in ("A", "B")]
    for p in [*writers, reader]:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    assert int(out) > 0  # the reader made progress while the writers wrote
    with open_repository(path) as repo:
        with repo.read(work) as view:
            assert view.get("kv", b"counter") == b"%d" % (2 * N)
            for name in ("A", "B"):
                assert [k.decode() for k in view.keys("kv", prefix=name.encode())] == [
                    f"{name}-{i:04d}" for i in range(N)]
        names = {b.name for b in repo.branches()}
        assert names == {"main"} | {f"{name}-{i}" for name in ("A", "B") for i in range(0, N, 10)}
        assert all(repo.head(n).locked for n in names - {"main"})
        assert repo.verify() == []


def test_writer_in_another_process_makes_us_wait_then_time_out(tmp_path: Path) -> None:
    path = str(tmp_path / "repo")
    with create_repository(path) as repo:
        repo.create_instance("kv", "keyvalue")
    holder = spawn("hold", path)
    assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
    with open_repository(path, lock_timeout=0.3) as repo:
        with pytest.raises(LockTimeoutError, match=rf"pid {holder.pid}"), repo.write("main") as w:
            w.put("kv", b"mine", b"1")
        with repo.read("main") as view:  # reading is never blocked by the writer
            assert view.get("kv", b"held") is None
        holder.communicate(timeout=30)  # closes its standard input: it commits and exits
        assert holder.returncode == 0
        with repo.write("main", timeout=5) as w:  # once it is gone, writing works
            w.put("kv", b"mine", b"1")
        with repo.read("main") as view:
            assert view.get("kv", b"held") == b"1" and view.get("kv", b"mine") == b"1"


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_a_reader_thread_syncing_between_commit_and_apply_breaks_no_write(tmp_path: Path, engine: str) -> None:
    repo: Repository = create_repository(tmp_path / "repo", engine=engine)
    seen: list[int] = []

    def other_thread_reads() -> None:
        reader = threading.Thread(target=lambda: seen.append(len(repo.versions())))
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive()

    repo._engine = HookedEngine(repo._engine, after_write=other_thread_reads, keep=True)  # after every commit
    kv = open_keyvalue(repo, "kv", create=True)
    kv.put_many("main", {"k": b"0"})
    base = repo.commit("main", "base")
    mine = repo.new_version(base)
    alt = repo.new_version(base, "alt")
    kv.put_many(alt, {"k": b"alt"})
    repo.commit(mine, "mine")
    repo.commit(alt, "alt")
    merged = repo.merge(mine, alt, policy="theirs").version
    assert seen[-1] == 4 and len(seen) == 9  # every write (9) was raced by a sync that saw it
    assert [v.uuid for v in repo.versions()] == [base.uuid, mine.uuid, alt.uuid, merged.uuid]
    assert repo.version(merged.uuid).parents == (mine.uuid, alt.uuid) and repo.version(mine.uuid).locked
    assert kv.get(merged, "k") == b"alt" and repo.verify() == []
    repo._engine = repo._engine.engine
    repo.close()
    with open_repository(tmp_path / "repo") as again:
        assert [v.uuid for v in again.versions()] == [base.uuid, mine.uuid, alt.uuid, merged.uuid]


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_an_instance_adopted_elsewhere_meanwhile_is_judged_like_one_found(tmp_path: Path, engine: str) -> None:
    """Adopting an instance that another process adopted, with another configuration, between this one's
    look-up and its write is refused as if the look-up had found it, not answered with the other's."""
    repo: Repository = create_repository(tmp_path / "repo", engine=engine)
    other = open_repository(tmp_path / "repo")  # another process's handle (its own memory and lock)
    hooked = HookedEngine(repo._engine)
    repo._engine = hooked  # the real engine, one hook
    theirs: list[Any] = []
    # right after this handle's look-up read found no "seg", before its write transaction
    hooked.after_read = lambda: theirs.append(other.adopt_instance("seg", "keyvalue", {"from": "x"}))
    with pytest.raises(InstanceExistsError, match="another type or configuration"):
        repo.adopt_instance("seg", "keyvalue", {"from": "y"})
    assert theirs and theirs[0].config == {"from": "x"}
    assert repo.adopt_instance("seg", "keyvalue", {"from": "x"}) == theirs[0]  # the same one: adopted as is
    repo._engine = hooked.engine
    assert [i.config for i in repo.instances()] == [{"from": "x"}] and repo.verify() == []
    other.close()
    repo.close()
