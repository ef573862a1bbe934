"""Byte access: one small interface over local files and remote object stores.

The format layer (shard indexes, minishard indexes, block headers) needs only five operations:
read a key, read a byte range of a key, know a key's size, list keys, and write a key atomically.
Keeping the interface this small is what lets index lookups read only the bytes they need — a
shard index is ``16 * 2**minishard_bits`` bytes at the head of a file that may be gigabytes.

Two implementations:

* :class:`LocalByteStore` — ``os.pread`` on local files; writes go to a temporary file in the
  same directory, are fsynced and renamed over the target, so a crash never leaves a half-written
  file where a good one was.
* :class:`TensorStoreByteStore` — TensorStore's kvstore drivers (``gs://``, ``s3://``,
  ``http(s)://``, ``file://``), which issue real HTTP range requests for byte ranges.

Every store counts the bytes it returned (:attr:`ByteStore.stats`), so ``shardscope inspect`` can
report how little it read.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from napari_shardscope.core.errors import ArgumentError, StoreError

REMOTE_SCHEMES = ("gs", "s3", "http", "https")


@dataclass
class ReadStats:
    """Counters of what a store has returned; shared by all threads reading through it."""

    bytes_read: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.bytes_read += nbytes
            self.requests += 1

    def reset(self) -> None:
        with self._lock:
            self.bytes_read = 0
            self.requests = 0


@runtime_checkable
class ByteStore(Protocol):
    """What the format layer needs from storage. Keys are ``/``-separated, relative to the root."""

    @property
    def url(self) -> str:
        """The root of the store, as a user would type it."""
        ...

    @property
    def stats(self) -> ReadStats:
        """Bytes and requests served so far."""
        ...

    @property
    def cheap_size(self) -> bool:
        """Whether :meth:`size` is a metadata call (a stat) rather than a read of the whole value."""
        ...

    def read(self, key: str) -> bytes | None:
        """The whole value of ``key``, or ``None`` when it does not exist."""
        ...

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of ``key`` (shorter if the key ends first); ``None`` if missing."""
        ...

    def read_suffix(self, key: str, length: int) -> bytes | None:
        """The last ``length`` bytes of ``key`` (all of it if shorter); ``None`` if missing."""
        ...

    def size(self, key: str) -> int | None:
        """Size in bytes of ``key``, or ``None`` when it does not exist."""
        ...

    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix`` (a directory-like prefix ending in ``/`` or empty), sorted."""
        ...

    def write(self, key: str, data: bytes) -> None:
        """Replace ``key`` with ``data`` atomically: readers see the old or the new value."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing happens when it does not exist)."""
        ...

    def clear(self) -> None:
        """Remove every key of the store (an export replacing a dataset; links are removed, not followed)."""
        ...


