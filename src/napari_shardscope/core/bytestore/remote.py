"""The remote byte store: TensorStore's kvstore drivers (``gs://``, ``s3://``, ``http(s)://``, ``file://``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from napari_shardscope.core.bytestore.bounded import Bounded, BoundedReader, Over
from napari_shardscope.core.bytestore.coalesce import RangeRequest, check_range, read_coalesced
from napari_shardscope.core.bytestore.protocol import ReadStats
from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore, status_code
from napari_shardscope.core.errors import StoreError

#: Range reads :meth:`TensorStoreByteStore.read_ranges` keeps in flight: a bound on memory held by
#: pending futures, above TensorStore's default HTTP request concurrency (32) so the driver stays busy.
RANGES_IN_FLIGHT = 256
#: Ranges of one object at most this many bytes apart are fetched as one request by
#: :meth:`TensorStoreByteStore.read_ranges` (:mod:`~napari_shardscope.core.bytestore.coalesce`).
#: Apache Arrow's ``object_store`` uses 1 MiB for S3/GCS/Azure/HTTP (about what a bucket delivers
#: in one request's latency); TensorStore's batch reads use 4 KiB. 1 MiB: the 16 minishard indexes
#: of a 350 KB TensorStore-written shard, 20-30 KB apart, come in one request instead of 16
#: (``bench/locate.py`` measures the trade: requests 273 -> 33, bytes 28 KB -> 5.7 MB, which is
#: still less than TensorStore's own listing reads). Read at call time (tests set it to ``None``).
REMOTE_COALESCE_GAP: int | None = 1 << 20
#: The longest range one coalesced request may span (a single longer range is read as asked).
REMOTE_COALESCE_SPAN = 16 << 20
#: Bytes of bounded ranges :meth:`TensorStoreByteStore.read_ranges` asks for at once: with coalesced
#: requests of up to :data:`REMOTE_COALESCE_SPAN` each, :data:`RANGES_IN_FLIGHT` alone would allow
#: 4 GiB pending. A window always holds at least one request.
BYTES_IN_FLIGHT = 256 << 20


class TensorStoreByteStore:
    """A remote (or local) store through TensorStore's kvstore drivers.

    Parameters
    ----------
    spec
        A kvstore URL (``gs://bucket/path/``, ``s3://…``, ``https://host/path/``, ``file:///…``)
        or a TensorStore kvstore JSON spec.
    context
        An optional ``tensorstore.Context`` to share connection pools and credentials; default: the
        shared one (:func:`~napari_shardscope.core.bytestore.context.shared_context`), which carries
        the remote limits. Never TensorStore's own default context: it retries a refused connection
        (a server that is gone) for minutes instead of failing within ``--timeout``/``--retries``.
    url
        The root as the user typed it, for messages (default: the spec's URL).
    """

    def __init__(self, spec: str | dict[str, Any], context: Any = None, *, url: str | None = None) -> None:
        import tensorstore as ts

        from napari_shardscope.core.bytestore.context import shared_context

        if context is None:
            context = shared_context()
        if isinstance(spec, str) and not spec.endswith("/"):
            spec = spec + "/"
        self._spec = spec
        self._url = None if url is None else url.rstrip("/") + "/"
        try:
            self._kv = ts.KvStore.open(spec, context=context).result()
        except Exception as exc:  # TensorStore raises ValueError for bad specs and URLs
            raise error_from_tensorstore(exc, where=url or str(spec), opening=True, raw_bytes=True) from exc
        self._stats = ReadStats()
        # Files through TensorStore's file driver cost no round trip: their ranges are never coalesced.
        self._is_file = (spec.get("driver") == "file") if isinstance(spec, dict) else spec.startswith("file://")
        self._bounded = BoundedReader(self._kv, spec, context, self._where)
        self._known: dict[str, bytes | None] = {}  # documents this open already read: :meth:`remember`
        self._known_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TensorStoreByteStore({self.url!r})"

    @property
    def url(self) -> str:
        if self._url is not None:
            return self._url
        return self._spec if isinstance(self._spec, str) else str(self._kv.url)

    def _where(self, key: str) -> str:
        """The URL of ``key``, for messages (one ``/`` between the root and the key, whatever the root ends with)."""
        return f"{self.url.rstrip('/')}/{key}"

    @property
    def cheap_size(self) -> bool:
        return False

    @property
    def stats(self) -> ReadStats:
        return self._stats

    @property
    def coalesce_gap(self) -> int | None:
        """The largest gap between two ranges of one object that :meth:`read_ranges` fetches as one request.

        ``None`` (never coalesce) for local files, :data:`REMOTE_COALESCE_GAP` for HTTP, GCS and S3.
        """
        return None if self._is_file else REMOTE_COALESCE_GAP

    def _read(self, key: str, byte_range: slice | None) -> bytes | None:
        try:
            result = self._kv.read(key, byte_range=byte_range).result()
        except Exception as exc:
            if byte_range is not None and status_code(exc) == "OUT_OF_RANGE":
                # The range runs past the end of the value. Behave like a file: return what
                # exists of it (index checks then report the truncation with its offset).
                return self._read_existing_part(key, byte_range)
            raise error_from_tensorstore(exc, where=self._where(key), raw_bytes=True) from exc
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
            if status_code(exc) == "OUT_OF_RANGE":
                return b""  # ``start`` is at or past the end of an existing value
            raise error_from_tensorstore(exc, where=self._where(key), raw_bytes=True) from exc
        if result.state != "value":
            return None
        data = bytes(result.value)[: byte_range.stop - start]
        self._stats.add(len(data))
        return data

    def read(self, key: str) -> bytes | None:
        return self._read(key, None)

    def remember(self, documents: Mapping[str, bytes | None]) -> None:
        """Values (``None``: missing) this open has read already, through another door (format detection).

        The next bounded read of each (:meth:`read_at_most`) is answered from here, once, with no
        request: detection reads ``attributes.json`` and ``s0/attributes.json`` together, and the N5
        opener would otherwise ask for ``s0/attributes.json`` again. Each is forgotten when used, so
        nothing here outlives the open it belongs to.
        """
        with self._known_lock:
            self._known.update(documents)

    def read_at_most(self, keys: Sequence[str], max_bytes: int) -> list[Bounded]:
        """The whole value of each key, or :class:`~napari_shardscope.core.bytestore.bounded.Over` when it
        holds more than ``max_bytes`` (known before the value arrives), ``None`` when missing.

        The requests of all keys are in flight together; each driver's fewest round trips
        (:mod:`~napari_shardscope.core.bytestore.bounded`): one on HTTP, two (a probe, then the
        read) on S3 and GCS. :func:`~napari_shardscope.core.bytestore.read_bounded` is the door.
        """
        known: dict[int, Bounded] = {}
        with self._known_lock:
            for i, key in enumerate(keys):
                if key in self._known:
                    value = self._known.pop(key)
                    known[i] = Over(len(value)) if value is not None and len(value) > max_bytes else value
        ask = [i for i in range(len(keys)) if i not in known]
        read = self._bounded.read_many([keys[i] for i in ask], max_bytes) if ask else []
        for answer in read:
            if isinstance(answer, bytes):
                self._stats.add(len(answer))
        got = dict(zip(ask, read, strict=True)) | known
        return [got[i] for i in range(len(keys))]

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        check_range(key, start, end)
        if end == start:
            return b"" if self._read(key, slice(0, 0)) is not None else None
        return self._read(key, slice(start, end))

    def read_ranges(self, requests: Sequence[RangeRequest],
                    max_gap: int | Literal["store"] | None = "store") -> list[bytes | None]:
        """The bytes of each ``(key, start, end)`` (``None`` for a missing key), requests in flight together.

        Ranges of one object at most ``max_gap`` bytes apart (default: :attr:`coalesce_gap`;
        ``None``: never) are fetched as one request and sliced apart, so the answers equal
        :meth:`read_range`'s of each request alone. TensorStore's futures are issued together, at
        most :data:`RANGES_IN_FLIGHT` at a time, so ``n`` small range reads cost about
        ``n / RANGES_IN_FLIGHT`` round trips and no Python thread each (the context's request
        concurrency still applies). Errors are those of :meth:`read_range`.
        """
        gap = self.coalesce_gap if max_gap == "store" else max_gap
        return read_coalesced(self._fetch_ranges, requests, gap, REMOTE_COALESCE_SPAN)

    def _fetch_ranges(self, requests: Sequence[RangeRequest]) -> list[bytes | None]:
        """:meth:`read_range` of each request, at most :data:`RANGES_IN_FLIGHT` futures in flight at once."""
        for key, start, end in requests:
            check_range(key, start, end)
        return self._fetch_slices([(key, slice(start, end) if end > start else None) for key, start, end in requests],
                                  lambda key: self.read_range(key, 0, 0))

    def read_suffixes(self, requests: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """:meth:`read_suffix` of each ``(key, length)``, requests in flight together.

        A shard index stored at the end of each file (zarr v3's default) is one suffix read per
        shard: issued together, ``n`` shards cost a few round trips instead of ``n``.
        """
        return self._fetch_slices([(key, slice(-length, None) if length > 0 else None) for key, length in requests],
                                  lambda key: self.read_suffix(key, 0))

    def _fetch_slices(self, items: Sequence[tuple[str, slice | None]],
                      empty: Callable[[str], bytes | None]) -> list[bytes | None]:
        """The bytes of each ``(key, byte range)`` with :meth:`_read`'s meaning, futures in flight together.

        At most :data:`RANGES_IN_FLIGHT` futures and :data:`BYTES_IN_FLIGHT` bytes of bounded ranges
        are pending at once. ``None`` ranges are empty reads, which only ask whether the key
        exists (``b""`` or ``None``); one the store refuses as out of range goes through ``empty``.
        """
        out: list[bytes | None] = []
        for window in _windows(items):
            futures = [self._kv.read(key, byte_range=slice(0, 0) if rng is None else rng) for key, rng in window]
            for (key, rng), future in zip(window, futures, strict=True):
                try:
                    result = future.result()
                except Exception as exc:
                    if status_code(exc) == "OUT_OF_RANGE":
                        out.append(empty(key) if rng is None else self._read_existing_part(key, rng))
                        continue
                    raise error_from_tensorstore(exc, where=self._where(key), raw_bytes=True) from exc
                if result.state != "value":
                    out.append(None)
                    continue
                data = b"" if rng is None else bytes(result.value)
                self._stats.add(len(data))
                out.append(data)
        return out

    def write_many(self, items: Sequence[tuple[str, bytes]], in_flight: int) -> None:
        """:meth:`write` of each ``(key, data)``, at most ``in_flight`` writes pending at once."""
        for first in range(0, len(items), max(1, in_flight)):
            window = items[first:first + max(1, in_flight)]
            futures = [self._kv.write(key, data) for key, data in window]
            for (key, _), future in zip(window, futures, strict=True):
                try:
                    future.result()
                except Exception as exc:
                    raise error_from_tensorstore(exc, where=f"{self._where(key)} (write)", raw_bytes=True) from exc

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
            if isinstance(exc, NotImplementedError):  # plain HTTP has no listing
                raise StoreError(f"{self.url}: listing is not supported by this store: {exc}") from exc
            raise error_from_tensorstore(exc, where=f"{self.url} (listing)", raw_bytes=True) from exc
        return iter(sorted(k.decode() if isinstance(k, bytes) else str(k) for k in keys))

    def write(self, key: str, data: bytes) -> None:
        # Object stores replace a key atomically; the file driver writes through a temp file.
        try:
            self._kv.write(key, data).result()
        except Exception as exc:
            raise error_from_tensorstore(exc, where=f"{self._where(key)} (write)", raw_bytes=True) from exc

    def delete(self, key: str) -> None:
        self._delete_range(key, key + "\0")  # exactly ``key``: the next possible key is key + NUL

    def clear(self) -> None:
        self._delete_range("", "")  # an empty bound is unbounded: every key

    def _delete_range(self, first: str, end: str) -> None:
        import tensorstore as ts

        try:
            self._kv.delete_range(ts.KvStore.KeyRange(first, end)).result()
        except Exception as exc:
            raise error_from_tensorstore(exc, where=f"{self._where(first)} (delete)", raw_bytes=True) from exc


def _windows(items: Sequence[tuple[str, slice | None]]) -> Iterator[Sequence[tuple[str, slice | None]]]:
    """``items`` in consecutive windows of at most :data:`RANGES_IN_FLIGHT` requests and
    :data:`BYTES_IN_FLIGHT` bytes of bounded ranges (a window holds at least one request)."""
    first = 0
    while first < len(items):
        last, nbytes = first, 0
        while last < len(items) and last - first < RANGES_IN_FLIGHT:
            rng = items[last][1]
            size = rng.stop - rng.start if rng is not None and rng.stop is not None and rng.start is not None \
                and rng.start >= 0 else 0
            if last > first and nbytes + size > BYTES_IN_FLIGHT:
                break
            nbytes += size
            last += 1
        yield items[first:last]
        first = last
