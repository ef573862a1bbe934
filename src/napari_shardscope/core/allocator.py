"""Process memory settings that decide how fast a cold chunk read is.

Why: a decoded 64³ uint64 chunk is 2 MiB. glibc's malloc serves blocks that large with a fresh
``mmap`` and returns them with ``munmap`` on free, and trims freed heap memory back to the kernel
as soon as 4 MiB of it collects. Every chunk TensorStore decodes then lands in new pages, each
faulted in and zeroed by the kernel: a cold 256² plane of uint64 cost ~9,000 page faults and
twice the CPU time with a chunk cache, ~3,000 without one (which is why the default cache looked
30% slower than TensorStore without a cache). Serving such blocks from the heap and keeping freed
heap memory for reuse removes nearly all of those faults (measured: 8,904 -> 30 per plane).

:func:`tune_malloc` sets glibc's ``M_MMAP_THRESHOLD`` (blocks up to 32 MiB come from the heap) and
``M_TRIM_THRESHOLD`` (up to 128 MiB of freed heap is kept for the next chunks) once per process.
Other allocators and platforms are left alone; ``SHARDSCOPE_MALLOC_TUNING=0`` opts out.

:func:`available_memory` reads what the kernel says can be allocated without swapping, for sizing
the chunk cache.
"""

from __future__ import annotations

import os
import sys
import threading

#: Environment variable: ``0`` leaves the C allocator's settings alone.
TUNING_ENV = "SHARDSCOPE_MALLOC_TUNING"
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit hosts
TRIM_THRESHOLD = 128 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

_lock = threading.Lock()
_tuned: bool | None = None


def tune_malloc() -> bool:
    """Apply the settings above once (glibc only); whether they are in effect."""
    global _tuned
    with _lock:
        if _tuned is not None:
            return _tuned
        _tuned = False
        if os.environ.get(TUNING_ENV, "").strip() == "0" or not sys.platform.startswith("linux"):
            return False
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            mallopt = libc.mallopt
            if not hasattr(libc, "gnu_get_libc_version"):  # musl and others have no such knobs
                return False
        except (OSError, AttributeError):  # pragma: no cover - not glibc
            return False
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
        _tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        return _tuned


def available_memory() -> int | None:
    """Bytes the kernel reports as available (``MemAvailable``), or ``None`` where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):  # pragma: no cover - platform without sysconf
        return None
