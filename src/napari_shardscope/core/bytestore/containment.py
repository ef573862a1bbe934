"""Containment: every key and path resolves inside its root, and only links the user allowed are followed.

A dataset is a directory (or a bucket prefix) and nothing else: a key from a caller or from a
metadata document (a precomputed scale ``key``, an OME-Zarr dataset ``path``) names a file *below*
the root. This module is the one place that says what such a key may look like
(:func:`key_problem`) and whether a local path, once symbolic links are resolved, is still inside
its root (:func:`check_resolved_inside`).

Symbolic links leading out of the root are refused unless the user opts in — data that lives
behind links (a scale directory linked from a scratch disk) is common enough to allow, and
dangerous enough (a planted link reads ``~/.ssh``) not to allow silently. The opt-in is
process-wide, like the TensorStore cache budget: :func:`set_follow_symlinks`, the
:func:`follow_symlinks` context manager, the ``SHARDSCOPE_FOLLOW_SYMLINKS=1`` environment variable,
or ``shardscope --follow-symlinks``; a single store can also be opened with
``LocalByteStore(root, follow_symlinks=True)``. Writes never follow a link out of their root,
opted in or not.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from napari_shardscope.core.bytestore.url import Location
from napari_shardscope.core.errors import (
    DanglingLinkError,
    FormatError,
    NotARegularFileError,
    OutsideRootError,
    ShardscopeError,
)

#: Environment variable that turns following links out of a dataset on (``1``, ``true``, ``yes``).
FOLLOW_SYMLINKS_ENV = "SHARDSCOPE_FOLLOW_SYMLINKS"
#: What an error about a link tells the user to do when the link is intended.
OPT_IN_HINT = "pass --follow-symlinks (follow_symlinks=True) if the data lives behind links on purpose"

_lock = threading.Lock()
_follow: bool | None = None


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot name a file below a root, or ``None`` when it can.

    A key is ``/``-separated, relative, and every component is a plain name: no ``..`` or ``.``,
    no empty component (``a//b``, a leading or trailing ``/``), no NUL byte and no backslash (a
    Windows separator, and a way to smuggle ``..\\`` past a ``/``-only check).
    """
    if "\x00" in key:
        return "contains a NUL byte"
    if "\\" in key:
        return "contains a backslash"
    if key.startswith("/"):
        return "is absolute"
    for part in key.split("/"):
        if part in ("", ".", ".."):
            return f"has a {part or 'empty'!r} component" if part else "has an empty component"
    return None


def check_key(key: str, root: str) -> None:
    """Raise :class:`OutsideRootError` unless ``key`` names a file below ``root`` (see :func:`key_problem`)."""
    problem = key_problem(key)
    if problem is not None:
        raise OutsideRootError(f"key {key!r} {problem}: it is not a relative key inside {root}", key=key, root=root)


