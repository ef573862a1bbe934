"""The one exception tree of napari-shardscope, grouped by what a caller does about an error.

Everything the package raises on purpose derives from :class:`ShardscopeError`, so a caller (the
CLI, a widget, a notebook) can catch our errors without catching programming mistakes. Below the
root sit seven *groups*, one per thing a caller can do:

=====================  ====  ===============================================================
group                  exit  what the caller does
=====================  ====  ===============================================================
ArgumentError          2     fix the argument it names (a value, a coordinate, an option)
NotFoundError          3     check the path, URL, version, branch or id: nothing is there
CorruptDataError       4     the bytes or metadata break their spec: repair or re-write them
UnsupportedError       5     the data is valid but uses a feature shardscope does not read
RefusedWriteError      6     the write is not allowed there (committed version, source volume,
                             occupied destination): write somewhere else or branch first
ConflictError          7     someone else changed the same thing (a merge conflict, a held
                             lock, a lost compare-and-swap): resolve, wait or retry
StoreError             8     the storage failed (I/O, network, permissions): retry or fix access
=====================  ====  ===============================================================

Exit code 1 means a check ran and found problems (``validate``); 0 is success. :data:`EXIT_CODES`
and :func:`exit_code_for` are the single place that maps errors to exit codes: the CLI asks them,
and the README quotes the table above.

Format errors carry the file/key and byte offset where the problem was found, because a user
debugging a pipeline needs to know *where* a shard is broken, not only that it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

EXIT_OK = 0
#: A check ran and found problems (``validate``); not an error.
EXIT_CHECK_FAILED = 1


@dataclass(frozen=True)
class Remedy:
    """An argument that would make a refused call succeed, named as the library names it.

    An error carries its remedies (:meth:`ShardscopeError.suggesting`) and its message quotes each in
    the library's words (``overwrite=True``, ``instance='NAME'``); every door renders the same concept in
    its own: the command line says ``--overwrite`` (:func:`napari_shardscope.core.cli.main.report_error`),
    so a shell user is never told to pass a Python keyword.

    Attributes
    ----------
    name
        The keyword argument of the library call (the option's ``dest`` on the command line).
    value
        The value to pass: ``True`` for a switch, else a placeholder such as ``"NAME"``.
    """

    name: str
    value: object = True

    def __str__(self) -> str:
        return f"{self.name}={self.value!r}"


#: The remedy of a refused write to an occupied destination (``overwrite=True`` / ``--overwrite``).
OVERWRITE = Remedy("overwrite")


class ShardscopeError(Exception):
    """Root of every error napari-shardscope raises deliberately."""

    #: Arguments that would make the call succeed, quoted in the message as the library spells them.
    remedies: tuple[Remedy, ...] = ()

    def suggesting(self, *remedies: Remedy) -> Self:
        """This error, carrying ``remedies`` (quoted in its message by ``str(remedy)``) for each door to render."""
        self.remedies = (*self.remedies, *remedies)
        return self

    def rendered(self, spell: Callable[[Remedy], str]) -> str:
        """The message with each remedy spelt by ``spell`` (the CLI passes its option names)."""
        text = str(self)
        for remedy in self.remedies:
            text = text.replace(str(remedy), spell(remedy))
        return text


# -- the groups ---------------------------------------------------------------------------------------
class ArgumentError(ShardscopeError, ValueError):
    """A caller passed a bad argument (names the argument and the value)."""


class NotFoundError(ShardscopeError, LookupError):
    """What was asked for is not there: a dataset, key, version, branch, data instance or label."""


class CorruptDataError(ShardscopeError):
    """Stored bytes or metadata that break their spec, or a store whose parts do not fit together."""


class UnsupportedError(ShardscopeError):
    """Valid data that uses a feature shardscope does not implement (names the feature)."""


class RefusedWriteError(ShardscopeError):
    """A write that is not allowed where it was aimed (committed version, source volume, occupied path)."""


class ConflictError(ShardscopeError):
    """A change collided with another one: a merge conflict, a held lock, a lost compare-and-swap."""


class StoreError(ShardscopeError):
    """The storage failed: an I/O error, a full disk, a refused permission, an unreachable URL."""


#: Exit code of each group; the one map from errors to exit codes. An error in two groups (an
#: unknown instance name is a bad argument *and* not found) takes the first that matches, so the
#: catch-all ArgumentError comes last.
EXIT_CODES: tuple[tuple[type[ShardscopeError], int], ...] = (
    (NotFoundError, 3),
    (CorruptDataError, 4),
    (UnsupportedError, 5),
    (RefusedWriteError, 6),
    (ConflictError, 7),
    (StoreError, 8),
    (ArgumentError, 2),
)
#: An error of ours that belongs to no group (should not happen; reported as a failure).
EXIT_OTHER = 9
#: A bug: an exception that is not ours reached the command line.
EXIT_INTERNAL = 70

#: What each exit code means, in code order, in a word and in a sentence: the table ``shardscope --help``
#: prints (kept next to the map above, which it describes).
EXIT_MEANINGS: tuple[tuple[int, str, str], ...] = (
    (EXIT_OK, "ok", "success"),
    (EXIT_CHECK_FAILED, "problems found", "a check ran and found problems (validate, repo verify, remote check)"),
    (2, "bad argument", "fix the argument or option the message names"),
    (3, "not found", "no such path, URL, version, branch, instance or id"),
    (4, "corrupt data", "the bytes or metadata break their spec (file and byte offset named)"),
    (5, "unsupported", "valid data using a feature shardscope does not read"),
    (6, "refused write", "committed version, source volume or occupied destination"),
    (7, "conflict", "a merge conflict, a held lock or a lost compare-and-swap"),
    (8, "storage failed", "I/O, network, permissions, timeouts"),
    (EXIT_OTHER, "other", "an error of ours in no group"),
    (EXIT_INTERNAL, "internal error", "a bug (SHARDSCOPE_DEBUG=1 shows the traceback)"),
)


def exit_code_for(exc: BaseException) -> int:
    """The CLI exit code for ``exc`` (see the module docstring's table)."""
    for group, code in EXIT_CODES:
        if isinstance(exc, group):
            return code
    return EXIT_OTHER if isinstance(exc, ShardscopeError) else EXIT_INTERNAL


def group_name(exc: BaseException) -> str:
    """The group an error belongs to, as a word for ``--json`` output (``"not_found"`` …)."""
    names = {3: "not_found", 4: "corrupt", 5: "unsupported", 6: "refused_write", 7: "conflict", 8: "store",
             2: "argument"}
    for group, code in EXIT_CODES:
        if isinstance(exc, group):
            return names[code]
    return "internal" if not isinstance(exc, ShardscopeError) else "other"


# -- specific errors ------------------------------------------------------------------------------------
class NotADatasetError(NotFoundError):
    """A path or URL holds none of the formats we read (or a group of them, not a volume).

    ``children`` names the datasets found below it (relative paths, a bounded search; empty when
    none were found or the store cannot be listed), so a user who pointed one level too high is
    told where to point; ``url`` is the path or URL it is about.
    """

    def __init__(self, message: str, *, children: tuple[str, ...] = (), url: str | None = None) -> None:
        self.children = tuple(children)
        self.url = url
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_not_a_dataset_error, (type(self), str(self), self.children, self.url))


def _rebuild_not_a_dataset_error(cls: type[NotADatasetError], message: str, children: tuple[str, ...],
                                 url: str | None) -> NotADatasetError:
    return cls(message, children=children, url=url)


class OutsideRootError(ArgumentError):
    """A key or path that would resolve outside the root of a byte store (dataset, export, repository).

    Raised for keys with ``..``, ``.`` or empty components, absolute keys, NUL bytes and backslashes,
    and for symbolic links whose target lies outside the root (unless links are followed on
    purpose: ``follow_symlinks=True`` / ``--follow-symlinks``). Names the key and the root.
    """

    def __init__(self, message: str, *, key: str, root: str) -> None:
        self.key = key
        self.root = root
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_outside_root_error, (type(self), str(self), self.key, self.root))


