"""A writer process for the crash test: a random stream of puts, deletes, commits and branches.

Run as ``python -m tests.core.versioned.crash_writer REPO SEED`` (one writer), or as
``python -m tests.core.versioned.crash_writer --serve``, the fork server the test uses (:func:`serve`); the
test SIGKILLs each writer at a random moment. Every write transaction updates the data keys *and* a
``manifest`` key listing the digest of every key, so after any crash each version's contents must match
its manifest exactly — a half-applied transaction would show up as a mismatch. A line ``committed UUID`` is printed (and
flushed) only after a commit has returned, so the test can check durability too.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys

from napari_shardscope.core.versioned import create_repository, open_repository
from tests.line_server import exit_forked

INSTANCE = "kv"
KEYS = [f"k{i:02d}" for i in range(24)]


def digest(value: bytes) -> str:
    return hashlib.sha1(value).hexdigest()


def setup(path: str, engine: str) -> None:
    """Create the repository the writers will work on."""
    with create_repository(path, engine=engine) as repo:
        repo.create_instance(INSTANCE, "keyvalue")


def run(path: str, seed: int) -> None:
    rng = random.Random(seed)
    repo = open_repository(path)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    n = 0
    while True:
        n += 1
        versions = repo.versions()
        open_versions = [v for v in versions if not v.locked]
        if not open_versions:
            parent = rng.choice([v for v in versions if v.locked])
            try:
                child = repo.new_version(parent, None if rng.random() < 0.5 else f"b{seed}-{n}")
            except Exception:  # e.g. the parent already has a continuing child
                child = repo.new_version(parent, f"b{seed}-{n}x")
            out.write(f"new {child.uuid}\n")
            out.flush()
            continue
        v = rng.choice(open_versions)
        roll = rng.random()
        if roll < 0.85:
            with repo.write(v) as w:
                manifest = json.loads(w.get(INSTANCE, b"manifest") or b"{}")
                for _ in range(rng.randint(1, 8)):
                    key = rng.choice(KEYS)
                    if rng.random() < 0.2:
                        w.delete(INSTANCE, key.encode())
                        manifest.pop(key, None)
                    else:
                        value = f"{v.uuid}:{n}:{key}:".encode() * rng.randint(1, 60)
                        w.put(INSTANCE, key.encode(), value)
                        manifest[key] = digest(value)
                w.put(INSTANCE, b"manifest", json.dumps(manifest, sort_keys=True).encode())
        elif roll < 0.95:
            repo.commit(v, f"commit {seed}-{n}")
            out.write(f"committed {v.uuid}\n")
            out.flush()
        else:
            repo.add_note(v, f"note {seed}-{n}")


def _writer(path: str, seed: int, fifo: str, stderr: str) -> None:
    """In the forked process: stdout is the FIFO ``fifo`` (the test reads it), stderr the file ``stderr``; the
    writer runs until it is killed (:func:`~tests.line_server.exit_forked` with 70 if it ever stops)."""

    def write() -> int:
        os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
        os.dup2(os.open(fifo, os.O_WRONLY), 1)  # waits for the test to open the FIFO's reading end
        sys.stdin.close()
        run(path, seed)
        return 70

    exit_forked(write)


def serve() -> None:
    """A fork server: every writer is a process of its own, killed with SIGKILL at a random moment of its work,
    but forked from this one, which has imported the package once (a new interpreter per writer cost 0.15
    CPU-s before its first line; nothing of the package has run here before a fork, no repository is open).

    Prints ``ready``, then serves rounds on stdin, one JSON line ``[REPO, SEED, FIFO, STDERR]`` each: it forks
    a writer (its stdout the FIFO, its stderr the file) and answers ``started PID``; then the line ``kill``:
    it SIGKILLs the writer unless it has ended (this process is its parent and has not reaped it, so the PID
    is still the writer's), reaps it and answers ``exit CODE`` (``-9``: killed).
    """
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        path, seed, fifo, stderr = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _writer(path, int(seed), fifo, stderr)
        out.write(f"started {pid}\n")
        out.flush()
        command = sys.stdin.readline().strip()
        assert command == "kill", command
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        out.write(f"exit {os.waitstatus_to_exitcode(status)}\n")
        out.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
    else:
        run(sys.argv[1], int(sys.argv[2]))
