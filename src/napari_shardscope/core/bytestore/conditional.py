"""Compare-and-swap on a byte store: the one place that speaks TensorStore's conditional writes.

Why a separate door: a remote repository's refs change only by compare-and-swap, and TensorStore's
semantics are easy to get wrong (checked against moto and the ``file`` driver with TensorStore
0.1.86, see ``tests/core/bytestore/test_conditional.py``):

* ``kvstore.write(key, value, if_equal=generation)`` writes only when the stored generation is
  ``generation``; a lost race returns an *empty* generation instead of raising;
* ``if_equal=b""`` means *unconditional*, so "create only if absent" must pass the generation a read
  of the missing key returned (:data:`ABSENT`, ``b"\\x02"``), never ``b""``;
* on S3 the check is one request only with ``"use_conditional_write": true`` in the spec; without
  it TensorStore issues a HEAD and then a PUT, and racing writers all "win";
* an S3 generation is the content's MD5, so the same bytes written twice have the same
  generation: callers keep a sequence number inside the value (see the remotes' refs object).

:class:`ConditionalStore` wraps a :class:`~napari_shardscope.core.bytestore.Location` (any URL the
door parses) and offers :meth:`~ConditionalStore.read_generation` and
:meth:`~ConditionalStore.write_if`; :func:`probe_cas` checks once that a stale generation is refused.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.bytestore.bounded import BoundedReader, Over, over_limit_message
from napari_shardscope.core.bytestore.containment import check_key
from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
from napari_shardscope.core.bytestore.url import Location, parse_url
from napari_shardscope.core.errors import ArgumentError, FormatError, UnsupportedError

#: The generation TensorStore reports for a missing key: ``write_if(key, data, ABSENT)`` creates.
ABSENT = b"\x02"


@dataclass(frozen=True)
class Versioned:
    """A value with the generation it was read at (``value`` None: the key is absent)."""

    value: bytes | None
    generation: bytes


class ConditionalStore:
    """Reads with generations and compare-and-swap writes below one location.

    Parameters
    ----------
    url
        Anything :func:`~napari_shardscope.core.bytestore.parse_url` accepts. ``s3://`` gets
        ``use_conditional_write`` (one conditional PUT); ``http(s)://`` is read-only.
    context
        A ``tensorstore.Context`` (default: the shared one, with the user's timeout and retries).
    anonymous
        Send no credentials (a public S3 bucket; see :func:`anonymous_location`).
    """

    def __init__(self, url: str | os.PathLike[str] | Location, context: Any = None, *,
                 anonymous: bool = False) -> None:
        import tensorstore as ts

        from napari_shardscope.core.bytestore.context import shared_context

        self.location = anonymous_location(parse_url(url)) if anonymous else parse_url(url)
        spec = dict(self.location.kvstore)
        if spec.get("driver") == "s3":
            spec["use_conditional_write"] = True
        self.read_only = spec.get("driver") in ("http", "https")
        try:
            self._kv = ts.KvStore.open(spec, context=context if context is not None else shared_context()).result()
        except Exception as exc:
            raise error_from_tensorstore(exc, where=self.location.url, opening=True, raw_bytes=True) from exc
        self._bounded = BoundedReader(self._kv, spec, context if context is not None else shared_context(), self._where)

    @property
    def url(self) -> str:
        return self.location.url

    def _where(self, key: str) -> str:
        """The URL of ``key``, for error messages (the root may or may not end with ``/``)."""
        return f"{self.url.rstrip('/')}/{key}"

    def _check(self, key: str) -> None:
        if self.location.is_local:
            check_key(key, str(self.location.kvstore["path"]))
        elif not key or key.startswith("/") or ".." in key.split("/"):
            raise ArgumentError(f"bad key {key!r} under {self.url}")

    def read_generation(self, key: str, max_bytes: int, what: str,
                        error: type[FormatError] = FormatError) -> Versioned:
        """The value of ``key`` and its generation (:data:`ABSENT`-like when missing).

        A value over ``max_bytes`` is ``error`` naming the key, refused before it arrives (a stat,
        a ranged read or a one-byte probe, per driver: :mod:`~napari_shardscope.core.bytestore.bounded`):
        these are small documents that a hostile or damaged store can make huge.
        """
        self._check(key)
        where = self._where(key)
        [got], [generation] = self._bounded.read_versioned([key], max_bytes)
        if isinstance(got, Over):
            raise error(over_limit_message(max_bytes, what, got.size), key=where)
        return Versioned(got, generation or ABSENT)

    def write_if(self, key: str, data: bytes, generation: bytes) -> bytes | None:
        """Write ``data`` only if ``key`` is still at ``generation``; the new generation, or None if lost.

        ``generation`` must come from :meth:`read_generation` (or be :data:`ABSENT` to create):
        an empty generation would make the write unconditional, so it is refused.
        """
        self._check(key)
        if self.read_only:
            raise UnsupportedError(f"{self.url} is read-only (http); use s3://, gs:// or a directory to write")
        if not generation:
            raise ArgumentError("an empty generation would make the write unconditional")
        try:
            stamp = self._kv.write(key, data, if_equal=generation).result()
        except Exception as exc:
            raise error_from_tensorstore(exc, where=f"{self._where(key)} (conditional write)", raw_bytes=True) from exc
        new = bytes(stamp.generation)
        return new or None

    def delete(self, key: str) -> None:
        """Remove ``key`` unconditionally (probe keys; nothing happens when it is absent)."""
        import tensorstore as ts

        self._check(key)
        try:
            self._kv.delete_range(ts.KvStore.KeyRange(key, key + "\0")).result()
        except Exception as exc:
            raise error_from_tensorstore(exc, where=f"{self._where(key)} (delete)", raw_bytes=True) from exc


def anonymous_location(loc: Location) -> Location:
    """``loc`` read without credentials: S3 gets ``aws_credentials: anonymous`` (a public bucket, no account).

    Other stores are unchanged: local paths and http(s) need no credentials, and TensorStore's gcs
    driver reads a public bucket when no Google credentials are configured.
    """
    if loc.kvstore.get("driver") != "s3":
        return loc
    return Location(url=loc.url, kvstore={**loc.kvstore, "aws_credentials": {"type": "anonymous"}},
                    format_hint=loc.format_hint)


def probe_cas(store: ConditionalStore, prefix: str = "cas-probe/") -> bool:
    """Whether ``store`` refuses a stale compare-and-swap (checked with a fresh probe key).

    Creates a probe key, replaces it with the right generation (must win), then tries again with
    the stale one (must lose). A store that ignores ``If-Match`` (an S3 look-alike without
    conditional writes) accepts the stale write, and pushing to it could lose commits.
    """
    key = f"{prefix}{uuid.uuid4().hex}"
    try:
        first = store.write_if(key, b"1", ABSENT)
        if first is None:
            return False
        second = store.write_if(key, b"2", first)
        if second is None:
            return False
        stale = store.write_if(key, b"3", first)
        again = store.write_if(key, b"4", ABSENT)
    finally:
        store.delete(key)  # every outcome: no probe key is left behind on the user's bucket
    return stale is None and again is None
