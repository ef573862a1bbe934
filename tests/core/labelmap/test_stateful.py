"""The labelmap against a plain numpy model, driven by hypothesis: merges, cleaves, splits, undo/redo,
commits, branches and restarts on a small precomputed volume written by TensorStore.

The model is the obvious one: per version a scale-0 array voxel → supervoxel and a dict supervoxel →
body. Coarser scales are expected to be TensorStore's mode downsampling of the model's scale 0
(computed in the test, independently of the labelmap), at every version. Committed versions are
re-read after edits elsewhere and must not have changed.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from napari_shardscope.core.labelmap import (
    Labelmap,
    MappingError,
    NothingToUndoError,
    SplitError,
    UnknownLabelError,
    create_labelmap,
    open_labelmap,
)
from napari_shardscope.core.versioned import CommittedVersionError, Repository, create_repository
from tests.core.labelmap.volumes import mode_downsample, voronoi_supervoxels, write_precomputed
from tests.hypothesis_depth import examples

SHAPE = (11, 21, 23)
FACTORS = ((1, 1, 1), (1, 2, 2), (2, 4, 4))
BLOCK = (4, 8, 8)
U64 = np.ndarray


@functools.cache
def base_volume() -> tuple[Path, np.ndarray, dict[int, int]]:
    """The base: written once per test session (supervoxels, and an agglomeration of some pairs)."""
    root = Path(tempfile.mkdtemp(prefix="labelmap-stateful-"))
    svs = voronoi_supervoxels(SHAPE, 14, seed=3)
    write_precomputed(root / "seg", svs, FACTORS)
    ids = sorted(int(v) for v in np.unique(svs))
    agglomeration = {ids[i]: ids[i - 1] for i in range(1, len(ids), 3)}  # every third joins its neighbour
    return root / "seg", svs, agglomeration


@dataclass
class ModelVersion:
    """What a version should contain."""

    sv: np.ndarray
    body: dict[int, int]
    committed: bool = False
    undo: list[tuple[np.ndarray, dict[int, int]]] = field(default_factory=list)
    redo: list[tuple[np.ndarray, dict[int, int]]] = field(default_factory=list)

    def bodies(self) -> list[int]:
        return sorted(set(self.body.values()))

    def members(self, body: int) -> list[int]:
        return sorted(sv for sv, b in self.body.items() if b == body)

    def size(self, body: int) -> int:
        return int(np.isin(self.sv, self.members(body)).sum())

    def push(self) -> None:
        self.undo.append((self.sv.copy(), dict(self.body)))
        self.redo.clear()


def expected_bodies(sv: np.ndarray, body: dict[int, int]) -> np.ndarray:
    uniq, inverse = np.unique(sv, return_inverse=True)
    mapped = np.array([body.get(int(u), int(u)) if u else 0 for u in uniq], dtype=np.uint64)
    return mapped[inverse.reshape(-1)].reshape(sv.shape)


class LabelmapMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        path, svs, agglomeration = base_volume()
        self.repo: Repository = create_repository(None, engine="memory")
        self.lm: Labelmap = create_labelmap(self.repo, "seg", path, agglomeration=agglomeration, block=BLOCK)
        #: Another process's handle, kept warm across every edit: it catches up from the log (:mod:`.catch_up`).
        self.watcher: Labelmap = open_labelmap(self.repo, "seg")
        body = {int(s): agglomeration.get(int(s), int(s)) for s in np.unique(svs)}
        self.versions: dict[str, ModelVersion] = {self.repo.root.uuid: ModelVersion(svs.copy(), body)}
        self.current = self.repo.root.uuid
        self.ids_seen: set[int] = set(body) | set(body.values())
        self.branches = 0

    # -- helpers --------------------------------------------------------------------------------
    @property
    def model(self) -> ModelVersion:
        return self.versions[self.current]

    def new_id(self, value: int) -> int:
        assert value not in self.ids_seen, f"id {value} handed out twice"
        assert value >= self.lm.config.id_start
        self.ids_seen.add(value)
        return value

    def check_version(self, uuid: str) -> None:
        m = self.versions[uuid]
        v = self.lm.at(uuid)
        for scale, f in enumerate(FACTORS):
            want_sv = mode_downsample(m.sv, f)
            got_sv = np.asarray(v.supervoxel_arrays()[scale])
            assert got_sv.dtype == np.uint64
            np.testing.assert_array_equal(got_sv, want_sv, err_msg=f"supervoxels, scale {scale}")
            np.testing.assert_array_equal(np.asarray(v.body_arrays()[scale]), expected_bodies(want_sv, m.body),
                                          err_msg=f"bodies, scale {scale}")

    # -- edits ----------------------------------------------------------------------------------
    @rule(data=st.data())
    @precondition(lambda self: len(self.model.bodies()) >= 2)
    def merge(self, data: st.DataObject) -> None:
        m = self.model
        bodies = m.bodies()
        target = data.draw(st.sampled_from(bodies))
        others = data.draw(st.lists(st.sampled_from([b for b in bodies if b != target]), min_size=1, max_size=3,
                                    unique=True))
        rec = self.lm.at(self.current).merge(target, others, user="tester")
        assert rec.operation == "merge" and rec.user == "tester" and set(rec.bodies) == {target, *others}
        m.push()
        m.body = {sv: (target if b in others else b) for sv, b in m.body.items()}

    @rule(data=st.data())
    @precondition(lambda self: any(len(self.model.members(b)) >= 2 for b in self.model.bodies()))
    def cleave(self, data: st.DataObject) -> None:
        m = self.model
        body = data.draw(st.sampled_from([b for b in m.bodies() if len(m.members(b)) >= 2]))
        members = m.members(body)
        svs = data.draw(st.lists(st.sampled_from(members), min_size=1, max_size=len(members) - 1, unique=True))
        new = self.new_id(self.lm.at(self.current).cleave(body, svs))
        m.push()
        for sv in svs:
            m.body[sv] = new

    @rule(data=st.data())
    def split_supervoxel(self, data: st.DataObject) -> None:
        m = self.model
        counts = {sv: int((m.sv == sv).sum()) for sv in m.body}
        sv = data.draw(st.sampled_from(sorted(s for s, n in counts.items() if n >= 2)))
        where = np.argwhere(m.sv == sv)
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        if data.draw(st.booleans()):  # a plane cut, like a painted boundary
            axis = int(rng.integers(3))
            values = np.unique(where[:, axis])
            if values.size < 2:
                axis = int(np.argmax(where.max(0) - where.min(0)))
                values = np.unique(where[:, axis])
            pick = where[:, axis] < values[int(rng.integers(1, values.size))]
        else:
            pick = rng.random(len(where)) < 0.3
            pick[int(rng.integers(len(where)))] = True
        if pick.all():
            pick[0] = False
        if not pick.any():
            pick[-1] = True
        chosen = where[pick]
        a, b = self.lm.at(self.current).split_supervoxel(sv, chosen)
        self.new_id(a), self.new_id(b)
        m.push()
        new = np.where(m.sv == sv, np.uint64(b), m.sv)
        new[tuple(chosen.T)] = a
        m.sv = new
        body = m.body.pop(sv)
        m.body[a] = m.body[b] = body

    @rule(data=st.data())
    def split_body(self, data: st.DataObject) -> None:
        m = self.model
        bodies = [b for b in m.bodies() if m.size(b) >= 2]
        body = data.draw(st.sampled_from(bodies))
        where = np.argwhere(np.isin(m.sv, m.members(body)))
        i, j = data.draw(st.lists(st.integers(0, len(where) - 1), min_size=2, max_size=2, unique=True))
        seeds = {1: where[i:i + 1], 2: where[j:j + 1]}
        out = self.lm.at(self.current).split_body(body, seeds)
        assert out.bodies[1] == body
        self.new_id(out.bodies[2])
        for parts in out.cut.values():
            for p in parts:
                self.new_id(p)
        # The model learns the cut from what was written (the watershed is the implementation's),
        # but checks everything that must hold whatever the cut.
        v = self.lm.at(self.current)
        got = v.read_supervoxels()
        outside = ~np.isin(m.sv, m.members(body))
        np.testing.assert_array_equal(got[outside], m.sv[outside])
        cut_svs = set(out.cut)
        moved = np.isin(m.sv, sorted(cut_svs))
        np.testing.assert_array_equal(got[~moved], m.sv[~moved])
        for old, parts in out.cut.items():
            assert set(np.unique(got[m.sv == old]).tolist()) == set(parts)
        m.push()
        m.sv = got
        for old in cut_svs:
            del m.body[old]
        for g, svs in out.supervoxels.items():
            for sv in svs:
                m.body[sv] = out.bodies[g]
        for g, seed in seeds.items():
            assert m.body[int(got[tuple(seed[0])])] == out.bodies[g]

    @rule()
    def undo(self) -> None:
        m = self.model
        v = self.lm.at(self.current)
        assert v.can_undo == bool(m.undo)
        if not m.undo:
            with pytest.raises(NothingToUndoError):
                v.undo()
            return
        rec = v.undo()
        assert rec.operation == "undo"
        m.redo.append((m.sv.copy(), dict(m.body)))
        m.sv, m.body = m.undo.pop()

    @rule()
    def redo(self) -> None:
        m = self.model
        v = self.lm.at(self.current)
        assert v.can_redo == bool(m.redo)
        if not m.redo:
            with pytest.raises(NothingToUndoError):
                v.redo()
            return
        v.redo()
        m.undo.append((m.sv.copy(), dict(m.body)))
        m.sv, m.body = m.redo.pop()

    # -- versions -------------------------------------------------------------------------------
    @rule()
    def commit_and_continue(self) -> None:
        self.repo.commit(self.current, "proofread")
        m = self.model
        m.committed = True
        child = self.repo.new_version(self.current)
        self.versions[child.uuid] = ModelVersion(m.sv.copy(), dict(m.body))
        self.current = child.uuid

    @rule(data=st.data())
    @precondition(lambda self: any(m.committed for m in self.versions.values()))
    def branch(self, data: st.DataObject) -> None:
        # creation order, not UUID order: UUIDs are random, and the draw must not depend on them
        parent = data.draw(st.sampled_from([u for u, m in self.versions.items() if m.committed]))
        self.branches += 1
        child = self.repo.new_version(parent, f"trial-{self.branches}")
        src = self.versions[parent]
        self.versions[child.uuid] = ModelVersion(src.sv.copy(), dict(src.body))
        self.current = child.uuid

    @rule()
    def restart(self) -> None:
        """A new process: nothing cached, undo stacks derived from the log."""
        self.lm = open_labelmap(self.repo, "seg")

    @rule()
    def check_every_version(self) -> None:
        for uuid in self.versions:
            self.check_version(uuid)

    # -- refused edits --------------------------------------------------------------------------
    @rule(data=st.data())
    def bad_edits_are_typed_and_change_nothing(self, data: st.DataObject) -> None:
        m = self.model
        v = self.lm.at(self.current)
        before = len(v.mutations())
        bodies = m.bodies()
        body = data.draw(st.sampled_from(bodies))
        stranger = next((sv for sv, b in sorted(m.body.items()) if b != body), None)
        if stranger is not None:
            with pytest.raises(MappingError, match="not in body"):
                v.cleave(body, [stranger])
        with pytest.raises(MappingError, match="every supervoxel"):
            v.cleave(body, m.members(body))
        with pytest.raises(UnknownLabelError):
            v.merge(body, [max(self.ids_seen) + 10**6])
        sv = data.draw(st.sampled_from(sorted(m.body)))
        where = np.argwhere(m.sv == sv)
        with pytest.raises(SplitError, match="every voxel"):
            v.split_supervoxel(sv, where)
        with pytest.raises(SplitError, match="empty"):
            v.split_supervoxel(sv, np.zeros((0, 3), dtype=np.int64))
        other = np.argwhere(m.sv != sv)[:1]
        with pytest.raises(SplitError, match="not in supervoxel"):
            v.split_supervoxel(sv, np.concatenate([where[:1], other]))
        committed = [u for u, mv in self.versions.items() if mv.committed]
        if committed and len(bodies) >= 2:
            with pytest.raises(CommittedVersionError):
                self.lm.at(committed[0]).merge(bodies[0], [bodies[1]])
        assert len(self.lm.at(self.current).mutations()) == before

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def current_version_reads_agree(self) -> None:
        self.check_version(self.current)

    @invariant()
    def a_warm_other_handle_agrees(self) -> None:
        m = self.model
        v = self.watcher.at(self.current)
        ids = sorted(m.body)
        assert v.bodies_of(np.asarray(ids, dtype=np.uint64)).tolist() == [m.body[s] for s in ids]
        np.testing.assert_array_equal(np.asarray(v.supervoxel_arrays()[0]), m.sv)
        for body in m.bodies()[:4]:
            assert v.supervoxels(body) == m.members(body)

    @invariant()
    def index_agrees(self) -> None:
        m = self.model
        v = self.lm.at(self.current)
        for body in m.bodies()[:4]:
            assert v.supervoxels(body) == m.members(body)
            assert v.size(body) == m.size(body)
            where = np.argwhere(np.isin(m.sv, m.members(body)))
            box = v.bbox(body)
            assert box.lo == tuple(int(x) for x in where.min(0)) and box.hi == tuple(int(x) + 1 for x in where.max(0))
            assert v.sparsevol(body).size == m.size(body)

    def teardown(self) -> None:
        try:
            for uuid in self.versions:
                self.check_version(uuid)
            assert self.repo.verify() == []
        finally:
            self.repo.close()


TestLabelmap = LabelmapMachine.TestCase
# Examples bounded for the default run (tests/hypothesis_depth.py): each step's invariant reads the whole volume back
# and checks it against the model, so the cost is examples x steps; the default run keeps every step of a long
# sequence (25 examples before, 10 now) and ``--hypothesis-profile long`` searches twenty times as many.
TestLabelmap.settings = settings(max_examples=examples(10), stateful_step_count=20)
