"""Which local versions are on a remote, as which node object: an append-only record (issue 28).

A push sends only the versions the remote lacks and names each parent by its node object, so it
needs, for every version, whether the remote has it and under which object. That map once lived
in the remote-state JSON beside the tracking heads and was rewritten whole by every push and fetch:
one line per version ever pushed, megabytes per push into a history of 10⁵ versions. It now lives
in ``remote-state/<remote>.objects``, to which a push or fetch appends what it learned, so what
each one writes is the size of its change.

The file is a sequence of frames ``<u32 length><u32 crc32><payload>`` (little-endian), the payload
lines of ``<uuid> <object>`` (``<uuid> -``: forgotten). A frame is whole or it is not there:

* a write killed midway leaves a torn last frame (shorter than its length, or failing its
  checksum with nothing after it), which loading ignores — the state before that write — and the
  next append cuts off first (appends run under the remote's state lock);
* a bad frame with whole frames after it is damage, not a torn write: a :class:`StoreCorruptError`
  naming the file and the frame's byte offset (deleting the file is safe: it is rebuilt as pushes
  and fetches find versions on the remote, whose objects a push checks for before sending).

The record is never trimmed, because no entry ever becomes false: a remote never deletes objects
(they are content-addressed and nothing collects them, so a forced push leaves the old head's
objects in place for a later push to reuse), and a local version is never deleted. It holds one
entry per local version on the remote, the size of the repository's own DAG. When superseded
entries outnumber live ones (a version re-recorded under another object), the next write rewrites
it whole, atomically (temp + rename), so the file stays within twice its content.
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path

from napari_shardscope.core.bytestore import write_file_atomic
from napari_shardscope.core.bytestore.oserrors import storage_fault
from napari_shardscope.core.versioned.errors import StoreCorruptError

SUFFIX = ".objects"
_HEADER = struct.Struct("<II")
_FORGOTTEN = "-"
#: Rewrite the record whole once it holds more than this many entries beyond twice the live ones.
COMPACT_SLACK = 1024


def record_path(state_file: Path) -> Path:
    """The objects record beside a remote's state file (``origin.json`` → ``origin.objects``)."""
    return state_file.with_suffix(SUFFIX)


def _frame(entries: Mapping[str, str | None]) -> bytes:
    payload = "".join(f"{u} {_FORGOTTEN if o is None else o}\n" for u, o in entries.items()).encode()
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _read(path: Path) -> bytes:
    """The record's bytes (empty when absent); a path that is not a regular file is damage, not a hang."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise storage_fault(exc, path) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreCorruptError(f"{path}: not a regular file; delete it (it is rebuilt by pushes and fetches)")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class ObjectRecord(MutableMapping[str, str]):
    """Version UUID → its node object on the remote, as loaded, plus what changed since (appended on save)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._live: dict[str, str] = {}
        self._pending: dict[str, str | None] = {}
        self._valid = 0  # bytes of whole frames: a later append starts here (cutting a torn tail off)
        self._entries = 0  # entry lines in those frames, superseded ones included

    @classmethod
    def load(cls, path: Path) -> ObjectRecord:
        record = cls(path)
        data = _read(path)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, offset)
            end = offset + _HEADER.size + length
            if end > len(data):
                break  # torn: the write of this frame never finished
            payload = data[offset + _HEADER.size:end]
            if zlib.crc32(payload) != crc:
                if end == len(data):
                    break  # torn last frame (its bytes only partly on disk)
                raise StoreCorruptError(f"{path}: damaged frame at byte offset {offset} (checksum mismatch, "
                                        f"{len(data) - end} bytes after it); delete it and fetch again")
            record._apply(payload, path, offset)
            offset = end
        record._valid = offset
        return record

    def _apply(self, payload: bytes, path: Path, offset: int) -> None:
        for line in payload.decode("ascii", errors="replace").splitlines():
            parts = line.split(" ")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise StoreCorruptError(f"{path}: unreadable entry {line[:80]!r} in the frame at byte offset "
                                        f"{offset}; delete it and fetch again")
            if parts[1] == _FORGOTTEN:
                self._live.pop(parts[0], None)
            else:
                self._live[parts[0]] = parts[1]
            self._entries += 1

    # -- the mapping ------------------------------------------------------------------------------

    def __getitem__(self, uuid: str) -> str:
        return self._live[uuid]

    def __setitem__(self, uuid: str, obj: str) -> None:
        if self._live.get(uuid) != obj:
            self._live[uuid] = obj
            self._pending[uuid] = obj

    def __delitem__(self, uuid: str) -> None:
        del self._live[uuid]
        self._pending[uuid] = None

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._live

    def mark_unsaved(self) -> None:
        """Have the next :meth:`save` write every entry (they came from elsewhere: an older state file)."""
        self._pending = dict(self._live)

    # -- writing ----------------------------------------------------------------------------------

    def save(self) -> int:
        """Append what changed since loading (or rewrite the record when mostly superseded); bytes written."""
        if not self._pending or self.path is None:
            return 0
        path = self.path
        if self._entries + len(self._pending) > 2 * len(self._live) + COMPACT_SLACK:
            data = _frame(dict(self._live)) if self._live else b""
            try:
                write_file_atomic(path, data)
            except OSError as exc:
                raise storage_fault(exc, path) from exc
            self._valid, self._entries = len(data), len(self._live)
        else:
            data = _frame(self._pending)
            self._append(path, data)
            self._valid += len(data)
            self._entries += len(self._pending)
        self._pending = {}
        return len(data)

    def _append(self, path: Path, data: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
            try:
                os.ftruncate(fd, self._valid)  # a torn frame a killed write left is cut off, never built on
                view = memoryview(data)
                at = self._valid
                while view:
                    n = os.pwrite(fd, view, at)
                    view, at = view[n:], at + n
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise storage_fault(exc, path) from exc
