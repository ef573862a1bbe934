"""The split being drafted: seeds painted on a body, then the seeded split as a job.

A split is prepared over several user actions (start, paint seed groups 1, 2, …, split or cancel),
so its draft — the body, the version it was seeded on, the region painted in and the seeds — is
state of the controller between them (:class:`~napari_shardscope.core.proofreading.state.PendingSplit`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import BodySplit, Box
from napari_shardscope.core.proofreading.controller_base import ControllerBase
from napari_shardscope.core.proofreading.jobs import Job
from napari_shardscope.core.proofreading.session import JobProgress
from napari_shardscope.core.proofreading.state import PendingSplit
from napari_shardscope.core.proofreading.wording import id_list

#: A split region larger than this many voxels covers only one z plane of the body (painting a
#: seeds layer of a whole large body would not fit in memory).
MAX_SEED_VOXELS = 1 << 26


class SplitDrafting(ControllerBase):
    """Start, seed, run and cancel the split of the first selected body."""

    def start_split(self, plane: int | None = None) -> PendingSplit:
        """Start seeding a split of the first selected body (returns the split already started, if any).

        The region to paint in is the body's block bounds; for a body larger than
        :data:`MAX_SEED_VOXELS` only z plane ``plane`` of them (default: the first).
        """
        with self._action():
            v = self._require("start_split")
            if self._pending is not None:
                return self._pending
            body = self._selected[0]
            box = v.bbox(body, exact=False).intersect(Box.of_shape(v.scales[0].shape))
            lo, hi = list(box.lo), list(box.hi)
            if int(np.prod(np.subtract(hi, lo))) > MAX_SEED_VOXELS:
                z = lo[0] if plane is None else min(max(int(plane), lo[0]), hi[0] - 1)
                lo[0], hi[0] = z, z + 1
            self._pending = PendingSplit(body, v.uuid, Box((lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])))
            self._set_status(f"paint seed 1 on one part of body {body} and 2 (3, …) on the others, then Split",
                             "info")
            return self._pending

    def _inside(self, pending: PendingSplit, voxels: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The voxels of ``voxels`` that belong to the body being split (a brush spills over its edge)."""
        if len(voxels) == 0:
            return voxels
        v = self.session.version
        assert v is not None
        shape = np.asarray(v.scales[0].shape)
        voxels = voxels[np.all((voxels >= 0) & (voxels < shape), axis=1)]
        if len(voxels) == 0:
            return voxels
        lo, hi = voxels.min(axis=0), voxels.max(axis=0) + 1
        inside = v.mask(pending.body, Box((int(lo[0]), int(lo[1]), int(lo[2])), (int(hi[0]), int(hi[1]), int(hi[2]))))
        rel = voxels - lo
        kept: npt.NDArray[np.int64] = voxels[inside[rel[:, 0], rel[:, 1], rel[:, 2]]]
        return kept

    def add_seeds(self, label: int, voxels: npt.ArrayLike) -> PendingSplit:
        """Add scale-0 voxels (n, 3; z y x) to seed group ``label``; voxels outside the body are left out."""
        with self._action():
            pending = self._pending_here()
            if int(label) <= 0:
                raise ArgumentError(f"seed labels are positive integers, got {label}")
            pts = np.asarray(voxels, dtype=np.int64).reshape(-1, 3)
            seeds = dict(pending.seeds)
            old = seeds.get(int(label), np.empty((0, 3), dtype=np.int64))
            seeds[int(label)] = np.unique(np.concatenate([old, self._inside(pending, pts)]), axis=0)
            self._pending = replace(pending, seeds=seeds)
            self._touch()
            return self._pending

    def set_painted_seeds(self, painted: npt.ArrayLike) -> PendingSplit:
        """Replace the seeds with a painted array covering the split's box (0: no seed; 1, 2, …: groups).

        Voxels painted on other bodies are left out: they are not seeds of this split.
        """
        with self._action():
            pending = self._pending_here()
            data = np.asarray(painted)
            if data.shape != pending.box.shape:
                raise ArgumentError(f"painted seeds of shape {data.shape} do not cover the split's region "
                                    f"{pending.box.shape}")
            inside = self.session.require()[2].mask(pending.body, pending.box)
            origin = np.asarray(pending.box.lo, dtype=np.int64)
            seeds = {int(g): np.argwhere((data == g) & inside).astype(np.int64) + origin
                     for g in np.unique(data[inside]) if g != 0}
            self._pending = replace(pending, seeds=seeds)
            self._touch()
            return self._pending

    def _pending_here(self) -> PendingSplit:
        pending = self._pending
        if pending is None:
            raise ArgumentError("start a split first")
        v = self.session.version
        if v is None or pending.version != v.uuid:
            raise ArgumentError("these seeds were painted on another version: start the split again")
        return pending

    def split_job(self) -> Job[BodySplit]:
        """Split the body by the seeds, as a job (``run`` is the seeded split; ``finish`` selects the parts)."""
        with self._action():
            v = self._require("split")
            pending = self._pending_here()
            groups = {g: pts for g, pts in pending.seeds.items() if len(pts)}
            if len(groups) < 2:
                raise ArgumentError("paint at least two seed labels (1 and 2) before splitting")
            body = pending.body

            def work(_progress: JobProgress | None) -> BodySplit:
                return v.split_body(body, groups)

            def done(out: BodySplit) -> str:
                parts = sorted(set(out.bodies.values()))
                if self._pending is not None and self._pending.version == v.uuid:
                    self._pending = None
                shown = self.session.version
                if shown is None or shown.uuid != v.uuid:
                    # another version was checked out while the split ran: its selection stays, since
                    # the parts exist only at the split's version
                    ver = v.version
                    return f"split body {body} into {id_list(parts)} at {ver.short} on {ver.branch} (not checked out)"
                self._selected, self._picked = parts, []
                return f"split body {body} into {id_list(parts)}"

            job = self._begin_job("split", f"split of body {body}", work, done)
            self._set_status(f"splitting body {body} …", "info")
            return job

    def split(self) -> BodySplit:
        """Split the body by the seeds in the calling thread."""
        return self.split_job().run_here()

    def cancel_split(self) -> None:
        with self._action():
            if self._pending is not None:
                self._pending = None
                self._set_status("split cancelled", "info")
