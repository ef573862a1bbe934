"""The one translation of TensorStore's failures into the project's error groups.

Why here, once: TensorStore raises a plain ``ValueError`` for every failure (a corrupt chunk, a
missing file, an unreachable host, an unsupported codec) and puts the kind in the message, as an
absl status code followed by a colon (``"DATA_LOSS: Error reading local file \\"…\\": Digest
mismatch"``). Before this module each caller guessed at substrings and most let the ``ValueError``
through, so a damaged dataset ended in a raw traceback from the lazy array read. Every place that
calls TensorStore (the byte stores, :mod:`.kvreads`, opening volumes, :class:`LazyArray` reads)
passes its exception through :func:`error_from_tensorstore` with the array or key it was working on.

The status codes and what a caller can do about them:

=====================================  ==============================================================
code                                   error (group)
=====================================  ==============================================================
DATA_LOSS, FAILED_PRECONDITION,        reading: :class:`ChunkDecodeError` (corrupt: the bytes of a
OUT_OF_RANGE, INVALID_ARGUMENT         chunk or shard do not decode); opening: :class:`FormatError`
NOT_FOUND                              :class:`NotFoundError`
UNIMPLEMENTED                          :class:`UnsupportedFeatureError`
UNAVAILABLE, DEADLINE_EXCEEDED,        :class:`StoreUnreachableError` (within the configured limits)
ABORTED after the retries
PERMISSION_DENIED, UNAUTHENTICATED     :class:`StoragePermissionError`
anything else (RESOURCE_EXHAUSTED,     :class:`StoreError`
ABORTED, INTERNAL, UNKNOWN …)
=====================================  ==============================================================

The file or key TensorStore names in the message (its first double-quoted string) becomes the
error's ``key``, so the user sees which chunk is broken, next to the array URL we were reading.
"""

from __future__ import annotations

import re

from napari_shardscope.core.errors import (
    ChunkDecodeError,
    FormatError,
    NotFoundError,
    ShardscopeError,
    StoragePermissionError,
    StoreError,
    StoreUnreachableError,
    UnsupportedFeatureError,
)

#: ``CODE: rest`` at the start of a TensorStore message.
_STATUS = re.compile(r"^\s*([A-Z_]+):\s*(.*)$", re.DOTALL)
#: The first double-quoted string: TensorStore's way of naming the file, key or URL it failed on.
_QUOTED = re.compile(r'"([^"]+)"')

#: Codes that mean the bytes or metadata break their spec.
CORRUPT_CODES = frozenset({"DATA_LOSS", "FAILED_PRECONDITION", "OUT_OF_RANGE", "INVALID_ARGUMENT"})
#: Codes that mean the store did not answer in time or could not be reached.
UNREACHABLE_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
#: Codes that mean access was refused.
PERMISSION_CODES = frozenset({"PERMISSION_DENIED", "UNAUTHENTICATED"})


def status_code(exc: BaseException) -> str | None:
    """The absl status code at the start of a TensorStore message (``"DATA_LOSS"``), or ``None``."""
    match = _STATUS.match(str(exc))
    return match.group(1) if match else None


def named_key(exc: BaseException) -> str | None:
    """The file, key or URL TensorStore names in its message (its first quoted string), if any."""
    match = _QUOTED.search(str(exc))
    return match.group(1) if match else None


#: Words of a decoding failure in a TensorStore message that carries no status code (the sharded
#: precomputed reader quotes "Error decoding existing minishard index ..." bare).
_DECODE_FAILURE = re.compile(r"Error decoding|Error reading chunk .* in minishard")


def error_from_tensorstore(exc: BaseException, *, where: str, opening: bool = False,
                           raw_bytes: bool = False) -> ShardscopeError:
    """Our typed error for a TensorStore failure ``exc`` that happened while working on ``where``.

    Parameters
    ----------
    exc
        What TensorStore raised (an error of ours is returned unchanged).
    where
        The array URL, kvstore URL or key the caller was reading, named in the message.
    opening
        ``True`` while opening a driver: a rejected spec then is a :class:`FormatError` of the
        metadata, not a :class:`ChunkDecodeError`.
    raw_bytes
        ``True`` for a byte store reading or writing one key: nothing is decoded there, so a
        "corrupt" code is the storage's failure (:class:`StoreError`); the decoder above the byte
        store reports bad bytes itself, with their offset.

    Returns
    -------
    ShardscopeError
        The error to raise (``raise error_from_tensorstore(exc, where=…) from exc``).
    """
    if isinstance(exc, ShardscopeError):
        return exc
    message = str(exc)
    code = status_code(exc)
    detail = _STATUS.sub(r"\2", message) if code else message
    key = named_key(exc)
    text = detail if key is None or where in key else f"{where}: {detail}"
    if code in UNREACHABLE_CODES or (code == "ABORTED" and ("retry attempts failed" in detail
                                                            or "CURL error" in detail)):
        return StoreUnreachableError(f"{detail} ({code}; see --timeout/--retries)", path=where)
    if code in PERMISSION_CODES:
        return StoragePermissionError(f"access refused: {detail}", path=where)
    if code == "NOT_FOUND":
        return NotFoundError(f"{where}: {detail}")
    if code == "UNIMPLEMENTED":
        return UnsupportedFeatureError(detail, key=where)
    if code is None and _DECODE_FAILURE.search(message):  # some paths quote no status code
        code = "DATA_LOSS"
    if code in CORRUPT_CODES and not raw_bytes:
        if opening:
            return FormatError(f"TensorStore cannot open it: {text}", key=key or where)
        return ChunkDecodeError(f"cannot read the chunk: {text}", key=key or where)
    return StoreError(f"{where}: {message}")
