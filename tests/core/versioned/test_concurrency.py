"""Several processes on one repository: writers serialise with no lost update, readers see snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from napari_shardscope.core.versioned import LockTimeoutError, create_repository, open_repository

ROOT = Path(__file__).resolve().parents[3]
N = 120


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.core.versioned.concurrent_worker", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_two_writer_processes_lose_nothing(tmp_path: Path, engine: str) -> None:
    path = str(tmp_path / "repo")
    with create_repository(path, engine=engine) as repo:
        repo.create_instance("kv", "keyvalue")
        repo.commit(repo.root, "root")
        work = repo.new_version(repo.root).uuid
    reader = spawn("read", path, "3", work)
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
    holder = spawn("hold", path, "3")
    assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
    with open_repository(path, lock_timeout=0.3) as repo:
        with pytest.raises(LockTimeoutError, match=rf"pid {holder.pid}"), repo.write("main") as w:
            w.put("kv", b"mine", b"1")
        with repo.read("main") as view:  # reading is never blocked by the writer
            assert view.get("kv", b"held") is None
        holder.communicate(timeout=30)
        with repo.write("main", timeout=5) as w:  # once it is gone, writing works
            w.put("kv", b"mine", b"1")
        with repo.read("main") as view:
            assert view.get("kv", b"held") == b"1" and view.get("kv", b"mine") == b"1"
