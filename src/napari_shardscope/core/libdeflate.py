"""gzip / zlib through libdeflate: the compressor and decompressor every format path uses.

CPython's ``zlib`` spent most of an export's time compressing shards and a large share of a cold
read inflating chunks; libdeflate does both two to four times faster and writes ordinary RFC 1950 /
1952 streams that TensorStore, CloudVolume and zarr-python read.

Compression goes through the ``deflate`` package's API. Decompression needs what that API does not
return: how many input bytes a member used, so concatenated gzip members and trailing garbage are
told apart (the spec allows the first; the second is damage), and an output cap, so a gzip bomb
costs no more than the budget. Both come from libdeflate's ``*_decompress_ex`` functions, which
the package's extension module exports and :mod:`ctypes` calls (the call releases the GIL, so
reader threads inflate in parallel). Where that library cannot be loaded, :func:`available` is
false and callers keep CPython's ``zlib``.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Literal

Container = Literal["gzip", "zlib"]
#: What :func:`compress` writes: a gzip member, a zlib stream, or bare DEFLATE (RFC 1951) for a caller
#: that frames it itself (N5's Java-style gzip header).
CompressContainer = Literal["gzip", "zlib", "deflate"]

_SUCCESS, _BAD_DATA, _SHORT_OUTPUT, _INSUFFICIENT_SPACE = 0, 1, 2, 3
#: DEFLATE cannot expand more than about 1032:1 (a 258-byte match per 2 bits), so an input of n bytes
#: never decodes to more than this many times n; a larger trailer ISIZE is a lie.
MAX_DEFLATE_RATIO = 1032


class InflateError(Exception):
    """Bad, truncated or oversized deflate data (``reason``: bad, truncated, trailing or size)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


def _load() -> Any:
    """The libdeflate C functions, or ``None`` when no library exposes them."""
    candidates: list[str] = []
    try:
        import deflate._deflate as ext

        candidates.append(str(ext.__file__))
    except ImportError:  # pragma: no cover - the deflate package is a dependency
        pass
    for path in [*candidates, None]:
        if path is None:
            # Only when the package's module lacks the symbols: find_library runs ldconfig (and a
            # compiler) in subprocesses, 10+ ms of every process start.
            from ctypes.util import find_library

            path = find_library("deflate")  # pragma: no cover
            if not path:
                break
        try:
            lib = ctypes.CDLL(path)
            alloc = lib.libdeflate_alloc_decompressor
        except (OSError, AttributeError):  # pragma: no cover - depends on the platform build
            continue
        alloc.restype = ctypes.c_void_p
        alloc.argtypes = []
        for name in ("libdeflate_gzip_decompress_ex", "libdeflate_zlib_decompress_ex"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = [  # the input is passed as an address: a member's start, not a copy from it on
                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t),
            ]
        return lib
    return None  # pragma: no cover


_LIB = _load()
_local = threading.local()  # a libdeflate decompressor is not thread-safe: one per thread (a few KB, never freed)


def available() -> bool:
    """Whether inflating goes through libdeflate (otherwise callers use CPython's zlib)."""
    return _LIB is not None


def _decompressor() -> int:
    d: int | None = getattr(_local, "d", None)
    if d is None:
        d = _LIB.libdeflate_alloc_decompressor()
        if not d:  # pragma: no cover - out of memory
            raise MemoryError("libdeflate_alloc_decompressor failed")
        _local.d = d
    return d


def can_compress() -> bool:
    """Whether :func:`compress` and :func:`crc32` work (the ``deflate`` package imports; else callers use zlib)."""
    try:
        import deflate  # noqa: F401
    except ImportError:  # pragma: no cover - the deflate package is a dependency
        return False
    return True


def compress(data: bytes | bytearray | memoryview, container: CompressContainer, level: int) -> bytes:
    """One gzip member (zero mtime: reproducible output), zlib stream or raw DEFLATE stream at ``level`` (0-12).

    The package's functions release the GIL, so writer threads compress in parallel.
    """
    import deflate

    if container == "gzip":
        return bytes(deflate.gzip_compress(data, level))
    if container == "zlib":
        return bytes(deflate.zlib_compress(data, level))
    return bytes(deflate.deflate_compress(data, level))


