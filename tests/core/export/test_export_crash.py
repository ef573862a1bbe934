"""SIGKILL ``shardscope export`` at random moments: the source never changes, the destination never lies.

Each round starts ``shardscope export`` in a child process (``export_child``: the real command line, in a
process forked from a server that loaded Python and the package once per module), sleeps a random time
drawn from a seeded generator over the length of an uninterrupted export, and kills it with SIGKILL — no
cleanup, possibly in the middle of a shard write, of the ``--overwrite`` clearing, or of the metadata. Rounds alternate
between two different datasets exported to one destination (two volumes; a labelmap version's bodies
and its supervoxels), so a killed export also lands on a complete or half-written other dataset.
After every kill:

* the source (volume directories, or the repository and its base segmentation) is byte-identical,
  and a repository still verifies;
* every file in the destination is byte-identical to the file of that name in a complete export of
  one of the two datasets (exports are deterministic), or is one of our temporary files
  (``.shardscope-tmp-*``) that no key listing shows: never a torn or truncated file;
* a metadata document (precomputed ``info``; OME-Zarr ``zarr.json`` of the group or of one array)
  stands only over a complete dataset or array of one kind: all its shard files present, none of
  the other dataset's, and ``shardscope validate`` finds nothing wrong.

The two complete reference exports (their files, and the length over which kill points are drawn) and the
re-run below run in the test's own process through the command line's ``run``: only the killed exports need
a child.

After the last round the export is run again as a user would (``--overwrite`` when a dataset or the
debris of an unfinished export is in the way): it completes, the destination holds exactly the files
of a fresh export (no temporary file, no stale shard), and TensorStore reads the source's voxels.

``ROUNDS`` kills per case run in CI; the ``slow`` variant (``pytest -m slow``) kills ``SLOW_ROUNDS``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import RefusedDestinationError, exit_code_for
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ArraySource
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import create_repository, open_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.line_server import LineServer

ROOT = Path(__file__).resolve().parents[3]
#: A seeded handful per case in the default run (four cases; each round forks an export from the module's
#: export server and checks source and destination); the slow variant searches eight times as many kill points.
ROUNDS = 5
SLOW_ROUNDS = 40
TEMP_PREFIX = ".shardscope-tmp-"
#: Small chunks and shards: each export writes tens of shard files, so kills land between and inside them.
#: Precomputed at gzip level 5 (zarr3's own level), not the default 9: the level sets only how hard each chunk is
#: compressed, not what is written when (temporary file, rename, metadata last), and the kill points are drawn over
#: the measured length of the export, so they still span it from start to end; level 9 spent ~80% of each export
#: compressing random voxels (0.86 vs 0.15 CPU-s; the default level is exported by test_export_precomputed.py).
FORMAT_ARGS = {
    "precomputed": ["--format", "precomputed", "--chunk", "16,16,16", "--shard-bytes", "64K", "--gzip-level", "5"],
    "zarr3": ["--format", "zarr3", "--chunk", "16,16,16", "--shard-shape", "16,32,32"],
}


@dataclass
class Case:
    """Two datasets exported to one destination: the CLI arguments, the voxels, what must not change."""

    variants: dict[str, list[str]]  # name -> SOURCE and source options of `shardscope export`
    expected: dict[str, list[np.ndarray]]  # name -> voxels (z, y, x) of every scale
    protected: list[Path]  # directories the export reads and must leave byte-identical
    repository: Path | None = None


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def source_digests(case: Case) -> dict[Path, dict[str, str]]:
    """What the export reads, byte by byte; LMDB's ``lock.mdb`` is its table of live readers, not data."""
    return {p: {k: v for k, v in digests(p).items() if k != "lock.mdb"} for p in case.protected}


def _levels(data: np.ndarray) -> tuple[np.ndarray, ...]:
    return data, data[:, ::2, ::2].copy(), data[::2, ::4, ::4].copy()