def _rebuild_outside_root_error(cls: type[OutsideRootError], message: str, key: str, root: str) -> OutsideRootError:
    return cls(message, key=key, root=root)


class ReadOnlyVolumeError(RefusedWriteError, TypeError):
    """A write into a lazy view of a stored volume: shardscope never writes into a source volume."""


class RefusedDestinationError(RefusedWriteError, ArgumentError):
    """A write destination that already holds data or overlaps what is being read (an export's ``dest``).

    It is the caller's argument that is wrong, so it is an :class:`ArgumentError` too; its exit code is the
    refused write's.
    """


class FormatError(CorruptDataError):
    """Bytes or metadata that break a format spec.

    Parameters
    ----------
    message
        What is wrong, in words a user of the format understands.
    key
        The file or key holding the bad bytes (``None`` when not tied to one).
    offset
        Byte offset inside ``key`` where the problem starts (``None`` when unknown).
    """

    def __init__(self, message: str, *, key: str | None = None, offset: int | None = None) -> None:
        self.message = message
        self.key = key
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.message
        if self.key is not None:
            text = f"{self.key}: {text}"
        if self.offset is not None:
            text = f"{text} at byte {self.offset}"
        return text

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only arguments survive pickling (Dask workers)
        return (_rebuild_format_error, (type(self), self.message, self.key, self.offset))


