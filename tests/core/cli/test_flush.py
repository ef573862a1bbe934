"""Long-running verbs flush each record: a script reading their stdout through a pipe gets every record as it is
made, not when the verb ends (Python block-buffers a piped stdout; issue 31).

``serve --json``'s link, read from a pipe while it serves, is tested with the server in
``tests/core/serve/test_streaming.py``; here ``ls --json`` over a remote dataset whose host holds one
request back until the test has read the first record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import tensorstore as ts

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.serve.bodies import Body
from napari_shardscope.core.serve.server import ShardServer, StoreMount

#: The longest the held request waits for the test (then it is answered anyway, so nothing hangs).
HOLD_S = 120.0


def buffered_env() -> dict[str, str]:
    """The environment with Python's default output buffering (a user's shell has no ``PYTHONUNBUFFERED``;
    with it set, as on some CI machines, a verb that forgets to flush would still pass)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


class HeldMount(StoreMount):
    """A dataset served as stored, except that the second and later requests for ``held_key`` wait for ``release``.

    The first request of each chunk file is the listing's existence probe; the later ones come when
    ``ls`` reaches that chunk, after it has printed the records before it.
    """

    def __init__(self, store: object, held_key: str) -> None:
        super().__init__(store)  # type: ignore[arg-type]
        self.held_key = held_key
        self.opened: Counter[str] = Counter()
        self.holding = threading.Event()
        self.release = threading.Event()

    def open(self, key: str) -> Body | None:
        self.opened[key] += 1
        if key == self.held_key and self.opened[key] > 1:
            self.holding.set()
            self.release.wait(HOLD_S)
        return super().open(key)


def write_zarr3(path: Path) -> None:
    """A zarr v3 array of four chunk files (unsharded): ``ls`` reads each one's size in turn."""
    grid = {"name": "regular", "configuration": {"chunk_shape": [4, 8, 8]}}
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "create": True,
                   "metadata": {"shape": [4, 8, 32], "data_type": "uint8", "chunk_grid": grid}}).result()
    arr[...] = np.arange(4 * 8 * 32, dtype=np.uint8).reshape(4, 8, 32)


def test_ls_json_records_arrive_while_it_runs(tmp_path: Path) -> None:
    write_zarr3(tmp_path / "arr")
    mount = HeldMount(open_store(str(tmp_path / "arr")), "c/0/0/2")
    with ShardServer() as server:
        url = server.mount("data/arr", mount)
        # a timeout longer than the hold: the held request is waited for, not retried
        proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "--timeout", "600", "ls", url, "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=buffered_env())
        lines: list[bytes] = []
        first = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                first.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert mount.holding.wait(HOLD_S), "ls never reached the third chunk"
            # ls now waits for the server, its first two records printed: they must be in the pipe
            assert first.wait(30), "no record reached the pipe while ls was running"
            assert proc.poll() is None
            assert json.loads(lines[0])["chunk_key"] == "c/0/0/0"  # an unsharded array: chunk words
        finally:
            mount.release.set()
            proc.wait(timeout=120)
            reader.join(30)
            assert proc.stderr is not None
            err = proc.stderr.read()
    assert proc.returncode == 0, err.decode(errors="replace")
    assert [json.loads(line)["chunk_key"] for line in lines] == [f"c/0/0/{i}" for i in range(4)]


def test_a_reader_that_leaves_ends_the_verb_quietly(tmp_path: Path) -> None:
    """``shardscope ls … --json | head -1``: the records after the reader left end the verb with 0 and no
    "Exception ignored … BrokenPipeError" on stderr."""
    write_zarr3(tmp_path / "arr")
    mount = HeldMount(open_store(str(tmp_path / "arr")), "c/0/0/2")
    with ShardServer() as server:
        url = server.mount("data/arr", mount)
        proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "--timeout", "600", "ls", url, "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=buffered_env())
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert mount.holding.wait(HOLD_S), "ls never reached the third chunk"
            assert json.loads(proc.stdout.readline())["chunk_key"] == "c/0/0/0"
            proc.stdout.close()  # the reader leaves; the next record meets a closed pipe
        finally:
            mount.release.set()
            proc.wait(timeout=120)
        err = proc.stderr.read()
    assert (proc.returncode, err) == (0, b"")
