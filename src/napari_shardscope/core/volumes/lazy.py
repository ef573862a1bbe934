"""A read-only lazy array over a TensorStore view, shaped the way napari consumes arrays.

Why a wrapper and not the TensorStore object itself:

* napari first indexes a level with the visible region and only later converts the result to
  numpy (see ``NAPARI-NOTES.md``). :meth:`LazyArray.__getitem__` therefore returns another lazy
  view and never reads; :meth:`LazyArray.__array__` reads exactly the selected region. A wrapper
  that read in ``__getitem__`` pulled whole volumes on every z-step.
* TensorStore indexes by *coordinates*: a negative index is a coordinate, not "from the end",
  and a slice past the domain is an error. napari, dask and zarr users expect NumPy semantics, so
  keys are normalised to NumPy's meaning before they reach TensorStore, and every view is
  re-translated to a zero origin.
* napari expands the visible region to chunk boundaries using a ``chunks`` attribute; we expose
  TensorStore's read-chunk shape under that name.
* The labelmap needs to show body ids over supervoxel ids without copying the volume: a
  value transform applied after each read (:meth:`LazyArray.with_transform`) does that and keeps
  the array lazy.
* Where reads go: through the view's TensorStore driver and the shared context's chunk cache —
  except a script's first touch of its chunks (:class:`CacheAdmission`) and bulk reads
  (:func:`_bulk_view`), which skip the cache: for a driver level on an uncached twin of the
  driver, for a level whose format decodes it here (precomputed's raw scales on local disk, a
  :class:`~napari_shardscope.core.formats.volume_spec.DirectChunkSource`) through
  :class:`~.direct.DirectReader`, which decodes the chunks itself with no TensorStore in between.
  Cached reads of such a level go through TensorStore's ``virtual_chunked`` driver, whose read
  function decodes into the cache's chunk buffer (:func:`~.tsopen.open_chunk_source`).
"""

from __future__ import annotations

import itertools
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
from napari_shardscope.core.volumes.deferred import DeferredStore

if TYPE_CHECKING:
    from napari_shardscope.core.volumes.direct import DirectReader
    from napari_shardscope.core.volumes.prefetch import PlanePrefetcher

#: A function applied to every array read through a :class:`LazyArray` (elementwise, shape kept).
ValueTransform = Callable[[npt.NDArray[Any]], npt.NDArray[Any]]


