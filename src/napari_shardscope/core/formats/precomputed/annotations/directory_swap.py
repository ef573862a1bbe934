"""Replace a local directory atomically: write into a sibling staging directory, sync, swap it in by one rename.

Split from :mod:`.writer`, which writes a whole annotation collection: a reader of the directory must see
the old collection or the new one, never a mix, and a failed write must leave the old one in place.
On Linux the swap is one ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames, between which the
target is briefly absent but never half-written. The staged files are made durable together (one
``syncfs`` where Linux has it) before they are swapped in, so a crash cannot expose empty files.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.errors import RefusedDestinationError


def write_local_atomic(target: Path, write_all: Callable[[Writable], tuple[int, int]], *,
                        overwrite: bool) -> tuple[int, int]:
    """Write into a sibling staging directory, then swap it in with one rename."""
    target = Path(os.path.abspath(target))
    parent = target.parent
    token = secrets.token_hex(4)
    staging = parent / f".{target.name}.writing-{token}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as exc:
        raise storage_fault(exc, staging) from exc
    try:
        result = write_all(StagingWriter(staging))
        _fsync_tree(staging)
        if target.exists():
            if not overwrite:
                raise RefusedDestinationError(f"{target} appeared while writing; pass overwrite=True to replace it")
            old = parent / f".{target.name}.replaced-{token}"
            if _exchange(staging, target):
                os.rename(staging, old)  # the staging name now holds the old collection
            else:  # two renames: between them the target is briefly absent, never half-written
                os.rename(target, old)
                os.rename(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, target)
        _fsync_dir(parent)
        return result
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise storage_fault(exc, target) from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with ``renameat2(RENAME_EXCHANGE)``; ``False`` where that is unavailable."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(result == 0)


def _fsync_tree(root: Path) -> None:
    """Make the staged files durable before they are swapped in (a crash must not expose empty files).

    One ``syncfs`` of the staging directory's filesystem where Linux has it (an unsharded collection is
    one file per annotation: one fsync each costs milliseconds apiece), else each file's fsync.
    """
    fd = os.open(root, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        if int(libc.syncfs(fd)) == 0:
            return
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Writable(Protocol):
    """What the index writers need of a destination: a (possibly remote) store, or a staging directory."""

    @property
    def cheap_size(self) -> bool: ...

    def write(self, key: str, data: bytes) -> None: ...


class StagingWriter:
    """Plain file writes into a fresh staging directory (made durable together by :func:`_fsync_tree`).

    Nothing reads the staging directory until it is complete and renamed, so each file needs neither its
    own temporary name nor its own fsync; keys are the writer's own (``by_id/123``), never user input.
    """

    cheap_size = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dirs: set[str] = set()

    def write(self, key: str, data: bytes) -> None:
        directory, _, _ = key.rpartition("/")
        if directory not in self._dirs:
            (self.root / directory).mkdir(parents=True, exist_ok=True)
            self._dirs.add(directory)
        try:
            with open(self.root / key, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise storage_fault(exc, self.root / key) from exc
