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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import (
    TYPE_NAME,
    AnnotationInstance,
    AnnotationVersion,
    Connections,
    open_annotation_instance,
)
from napari_shardscope.core.annotation.instance import annotation_config
from napari_shardscope.core.labelmap.edit_words import plural
from napari_shardscope.core.labelmap.errors import UnknownLabelError

if TYPE_CHECKING:
    from napari_shardscope.core.labelmap import Labelmap, LabelmapVersion, Mutation
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
        return _points(inst.at(v.uuid), v, bodies)

    def reader(self, bodies: Sequence[int]) -> Callable[[], SelectionSynapses] | None:
        """What the viewer shows of ``bodies`` — their sites and each one's partners — as a call for a worker thread.

        The instance, the version and its state are taken now (on the thread that owns the session);
        the returned call only reads, through handles of its own, so it may run in any thread while the
        viewer goes on. ``None`` without a bound instance or a checked-out version.
        """
        inst, v = self.instance(), self.session.version
        if inst is None or v is None:
            return None
        at = inst.at(v.uuid)
        stamp = int(v.labelmap.state(v.uuid).stamp)
        chosen = tuple(dict.fromkeys(int(b) for b in bodies if b))

        def read() -> SelectionSynapses:
            points = _points(at, v, chosen)
            conns: dict[int, Connections] = {}
            for body in chosen:
                try:
                    conns[body] = at.connections(body)
                except UnknownLabelError:
                    continue  # merged away since the selection was read: no connections
            return SelectionSynapses(v.uuid, stamp, chosen, points, conns)

        return read

    def connections(self, body: int) -> Connections | None:
        """``body``'s partners (out and in, largest count first) at the checked-out version; ``None`` without one."""
        inst, v = self.instance(), self.session.version
        if inst is None or v is None or not body:
            return None
        return inst.at(v.uuid).connections(int(body))


@dataclass(frozen=True)
class SelectionSynapses:
    """What one read of the selected bodies gave (:meth:`SynapseSource.reader`), at version state ``stamp``."""

    version: str
    stamp: int
    bodies: tuple[int, ...]
    points: SynapsePoints
    connections: dict[int, Connections]


def _points(at: AnnotationVersion, v: LabelmapVersion, bodies: Sequence[int]) -> SynapsePoints:
    rows: list[tuple[str, tuple[int, int, int], int, int]] = []
    for body in dict.fromkeys(int(b) for b in bodies if b):
        rows.extend((s.annotation.kind, s.annotation.point, body, s.annotation.id) for s in at.synapses(body))
    rows.sort(key=lambda r: (SITE_KINDS.index(r[0]), r[3]))
    return SynapsePoints(
        v.uuid, world_of(v, [r[1] for r in rows]), tuple(r[0] for r in rows),
        np.asarray([r[2] for r in rows], dtype=np.uint64), np.asarray([r[3] for r in rows], dtype=np.uint64))


def _open_bound(repo: Repository, lm: Labelmap) -> AnnotationInstance | None:
    name = bound_instance_name(repo, lm.name)
    return None if name is None else open_annotation_instance(repo, name, labelmap=lm)


def describe_wiring(what: str, before: Mapping[int, Connections], after: Mapping[int, Connections | None]) -> str:
    """What an edit did to the wiring of the bodies it touched, in plain words.

    ``before``: the touched bodies' connections just before the edit; ``after``: just after (``None``
    for a body the edit made disappear, a merged one). ``"merge of 30 into 10 joined 14 synapses onto
    partner 77"``; ``"cleave of 2 supervoxels off 10 into 31 moved 5 synapses: 4 with partner 77 to
    31, …"``; ``"… changed no synapse connection"``.
    """
    delta: dict[tuple[int, int], int] = {}  # (body, partner) → change in synapses, both directions summed
    for sign, side in ((-1, before), (1, after)):
        for body, conns in side.items():
            if conns is None:
                continue
            for p in (*conns.outgoing, *conns.incoming):
                delta[(body, p.body)] = delta.get((body, p.body), 0) + sign * p.count
    gains = sorted(((n, b, p) for (b, p), n in delta.items() if n > 0), key=lambda t: (-t[0], t[1], t[2]))
    if not gains:
        return f"{what} changed no synapse connection"
    moved = sum(n for n, _, _ in gains)
    bodies = {b for _, b, _ in gains}
    partners = {p for _, _, p in gains}
    gone = [b for b, conns in after.items() if conns is None]
    if gone and len(bodies) == 1:  # a merge: what the merged bodies had now belongs to the target
        if len(partners) == 1:
            return f"{what} joined {plural(moved, 'synapse')} onto partner {gains[0][2]}"
        most, _, partner = gains[0]
        return (f"{what} joined {plural(moved, 'synapse')} onto {len(partners)} partners "
                f"(most: {most} with partner {partner})")
    top = "; ".join(f"{n} with partner {p} to {b}" for n, b, p in gains[:3])
    more = f"; {len(gains) - 3} more" if len(gains) > 3 else ""
    return f"{what} moved {plural(moved, 'synapse')}: {top}{more}"


