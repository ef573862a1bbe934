"""The synapses and partners of the selected bodies at the checked-out version (no Qt).

A repository may hold an annotation instance bound to the proofread labelmap
(:mod:`napari_shardscope.core.annotation`); which body owns a synapse is read through the labelmap
at the version, so after a merge, cleave, split or undo the same query answers for the new bodies
with no annotation rewritten. This module is what the viewer asks: the synapse sites of the selected
bodies as world positions (pre and post apart, for a Points layer), and a body's partners sorted by
synapse count (for the partner list). It opens the instance through the session's own labelmap
handle, so the answers follow the edits the controller makes (they share the live body map).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import (
    TYPE_NAME,
    AnnotationInstance,
    Connections,
    open_annotation_instance,
)
from napari_shardscope.core.annotation.instance import annotation_config

if TYPE_CHECKING:
    from napari_shardscope.core.labelmap import Labelmap, LabelmapVersion
    from napari_shardscope.core.proofreading.session import ProofreadingSession
    from napari_shardscope.core.versioned import Repository

#: The kinds of synapse site, in the order :class:`SynapsePoints` lists them.
SITE_KINDS = ("pre", "post")


@dataclass(frozen=True)
class SynapsePoints:
    """The synapse sites of some bodies at one version: one row per site, pre sites first.

    ``world`` (n, 3) are z, y, x positions in the volume's world units (the voxel centre of each
    annotation's point on the labelmap's scale 0); ``kinds`` ``"pre"``/``"post"``, ``bodies`` the
    selected body owning each site, ``ids`` the annotation ids.
    """

    version: str
    world: npt.NDArray[np.float64]
    kinds: tuple[str, ...]
    bodies: npt.NDArray[np.uint64]
    ids: npt.NDArray[np.uint64]

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def pre_count(self) -> int:
        return sum(1 for k in self.kinds if k == "pre")

    @property
    def post_count(self) -> int:
        return sum(1 for k in self.kinds if k == "post")


def bound_instance_name(repo: Repository, labelmap: str) -> str | None:
    """The first (by name) annotation instance of ``repo`` bound to ``labelmap``; ``None`` when there is none."""
    names = []
    for inst in repo.instances():
        if inst.type != TYPE_NAME:
            continue
        if annotation_config(inst).get("labelmap") == labelmap:
            names.append(inst.name)
    return min(names) if names else None


def world_of(v: LabelmapVersion, points: Any) -> npt.NDArray[np.float64]:
    """Scale-0 voxel points (n, 3) of ``v`` → world positions (voxel centres, as the body layer places them)."""
    g = v.scales[0]
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    world: npt.NDArray[np.float64] = np.asarray(g.translate, dtype=np.float64) + pts * np.asarray(
        g.voxel_size, dtype=np.float64)
    return world


class SynapseSource:
    """The annotation instance of a proofreading session's labelmap, opened once per repository and labelmap."""

    def __init__(self, session: ProofreadingSession) -> None:
        self.session = session
        self._key: tuple[int, int] | None = None
        self._instance: AnnotationInstance | None = None

    def instance(self) -> AnnotationInstance | None:
        """The bound annotation instance of the connected repository (``None``: none, or not connected)."""
        repo, lm = self.session.repo, self.session.labelmap
        if repo is None or lm is None:
            self._key, self._instance = None, None
            return None
        key = (id(repo), id(lm))
        if key != self._key or self._instance is None:  # none yet: one may have been made since (a notebook)
            self._instance = _open_bound(repo, lm)
            self._key = key
        return self._instance

    def points(self, bodies: Sequence[int]) -> SynapsePoints | None:
        """The pre and post sites of ``bodies`` at the checked-out version; ``None`` without an instance."""
        inst, v = self.instance(), self.session.version
        if inst is None or v is None:
            return None
        at = inst.at(v.uuid)
        rows: list[tuple[str, tuple[int, int, int], int, int]] = []
        for body in dict.fromkeys(int(b) for b in bodies if b):
            rows.extend((s.annotation.kind, s.annotation.point, body, s.annotation.id) for s in at.synapses(body))
        rows.sort(key=lambda r: (SITE_KINDS.index(r[0]), r[3]))
        return SynapsePoints(
            v.uuid, world_of(v, [r[1] for r in rows]), tuple(r[0] for r in rows),
            np.asarray([r[2] for r in rows], dtype=np.uint64), np.asarray([r[3] for r in rows], dtype=np.uint64))

    def connections(self, body: int) -> Connections | None:
        """``body``'s partners (out and in, largest count first) at the checked-out version; ``None`` without one."""
        inst, v = self.instance(), self.session.version
        if inst is None or v is None or not body:
            return None
        return inst.at(v.uuid).connections(int(body))


def _open_bound(repo: Repository, lm: Labelmap) -> AnnotationInstance | None:
    name = bound_instance_name(repo, lm.name)
    return None if name is None else open_annotation_instance(repo, name, labelmap=lm)
