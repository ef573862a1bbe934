"""Whole-value reads bounded before the bytes arrive, in the fewest round trips each TensorStore driver allows.

TensorStore reads a key whole into one buffer: a 5 GiB ``refs.json`` (a sparse file costs nothing on
disk) aborts the process in its allocator, a 1 GiB one costs gigabytes and tens of seconds before
any size check after the read can refuse it. So the size must be bounded before the bytes arrive.
What each driver allows (measured with TensorStore 0.1.86 against the ``file`` driver, loopback
HTTP, moto's S3 and gcp-storage-emulator; ``tests/core/bytestore/test_bounded_reads.py``):

* A byte range running past the end of a value is refused as ``OUT_OF_RANGE`` by every driver,
  even when the server sent the short value (HTTP, S3 and GCS answer ``bytes=0-N`` of a shorter
  object with 206 and the whole object; TensorStore checks the range it asked for and drops the
  bytes). So no TensorStore range read returns a value of unknown size in one request.
* ``file``: the size is a ``stat`` away (:func:`os.stat`), no read needed.
* ``http``: the driver sends the spec's ``headers`` with every request. A whole-value read (no
  range of TensorStore's own) with a ``Range: bytes=0-W`` header of ours is answered like any
  ranged GET; TensorStore accepts a 206 that holds the whole value (``Content-Range`` total equal
  to its length) and refuses one that holds a part, naming the total. One request reads a value of
  at most ``W + 1`` bytes, and a larger one costs at most ``W + 1`` bytes before it is known.
* ``s3``, ``gcs``: no header option, so a one-byte *probe* at offset ``limit`` comes first: it is
  answered 416 (``OUT_OF_RANGE``) when the value fits and with one byte when it does not
  (gcp-storage-emulator answers 206 with a ``Content-Range`` naming the total instead). Only then
  is the value read whole: two requests, two dependent round trips, on these drivers.

:class:`BoundedReader` picks the way per driver and reads many keys with their requests in flight
together (format detection asks for six documents at once). A server that ignores ``Range``
altogether (answers 200 with everything) defeats every way; no client can bound that but by a
timeout.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore, status_code
from napari_shardscope.core.errors import StoreError

Probe = Literal["missing", "fits", "over"]

#: The first window of a bounded HTTP read: a value of at most this many bytes (nearly every
#: metadata document) costs one request; a larger one within the limit costs a second request
#: (this window's bytes are dropped by TensorStore with the refusal), and a value over the limit
#: is refused having received at most this window.
FIRST_WINDOW = 64 << 10


@dataclass(frozen=True)
class Over:
    """A value holding more bytes than the limit it was read with (``size`` when the answer named it)."""

    size: int | None = None


Bounded = bytes | None | Over


def issue_probe(kv: Any, key: str, max_bytes: int) -> Any:
    """Start the one-byte read at ``max_bytes`` that tells whether ``key`` holds more than ``max_bytes``."""
    return kv.read(key, byte_range=slice(max_bytes, max_bytes + 1))


#: A server that answers an unsatisfiable range with 206 and a ``Content-Range`` naming the total size
#: (gcp-storage-emulator: ``bytes 1024-0/1``) instead of 416: TensorStore refuses the header, and says it.
_TOTAL_IN_CONTENT_RANGE = re.compile(r'Content-Range header received: "bytes \d+-\d+/(\d+)"')
#: TensorStore's refusal of an answer holding part of a value: ``... byte range [0, 65536) and total size N``.
_TOTAL_IN_REFUSAL = re.compile(r"was not satisfied by response with byte range \[\d+, \d+\) and total size (\d+)")


def probe_outcome(future: Any, where: str, max_bytes: int) -> Probe:
    """What a probe from :func:`issue_probe` found: the key is missing, fits the limit, or is over it."""
    try:
        result = future.result()
    except Exception as exc:
        if status_code(exc) == "OUT_OF_RANGE":
            return "fits"
        if _missing(exc):
            return "missing"
        total = _TOTAL_IN_CONTENT_RANGE.search(str(exc))
        if total is not None:
            return "fits" if int(total.group(1)) <= max_bytes else "over"
        raise error_from_tensorstore(exc, where=where, raw_bytes=True) from exc
    if result.state != "value":
        return "missing"
    return "over" if len(result.value) else "fits"


def over_limit_message(max_bytes: int, what: str, size: int | None = None) -> str:
    """The words of every refusal of a value over its limit (the caller's error names the key)."""
    held = "" if size is None else f" ({size} bytes)"
    return f"holds more than {max_bytes} bytes{held}, the limit for {what}; refused before reading it"


def _missing(exc: BaseException) -> bool:
    message = str(exc)
    return status_code(exc) == "NOT_FOUND" or "Not a directory" in message or "[HTTP code 404]" in message


class BoundedReader:
    """Whole-value reads of one kvstore, each refused over its limit before the value arrives.

    Parameters
    ----------
    kv
        The open ``tensorstore.KvStore``.
    spec
        Its JSON spec (decides the way: ``stat`` for ``file``, a ranged whole read for ``http``, a
        probe first elsewhere).
    context
        The ``tensorstore.Context`` ``kv`` was opened with (the ranged HTTP stores share its pools).
    where
        The URL of a key, for messages.
    """

    def __init__(self, kv: Any, spec: Any, context: Any, where: Callable[[str], str]) -> None:
        self._kv = kv
        self._spec = spec if isinstance(spec, dict) else _spec_json(kv)
        self._context = context
        self._where = where
        self._windows: dict[int, Any] = {}  # window -> the http kvstore sending "Range: bytes=0-(window-1)"
        self._lock = threading.Lock()
        driver = self._spec.get("driver")
        self.way: Literal["stat", "ranged", "probe"] = (
            "stat" if driver == "file" and isinstance(self._spec.get("path"), str)
            else "ranged" if driver in ("http", "https") and _no_range_header(self._spec) else "probe")

    def read(self, key: str, max_bytes: int) -> Bounded:
        """The value of ``key`` (``None`` when missing, :class:`Over` when over ``max_bytes``)."""
        return self.read_many([key], max_bytes)[0]

    def read_many(self, keys: Sequence[str], max_bytes: int) -> list[Bounded]:
        """:meth:`read` of each key, the requests of all keys in flight together (one round trip, or two)."""
        return self.read_versioned(keys, max_bytes)[0]

    def read_versioned(self, keys: Sequence[str], max_bytes: int) -> tuple[list[Bounded], list[bytes]]:
        """:meth:`read_many`, and the storage generation each value was read at (``b""`` when no
        value was read: missing, or over the limit)."""
        out: list[Bounded] = [None] * len(keys)
        gens = [b""] * len(keys)
        if self.way == "stat":
            self._by_stat(keys, max_bytes, out, gens)
        elif self.way == "ranged" and max_bytes > 0:  # a Range of no bytes cannot be asked for
            self._ranged(keys, max_bytes, out, gens)
        else:
            self._probed(keys, range(len(keys)), max_bytes, out, gens)
        return out, gens

    # ---- file: the size from stat, then the value (no probe)
    def _by_stat(self, keys: Sequence[str], max_bytes: int, out: list[Bounded], gens: list[bytes]) -> None:
        read: list[int] = []
        for i, key in enumerate(keys):
            try:
                st = os.stat(os.path.join(str(self._spec["path"]), key))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:  # no permission …: TensorStore's read says why
                read.append(i)
                continue
            if stat.S_ISDIR(st.st_mode):
                continue  # a directory holds no value
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever
                raise StoreError(f"{self._where(key)}: not a regular file, so not a value")
            if st.st_size > max_bytes:
                out[i] = Over(st.st_size)
            else:
                read.append(i)
        self._read_whole(keys, read, max_bytes, out, gens)

    # ---- http: one ranged GET per key (two for a value over the first window)
    def _ranged(self, keys: Sequence[str], max_bytes: int, out: list[Bounded], gens: list[bytes]) -> None:
        todo = list(range(len(keys)))
        windows = [min(max_bytes, FIRST_WINDOW)] + ([max_bytes] if max_bytes > FIRST_WINDOW else [])
        fallback: list[int] = []
        for w, window in enumerate(windows):
            if not todo:
                break
            kv = self._window_store(window)
            futures = [kv.read(keys[i]) for i in todo]
            again: list[int] = []
            for i, future in zip(todo, futures, strict=True):
                try:
                    result = future.result()
                except Exception as exc:
                    if _missing(exc):
                        continue
                    total = _TOTAL_IN_REFUSAL.search(str(exc))
                    if total is not None and int(total.group(1)) > max_bytes:
                        out[i] = Over(int(total.group(1)))
                    elif total is not None and w + 1 < len(windows):
                        again.append(i)  # fits the limit, not the first window
                    elif status_code(exc) in ("OUT_OF_RANGE", "FAILED_PRECONDITION"):
                        fallback.append(i)  # an answer TensorStore refuses (an empty value's 416): probe
                    else:
                        raise error_from_tensorstore(exc, where=self._where(keys[i]), raw_bytes=True) from exc
                    continue
                if result.state == "value":
                    # more than the limit: a server that ignored the Range header sent all of it
                    out[i] = bytes(result.value) if len(result.value) <= max_bytes else Over(len(result.value))
                    gens[i] = bytes(result.stamp.generation)
            todo = again
        fallback.extend(todo)
        self._probed(keys, fallback, max_bytes, out, gens)

    def _window_store(self, window: int) -> Any:
        """The http kvstore whose every GET asks for bytes ``[0, window)`` (opened once per window)."""
        with self._lock:
            kv = self._windows.get(window)
            if kv is None:
                import tensorstore as ts

                spec = dict(self._spec)
                spec["headers"] = [*spec.get("headers", []), f"Range: bytes=0-{window - 1}"]
                kv = ts.KvStore.open(spec, context=self._context).result()
                self._windows[window] = kv
            return kv

    # ---- s3, gcs (and anything else): a one-byte probe at the limit, then the whole value
    def _probed(self, keys: Sequence[str], which: Sequence[int], max_bytes: int, out: list[Bounded],
                gens: list[bytes]) -> None:
        probes = [issue_probe(self._kv, keys[i], max_bytes) for i in which]
        read: list[int] = []
        for i, probe in zip(which, probes, strict=True):
            try:
                outcome = probe_outcome(probe, self._where(keys[i]), max_bytes)
            except Exception:
                outcome = "fits"  # an unreachable key: the read says why
            if outcome == "over":
                out[i] = Over()
            elif outcome == "fits":
                read.append(i)
        self._read_whole(keys, read, max_bytes, out, gens)

    def _read_whole(self, keys: Sequence[str], read: Sequence[int], max_bytes: int, out: list[Bounded],
                    gens: list[bytes]) -> None:
        """``out`` with the whole values of ``keys[i]`` for ``i`` in ``read``, the reads in flight together."""
        futures = [self._kv.read(keys[i]) for i in read]
        for i, future in zip(read, futures, strict=True):
            try:
                result = future.result()
            except Exception as exc:
                if _missing(exc):
                    continue
                raise error_from_tensorstore(exc, where=self._where(keys[i]), raw_bytes=True) from exc
            if result.state != "value":
                out[i] = None
            elif len(result.value) > max_bytes:  # replaced by a larger value since it was sized
                out[i] = Over(len(result.value))
            else:
                out[i] = bytes(result.value)
            gens[i] = bytes(result.stamp.generation)


def _spec_json(kv: Any) -> dict[str, Any]:
    try:
        return dict(kv.spec().to_json())
    except Exception:  # a kvstore without a JSON spec: probe, the way every driver understands
        return {}


def _no_range_header(spec: dict[str, Any]) -> bool:
    """Whether the user's spec sets no ``Range`` header of its own (ours would then be a second one)."""
    return not any(str(h).lower().startswith("range:") for h in spec.get("headers", []))
