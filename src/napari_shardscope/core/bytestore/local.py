"""The local-disk byte store: ``os.pread`` on files under a root, atomic writes through a temp file."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from napari_shardscope.core.bytestore.coalesce import read_coalesced
from napari_shardscope.core.bytestore.containment import (
    UnreadableEntry,
    check_key,
    check_resolved_inside,
    file_kind,
    follow_symlinks_enabled,
    link_problem,
    unreadable_entries,
)
from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.bytestore.protocol import LOCAL_COALESCE_SPAN, ReadStats
from napari_shardscope.core.errors import (
    ArgumentError,
    DanglingLinkError,
    NotARegularFileError,
    ShardscopeError,
    StoreError,
)

#: The name prefix of the temporary file an atomic write renames into place. Never a key: listings skip it.
TEMP_PREFIX = ".shardscope-tmp-"


#: Directories a :class:`LocalByteStore` remembers as checked (:meth:`LocalByteStore._read_path`).
INSIDE_DIRS_MAX = 4096


class LocalByteStore:
    """A directory on the local disk.

    Parameters
    ----------
    root
        The directory; it need not exist until something is written.
    follow_symlinks
        Read through symbolic links that lead out of ``root`` (``None``: the process-wide setting,
        :func:`~napari_shardscope.core.bytestore.containment.follow_symlinks_enabled`, off by
        default). Links inside the root are always followed; writes never follow a link out.

    Every key must name a file below ``root`` (:func:`~.containment.check_key`); only regular
    files are read (:class:`NotARegularFileError` for a FIFO, socket, device or directory, found
    with ``fstat`` on a descriptor opened ``O_NONBLOCK`` so a FIFO never blocks).
    """

    def __init__(self, root: str | os.PathLike[str], *, follow_symlinks: bool | None = None) -> None:
        self.root = Path(root)
        self._stats = ReadStats()
        self._follow = follow_symlinks
        # Directories (keys' parents) already found to resolve inside the root: a volume of one file
        # per chunk (N5, zarr v2, unsharded precomputed) reads thousands of files from a few hundred
        # directories, and resolving every component of every path (a dozen ``lstat``s, GIL-bound)
        # was a fifth of a cold plane's time. Bounded; cleared when full.
        self._inside_dirs: set[str] = set()

    @property
    def follow_symlinks(self) -> bool:
        """Whether reads follow links leading out of the root."""
        return self._follow if self._follow is not None else follow_symlinks_enabled()

    def __repr__(self) -> str:
        return f"LocalByteStore({str(self.root)!r})"

    @property
    def url(self) -> str:
        return str(self.root)

    @property
    def cheap_size(self) -> bool:
        return True

    @property
    def stats(self) -> ReadStats:
        return self._stats

    def _path(self, key: str, *, writing: bool = False) -> Path:
        """The file ``key`` names, refused unless it lies below the root (links resolved)."""
        if not key:
            return self.root
        check_key(key, str(self.root))
        path = self.root / key
        if writing:  # the directory it lands in; a link *at* the key is replaced, never written through
            check_resolved_inside(str(path.parent), str(self.root), key=key, follow=False)
        else:
            check_resolved_inside(str(path), str(self.root), key=key, follow=self.follow_symlinks)
        return path

    def _read_path(self, key: str) -> tuple[Path, int]:
        """The file ``key`` names for a read, and extra ``os.open`` flags that complete its check.

        The same guarantee as :meth:`_path`, cheaper on repeated directories: when the key's
        directory is known to resolve inside the root, only the file itself is left, and it is
        opened ``O_NOFOLLOW`` (a link there fails the open with ``ELOOP``, and :meth:`_open_regular`
        then checks the whole path as :meth:`_path` does: links inside the root are still read).
        """
        nofollow = getattr(os, "O_NOFOLLOW", 0)
        if not key or self.follow_symlinks or not nofollow:
            return self._path(key), 0
        check_key(key, str(self.root))
        parent = key.rpartition("/")[0]
        if parent not in self._inside_dirs:
            check_resolved_inside(str(self.root / parent), str(self.root), key=key, follow=False)
            if len(self._inside_dirs) >= INSIDE_DIRS_MAX:
                self._inside_dirs.clear()
            self._inside_dirs.add(parent)
        return self.root / key, nofollow

    def _open_regular(self, key: str) -> int | None:
        """A descriptor of the regular file ``key`` (``None`` when missing), never blocking on a FIFO."""
        path, nofollow = self._read_path(key)
        try:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | nofollow)
            except OSError as exc:
                if not nofollow or exc.errno != errno.ELOOP:
                    raise
                path = self._path(key)  # the file is a link: checked in full, read if it stays inside
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except (FileNotFoundError, NotADirectoryError):
            if os.path.islink(path):  # the entry is there, what it names is not: not an absent key
                raise self._unreadable(path, key) from None
            return None
        except IsADirectoryError:
            raise NotARegularFileError("is a directory, not a regular file", key=key) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._unreadable(path, key) from None
            raise StoreError(f"{path}: {exc.strerror or exc}") from exc
        try:
            mode = os.fstat(fd).st_mode
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"{path}: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise NotARegularFileError(f"is a {file_kind(mode)}, not a regular file", key=key)
        return fd

    def _unreadable(self, path: Path, key: str) -> ShardscopeError:
        """The error of a link at ``key`` that cannot be opened (dangling, a loop, leading out of the root)."""
        problem = link_problem(str(path), str(self.root), key, follow=self.follow_symlinks)
        if problem is None:  # it was repaired meanwhile: say what the open said
            return DanglingLinkError("is a symbolic link that could not be followed", key=key)
        return problem.error(str(self.root))

    def unreadable_entries(self, prefix: str,
                           is_data_key: Callable[[str], bool] | None = None) -> list[UnreadableEntry]:
        """Entries below ``prefix`` that are there but cannot be read as data files (:func:`.unreadable_entries`)."""
        rel = prefix.rstrip("/")
        if rel:
            self._path(rel)  # the prefix itself must be a key inside the root
        return unreadable_entries(str(self.root), rel, is_data_key=is_data_key, follow=self.follow_symlinks)

    def read(self, key: str) -> bytes | None:
        fd = self._open_regular(key)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            chunks = []
            offset = 0
            while True:  # to the end, even if the file grew since fstat
                part = os.pread(fd, max(size - offset, 1 << 16), offset)
                if not part:
                    break
                chunks.append(part)
                offset += len(part)
            data = b"".join(chunks)
        except OSError as exc:
            raise StoreError(f"{self._path(key)}: {exc.strerror or exc}") from exc
        finally:
            os.close(fd)
        self._stats.add(len(data))
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        if start < 0 or end < start:
            raise ArgumentError(f"byte range [{start}, {end}) of {key!r} is not a valid range")
        fd = self._open_regular(key)
        if fd is None:
            return None
        try:
            # Clamp to the file: pread allocates the requested count up front, and a corrupt index
            # can claim a range of terabytes (MemoryError) or beyond 2**63 (OverflowError).
            stop = min(end, os.fstat(fd).st_size)
            data = os.pread(fd, stop - start, start) if stop > start else b""
        except OSError as exc:
            raise StoreError(f"{self._path(key)}: {exc.strerror or exc} at byte {start}") from exc
        finally:
            os.close(fd)
        self._stats.add(len(data))
        return data

    def read_ranges(self, requests: Sequence[tuple[str, int, int]],
                    max_gap: int | Literal["store"] | None = "store") -> list[bytes | None]:
        """:meth:`read_range` of each ``(key, start, end)``, each file resolved, checked and opened once.

        Why: reading a shard's minishard indexes one ``read_range`` at a time resolves the same
        path (two ``realpath`` calls, a dozen ``lstat``) and opens the file once per index — most
        of a local ``inspect``. The containment and regular-file checks are those of
        :meth:`read_range`, done once per distinct key of the batch; the answers are the same.
        Ranges at most ``max_gap`` bytes apart are read as one when an int is given.
        """
        if max_gap == "store" or max_gap is None:
            return self._read_grouped(requests)
        return read_coalesced(self._read_grouped, requests, max_gap, LOCAL_COALESCE_SPAN)

    def _read_grouped(self, requests: Sequence[tuple[str, int, int]]) -> list[bytes | None]:
        positions: dict[str, list[int]] = {}
        for i, (key, start, end) in enumerate(requests):
            if start < 0 or end < start:
                raise ArgumentError(f"byte range [{start}, {end}) of {key!r} is not a valid range")
            positions.setdefault(key, []).append(i)
        out: list[bytes | None] = [None] * len(requests)
        for key, where in positions.items():
            fd, owned = self._batch_fd(key)
            if fd is None:
                continue
            start = 0
            try:
                size = os.fstat(fd).st_size
                for i in where:
                    _, start, end = requests[i]
                    stop = min(end, size)  # pread allocates the count asked for: clamp to the file
                    data = os.pread(fd, stop - start, start) if stop > start else b""
                    self._stats.add(len(data))
                    out[i] = data
            except OSError as exc:
                raise StoreError(f"{self._path(key)}: {exc.strerror or exc} at byte {start}") from exc
            finally:
                if owned:
                    os.close(fd)
        return out

    def _batch_fd(self, key: str) -> tuple[int | None, bool]:
        """A descriptor of ``key`` for one batch of reads and whether the batch closes it."""
        return self._open_regular(key), True

    def read_suffix(self, key: str, length: int) -> bytes | None:
        fd = self._open_regular(key)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - max(0, length))
            data = os.pread(fd, size - start, start) if size > start else b""
        except OSError as exc:
            raise StoreError(f"{self._path(key)}: {exc.strerror or exc}") from exc
        finally:
            os.close(fd)
        self._stats.add(len(data))
        return data

    def size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            if os.path.islink(path):
                raise self._unreadable(path, key) from None
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._unreadable(path, key) from None
            raise StoreError(f"{path}: {exc.strerror or exc}") from exc
        if stat.S_ISDIR(st.st_mode):
            return None  # a prefix, not a key (as object stores see it)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFileError(f"is a {file_kind(st.st_mode)}, not a regular file", key=key)
        return st.st_size

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        try:
            if not base.is_dir():
                return iter(())
        except OSError as exc:  # is_dir() passes on errors such as ENAMETOOLONG (a hostile scale key)
            raise storage_fault(exc, base) from exc
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel = Path(dirpath).relative_to(self.root)
            for name in filenames:
                if name.startswith(TEMP_PREFIX):
                    continue
                keys.append((rel / name).as_posix() if str(rel) != "." else name)
        return iter(sorted(keys))

    def write(self, key: str, data: bytes) -> None:
        path = self._path(key, writing=True)
        try:
            write_file_atomic(path, data)
        except OSError as exc:  # full disk, read-only mount, refused permission: the old file is intact
            raise storage_fault(exc, path) from exc
        # A link planted among the parents between the check and the write would have redirected
        # mkdir/mkstemp; check again so such a race is at least reported.
        self._path(key, writing=True)

    def remove_temporaries(self) -> tuple[str, ...]:
        """Delete the temporary files that atomic writes killed before their rename left; their paths.

        A process killed between creating its temporary file and renaming it (SIGKILL, a crash, a power
        cut) cannot remove it. Such a file is never listed or read as a key, but it takes space and would
        accumulate: an export removes them before it writes. Not while another process writes here (its
        temporary file in progress would go too).
        """
        if not self.root.is_dir():
            return ()
        removed: list[str] = []
        try:
            for dirpath, _, filenames in os.walk(self.root):
                for name in filenames:
                    if name.startswith(TEMP_PREFIX):
                        os.unlink(os.path.join(dirpath, name))
                        removed.append(os.path.join(dirpath, name))
        except OSError as exc:
            raise StoreError(f"{self.root}: cannot remove a temporary file: {exc.strerror or exc}") from exc
        return tuple(removed)

    def delete(self, key: str) -> None:
        path = self._path(key, writing=True)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{path}: cannot delete: {exc.strerror or exc}") from exc

    def clear(self) -> None:
        if not self.root.is_dir():
            return
        try:  # bottom up, never into a linked directory: a link is unlinked, its target left alone
            for dirpath, dirnames, filenames in os.walk(self.root, topdown=False):
                for name in filenames:
                    os.unlink(os.path.join(dirpath, name))
                for name in dirnames:
                    path = os.path.join(dirpath, name)
                    if os.path.islink(path):
                        os.unlink(path)
                    else:
                        os.rmdir(path)
        except OSError as exc:
            raise StoreError(f"{self.root}: cannot delete: {exc.strerror or exc}") from exc


def current_umask() -> int:
    """The process umask, read without changing it where the system allows (``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)  # elsewhere: the classic set-and-restore (not thread-safe, but brief)
    os.umask(old)
    return old


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and rename.

    A crash at any point leaves either the previous file or the complete new one, never a
    truncated file — the promise the product makes about everything it writes.

    The file gets the modes a plain ``open(path, "w")`` would give (``0o666`` less the umask), not
    ``mkstemp``'s private ``0o600``: exported datasets are meant to be shared. ``os.replace``
    replaces a link at ``path`` by the new file and never writes through it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - directories that cannot be opened (rare filesystems)
        return
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)




