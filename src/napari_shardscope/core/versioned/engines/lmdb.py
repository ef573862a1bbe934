"""The LMDB engine (py-lmdb): a memory-mapped copy-on-write B+tree, the default engine.

Why LMDB suits the versioned store: reads are served straight from the page cache through a
memory map (no per-read syscall, no SQL layer), readers never block the writer nor each other,
several processes share one environment, and a commit is a single atomic meta-page switch, so a
crash (even SIGKILL mid-commit) leaves the old or the new tree, never a mix. LMDB's own writer
mutex is robust (a killed writer does not wedge it); the repository adds its own timed lock on
top so a waiting writer gets a clear error instead of blocking forever.

LMDB forbids opening one environment twice in one process (closing either would drop the other's
POSIX locks), so environments are shared per process with a reference count. They are keyed by the
data file's device and inode, not by its path: a repository deleted and created again at the same
path is a new file, and handing it the deleted file's environment would send its commits into a
file nobody can open again.

Storage faults are typed (:func:`~napari_shardscope.core.bytestore.oserrors.storage_fault`): a
full disk during a commit aborts that commit (LMDB's meta page still points at the last good
tree) and raises :class:`DiskFullError`. A repository on a read-only filesystem opens read-only
(LMDB cannot create its lock file there, and no writer can exist): reads work, a write raises
:class:`ReadOnlyStorageError` instead of the repository being reported as corrupt.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from napari_shardscope.core.bytestore.oserrors import is_read_only_filesystem, storage_fault
from napari_shardscope.core.errors import ReadOnlyStorageError, StorageFaultError
from napari_shardscope.core.versioned.engines.protocol import (
    ReadTxn,
    WriteTxn,
    check_items,
    check_key,
    check_range,
    closed_error,
)
from napari_shardscope.core.versioned.errors import NotARepositoryError, StoreCorruptError

#: Virtual size reserved for the map; LMDB grows the file only as data arrives (sparse on Linux).
MAP_SIZE = 2**40
DATA_FILE = "data.mdb"

#: ``(pid, st_dev, st_ino)`` of an open data file -> ``[environment, reference count]``.
_ENVS: dict[tuple[int, int, int], list[Any]] = {}
_ENVS_LOCK = threading.Lock()


def _file_key(data: Path) -> tuple[int, int, int] | None:
    """The cache key of the data file at ``data``, ``None`` when there is none yet."""
    try:
        st = data.stat()
    except FileNotFoundError:
        return None
    return (os.getpid(), st.st_dev, st.st_ino)


def _acquire_env(directory: Path, *, create: bool, durable: bool) -> Any:
    data = directory / DATA_FILE
    with _ENVS_LOCK:
        key = _file_key(data)
        entry = _ENVS.get(key) if key is not None else None
        if entry is not None:
            entry[1] += 1
            return entry[0]
        if not create:
            if not data.is_file():
                raise NotARepositoryError(f"{directory}: no LMDB data file {DATA_FILE}")
            if data.stat().st_size == 0:
                # LMDB would treat an empty file as a new environment and initialise it.
                raise StoreCorruptError(f"{data}: empty LMDB data file")
        read_only = not create and is_read_only_filesystem(directory)
        try:
            env = lmdb.open(
                str(directory), subdir=True, map_size=MAP_SIZE, max_readers=1024, max_dbs=0,
                readahead=False, sync=durable, metasync=durable, create=create, lock=not read_only,
                readonly=read_only,
            )
        except lmdb.Error as exc:
            fault = storage_fault(exc, directory)
            if type(fault) is not StorageFaultError:  # full, read-only or refused: not corrupt
                raise fault from exc
            raise StoreCorruptError(f"{data}: not a readable LMDB environment ({exc})") from exc
        if not read_only:
            env.reader_check()  # drop reader slots of processes that died (e.g. SIGKILLed)
        opened = _file_key(data)
        if opened is None:  # pragma: no cover - LMDB always creates the data file it opened
            env.close()
            raise StoreCorruptError(f"{data}: LMDB opened an environment without its data file")
        _ENVS[opened] = [env, 1]
        return env


def _release_env(env: Any) -> None:
    with _ENVS_LOCK:
        for key, entry in list(_ENVS.items()):
            if entry[0] is env:
                entry[1] -= 1
                if entry[1] == 0:
                    del _ENVS[key]
                    env.close()
                return


def _seek_before(cursor: Any, hi: bytes | None) -> bool:
    """Position ``cursor`` on the last key < ``hi`` (the last key when None); False when none."""
    if hi is None:
        return bool(cursor.last())
    if cursor.set_range(hi):
        return bool(cursor.prev())
    return bool(cursor.last())


class _LmdbRead:
    def __init__(self, txn: Any) -> None:
        self._txn = txn

    def get(self, key: bytes) -> bytes | None:
        value = self._txn.get(key)
        return None if value is None else bytes(value)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        get = self._txn.get
        return [get(k) for k in keys]

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        check_range(lo, hi)
        cursor = self._txn.cursor()
        if not reverse:
            if not cursor.set_range(lo):
                return
            for key in cursor.iternext(keys=True, values=False):
                if hi is not None and key >= hi:
                    return
                yield key
            return
        if not _seek_before(cursor, hi):
            return
        for key in cursor.iterprev(keys=True, values=False):
            if key < lo:
                return
            yield key

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        check_range(lo, hi)
        cursor = self._txn.cursor()
        if not reverse:
            if not cursor.set_range(lo):
                return
            for key, value in cursor.iternext(keys=True, values=True):
                if hi is not None and key >= hi:
                    return
                yield key, value
            return
        if not _seek_before(cursor, hi):
            return
        for key, value in cursor.iterprev(keys=True, values=True):
            if key < lo:
                return
            yield key, value


    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        cursor = self._txn.cursor()
        if not _seek_before(cursor, hi):
            return None
        while True:
            key = cursor.key()
            if key < lo:
                return None
            if accept(key):
                return key, cursor.value()
            if not cursor.prev():
                return None


class _LmdbWrite(_LmdbRead):
    def put(self, key: bytes, value: bytes) -> None:
        check_key(key)
        self._txn.put(key, value)

    def delete(self, key: bytes) -> bool:
        check_key(key)
        return bool(self._txn.delete(key))

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        check_items(items)
        with self._txn.cursor() as cursor:
            cursor.putmulti(items)


class LmdbEngine:
    """An :class:`~napari_shardscope.core.versioned.engines.protocol.OrderedKV` over one LMDB environment.

    Parameters
    ----------
    directory
        Directory holding ``data.mdb`` and ``lock.mdb``.
    create
        Create the environment when missing.
    durable
        ``fsync`` at every commit (LMDB's ``sync``/``metasync``).
    """

    def __init__(self, directory: Path, *, create: bool, durable: bool = True) -> None:
        self._directory = directory
        self._env = _acquire_env(directory, create=create, durable=durable)
        self._read_only = bool(self._env.flags().get("readonly"))
        self._closed = False

    @property
    def name(self) -> str:
        return "lmdb"

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        if self._closed:
            raise closed_error(self._directory)
        try:
            txn = self._env.begin(write=False)
        except lmdb.Error as exc:
            raise (closed_error(self._directory) if self._closed else storage_fault(exc, self._directory)) from exc
        try:
            yield _LmdbRead(txn)
        except lmdb.Error as exc:
            if self._closed:  # closed by another thread (or this one) during the read
                raise closed_error(self._directory) from exc
            raise
        finally:
            try:
                txn.abort()
            except lmdb.Error:
                if not self._closed:
                    raise

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        if self._closed:
            raise closed_error(self._directory)
        if self._read_only:
            raise ReadOnlyStorageError("the repository is on a read-only filesystem; it can be read but not "
                                       "written", path=str(self._directory))
        try:
            txn = self._env.begin(write=True)
        except lmdb.Error as exc:
            raise storage_fault(exc, self._directory) from exc
        try:
            yield _LmdbWrite(txn)
        except lmdb.Error as exc:  # a put that could not allocate pages
            txn.abort()
            raise storage_fault(exc, self._directory) from exc
        except BaseException:
            txn.abort()
            raise
        try:
            txn.commit()
        except lmdb.MapFullError as exc:  # pragma: no cover - needs a terabyte
            raise StoreCorruptError(f"LMDB map full ({MAP_SIZE} bytes): {exc}") from exc
        except lmdb.Error as exc:  # the commit failed and was aborted: the last commit is intact
            raise storage_fault(exc, self._directory) from exc

    def sync(self) -> None:
        """Flush to disk (needed after non-durable bulk writes)."""
        if self._read_only:
            return
        try:
            self._env.sync(True)
        except lmdb.Error as exc:
            raise storage_fault(exc, self._directory) from exc

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.sync()
            finally:
                _release_env(self._env)
