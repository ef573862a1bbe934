"""The connectome of a version against a full recount, under random labelmap and synapse edits.

Random labelmap merges, cleaves, supervoxel splits and their undo/redo, and random synapse edits
(add pre/post, bulk adds, relate, move, delete, undo/redo), with commits and branches. After every
step ``connections(body)`` of every body, ``connectivity()`` and the diff against the last
committed version must equal what a recount from scratch derives (every record read, every
point's body read from the labelmap's voxels at that version) — the synapse index is never
rebuilt, only kept by the edits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from napari_shardscope.core.annotation import (
    AnnotationInstance,
    add_many,
    adjacency,
    create_annotation_instance,
    over_base,
)
from napari_shardscope.core.annotation.connectome import (
    _connections_from,
    diff_connectivity,
    recount_connectivity,
)
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import Repository, create_repository
from tests.core.annotation.test_annotation_model import BLOCK, SHAPE, base_volume
from tests.hypothesis_depth import examples


@contextmanager
def small_chunks() -> Iterator[None]:
    """The whole-connectome streams with chunks of a few synapse keys and a fold after every chunk."""
    saved = adjacency.SCAN_CHUNK, adjacency.FOLD_ROWS, over_base.STREAM_ROWS
    adjacency.SCAN_CHUNK, adjacency.FOLD_ROWS, over_base.STREAM_ROWS = 3, 1, 1
    try:
        yield
    finally:
        adjacency.SCAN_CHUNK, adjacency.FOLD_ROWS, over_base.STREAM_ROWS = saved


points = st.tuples(st.integers(0, SHAPE[0] - 1), st.integers(0, SHAPE[1] - 1), st.integers(0, SHAPE[2] - 1))


class ConnectomeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        path, _ = base_volume()
        self.repo: Repository = create_repository(None, engine="memory")
        self.lm = create_labelmap(self.repo, "seg", path, block=BLOCK)
        self.inst: AnnotationInstance = create_annotation_instance(self.repo, "syn", labelmap=self.lm)
        self.cur = self.repo.root.uuid
        self.last_committed: str | None = None
        self.branches = 0

    @property
    def v(self) -> Any:
        return self.inst.at(self.cur)

    @property
    def lmv(self) -> Any:
        return self.lm.at(self.cur)

    def bodies(self) -> list[int]:
        return sorted(int(b) for b in np.unique(self.lmv.read_bodies()) if b)

    def ids(self, kind: str | None = None) -> list[int]:
        return [a.id for a in self.v.all() if kind is None or a.kind == kind]

    # -- synapse edits ----------------------------------------------------------------------------
    @rule(kind=st.sampled_from(("pre", "post")), point=points)
    def add(self, kind: str, point: tuple[int, int, int]) -> None:
        self.v.add(kind, point)

    @rule(pre=st.lists(points, min_size=1, max_size=3), post=st.lists(points, min_size=1, max_size=3),
          data=st.data())
    def add_many(self, pre: list[Any], post: list[Any], data: st.DataObject) -> None:
        pairs = data.draw(st.lists(st.tuples(st.integers(0, len(pre) - 1), st.integers(0, len(post) - 1)),
                                   max_size=4, unique=True))
        add_many(self.v, ["pre"] * len(pre) + ["post"] * len(post), np.asarray(pre + post),
                        synapses=[(i, len(pre) + j) for i, j in pairs])

    @precondition(lambda self: True)
    @rule(data=st.data())
    def relate(self, data: st.DataObject) -> None:
        pres, posts = self.ids("pre"), self.ids("post")
        if pres and posts:
            self.v.relate(data.draw(st.sampled_from(pres)), data.draw(st.sampled_from(posts)))

    @rule(data=st.data())
    def unrelate(self, data: st.DataObject) -> None:
        linked = [(a.id, r.to) for a in self.v.all() for r in a.relationships if r.rel == "PreSynTo"]
        if linked:
            self.v.unrelate(*data.draw(st.sampled_from(linked)))

    @rule(data=st.data(), point=points)
    def move(self, data: st.DataObject, point: tuple[int, int, int]) -> None:
        ids = self.ids()
        if ids:
            self.v.move(data.draw(st.sampled_from(ids)), point)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        ids = self.ids()
        if ids:
            self.v.delete(data.draw(st.sampled_from(ids)))

    @rule()
    def undo_annotation(self) -> None:
        if self.v.can_undo:
            self.v.undo()

    @rule()
    def redo_annotation(self) -> None:
        if self.v.can_redo:
            self.v.redo()

    # -- labelmap edits ---------------------------------------------------------------------------
    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        bodies = self.bodies()
        if len(bodies) >= 2:
            target = data.draw(st.sampled_from(bodies))
            others = data.draw(st.lists(st.sampled_from([b for b in bodies if b != target]), min_size=1,
                                        max_size=2, unique=True))
            self.lmv.merge(target, others)

    @rule(data=st.data())
    def cleave(self, data: st.DataObject) -> None:
        lmv = self.lmv
        big = [b for b in self.bodies() if len(lmv.supervoxels(b)) >= 2]
        if big:
            body = data.draw(st.sampled_from(big))
            members = lmv.supervoxels(body)
            svs = data.draw(st.lists(st.sampled_from(members), min_size=1, max_size=len(members) - 1, unique=True))
            lmv.cleave(body, svs)

    @rule(data=st.data())
    def split_supervoxel(self, data: st.DataObject) -> None:
        sv_vol = self.lmv.read_supervoxels()
        svs, counts = np.unique(sv_vol[sv_vol != 0], return_counts=True)
        choices = [int(s) for s, n in zip(svs, counts, strict=True) if n >= 2]
        if not choices:
            return
        sv = data.draw(st.sampled_from(choices))
        where = np.argwhere(sv_vol == sv)
        axis = data.draw(st.integers(0, 2))
        values = np.unique(where[:, axis])
        if values.size < 2:
            axis = int(np.argmax(where.max(0) - where.min(0)))
            values = np.unique(where[:, axis])
        cut = values[data.draw(st.integers(1, values.size - 1))]
        self.lmv.split_supervoxel(sv, where[where[:, axis] < cut])

    @rule()
    def undo_labelmap(self) -> None:
        if self.lmv.can_undo:
            self.lmv.undo()

    @rule()
    def redo_labelmap(self) -> None:
        if self.lmv.can_redo:
            self.lmv.redo()

    # -- versions -------------------------------------------------------------------------------
    @rule(branch=st.booleans())
    def commit_and_continue(self, branch: bool) -> None:
        self.repo.commit(self.cur, "proofread")
        self.last_committed = self.cur
        name = None
        if branch:
            self.branches += 1
            name = f"trial-{self.branches}"
        self.cur = self.repo.new_version(self.cur, name).uuid

    # -- the check ------------------------------------------------------------------------------
    @invariant()
    def connectome_equals_recount(self) -> None:
        v = self.v
        truth = recount_connectivity(v).as_dict()
        assert v.connectivity().as_dict() == truth
        for body in self.bodies():
            assert v.connections(body) == _connections_from(truth, body), body
        with small_chunks():  # the whole table streamed in chunks of a few synapses: the same table
            assert v.connectivity().as_dict() == truth
        bodies = self.bodies()
        rng = np.random.default_rng(len(truth) * 7919 + len(bodies))
        subsets = [sorted({a for a, _ in truth})[:2], bodies]
        subsets += [sorted(rng.choice(bodies, size=k, replace=False).tolist()) for k in (1, 3, len(bodies) // 2)
                    if 0 < k <= len(bodies)]
        for some in subsets:
            for within in (False, True):
                want = {k: n for k, n in truth.items()
                        if (k[0] in some and k[1] in some if within else k[0] in some or k[1] in some)}
                got = v.connectivity(some, within=within)
                assert got.as_dict() == want, (some, within)
                assert [(-int(n), int(a), int(b)) for a, b, n in zip(got.pre, got.post, got.count, strict=True)] \
                    == sorted((-n, a, b) for (a, b), n in want.items())  # sorted by count, then pre, post
        if self.last_committed is not None:
            old = self.inst.at(self.last_committed)
            before = recount_connectivity(old).as_dict()
            full = {k: (before.get(k, 0), truth.get(k, 0)) for k in set(before) | set(truth)
                    if before.get(k, 0) != truth.get(k, 0)}
            got = diff_connectivity(old, v)
            assert {(c.pre, c.post): (c.before, c.after) for c in got.changes} == full


# Examples bounded for the default run (tests/hypothesis_depth.py): each step's invariant recounts the whole
# connectome and queries it a dozen ways, so the cost is examples x steps; the default run keeps every step of a long
# sequence (25 examples before, 8 now) and ``--hypothesis-profile long`` searches twenty times as many.
ConnectomeMachine.TestCase.settings = settings(max_examples=examples(8), stateful_step_count=25, deadline=None,
                                               suppress_health_check=[HealthCheck.too_slow])
TestConnectomeModel = ConnectomeMachine.TestCase


def test_synapses_added_after_a_split_count_once_the_split_is_undone() -> None:
    """Found by the model (CI, seed of 2026-12-05): a synapse added on a split's new supervoxels is
    filed under them; undoing the split retires them, and the body's connections lost the synapse
    while ``connectivity()`` (a whole recount) still had it."""
    m = ConnectomeMachine()
    sv_vol = m.lmv.read_supervoxels()
    svs, counts = np.unique(sv_vol[sv_vol != 0], return_counts=True)
    sv = int(svs[np.argmax(counts)])
    where = np.argwhere(sv_vol == sv)
    axis = int(np.argmax(where.max(0) - where.min(0)))
    cut = np.unique(where[:, axis])[1]
    m.lmv.split_supervoxel(sv, where[where[:, axis] < cut])
    inside = tuple(int(x) for x in where[0])
    other = next(tuple(int(x) for x in p) for p in np.argwhere(sv_vol != 0) if sv_vol[tuple(p)] != sv)
    add_many(m.v, ["pre", "post"], np.asarray([inside, other]), synapses=[(0, 1)])
    m.connectome_equals_recount()
    m.lmv.undo()
    body = int(m.lmv.read_bodies()[inside])
    assert body != int(m.lmv.read_bodies()[other])
    assert m.v.connections(body).outgoing, "the synapse on the undone split's supervoxel was lost"
    assert [tuple(s.annotation.point) for s in m.v.synapses(body) if s.annotation.kind == "pre"] == [inside]
    m.connectome_equals_recount()
