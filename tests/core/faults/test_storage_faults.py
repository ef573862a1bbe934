"""Storage faults on the versioned store: a full disk, a read-only filesystem and refused permissions
end in typed :class:`StoreError` subclasses naming the path, never a raw lmdb/sqlite/OSError, and
the repository stays openable with every committed version bit-identical afterwards.

The full disk is a 2 MiB tmpfs; read-only is the same tmpfs remounted ``ro`` (the tests run as
root, so ``chmod`` alone would not refuse anything). Both need ``mount``: skipped where it is not
allowed, with the reason.
"""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import (
    CorruptDataError,
    DiskFullError,
    ReadOnlyStorageError,
    StorageFaultError,
    StoragePermissionError,
    StoreError,
)
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ArraySource
from napari_shardscope.core.export.zarr3 import export_zarr3
from napari_shardscope.core.versioned import create_repository, open_repository
from napari_shardscope.core.versioned.keyvalue import open_keyvalue

ENGINES = ["lmdb", "sqlite"]


def _mount(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs at a fresh directory (unmounted afterwards)."""
    where = tmp_path / f"fs-{uuid.uuid4().hex[:8]}"
    where.mkdir()
    try:
        done = _mount(["-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)])
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _remount(where: Path, mode: str) -> None:
    done = _mount(["-o", f"remount,{mode}", str(where)])
    if done.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs {mode}: {done.stderr.strip()}")


def _committed_contents(path: Path) -> dict[str, dict[str, bytes]]:
    """Every committed version's key-value contents (by version uuid)."""
    with open_repository(path) as repo:
        kv = open_keyvalue(repo, "data")
        return {v.uuid: dict(kv.items(v)) for v in repo.versions() if v.locked}


def _repo_with_history(path: Path, engine: str) -> dict[str, dict[str, bytes]]:
    with create_repository(path, engine=engine) as repo:
        kv = open_keyvalue(repo, "data", create=True)
        kv.put("main", "a", b"first" * 100)
        repo.commit("main", "one")
        repo.new_version("main")
        kv.put("main", "b", os.urandom(1000))
        repo.commit("main", "two")
        repo.new_version("main")
    return _committed_contents(path)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_full_disk_is_a_typed_error_and_loses_no_commit(small_fs: Path, engine: str) -> None:
    path = small_fs / "repo"
    before = _repo_with_history(path, engine)
    with open_repository(path) as repo:
        kv = open_keyvalue(repo, "data")
        with pytest.raises(StoreError) as info:
            for i in range(64):  # 64 x 256 KiB is 8 times the filesystem
                kv.put("main", f"big{i}", os.urandom(256 * 1024))
                repo.commit("main", f"big {i}")
                repo.new_version("main")
        assert isinstance(info.value, DiskFullError), repr(info.value)
        assert str(small_fs) in str(info.value)
    assert {k: v for k, v in _committed_contents(path).items() if k in before} == before


@pytest.mark.parametrize("engine", ENGINES)
def test_a_read_only_repository_is_readable_and_refuses_writes_as_read_only(small_fs: Path, engine: str) -> None:
    path = small_fs / "repo"
    before = _repo_with_history(path, engine)
    _remount(small_fs, "ro")
    try:
        try:
            repo = open_repository(path)
        except StoreError as exc:  # an engine that must write to open: a typed read-only error, not corrupt
            assert isinstance(exc, ReadOnlyStorageError), repr(exc)
            assert str(path) in str(exc)
        except CorruptDataError as exc:
            pytest.fail(f"a read-only repository was reported as corrupt: {exc!r}")
        else:
            with repo:
                kv = open_keyvalue(repo, "data")
                assert {v.uuid: dict(kv.items(v)) for v in repo.versions() if v.locked} == before
                with pytest.raises(ReadOnlyStorageError, match=str(small_fs)):
                    kv.put("main", "c", b"x")
                    repo.commit("main", "three")
    finally:
        _remount(small_fs, "rw")
    assert _committed_contents(path) == before


# -- export into a full or read-only destination ------------------------------------------------------------
def _big_source() -> ArraySource:
    """8 MiB of incompressible uint64 voxels: four times the 2 MiB filesystem."""
    rng = np.random.default_rng(7)
    s0 = rng.integers(0, 2**62, size=(64, 128, 128), dtype=np.uint64)
    return ArraySource((s0,), ((4.0, 4.0, 40.0),))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_export_into_a_full_disk_is_a_typed_error_and_leaves_no_partial_file(small_fs: Path, fmt: str) -> None:
    dest = small_fs / "out"
    dest.mkdir()
    (dest / "notes.txt").write_bytes(b"kept")
    export = export_precomputed if fmt == "precomputed" else export_zarr3
    with pytest.raises(StoreError) as info:
        export(_big_source(), str(dest), num_workers=1, overwrite=True)
    assert isinstance(info.value, DiskFullError), repr(info.value)
    assert str(small_fs) in str(info.value)
    left = _files(dest)
    assert not [name for name in left if ".shardscope-tmp-" in name], sorted(left)
    assert "info" not in left and "zarr.json" not in left  # a failed export never publishes its metadata
    assert left["notes.txt"] == b"kept"


@pytest.mark.parametrize("fmt", ["precomputed", "zarr3"])
def test_export_into_a_read_only_destination_is_typed_and_changes_nothing(small_fs: Path, fmt: str) -> None:
    dest = small_fs / "out"
    dest.mkdir()
    (dest / "notes.txt").write_bytes(b"kept")
    before = _files(dest)
    _remount(small_fs, "ro")
    try:
        export = export_precomputed if fmt == "precomputed" else export_zarr3
        small = ArraySource((np.arange(4096, dtype=np.uint16).reshape(16, 16, 16),), ((1.0, 1.0, 1.0),), "image")
        with pytest.raises(ReadOnlyStorageError, match=str(small_fs)):
            export(small, str(dest / "new"), num_workers=1)
    finally:
        _remount(small_fs, "rw")
    assert _files(dest) == before


@pytest.mark.parametrize("engine", ENGINES)
def test_creating_a_repository_on_a_full_or_read_only_filesystem_is_typed(small_fs: Path, engine: str) -> None:
    (small_fs / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 4096))  # leave one page
    with pytest.raises(StoreError) as info:
        create_repository(small_fs / "full", engine=engine).close()
    assert isinstance(info.value, DiskFullError), repr(info.value)
    (small_fs / "filler").unlink()
    _remount(small_fs, "ro")
    try:
        with pytest.raises(ReadOnlyStorageError, match=str(small_fs)):
            create_repository(small_fs / "ro", engine=engine)
    finally:
        _remount(small_fs, "rw")


