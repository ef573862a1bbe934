"""The one translation of a local storage failure (``OSError``, an LMDB or SQLite error) into a typed error.

Why here, once: a full disk, a read-only mount and a refused permission reach us as ``OSError``
with an errno, or as a storage library's own exception whose message carries the C library's words
(LMDB: ``"mdb_txn_commit: No space left on device"``; SQLite: ``"database or disk is full"``,
``"attempt to write a readonly database"``). Each is something the user fixes outside shardscope
(free space, remount, chmod); none of them means the data is corrupt, and reporting a read-only
repository as corrupt sent users to repair intact data. :func:`storage_fault` names the path and
picks the :class:`StorageFaultError` subclass.

LMDB reports a write that ran out of space on some filesystems (tmpfs) as ``EIO``; an I/O error on
a filesystem with almost no room left is reported as a full disk, since that is what fixes it.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from napari_shardscope.core.errors import (
    DiskFullError,
    ReadOnlyStorageError,
    ResourceLimitError,
    StorageFaultError,
    StoragePermissionError,
)

#: Free space below which an I/O error is taken for a full disk (or 1 % of the filesystem, if larger).
NEARLY_FULL_BYTES = 4 * 1024 * 1024

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_FULL_WORDS = ("no space left", "disk is full", "disk full", "quota exceeded", "mdb_map_full")
_READ_ONLY_WORDS = ("read-only file system", "readonly database", "read only")
_PERMISSION_WORDS = ("permission denied", "operation not permitted")
_MEMORY_WORDS = ("cannot allocate memory", "out of memory")


def is_read_only_filesystem(path: str | os.PathLike[str]) -> bool:
    """Whether the filesystem holding ``path`` (or its nearest existing parent) is mounted read-only."""
    here = _existing_parent(Path(path))
    try:
        return bool(os.statvfs(here).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _existing_parent(path: Path) -> Path:
    """``path`` or its nearest existing parent; a path the OS cannot even look at (a name too long) counts as absent."""
    here = path
    while here != here.parent:
        try:
            if here.exists():
                break
        except OSError:  # ENAMETOOLONG and friends, which Path.exists() passes on
            pass
        here = here.parent
    return here


def _nearly_full(path: Path) -> bool:
    here = _existing_parent(path)
    try:
        usage = shutil.disk_usage(here)
    except OSError:
        return False
    return usage.free < max(NEARLY_FULL_BYTES, usage.total // 100)


def storage_fault(exc: BaseException, path: str | os.PathLike[str]) -> StorageFaultError:
    """The typed error for a storage failure ``exc`` while reading or writing ``path``.

    Returns
    -------
    StorageFaultError
        :class:`DiskFullError`, :class:`ReadOnlyStorageError`, :class:`StoragePermissionError`,
        :class:`ResourceLimitError` (out of memory or address space: LMDB maps its whole map size
        when it opens), or the base class for any other I/O error; raise it ``from exc``.
    """
    if isinstance(exc, StorageFaultError):
        return exc
    where = Path(path)
    code = exc.errno if isinstance(exc, OSError) else None
    text = str(exc).lower()
    detail = os.strerror(code) if code else (str(exc) or type(exc).__name__)
    if isinstance(exc, MemoryError) or code == errno.ENOMEM or any(word in text for word in _MEMORY_WORDS):
        return ResourceLimitError(f"out of memory or address space ({detail}): the process's memory limit "
                                  "(ulimit -v, a scheduler's limit) is too low to map it; the data is intact, "
                                  "not damaged; raise the limit or free memory", path=str(where))
    if code in _FULL_ERRNOS or any(word in text for word in _FULL_WORDS):
        return DiskFullError(f"no space left on the device ({detail}); free space or write elsewhere",
                             path=str(where))
    if code == errno.EROFS or any(word in text for word in _READ_ONLY_WORDS) or is_read_only_filesystem(where):
        return ReadOnlyStorageError(f"the filesystem is read-only ({detail}); the data is intact but cannot "
                                    "be written here", path=str(where))
    if code in (errno.EACCES, errno.EPERM) or any(word in text for word in _PERMISSION_WORDS):
        return StoragePermissionError(f"permission denied ({detail})", path=str(where))
    if (code == errno.EIO or "input/output error" in text or "disk i/o error" in text) and _nearly_full(where):
        return DiskFullError(f"I/O error with the filesystem nearly full ({detail}); free space or write "
                             "elsewhere", path=str(where))
    return StorageFaultError(f"I/O error: {detail}", path=str(where))
