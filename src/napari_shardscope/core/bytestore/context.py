"""The one TensorStore context every volume opened by napari-shardscope shares.

Why one context: TensorStore's cache pool, HTTP connection pool and I/O concurrency limits live in
a ``tensorstore.Context``. Volumes opened with *separate* contexts would each keep their own
cache, so an image and its segmentation (or two opens of the same URL, as napari does when a layer
is re-added) would compete for memory and re-read chunks they already decoded. One shared context
means one memory budget the user sets once.

The budget is the cache pool's ``total_bytes_limit``. It is read from the environment variable
``SHARDSCOPE_CACHE_MB`` (mebibytes) the first time the context is needed, or set in code with
:func:`set_cache_pool_size` (the ``--cache-mb`` option of ``shardscope open`` does this). A context
cannot change its limit after creation, so setting a new size replaces the shared context: volumes
opened afterwards use the new budget, volumes already open keep the cache they were opened with.

Remote I/O has limits the user controls (:class:`RemoteLimits`), so that an unreachable host fails
in about ten seconds and a stalled one never blocks forever (TensorStore's own defaults retry for
minutes):

* ``timeout_s`` (``SHARDSCOPE_TIMEOUT_S``, ``--timeout``): the connect timeout, and how long a
  request may go without receiving a byte before it is abandoned. TensorStore reads these from
  its ``TENSORSTORE_CURL_*`` environment variables once, when the process makes its first HTTP
  request, so they are process-wide and must be set before then (the CLI sets them at start-up;
  a variable the user set explicitly wins).
* ``retries`` (``SHARDSCOPE_RETRIES``, ``--retries``): how many times a failed request is retried,
  with backoff from 0.1 s up to 1 s; passed through the context's ``http_request_retries``,
  ``gcs_request_retries`` and ``s3_request_retries`` resources, so every remote driver obeys it.

The worst case for one request is ``(retries + 1) * timeout_s`` plus the backoff; the defaults
(3 s, 2 retries) give about 10 s.

* ``concurrency`` (``SHARDSCOPE_REMOTE_CONCURRENCY``): how many requests the context keeps in
  flight per remote driver (its ``http_request_concurrency``, ``gcs_request_concurrency`` and
  ``s3_request_concurrency`` resources). TensorStore's default is 32; ours is
  :data:`REMOTE_CONCURRENCY`. Round trips, not bandwidth, bound small range reads: with 32 slots the
  273 index reads of a 16-shard ``inspect`` go in nine waves, each a bucket's latency (20-50 ms);
  buckets serve hundreds of requests at once per client, so 128 makes it three (measured over a
  20 ms server: 348 ms with 32, 240 ms with 128, before coalescing cut the count to 33). More than
  that buys little and opens more connections than a small HTTP server may accept.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.errors import ArgumentError

#: Environment variable holding the cache pool size in MiB.
CACHE_ENV = "SHARDSCOPE_CACHE_MB"
#: Cache pool when the available memory is unknown: a few hundred decoded 64³ chunks of uint64 labels.
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
#: The default pool is this fraction of the memory available when the first volume opens, within the bounds below.
CACHE_MEMORY_FRACTION = 1 / 8
MIN_DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
MAX_DEFAULT_CACHE_BYTES = 4 * 1024 * 1024 * 1024

#: Cache pool of the read-once context: shard and minishard indexes of the chunks being read, not the chunks.
READ_ONCE_CACHE_BYTES = 32 * 1024 * 1024

#: Environment variable holding the remote timeout in seconds (connect, and longest stall).
TIMEOUT_ENV = "SHARDSCOPE_TIMEOUT_S"
#: Environment variable holding how many times a failed remote request is retried.
RETRIES_ENV = "SHARDSCOPE_RETRIES"
DEFAULT_TIMEOUT_S = 3.0
DEFAULT_RETRIES = 2
#: Bounds of the two limits: beyond them a value is a typo, not a choice (a day per stalled request,
#: a hundred retries), and TensorStore's context takes a 64-bit retry count (a larger one overflowed).
MAX_TIMEOUT_S = 86_400.0
MAX_RETRIES = 100
#: Backoff between retries (TensorStore doubles it from the first to the last).
RETRY_INITIAL_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 1.0
#: The context resources that carry the retry budget, one per remote driver.
RETRY_RESOURCES = ("http_request_retries", "gcs_request_retries", "s3_request_retries")
#: TensorStore's per-context limits on requests in flight, and ours. Its default (32) makes the 273
#: index reads of a 16-shard ``inspect`` nine waves of round trips; buckets serve hundreds at once.
CONCURRENCY_RESOURCES = ("http_request_concurrency", "gcs_request_concurrency", "s3_request_concurrency")
REMOTE_CONCURRENCY = 128
#: Environment variable holding the requests in flight per remote driver.
CONCURRENCY_ENV = "SHARDSCOPE_REMOTE_CONCURRENCY"
#: Beyond this a value is a typo: each request in flight is a connection (and a file descriptor).
MAX_CONCURRENCY = 1024
#: TensorStore's process-wide curl settings that carry the timeout.
CURL_CONNECT_ENV = "TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS"
CURL_LOW_SPEED_TIME_ENV = "TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"
CURL_LOW_SPEED_BYTES_ENV = "TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES"


@dataclass(frozen=True)
class RemoteLimits:
    """How long a remote request may take and how often it is retried.

    Attributes
    ----------
    timeout_s
        Connect timeout, and the longest a request may go without receiving a byte.
    retries
        How many times a failed request is retried (0: one attempt only).
    concurrency
        Requests in flight at once per remote driver (HTTP, GCS, S3).
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    concurrency: int = REMOTE_CONCURRENCY

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, int | float) \
                or not math.isfinite(self.timeout_s) or not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ArgumentError(f"the remote timeout must be a positive number of seconds up to {MAX_TIMEOUT_S:g}, "
                                f"got {self.timeout_s!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or not 0 <= self.retries <= MAX_RETRIES:
            raise ArgumentError(f"the retry count must be an integer from 0 to {MAX_RETRIES}, got {self.retries!r}")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) \
                or not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ArgumentError(f"the remote request concurrency must be an integer from 1 to {MAX_CONCURRENCY}, "
                                f"got {self.concurrency!r}")

    @property
    def worst_case_s(self) -> float:
        """The longest one request can block: every attempt times out, with the backoff between them."""
        backoff = sum(retry_delay(i) for i in range(self.retries))
        return float((self.retries + 1) * self.timeout_s + backoff)