@pytest.fixture(scope="module")
def volume_case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """Two precomputed volumes; in ``a`` the first 16 z-planes are zero (whole zarr shards stay unwritten)."""
    root = tmp_path_factory.mktemp("crash-volumes")
    rng = np.random.default_rng(11)
    a = rng.integers(1, 1000, size=(32, 128, 128), dtype=np.uint64)
    a[:16] = 0
    b = rng.integers(1, 1000, size=(32, 128, 128), dtype=np.uint64)
    resolutions = ((4.0, 4.0, 40.0), (8.0, 8.0, 40.0), (16.0, 16.0, 80.0))
    for name, data in (("a", a), ("b", b)):
        export_precomputed(ArraySource(_levels(data), resolutions), str(root / name), chunk_size=(64, 64, 16))
    return Case({"a": [str(root / "a")], "b": [str(root / "b")]},
                {"a": list(_levels(a)), "b": list(_levels(b))}, [root / "a", root / "b"])


@pytest.fixture(scope="module")
def labelmap_case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    """A committed labelmap version with a merge and a supervoxel split: its bodies, and its supervoxels."""
    root = tmp_path_factory.mktemp("crash-labelmap")
    base = voronoi_supervoxels((32, 96, 96), 40, seed=5)
    write_precomputed(root / "seg", base, ((1, 1, 1), (1, 2, 2), (2, 4, 4)), chunk_xyz=(32, 32, 16), sharded=True)
    with create_repository(root / "repo") as repo:
        svs = [int(s) for s in np.unique(base)]
        lm = create_labelmap(repo, "seg", root / "seg", agglomeration={s: s for s in svs}, block=16)
        v = lm.at("main")
        v.merge(svs[0], [svs[1], svs[2]])
        mask = base == svs[5]
        v.split_supervoxel(svs[5], np.argwhere(mask)[: int(mask.sum()) // 2])
        uuid = repo.commit(v.uuid, "edits").uuid
        done = lm.at(uuid)
        expected = {"bodies": [done.read_bodies(scale=s) for s in range(3)],
                    "supervoxels": [done.read_supervoxels(scale=s) for s in range(3)]}
    source = [str(root / "repo"), "--labelmap", "seg", "--version", uuid]
    return Case({"bodies": source, "supervoxels": [*source, "--supervoxels"]}, expected,
               [root / "seg", root / "repo"], root / "repo")


class ExportServer(LineServer):
    """``export_child``'s fork server: each round's export is a process of its own, forked from one that has
    loaded Python and the package once (see that module)."""

    def __init__(self, stderr: Path) -> None:
        self.stderr = stderr
        env = {**os.environ, "EXPORT_CHILD_STDERR": str(stderr),
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        super().__init__(["-m", "tests.core.export.export_child"], env, "the export server")

    def start(self, args: list[str]) -> None:
        """Fork an export of ``args``; it runs until :meth:`end`."""
        self._send(json.dumps(args))
        started = self._line()
        assert started.startswith("started "), started

    def end(self, *, kill: bool) -> tuple[int, str]:
        """SIGKILL the export unless it has ended (``kill``), or wait for it: its exit code (``-9``: killed)
        and stderr."""
        self._send("kill" if kill else "wait")
        answer = self._line()
        assert answer.startswith("exit "), answer
        return int(answer.split()[1]), self.stderr.read_text(errors="replace")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


@pytest.fixture(scope="module")
def export_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExportServer]:
    server = ExportServer(tmp_path_factory.mktemp("export-server") / "stderr")
    yield server
    server.close()


def _export(args: list[str]) -> tuple[int, str, float]:
    """Run an export to the end in this process (the command line's ``run``, as the child runs it): exit code,
    stderr, and seconds it took. The exports the test does not kill need no child: a child's start-up
    (Python, TensorStore, Dask: over a CPU second) is not part of them, and what they write is the same."""
    err = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stderr(err):
        code = run(["export", *args])
    return code, err.getvalue(), time.monotonic() - started


def _read_back(dest: Path, fmt: str, level: int) -> np.ndarray:
    if fmt == "precomputed":
        spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(dest)},
                "scale_index": level}
        return np.asarray(ts.open(spec).result()[..., 0].read().result()).T
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dest / str(level))}}
    return np.asarray(ts.open(spec).result().read().result())


def _metadata_scopes(fmt: str, files: set[str]) -> list[str]:
    """The prefixes whose metadata document is present: each must hold a complete dataset or array."""
    if fmt == "precomputed":
        return [""] if "info" in files else []
    return [name[: -len("zarr.json")] for name in sorted(files) if name.endswith("zarr.json")]


