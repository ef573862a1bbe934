"""Uncached reads of a level whose chunk source decodes into given buffers, with no TensorStore in between.

Why: a read that should not fill the chunk cache (the first touch of a script's array, a bulk read;
see :class:`~.lazy.CacheAdmission` and :func:`~.lazy._bulk_view`) went to a twin of the TensorStore
driver opened on a context without a cache. For a level read by a
:class:`~napari_shardscope.core.formats.volume_spec.DirectChunkSource` (precomputed's raw scales,
decoded with libdeflate) a twin would still allocate a fresh buffer per chunk, fault its pages in
and copy it into the result. :class:`DirectReader` instead works out which chunks a view touches,
decodes each into one reused buffer per worker thread, and copies only the voxels the view selects
straight into the result. Chunks are decoded by the reading thread and helpers from a small shared
pool (the decoder releases the GIL while it inflates).

It reads any view of the level's ``virtual_chunked`` store whose index transform maps each
presented axis to one source axis with stride 1 (integers, unit-step slices, transpositions,
translations — what napari and scripts ask for); other views (strided slices, index arrays) return
``None`` and are read through TensorStore as before.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.formats.volume_spec import DirectChunkSource

#: Threads decoding the chunks of one uncached read: the reading thread and ``DECODE_WORKERS - 1``
#: helpers from a pool of this many (shared by every level of the process, so reads made at the same
#: time each get helpers). One more than the cores: a decode thread also does GIL-bound Python work
#: (index lookups, views) and waits on ``pread``, and while it does the extra thread keeps every core inflating (a cold
#: 512² uint8 plane on 2 cores: 26 ms with 2 threads, 23.5 ms with 3).
DECODE_WORKERS = max(3, min(8, (os.cpu_count() or 2) + 1))

#: What a view reads of the source: the box ``[lo, hi)`` and, per source axis, its byte stride in the result.
Plan = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_scratch = threading.local()  # per thread: one reused buffer a chunk is decoded into


def _decode_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(DECODE_WORKERS, thread_name_prefix="shardscope-decode",
                                       initializer=_keep_large_scratch)
        return _pool


#: Decode buffers up to this size are kept by their pool thread for the next chunk; larger ones are dropped after use.
KEEP_SCRATCH_BYTES = 32 << 20
#: ... and by any other thread that reads (it decodes chunks too): those threads are the caller's (a GUI
#: thread, an export's workers), as many as it likes, so each keeps at most a 64³ uint64 chunk's buffer.
KEEP_SCRATCH_BYTES_READER = 2 << 20


def _keep_large_scratch() -> None:
    _scratch.keep = KEEP_SCRATCH_BYTES


def _scratch_array(shape: tuple[int, ...], dtype: np.dtype[Any], order: Literal["C", "F"]) -> npt.NDArray[Any]:
    """A decode buffer as a ``shape`` array laid out in ``order`` (the source's): this thread's reused one,
    or a fresh one for a huge chunk."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > getattr(_scratch, "keep", KEEP_SCRATCH_BYTES_READER):
        return np.empty(shape, dtype=dtype, order=order)
    buf: npt.NDArray[np.uint8] | None = getattr(_scratch, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _scratch.buf = np.empty(max(nbytes, 1), dtype=np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape, order=order)


class DirectReader:
    """Reads views of one level's ``virtual_chunked`` store by decoding ``source``'s chunks itself (uncached)."""

    def __init__(self, source: DirectChunkSource) -> None:
        self.source = source
        self.dtype = np.dtype(source.dtype)

    def read(self, view: Any) -> npt.NDArray[Any] | None:
        """The voxels of ``view`` (a view of the level's store), or ``None`` when its transform is not plain."""
        plan = _plan(view, len(self.source.shape))
        if plan is None:
            return None
        return self._read_plan(tuple(int(n) for n in view.shape), plan)

    def box_reader(self, store: Any) -> BoxReader | None:
        """A reader of boxes of ``store`` (a zero-origin view of the level's store), or ``None`` if not plain.

        Why: planning a view asks TensorStore for its spec, which costs more (GIL held) than
        decoding a small chunk; a caller reading many boxes of one store plans the store once.
        """
        maps = _axis_maps(store, len(self.source.shape))
        return None if maps is None else BoxReader(self, maps, tuple(int(n) for n in store.shape))

    def _read_plan(self, shape: tuple[int, ...],
                   plan: Plan) -> npt.NDArray[Any]:
        out = np.empty(shape, dtype=self.dtype)
        lo, hi, strides = plan
        if any(h <= low for low, h in zip(lo, hi, strict=True)):
            return out
        # ``out`` seen in the source's axis order (a constant source axis: extent 1, stride 0)
        target = np.lib.stride_tricks.as_strided(out, shape=tuple(h - low for low, h in zip(lo, hi, strict=True)),
                                                 strides=strides, writeable=True)
        jobs = self._jobs(lo, hi)
        if len(jobs) == 1:
            self._fill(jobs[0], target)
            return out
        prepare = getattr(self.source, "prepare_chunks", None)
        if prepare is not None:  # optional: a sharded source loads the indexes the chunks need in one batch
            prepare([job[0] for job in jobs])
        todo = deque(jobs)
        failed: list[BaseException] = []

        def drain() -> None:
            """Decode chunks until none are left (or one failed).

            Why not a future per chunk: each handoff wakes a worker and then this thread (~200 context
            switches and ~1 ms of CPU per cold 512² plane); here each thread takes the next chunk itself
            (``deque.popleft`` is atomic), and this thread decodes too instead of waiting. A read made
            from inside the pool (every worker busy) cannot deadlock: this thread drains the queue alone
            and then cancels the helpers that never started.
            """
            while not failed:
                try:
                    job = todo.popleft()
                except IndexError:
                    return
                try:
                    self._fill(job, target)
                except BaseException as exc:  # handed to the reading thread; the others stop taking chunks
                    failed.append(exc)
                    return

        pool = _decode_pool()
        helpers: list[Future[None]] = [pool.submit(drain) for _ in range(min(DECODE_WORKERS, len(jobs)) - 1)]
        drain()
        for fut in helpers:  # a helper not started yet has nothing left to do; a started one finishes first
            if not fut.cancel():
                fut.exception()
        if failed:
            raise failed[0]
        return out

    def _jobs(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> list[_Job]:
        """Per chunk the box ``[lo, hi)`` touches: its grid position, the part of it read, where that goes, its extent.

        Worked out per axis once (a plane's 64 chunks share 8 + 8 + 1 axis entries), not per chunk.
        """
        per_axis: list[list[tuple[int, slice, slice, int]]] = []
        for low, h, c, n in zip(lo, hi, self.source.chunk_shape, self.source.shape, strict=True):
            axis = []
            for g in range(low // c, -(-h // c)):
                s = g * c
                e = min(c, n - s)
                a, b = max(low, s), min(h, s + e)
                axis.append((g, slice(a - s, b - s), slice(a - low, b - low), e))
            per_axis.append(axis)
        return [tuple(zip(*combo, strict=True)) for combo in itertools.product(*per_axis)]

    def _fill(self, job: _Job, target: npt.NDArray[Any]) -> None:
        grid, src, dst, extent = job
        place = target[dst]
        order = self.source.memory_order
        if place.shape == extent and (place.flags.f_contiguous if order == "F" else place.flags.c_contiguous):
            # the read is this one chunk (an export's box): decode into the result, no scratch copy
            if not self.source.decode_into(grid, place):
                fill = self.source.fill_value
                place[...] = fill if fill is not None else 0
            return
        buf = _scratch_array(extent, self.dtype, order)
        if self.source.decode_into(grid, buf):
            place[...] = buf[src]
        else:
            fill = self.source.fill_value
            place[...] = fill if fill is not None else 0


#: One chunk of a read: grid position, the slices of the chunk read, the slices of the target written, its extent.
_Job = tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...], tuple[int, ...]]


class BoxReader:
    """Reads boxes ``[lo, hi)`` of one zero-origin store through a :class:`DirectReader`, planned once."""

    def __init__(self, reader: DirectReader, maps: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> None:
        self.reader = reader
        self.maps = maps  # per source axis: (view dim feeding it or -1 for a constant, offset)
        self.shape = shape

    def read(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> npt.NDArray[Any]:
        """The voxels of the box (view order, C-contiguous, a new array); the box must lie in the store."""
        shape = tuple(h - low for low, h in zip(lo, hi, strict=True))
        return self.reader._read_plan(shape, _box_plan(self.maps, lo, hi, self.reader.dtype.itemsize))


def _axis_maps(store: Any, rank: int) -> tuple[tuple[int, int], ...] | None:
    """How ``store``'s dims feed a rank-``rank`` source: per source axis (view dim or -1, offset); ``None`` unless
    every map is plain (see :func:`_plain_maps`) and the store's domain starts at the origin."""
    try:
        transform = store.spec().transform
    except Exception:  # a view TensorStore cannot describe
        return None
    if any(int(m) != 0 for m in store.domain.inclusive_min):
        return None
    return _plain_maps(transform, rank, [int(n) for n in store.shape])


def _plan(view: Any, rank: int) -> Plan | None:
    """For a view of a rank-``rank`` store: the source box ``[lo, hi)`` it reads and, per source axis, the
    byte stride of that axis in the view's C-ordered result; ``None`` unless every map is plain."""
    try:
        transform = view.spec().transform  # relative to the level's store: its output axes are the source's
    except Exception:  # a view TensorStore cannot describe: read it through TensorStore
        return None
    domain = view.domain
    shape = [int(n) for n in domain.shape]
    maps = _plain_maps(transform, rank, shape)
    if maps is None:
        return None
    lo = tuple(int(m) for m in domain.inclusive_min)
    hi = tuple(low + n for low, n in zip(lo, shape, strict=True))
    return _box_plan(maps, lo, hi, int(view.dtype.numpy_dtype.itemsize))


def _plain_maps(transform: Any, rank: int, shape: list[int]) -> tuple[tuple[int, int], ...] | None:
    """Per output (source) axis of ``transform``: the view dim feeding it with stride 1, or -1 for a
    constant, and the offset; ``None`` unless every map is one of those, no view dim feeds two axes,
    and every view dim feeding none has extent 1 (in ``shape``)."""
    if transform is None or transform.output_rank != rank:
        return None
    maps: list[tuple[int, int]] = []
    used: set[int] = set()
    for m in transform.output:
        method = str(m.method)
        if method.endswith("constant"):
            maps.append((-1, int(m.offset)))
        elif method.endswith("single_input_dimension") and int(m.stride) == 1 and int(m.input_dimension) not in used:
            used.add(int(m.input_dimension))
            maps.append((int(m.input_dimension), int(m.offset)))
        else:
            return None
    if any(shape[d] != 1 for d in range(len(shape)) if d not in used):  # an axis of the view no source axis feeds
        return None
    return tuple(maps)


def _box_plan(maps: tuple[tuple[int, int], ...], lo: tuple[int, ...], hi: tuple[int, ...], itemsize: int) -> Plan:
    """The source box a view box ``[lo, hi)`` reads through ``maps`` and, per source axis, its byte stride in
    the box's C-ordered result (0 for a constant axis)."""
    c_strides = [0] * len(lo)
    step = itemsize
    for d in range(len(lo) - 1, -1, -1):
        c_strides[d] = step
        step *= max(hi[d] - lo[d], 1)
    src_lo, src_hi, strides = [], [], []
    for d, offset in maps:
        if d < 0:
            src_lo.append(offset)
            src_hi.append(offset + 1)
            strides.append(0)
        else:
            src_lo.append(offset + lo[d])
            src_hi.append(offset + hi[d])
            strides.append(c_strides[d])
    return tuple(src_lo), tuple(src_hi), tuple(strides)


class DirectView:
    """A view of a level's store read through a :class:`DirectReader`, standing in for the TensorStore view.

    It has what the lazy array's read path uses of a TensorStore view: indexing (which composes on
    the TensorStore view), ``shape``, ``dtype``, and ``read().result()``. A view the reader cannot
    plan is read through TensorStore (the level's cached store) instead.
    """

    def __init__(self, view: Any, reader: DirectReader) -> None:
        self.view = view
        self.reader = reader

    def __getitem__(self, key: Any) -> DirectView:
        return DirectView(self.view[key], self.reader)

    @property
    def shape(self) -> Any:
        return self.view.shape

    @property
    def dtype(self) -> Any:
        return self.view.dtype

    def read(self) -> _Done:
        data = self.reader.read(self.view)
        return _Done(data if data is not None else np.asarray(self.view.read().result()))


class _Done:
    """A finished read (what ``TensorStore.read()`` returns, already resolved)."""

    def __init__(self, data: npt.NDArray[Any]) -> None:
        self._data = data

    def result(self) -> npt.NDArray[Any]:
        return self._data
