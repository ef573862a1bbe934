"""Reading a version's supervoxels: the base volume patched by the version's overlay blocks.

The base is read through its own TensorStore views (opened with the shared context), so chunks
that no edit touched come from the one shared cache whatever the version. A version's overlay
blocks — the blocks supervoxel splits rewrote — are pasted over what the base returns.

For napari, each (version state, scale) gets a ``tensorstore.virtual_chunked`` view whose read
function does exactly that, chunk by chunk, and which caches its chunks in the shared pool: a
warm read of an edited volume costs what a warm read of the base costs. The read function must
not block on TensorStore (it runs on TensorStore's threads; a nested ``.result()`` deadlocks), so
it chains on the base read's future and fills the chunk in the callback.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore.context import read_once_context, shared_context
from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.labelmap.block_codec import decode_label_block
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.geometry import Box, Coord
from napari_shardscope.core.labelmap.keys import block_key
from napari_shardscope.core.volumes.direct import BoxReader
from napari_shardscope.core.volumes.lazy import LazyArray
from napari_shardscope.core.volumes.model import Volume
from napari_shardscope.core.volumes.tsopen import reopen_store

U64 = npt.NDArray[np.uint64]
BlockId = tuple[int, Coord]
#: Fetches encoded overlay blocks by key at one version (one store snapshot per call).
Fetch = Callable[[list[bytes]], list[bytes | None]]

_snapshot_ids = itertools.count(1)
#: Decoded overlay blocks, shared by every labelmap of the process: 2 MiB each at 64³ uint64.
_decoded: LruCache[tuple[int, int, Coord], U64 | None] = LruCache(64)


def new_snapshot_id() -> int:
    """A process-unique id for one state of a version's overlay (keys the decoded-block cache)."""
    return next(_snapshot_ids)


