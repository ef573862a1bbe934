"""Bare arrays as labelmap bases through the remote round trip (issue 31, item 5).

A bare array — a zarr v3 array, a zarr v2 array, an N5 dataset, with no multiscale group — has one
scale whose key is ``""``: its documents sit at the dataset's root. ``clone --prefetch`` built
``"/.zarray"`` from it and refused the absolute key. Each kind is driven the way a user drives it,
every step a ``shardscope`` command line in a child process (the writers' steps and the clones of all
cases share one, the readers' steps of all cases another): create a labelmap over the base, edit and
commit, push to a directory remote and to S3 (moto), ``clone --prefetch``, then take the base away and,
in a process that has never seen it, read a voxel, export the version and serve it — all from the
prefetched copy.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class RoundTrip:
    """One case: a labelmap over ``base``, a merge, push to ``remote``, ``clone --prefetch`` into ``work / "b"``;
    after ``gone()`` the clone reads a voxel, exports the version and (``serve``) serves it from its copy alone."""

    work: Path
    base: str
    remote: str
    data: np.ndarray
    gone: Callable[[], None]
    serve: bool
    writer: list[Any] = field(default_factory=list)  # the CompletedProcess of each writer step
    reader: list[Any] = field(default_factory=list)  # ... and of each reader step

    @property
    def svs(self) -> list[int]:
        return [int(s) for s in np.unique(self.data) if s]

    def writer_steps(self) -> list[list[str]]:
        a, b, svs = self.work / "a", self.work / "b", self.svs
        return [["repo", "init", str(a)],
                ["labelmap", "create", str(a), "seg", self.base, "--block", "8"],
                ["repo", "commit", str(a), "main", "-m", "base"],
                ["repo", "branch", str(a), "main"],
                ["body", "merge", str(a), "main", "seg", str(svs[0]), str(svs[1])],
                ["repo", "commit", str(a), "main", "-m", "merge"],
                ["remote", "add", str(a), "origin", self.remote],
                ["push", str(a)],
                ["clone", self.remote, str(b), "--prefetch", "--json"]]

    def reader_steps(self) -> list[list[str]]:
        b = self.work / "b"
        z, y, x = (int(i[0]) for i in np.nonzero(self.data == self.svs[1]))
        return [["label", str(b), "main", "seg", str(z), str(y), str(x), "--json"],
                ["export", str(b), str(self.work / "out"), "--labelmap", "seg", "--version", "main",
                 "--format", "zarr3", "--chunk", "4,16,16"]]


def _run_all(cases: list[RoundTrip], steps: Callable[[RoundTrip], list[list[str]]]) -> list[list[Any]]:
    """Every case's ``steps`` in one child process (tests/cli_batch.py: each through the console script's
    ``main``, on pipes), cut back into one list of results per case."""
    commands = [steps(case) for case in cases]
    done = run_commands([c for cmds in commands for c in cmds], timeout=STEP_TIMEOUT_S * sum(map(len, commands)))
    out, at = [], 0
    for cmds in commands:
        out.append(done[at:at + len(cmds)])
        at += len(cmds)
    return out


def _succeeded(done: list[Any]) -> None:
    for proc in done:
        assert proc.returncode == 0, (f"{' '.join(proc.args)}: exit {proc.returncode}\n"
                                      f"stdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")


def _dir_case(work: Path, kind: str, remote: str) -> RoundTrip:
    data = voronoi_supervoxels(SHAPE, 20, seed=7)
    base = work / "base" / f"seg.{kind}"
    BARE[kind](base, data)
    # serving reads the base through the same door as export: once per kind is enough
    return RoundTrip(work, str(base), remote, data, lambda: base.rename(base.with_name("moved-away")),
                     serve=not remote.startswith("s3://"))


def _s3_base_case(work: Path, s3: S3Server) -> RoundTrip:
    """The base itself on S3 (read through TensorStore's kvstore), the remote beside it; the bucket prefix
    holding the base is deleted after the clone."""
    data = voronoi_supervoxels(SHAPE, 20, seed=8)
    local = work / "upload" / "seg.zarr"
    _bare_zarr3(local, data)
    base = s3.url("lab/seg.zarr")
    _upload(local, base)
    shutil.rmtree(local)

    def gone() -> None:
        kv = _kvstore(base)
        kv.delete_range(ts.KvStore.KeyRange("", "")).result()
        assert not kv.list().result()

    return RoundTrip(work, base, s3.url("team/repo"), data, gone, serve=True)


WHERE = ("dir", "s3")
S3_BASE = "s3-base-zarr3"


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server) -> dict[str, RoundTrip]:
    """Every case's round trip, the writers' steps (and clones) of all cases in one child process, then every
    base taken away, then the readers' steps of all cases in another child process.

    Why together: each case is a dozen command lines whose cost was mostly two interpreter start-ups (numpy,
    TensorStore, the package); the cases share nothing but the processes (each its own base, repository,
    remote and clone). What the clone copied is still read after its base is gone, in a process that never
    saw any base: a clone that kept pointing at its base fails there. The tests below check each case.
    """
    with pytest.MonkeyPatch.context() as mp:
        for k, v in s3_server.env().items():
            mp.setenv(k, v)
        cases: dict[str, RoundTrip] = {}
        for where in WHERE:
            for kind in sorted(BARE):
                work = tmp_path_factory.mktemp(f"bare-{where}-{kind}")
                remote = str(work / "remote") if where == "dir" else S3Server(
                    s3_server.endpoint, s3_server.new_bucket()).url("team/repo")
                cases[f"{where}-{kind}"] = _dir_case(work, kind, remote)
        cases[S3_BASE] = _s3_base_case(tmp_path_factory.mktemp("bare-s3-base"),
                                       S3Server(s3_server.endpoint, s3_server.new_bucket()))
        for case, done in zip(cases.values(), _run_all(list(cases.values()), RoundTrip.writer_steps), strict=True):
            case.writer = done
        for case in cases.values():
            if all(proc.returncode == 0 for proc in case.writer):
                case.gone()  # from here on only the prefetched copy holds the base
        for case, done in zip(cases.values(), _run_all(list(cases.values()), RoundTrip.reader_steps), strict=True):
            case.reader = done
    return cases


def _check(case: RoundTrip) -> None:
    """What the case's steps printed and wrote: the clone prefetched the labelmap; the voxel, the export and
    (``serve``) a served chunk show the merge, read from the clone alone."""
    _succeeded(case.writer)
    cloned = json.loads(case.writer[-1].stdout)
    assert [p["labelmap"] for p in cloned["prefetched"]] == ["seg"] and cloned["prefetched"][0]["objects"] > 0
    _succeeded(case.reader)
    svs = case.svs
    want = np.where(case.data == svs[1], svs[0], case.data)
    at = json.loads(case.reader[0].stdout)
    assert (at["supervoxel"], at["body"]) == (svs[1], svs[0])
    exported = ts.open({"driver": "zarr3", "kvstore": f"file://{case.work / 'out' / '0'}/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(exported), want)
    if case.serve:
        box, served = _serve_chunk(case.work / "b")
        np.testing.assert_array_equal(served, want[box])


@pytest.mark.parametrize("kind", sorted(BARE))
@pytest.mark.parametrize("where", WHERE)
def test_bare_array_base_clones_with_prefetch(kind: str, where: str, round_trips: dict[str, RoundTrip]) -> None:
    _check(round_trips[f"{where}-{kind}"])


def test_bare_zarr3_base_on_s3_clones_with_prefetch(round_trips: dict[str, RoundTrip], s3: S3Server) -> None:
    """The base itself on S3 (read through TensorStore's kvstore), the remote beside it; the bucket prefix
    holding the base is deleted after the clone (``s3``: this process's environment names the server)."""
    _check(round_trips[S3_BASE])
