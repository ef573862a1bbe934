"""Read the chunk layers next to the plane being viewed before the viewer asks for them.

Why: stepping through z inside one layer of chunks costs nothing (the chunks are cached), but
the step that crosses into the next layer pays for decoding every chunk of the new plane — tens of
milliseconds for uint64, a visible stall at a human 10 steps/s. After each plane read, a
:class:`PlanePrefetcher` reads one plane of the chunk layer above and one of the layer below on
worker threads, so the chunk cache already holds them when the step arrives. The reads are
ordinary cached reads (their results are dropped); a prefetch the view has moved away from is
cancelled (also when TensorStore has started it), and a window read once is not read again while
the view stays in its chunk layer.

Pacing: decoding a chunk layer keeps every core busy for a few hundred milliseconds, and on a
small machine that slowed the frames drawn meanwhile (OpenGL in software and the GUI thread share
the cores) by 2-3x. So a prefetch reads its plane one band of chunk rows at a time, and starts a
band only once the viewer has not read anything for :data:`QUIET_S` (the frame of the last step is
drawn by then); at 10 steps/s that leaves ~70 ms per step for a band. If the viewer never pauses,
a band waits at most :data:`MAX_DEFER_S`.

Only the first axis is stepped (z of a z, y, x volume); reads of other shapes prefetch nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from itertools import pairwise
from typing import Any

from napari_shardscope.core.volumes.deferred import DeferredStore

#: Worker threads per prefetcher: one, so the layer ahead is read first and one band decodes at a time (a
#: band already spreads over TensorStore's decode threads; two at once slowed the frames drawn meanwhile).
PREFETCH_WORKERS = 1

#: A prefetch band starts only after the viewer has read nothing for this long (seconds)...
QUIET_S = 0.03
#: ...or after waiting this long for such a pause.
MAX_DEFER_S = 0.5

_last_view_read = [0.0]  # monotonic time of the last plane read by any viewer level (all prefetchers)


class PlanePrefetcher:
    """Warm the chunk cache of ``store`` around the planes read through it.

    Parameters
    ----------
    store
        The zero-origin TensorStore (a volume level) the viewer reads planes of, or the level's
        :class:`~.deferred.DeferredStore` (opened by the viewer's first read, before any prefetch).
    chunk
        The read-chunk length along the first axis (planes per chunk layer), the read-chunk shape
        (its second entry sets the band height), or a function giving the shape (``None``: no
        aligned grid, nothing to prefetch), asked after the first read so that making a
        prefetcher opens nothing.
    """

    def __init__(self, store: Any, chunk: int | tuple[int, ...] | Callable[[], tuple[int, ...] | None]) -> None:
        self.store = store
        self._chunks: tuple[int, ...] | None = None
        self._chunk_of: Callable[[], tuple[int, ...] | None] | None = None
        self._chunk_lock = threading.Lock()
        if callable(chunk):
            self._chunk_of = chunk
        else:
            self._chunks = (chunk,) if isinstance(chunk, int) else tuple(chunk)
        self.depth = int(store.shape[0])
        self._lock = threading.RLock()  # a done callback may run at once, in the thread holding it
        self._pending: dict[tuple[Any, ...], tuple[Future[None], _Task]] = {}
        self._done: set[tuple[Any, ...]] = set()  # windows read since the view entered this chunk layer
        self._pool: ThreadPoolExecutor | None = None
        self.reads = 0  # prefetch reads completed (for tests and benchmarks)

    @property
    def chunk(self) -> int | None:
        """Planes per chunk layer (``None``: the level has no aligned chunk grid; nothing is prefetched)."""
        if self._chunk_of is not None:  # asked once, after the first read opened the level
            with self._chunk_lock:  # reads finishing together: one asks, the others wait for its answer
                chunk_of = self._chunk_of
                if chunk_of is not None:
                    self._chunks = chunk_of()
                    self._chunk_of = None
        return None if not self._chunks else max(1, int(self._chunks[0]))

    def bands(self, plane: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """``plane`` cut into bands one chunk row high along its second axis (the whole plane if unknown)."""
        chunks = self._chunks
        if chunks is None or len(chunks) < 2 or len(plane) < 2 or not isinstance(plane[1], slice):
            return [plane]
        rows, step = plane[1], max(1, int(chunks[1]))
        if rows.step not in (None, 1):
            return [plane]
        cuts = sorted({rows.start, rows.stop, *range((rows.start // step + 1) * step, rows.stop, step)})
        return [(plane[0], slice(a, b, 1), *plane[2:]) for a, b in pairwise(cuts) if b > a]

    def targets(self, z: int) -> list[int]:
        """Planes to read after plane ``z``: the first of the next chunk layer, the last of the previous one."""
        chunk = self.chunk
        if chunk is None:
            return []
        layer = z // chunk
        out = []
        after = (layer + 1) * chunk
        if after < self.depth:
            out.append(after)
        before = layer * chunk - 1
        if before >= 0:
            out.append(before)
        return out

    def after_read(self, index: Sequence[Any]) -> None:
        """Called after the viewer read ``index`` (an int on the first axis, slices elsewhere)."""
        if not index or isinstance(index[0], slice) or not all(isinstance(i, slice) for i in index[1:]):
            return
        _last_view_read[0] = time.monotonic()
        z = int(index[0])
        rest = tuple(index[1:])
        shape = tuple((s.start, s.stop, s.step) for s in rest)  # slices are not hashable before Python 3.12
        wanted = {(t, shape): (t, *rest) for t in self.targets(z)}
        with self._lock:
            for key, (fut, task) in list(self._pending.items()):
                if key not in wanted:  # the view has left: drop it if it has not started, stop it if it has
                    fut.cancel()
                    task.leave()
                    self._pending.pop(key, None)  # (cancel may have run the done callback already)
            self._done &= wanted.keys()  # a window read already is not read again while the view stays
            for key, plane in wanted.items():
                if key in self._pending or key in self._done:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="shardscope-prefetch")
                task = _Task()
                fut = self._pool.submit(self._read, key, plane, task)
                self._pending[key] = (fut, task)
                fut.add_done_callback(partial(self._forget, key))

    def _read(self, key: tuple[Any, ...], plane: tuple[Any, ...], task: _Task) -> None:
        try:
            store = self.store.get() if isinstance(self.store, DeferredStore) else self.store
            for band in self.bands(plane):
                if not _wait_for_quiet(task):
                    return
                with self._lock:
                    if task.left.is_set():
                        return
                    task.read = store[band].read()
                task.read.result()
        except Exception:  # cancelled, or a damaged chunk (reported when the viewer reads it, not here)
            return
        with self._lock:
            self.reads += 1
            if not task.left.is_set():
                self._done.add(key)

    def _forget(self, key: tuple[Any, ...], fut: Future[None]) -> None:
        with self._lock:
            entry = self._pending.get(key)
            if entry is not None and entry[0] is fut:
                del self._pending[key]

    def wait(self, timeout: float = 30.0) -> None:
        """Block until the prefetches in flight finish (tests, benchmarks), at most ``timeout`` seconds."""
        from concurrent.futures import wait

        with self._lock:
            futures = [fut for fut, _ in self._pending.values()]
        wait(futures, timeout=timeout)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            for fut, task in list(self._pending.values()):
                fut.cancel()
                task.leave()
            self._pending.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class _Task:
    """One prefetch in flight: whether the view has left it, and TensorStore's read of its current band."""

    __slots__ = ("left", "read")

    def __init__(self) -> None:
        self.left = threading.Event()
        self.read: Any = None

    def leave(self) -> None:
        """The view has left: stop before the next band, and cancel the band being read."""
        self.left.set()
        read = self.read
        if read is not None:
            read.cancel()


def _wait_for_quiet(task: _Task) -> bool:
    """Wait until the viewer pauses (:data:`QUIET_S`), at most :data:`MAX_DEFER_S`; False if the view left."""
    deadline = time.monotonic() + MAX_DEFER_S
    while not task.left.is_set():
        now = time.monotonic()
        idle = now - _last_view_read[0]
        if idle >= QUIET_S or now >= deadline:
            return True
        task.left.wait(min(QUIET_S - idle, deadline - now) + 0.001)
    return False
