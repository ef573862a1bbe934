"""The :class:`ByteStore` protocol: what the format layer needs from storage, and its read counters."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from napari_shardscope.core.bytestore.bounded import Over, over_limit_message
from napari_shardscope.core.bytestore.coalesce import read_coalesced
from napari_shardscope.core.errors import FormatError, MetadataError
from napari_shardscope.core.json_document import MAX_JSON_BYTES


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


def read_bounded(store: ByteStore, key: str, max_bytes: int, what: str,
                 error: type[FormatError] = FormatError) -> bytes | None:
    """The bytes of ``key`` (``None`` when absent), refused when the key holds more than ``max_bytes``.

    The one door for whole-key reads of anything a hostile or damaged store could make huge: a
    whole-key read allocates whatever the key holds, and a dataset or a remote can hold a terabyte
    (a sparse file) where its spec allows kilobytes: the read would abort the process in its
    allocator, fail with ``MemoryError`` or take minutes. The size is known before the value
    arrives: a stat where it is cheap (local files; the read itself then asks for at most
    ``max_bytes + 1`` bytes, so a file growing meanwhile changes nothing); on TensorStore's stores
    in the fewest requests the driver allows (one ranged GET on HTTP, a one-byte probe and the
    read on S3 and GCS: :mod:`~napari_shardscope.core.bytestore.bounded`). ``what`` names the kind
    of value in the message ("a metadata document"); ``error`` is the :class:`FormatError`
    subclass raised, naming the key.
    """
    return read_bounded_many(store, [key], max_bytes, what, error)[0]


def read_bounded_many(store: ByteStore, keys: Sequence[str], max_bytes: int, what: str,
                      error: type[FormatError] = FormatError) -> list[bytes | None]:
    """:func:`read_bounded` of each of ``keys``; on a remote store their requests are in flight together."""
    batch = getattr(store, "read_at_most", None)
    if batch is not None:
        out: list[bytes | None] = []
        for key, got in zip(keys, batch(keys, max_bytes), strict=True):
            if isinstance(got, Over):
                raise error(over_limit_message(max_bytes, what, got.size), key=key)
            out.append(got)
        return out
    return [_read_bounded_one(store, key, max_bytes, what, error) for key in keys]


def _read_bounded_one(store: ByteStore, key: str, max_bytes: int, what: str,
                      error: type[FormatError]) -> bytes | None:
    if store.cheap_size:
        size = store.size(key)  # refuses links out of the root and special files, like read()
        if size is None:
            return None
        if size > max_bytes:
            raise error(f"is {size} bytes, larger than the {max_bytes}-byte limit for {what}", key=key)
        data = store.read_range(key, 0, max_bytes + 1)
    else:  # any other store: the byte at the limit exists only in a value over it
        probe = store.read_range(key, max_bytes, max_bytes + 1)
        if probe is None:
            return None
        if probe:
            raise error(over_limit_message(max_bytes, what), key=key)
        data = store.read(key)
    if data is not None and len(data) > max_bytes:  # replaced by a larger value between the two requests
        raise error(f"is {len(data)} bytes, larger than the {max_bytes}-byte limit for {what}", key=key)
    return data


def write_many(store: ByteStore, items: Sequence[tuple[str, bytes]], *, in_flight: int = 32) -> None:
    """:meth:`ByteStore.write` of each ``(key, data)``, concurrently where the store can."""
    batch = getattr(store, "write_many", None)
    if batch is not None:
        batch(items, in_flight)
        return
    for key, data in items:
        store.write(key, data)


def read_document(store: ByteStore, key: str) -> bytes | None:
    """A metadata document's bytes (``None`` when absent), refused over :data:`MAX_JSON_BYTES` before reading."""
    return read_bounded(store, key, MAX_JSON_BYTES, "a metadata document", MetadataError)


def read_documents(store: ByteStore, keys: Sequence[str]) -> list[bytes | None]:
    """:func:`read_document` of each of ``keys``, their requests in flight together on a remote store."""
    return read_bounded_many(store, keys, MAX_JSON_BYTES, "a metadata document", MetadataError)


def read_ranges(store: ByteStore, requests: Sequence[tuple[str, int, int]],
                max_gap: int | Literal["store"] | None = "store") -> list[bytes | None]:
    """:meth:`ByteStore.read_range` of each ``(key, start, end)``, concurrently where the store can.

    Remote stores (:class:`~napari_shardscope.core.bytestore.remote.TensorStoreByteStore`) issue
    the requests together and fetch ranges of one object at most ``max_gap`` bytes apart as one
    request (default: the store's own gap, ``None``: never; see
    :mod:`~napari_shardscope.core.bytestore.coalesce`), so many small ranges cost a few round
    trips. Local stores read them one after another (a local read costs no round trip, and a
    thread hand-off costs more than the read), coalesced only when ``max_gap`` is given. The
    answers are those of separate ``read_range`` calls either way.
    """
    batch = getattr(store, "read_ranges", None)
    if batch is not None:
        result: list[bytes | None] = batch(requests, max_gap)
        return result

    def read_each(fetches: Sequence[tuple[str, int, int]]) -> list[bytes | None]:
        return [store.read_range(key, start, end) for key, start, end in fetches]

    if max_gap == "store" or max_gap is None:
        return read_each(requests)
    return read_coalesced(read_each, requests, max_gap, LOCAL_COALESCE_SPAN)


def read_suffixes(store: ByteStore, requests: Sequence[tuple[str, int]]) -> list[bytes | None]:
    """:meth:`ByteStore.read_suffix` of each ``(key, length)``, concurrently where the store can.

    Like :func:`read_ranges`: remote stores issue the requests together, local ones read in turn.
    """
    batch = getattr(store, "read_suffixes", None)
    if batch is not None:
        result: list[bytes | None] = batch(requests)
        return result
    return [store.read_suffix(key, length) for key, length in requests]


#: The longest span one coalesced local read may cover (only when a caller asks local reads to coalesce).
LOCAL_COALESCE_SPAN = 16 << 20
