"""The one exception tree of napari-shardscope.

Everything the package raises on purpose derives from :class:`ShardscopeError`, so a caller (the
CLI, a widget, a notebook) can catch our errors without catching programming mistakes. Format
errors carry the file/key and byte offset where the problem was found, because a user debugging a
pipeline needs to know *where* a shard is broken, not only that it is.
"""

from __future__ import annotations


class ShardscopeError(Exception):
    """Root of every error napari-shardscope raises deliberately."""


class ArgumentError(ShardscopeError, ValueError):
    """A caller passed a bad argument (names the argument and the value)."""


class ReadOnlyVolumeError(ShardscopeError, TypeError):
    """A write into a lazy view of a stored volume: shardscope never writes into a source volume."""


class NotADatasetError(ShardscopeError):
    """A path or URL holds none of the formats we read."""


class StoreError(ShardscopeError):
    """The byte store failed: an I/O error, a refused write, an unreachable URL."""


class FormatError(ShardscopeError):
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


class MetadataError(FormatError):
    """A metadata document (``info``, ``zarr.json``, ``attributes.json``) violates its spec.

    The message names the field and the offending value.
    """


class IndexDecodeError(FormatError):
    """A shard index or minishard index cannot be decoded or is inconsistent."""


class ChunkDecodeError(FormatError):
    """A chunk's bytes cannot be decoded with the declared encoding."""


class ChecksumError(FormatError):
    """A stored checksum (zarr v3 ``crc32c``) does not match the bytes it covers."""


class VersionError(ShardscopeError):
    """A versioned-store operation is not allowed (e.g. writing to a committed version)."""
