"""Whole-value reads bounded before the bytes arrive, for TensorStore's kvstores.

TensorStore reads a key whole into one buffer: a 5 GiB ``refs.json`` (a sparse file costs nothing on
disk) aborts the process in its allocator, a 1 GiB one costs gigabytes and tens of seconds before
any size check after the read can refuse it. A kvstore has no stat call, but a range read says
enough: asking for the one byte at offset ``limit`` returns that byte when the value holds more
than ``limit`` bytes, and is refused as out of range when it holds at most ``limit`` (every driver:
``file`` says so itself, S3, GCS and HTTP servers answer 416). Only then is the value read whole.

:func:`~napari_shardscope.core.bytestore.protocol.read_bounded` is the door for
:class:`~napari_shardscope.core.bytestore.protocol.ByteStore` reads (a stat where it is cheap, this
probe elsewhere); this module serves the readers that hold a raw ``tensorstore.KvStore`` (metadata
detection, compare-and-swap reads), with the same answer.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore, status_code

Probe = Literal["missing", "fits", "over"]


def issue_probe(kv: Any, key: str, max_bytes: int) -> Any:
    """Start the one-byte read at ``max_bytes`` that tells whether ``key`` holds more than ``max_bytes``."""
    return kv.read(key, byte_range=slice(max_bytes, max_bytes + 1))


#: A server that answers an unsatisfiable range with 206 and a ``Content-Range`` naming the total size
#: (gcp-storage-emulator: ``bytes 1024-0/1``) instead of 416: TensorStore refuses the header, and says it.
_TOTAL_IN_CONTENT_RANGE = re.compile(r'Content-Range header received: "bytes \d+-\d+/(\d+)"')


def probe_outcome(future: Any, where: str, max_bytes: int) -> Probe:
    """What a probe from :func:`issue_probe` found: the key is missing, fits the limit, or is over it."""
    try:
        result = future.result()
    except Exception as exc:
        if status_code(exc) == "OUT_OF_RANGE":
            return "fits"
        if status_code(exc) == "NOT_FOUND" or "Not a directory" in str(exc):
            return "missing"
        total = _TOTAL_IN_CONTENT_RANGE.search(str(exc))
        if total is not None:
            return "fits" if int(total.group(1)) <= max_bytes else "over"
        raise error_from_tensorstore(exc, where=where, raw_bytes=True) from exc
    if result.state != "value":
        return "missing"
    return "over" if len(result.value) else "fits"


def over_limit_message(max_bytes: int, what: str) -> str:
    """The words of every refusal of a value over its limit (the caller's error names the key)."""
    return f"holds more than {max_bytes} bytes, the limit for {what}; refused before reading it"
