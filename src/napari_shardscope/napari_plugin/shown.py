"""Arrays as napari shows them: a chunk that does not read is drawn hatched and reported, never raised into napari.

napari reads a layer's data while it slices (on every z-step, pan and zoom). A chunk that no longer
decodes — exactly what the Shard browser's Validate finds and offers to go to — made that read raise
inside napari's slicing: an uncaught error dialog, and the view left half-drawn. For display, a
failed read is retried chunk by chunk on the store's own chunk grid; the rest of the view is drawn
as stored, and the chunks that fail are drawn so that nobody takes them for data:

* in an image, diagonal stripes alternating between the layer's low and high contrast limits
  (``hatch``) — drawing them as 0 made a volume none of whose chunks decode an all-black canvas that
  looked like a black volume;
* in a segmentation, 0 (background, transparent: no body is invented there).

Failures are reported per volume (all its levels and channel layers share one :class:`DamageLog`),
not per chunk: the first at once, later ones summed up at most once per :data:`REPORT_INTERVAL_S`,
each report naming the file or key and the error of the first and the latest failure. A report is a
:class:`DamagedChunkWarning` (the terminal, scripts) and goes to the log's sinks — napari's glue
(:mod:`.damage`) shows it as a napari notification and marks the layer (name and metadata).

Code that reads volumes for any other purpose (validation, exports, edits) keeps the strict
:class:`~napari_shardscope.core.volumes.lazy.LazyArray`, which raises the typed error. A scale level
opens on its first read (``core/volumes/deferred.py``); one that fails to open (its store went away, a
remote that does not answer) is drawn and reported the same way, and is opened again on the next slice,
so a refresh shows it once it is back.

No napari import here: :mod:`napari_shardscope.napari_plugin.layers` wraps the arrays it hands to napari.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise, product
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ShardscopeError

log = logging.getLogger(__name__)

#: The shortest time between two reports of one volume's failed reads (seconds); the first is immediate.
REPORT_INTERVAL_S = 30.0
#: Distinct failure messages remembered per volume (each counted once); past that, every failure counts.
MAX_REMEMBERED = 4096
#: Width in pixels of one stripe of the hatching drawn where a chunk does not read.
STRIPE = 4


class DamagedChunkWarning(UserWarning):
    """Chunks of a volume could not be read for display; they are drawn hatched (images) or empty (labels)."""


@dataclass(frozen=True)
class DamageReport:
    """What :class:`DamageLog` reports: how many distinct reads failed, and the first and latest failure.

    Attributes
    ----------
    volume, url
        The volume's display name and where it was opened from.
    failures
        Distinct failed reads so far (each names its file or key).
    new
        Failures since the previous report (all of them in the first).
    first, latest
        The error messages (file or key, byte offset, the error) of the first and the latest failure.
    drawn
        How the failed chunks are drawn (``"hatched"`` or ``"as background"``).
    """

    volume: str
    url: str
    failures: int
    new: int
    first: str
    latest: str
    drawn: str

    @property
    def is_first(self) -> bool:
        return self.failures == self.new

    @property
    def text(self) -> str:
        """One line for a notification or the terminal."""
        if self.is_first:
            many = f"{self.failures} chunk reads" if self.failures > 1 else "a chunk"
            return f"{self.volume}: {many} of this volume could not be read (drawn {self.drawn}): {self.first}"
        return (f"{self.volume}: {self.new} more chunk reads failed ({self.failures} in all, drawn {self.drawn}); "
                f"latest: {self.latest}")


Sink = Callable[[DamageReport], None]


class DamageLog:
    """The failed reads of one volume's arrays, reported once and then at most once per ``interval`` seconds.

    Shared by every view of the volume's arrays (levels, channel layers, the views napari slices), so
    a damaged volume makes one report however many chunks fail. Thread-safe: napari slices on worker
    threads. ``clock`` is for tests.
    """

    def __init__(self, volume: str = "volume", url: str = "", *, drawn: str = "as background",
                 interval: float = REPORT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.volume = volume
        self.url = url
        self.drawn = drawn
        self.interval = interval
        self.sinks: list[Sink] = []
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._failures = 0
        self._new = 0
        self._first = ""
        self._latest = ""
        self._last_report: float | None = None
        self.reports: list[DamageReport] = []

    @property
    def failures(self) -> int:
        """Distinct failed reads so far."""
        return self._failures

    def record(self, exc: ShardscopeError) -> None:
        """Count a failed read and report when one is due (the first at once, then per interval)."""
        text = str(exc)
        with self._lock:
            if text in self._seen:
                return
            if len(self._seen) < MAX_REMEMBERED:
                self._seen.add(text)
            self._failures += 1
            self._new += 1
            self._first = self._first or text
            self._latest = text
            now = self._clock()
            if self._last_report is not None and now - self._last_report < self.interval:
                return
            self._last_report = now
            report = DamageReport(self.volume, self.url, self._failures, self._new, self._first, self._latest,
                                  self.drawn)
            self._new = 0
            self.reports.append(report)
        self._emit(report)

    def _emit(self, report: DamageReport) -> None:
        warnings.warn(report.text, DamagedChunkWarning, stacklevel=4)
        for sink in list(self.sinks):
            try:
                sink(report)
            except Exception:  # a sink must never turn a drawn frame into an error inside napari
                log.exception("napari-shardscope: reporting unreadable chunks failed")


def hatch(shape: tuple[int, ...], dtype: np.dtype[Any], low: float, high: float) -> npt.NDArray[Any]:
    """Diagonal stripes alternating between ``low`` and ``high`` over the last two axes (what no data looks like)."""
    out = np.empty(shape, dtype=dtype)
    lo, hi = _in_dtype(low, dtype), _in_dtype(high, dtype)
    out[...] = lo
    if len(shape) >= 2:
        rows, cols = np.indices(shape[-2:])
        stripes = ((rows + cols) // STRIPE) % 2 == 0
        out[..., stripes] = hi
    else:
        out[(np.arange(shape[0]) // STRIPE) % 2 == 0] = hi
    return out


def _in_dtype(value: float, dtype: np.dtype[Any]) -> Any:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return dtype.type(min(max(round(value), info.min), info.max))
    if dtype.kind == "b":
        return bool(value)
    return dtype.type(value)


class ShownArray:
    """A lazy array (a ``LazyArray`` or anything with its interface) that never raises a read error into napari.

    Indexing returns another :class:`ShownArray` (napari indexes first and converts later); reading
    (``np.asarray``) reads the whole view and, when that fails with a
    :class:`~napari_shardscope.core.errors.ShardscopeError`, reads it again one stored chunk at a
    time, drawing the failed chunks hatched between ``hatch_values`` (an image) or as 0 (labels).
    """

    __slots__ = ("_damage", "_hatch", "_inner")

    def __init__(self, inner: Any, damage: DamageLog | None = None,
                 hatch_values: tuple[float, float] | None = None) -> None:
        self._inner = inner
        self._damage = damage if damage is not None else DamageLog()
        self._hatch = hatch_values  # (low, high) for an image; None: failed chunks are 0 (labels)

    @property
    def inner(self) -> Any:
        """The strict array behind this view."""
        return self._inner

    @property
    def damage(self) -> DamageLog:
        """The failed reads of the volume this array shows (shared by all its views)."""
        return self._damage

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self._inner.dtype)
        return dtype

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
            return empty if np.ndim(empty) == 0 else self._unread(np.shape(empty))
        if isinstance(out, np.generic | np.ndarray) or not hasattr(out, "shape"):
            return out
        return ShownArray(out, self._damage, self._hatch)

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        data = self.read()
        return data if dtype is None else data.astype(dtype, copy=False)

    def read(self) -> npt.NDArray[Any]:
        """The view's values; chunks that fail to read are hatched or 0 (and reported, see :class:`DamageLog`)."""
        try:
            return np.asarray(self._inner.read())
        except ShardscopeError as exc:
            self._report(exc)
        return self._read_by_chunk()

    def _unread(self, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """What a region that does not read is drawn as."""
        if self._hatch is None:
            return np.zeros(shape, dtype=self.dtype)
        return hatch(shape, self.dtype, *self._hatch)

    def _read_by_chunk(self) -> npt.NDArray[Any]:
        out = self._unread(self.shape)
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
        self._damage.record(exc)


def shown(arrays: list[Any], damage: DamageLog | None = None,
          hatch_values: tuple[float, float] | None = None) -> list[ShownArray]:
    """Each array of a pyramid wrapped for display, all reporting to one :class:`DamageLog` (the volume's)."""
    damage = damage if damage is not None else DamageLog()
    return [ShownArray(a, damage, hatch_values) for a in arrays]