def _rebuild_format_error(cls: type[FormatError], message: str, key: str | None, offset: int | None) -> FormatError:
    return cls(message, key=key, offset=offset)


class MetadataError(FormatError):
    """A metadata document (``info``, ``zarr.json``, ``attributes.json``) violates its spec.

    The message names the field and the offending value.
    """


class UnsafeMetadataPathError(MetadataError):
    """A metadata document names a key or path that would resolve outside its dataset.

    A precomputed scale ``key`` of ``../x``, an OME-Zarr ``datasets[i].path`` of ``/etc``, a mesh
    directory with a backslash: damaged or hostile data, refused when the document is parsed so that
    no consumer (voxel reads, ``inspect``, export, labelmap creation) ever reads there.
    """


class NotARegularFileError(FormatError):
    """A FIFO, socket, device or directory where a chunk, shard or metadata file should be.

    Refused before a byte is read: reading a FIFO blocks forever, a device may never end.
    """


class DanglingLinkError(NotARegularFileError):
    """A symbolic link where a chunk, shard or metadata file should be that leads nowhere (dangling, or a loop).

    Not an absent key, which reads as fill: the entry is there, the data it named is gone.
    """


class IndexDecodeError(FormatError):
    """A shard index or minishard index cannot be decoded or is inconsistent."""


class ChunkDecodeError(FormatError):
    """A chunk's bytes cannot be decoded with the declared encoding."""


class ChecksumError(FormatError):
    """A stored checksum (zarr v3 ``crc32c``) does not match the bytes it covers."""


class UnsupportedFeatureError(UnsupportedError):
    """A format feature (codec, encoding, data type, layout) that is valid but not implemented here.

    Parameters
    ----------
    feature
        The feature by the name its spec gives it (``"zarr v2"``, ``"codec 'delta'"``).
    key
        The metadata file that asks for it, when there is one.
    """

    def __init__(self, feature: str, *, key: str | None = None, detail: str = "") -> None:
        self.feature = feature
        self.key = key
        where = f"{key}: " if key else ""
        more = f" ({detail})" if detail else ""
        super().__init__(f"{where}{feature} is not supported{more}")


class StorageFaultError(StoreError):
    """The storage under a path or URL failed; names the path so the user knows which disk or host to fix.

    Parameters
    ----------
    message
        What failed, in words (``"no space left on the device"``).
    path
        The file, directory or URL that could not be read or written (``None`` when unknown).
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only arguments survive pickling (Dask workers)
        return (_rebuild_storage_fault, (type(self), self.message, self.path))


def _rebuild_storage_fault(cls: type[StorageFaultError], message: str, path: str | None) -> StorageFaultError:
    return cls(message, path=path)


class DiskFullError(StorageFaultError):
    """The filesystem (or a quota) has no room left: free space or write elsewhere; nothing is corrupt."""


class ReadOnlyStorageError(StorageFaultError):
    """The filesystem or file is read-only: the data is intact, it just cannot be written there."""


class StoragePermissionError(StorageFaultError):
    """Access to the path or URL was refused (file permissions, HTTP 401/403, missing credentials)."""


class ResourceLimitError(StorageFaultError):
    """The process ran out of memory or address space while mapping or reading a path: not damage.

    LMDB maps its whole map size when it opens a repository; under an address-space limit (``ulimit
    -v``, a batch scheduler's memory limit) that fails. The data is intact: raise the limit or free memory.
    """


class StoreUnreachableError(StorageFaultError):
    """A remote store did not answer within the configured timeouts and retries, or is not reachable."""


class VersionError(ShardscopeError):
    """A versioned-store rule was broken; each subclass also belongs to the group a caller acts on."""