@dataclass(frozen=True)
class WiringSnapshot:
    """Connections of some bodies read at one state of a version (``stamp``: its last mutation id)."""

    version: str
    stamp: int
    connections: dict[int, Connections]


class WiringWatch:
    """Remembers the selected bodies' connections, so that an edit can be told in wiring words.

    An edit only happens to bodies that were selected (merge, cleave, split) or that the previous edit
    touched (undo, redo): their connections are read at each state of the version (a few ms each: the
    aggregates), and after the edit the touched bodies' connections are compared with those of the
    latest state before it (:func:`describe_wiring`). The news of an edit may arrive after the
    selection already changed (it is queued to the GUI thread), so the last few states are kept.
    """

    #: States of the version whose snapshots are kept.
    KEEP = 4

    def __init__(self, source: SynapseSource) -> None:
        self.source = source
        self.snapshots: dict[tuple[str, int], WiringSnapshot] = {}
        #: The last edit's wiring change in words ("" when none is known).
        self.last = ""

    @staticmethod
    def _stamp(v: LabelmapVersion) -> int:
        return int(v.labelmap.state(v.uuid).stamp)

    def remember(self, bodies: Sequence[int]) -> None:
        """Read (or keep) the connections of ``bodies`` at the checked-out version's current state."""
        v = self.source.session.version
        if v is None or self.source.instance() is None:
            self.snapshots.clear()
            return
        key = (v.uuid, self._stamp(v))
        snap = self.snapshots.pop(key, None)
        known = dict(snap.connections) if snap is not None else {}
        for body in bodies:
            if body and body not in known:
                conns = self._read(body)
                if conns is not None:
                    known[body] = conns
        self._keep(WiringSnapshot(key[0], key[1], known))

    def keep_read(self, read: SelectionSynapses) -> None:
        """Remember connections read in a worker (:meth:`SynapseSource.reader`) at their version's state."""
        key = (read.version, read.stamp)
        snap = self.snapshots.pop(key, None)
        known = dict(snap.connections) if snap is not None else {}
        known.update(read.connections)
        self._keep(WiringSnapshot(key[0], key[1], known))

    def _keep(self, snap: WiringSnapshot) -> None:
        self.snapshots[(snap.version, snap.stamp)] = snap
        while len(self.snapshots) > self.KEEP:
            self.snapshots.pop(next(iter(self.snapshots)))

    def _read(self, body: int) -> Connections | None:
        try:
            return self.source.connections(body)
        except UnknownLabelError:
            return None  # merged away: no connections

    def edited(self, m: Mutation, what: str) -> str:
        """The wiring words of edit ``m`` (``what``: the edit in words); remembers the touched bodies after it.

        ``""`` when the bodies' connections before the edit are not known (the edit came from elsewhere).
        """
        v = self.source.session.version
        self.last = ""
        if v is None or self.source.instance() is None:
            return ""
        earlier = [s for (uuid, stamp), s in self.snapshots.items() if uuid == v.uuid and stamp < m.mutation_id]
        snap = max(earlier, key=lambda s: s.stamp) if earlier else None
        touched = [int(b) for b in m.bodies if b]
        after = {b: self._read(b) for b in touched}
        if snap is not None and all(b in snap.connections or after[b] is not None for b in touched):
            before = {b: snap.connections[b] for b in touched if b in snap.connections}
            self.last = describe_wiring(what, before, after)
        return self.last
