"""A writer process for the crash test: a random stream of puts, deletes, commits and branches.

Run as ``python -m tests.core.versioned.crash_writer REPO SEED``; the test SIGKILLs it at a random
moment. Every write transaction updates the data keys *and* a ``manifest`` key listing the digest
of every key, so after any crash each version's contents must match its manifest exactly — a
half-applied transaction would show up as a mismatch. A line ``committed UUID`` is printed (and
flushed) only after a commit has returned, so the test can check durability too.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys

from napari_shardscope.core.versioned import create_repository, open_repository

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


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]))