def crc32(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32 of ``data`` (the one a gzip trailer holds), by libdeflate's vectorised code."""
    import deflate

    return int(deflate.crc32(data))


def _address(src: bytes) -> int:
    """Where ``src``'s bytes are (no copy; valid while ``src`` is alive).

    Why not ``src[pos:]`` for each member: that copies the rest of the input per member, so input
    made of many tiny gzip members (damaged or hostile data) cost time quadratic in its length.
    """
    address = ctypes.cast(ctypes.c_char_p(src), ctypes.c_void_p).value
    assert address is not None or not src
    return address or 0


def _size_hint(data: bytes, container: Container, max_size: int) -> int:
    """The output buffer's first capacity: the gzip trailer's ISIZE when that is believable, else a guess.

    ISIZE is whatever the input says: it is believed only up to what DEFLATE can produce from this
    many bytes, so a 20-byte stream that claims 256 MiB does not make us allocate (and zero) 256 MiB.
    """
    if container == "gzip" and len(data) >= 18:
        isize = int.from_bytes(data[-4:], "little")
        if isize <= min(max_size, MAX_DEFLATE_RATIO * len(data)):
            return isize
    return min(max_size, max(4 * len(data), 1 << 12))


def inflate(data: bytes, container: Container, max_size: int) -> bytes:
    """Decode every member of a gzip stream (or the one zlib stream), at most ``max_size`` bytes in all.

    Raises :class:`InflateError` for bad or truncated data, bytes after the (last) stream, or output
    longer than ``max_size``. The output buffer starts at the size the trailer announces and grows
    only as far as ``max_size``.

    Every member decodes into one buffer, at the end of what the members before it wrote; the
    buffer doubles when a member does not fit (that member is decoded again, into the larger one).
    Why not a buffer per member: the many tiny members of damaged or hostile input each allocated
    and zeroed 64 KiB (and a ctypes array over it) to decode nothing: 400,000 empty members took
    about 1.5 s, where one buffer costs a fraction of that (the work is linear either way).
    """
    if container == "gzip" and type(data) is bytes and len(data) >= 18:
        whole = _inflate_one_member(data, max_size)
        if whole is not None:
            return whole
    fn = _LIB.libdeflate_gzip_decompress_ex if container == "gzip" else _LIB.libdeflate_zlib_decompress_ex
    d = _decompressor()
    n_in = ctypes.c_size_t()
    n_out = ctypes.c_size_t()
    p_in, p_out = ctypes.byref(n_in), ctypes.byref(n_out)
    src = data if isinstance(data, bytes) else bytes(data)
    base = _address(src)
    end = len(src)
    cap = _size_hint(src, container, max_size)
    out = bytearray(cap)
    view = (ctypes.c_char * cap).from_buffer(out) if cap else None
    dst = ctypes.addressof(view) if view is not None else 0
    total = 0
    pos = 0
    while True:
        if pos >= end:
            raise InflateError("truncated", f"{container} stream of {end} bytes is truncated")
        res = fn(d, base + pos, end - pos, dst + total, cap - total, p_in, p_out)
        if res == _INSUFFICIENT_SPACE:
            if cap >= max_size:
                raise InflateError("size", f"{container} data decodes to more than {max_size} bytes")
            cap = min(max_size, max(2 * cap, 1 << 16))
            view = None  # the array over ``out`` must go before ``out`` can grow
            out.extend(bytes(cap - len(out)))
            view = (ctypes.c_char * cap).from_buffer(out)
            dst = ctypes.addressof(view)
            continue
        if res != _SUCCESS:
            raise InflateError("bad", f"bad {container} data (libdeflate result {res})")
        total += n_out.value
        pos += n_in.value
        if pos >= end:
            break
        if container != "gzip":
            raise InflateError("trailing", f"{end - pos} bytes after the end of the {container} stream")
    view = None
    del out[total:]
    return bytes(out)


def inflate_into(data: bytes, container: Container, address: int, size: int, start: int = 0) -> int:
    """Decode every member of ``data[start:]`` into the ``size`` bytes at ``address``; the number of bytes written.

    For callers that know where the output goes (a chunk's place in an array): no buffer is
    allocated, copied or zeroed, and nothing is written past ``size`` — output that would be longer
    is :class:`InflateError` ``"size"`` (so a gzip bomb costs at most ``size`` bytes of work). Bad or
    truncated data and bytes after the (last) stream raise :class:`InflateError` as :func:`inflate`
    does; the caller checks the count against what it expects. ``start`` skips a header the stream
    follows (an N5 block's) without copying the rest of ``data``.
    """
    fn = _LIB.libdeflate_gzip_decompress_ex if container == "gzip" else _LIB.libdeflate_zlib_decompress_ex
    d = _decompressor()
    src = data if isinstance(data, bytes) else bytes(data)
    base = _address(src)
    n_in = ctypes.c_size_t()
    n_out = ctypes.c_size_t()
    p_in, p_out = ctypes.byref(n_in), ctypes.byref(n_out)  # made once, not per member
    total = 0
    pos = start
    while True:
        remaining = len(src) - pos
        if remaining <= 0:
            raise InflateError("truncated", f"{container} stream of {len(src) - start} bytes is truncated")
        res = fn(d, base + pos, remaining, address + total, size - total, p_in, p_out)
        if res == _INSUFFICIENT_SPACE:
            raise InflateError("size", f"{container} data decodes to more than {size} bytes")
        if res != _SUCCESS:
            raise InflateError("bad", f"bad {container} data (libdeflate result {res})")
        total += n_out.value
        pos += n_in.value
        if pos >= len(src):
            return total
        if container != "gzip":
            raise InflateError("trailing", f"{len(src) - pos} bytes after the end of the {container} stream")


def _inflate_one_member(src: bytes, max_size: int) -> bytes | None:
    """``src`` inflated in one call when it is one gzip member whose trailer size is right, else ``None``.

    Why: a shard's minishard indexes are hundreds of tiny gzip members, and the general loop's
    per-call ctypes set-up (an array type over the output, the input's address, the size guess)
    cost more than inflating one. Here the output is exactly the trailer's ISIZE (believed only as
    far as :func:`inflate` believes it) and anything unexpected — more members, a wrong ISIZE, bad
    data — answers ``None`` so the general loop decodes it and raises its errors.
    """
    isize = int.from_bytes(src[-4:], "little")
    if not 0 < isize <= min(max_size, MAX_DEFLATE_RATIO * len(src)):
        return None
    out = bytearray(isize)
    n_in = ctypes.c_size_t()
    n_out = ctypes.c_size_t()
    dst = ctypes.addressof(ctypes.c_char.from_buffer(out))
    res = _LIB.libdeflate_gzip_decompress_ex(_decompressor(), src, len(src), dst, isize,
                                             ctypes.byref(n_in), ctypes.byref(n_out))
    if res != _SUCCESS or n_in.value != len(src) or n_out.value != isize:
        return None
    return bytes(out)
