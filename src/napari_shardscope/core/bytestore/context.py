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
"""

from __future__ import annotations

import os
import threading
from typing import Any

from napari_shardscope.core.errors import ArgumentError

#: Environment variable holding the cache pool size in MiB.
CACHE_ENV = "SHARDSCOPE_CACHE_MB"
#: Default cache pool: enough for a few hundred decoded 64³ chunks of uint64 labels, small enough
#: for a laptop running napari next to a browser.
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024

_lock = threading.Lock()
_context: Any = None
_cache_bytes: int | None = None


def cache_bytes_from_env() -> int:
    """The cache pool size asked for by ``SHARDSCOPE_CACHE_MB``, or the default.

    Raises
    ------
    ArgumentError
        When the variable is set but is not a non-negative number of MiB.
    """
    text = os.environ.get(CACHE_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_BYTES
    try:
        mib = float(text)
    except ValueError:
        raise ArgumentError(f"{CACHE_ENV}={text!r} is not a number of MiB") from None
    if mib < 0 or mib != mib:
        raise ArgumentError(f"{CACHE_ENV}={text!r} must be a non-negative number of MiB")
    return int(mib * 1024 * 1024)


def make_context(cache_bytes: int) -> Any:
    """A new ``tensorstore.Context`` whose cache pool holds at most ``cache_bytes`` bytes.

    ``0`` disables caching of decoded chunks (every read goes to storage), which is what a
    benchmark of cold reads wants and what a viewer never wants.
    """
    import tensorstore as ts

    if cache_bytes < 0:
        raise ArgumentError(f"cache pool size must be >= 0 bytes, got {cache_bytes}")
    return ts.Context({"cache_pool": {"total_bytes_limit": int(cache_bytes)}})


def shared_context() -> Any:
    """The process-wide context (created on first use with :func:`cache_pool_bytes` bytes)."""
    global _context, _cache_bytes
    with _lock:
        if _context is None:
            if _cache_bytes is None:
                _cache_bytes = cache_bytes_from_env()
            _context = make_context(_cache_bytes)
        return _context


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
    new = make_context(nbytes)
    with _lock:
        _context = new
        _cache_bytes = nbytes