@pytest.mark.parametrize(("exc", "kind"), [
    (OSError(errno.ENOSPC, "No space left on device"), DiskFullError),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), DiskFullError),
    (OSError(errno.EROFS, "Read-only file system"), ReadOnlyStorageError),
    (PermissionError(errno.EACCES, "Permission denied"), StoragePermissionError),
    (OSError(errno.EPERM, "Operation not permitted"), StoragePermissionError),
    (Exception("database or disk is full"), DiskFullError),  # SQLite's words
    (Exception("attempt to write a readonly database"), ReadOnlyStorageError),
    (Exception("mdb_txn_commit: No space left on device"), DiskFullError),  # LMDB's
])
def test_each_storage_failure_has_its_typed_error(tmp_path: Path, exc: BaseException, kind: type[StoreError]) -> None:
    fault = storage_fault(exc, tmp_path / "repo")
    assert type(fault) is kind
    assert fault.path == str(tmp_path / "repo") and str(tmp_path / "repo") in str(fault)
    assert not isinstance(fault, CorruptDataError)


def test_an_io_error_on_a_roomy_filesystem_stays_an_io_error(tmp_path: Path) -> None:
    fault = storage_fault(OSError(errno.EIO, "Input/output error"), tmp_path)
    assert type(fault) is StorageFaultError and "I/O error" in str(fault)


def test_storage_faults_survive_pickling(tmp_path: Path) -> None:  # Dask workers send errors back
    import pickle

    fault = storage_fault(OSError(errno.ENOSPC, "full"), tmp_path / "x")
    again = pickle.loads(pickle.dumps(fault))
    assert type(again) is DiskFullError and again.path == fault.path and str(again) == str(fault)