class BaseSource:
    """The base volume's zero-origin TensorStore views, read as uint64."""

    def __init__(self, volume: Volume) -> None:
        self.volume = volume
        self.stores = [level.array.store for level in volume.levels]
        self.chunks = [level.array.chunks for level in volume.levels]
        self.direct = [level.array.direct for level in volume.levels]
        self._box_readers: dict[int, BoxReader | None] = {}
        self._once_stores: dict[int, Any] = {}
        self._box_lock = threading.Lock()

    def read(self, scale: int, box: Box) -> U64:
        """The base's supervoxel ids in ``box`` of ``scale`` (a new array), through the shared chunk cache."""
        return self._read_from(self.stores[scale], box)

    def _read_from(self, store: Any, box: Box) -> U64:
        if box.empty:
            return np.zeros(box.shape, dtype=np.uint64)
        try:
            return np.asarray(store[box.slices].read().result(), dtype=np.uint64)
        except Exception as exc:  # TensorStore raises ValueError for every failure kind
            raise error_from_tensorstore(exc, where=self.volume.url) from exc

    def read_uncached(self, scale: int, box: Box) -> U64:
        """:meth:`read` past the shared chunk cache, for passes that touch each chunk once (an export,
        the label index build).

        Why: through the shared cache, such a pass decoded every chunk into the viewer's cache and
        left it there: building the index of a base with 2,000 stored chunks grew the process to the
        cache's limit (2.4 GiB here) with chunks never read again, evicting what the viewer had
        cached. A level this project decodes itself (precomputed's raw scales on local disk) is read
        by its :class:`~napari_shardscope.core.volumes.direct.DirectReader`, straight into the result
        with the GIL released while it inflates (an export's workers scale); a TensorStore driver
        level through a twin of its view opened on the read-once context
        (:func:`~napari_shardscope.core.bytestore.context.read_once_context`: a small pool of its own,
        holding shard indexes, not chunks). A level that can be neither (a ``virtual_chunked`` view
        of a format without a direct reader) is read through :meth:`read`.
        """
        reader = self._box_reader(scale)
        if reader is None or box.empty:
            return self._read_from(self._once_store(scale), box)
        return np.asarray(reader.read(box.lo, box.hi), dtype=np.uint64)

    def _once_store(self, scale: int) -> Any:
        """The level's view on the read-once context (opened on first use), or its shared view when it cannot reopen."""
        with self._box_lock:
            if scale not in self._once_stores:
                store = self.stores[scale]
                twin = reopen_store(store, read_once_context())
                self._once_stores[scale] = store if twin is None else twin
            return self._once_stores[scale]

    def _box_reader(self, scale: int) -> BoxReader | None:
        """The level's direct box reader (planned on first use), or ``None`` when TensorStore must read it."""
        with self._box_lock:
            if scale not in self._box_readers:
                direct = self.direct[scale]
                self._box_readers[scale] = None if direct is None else direct.box_reader(self.stores[scale])
            return self._box_readers[scale]

    def read_many(self, scale: int, boxes: Sequence[Box], *, ahead: int = 1, once: bool = False) -> Iterator[U64]:
        """:meth:`read` of each box, in order, with the reads of the next ``ahead`` boxes already issued.

        A remote base serves the reads concurrently, and decoding overlaps whatever the caller does
        with each box; at most ``ahead + 1`` boxes are in memory at once. Each box arrives as its own
        contiguous array (no copy out of a larger read). ``once``: a pass that reads each chunk once
        (the index job), read past the shared chunk cache as :meth:`read_uncached` does.
        """
        store = self._once_store(scale) if once else self.stores[scale]

        def issue(box: Box) -> Any:
            return None if box.empty else store[box.slices].read()

        pending = deque(issue(box) for box in boxes[:ahead + 1])
        for i, box in enumerate(boxes):
            future = pending.popleft()
            if i + ahead + 1 < len(boxes):
                pending.append(issue(boxes[i + ahead + 1]))
            if future is None:
                yield np.zeros(box.shape, dtype=np.uint64)
                continue
            try:
                yield np.asarray(future.result(), dtype=np.uint64)
            except Exception as exc:  # TensorStore raises ValueError for every failure kind
                raise error_from_tensorstore(exc, where=self.volume.url) from exc

    def read_async(self, scale: int, box: Box) -> Any:
        """A TensorStore future of the same read (for virtual views)."""
        return self.stores[scale][box.slices].read()


class Overlay:
    """The overlay blocks of one state of one version: how many each scale has, and how to fetch them.

    Which blocks exist is found on demand, for the blocks a read touches (one batched fetch at the
    version; a version never lists its blocks). Immutable: an edit that rewrites blocks makes a new
    one (new ``snapshot`` id), so cached decoded blocks and the chunk caches of virtual views built on
    an old overlay are never consulted for the new state.
    """

    def __init__(self, config: LabelmapConfig, counts: Mapping[int, int], fetch: Fetch) -> None:
        self.config = config
        self.counts = {s: int(counts.get(s, 0)) for s in range(len(config.scales))}
        self.fetch = fetch
        self.snapshot = new_snapshot_id()
        self._absent: LruCache[BlockId, bool] = LruCache(1 << 16)

    def has(self, scale: int) -> bool:
        return self.counts.get(scale, 0) > 0

    def decoded(self, items: Iterable[BlockId]) -> dict[BlockId, U64]:
        """Decoded contents of the overlay blocks among ``items`` (shared, read-only arrays); absent ones left out."""
        out: dict[BlockId, U64] = {}
        missing: list[BlockId] = []
        for scale, c in items:
            if not self.has(scale) or self._absent.contains((scale, c)):
                continue
            got = _decoded.get((self.snapshot, scale, c))
            if got is not None:
                out[(scale, c)] = got
            else:
                missing.append((scale, c))
        if missing:
            raws = self.fetch([block_key(s, c) for s, c in missing])
            for (scale, c), raw in zip(missing, raws, strict=True):
                if raw is None:  # the base shows here
                    self._absent.put((scale, c), True)
                    continue
                arr = decode_label_block(raw, key=f"overlay block {scale}/{c}")
                arr.setflags(write=False)
                _decoded.put((self.snapshot, scale, c), arr)
                out[(scale, c)] = arr
        return out

    def paste(self, scale: int, box: Box, out: U64, pending: Mapping[BlockId, U64] | None = None) -> None:
        """Overwrite ``out`` (the voxels of ``box``) with the overlay (and ``pending``) blocks it meets."""
        grid = self.config.grid(scale)
        if not self.has(scale) and not pending:
            return
        wanted: list[BlockId] = []
        local: dict[BlockId, U64] = {}
        for c in grid.blocks_in(box):
            if pending is not None and (scale, c) in pending:
                local[(scale, c)] = pending[(scale, c)]
            else:
                wanted.append((scale, c))
        local.update(self.decoded(wanted))
        for (_, c), block in local.items():
            bbox = grid.box(c)
            inter = bbox.intersect(box)
            out[inter.relative_to(box.lo)] = block[inter.relative_to(bbox.lo)]


