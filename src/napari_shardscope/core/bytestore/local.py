"""The local-disk byte store: ``os.pread`` on files under a root, atomic writes through a temp file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.bytestore.protocol import ReadStats
from napari_shardscope.core.errors import ArgumentError, StoreError


class LocalByteStore:
    """A directory on the local disk.

    Parameters
    ----------
    root
        The directory; it need not exist until something is written.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._stats = ReadStats()

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

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in Path(key).parts:
            raise ArgumentError(f"key {key!r} escapes the store root {self.root}")
        return self.root / key if key else self.root

    def read(self, key: str) -> bytes | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise StoreError(f"{self._path(key)}: {exc.strerror or exc}") from exc
        self._stats.add(len(data))
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        if start < 0 or end < start:
            raise ArgumentError(f"byte range [{start}, {end}) of {key!r} is not a valid range")
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise StoreError(f"{path}: {exc.strerror or exc}") from exc
        try:
            # Clamp to the file: pread allocates the requested count up front, and a corrupt index
            # can claim a range of terabytes (MemoryError) or beyond 2**63 (OverflowError).
            stop = min(end, os.fstat(fd).st_size)
            data = os.pread(fd, stop - start, start) if stop > start else b""
        except OSError as exc:
            raise StoreError(f"{path}: {exc.strerror or exc} at byte {start}") from exc
        finally:
            os.close(fd)
        self._stats.add(len(data))
        return data

    def read_suffix(self, key: str, length: int) -> bytes | None:
        size = self.size(key)
        if size is None:
            return None
        return self.read_range(key, max(0, size - length), size)

    def size(self, key: str) -> int | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_size if not _is_dir(st.st_mode) else None

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if not base.is_dir():
            return iter(())
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel = Path(dirpath).relative_to(self.root)
            for name in filenames:
                if name.startswith(".shardscope-tmp-"):
                    continue
                keys.append((rel / name).as_posix() if str(rel) != "." else name)
        return iter(sorted(keys))

    def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            write_file_atomic(path, data)
        except OSError as exc:  # full disk, read-only mount, refused permission: the old file is intact
            raise storage_fault(exc, path) from exc

    def delete(self, key: str) -> None:
        path = self._path(key)
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


def _is_dir(mode: int) -> bool:
    import stat

    return stat.S_ISDIR(mode)


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and rename.

    A crash at any point leaves either the previous file or the complete new one, never a
    truncated file — the promise the product makes about everything it writes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".shardscope-tmp-", dir=path.parent)
    try:
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


