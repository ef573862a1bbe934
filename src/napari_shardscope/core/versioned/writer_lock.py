"""The repository's single-writer lock, across threads and processes, with a timeout.

LMDB blocks a second writer forever and SQLite gives up with "database is locked"; neither tells a
proofreader what is going on. Every write transaction of a repository therefore first takes this
lock: a thread lock (writers in one process) and an exclusive ``flock`` on ``writer.lock`` in the
repository directory (writers in other processes). ``flock`` locks belong to the open file, so the
kernel drops them when a process dies — a SIGKILLed writer never wedges the repository. A writer
that cannot get the lock within the timeout gets :class:`LockTimeoutError` naming the holder.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.versioned.errors import LockTimeoutError, NestedTransactionError

LOCK_FILE = "writer.lock"
DEFAULT_TIMEOUT = 30.0


class WriterLock:
    """Exclusive write access to one repository.

    Parameters
    ----------
    directory
        Repository directory; None for in-memory repositories (thread lock only).
    timeout
        Default seconds to wait for the lock.
    file, what
        The lock file's name in ``directory``, and what the lock guards, for the timeout's message
        (the same lock serves a remote's state file: :func:`~.remotes.config.holding_state`).
    """

    def __init__(self, directory: Path | None, timeout: float = DEFAULT_TIMEOUT, *, file: str = LOCK_FILE,
                 what: str = "the repository's write lock") -> None:
        self.timeout = timeout
        self.what = what
        self._thread_lock = threading.Lock()
        self._owner: int | None = None
        self._path = None if directory is None else directory / file
        self._fd: int | None = None  # opened at the first write: readers create no files

    def close(self) -> None:
        """Close the lock file (releases the lock if held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @contextmanager
    def hold(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the lock for the ``with`` block, waiting at most ``timeout`` seconds."""
        me = threading.get_ident()
        if self._owner == me:
            raise NestedTransactionError("this thread already holds the repository's write transaction")
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        if not self._thread_lock.acquire(timeout=max(limit, 0.0)):
            raise LockTimeoutError(f"another thread of this process held {self.what} for more than {limit:g} s")
        try:
            self._acquire_file(deadline, limit)
            self._owner = me
            try:
                yield
            finally:
                self._owner = None
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def _acquire_file(self, deadline: float, limit: float) -> None:
        if self._path is None:
            return
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:  # a read-only or full filesystem, a refused permission
                raise storage_fault(exc, self._path) from exc
        delay = 0.0005
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                now = time.monotonic()
                if now >= deadline:
                    raise LockTimeoutError(
                        f"{self._path}: another process ({self._holder()}) has held {self.what} for more "
                        f"than {limit:g} s; retry later or raise the timeout"
                    ) from None
                time.sleep(min(delay, deadline - now))
                delay = min(delay * 2, 0.05)
            else:
                try:  # the holder's pid, for the message another writer gets; best effort on a full disk
                    os.ftruncate(self._fd, 0)
                    os.pwrite(self._fd, str(os.getpid()).encode(), 0)
                except OSError:
                    pass
                return

    def _holder(self) -> str:
        try:
            assert self._path is not None
            pid = self._path.read_text().strip()
        except OSError:
            pid = ""
        return f"pid {pid}" if pid else "pid unknown"