#: Files kept open by every :class:`KeptOpenLocalStore` of the process together (beyond it, a read opens and
#: closes its file as :class:`LocalByteStore` does): well below the usual limit of 1024 descriptors per process.
MAX_KEPT_OPEN = 128
_kept_open = [0]  # descriptors kept open now, by every KeptOpenLocalStore
_kept_lock = threading.Lock()


class KeptOpenLocalStore(LocalByteStore):
    """A :class:`LocalByteStore` whose range reads reuse one descriptor per file, for data treated as immutable.

    Why: :meth:`LocalByteStore.read_range` resolves the key's path (the containment check), opens,
    stats and closes the file on every call — half the time of a cold plane's 64 chunk reads from
    a few shard files. A volume is treated as immutable while it is open (see
    ``volumes.tsopen.CACHE_POLICY``), so its reader opens each file once, with the same checks, and
    keeps it; a file replaced on disk meanwhile is still read as it was when first opened. The
    descriptors are closed when the store is dropped; beyond :data:`MAX_KEPT_OPEN` in the process,
    reads open and close their file as before.
    """

    def __init__(self, root: str | os.PathLike[str], *, follow_symlinks: bool | None = None) -> None:
        super().__init__(root, follow_symlinks=follow_symlinks)
        self._fds: dict[str, int] = {}
        self._fd_lock = threading.Lock()
        weakref.finalize(self, _close_kept, self._fds)

    def __repr__(self) -> str:
        return f"KeptOpenLocalStore({str(self.root)!r})"

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        if start < 0 or end < start:
            raise ArgumentError(f"byte range [{start}, {end}) of {key!r} is not a valid range")
        fd = self._fds.get(key)
        if fd is None:
            fd = self._keep(key)
            if fd is None:
                return super().read_range(key, start, end)  # no room, or no such file
        try:
            stop = min(end, os.fstat(fd).st_size)  # pread allocates the count asked for: clamp to the file
            data = os.pread(fd, stop - start, start) if stop > start else b""
        except OSError as exc:
            raise StoreError(f"{self._path(key)}: {exc.strerror or exc} at byte {start}") from exc
        self._stats.add(len(data))
        return data

    def size(self, key: str) -> int | None:
        """The size of ``key``, from its kept descriptor (opened and kept now when there is room).

        Why: a shard's size is asked just before its index is read; resolving the path (the
        containment check, an ``lstat`` per path component) once for both halves a cold read's
        per-file set-up. A directory, a missing file or a spent budget answer as :meth:`LocalByteStore.size`.
        """
        fd = self._fds.get(key)
        if fd is None:
            try:
                fd = self._keep(key)
            except NotARegularFileError:
                fd = None  # a directory (no key) or a special file: answered below
            if fd is None:
                return super().size(key)
        try:
            return os.fstat(fd).st_size
        except OSError as exc:
            raise StoreError(f"{self._path(key)}: {exc.strerror or exc}") from exc

    def _batch_fd(self, key: str) -> tuple[int | None, bool]:
        fd = self._fds.get(key)
        if fd is None:
            fd = self._keep(key)
        if fd is not None:
            return fd, False
        return super()._batch_fd(key)  # no room, or no such file

    def _keep(self, key: str) -> int | None:
        """A kept descriptor of ``key``, opened now; ``None`` when the budget is spent or the file is missing."""
        with self._fd_lock:
            fd = self._fds.get(key)
            if fd is not None:
                return fd
            with _kept_lock:
                if _kept_open[0] >= MAX_KEPT_OPEN:
                    return None
                _kept_open[0] += 1
            try:
                fd = self._open_regular(key)
            except BaseException:
                _release_kept(1)
                raise
            if fd is None:
                _release_kept(1)
                return None
            self._fds[key] = fd
            return fd


def _release_kept(n: int) -> None:
    with _kept_lock:
        _kept_open[0] -= n


def _close_kept(fds: dict[str, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _release_kept(len(fds))
    fds.clear()