_lock = threading.Lock()
_context: Any = None
#: The read-once context (:func:`read_once_context`) and the remote limits it was made with.
_read_once: tuple[RemoteLimits, Any] | None = None
_cache_bytes: int | None = None
_limits: RemoteLimits | None = None
#: The curl variables this module set (the user's own settings are never overwritten).
_curl_set_here: set[str] = set()


def default_cache_bytes() -> int:
    """The cache pool when none is asked for: an eighth of the available memory, 256 MiB to 4 GiB.

    Browsing revisits chunks (z steps inside a 64-plane chunk, zooming back out), so the pool should
    be as large as the machine comfortably allows; a laptop gets 256-512 MiB, a workstation a few GiB.
    """
    from napari_shardscope.core.allocator import available_memory

    avail = available_memory()
    if avail is None:
        return DEFAULT_CACHE_BYTES
    return int(min(MAX_DEFAULT_CACHE_BYTES, max(MIN_DEFAULT_CACHE_BYTES, avail * CACHE_MEMORY_FRACTION)))


def cache_bytes_from_env() -> int:
    """The cache pool size asked for by ``SHARDSCOPE_CACHE_MB``, or the default.

    Raises
    ------
    ArgumentError
        When the variable is set but is not a non-negative number of MiB.
    """
    text = os.environ.get(CACHE_ENV, "").strip()
    if not text:
        return default_cache_bytes()
    try:
        mib = float(text)
    except ValueError:
        raise ArgumentError(f"{CACHE_ENV}={text!r} is not a number of MiB") from None
    if mib < 0 or mib != mib:
        raise ArgumentError(f"{CACHE_ENV}={text!r} must be a non-negative number of MiB")
    return int(mib * 1024 * 1024)


def retry_delay(attempt: int) -> float:
    """Seconds to wait before retry ``attempt + 1``: the backoff TensorStore's HTTP retries use (doubling, capped)."""
    return float(min(RETRY_MAX_DELAY_S, RETRY_INITIAL_DELAY_S * 2.0**attempt))


def limits_from_env() -> RemoteLimits:
    """The remote limits asked for by ``SHARDSCOPE_TIMEOUT_S``, ``SHARDSCOPE_RETRIES`` and
    ``SHARDSCOPE_REMOTE_CONCURRENCY``, or the defaults.

    Raises
    ------
    ArgumentError
        When a variable is set but is not a positive number of seconds / a non-negative integer /
        a positive integer.
    """
    timeout_text = os.environ.get(TIMEOUT_ENV, "").strip()
    retries_text = os.environ.get(RETRIES_ENV, "").strip()
    concurrency_text = os.environ.get(CONCURRENCY_ENV, "").strip()
    timeout_s, retries, concurrency = DEFAULT_TIMEOUT_S, DEFAULT_RETRIES, REMOTE_CONCURRENCY
    if timeout_text:
        try:
            timeout_s = float(timeout_text)
        except ValueError:
            raise ArgumentError(f"{TIMEOUT_ENV}={timeout_text!r} is not a number of seconds") from None
    if retries_text:
        try:
            retries = int(retries_text)
        except ValueError:
            raise ArgumentError(f"{RETRIES_ENV}={retries_text!r} is not a whole number of retries") from None
    if concurrency_text:
        try:
            concurrency = int(concurrency_text)
        except ValueError:
            raise ArgumentError(f"{CONCURRENCY_ENV}={concurrency_text!r} is not a whole number of requests") from None
    try:
        return RemoteLimits(timeout_s, retries, concurrency)
    except ArgumentError as exc:
        raise ArgumentError(f"{TIMEOUT_ENV}/{RETRIES_ENV}/{CONCURRENCY_ENV}: {exc}") from None


