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

Zooming out: napari then shows the next coarser level, whose chunks the browsing never touched, so
the first frame after a zoom-out paid a cold read of a whole view. A prefetcher linked to the next
coarser level of the pyramid (:func:`link_coarser`) also reads, after the plane targets and through the
same worker, pacing and cancellation, the coarser level's plane napari would show for the current
one (``round(z / factor)``, as napari picks it) over the window a zoom-out by the level factor shows:
the current view's centre, the same number of pixels, clipped to the level and widened to its chunk
grid. Only the *next* coarser level, one window at a time: bounded work for one zoom step, and a
window the view has left is cancelled like a plane. A zoom leaves a level too: the first read at
another level of the pyramid cancels what this level still had queued or running (except around the
coarsest level, which napari reads for the layer thumbnail on every slice change).

Only the first axis is stepped (z of a z, y, x volume); reads of other shapes prefetch nothing.
"""

from __future__ import annotations

import math
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

#: Aligned coarser-level windows remembered as read (per prefetcher; the oldest forgotten first).
COARSER_DONE_MAX = 16

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
        self.shape = tuple(int(n) for n in store.shape)
        self.depth = self.shape[0]
        self.coarser: PlanePrefetcher | None = None  # the next coarser level's (link_coarser)
        self._coarser_done: dict[tuple[Any, ...], None] = {}  # aligned coarser windows read (COARSER_DONE_MAX)
        self.coarser_reads = 0  # coarser-level windows read (for tests and benchmarks)
        # The other levels of the same pyramid whose prefetches a read here leaves behind (link_coarser): all but
        # the coarsest, which napari reads for the thumbnail on every slice change whatever level is shown.
        self._left_behind: tuple[PlanePrefetcher, ...] = ()
        self._lock = threading.RLock()  # a done callback may run at once, in the thread holding it
        self._pending: dict[tuple[Any, ...], tuple[Future[None], _Task]] = {}
        self._done: set[tuple[Any, ...]] = set()  # windows read since the view entered this chunk layer
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False  # closed: no prefetch is started any more (the layer is gone)
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
        """Called after the viewer read ``index`` (an int on the first axis, slices elsewhere).

        A one-plane slice on the first axis counts as that plane: napari's Image layers read the plane
        shown as ``z:z+1`` (its Labels layers as ``z``).
        """
        if not index or not all(isinstance(i, slice) for i in index[1:]):
            return
        first = index[0]
        if isinstance(first, slice):
            if first.step not in (None, 1) or first.start is None or first.stop != first.start + 1:
                return
            first = first.start
        _last_view_read[0] = time.monotonic()
        z = int(first)
        rest = tuple(index[1:])
        shape = tuple((s.start, s.stop, s.step) for s in rest)  # slices are not hashable before Python 3.12
        for other in self._left_behind:  # the view is at this level now (a zoom): the others' prefetches are stale
            other.leave_all()
        wanted: dict[tuple[Any, ...], Callable[[_Task], bool]] = {
            (t, shape): partial(self._read_plane, (t, *rest)) for t in self.targets(z)}
        coarser = self.coarser_view(z, rest)
        if coarser is not None:  # after the planes: the worker takes them in order
            planes, window = coarser
            wanted[("coarser", planes, tuple((s.start, s.stop) for s in window))] = partial(
                self._read_coarser, planes, window)
        with self._lock:
            if self._closed:
                return
            for key, (fut, task) in list(self._pending.items()):
                if key not in wanted:  # the view has left: drop it if it has not started, stop it if it has
                    fut.cancel()
                    task.leave()
                    self._pending.pop(key, None)  # (cancel may have run the done callback already)
            self._done &= wanted.keys()  # a window read already is not read again while the view stays
            for key, job in wanted.items():
                if key in self._pending or key in self._done:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="shardscope-prefetch")
                task = _Task()
                fut = self._pool.submit(self._run, key, job, task)
                self._pending[key] = (fut, task)
                fut.add_done_callback(partial(self._forget, key))

    def coarser_view(self, z: int, window: tuple[slice, ...]) -> tuple[tuple[int, ...], tuple[slice, ...]] | None:
        """The planes and window of the linked coarser level that a zoom-out from plane ``z`` of ``window`` shows.

        Planes: napari shows plane ``round(z0 / f)`` of a level downsampled ``f`` times from the finest,
        where ``z0`` is the finest-level position; of this level only ``z = round(z0 / f_here)`` is
        known, so every plane ``round(x * r)`` for ``x`` within ``z ± 0.5`` (``r`` the coarser
        level's size over this one's) is a candidate (one or two; the worker reads one per chunk
        layer). Window: napari switches to the coarser level when the view is zoomed out by about the
        level factor, so it shows the same number of pixels around the same centre. ``None``: no
        linked level, or a window that is not plain forward slices.
        """
        coarser = self.coarser
        if coarser is None or len(window) != len(self.shape) - 1 or len(coarser.shape) != len(self.shape):
            return None
        if any(s.step not in (None, 1) or s.start is None or s.stop is None for s in window):
            return None
        ratio = [c / f for c, f in zip(coarser.shape, self.shape, strict=True)]
        zoom = 1.0 / min(ratio[1:]) if min(ratio[1:]) > 0 else 1.0  # the zoom-out that makes napari switch
        depth = coarser.shape[0]
        planes = tuple(sorted({min(depth - 1, max(0, round(x * ratio[0]))) for x in (z - 0.499, z, z + 0.499)}))
        out = []
        for s, r, n in zip(window, ratio[1:], coarser.shape[1:], strict=True):
            centre = (s.start + s.stop) / 2 * r
            half = (s.stop - s.start) * zoom * r / 2
            lo, hi = max(0, math.floor(centre - half)), min(n, math.ceil(centre + half))
            if hi <= lo:
                return None
            out.append(slice(lo, hi, 1))
        return planes, tuple(out)

    def _run(self, key: tuple[Any, ...], job: Callable[[_Task], bool], task: _Task) -> None:
        try:
            done = job(task)
        except Exception:  # cancelled, or a damaged chunk (reported when the viewer reads it, not here)
            return
        with self._lock:
            if done and not task.left.is_set():
                self._done.add(key)

    def _read_plane(self, plane: tuple[Any, ...], task: _Task) -> bool:
        store = self.store.get() if isinstance(self.store, DeferredStore) else self.store
        if not self._read_bands(store, self.bands(plane), task):
            return False
        with self._lock:
            self.reads += 1
        return True

    def _read_coarser(self, planes: tuple[int, ...], window: tuple[slice, ...], task: _Task) -> bool:
        """Read the coarser level's ``window`` of one plane per chunk layer among ``planes`` (widened to its grid)."""
        coarser = self.coarser
        if coarser is None:  # unlinked since
            return True
        store = coarser.store.get() if isinstance(coarser.store, DeferredStore) else coarser.store
        chunk = coarser.chunk  # asked here, on the worker: it may open the level
        chunks = coarser._chunks
        if chunk is None or chunks is None or len(chunks) != len(coarser.shape):
            return True  # no aligned grid: nothing worth warming (and nothing to try again)
        aligned = tuple(slice(s.start // c * c, min(n, -(-s.stop // c) * c), 1)
                        for s, c, n in zip(window, chunks[1:], coarser.shape[1:], strict=True))
        layers: dict[int, int] = {}
        for z in planes:
            layers.setdefault(z // chunk, z)
        for layer, z in sorted(layers.items()):
            key = (layer, tuple((s.start, s.stop) for s in aligned))
            with self._lock:
                if key in self._coarser_done:
                    continue
            if not self._read_bands(store, coarser.bands((z, *aligned)), task):
                return False
            with self._lock:
                self.coarser_reads += 1
                self._coarser_done[key] = None
                while len(self._coarser_done) > COARSER_DONE_MAX:
                    del self._coarser_done[next(iter(self._coarser_done))]
        return True

    def _read_bands(self, store: Any, bands: list[tuple[Any, ...]], task: _Task) -> bool:
        """Read ``bands`` of ``store`` one at a time in the viewer's pauses; False if the view left first."""
        for band in bands:
            if not _wait_for_quiet(task):
                return False
            with self._lock:
                if task.left.is_set():
                    return False
                task.read = store[band].read()
            task.read.result()
        return True

    def _forget(self, key: tuple[Any, ...], fut: Future[None]) -> None:
        with self._lock:
            entry = self._pending.get(key)
            if entry is not None and entry[0] is fut:
                del self._pending[key]

    def leave_all(self) -> None:
        """The view has left this level: drop the prefetches not started, stop those running (not closed)."""
        with self._lock:
            for fut, task in list(self._pending.values()):
                fut.cancel()
                task.leave()
            self._pending.clear()

    def wait(self, timeout: float = 30.0) -> None:
        """Block until the prefetches in flight finish (tests, benchmarks), at most ``timeout`` seconds."""
        from concurrent.futures import wait

        with self._lock:
            futures = [fut for fut, _ in self._pending.values()]
        wait(futures, timeout=timeout)

    def close(self) -> None:
        """Stop: cancel what is in flight, and start no prefetch after later reads."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            for fut, task in list(self._pending.values()):
                fut.cancel()
                task.leave()
            self._pending.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def link_coarser(prefetchers: Sequence[PlanePrefetcher | None]) -> None:
    """Link each level's prefetcher (finest first) to the next coarser one, so browsing warms a zoom-out.

    A level without a prefetcher (no aligned chunk grid) breaks the chain there: the level above it
    prefetches no coarser level. The levels are also told about each other: a read at one level (the
    view zoomed to it) cancels the prefetches of the others, except from and of the coarsest level,
    which napari reads for its thumbnail whatever level it shows.
    """
    for fine, coarse in pairwise(prefetchers):
        if fine is not None:
            fine.coarser = coarse
    coarsest = prefetchers[-1] if prefetchers else None
    shown = [p for p in prefetchers if p is not None and p is not coarsest]  # all but the thumbnail's level
    for p in shown:
        p._left_behind = tuple(q for q in shown if q is not p)


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
