"""Bare arrays as labelmap bases through the remote round trip (issue 31, item 5).

A bare array — a zarr v3 array, a zarr v2 array, an N5 dataset, with no multiscale group — has one
scale whose key is ``""``: its documents sit at the dataset's root. ``clone --prefetch`` built
``"/.zarray"`` from it and refused the absolute key. Each kind is driven the way a user drives it,
every step a ``shardscope`` command line in a child process (the writer's steps and the clone share one,
the reader's steps another): create a labelmap over the base, edit and commit, push to a directory remote
and to S3 (moto), ``clone --prefetch``, then take the base away and, in a process that has never seen it,
read a voxel, export the version and serve it — all from the prefetched copy.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.bytestore.url import parse_url
from napari_shardscope.core.serve import load_state
from tests.cli_batch import run_commands
from tests.core.labelmap.volumes import voronoi_supervoxels
from tests.core.versioned.remotes.cli import STEP_TIMEOUT_S
from tests.moto_s3 import S3Server

SHAPE = (8, 32, 32)  # z, y, x


def _bare_zarr3(path: Path, data: np.ndarray) -> None:
    ts.open({"driver": "zarr3", "kvstore": f"file://{path}/", "create": True,
             "metadata": {"shape": list(data.shape), "data_type": "uint64", "dimension_names": ["z", "y", "x"],
                          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 16, 16]}},
                          "codecs": [{"name": "sharding_indexed", "configuration": {
                              "chunk_shape": [4, 8, 8], "codecs": [{"name": "bytes"}, {"name": "gzip"}]}}]},
             }).result().write(data).result()


def _bare_zarr2(path: Path, data: np.ndarray) -> None:
    import zarr

    z = zarr.create(shape=data.shape, chunks=(4, 16, 16), dtype=data.dtype, store=str(path), zarr_format=2,
                    fill_value=0)
    z[:] = data


def _bare_n5(path: Path, data: np.ndarray) -> None:
    ts.open({"driver": "n5", "kvstore": f"file://{path}/", "create": True,
             "metadata": {"dimensions": list(reversed(data.shape)), "blockSize": [16, 16, 4], "dataType": "uint64",
                          "compression": {"type": "gzip"}}}).result().write(data.T).result()


BARE: dict[str, Callable[[Path, np.ndarray], None]] = {"zarr3": _bare_zarr3, "zarr2": _bare_zarr2, "n5": _bare_n5}


def _kvstore(url: str) -> ts.KvStore:
    """``url`` opened as the library opens it: through its URL grammar, which names the S3 endpoint of
    ``AWS_ENDPOINT_URL`` in the spec (TensorStore in this process does not read that variable; a bare
    ``ts.KvStore.open("s3://…")`` here went to AWS itself, unreachable, and retried until killed)."""
    return ts.KvStore.open(parse_url(url.rstrip("/") + "/").kvstore).result()


def _upload(directory: Path, url: str) -> None:
    """Copy a dataset directory to ``url`` (an S3 prefix) key by key."""
    kv = _kvstore(url)
    for f in sorted(directory.rglob("*")):
        if f.is_file():
            kv.write(f.relative_to(directory).as_posix(), f.read_bytes()).result()


def _serve_chunk(repo: Path) -> tuple[tuple[slice, slice, slice], np.ndarray]:
    """``shardscope serve REPO`` running: one chunk of the version over HTTP (the second along x, as its
    ``info`` lays chunks out: serve answers only those), its box (z, y, x) and voxels; then Ctrl-C."""
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "serve", str(repo)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        link = proc.stdout.readline().strip()  # bounded: the server prints its link first or exits
        assert link.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        state = load_state(link)  # the link names the state document the server keeps
        source = state["layers"][0]["source"].removeprefix("precomputed://")
        with urllib.request.urlopen(source + "info", timeout=30) as resp:
            scale = json.loads(resp.read())["scales"][0]
        (cx, cy, cz), (sx, sy, sz) = scale["chunk_sizes"][0], scale["size"]
        z, y, x = slice(0, min(cz, sz)), slice(0, min(cy, sy)), slice(cx, min(2 * cx, sx))
        with urllib.request.urlopen(f"{source}{scale['key']}/{x.start}-{x.stop}_{y.start}-{y.stop}_"
                                    f"{z.start}-{z.stop}", timeout=30) as resp:
            body = resp.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        return (z, y, x), np.frombuffer(body, "<u8").reshape(z.stop - z.start, y.stop - y.start, x.stop - x.start)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def _steps(*commands: list[str]) -> list[Any]:
    """``shardscope`` command lines run in one child process; each must succeed."""
    done = run_commands(commands, timeout=STEP_TIMEOUT_S * len(commands))
    for proc in done:
        assert proc.returncode == 0, (f"{' '.join(proc.args)}: exit {proc.returncode}\n"
                                      f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")
    return done


def _round_trip(tmp_path: Path, base: str, remote: str, data: np.ndarray, gone: Callable[[], None], *,
                serve: bool) -> None:
    """Labelmap over ``base``, a merge, push to ``remote``, ``clone --prefetch``; after ``gone()`` the clone
    reads a voxel, exports the version and (``serve``) serves it, from its local copy alone."""
    a, b = tmp_path / "a", tmp_path / "b"
    svs = [int(s) for s in np.unique(data) if s]
    # The writer's steps and then the clone in one child process (tests/cli_batch.py: each through the console
    # script's main, on pipes; one interpreter start-up instead of nine). What the clone copied is read after
    # the base is gone, in other processes: a clone that kept pointing at the base fails there.
    *_, clone = _steps(["repo", "init", str(a)],
           ["labelmap", "create", str(a), "seg", base, "--block", "8"],
           ["repo", "commit", str(a), "main", "-m", "base"],
           ["repo", "branch", str(a), "main"],
           ["body", "merge", str(a), "main", "seg", str(svs[0]), str(svs[1])],
           ["repo", "commit", str(a), "main", "-m", "merge"],
           ["remote", "add", str(a), "origin", remote],
           ["push", str(a)],
           ["clone", remote, str(b), "--prefetch", "--json"])
    cloned = json.loads(clone.stdout)
    assert [p["labelmap"] for p in cloned["prefetched"]] == ["seg"] and cloned["prefetched"][0]["objects"] > 0
    gone()  # from here on only the prefetched copy holds the base
    want = np.where(data == svs[1], svs[0], data)
    z, y, x = (int(i[0]) for i in np.nonzero(data == svs[1]))
    label, _ = _steps(["label", str(b), "main", "seg", str(z), str(y), str(x), "--json"],
                      ["export", str(b), str(tmp_path / "out"), "--labelmap", "seg", "--version", "main",
                       "--format", "zarr3", "--chunk", "4,16,16"])
    at = json.loads(label.stdout)
    assert (at["supervoxel"], at["body"]) == (svs[1], svs[0])
    exported = ts.open({"driver": "zarr3", "kvstore": f"file://{tmp_path / 'out' / '0'}/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(exported), want)
    if serve:
        box, served = _serve_chunk(b)
        np.testing.assert_array_equal(served, want[box])


@pytest.mark.parametrize("kind", sorted(BARE))
@pytest.mark.parametrize("where", ["dir", "s3"])
def test_bare_array_base_clones_with_prefetch(kind: str, where: str, tmp_path: Path,
                                              request: pytest.FixtureRequest) -> None:
    data = voronoi_supervoxels(SHAPE, 20, seed=7)
    base = tmp_path / "base" / f"seg.{kind}"
    BARE[kind](base, data)
    remote = str(tmp_path / "remote") if where == "dir" else request.getfixturevalue("s3").url("team/repo")
    # serving reads the base through the same door as export: once per kind is enough
    _round_trip(tmp_path, str(base), remote, data, lambda: base.rename(base.with_name("moved-away")),
                serve=where == "dir")


def test_bare_zarr3_base_on_s3_clones_with_prefetch(tmp_path: Path, s3: S3Server) -> None:
    """The base itself on S3 (read through TensorStore's kvstore), the remote beside it; the bucket prefix
    holding the base is deleted after the clone."""
    data = voronoi_supervoxels(SHAPE, 20, seed=8)
    local = tmp_path / "upload" / "seg.zarr"
    _bare_zarr3(local, data)
    base = s3.url("lab/seg.zarr")
    _upload(local, base)
    shutil.rmtree(local)

    def gone() -> None:
        kv = _kvstore(base)
        kv.delete_range(ts.KvStore.KeyRange("", "")).result()
        assert not kv.list().result()

    _round_trip(tmp_path, base, s3.url("team/repo"), data, gone, serve=True)
