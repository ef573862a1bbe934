"""Creating and opening a repository: the directory, its marker file, the engine, the format check.

:func:`open_repository` never modifies a path that is not a repository and refuses, with a typed
error, a marker or engine files that do not belong together; an older format is upgraded in place
(:meth:`~.handle.RepositoryHandle._upgrade`). Split out of the repository module (issue 30), unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.bytestore import write_file_atomic
from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import ArgumentError, StorageFaultError
from napari_shardscope.core.versioned.access import Repository
from napari_shardscope.core.versioned.dag import ROOT_BRANCH, Version, new_uuid
from napari_shardscope.core.versioned.dagindex import DagWriter
from napari_shardscope.core.versioned.engines import ENGINES, engine_kind, open_engine
from napari_shardscope.core.versioned.errors import (
    LockTimeoutError,
    NotARepositoryError,
    RepositoryFormatError,
    StoreCorruptError,
    UnknownBranchError,
    UnknownVersionError,
)
from napari_shardscope.core.versioned.handle import FORMAT_NAME
from napari_shardscope.core.versioned.node import NodeContent
from napari_shardscope.core.versioned.upgrade import FORMAT_VERSION
from napari_shardscope.core.versioned.writer_lock import DEFAULT_TIMEOUT

MARKER_FILE = "shardscope-repository.json"
#: The default engine: on the labelmap's pattern (28 KB gets, 1,000-key scans, batched puts) LMDB is
#: the faster one; see bench/versioned.py.
DEFAULT_ENGINE = "lmdb"


def create_repository(path: str | os.PathLike[str] | None, *, engine: str | None = None,
                      durable: bool = True, lock_timeout: float = DEFAULT_TIMEOUT,
                      root: NodeContent | None = None) -> Repository:
    """Create a repository with one open root version on branch ``main``.

    Parameters
    ----------
    path
        A new or empty directory; None for an in-memory repository (tests, scratch work).
    engine
        ``lmdb`` (default), ``sqlite`` or ``memory``.
    durable
        Flush every commit to disk (False: faster bulk ingest, a crash may lose the last commits
        but never mixes states).
    lock_timeout
        Seconds a writer waits for another writer before :class:`LockTimeoutError`.
    root
        A clone's root, received from a remote: the root takes its UUID and commit record (its
        data is written later with :meth:`Repository.fill_root`, once the instances exist).
    """
    name = engine or (DEFAULT_ENGINE if path is not None else "memory")
    kind = engine_kind(name)
    directory: Path | None = None
    if path is not None:
        if not kind.keeps_files:
            raise ArgumentError(f"the {name} engine keeps no files; pass path=None")
        directory = Path(path)
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise ArgumentError(f"{directory} already exists and is not an empty directory")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a read-only or full filesystem, a refused permission
            raise storage_fault(exc, directory) from exc
    elif kind.keeps_files:
        raise ArgumentError(f"the {name} engine needs a path")
    kv = open_engine(name, directory, create=True, durable=durable)
    repo = Repository(kv, directory, lock_timeout=lock_timeout)
    if root is None:
        root_ = Version(uuid=new_uuid(), vid=1, parents=(), branch=ROOT_BRANCH, locked=False, message="",
                               created=time.time(), committed=None)
    else:
        root_ = Version(uuid=root.uuid, vid=1, parents=(), branch=root.branch, locked=True,
                               message=root.message, created=root.created, committed=root.committed)
    with kv.write() as txn:
        txn.put(K.FORMAT_KEY, json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION,
                                          "root": root_.uuid}).encode())
        txn.put(K.GENERATION_KEY, K.pack_u64(1))
        DagWriter(repo._index, txn, 1).add(root_)
    if directory is not None:
        try:
            _write_marker(directory, name, root_.uuid)
        except OSError as exc:
            repo.close()
            raise storage_fault(exc, directory / MARKER_FILE) from exc
    with kv.read() as txn:
        repo._open_state(txn)
    return repo


def _write_marker(directory: Path, engine: str, root: str) -> None:
    marker = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "engine": engine, "root": root}
    write_file_atomic(directory / MARKER_FILE, json.dumps(marker, indent=2).encode() + b"\n")


def open_repository(path: str | os.PathLike[str], *, durable: bool = True,
                    lock_timeout: float = DEFAULT_TIMEOUT) -> Repository:
    """Open an existing repository; never modifies a path that is not one.

    Raises
    ------
    NotARepositoryError
        ``path`` is missing, a plain file, or a directory without a repository marker.
    StoreCorruptError
        The marker is there but the engine files are unreadable or belong to another store.
    """
    directory = Path(path)
    if not directory.exists():
        raise NotARepositoryError(f"{directory}: no such repository")
    if not directory.is_dir():
        raise NotARepositoryError(f"{directory} is a file, not a repository directory")
    marker_path = directory / MARKER_FILE
    if not marker_path.is_file():
        raise NotARepositoryError(f"{directory}: not a repository (no {MARKER_FILE})")
    try:
        marker = json.loads(marker_path.read_bytes())
        if not isinstance(marker, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreCorruptError(f"{marker_path}: unreadable repository marker ({exc})") from exc
    if marker.get("format") != FORMAT_NAME:
        raise NotARepositoryError(f"{marker_path}: not a napari-shardscope repository marker")
    name = marker.get("engine")
    kind = ENGINES.get(name) if isinstance(name, str) else None
    if kind is None or not kind.keeps_files:
        raise StoreCorruptError(f"{marker_path}: unknown engine {name!r}")
    kv = open_engine(kind.name, directory, create=False, durable=durable)
    repo = Repository(kv, directory, lock_timeout=lock_timeout)
    try:
        with kv.read() as txn:
            fmt = repo._read_format(txn)
        if fmt.get("root") != marker.get("root"):
            raise StoreCorruptError(f"{directory}: engine files belong to another repository (root mismatch)")
        if int(fmt.get("version", 0)) < FORMAT_VERSION:
            repo._upgrade()
            if repo.upgraded_from is not None:
                with contextlib.suppress(OSError):  # the marker's version is informative; the engine's rules
                    _write_marker(directory, kind.name, str(fmt["root"]))
        with kv.read() as txn:
            repo._open_state(txn)
    except NotARepositoryError as exc:
        repo.close()
        raise StoreCorruptError(str(exc)) from exc
    except (StoreCorruptError, UnknownVersionError, UnknownBranchError, RepositoryFormatError, LockTimeoutError,
            StorageFaultError):
        repo.close()
        raise
    except Exception as exc:
        repo.close()
        raise StoreCorruptError(f"{directory}: unreadable store ({type(exc).__name__}: {exc})") from exc
    return repo