def check_destination(dest: Path, fmt: str, refs: dict[str, dict[str, str]]) -> None:
    """The invariants a killed export must leave (see the module docstring)."""
    if not dest.exists():
        return
    files = digests(dest)
    temps = [name for name in files if Path(name).name.startswith(TEMP_PREFIX)]
    listed = set(LocalByteStore(dest).list())
    assert not listed & set(temps), "a key listing shows a temporary file"
    for name, digest in files.items():
        if name in temps:
            continue
        assert any(ref.get(name) == digest for ref in refs.values()), \
            f"{name}: not the complete file of either export (torn, truncated or foreign)"
    data = {name: d for name, d in files.items() if name not in temps}
    for scope in _metadata_scopes(fmt, set(data)):
        present = {n: d for n, d in data.items() if n.startswith(scope)}
        wanted = [{n: d for n, d in ref.items() if n.startswith(scope)} for ref in refs.values()]
        assert present in wanted, f"metadata {scope or '/'}{'info' if fmt == 'precomputed' else 'zarr.json'} " \
                                  f"stands over an incomplete or mixed dataset"
        assert run(["validate", str(dest / scope), "--quiet"]) == 0


def crash_loop(case: Case, fmt: str, tmp_path: Path, rounds: int, seed: int, server: ExportServer) -> None:
    rng = random.Random(seed)
    before = source_digests(case)
    refs: dict[str, dict[str, str]] = {}
    durations = []
    for name, source in case.variants.items():
        ref = tmp_path / f"ref-{name}"
        code, err, took = _export([*source, str(ref), *FORMAT_ARGS[fmt], "--quiet"])
        assert code == 0, err
        refs[name] = digests(ref)
        durations.append(took)
        for level, expected in enumerate(case.expected[name]):
            np.testing.assert_array_equal(_read_back(ref, fmt, level), expected)
    first, second = refs.values()
    assert first != second, "the two datasets must differ, or a mix of them would go unnoticed"
    longest = max(durations)

    dest = tmp_path / "dest"
    killed = 0
    for _ in range(rounds):
        name = rng.choice(sorted(case.variants))
        server.start([*case.variants[name], str(dest), *FORMAT_ARGS[fmt], "--overwrite", "--quiet"])
        time.sleep(rng.uniform(0.0, 1.1 * longest))
        code, err = server.end(kill=True)
        if code == -signal.SIGKILL:
            killed += 1
        else:
            assert code == 0, err
        assert source_digests(case) == before, "the export changed its source"
        if case.repository is not None:
            with open_repository(case.repository) as repo:
                assert repo.verify() == []
        check_destination(dest, fmt, refs)
    assert killed > 0, "no round was killed before the export finished"

    # the user's re-run: plain first; --overwrite when a dataset or an unfinished export is in the way
    name = rng.choice(sorted(case.variants))
    args = [*case.variants[name], str(dest), *FORMAT_ARGS[fmt], "--quiet"]
    code, err, _ = _export(args)
    if code != 0:
        assert code == exit_code_for(RefusedDestinationError("")) and "--overwrite" in err, err
        code, err, _ = _export([*args, "--overwrite"])
    assert code == 0, err
    assert digests(dest) == refs[name], "the re-run left other files than a fresh export writes"
    for level, expected in enumerate(case.expected[name]):
        np.testing.assert_array_equal(_read_back(dest, fmt, level), expected)
    assert run(["validate", str(dest), "--quiet"]) == 0
    assert source_digests(case) == before


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_killed_volume_export(volume_case: Case, tmp_path: Path, fmt: str, export_server: ExportServer) -> None:
    crash_loop(volume_case, fmt, tmp_path, ROUNDS, seed=1, server=export_server)


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_killed_labelmap_export(labelmap_case: Case, tmp_path: Path, fmt: str, export_server: ExportServer) -> None:
    crash_loop(labelmap_case, fmt, tmp_path, ROUNDS, seed=2, server=export_server)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["volume", "labelmap"])
@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_killed_export_many_rounds(request: pytest.FixtureRequest, tmp_path: Path, kind: str, fmt: str,
                                   export_server: ExportServer) -> None:
    case = request.getfixturevalue(f"{kind}_case")
    crash_loop(case, fmt, tmp_path, SLOW_ROUNDS, seed=3, server=export_server)
