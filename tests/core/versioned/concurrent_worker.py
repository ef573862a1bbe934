"""Worker processes for the concurrency tests (``python -m tests.core.versioned.concurrent_worker``).

``write REPO NAME N``: N read-modify-write increments of one shared counter (plus one own key
each) in the repository's open version, and every 10th step a new committed branch off the root;
``read REPO TARGET``: re-reads the counter, asserting it never goes backwards, until it reaches TARGET (the
writers are done: a condition, not a fixed time, so it reads exactly while they write; bounded by
:data:`READ_LIMIT_S`);
``hold REPO``: holds the write transaction until its standard input closes (the test says when).
"""

from __future__ import annotations

import sys
import time

from napari_shardscope.core.versioned import open_repository

INSTANCE = "kv"
#: Seconds the reader waits at most for the counter to reach its target (a bound on the loop, not a timing check).
READ_LIMIT_S = 120.0


def write(path: str, name: str, n: int, open_version: str) -> None:
    with open_repository(path, lock_timeout=60) as repo:
        for i in range(n):
            with repo.write(open_version) as w:
                count = int(w.get(INSTANCE, b"counter") or b"0")
                w.put(INSTANCE, b"counter", b"%d" % (count + 1))
                w.put(INSTANCE, f"{name}-{i:04d}".encode(), b"x")
            if i % 10 == 0:
                v = repo.new_version(repo.root, f"{name}-{i}")
                repo.commit(v, f"{name} branch {i}")


def read(path: str, target: int, open_version: str) -> None:
    last = -1
    reads = 0
    deadline = time.monotonic() + READ_LIMIT_S
    with open_repository(path) as repo:
        while last < target:
            assert time.monotonic() < deadline, f"the counter stayed at {last}, below {target}"
            with repo.read(open_version) as view:
                count = int(view.get(INSTANCE, b"counter") or b"0")
                assert count >= last, f"counter went back from {last} to {count}"
                mine = sum(1 for _ in view.keys(INSTANCE, prefix=b"A-")) + sum(
                    1 for _ in view.keys(INSTANCE, prefix=b"B-"))
                assert mine == count, f"snapshot shows {mine} keys but counter {count}"
            last = count
            reads += 1
    print(reads)


def hold(path: str) -> None:
    with open_repository(path) as repo, repo.write("main") as w:
        w.put(INSTANCE, b"held", b"1")
        print("holding", flush=True)
        sys.stdin.read()  # until the test closes our standard input


if __name__ == "__main__":
    cmd, repo_path, *rest = sys.argv[1:]
    if cmd == "write":
        write(repo_path, rest[0], int(rest[1]), rest[2])
    elif cmd == "read":
        read(repo_path, int(rest[0]), rest[1])
    else:
        hold(repo_path)
