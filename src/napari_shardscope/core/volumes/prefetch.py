"""Read the chunk layers next to the plane being viewed before the viewer asks for them.

Why: stepping through z inside one layer of chunks costs nothing (the chunks are cached), but
the step that crosses into the next layer pays for decoding every chunk of the new plane — tens of
milliseconds for uint64, a visible stall at a human 10 steps/s. After each plane read, a
:class:`PlanePrefetcher` reads one plane of the chunk layer above and one of the layer below on
worker threads, so the chunk cache already holds them when the step arrives. The reads are
ordinary cached reads (their results are dropped); a prefetch the view has moved away from is
cancelled if it has not started, and only the latest window is kept.

Only the first axis is stepped (z of a z, y, x volume); reads of other shapes prefetch nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

#: Worker threads per prefetcher: two chunk layers in flight, the GUI and slicing threads untouched.
PREFETCH_WORKERS = 2


class PlanePrefetcher:
    """Warm the chunk cache of ``store`` around the planes read through it.

    Parameters
    ----------
    store
        The zero-origin TensorStore (a volume level) the viewer reads planes of.
    chunk
        The read-chunk length along the first axis (planes per chunk layer).
    """

    def __init__(self, store: Any, chunk: int) -> None:
        self.store = store
        self.chunk = max(1, int(chunk))
        self.depth = int(store.shape[0])
        self._lock = threading.RLock()  # a done callback may run at once, in the thread holding it
        self._pending: dict[tuple[Any, ...], Future[None]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.reads = 0  # prefetch reads completed (for tests and benchmarks)

    def targets(self, z: int) -> list[int]:
        """Planes to read after plane ``z``: the first of the next chunk layer, the last of the previous one."""
        layer = z // self.chunk
        out = []
        after = (layer + 1) * self.chunk
        if after < self.depth:
            out.append(after)
        before = layer * self.chunk - 1
        if before >= 0:
            out.append(before)
        return out

    def after_read(self, index: Sequence[Any]) -> None:
        """Called after the viewer read ``index`` (an int on the first axis, slices elsewhere)."""
        if not index or isinstance(index[0], slice) or not all(isinstance(i, slice) for i in index[1:]):
            return
        z = int(index[0])
        rest = tuple(index[1:])
        shape = tuple((s.start, s.stop, s.step) for s in rest)  # slices are not hashable before Python 3.12
        wanted = {(t, shape): (t, *rest) for t in self.targets(z)}
        with self._lock:
            for key, fut in list(self._pending.items()):
                if key not in wanted:
                    fut.cancel()  # the view has left: drop it unless it already runs (its callback forgets it)
            for key, plane in wanted.items():
                if key in self._pending:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="shardscope-prefetch")
                fut = self._pool.submit(self._read, plane)
                self._pending[key] = fut
                fut.add_done_callback(partial(self._forget, key))

    def _read(self, plane: tuple[Any, ...]) -> None:
        try:
            self.store[plane].read().result()
        except Exception:  # a damaged chunk is reported when the viewer reads it, not here
            return
        with self._lock:
            self.reads += 1

    def _forget(self, key: tuple[Any, ...], fut: Future[None]) -> None:
        with self._lock:
            if self._pending.get(key) is fut:
                del self._pending[key]

    def wait(self, timeout: float = 30.0) -> None:
        """Block until the prefetches in flight finish (tests, benchmarks), at most ``timeout`` seconds."""
        from concurrent.futures import wait

        with self._lock:
            futures = list(self._pending.values())
        wait(futures, timeout=timeout)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            for fut in list(self._pending.values()):
                fut.cancel()
            self._pending.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
