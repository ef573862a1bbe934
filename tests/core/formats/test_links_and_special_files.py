"""A dangling link, a link loop or a special file where a chunk, shard or block should be (issue 27).

A truly absent key is fill, as every format's spec says. A directory entry that is there but
cannot be read is not absent: a dangling symbolic link (the data it pointed at is gone), a link
loop, a FIFO, a socket, a device or a directory where a data file should be. Before, zarr v3 and sharded
precomputed read a dangling link as fill and ``validate`` passed. Now, for every format, each of
them is a ``validate`` finding naming the key, and reading the volume is a typed error (never fill,
never a hang on the FIFO, which nothing may open).

Each format's checks run in a child process (``python -c``, the CLI as ``python -m napari_shardscope``)
with a timeout, so a FIFO that hangs a reader fails the test instead of hanging pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.cli_batch import run_commands
from tests.precomputed_data import SHARDING_IDENTITY_RAW, write_ts_volume
from tests.volume_cases import build_format_cases


def _can_make_devices() -> bool:
    """Whether this process may create device nodes (root, or CAP_MKNOD)."""
    probe = Path(tempfile.mkdtemp()) / "null"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except OSError:
        return False
    finally:
        shutil.rmtree(probe.parent, ignore_errors=True)
    return True


#: The hostile kinds that must be findings and read errors; ``missing`` must be neither. A character
#: device (/dev/null's numbers) where this process may create one.
KINDS = ("dangling_inside", "dangling_outside", "loop", "fifo", "socket", "directory",
         *(("device",) if _can_make_devices() else ()))

#: (name, dataset below the cases directory, a glob of its data files).
FORMATS = (
    ("precomputed_sharded", "pc_sharded", "*/*.shard"),
    ("precomputed_unsharded", "cases/pc_unsharded", "*/*-*_*-*_*-*"),
    ("zarr3_sharded", "cases/labels.zarr", "c/**/*"),
    ("zarr3_unsharded", "cases/image.ome.zarr/0", "c/**/*"),
    ("zarr2", "cases/v2labels.zarr", "[0-9]*/[0-9]*/[0-9]*"),
    ("n5", "cases/single.n5/raw", "[0-9]*/[0-9]*/[0-9]*"),
)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("links")
    sharding = {**SHARDING_IDENTITY_RAW, "shard_bits": 3}  # eight shards: one per kind, and more
    write_ts_volume(root / "pc_sharded", sharding, size=(40, 36, 20), chunk=(8, 8, 4), scales=1)
    build_format_cases(root / "cases")
    return root


def data_files(ds: Path, pattern: str) -> list[Path]:
    files = sorted(p for p in ds.glob(pattern) if p.is_file() and not p.is_symlink() and p.name not in
                   ("zarr.json", "attributes.json", ".zarray", ".zattrs", ".zgroup", "info"))
    assert len(files) >= len(KINDS) + 1, (ds, pattern, files)
    return files


def plant(path: Path, kind: str) -> None:
    """Replace the data file ``path`` by ``kind``."""
    path.unlink()
    if kind == "dangling_inside":
        os.symlink("no-such-chunk", path)
    elif kind == "dangling_outside":
        os.symlink("../" * 12 + "no-such-file-anywhere", path)
    elif kind == "loop":
        os.symlink(path.name, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        cwd = os.getcwd()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.chdir(path.parent)
            sock.bind(path.name)
        finally:
            os.chdir(cwd)
            sock.close()
    elif kind == "directory":
        path.mkdir()
        (path / "0").write_bytes(b"\0" * 8)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    elif kind != "missing":
        raise AssertionError(kind)


#: Run in the child for each (dataset copy, kind) in turn: validate through the API, then a read of everything;
#: one JSON line per copy. Each copy is opened afresh by its own path, so one copy's outcome cannot be another's.
CHILD = r"""
import json, sys
from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.volumes import open_volume
for root in sys.argv[1:]:
    out = {}
    try:
        out["problems"] = [p.key for p in open_dataset(root).inspector().validate()]
    except ShardscopeError as exc:
        out["problems"] = f"raised {type(exc).__name__}: {exc}"
    try:
        vol = open_volume(root)
        for level in vol.levels:
            level.array.read()
        out["read"] = "read"
    except ShardscopeError as exc:
        out["read"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out), flush=True)
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(("fmt", "rel", "pattern"), FORMATS, ids=[f[0] for f in FORMATS])
def test_each_unreadable_entry_is_a_finding_and_a_typed_read_error(datasets: Path, tmp_path: Path, fmt: str,
                                                                    rel: str, pattern: str) -> None:
    # One copy per kind (a read stops at the first bad entry); one child checks each copy in turn.
    copies = {}
    for kind in (*KINDS, "missing"):
        ds = tmp_path / kind / "ds"
        shutil.copytree(datasets / rel, ds, symlinks=True)
        target = data_files(ds, pattern)[1]
        plant(target, kind)
        copies[kind] = (ds, target.relative_to(ds).as_posix())
    done = run("-c", CHILD, *(str(ds) for ds, _ in copies.values()))
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    lines = done.stdout.splitlines()[-len(copies):]
    results = {kind: (key, json.loads(line)) for (kind, (_, key)), line in zip(copies.items(), lines, strict=True)}
    wrong = {}
    for kind, (key, got) in results.items():
        found = isinstance(got["problems"], list) and any(str(p).endswith(key) for p in got["problems"])
        if kind == "missing":
            if got["problems"] != [] or got["read"] != "read":  # absent is fill, as the specs say
                wrong[kind] = got
        elif not found or got["read"] == "read":
            wrong[kind] = got
    assert wrong == {}, wrong


@pytest.fixture(scope="module")
def cli_reports(datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, str], Any]]:
    """``shardscope validate --json`` of each format's copy with every kind planted: the planted keys and the
    run. The six command lines share one child process (``tests.cli_batch``: the console script's ``main`` on
    real pipes); what is tested is each one's output and exit code."""
    root = tmp_path_factory.mktemp("cli-reports")
    planted: dict[str, dict[str, str]] = {}
    commands = []
    for fmt, rel, pattern in FORMATS:
        ds = root / fmt / "ds"
        shutil.copytree(datasets / rel, ds, symlinks=True)
        keys = {}
        for kind, target in zip(KINDS, data_files(ds, pattern), strict=False):
            keys[kind] = target.relative_to(ds).as_posix()
            plant(target, kind)
        planted[fmt] = keys
        commands.append(["validate", "--json", str(ds)])
    runs = run_commands(commands, cwd=root)
    return {fmt: (planted[fmt], done) for (fmt, _, _), done in zip(FORMATS, runs, strict=True)}


@pytest.mark.parametrize("fmt", [f[0] for f in FORMATS])
def test_the_cli_reports_every_unreadable_entry_at_once(cli_reports: dict[str, tuple[dict[str, str], Any]],
                                                         fmt: str) -> None:
    keys, done = cli_reports[fmt]
    assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    problems = [p["key"] for p in json.loads(done.stdout)["problems"]]
    missed = {kind: key for kind, key in keys.items() if not any(str(p).endswith(key) for p in problems)}
    assert missed == {}, problems