class PatchedReader:
    """Reads of a version's supervoxels with an edit's not-yet-written blocks (``pending``) on top.

    Splits read the current state through this, write their new blocks into ``pending``, and
    later steps of the same edit (coarser scales, further splits of a body split) see them.
    """

    def __init__(self, base: BaseSource, overlay: Overlay) -> None:
        self.base = base
        self.overlay = overlay
        self.pending: dict[BlockId, U64] = {}

    def read(self, scale: int, box: Box) -> U64:
        out = self.base.read(scale, box)
        self.overlay.paste(scale, box, out, self.pending)
        return out

    def block(self, scale: int, c: Coord) -> U64:
        """The current contents of one block: the pending array itself (edit it in place) or a copy."""
        hit = self.pending.get((scale, c))
        if hit is not None:
            return hit
        box = self.overlay.config.grid(scale).box(c)
        got = self.overlay.decoded([(scale, c)]).get((scale, c))
        if got is not None:
            return got.copy()
        return self.base.read(scale, box)


def virtual_array(base: BaseSource, overlay: Overlay, scale: int) -> LazyArray:
    """A lazy (z, y, x) uint64 array of the patched supervoxels of one scale, for napari.

    Without overlay blocks at this scale it is the base's own view (zero overhead).
    """
    import tensorstore as ts

    store = base.stores[scale]
    if not overlay.has(scale):
        if np.dtype(store.dtype.numpy_dtype) == np.uint64:
            return LazyArray(store)
        return LazyArray(store, transform=_as_uint64, dtype=np.uint64)
    shape = overlay.config.scales[scale].shape
    chunks = base.chunks[scale] or overlay.config.block

    def read_chunk(domain: Any, array: npt.NDArray[np.uint64], _params: Any) -> Any:
        lo, hi = domain.inclusive_min, domain.exclusive_max
        box = Box((int(lo[0]), int(lo[1]), int(lo[2])), (int(hi[0]), int(hi[1]), int(hi[2])))
        promise: Any
        future: Any
        promise, future = ts.Promise.new()

        def fill(done: Any) -> None:
            try:
                array[...] = done.result()
                overlay.paste(scale, box, array)
                promise.set_result(None)
            except BaseException as exc:  # handed to the reader through the future
                promise.set_exception(exc)

        base.read_async(scale, box).add_done_callback(fill)
        return future

    view = ts.virtual_chunked(read_chunk, dtype=ts.uint64, domain=ts.IndexDomain(shape=list(shape)),
                              chunk_layout=ts.ChunkLayout(read_chunk_shape=list(chunks)), context=shared_context())
    return LazyArray(view)


def _as_uint64(data: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return np.asarray(data, dtype=np.uint64)