def apply_curl_timeouts(limits: RemoteLimits) -> None:
    """Hand ``limits.timeout_s`` to TensorStore's HTTP transport (its ``TENSORSTORE_CURL_*`` variables).

    Takes effect only if the process has not made an HTTP request through TensorStore yet (it reads
    them once); a variable the user set explicitly is kept.
    """
    seconds = str(max(1, math.ceil(limits.timeout_s)))  # curl counts whole seconds
    for name in (CURL_CONNECT_ENV, CURL_LOW_SPEED_TIME_ENV):
        if name in _curl_set_here or not os.environ.get(name, "").strip():
            os.environ[name] = seconds
            _curl_set_here.add(name)
    os.environ.setdefault(CURL_LOW_SPEED_BYTES_ENV, "1")


def make_context(cache_bytes: int, limits: RemoteLimits | None = None) -> Any:
    """A new ``tensorstore.Context``: a cache pool of ``cache_bytes`` bytes at most, the remote retries and concurrency.

    ``0`` disables caching of decoded chunks (every read goes to storage), which is what a
    benchmark of cold reads wants and what a viewer never wants. ``limits`` default to
    :func:`remote_limits`.
    """
    import tensorstore as ts

    from napari_shardscope.core.allocator import tune_malloc

    tune_malloc()  # before TensorStore decodes a chunk: see core.allocator for what it saves
    if cache_bytes < 0:
        raise ArgumentError(f"cache pool size must be >= 0 bytes, got {cache_bytes}")
    limits = limits if limits is not None else remote_limits()
    apply_curl_timeouts(limits)
    retry = {"max_retries": limits.retries, "initial_delay": f"{int(RETRY_INITIAL_DELAY_S * 1000)}ms",
             "max_delay": f"{int(RETRY_MAX_DELAY_S * 1000)}ms"}
    spec: dict[str, Any] = {"cache_pool": {"total_bytes_limit": int(cache_bytes)}}
    spec.update({name: dict(retry) for name in RETRY_RESOURCES})
    spec.update({name: {"limit": limits.concurrency} for name in CONCURRENCY_RESOURCES})
    return ts.Context(spec)


def remote_limits() -> RemoteLimits:
    """The remote limits of the shared context (or of the one that will be created)."""
    with _lock:
        return _limits if _limits is not None else limits_from_env()


def set_remote_limits(timeout_s: float | None = None, retries: int | None = None,
                      concurrency: int | None = None) -> RemoteLimits:
    """Replace the shared context with one that has these remote limits (``None`` keeps the current one).

    Volumes opened before the call keep their context; the timeout reaches TensorStore only if
    no HTTP request was made yet in this process (see the module docstring).
    """
    global _context, _limits
    current = remote_limits()
    limits = RemoteLimits(current.timeout_s if timeout_s is None else timeout_s,
                          current.retries if retries is None else retries,
                          current.concurrency if concurrency is None else concurrency)
    new = make_context(cache_pool_bytes(), limits)
    with _lock:
        _context = new
        _limits = limits
    return limits


def shared_context() -> Any:
    """The process-wide context (created on first use with :func:`cache_pool_bytes` bytes)."""
    global _context, _cache_bytes, _limits
    with _lock:
        if _context is None:
            if _cache_bytes is None:
                _cache_bytes = cache_bytes_from_env()
            if _limits is None:
                _limits = limits_from_env()
            _context = make_context(_cache_bytes, _limits)
        return _context


def read_once_context() -> Any:
    """The context of passes that read each chunk once (index build, labelmap export): a small pool of its own.

    Why: through the shared context, building the label index over a petavoxel base (or exporting a
    labelmap) put every chunk it decoded into the viewer's cache, which grew to its limit (2.4 GiB on a
    20 GiB machine) with chunks never read again and evicted what the viewer had cached. This pool is
    :data:`READ_ONCE_CACHE_BYTES`: room for the shard and minishard indexes those reads revisit (a
    chunk of a sharded volume costs one request then, not three), not for the chunks. Same remote
    limits as the shared context; rebuilt when they change.
    """
    global _read_once
    limits = remote_limits()
    with _lock:
        if _read_once is not None and _read_once[0] == limits:
            return _read_once[1]
    new = make_context(READ_ONCE_CACHE_BYTES, limits)
    with _lock:
        _read_once = (limits, new)
    return new


def cache_pool_bytes() -> int:
    """The cache pool size of the shared context (or of the one that will be created)."""
    with _lock:
        return _cache_bytes if _cache_bytes is not None else cache_bytes_from_env()


def set_cache_pool_size(nbytes: int) -> None:
    """Replace the shared context with one whose cache pool holds ``nbytes`` bytes.

    Volumes opened before the call keep their context (and its cache); later opens share the
    new one.
    """
    global _context, _cache_bytes
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ArgumentError(f"cache pool size must be a non-negative number of bytes, got {nbytes!r}")
    new = make_context(nbytes, remote_limits())
    with _lock:
        _context = new
        _cache_bytes = nbytes
