"""What the canvas shows of the selection: lazy overlay arrays, and the text under the cursor.

A merge or a cleave must be done seeing what it touches. The viewer draws two overlays over the
body layer, both lazy views of the checked-out version's supervoxel volume with a value transform
(like the body layer itself, so only visible tiles are mapped and a selection change is a
re-slice of cached chunks, never a new read):

* :func:`selection_arrays`: :data:`FIRST` where the first selected body is (the one merged into,
  cleaved, split), :data:`OTHER` on the other selected bodies, :data:`PICKED` on the supervoxels
  picked for a cleave, 0 elsewhere — a few small values, so a direct colormap tints them;
* :func:`supervoxel_arrays`: the supervoxel ids inside the selected bodies, 0 elsewhere — drawn
  as contours, they are the supervoxel boundaries within the selection.

Both read the selection from a :class:`ShownSelection`, swapped whole (napari slices on its own
thread). :func:`describe_voxel` is the hover text: body and supervoxel ids, the body's size and
its last edit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap import LabelmapVersion
from napari_shardscope.core.volumes.lazy import LazyArray

#: Overlay values (uint8) of :func:`selection_arrays`.
FIRST, OTHER, PICKED = 1, 2, 3


class ShownSelection:
    """The selection as the overlays draw it: first body, other bodies, picked supervoxels (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())

    @property
    def value(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(selected bodies, first first; picked supervoxels)."""
        with self._lock:
            return self._value

    def update(self, selected: tuple[int, ...], picked: tuple[int, ...]) -> bool:
        """Set what is drawn; True when it changed (the overlays need a refresh)."""
        new = (tuple(int(b) for b in selected), tuple(int(s) for s in picked))
        with self._lock:
            if new == self._value:
                return False
            self._value = new
            return True

    def paint(self, version: LabelmapVersion, svs: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        """Overlay values of a block of supervoxel ids (see the module's description)."""
        selected, picked = self.value
        out = np.zeros(svs.shape, dtype=np.uint8)
        if not selected and not picked:
            return out
        bodies = version.bodies_of(svs)
        if selected:
            out[np.isin(bodies, np.asarray(selected[1:], dtype=np.uint64))] = OTHER
            out[bodies == np.uint64(selected[0])] = FIRST
        if picked:
            out[np.isin(svs, np.asarray(picked, dtype=np.uint64))] = PICKED
        return out

    def supervoxels_inside(self, version: LabelmapVersion, svs: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
        """The supervoxel ids of the selected bodies, 0 elsewhere."""
        selected, _ = self.value
        if not selected:
            return np.zeros(svs.shape, dtype=np.uint64)
        keep = np.isin(version.bodies_of(svs), np.asarray(selected, dtype=np.uint64))
        return np.where(keep, svs, 0).astype(np.uint64, copy=False)


def selection_arrays(version: LabelmapVersion, shown: ShownSelection) -> list[LazyArray]:
    """Per scale, finest first: the selection overlay values (uint8) over ``version``'s supervoxels."""

    def paint(data: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return shown.paint(version, data)

    return [LazyArray(a.store, transform=paint, dtype=np.uint8) for a in version.supervoxel_arrays()]


def supervoxel_arrays(version: LabelmapVersion, shown: ShownSelection) -> list[LazyArray]:
    """Per scale, finest first: the supervoxel ids inside the selected bodies (uint64), 0 elsewhere."""

    def inside(data: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return shown.supervoxels_inside(version, data)

    return [LazyArray(a.store, transform=inside, dtype=np.uint64) for a in version.supervoxel_arrays()]


@dataclass(frozen=True)
class HoverInfo:
    """What is under the cursor: the voxel, its body and supervoxel, the body's size and last edit."""

    voxel: tuple[int, int, int]
    body: int
    supervoxel: int
    size: int
    last_edit: str

    def text(self) -> str:
        """"body 12 · supervoxel 345 · 12,345 voxels · last edit: merge by ann at 14:02:11"."""
        if self.body == 0:
            return "background"
        sv = f" · supervoxel {self.supervoxel}" if self.supervoxel else ""
        return f"body {self.body}{sv} · {self.size:,} voxels · last edit: {self.last_edit}"

    def features(self) -> dict[str, Any]:
        """One row of napari layer features (the status bar shows them after the label)."""
        row: dict[str, Any] = {"index": [self.body]}
        if self.supervoxel:
            row["supervoxel"] = [self.supervoxel]
        row.update({"size": [f"{self.size:,} voxels"], "last edit": [self.last_edit]})
        return row


class HoverCache:
    """Body sizes and last edits for the hover text, kept per (version, revision, body).

    A size walks the body's supervoxels in the label index and the last edit the mutation log:
    cheap once, too dear on every mouse move.
    """

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._known: dict[tuple[str, int, int], tuple[int, str]] = {}

    def describe(self, version: LabelmapVersion, voxel: tuple[int, int, int], revision: int = 0) -> HoverInfo:
        """The :class:`HoverInfo` of scale-0 voxel ``voxel`` (z, y, x) at ``version``."""
        sv = version.supervoxel_at(voxel)
        body = version.body_of(sv) if sv else 0
        return self.describe_body(version, body, revision, voxel=voxel, supervoxel=sv)

    def describe_body(self, version: LabelmapVersion, body: int, revision: int = 0, *,
                      voxel: tuple[int, int, int] = (-1, -1, -1), supervoxel: int = 0) -> HoverInfo:
        """The :class:`HoverInfo` of a body picked without a voxel (a 3-D view names the body only)."""
        if body == 0 or not version.exists(body):
            return HoverInfo(voxel, 0, 0, 0, "")
        key = (version.uuid, revision, body)
        known = self._known.get(key)
        if known is None:
            history = version.history(body)
            if history:
                m = history[-1].mutation
                when = datetime.fromtimestamp(m.time).strftime("%Y-%m-%d %H:%M")
                last = f"{m.operation} by {m.user or 'someone'} at {when}"
            else:
                last = "none (as in the base segmentation)"
            known = (version.size(body), last)
            if len(self._known) >= self._limit:
                self._known.clear()
            self._known[key] = known
        return HoverInfo(voxel, body, supervoxel, known[0], known[1])


def describe_voxel(version: LabelmapVersion, voxel: tuple[int, int, int]) -> HoverInfo:
    """Body, supervoxel, size and last edit at a scale-0 voxel (no cache; see :class:`HoverCache`)."""
    return HoverCache().describe(version, voxel)
