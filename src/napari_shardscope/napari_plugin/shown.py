"""Arrays as napari shows them: a damaged chunk is drawn empty and reported, never raised into napari.

napari reads a layer's data while it slices (on every z-step, pan and zoom). A chunk that no longer
decodes — exactly what the Shard browser's Validate finds and offers to go to — made that read raise
inside napari's slicing: an uncaught error dialog, and the view left half-drawn. For display, a
failed read is retried chunk by chunk on the store's own chunk grid; the chunks that fail are drawn
as 0 (background) and reported once each as a warning (napari shows warnings as notifications), the
rest of the view is drawn as stored. Code that reads volumes for any other purpose (validation,
exports, edits) keeps the strict :class:`~napari_shardscope.core.volumes.lazy.LazyArray`, which
raises the typed error. A scale level opens on its first read (``core/volumes/deferred.py``); one
that fails to open (its store went away, a remote that does not answer) is drawn empty and reported
the same way, and is opened again on the next slice, so a refresh shows it once it is back.

No napari import here: :mod:`napari_shardscope.napari_plugin.layers` wraps the arrays it hands to
napari.
"""

from __future__ import annotations

import threading
import warnings
from itertools import pairwise, product
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ShardscopeError


class DamagedChunkWarning(UserWarning):
    """A chunk could not be read for display; it is drawn as background."""


class _Reported:
    """Messages already reported (shared by every view of one array, so each damage is told once)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: set[str] = set()

    def first_time(self, text: str) -> bool:
        with self.lock:
            if text in self.seen:
                return False
            self.seen.add(text)
            return True


class ShownArray:
    """A lazy array (a ``LazyArray`` or anything with its interface) that never raises a read error into napari.

    Indexing returns another :class:`ShownArray` (napari indexes first and converts later); reading
    (``np.asarray``) reads the whole view and, when that fails with a
    :class:`~napari_shardscope.core.errors.ShardscopeError`, reads it again one stored chunk at a
    time, drawing the failed chunks as 0.
    """

    __slots__ = ("_inner", "_reported")

    def __init__(self, inner: Any, reported: _Reported | None = None) -> None:
        self._inner = inner
        self._reported = reported if reported is not None else _Reported()

    @property
    def inner(self) -> Any:
        """The strict array behind this view."""
        return self._inner

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self._inner.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._inner.shape)

    @property
    def ndim(self) -> int:
        return int(self._inner.ndim)

    @property
    def size(self) -> int:
        return int(self._inner.size)

    @property
    def chunks(self) -> tuple[int, ...] | None:
        try:
            return getattr(self._inner, "chunks", None)
        except ShardscopeError as exc:  # the level's chunk layout needs it opened, and it does not open
            self._report(exc)
            return None

    def __len__(self) -> int:
        return len(self._inner)

    def __repr__(self) -> str:
        return f"ShownArray({self._inner!r})"

    def __setitem__(self, index: Any, value: Any) -> None:
        self._inner[index] = value  # the strict array refuses with its own message (read-only volume)

    def __getitem__(self, key: Any) -> Any:
        try:
            out = self._inner[key]
        except ShardscopeError as exc:  # one element read from a damaged chunk, or a level that does not open
            self._report(exc)
            empty = np.broadcast_to(self.dtype.type(0), self.shape)[key]  # the shape the view would have
            return empty if np.ndim(empty) == 0 else np.zeros(np.shape(empty), dtype=self.dtype)
        if isinstance(out, np.generic | np.ndarray) or not hasattr(out, "shape"):
            return out
        return ShownArray(out, self._reported)

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        data = self.read()
        return data if dtype is None else data.astype(dtype, copy=False)

    def read(self) -> npt.NDArray[Any]:
        """The view's values; chunks that fail to read are 0 (and reported once)."""
        try:
            return np.asarray(self._inner.read())
        except ShardscopeError as exc:
            self._report(exc)
        return self._read_by_chunk()

    def _read_by_chunk(self) -> npt.NDArray[Any]:
        out = np.zeros(self.shape, dtype=self.dtype)
        for box in self._chunk_boxes():
            try:
                out[box] = np.asarray(self._inner[box].read())
            except ShardscopeError as exc:
                self._report(exc)
        return out

    def _chunk_boxes(self) -> list[tuple[slice, ...]]:
        """The view cut along the stored chunk grid (each box lies in one chunk)."""
        shape = self.shape
        chunk: tuple[Any, ...] = (None,) * len(shape)
        origin: tuple[Any, ...] = (0,) * len(shape)
        try:
            layout = self._inner.store.chunk_layout
            chunk = tuple(layout.read_chunk.shape or chunk)
            origin = tuple(layout.grid_origin or origin)
        except (AttributeError, ValueError):  # no chunk layout: cut into 64-voxel cubes
            chunk = (64,) * len(shape)
        edges = []
        for n, c, o in zip(shape, chunk, origin, strict=True):
            c = int(c) if c else n
            first = int(o or 0) % c if c else 0
            cuts = sorted({0, n} | {x for x in range(first, n, c) if 0 < x < n})
            edges.append([slice(a, b) for a, b in pairwise(cuts) if b > a])
        return [tuple(box) for box in product(*edges)]

    def _report(self, exc: ShardscopeError) -> None:
        text = f"{exc} (drawn as background)"
        if self._reported.first_time(text):
            warnings.warn(text, DamagedChunkWarning, stacklevel=3)


def shown(arrays: list[Any]) -> list[ShownArray]:
    """Each array of a pyramid wrapped for display (one report record per array)."""
    return [ShownArray(a) for a in arrays]