def follow_symlinks_enabled() -> bool:
    """Whether links out of a dataset are followed in this process (default: no)."""
    with _lock:
        if _follow is not None:
            return _follow
    return os.environ.get(FOLLOW_SYMLINKS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def set_follow_symlinks(value: bool | None) -> None:
    """Follow links out of datasets (``True``), refuse them (``False``), or ask the environment (``None``)."""
    global _follow
    with _lock:
        _follow = value


@contextlib.contextmanager
def follow_symlinks(value: bool = True) -> Iterator[None]:
    """Follow (or refuse) links out of datasets inside the ``with`` block; the previous setting after it."""
    global _follow
    with _lock:
        previous = _follow
        _follow = value
    try:
        yield
    finally:
        with _lock:
            _follow = previous


def is_inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both already resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_resolved_inside(path: str, root: str, *, key: str, follow: bool, what: str = "key") -> None:
    """Raise :class:`OutsideRootError` when ``path`` resolves (through links) outside ``root``.

    ``root`` itself is resolved too: links *above* the root are the user's choice of path; only
    links below it can lead a read somewhere the user did not name. Nothing is checked when
    ``follow`` is true.
    """
    if follow:
        return
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if not is_inside(real, real_root):
        raise OutsideRootError(
            f"{what} {key!r} is a symbolic link (or lies below one) leading to {real}, outside {real_root}; "
            f"{OPT_IN_HINT}", key=key, root=root)


#: Entries of a level directory :func:`check_level_tree` looks at before it stops (a bound on the
#: cost of opening a local volume: ``scandir`` reports file types without a ``stat`` per entry).
LEVEL_SCAN_LIMIT = 50_000


@dataclass(frozen=True)
class UnreadableEntry:
    """A directory entry that is there but cannot be read as a data file, and why.

    ``kind``: ``outside`` (a link leading out of the root, not followed), ``dangling`` (a link to
    nothing, or a link loop), ``special`` (a FIFO, socket or device, or a link to one) or
    ``directory`` (a directory where the format expects a data file).
    """

    key: str
    kind: str
    message: str

    def error(self, root: str) -> ShardscopeError:
        """The typed error a read of this entry raises."""
        if self.kind == "outside":
            return OutsideRootError(f"key {self.key!r} {self.message}", key=self.key, root=root)
        if self.kind == "dangling":
            return DanglingLinkError(self.message, key=self.key)
        return NotARegularFileError(self.message, key=self.key)


def link_problem(path: str, root: str, key: str, *, follow: bool) -> UnreadableEntry | None:
    """Why the symbolic link at ``path`` cannot be read, or ``None`` when it leads to a file or directory allowed.

    Only ``lstat``/``stat``/``readlink``: nothing is opened (a FIFO would block).
    """
    if not follow and not is_inside(os.path.realpath(path), os.path.realpath(root)):
        return UnreadableEntry(key, "outside", f"is a symbolic link (or lies below one) leading to "
                                               f"{os.path.realpath(path)}, outside {os.path.realpath(root)}; "
                                               f"{OPT_IN_HINT}")
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return UnreadableEntry(key, "dangling", "is a symbolic link loop, not a file")
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return UnreadableEntry(key, "dangling", f"is a symbolic link to {target!r}, which does not exist "
                                                    "(a dangling link, not an absent key)")
        return None  # refused permission and the like: the read reports it with the path
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return UnreadableEntry(key, "special", f"is a link to a {file_kind(mode)}, not a regular file")
    return None


def scan_level(root: str, rel: str, *, follow: bool, is_data_key: Callable[[str], bool] | None = None,
               limit: int = LEVEL_SCAN_LIMIT) -> Iterator[tuple[os.DirEntry[str], str, UnreadableEntry | None]]:
    """Every entry below the directory ``rel`` of ``root`` (the first ``limit``): ``(entry, key, problem)``.

    ``key`` is the entry's key below ``root``; ``problem`` says why it cannot be read as a data file
    (see :class:`UnreadableEntry`), ``None`` for regular files, directories and links to them inside
    the root. A directory is a problem only where ``is_data_key`` (given the key below ``rel``) says
    the format expects a data file. Linked directories are not descended into; nothing is opened.
    """
    base = os.path.join(root, rel) if rel else root
    # Every path the scan meets is ``base`` + separator + names: its keys are cut from it, never
    # resolved again (os.path.relpath per entry was most of the cost of opening a level of 10³–10⁴
    # chunk files); ``base`` itself is resolved against the root once.
    cut = len(os.path.join(base, ""))
    level = os.path.relpath(base, root).replace(os.sep, "/")
    level = "" if level == "." else level + "/"
    pending = [base]
    seen = 0
    while pending and seen < limit:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue  # unreadable: a read reports it with the key
        for entry in entries:
            seen += 1
            below = entry.path[cut:]
            if os.sep != "/":
                below = below.replace(os.sep, "/")
            key = level + below
            problem: UnreadableEntry | None = None
            if entry.is_symlink():
                problem = link_problem(entry.path, root, key, follow=follow)
                if problem is None and is_data_key is not None and os.path.isdir(entry.path) and is_data_key(below):
                    problem = UnreadableEntry(key, "directory", "is a link to a directory, not a regular file")
            elif entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
                if is_data_key is not None and is_data_key(below):
                    problem = UnreadableEntry(key, "directory", "is a directory, not a regular file")
            elif not entry.is_file(follow_symlinks=False):
                mode = entry.stat(follow_symlinks=False).st_mode
                problem = UnreadableEntry(key, "special", f"is a {file_kind(mode)}, not a regular file")
            yield entry, key, problem


def check_level_tree(location: Location, rel: str, *, limit: int = LEVEL_SCAN_LIMIT,
                     max_file_bytes: int | None = None, is_data_key: Callable[[str], bool] | None = None) -> None:
    """Check, before TensorStore reads it, the local directory ``rel`` below ``location`` (one scale's files).

    TensorStore's ``file`` kvstore follows links and opens whatever it finds, and reads a missing
    file (a dangling link) or a directory as an absent chunk, that is as fill. So its reads are
    guarded here, once per open: the directory must resolve inside the root, and (for the first
    ``limit`` entries) no entry may be a link leading out of the root, a dangling link or link
    loop, a FIFO, socket or device — a FIFO would block the read forever — or a directory where
    ``is_data_key`` (the format's chunk, shard or block names, given the key below ``rel``) expects a
    data file. Links out of the root are refused unless :func:`follow_symlinks_enabled`. Remote
    locations are not checked (a bucket has no links or FIFOs).

    ``max_file_bytes`` is the most a chunk or shard file of the level can take by its format's spec:
    TensorStore reads a chunk file whole (and a shard's ranges as its index claims), so a terabyte
    sparse file where a chunk should be aborts the process in its allocator. Metadata documents
    (``*.json``, ``info``) are bounded by the JSON loader instead.

    Raises
    ------
    OutsideRootError
        For a link (the directory or an entry in it) leading out of the root.
    DanglingLinkError
        For a link that leads nowhere (its target is missing, or a loop).
    NotARegularFileError
        For an entry that is neither a regular file, a directory nor an allowed link, or a
        directory where a data file should be.
    FormatError
        For a file larger than ``max_file_bytes``.
    """
    if not location.is_local:
        return
    root = str(location.kvstore["path"])
    follow = follow_symlinks_enabled()
    base = os.path.join(root, rel) if rel else root
    check_resolved_inside(base, root, key=rel or ".", follow=follow, what="scale directory")
    if not os.path.isdir(base):
        return
    for entry, key, problem in scan_level(root, rel, follow=follow, is_data_key=is_data_key, limit=limit):
        if problem is not None:
            raise problem.error(root)
        if max_file_bytes is not None and not entry.name.endswith(".json") and entry.name != "info":
            _check_file_size(entry, key, max_file_bytes)


def unreadable_entries(root: str, rel: str, *, is_data_key: Callable[[str], bool] | None = None,
                       follow: bool | None = None, limit: int = LEVEL_SCAN_LIMIT) -> list[UnreadableEntry]:
    """The entries below ``rel`` of the local directory ``root`` that are there but cannot be read as data files.

    For ``validate``: each is a finding (see :func:`scan_level`), where a read would raise
    :meth:`UnreadableEntry.error`. ``[]`` when the directory does not exist.
    """
    if not os.path.isdir(os.path.join(root, rel) if rel else root):
        return []
    follow = follow_symlinks_enabled() if follow is None else follow
    return [p for _, _, p in scan_level(root, rel, follow=follow, is_data_key=is_data_key, limit=limit)
            if p is not None]


def _check_file_size(entry: os.DirEntry[str], key: str, max_file_bytes: int) -> None:
    try:
        st = os.stat(entry.path)
    except OSError:
        return  # gone, or a dangling link: a missing chunk
    if stat.S_ISREG(st.st_mode) and st.st_size > max_file_bytes:
        raise FormatError(f"is {st.st_size} bytes, larger than the {max_file_bytes}-byte limit for a chunk or shard "
                          "file of this scale", key=key)


def file_kind(mode: int) -> str:
    """A word for a file that is not a regular file, as an error names it."""
    for test, word in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return word
    return "special file"
