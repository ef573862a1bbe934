"""The SQLite engine (standard library ``sqlite3``, WAL mode).

SQLite is everywhere Python is, its file format is stable and inspectable with any SQLite tool,
and in WAL mode readers see a snapshot while one writer appends. Its weakness for this store is
per-read overhead: each get is a SQL statement through the VM and a B-tree descent in an index
followed by one in the table (the benchmark measures it against LMDB). The table is an ordinary
rowid table with a unique index on the key, not ``WITHOUT ROWID``: with ~28 KB label blocks as
values a clustered table spills every row to overflow pages and index scans get several times
slower.

Connections: one writer connection shared under a lock, and one reader connection per thread
(``sqlite3`` connections cannot run two transactions at once, and a reader iterating a scan must
not be disturbed by a write).

Storage faults are typed (:func:`~napari_shardscope.core.bytestore.oserrors.storage_fault`): a full
disk rolls the transaction back and raises :class:`DiskFullError`. A database on a read-only
filesystem is opened ``immutable`` (SQLite cannot create its ``-shm`` file there, and no writer can
exist): reads work, a write raises :class:`ReadOnlyStorageError`, never "not a readable database".
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

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

DB_FILE = "store.sqlite"
_BATCH = 500
_SCHEMA = "CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)"


class _SqliteRead:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def get(self, key: bytes) -> bytes | None:
        row = self._conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        found: dict[bytes, bytes] = {}
        for i in range(0, len(keys), _BATCH):
            chunk = list(keys[i:i + _BATCH])
            marks = ",".join("?" * len(chunk))
            for k, v in self._conn.execute(f"SELECT k, v FROM kv WHERE k IN ({marks})", chunk):
                found[bytes(k)] = bytes(v)
        return [found.get(k) for k in keys]

    def _select(self, what: str, lo: bytes, hi: bytes | None, reverse: bool) -> sqlite3.Cursor:
        check_range(lo, hi)
        order = "DESC" if reverse else "ASC"
        if hi is None:
            return self._conn.execute(f"SELECT {what} FROM kv WHERE k >= ? ORDER BY k {order}", (lo,))
        return self._conn.execute(f"SELECT {what} FROM kv WHERE k >= ? AND k < ? ORDER BY k {order}", (lo, hi))

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        for (k,) in self._select("k", lo, hi, reverse):
            yield bytes(k)

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        for k, v in self._select("k, v", lo, hi, reverse):
            yield bytes(k), bytes(v)


    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        # One statement: most keys have one or two versions, so reading values while stepping costs
        # less than a second statement for the chosen one.
        for k, v in self._select("k, v", lo, hi, True):
            key = bytes(k)
            if accept(key):
                return key, bytes(v)
        return None


class _SqliteWrite(_SqliteRead):
    def put(self, key: bytes, value: bytes) -> None:
        check_key(key)
        self._conn.execute(
            "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", (key, value)
        )

    def delete(self, key: bytes) -> bool:
        check_key(key)
        return self._conn.execute("DELETE FROM kv WHERE k = ?", (key,)).rowcount > 0

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        check_items(items)
        self._conn.executemany(
            "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", items
        )


class SqliteEngine:
    """An :class:`~napari_shardscope.core.versioned.engines.protocol.OrderedKV` over one SQLite file in WAL mode.

    Parameters
    ----------
    directory
        Directory holding ``store.sqlite`` (and SQLite's ``-wal``/``-shm`` files).
    create
        Create the database when missing.
    durable
        ``synchronous=FULL`` (fsync at every commit) instead of ``OFF``.
    """

    def __init__(self, directory: Path, *, create: bool, durable: bool = True) -> None:
        self._path = directory / DB_FILE
        self._durable = durable
        if not create:
            if not self._path.is_file():
                raise NotARepositoryError(f"{directory}: no SQLite file {DB_FILE}")
            if self._path.stat().st_size == 0:
                raise StoreCorruptError(f"{self._path}: empty SQLite file")
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._read_only = not create and is_read_only_filesystem(directory)
        try:
            self._writer = self._connect(create=create)
            if create:
                self._writer.execute("PRAGMA journal_mode=WAL")
                self._writer.execute(_SCHEMA)
            else:
                row = self._writer.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'kv'"
                ).fetchone()
                if row is None:
                    raise StoreCorruptError(f"{self._path}: an SQLite database without the store's table")
        except sqlite3.DatabaseError as exc:
            self.close()
            fault = storage_fault(exc, self._path)
            if type(fault) is not StorageFaultError:  # full, read-only or refused: not corrupt
                raise fault from exc
            raise StoreCorruptError(f"{self._path}: not a readable SQLite database ({exc})") from exc
        except sqlite3.Error as exc:
            self.close()
            raise storage_fault(exc, self._path) from exc
        except StoreCorruptError:
            self.close()
            raise

    def _connect(self, *, create: bool = False) -> sqlite3.Connection:
        mode = "rwc" if create else "ro&immutable=1" if self._read_only else "rw"
        conn = sqlite3.connect(
            f"file:{self._path}?mode={mode}", uri=True, isolation_level=None, check_same_thread=False,
            timeout=60.0,
        )
        conn.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'OFF'}")
        conn.execute("PRAGMA cache_size=-65536")
        conn.execute("PRAGMA mmap_size=1073741824")
        with self._all_lock:
            self._all.append(conn)
        return conn

    @property
    def name(self) -> str:
        return "sqlite"

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        if self._closed:
            raise closed_error(self._path)
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = self._connect()
            local.depth = 0
        if local.depth:  # a nested read on this thread shares the outer snapshot
            local.depth += 1
            try:
                yield _SqliteRead(conn)
            finally:
                local.depth -= 1
            return
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise (closed_error(self._path) if self._closed else storage_fault(exc, self._path)) from exc
        local.depth = 1
        try:
            yield _SqliteRead(conn)
        except sqlite3.Error as exc:
            if self._closed:  # closed by another thread (or this one) during the read
                raise closed_error(self._path) from exc
            raise
        finally:
            local.depth = 0
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                if not self._closed:
                    raise

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        if self._closed:
            raise closed_error(self._path)
        if self._read_only:
            raise ReadOnlyStorageError("the repository is on a read-only filesystem; it can be read but not "
                                       "written", path=str(self._path))
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise storage_fault(exc, self._path) from exc
            try:
                yield _SqliteWrite(conn)
            except sqlite3.Error as exc:  # a put that could not be stored (full disk, I/O error)
                self._rollback(conn)
                raise storage_fault(exc, self._path) from exc
            except BaseException:
                self._rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:  # the commit failed: roll back, the last commit is intact
                self._rollback(conn)
                raise storage_fault(exc, self._path) from exc

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
