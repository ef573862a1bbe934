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
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore

if TYPE_CHECKING:
    from napari_shardscope.core.volumes.prefetch import PlanePrefetcher

#: A function applied to every array read through a :class:`LazyArray` (elementwise, shape kept).
ValueTransform = Callable[[npt.NDArray[Any]], npt.NDArray[Any]]


class LazyArray:
    """A lazy, read-only N-d array backed by a zero-origin TensorStore view.

    Parameters
    ----------
    store
        A ``tensorstore.TensorStore`` whose domain starts at 0 on every dimension.
    transform
        Optional value transform applied to every read (must keep the shape; runs on napari's
        slicing thread, so it must be thread-safe).
    dtype
        The dtype ``transform`` produces (default: the store's dtype).

    Notes
    -----
    Indexing follows NumPy: integers (negative from the end), slices (any step, clipped to the
    shape), ``...``, ``None`` and integer or boolean index arrays. Indexing with integers only
    reads that one element and returns a NumPy scalar, because callers such as napari's
    ``get_value`` treat the result as a value.
    """

    __slots__ = ("_after", "_dtype", "_prefetch", "_store", "_transform")

    def __init__(self, store: Any, *, transform: ValueTransform | None = None,
                 dtype: npt.DTypeLike | None = None, prefetch: PlanePrefetcher | None = None,
                 after_read: Callable[[], None] | None = None) -> None:
        if any(int(o) != 0 for o in store.domain.origin):
            import tensorstore as ts

            store = store[ts.d[:].translate_to[0]]
        self._store = store
        self._transform = transform
        self._prefetch = prefetch  # set on a viewer's level: views read through it warm the next chunk layers
        self._after = after_read
        self._dtype: np.dtype[Any] = np.dtype(dtype) if dtype is not None else np.dtype(store.dtype.numpy_dtype)

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
        """The underlying zero-origin ``tensorstore.TensorStore`` view (no transform applied)."""
        return self._store

    @property
    def transform(self) -> ValueTransform | None:
        """The value transform applied after each read, if any."""
        return self._transform

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self._store.shape)

    @property
    def ndim(self) -> int:
        return int(self._store.rank)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """The read-chunk shape (the smallest unit TensorStore reads), or ``None`` if unaligned.

        ``None`` when the chunk grid does not start at index 0 of this view (e.g. a view cut at a
        non-chunk boundary), because napari assumes a zero-anchored grid.
        """
        try:
            layout = self._store.chunk_layout
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
        return f"LazyArray(shape={self.shape}, dtype={self._dtype}, chunks={self.chunks}{extra})"

    # -- views and reads -------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        """A lazy view of ``key`` (NumPy semantics); a NumPy scalar when every axis is an integer."""
        import tensorstore as ts

        index = normalize_index(key, self.shape)
        try:
            view = self._store[index]
        except (ValueError, IndexError) as exc:
            raise IndexError(f"index {key!r} is invalid for shape {self.shape}: {exc}") from None
        if view.rank == 0:
            return self._finish(self._read_view(view))[()]
        view = view[ts.d[:].translate_to[0]]
        prefetch = self._prefetch
        after = None if prefetch is None else (lambda: prefetch.after_read(index))
        return LazyArray(view, transform=self._transform, dtype=self._dtype, after_read=after)

    def read(self) -> npt.NDArray[Any]:
        """Read the whole view into a new NumPy array (only the chunks it intersects).

        Raises
        ------
        ChunkDecodeError, NotFoundError, StoreError
            TensorStore's failure, translated at the door and naming the array and the chunk file.
        """
        data = self._finish(self._read_view(self._store))
        if self._after is not None:
            self._after()  # after the plane is read: prefetch never competes with the read it follows
        return data

    def with_prefetch(self) -> LazyArray:
        """This array, with plane reads of its views followed by prefetches of the neighbouring chunk layers.

        For a viewer's levels (see :mod:`.prefetch`); a script reading arrays gets no background reads.
        """
        from napari_shardscope.core.volumes.prefetch import PlanePrefetcher

        chunks = self.chunks
        if self.ndim < 3 or chunks is None:
            return self
        return LazyArray(self._store, transform=self._transform, dtype=self._dtype,
                         prefetch=PlanePrefetcher(self._store, chunks[0]))

    @property
    def prefetcher(self) -> PlanePrefetcher | None:
        """The prefetcher of this array, if :meth:`with_prefetch` made one."""
        return self._prefetch

    def _read_view(self, view: Any) -> npt.NDArray[Any]:
        try:
            return np.asarray(_bulk_view(view).read().result())
        except Exception as exc:  # TensorStore raises ValueError for every failure kind
            raise error_from_tensorstore(exc, where=self._where()) from exc

    def _where(self) -> str:
        """The URL of the array behind this view, for messages (virtual views have none)."""
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
            return LazyArray(self._store, prefetch=self._prefetch)
        return LazyArray(self._store, transform=transform, dtype=dtype, prefetch=self._prefetch)

    def _finish(self, data: npt.NDArray[Any]) -> npt.NDArray[Any]:
        if self._transform is not None:
            out = np.asarray(self._transform(data))
            if out.shape != data.shape:
                raise ValueError(f"value transform changed the shape {data.shape} -> {out.shape}")
            return out.astype(self._dtype, copy=False)
        return data


#: A read producing at least this many bytes bypasses the chunk cache (see :func:`_bulk_view`).
BULK_READ_BYTES = 64 << 20


def _bulk_view(view: Any) -> Any:
    """``view``, or for a bulk read the same view reopened on a context without a chunk cache.

    Why: a read of hundreds of MiB (a whole volume, an export block) puts every chunk it decodes in
    the cache, in memory the allocator must fault in fresh, only to evict it again (the read is as
    large as the cache) — the reason a default-settings full read ran at a third of TensorStore's
    uncached speed. Browsing reads (planes, tiles) stay far below the threshold and keep the cache.
    Views that cannot be reopened from their spec (virtual chunked) are read as they are.
    """
    try:
        nbytes = int(np.prod(view.shape, dtype=np.int64)) * int(view.dtype.numpy_dtype.itemsize)
    except Exception:  # pragma: no cover - every TensorStore view has a shape and dtype
        return view
    if nbytes < BULK_READ_BYTES:
        return view
    try:
        import tensorstore as ts

        spec = view.spec(retain_context=False)
        return ts.open(spec, read=True, context=_uncached_context()).result()
    except Exception:  # virtual views and drivers that cannot reopen: the cached path is still right
        return view


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
