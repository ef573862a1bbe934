"""The body map as versioned records against the replay model it replaced, driven by hypothesis.

The oracle is the in-memory :class:`BodyMap` (the map a version *was* when it was the replay of its
log): per version a BodyMap, its undo and redo stacks of deltas, and every supervoxel's voxel count.
Random merges, cleaves, supervoxel splits, undo, redo, commits, branches, labelmap branch merges and
restarts are done on both; at every step the records must give the same bodies, sizes, supervoxel
sets, undo/redo availability and history, every mutation must carry the delta the oracle planned,
and the version's whole log must still replay (old semantics) to the same map. On the memory and
LMDB engines.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from napari_shardscope.core.labelmap import (
    Labelmap,
    MappingError,
    NothingToUndoError,
    UnknownLabelError,
    create_labelmap,
    open_labelmap,
)
from napari_shardscope.core.labelmap.bodymap import BaseAgglomeration, BodyMap, MapDelta
from napari_shardscope.core.labelmap.branch_merge import BranchMergeConflictError, merge_branches
from napari_shardscope.core.versioned import Repository, create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.hypothesis_depth import examples

SHAPE = (9, 20, 22)
BLOCK = (4, 8, 8)


@functools.cache
def base_volume() -> tuple[Path, np.ndarray, dict[int, int]]:
    root = Path(tempfile.mkdtemp(prefix="labelmap-records-"))
    svs = voronoi_supervoxels(SHAPE, 16, seed=7)
    write_precomputed(root / "seg", svs, ((1, 1, 1), (1, 2, 2)))
    ids = sorted(int(v) for v in np.unique(svs))
    agglomeration = {ids[i]: ids[i - 1] for i in range(1, len(ids), 3)}
    return root / "seg", svs, agglomeration


@dataclass
class Model:
    """What a version should be: the replay-era map, voxel counts, and its stacks of deltas."""

    map: BodyMap
    counts: dict[int, int]
    committed: bool = False
    #: (delta, counts before it, counts after it) per edit; undo and redo move entries between them
    undo: list[tuple[MapDelta, dict[int, int], dict[int, int]]] = field(default_factory=list)
    redo: list[tuple[MapDelta, dict[int, int], dict[int, int]]] = field(default_factory=list)

    def copy(self) -> Model:
        return Model(self.map.copy(), dict(self.counts))

    def existing(self) -> list[int]:
        return sorted(sv for sv in self.counts if sv not in self.map.retired)

    def bodies(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for sv in self.existing():
            out.setdefault(self.map.body_of(sv), []).append(sv)
        return out

    def edit(self, delta: MapDelta, counts: dict[int, int] | None = None) -> None:
        after = dict(self.counts) if counts is None else counts
        self.undo.append((delta, dict(self.counts), after))
        self.redo.clear()
        self.map.apply(delta)
        self.counts = after


class RecordsMachine(RuleBasedStateMachine):
    engine = "memory"

    def __init__(self) -> None:
        super().__init__()
        path, svs, agglomeration = base_volume()
        self.tmp = Path(tempfile.mkdtemp(prefix="records-repo-")) if self.engine != "memory" else None
        self.repo: Repository = create_repository(None if self.tmp is None else self.tmp / "repo", engine=self.engine)
        self.lm: Labelmap = create_labelmap(self.repo, "seg", path, agglomeration=agglomeration, block=BLOCK)
        ids, n = np.unique(svs, return_counts=True)
        base = BaseAgglomeration.from_mapping(agglomeration)
        self.models: dict[str, Model] = {
            self.repo.root.uuid: Model(BodyMap(base=base), {int(i): int(c) for i, c in zip(ids, n, strict=True)})}
        self.current = self.repo.root.uuid
        self.volume = svs
        self.branches = 0

    @property
    def model(self) -> Model:
        return self.models[self.current]

    def check_delta(self, got: MapDelta, want: MapDelta) -> None:
        assert got == want, f"logged delta {got} != planned {want}"

    # -- edits ----------------------------------------------------------------------------------
    @rule(data=st.data())
    @precondition(lambda self: len(self.model.bodies()) >= 2)
    def merge(self, data: st.DataObject) -> None:
        bodies = sorted(self.model.bodies())
        target = data.draw(st.sampled_from(bodies))
        others = data.draw(st.lists(st.sampled_from([b for b in bodies if b != target]), min_size=1, max_size=3,
                                    unique=True))
        want = self.model.map.plan_merge(target, others)
        rec = self.lm.at(self.current).merge(target, others)
        self.check_delta(rec.delta, want)
        self.model.edit(want)

    @rule(data=st.data())
    @precondition(lambda self: any(len(m) >= 2 for m in self.model.bodies().values()))
    def cleave(self, data: st.DataObject) -> None:
        bodies = self.model.bodies()
        body = data.draw(st.sampled_from(sorted(b for b, m in bodies.items() if len(m) >= 2)))
        svs = data.draw(st.lists(st.sampled_from(bodies[body]), min_size=1, max_size=len(bodies[body]) - 1,
                                 unique=True))
        new = self.lm.at(self.current).cleave(body, svs)
        rec = self.lm.at(self.current).mutations(own=True)[-1].mutation
        want = self.model.map.plan_cleave(body, sorted(svs), new)  # the labelmap logs them sorted
        self.check_delta(rec.delta, want)
        self.model.edit(want)

    @rule(data=st.data())
    def split_supervoxel(self, data: st.DataObject) -> None:
        m = self.model
        v = self.lm.at(self.current)
        sv = data.draw(st.sampled_from([s for s in m.existing() if m.counts[s] >= 2]))
        where = np.argwhere(v.read_supervoxels() == sv)
        assert len(where) == m.counts[sv]
        k = data.draw(st.integers(1, len(where) - 1))
        a, b = v.split_supervoxel(sv, where[:k])
        rec = v.mutations(own=True)[-1].mutation
        want = m.map.plan_split_supervoxel(sv, a, b)
        self.check_delta(rec.delta, want)
        m.edit(want, {**m.counts, a: k, b: len(where) - k})

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
        entry = m.undo.pop()
        self.check_delta(rec.delta, entry[0].inverse())
        m.map.apply(entry[0].inverse())
        m.redo.append(entry)
        m.counts = dict(entry[1])

    @rule()
    def redo(self) -> None:
        m = self.model
        v = self.lm.at(self.current)
        assert v.can_redo == bool(m.redo)
        if not m.redo:
            with pytest.raises(NothingToUndoError):
                v.redo()
            return
        rec = v.redo()
        entry = m.redo.pop()
        self.check_delta(rec.delta, entry[0])
        m.map.apply(entry[0])
        m.undo.append(entry)
        m.counts = dict(entry[2])

    # -- versions -------------------------------------------------------------------------------
    @rule()
    def commit_and_continue(self) -> None:
        self.repo.commit(self.current, "proofread")
        self.model.committed = True
        child = self.repo.new_version(self.current)
        self.models[child.uuid] = self.model.copy()
        self.current = child.uuid

    @rule(data=st.data())
    @precondition(lambda self: any(m.committed for m in self.models.values()))
    def branch(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from([u for u, m in self.models.items() if m.committed]))
        self.branches += 1
        child = self.repo.new_version(parent, f"b{self.branches}")
        self.models[child.uuid] = self.models[parent].copy()
        self.current = child.uuid

    @rule(data=st.data())
    @precondition(lambda self: sum(m.committed for m in self.models.values()) >= 2)
    def branch_merge(self, data: st.DataObject) -> None:
        committed = [u for u, m in self.models.items() if m.committed]
        ours = data.draw(st.sampled_from(committed))
        theirs = data.draw(st.sampled_from([u for u in committed if u != ours]))
        policy = data.draw(st.sampled_from(["fail", "ours", "theirs"]))
        self.branches += 1
        try:
            result = merge_branches(self.lm, ours, theirs, policy=policy, branch=f"m{self.branches}")  # type: ignore[arg-type]
        except (BranchMergeConflictError, MappingError):
            return  # refused (conflicts left, or their edits do not replay): nothing written
        model = self.models[ours].copy()
        before = dict(model.counts)
        model.map.apply(result.mutation.delta)  # the replay era's semantics of the merge record
        v = self.lm.at(result.version.uuid)
        present = np.unique(v.read_supervoxels())
        known = {**self.models[theirs].counts, **self.models[ours].counts}
        model.counts = {int(s): known[int(s)] for s in present if s}
        model.undo = [(result.mutation.delta, before, dict(model.counts))]
        self.models[result.version.uuid] = model
        self.current = result.version.uuid

    @rule()
    def restart(self) -> None:
        """A new process: nothing cached; stacks and history come from the records."""
        self.lm = open_labelmap(self.repo, "seg")

    # -- invariants -----------------------------------------------------------------------------
    def check(self, uuid: str) -> None:
        m = self.models[uuid]
        v = self.lm.at(uuid)
        svs = np.asarray(m.existing(), dtype=np.uint64)
        np.testing.assert_array_equal(v.bodies_of(svs), m.map.bodies_of(svs), err_msg="bodies of supervoxels")
        for body, members in sorted(m.bodies().items()):
            assert v.exists(body), body
            assert v.supervoxels(body) == members
            assert v.size(body) == sum(m.counts[s] for s in members)
            assert v.sparsevol(body).size == v.size(body)
        for body in sorted(m.map.parent)[:3]:  # merged away: the same error, naming the same body
            assert not v.exists(body)
            with pytest.raises(UnknownLabelError, match=f"merged into body {m.map.root(body)}"):
                v.size(body)

    @invariant()
    def current_agrees(self) -> None:
        self.check(self.current)
        m = self.model
        v = self.lm.at(self.current)
        assert v.can_undo == bool(m.undo) and v.can_redo == bool(m.redo)

    @invariant()
    def log_replays_and_history_agrees(self) -> None:
        m = self.model
        v = self.lm.at(self.current)
        log = [e.mutation for e in v.mutations()]
        replayed = BodyMap(base=m.map.base)
        for rec in log:
            replayed.apply(rec.delta)
        svs = np.asarray(m.existing(), dtype=np.uint64)
        np.testing.assert_array_equal(replayed.bodies_of(svs), m.map.bodies_of(svs))
        for body in sorted(m.bodies())[:3]:
            lineage = set(m.map.merged_bodies(body)) | {body}
            want = []
            for rec in reversed(log):
                if set(rec.bodies) & lineage:
                    want.append(rec.mutation_id)
                    lineage |= set(rec.bodies)
            assert [h.mutation.mutation_id for h in v.history(body)] == sorted(want)

    def teardown(self) -> None:
        try:
            for uuid in self.models:
                self.check(uuid)
            assert self.repo.verify() == []
        finally:
            self.repo.close()
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)


class LmdbRecordsMachine(RecordsMachine):
    engine = "lmdb"


TestRecordsMemory = RecordsMachine.TestCase
# Examples bounded for the default run (tests/hypothesis_depth.py): each step's invariant reads every body's
# supervoxels, size and sparse volume and replays the whole log, so the cost is examples x steps; the default run
# keeps every step of a long sequence (20 examples before, 8 now) and ``--hypothesis-profile long`` searches twenty
# times as many.
TestRecordsMemory.settings = settings(max_examples=examples(8), stateful_step_count=25, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
TestRecordsLmdb = LmdbRecordsMachine.TestCase
# (10 examples before, 4 now: an LMDB repository per example; the memory engine above runs more.)
TestRecordsLmdb.settings = settings(max_examples=examples(4), stateful_step_count=25, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])