def join_key(*parts: str) -> str:
    """Join key parts with ``/``, ignoring empty parts (``join_key("", "info") == "info"``)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


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
        write_file_atomic(path, data)

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


class TensorStoreByteStore:
    """A remote (or local) store through TensorStore's kvstore drivers.

    Parameters
    ----------
    spec
        A kvstore URL (``gs://bucket/path/``, ``s3://…``, ``https://host/path/``, ``file:///…``)
        or a TensorStore kvstore JSON spec.
    context
        An optional ``tensorstore.Context`` to share connection pools and credentials.
    """

    def __init__(self, spec: str | dict[str, Any], context: Any = None) -> None:
        import tensorstore as ts

        if isinstance(spec, str) and not spec.endswith("/"):
            spec = spec + "/"
        self._spec = spec
        try:
            self._kv = ts.KvStore.open(spec, context=context).result()
        except Exception as exc:  # TensorStore raises ValueError for bad specs and URLs
            raise StoreError(f"cannot open kvstore {spec!r}: {exc}") from exc
        self._stats = ReadStats()

    def __repr__(self) -> str:
        return f"TensorStoreByteStore({self.url!r})"

    @property
    def url(self) -> str:
        return self._spec if isinstance(self._spec, str) else str(self._kv.url)

    @property
    def cheap_size(self) -> bool:
        return False

    @property
    def stats(self) -> ReadStats:
        return self._stats

    def _read(self, key: str, byte_range: slice | None) -> bytes | None:
        try:
            result = self._kv.read(key, byte_range=byte_range).result()
        except Exception as exc:
            if byte_range is not None and "OUT_OF_RANGE" in str(exc):
                # The range runs past the end of the value. Behave like a file: return what
                # exists of it (index checks then report the truncation with its offset).
                return self._read_existing_part(key, byte_range)
            raise StoreError(f"{self.url}{key}: {exc}") from exc
        if result.state != "value":
            return None
        data = bytes(result.value)
        self._stats.add(len(data))
        return data

    def _read_existing_part(self, key: str, byte_range: slice) -> bytes | None:
        """What exists of ``byte_range`` after the store refused it as running past the end.

        ``[start, end)`` is re-read as ``[start, end of value)``, never the whole value: a corrupt
        index claiming a range past the end of a large shard must not download the shard.
        """
        start = byte_range.start or 0
        if start < 0 or byte_range.stop is None:  # a suffix longer than the value: all of it
            return self._read(key, None)
        try:
            result = self._kv.read(key, byte_range=slice(start, None)).result()
        except Exception as exc:
            if "OUT_OF_RANGE" in str(exc):
                return b""  # ``start`` is at or past the end of an existing value
            raise StoreError(f"{self.url}{key}: {exc}") from exc
        if result.state != "value":
            return None
        data = bytes(result.value)[: byte_range.stop - start]
        self._stats.add(len(data))
        return data

    def read(self, key: str) -> bytes | None:
        return self._read(key, None)

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        if start < 0 or end < start:
            raise ArgumentError(f"byte range [{start}, {end}) of {key!r} is not a valid range")
        if end == start:
            return b"" if self._read(key, slice(0, 0)) is not None else None
        return self._read(key, slice(start, end))

    def read_suffix(self, key: str, length: int) -> bytes | None:
        if length <= 0:
            return b"" if self._read(key, slice(0, 0)) is not None else None
        return self._read(key, slice(-length, None))

    def size(self, key: str) -> int | None:
        # Remote kvstores expose no stat call through TensorStore; the whole value is read.
        data = self.read(key)
        return None if data is None else len(data)

    def list(self, prefix: str = "") -> Iterator[str]:
        import tensorstore as ts

        try:
            if prefix:
                rng = ts.KvStore.KeyRange(prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))
                keys = self._kv.list(range=rng).result()
            else:
                keys = self._kv.list().result()
        except Exception as exc:
            raise StoreError(f"{self.url}: listing is not supported by this store: {exc}") from exc
        return iter(sorted(k.decode() if isinstance(k, bytes) else str(k) for k in keys))

    def write(self, key: str, data: bytes) -> None:
        # Object stores replace a key atomically; the file driver writes through a temp file.
        try:
            self._kv.write(key, data).result()
        except Exception as exc:
            raise StoreError(f"{self.url}{key}: write failed: {exc}") from exc

    def delete(self, key: str) -> None:
        self._delete_range(key, key + "\0")  # exactly ``key``: the next possible key is key + NUL

    def clear(self) -> None:
        self._delete_range("", "")  # an empty bound is unbounded: every key

    def _delete_range(self, first: str, end: str) -> None:
        import tensorstore as ts

        try:
            self._kv.delete_range(ts.KvStore.KeyRange(first, end)).result()
        except Exception as exc:
            raise StoreError(f"{self.url}{first}: delete failed: {exc}") from exc


def open_store(url: str | os.PathLike[str], context: Any = None) -> ByteStore:
    """Open the byte store rooted at ``url``.

    Local paths and ``file://`` URLs use :class:`LocalByteStore` (``pread``, no TensorStore
    overhead); ``gs://``, ``s3://`` and ``http(s)://`` go through TensorStore's kvstore.
    """
    text = os.fspath(url)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = unquote(parsed.path) if parsed.scheme == "file" else text
        return LocalByteStore(path)
    if parsed.scheme in REMOTE_SCHEMES:
        return TensorStoreByteStore(text, context=context)
    raise ArgumentError(
        f"unsupported URL scheme {parsed.scheme!r} in {text!r}; use a path, file://, gs://, s3://, http:// or https://"
    )