class LazyArray:
    """A lazy, read-only N-d array backed by a zero-origin TensorStore view.

    Parameters
    ----------
    store
        A ``tensorstore.TensorStore`` (re-translated to a zero origin when it is not), or a
        :class:`~.deferred.DeferredStore` that opens one on the first read: shape, dtype and ndim
        are then answered from the metadata without opening (see :mod:`.deferred`).
    transform
        Optional value transform applied to every read (must keep the shape; runs on napari's
        slicing thread, so it must be thread-safe).
    dtype
        The dtype ``transform`` produces (default: the store's dtype).
    direct
        For a level read by a format's own decoder: the reader of uncached reads of ``store`` and its
        views (see the module docstring); ``None`` for a driver level.

    Notes
    -----
    Indexing follows NumPy: integers (negative from the end), slices (any step, clipped to the
    shape), ``...``, ``None`` and integer or boolean index arrays. Indexing with integers only
    reads that one element and returns a NumPy scalar, because callers such as napari's
    ``get_value`` treat the result as a value.
    """

    __slots__ = ("_admission", "_after", "_deferred", "_direct", "_dtype", "_origin", "_prefetch", "_read_through",
                 "_shape", "_store", "_track", "_transform")

    def __init__(self, store: Any, *, transform: ValueTransform | None = None,
                 dtype: npt.DTypeLike | None = None, prefetch: PlanePrefetcher | None = None,
                 after_read: Callable[[], None] | None = None,
                 read_through: Callable[[], Any] | None = None, track: bool = True,
                 origin: tuple[int, ...] | None = None, direct: DirectReader | None = None) -> None:
        self._deferred: DeferredStore | None = None
        self._shape: tuple[int, ...] | None = None
        if isinstance(store, DeferredStore):
            self._deferred, self._shape = store, store.shape
            store_dtype: np.dtype[Any] = store.dtype
            store = None
        else:
            store = zero_origin(store)
            store_dtype = np.dtype(store.dtype.numpy_dtype)
            self._shape = tuple(int(n) for n in store.shape)
        self._store: Any = store
        self._transform = transform
        self._prefetch = prefetch  # set on a viewer's level: views read through it warm the next chunk layers
        # For a box view of such a level: where the box starts in the level, so that the plane napari takes of
        # the box (it indexes the level with the visible box first, then the plane) is known in level terms.
        self._origin = origin
        self._after = after_read
        # For a view of a script's array: at read time, the view to read instead of ``store`` (an uncached
        # twin on a first touch of its chunks, see CacheAdmission), or None to read through the cache.
        self._read_through = read_through
        self._admission: CacheAdmission | None = None  # made on the first view of this array
        # Only an opened array tracks which of its chunks were read (CacheAdmission); its views do not:
        # a view of a viewer's level (napari indexes twice) must keep reading through the cache.
        self._track = track
        self._direct = direct
        self._dtype: np.dtype[Any] = np.dtype(dtype) if dtype is not None else store_dtype

    def __setitem__(self, index: Any, value: Any) -> None:
        """Refuse: this is a read-only view of a stored volume (napari paints into arrays it can write).

        Raises
        ------
        ReadOnlyVolumeError
            Always, naming the volume; edits go through a labelmap (the Proofreading panel).
        """
        from napari_shardscope.core.errors import ReadOnlyVolumeError

        where = self._where()
        raise ReadOnlyVolumeError(
            f"{where} is shown read-only: shardscope never writes into a source volume; edit bodies through a "
            "repository (Proofreading panel), and paint split seeds in its seeds layer")

    # -- array metadata --------------------------------------------------------------------------
    @property
    def store(self) -> Any:
        """The underlying zero-origin ``tensorstore.TensorStore`` view (no transform applied).

        For a level not opened yet this opens it (once; typed errors, see :mod:`.deferred`).
        """
        store = self._store
        if store is None:
            assert self._deferred is not None
            store = self._store = self._deferred.get()
        return store

    @property
    def is_open(self) -> bool:
        """Whether the TensorStore behind this array is open (a deferred level opens on first read)."""
        return self._store is not None or (self._deferred is not None and self._deferred.is_open)

    @property
    def transform(self) -> ValueTransform | None:
        """The value transform applied after each read, if any."""
        return self._transform

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        assert self._shape is not None  # set at construction, from the store or the level's metadata
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def direct(self) -> DirectReader | None:
        """The uncached reader of this level when its format decodes it here (see :mod:`.direct`), else ``None``."""
        return self._direct

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """The read-chunk shape (the smallest unit TensorStore reads), or ``None`` if unaligned.

        ``None`` when the chunk grid does not start at index 0 of this view (e.g. a view cut at a
        non-chunk boundary), because napari assumes a zero-anchored grid.
        """
        try:
            layout = self.store.chunk_layout
        except ValueError:  # some index-array views have no chunk layout
            return None
        origin = layout.grid_origin
        if origin is not None and any(o not in (0, None) for o in origin):
            return None
        shape = layout.read_chunk.shape
        if shape is None:
            return None
        return tuple(int(c) if c else int(n) for c, n in zip(shape, self.shape, strict=True))

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self) -> str:
        extra = ", transformed" if self._transform is not None else ""
        chunks = f"chunks={self.chunks}" if self.is_open else "not opened"  # a repr never opens a store
        return f"LazyArray(shape={self.shape}, dtype={self._dtype}, {chunks}{extra})"

    # -- views and reads -------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        """A lazy view of ``key`` (NumPy semantics); a NumPy scalar when every axis is an integer."""
        import tensorstore as ts

        index = normalize_index(key, self.shape)
        store = self.store
        try:
            view = store[index]
        except (ValueError, IndexError) as exc:
            raise IndexError(f"index {key!r} is invalid for shape {self.shape}: {exc}") from None
        if view.rank == 0:
            return self._finish(self._read_view(view))[()]
        through = None
        if self._track and self._prefetch is None:
            if self._admission is None:
                self._admission = CacheAdmission(store, self.chunks, self._direct)
            through = self._admission.reader_for(index)
        view = view[ts.d[:].translate_to[0]]
        prefetch = self._prefetch
        after = box = None
        if prefetch is not None:
            at = index if self._origin is None else shift_index(index, self._origin)
            if at is not None:
                after = partial(prefetch.after_read, at)
                if all(isinstance(k, slice) and k.step == 1 for k in at):
                    box = tuple(int(k.start) for k in at)
        return LazyArray(view, transform=self._transform, dtype=self._dtype, after_read=after, read_through=through,
                         track=False, prefetch=prefetch if box is not None else None, origin=box,
                         direct=self._direct)

    def read(self) -> npt.NDArray[Any]:
        """Read the whole view into a new NumPy array (only the chunks it intersects).

        Raises
        ------
        ChunkDecodeError, NotFoundError, StoreError
            TensorStore's failure, translated at the door and naming the array and the chunk file.
        """
        view = self._read_through() if self._read_through is not None else None
        data = self._finish(self._read_view(self.store) if view is None else self._read_view(view, bulk=False))
        if self._after is not None:
            self._after()  # after the plane is read: prefetch never competes with the read it follows
        return data

    def with_prefetch(self) -> LazyArray:
        """This array, with plane reads of its views followed by prefetches of the neighbouring chunk layers.

        For a viewer's levels (see :mod:`.prefetch`); a script reading arrays gets no background reads.
        """
        from napari_shardscope.core.volumes.prefetch import PlanePrefetcher

        if self.ndim < 3 or (self.is_open and self.chunks is None):
            return self
        source = self._source()  # a level not opened yet stays so: the chunk depth is asked for after a read
        return LazyArray(source, transform=self._transform, dtype=self._dtype,
                         prefetch=PlanePrefetcher(source, lambda: self.chunks), direct=self._direct)

    def _source(self) -> Any:
        """What a new array over the same data is made from: the opened store, or the level's deferred open."""
        return self._store if self._store is not None else self._deferred

    @property
    def prefetcher(self) -> PlanePrefetcher | None:
        """The prefetcher of this array, if :meth:`with_prefetch` made one."""
        return self._prefetch

    def _read_view(self, view: Any, *, bulk: bool = True) -> npt.NDArray[Any]:
        try:
            return np.asarray((_bulk_view(view, self._direct) if bulk else view).read().result())
        except Exception as exc:  # TensorStore raises ValueError for every failure kind
            raise error_from_tensorstore(exc, where=self._where()) from exc

    def _where(self) -> str:
        """The URL of the array behind this view, for messages (virtual views have none)."""
        if self._store is None and self._deferred is not None:
            return self._deferred.where
        try:
            return str(self._store.kvstore.url)
        except Exception:  # virtual views (a labelmap's) have no kvstore
            return "this volume"

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        data = self.read()
        return data if dtype is None else data.astype(dtype, copy=False)

    def with_transform(self, transform: ValueTransform | None,
                       dtype: npt.DTypeLike | None = None) -> LazyArray:
        """The same view with ``transform`` applied after each read (replacing any previous one).

        Used to show body ids over a supervoxel volume: the mapping is applied to what is read,
        so only visible chunks are ever mapped. ``None`` removes the transform.
        """
        if transform is None:
            return LazyArray(self._source(), prefetch=self._prefetch, origin=self._origin, direct=self._direct)
        return LazyArray(self._source(), transform=transform, dtype=dtype, prefetch=self._prefetch, origin=self._origin,
                         direct=self._direct)

    def _finish(self, data: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if self._transform is not None:
            out = np.asarray(self._transform(data))
            if out.shape != data.shape:
                raise ValueError(f"value transform changed the shape {data.shape} -> {out.shape}")
            return out.astype(self._dtype, copy=False)
        return data


class CacheAdmission:
    """Which reads of a script's array go through the chunk cache: those touching a chunk read before.

    Why: a decoded chunk put in the cache is memory the allocator faults in fresh and keeps, where an
    uncached read reuses one buffer. A cold z plane of a 512³ uint64 volume in 64³ chunks decodes
    128 MiB of chunks; caching them made the first plane 2x slower than TensorStore's uncached read
    and the process 2.6x larger, for chunks a script reading one plane never reads again. So a read
    none of whose chunks has been read before goes to an uncached twin of the store (as fast as
    TensorStore's default), and a read touching any chunk read before goes through the cache and
    fills it: a loop over the planes of a chunk layer decodes each chunk at most twice.
    A viewer's levels (:meth:`LazyArray.with_prefetch`) always read through the cache: browsing
    revisits chunk layers and the prefetcher warms them ahead of the view.
    For a level decoded here (``direct``), the uncached twin is its :class:`~.direct.DirectReader`.
    """

    #: Chunk positions remembered per array (the oldest are forgotten first).
    MAX_CHUNKS = 1 << 16
    #: Reads spanning more chunks than this are not tracked (they take the cached or bulk path, as before).
    MAX_CHUNKS_PER_READ = 4096

    def __init__(self, store: Any, chunks: tuple[int, ...] | None, direct: DirectReader | None = None) -> None:
        self._store = store
        self._direct = direct
        self._chunks = chunks
        self._seen: dict[tuple[int, ...], None] = {}
        self._twin: Any = None
        self._lock = threading.Lock()

    def reader_for(self, index: tuple[Any, ...]) -> Callable[[], Any] | None:
        """For a view of ``index``: a function giving the view to read at read time (``None``: the cached view)."""
        box = self._box(index)
        if box is None or math.prod(hi - lo for lo, hi in box) > self.MAX_CHUNKS_PER_READ:
            return None

        def choose() -> Any:
            cells = list(itertools.product(*(range(lo, hi) for lo, hi in box)))
            with self._lock:
                seen = self._seen
                first = not any(c in seen for c in cells)
                for c in cells:
                    seen.pop(c, None)
                    seen[c] = None
                while len(seen) > self.MAX_CHUNKS:
                    del seen[next(iter(seen))]
            if not first:
                return None  # a chunk read before: through the cache, which keeps them
            twin = self._uncached_twin()
            if twin is None:
                return None
            import tensorstore as ts

            return twin[index][ts.d[:].translate_to[0]]

        return choose

    def _box(self, index: tuple[Any, ...]) -> tuple[tuple[int, int], ...] | None:
        """The chunk-grid box a normalised index covers, or ``None`` unless it is integers and slices only."""
        chunks = self._chunks
        if chunks is None or len(index) != len(chunks):
            return None  # index arrays, new axes, unaligned grids: the cached path, as before
        box = []
        for key, c in zip(index, chunks, strict=True):
            if isinstance(key, numbers.Integral):
                lo, hi = int(key), int(key) + 1
            elif isinstance(key, slice) and isinstance(key.start, int) and isinstance(key.stop, int):
                lo, hi = key.start, max(key.start, key.stop)
            else:
                return None
            box.append((lo // c, -(-hi // c)))
        return tuple(box)

    def _uncached_twin(self) -> Any:
        with self._lock:
            if self._twin is None:
                if self._direct is not None:
                    from napari_shardscope.core.volumes.direct import DirectView

                    self._twin = DirectView(self._store, self._direct)
                else:
                    self._twin = _reopen_uncached(self._store) or False
            return self._twin or None


def shift_index(index: tuple[Any, ...], origin: tuple[int, ...]) -> tuple[Any, ...] | None:
    """A normalised ``index`` into a box view starting at ``origin``, as an index into the whole array.

    Integers and forward slices only; ``None`` for anything else (new axes, index arrays, reversed
    slices), which then prefetch nothing.
    """
    if len(index) != len(origin):
        return None
    out: list[Any] = []
    for key, o in zip(index, origin, strict=True):
        if isinstance(key, numbers.Integral):
            out.append(int(key) + o)
        elif isinstance(key, slice) and isinstance(key.start, int) and key.step is not None and key.step > 0:
            out.append(slice(key.start + o, key.stop + o, key.step))
        else:
            return None
    return tuple(out)


def zero_origin(store: Any) -> Any:
    """``store`` re-translated so that every dimension starts at 0 (itself when it already does)."""
    if any(int(o) != 0 for o in store.domain.origin):
        import tensorstore as ts

        return store[ts.d[:].translate_to[0]]
    return store


def _reopen_uncached(store: Any) -> Any:
    """``store`` reopened on a context without a chunk cache, or ``None`` (virtual views cannot reopen)."""
    from napari_shardscope.core.volumes.tsopen import reopen_store

    return reopen_store(store, _uncached_context())


#: A read producing at least this many bytes bypasses the chunk cache (see :func:`_bulk_view`).
BULK_READ_BYTES = 64 << 20


def _bulk_view(view: Any, direct: DirectReader | None = None) -> Any:
    """``view``, or for a bulk read the same view read without the chunk cache.

    Why: a read of hundreds of MiB (a whole volume, an export block) puts every chunk it decodes in
    the cache, in memory the allocator must fault in fresh, only to evict it again (the read is as
    large as the cache) — the reason a default-settings full read ran at a third of TensorStore's
    uncached speed. Browsing reads (planes, tiles) stay far below the threshold and keep the cache.
    A driver view is reopened on a context without a cache; a view of a level decoded here is read
    by its ``direct`` reader. Other views that cannot be reopened from their spec (a labelmap's
    virtual chunked) are read as they are.
    """
    try:
        nbytes = int(np.prod(view.shape, dtype=np.int64)) * int(view.dtype.numpy_dtype.itemsize)
    except Exception:  # pragma: no cover - every TensorStore view has a shape and dtype
        return view
    if nbytes < BULK_READ_BYTES:
        return view
    if direct is not None:
        from napari_shardscope.core.volumes.direct import DirectView

        return DirectView(view, direct)
    return _reopen_uncached(view) or view  # a view that cannot reopen: the cached path is still right


def _uncached_context() -> Any:
    from napari_shardscope.core.bytestore.context import make_context

    global _UNCACHED
    if _UNCACHED is None:
        _UNCACHED = make_context(0)
    return _UNCACHED


_UNCACHED: Any = None


def normalize_index(key: Any, shape: Sequence[int]) -> tuple[Any, ...]:
    """Turn a NumPy-style key into an equivalent TensorStore key for a zero-origin domain.

    Negative integers count from the end, slices are clipped to the shape (as NumPy does; a
    TensorStore slice past the domain is an error), ``...`` is expanded, boolean arrays become
    integer arrays. Raises :class:`IndexError` for out-of-range integers and :class:`TypeError`
    for keys NumPy would not accept either.
    """
    items = list(key) if isinstance(key, tuple) else [key]
    expanded: list[Any] = []
    for item in items:
        if isinstance(item, np.ndarray | list) and np.asarray(item).dtype == np.bool_:
            expanded.extend(np.nonzero(np.asarray(item)))
        else:
            expanded.append(item)
    ellipses = sum(1 for item in expanded if item is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for item in expanded if item is not None and item is not Ellipsis)
    if consumed > len(shape):
        raise IndexError(f"too many indices for an array of shape {tuple(shape)}: {consumed}")
    out: list[Any] = []
    dim = 0
    for item in expanded:
        if item is Ellipsis:
            for _ in range(len(shape) - consumed):
                out.append(slice(0, shape[dim], 1))
                dim += 1
            continue
        if item is None:
            out.append(None)
            continue
        out.append(_normalize_item(item, int(shape[dim]), dim))
        dim += 1
    while dim < len(shape):
        out.append(slice(0, shape[dim], 1))
        dim += 1
    return tuple(out)


def _normalize_item(item: Any, n: int, dim: int) -> Any:
    if isinstance(item, bool | np.bool_):
        raise TypeError(f"boolean scalar index on axis {dim} is not supported")
    if isinstance(item, numbers.Integral):
        i = int(item)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
        return i + n if i < 0 else i
    if isinstance(item, slice):
        start, stop, step = item.indices(n)
        count = len(range(start, stop, step))
        if count == 0:
            return slice(0, 0, 1)
        if step > 0:
            return slice(start, start + (count - 1) * step + 1, step)
        # TensorStore requires the whole interval between start and stop inside the domain, and
        # stop is a coordinate (never "from the end"): stop just below the last selected element.
        return slice(start, start + (count - 1) * step - 1, step)
    if isinstance(item, np.ndarray | list | tuple) or hasattr(item, "__array__"):
        arr = np.asarray(item)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"index arrays must be integers or booleans, got dtype {arr.dtype} on axis {dim}")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < -n or arr.max() >= n):
            raise IndexError(f"index array out of bounds for axis {dim} with size {n}")
        return np.where(arr < 0, arr + n, arr)
    raise TypeError(f"unsupported index {item!r} on axis {dim}")
