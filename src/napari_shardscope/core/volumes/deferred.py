"""A scale level's TensorStore, opened on first use: what a pyramid costs before anything is shown.

Why: opening a volume used to open every scale through TensorStore at once. A viewer's first frame
needs one level (napari picks it from the zoom), a script usually reads one, and a remote pyramid
of eight scales paid eight driver opens (each a metadata request and a cache entry) before the
first voxel. Everything napari asks of a level before reading it — shape, dtype, ndim — is known
from the metadata the format already parsed (:class:`~..formats.volume_spec.LevelSpec`), so a
level can answer it without opening; only reads (and the chunk layout, asked for when napari
slices that level) open the store.

Contract:

* the store is opened at most once, by whichever thread first needs it (the GUI thread, napari's
  slicing thread, a prefetch worker); the others wait for that open and share the result;
* a failed open raises the typed error (:mod:`~napari_shardscope.core.errors`) to the reader that
  asked, and is not remembered: the next read tries again (a remote store that was briefly
  unreachable recovers without reopening the volume);
* broken *metadata* is still an error at :func:`~.opening.open_volume` time: the format's parse
  runs there, before any level exists.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np


class DeferredStore:
    """A zero-origin TensorStore view that ``opener`` makes on the first :meth:`get`, once.

    Parameters
    ----------
    opener
        Opens the store and returns the zero-origin view with the metadata's ``shape`` and
        ``dtype`` (raising a :class:`~napari_shardscope.core.errors.ShardscopeError` when it cannot).
    shape, dtype
        What the metadata says the view is (presented order), answered without opening.
    where
        The level's URL, for messages about an array not opened yet.
    """

    __slots__ = ("_lock", "_opener", "_store", "dtype", "opens", "shape", "where")

    def __init__(self, opener: Callable[[], Any], *, shape: tuple[int, ...], dtype: np.dtype[Any] | str,
                 where: str) -> None:
        self._opener = opener
        self._store: Any = None
        self._lock = threading.Lock()
        self.shape = tuple(int(n) for n in shape)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        self.where = where
        self.opens = 0  # successful opens (at most one; for tests)

    @property
    def is_open(self) -> bool:
        """Whether the store has been opened (nothing is opened by asking)."""
        return self._store is not None

    def get(self) -> Any:
        """The opened store; opens it on the first call (thread-safe, once).

        Raises
        ------
        ShardscopeError
            The typed error of the failed open (``FormatError``, ``NotFoundError``, ``StoreError``...).
        """
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is None:
                self._store = self._opener()
                self.opens += 1
            return self._store

    def __repr__(self) -> str:
        state = "open" if self.is_open else "not opened"
        return f"DeferredStore({self.where!r}, shape={self.shape}, dtype={self.dtype}, {state})"
