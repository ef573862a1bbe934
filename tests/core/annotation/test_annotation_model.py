"""The versioned annotation records against a dict model: add/move/delete/tags/properties/relationships,
undo/redo, commit, branch and branch merges (id-level three-way, conflicts by policy), on a real labelmap
in a memory repository.

After every step the version's records, its spatial and tag index keys, box and tag queries must
equal what the model derives; every committed version keeps the model state it was committed with.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from napari_shardscope.core.annotation import (
    AnnotationInstance,
    AnnotationMergeConflictError,
    NothingToUndoError,
    UnknownAnnotationError,
    create_annotation_instance,
    merge_annotation_branches,
    plan_annotation_merge,
)
from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.editing import block_of
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.versioned import CommittedVersionError, Repository, create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.hypothesis_depth import examples

SHAPE = (8, 20, 24)
BLOCK = (4, 8, 8)
TAGS = ("a", "b", "checked")


@functools.cache
def base_volume() -> tuple[Path, np.ndarray]:
    root = Path(tempfile.mkdtemp(prefix="annotation-model-"))
    svs = voronoi_supervoxels(SHAPE, 10, seed=5)
    write_precomputed(root / "seg", svs, ((1, 1, 1), (1, 2, 2)))
    return root / "seg", svs


# model: id -> (kind, point, tags, properties, relationships as frozenset of (rel, to))
Rec = tuple[str, tuple[int, int, int], tuple[str, ...], tuple[tuple[str, Any], ...], frozenset[tuple[str, int]]]


@dataclass
class Branch:
    uuid: str
    state: dict[int, Rec]
    undo: list[dict[int, Rec]] = field(default_factory=list)
    redo: list[dict[int, Rec]] = field(default_factory=list)


points = st.tuples(st.integers(0, SHAPE[0] - 1), st.integers(0, SHAPE[1] - 1), st.integers(0, SHAPE[2] - 1))
tag_sets = st.lists(st.sampled_from(TAGS), max_size=3)
props = st.dictionaries(st.sampled_from(("score", "note")), st.one_of(st.integers(-5, 5), st.text(max_size=4)),
                        max_size=2)


class AnnotationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        path, self.svs = base_volume()
        self.repo: Repository = create_repository(None, engine="memory")
        lm = create_labelmap(self.repo, "seg", path, block=BLOCK)
        self.inst: AnnotationInstance = create_annotation_instance(self.repo, "syn", labelmap=lm)
        self.cur = Branch(self.repo.root.uuid, {})
        self.committed: dict[str, dict[int, Rec]] = {}
        self.branches = 0

    @property
    def v(self) -> Any:
        return self.inst.at(self.cur.uuid)

    def edit(self, new_state: dict[int, Rec]) -> None:
        self.cur.undo.append(self.cur.state)
        self.cur.redo.clear()
        self.cur.state = new_state

    def ids(self) -> list[int]:
        return sorted(self.cur.state)

    # -- rules ------------------------------------------------------------------------------------
    @rule(kind=st.sampled_from(("pre", "post", "point")), point=points, tags=tag_sets, properties=props)
    def add(self, kind: str, point: tuple[int, int, int], tags: list[str], properties: dict[str, Any]) -> None:
        a = self.v.add(kind, point, tags=tags, properties=properties)
        assert a.id not in self.cur.state and all(a.id not in s for s in self.committed.values())
        self.edit({**self.cur.state, a.id: (kind, point, tuple(sorted(set(tags))),
                                            tuple(sorted(properties.items())), frozenset())})

    @precondition(lambda self: self.cur.state)
    @rule(data=st.data(), point=points)
    def move(self, data: st.DataObject, point: tuple[int, int, int]) -> None:
        aid = data.draw(st.sampled_from(self.ids()))
        self.v.move(aid, point)
        k, _, t, p, r = self.cur.state[aid]
        self.edit({**self.cur.state, aid: (k, point, t, p, r)})

    @precondition(lambda self: self.cur.state)
    @rule(data=st.data(), tags=tag_sets)
    def set_tags(self, data: st.DataObject, tags: list[str]) -> None:
        aid = data.draw(st.sampled_from(self.ids()))
        self.v.set_tags(aid, tags)
        k, pt, _, p, r = self.cur.state[aid]
        self.edit({**self.cur.state, aid: (k, pt, tuple(sorted(set(tags))), p, r)})

    @precondition(lambda self: self.cur.state)
    @rule(data=st.data(), properties=props)
    def set_properties(self, data: st.DataObject, properties: dict[str, Any]) -> None:
        aid = data.draw(st.sampled_from(self.ids()))
        self.v.set_properties(aid, properties)
        k, pt, t, _, r = self.cur.state[aid]
        self.edit({**self.cur.state, aid: (k, pt, t, tuple(sorted(properties.items())), r)})

    @precondition(lambda self: any(r[0] == "pre" for r in self.cur.state.values())
                  and any(r[0] == "post" for r in self.cur.state.values()))
    @rule(data=st.data())
    def relate(self, data: st.DataObject) -> None:
        pre = data.draw(st.sampled_from([i for i in self.ids() if self.cur.state[i][0] == "pre"]))
        post = data.draw(st.sampled_from([i for i in self.ids() if self.cur.state[i][0] == "post"]))
        self.v.relate(pre, post)
        s = dict(self.cur.state)
        k, pt, t, p, r = s[pre]
        s[pre] = (k, pt, t, p, r | {("PreSynTo", post)})
        k, pt, t, p, r = s[post]
        s[post] = (k, pt, t, p, r | {("PostSynTo", pre)})
        self.edit(s)

    @precondition(lambda self: self.cur.state)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        aid = data.draw(st.sampled_from(self.ids()))
        self.v.delete(aid)
        s = {i: rec for i, rec in self.cur.state.items() if i != aid}
        for i, (k, pt, t, p, r) in list(s.items()):
            if any(to == aid for _, to in r):
                s[i] = (k, pt, t, p, frozenset(x for x in r if x[1] != aid))
        self.edit(s)
        try:
            self.v.get(aid)
            raise AssertionError("a deleted annotation is still there")
        except UnknownAnnotationError:
            pass

    @rule()
    def undo(self) -> None:
        if not self.cur.undo:
            try:
                self.v.undo()
                raise AssertionError("undo with nothing to undo")
            except NothingToUndoError:
                return
        self.v.undo()
        self.cur.redo.append(self.cur.state)
        self.cur.state = self.cur.undo.pop()

    @rule()
    def redo(self) -> None:
        if not self.cur.redo:
            try:
                self.v.redo()
                raise AssertionError("redo with nothing to redo")
            except NothingToUndoError:
                return
        self.v.redo()
        self.cur.undo.append(self.cur.state)
        self.cur.state = self.cur.redo.pop()

    @rule(new_branch=st.booleans())
    def commit(self, new_branch: bool) -> None:
        done = self.repo.commit(self.cur.uuid, "step")
        self.committed[done.uuid] = dict(self.cur.state)
        name = None
        if new_branch:
            self.branches += 1
            name = f"b{self.branches}"
        child = self.repo.new_version(done, name)
        self.cur = Branch(child.uuid, dict(self.cur.state))  # a child starts with empty stacks
        assert not self.v.can_undo and not self.v.can_redo

    @precondition(lambda self: self.committed)
    @rule(data=st.data())
    def branch_from_old(self, data: st.DataObject) -> None:
        """Commit here, go back to any committed version and start a branch there (the work here stays a
        committed head another branch can merge: what makes merges with changes on both sides likely)."""
        done = self.repo.commit(self.cur.uuid, "left")
        self.committed[done.uuid] = dict(self.cur.state)
        uuid = data.draw(st.sampled_from(list(self.committed)))
        self.branches += 1
        child = self.repo.new_version(uuid, f"b{self.branches}")
        self.cur = Branch(child.uuid, dict(self.committed[uuid]))

    @precondition(lambda self: self.committed)
    @rule(data=st.data())
    def committed_refuse_and_keep(self, data: st.DataObject) -> None:
        uuid = data.draw(st.sampled_from(list(self.committed)))
        try:
            self.inst.at(uuid).add("point", (0, 0, 0))
            raise AssertionError("an edit of a committed version was accepted")
        except CommittedVersionError:
            pass
        self.check(uuid, self.committed[uuid])

    @precondition(lambda self: len(self.committed) >= 2)
    @rule(data=st.data(), policy=st.sampled_from(("ours", "theirs")))
    def merge_branches(self, data: st.DataObject, policy: str) -> None:
        """Commit here, merge another committed version in: the model's id-level three-way merge."""
        done = self.repo.commit(self.cur.uuid, "before merge")
        self.committed[done.uuid] = dict(self.cur.state)
        theirs = data.draw(st.sampled_from([u for u in self.committed if u != done.uuid]))
        self.merge(done.uuid, theirs, policy)

    @precondition(lambda self: self.cur.state)
    @rule(data=st.data(), mine=points, other=points, tags=tag_sets, policy=st.sampled_from(("ours", "theirs")))
    def diverge_and_merge(self, data: st.DataObject, mine: tuple[int, int, int], other: tuple[int, int, int],
                          tags: list[str], policy: str) -> None:
        """Two branches edit the same annotation (a move here, a move or a retag there), then merge."""
        aid = data.draw(st.sampled_from(self.ids()))
        done = self.repo.commit(self.cur.uuid, "fork")
        self.committed[done.uuid] = dict(self.cur.state)
        self.branches += 1
        there = self.repo.new_version(done, f"b{self.branches}")
        k, pt, t, p, r = self.cur.state[aid]
        if data.draw(st.booleans()):
            self.inst.at(there).move(aid, other)
            theirs_rec = (k, other, t, p, r)
        else:
            self.inst.at(there).set_tags(aid, tags)
            theirs_rec = (k, pt, tuple(sorted(set(tags))), p, r)
        theirs = self.repo.commit(there, "theirs")
        self.committed[theirs.uuid] = {**self.cur.state, aid: theirs_rec}
        here = self.repo.new_version(done)
        self.inst.at(here).move(aid, mine)
        ours = self.repo.commit(here, "ours")
        self.committed[ours.uuid] = {**self.cur.state, aid: (k, mine, t, p, r)}
        self.merge(ours.uuid, theirs.uuid, policy)

    def merge(self, ours: str, theirs: str, policy: str) -> None:
        self.branches += 1
        name = f"b{self.branches}"
        if self.repo.is_ancestor(theirs, ours) or self.repo.is_ancestor(ours, theirs):
            event("merge skipped: one side is the other's ancestor")
            self.cur = Branch(self.repo.new_version(ours, name).uuid, dict(self.committed[ours]))
            return
        base = self.committed[self.repo.merge_base(ours, theirs).uuid]
        ours_s, theirs_s = self.committed[ours], self.committed[theirs]
        want: dict[int, Rec] = {}
        conflicts = set()
        for i in set(base) | set(ours_s) | set(theirs_s):
            r0, ra, rb = base.get(i), ours_s.get(i), theirs_s.get(i)
            pick = ra
            if ra != rb and ra != r0 and rb != r0:
                conflicts.add(f"annotation:{i}")
                pick = ra if policy == "ours" else rb
            elif ra == r0:
                pick = rb
            if pick is not None:
                want[i] = pick
        event("merge with conflicts" if conflicts else "merge without conflicts")
        plan = plan_annotation_merge(self.inst, ours, theirs)
        assert {c.key for c in plan.conflicts} == conflicts
        if conflicts:
            try:
                merge_annotation_branches(self.inst, ours, theirs, branch=name)
                raise AssertionError("a merge with conflicts was accepted without a policy")
            except AnnotationMergeConflictError as exc:
                assert {c.key for c in exc.unresolved} == conflicts
        result = merge_annotation_branches(self.inst, ours, theirs, branch=name, policy=policy)
        self.cur = Branch(result.version.uuid, want, undo=[dict(ours_s)])  # one undo takes the merge back

    @rule(lo=points, hi=points)
    def box_query(self, lo: tuple[int, int, int], hi: tuple[int, int, int]) -> None:
        want = sorted(i for i, rec in self.cur.state.items()
                      if all(a <= p < b for a, p, b in zip(lo, rec[1], hi, strict=True)))
        assert [a.id for a in self.v.in_box(lo, hi)] == want

    # -- invariants --------------------------------------------------------------------------------
    def check(self, uuid: str, state: dict[int, Rec]) -> None:
        v = self.inst.at(uuid)
        got = {a.id: (a.kind, a.point, a.tags, tuple(sorted(a.properties.items())),
                      frozenset((r.rel, r.to) for r in a.relationships)) for a in v.all()}
        assert got == state
        with self.repo.read(uuid) as view:
            spatial = {(K.id_of_index_key(k), k[1:13]) for k in view.keys("syn", prefix=K.SPATIAL_PREFIX)}
            tags = {k for k in view.keys("syn", prefix=K.TAG_PREFIX)}
        assert spatial == {(i, K.spatial_block_prefix(block_of(rec[1], BLOCK))[1:]) for i, rec in state.items()}
        assert tags == {K.tag_key(t, i) for i, rec in state.items() for t in rec[2]}
        for tag in TAGS:
            assert [a.id for a in v.with_tag(tag)] == sorted(i for i, rec in state.items() if tag in rec[2])
        for a in v.all():  # the recorded supervoxel is the one under the point (no labelmap edits here)
            assert a.id in state
            assert v.body_of(a.id) == int(self.svs[a.point])

    @invariant()
    def matches_model(self) -> None:
        self.check(self.cur.uuid, self.cur.state)
        # (committed versions are sampled in commit order: UUIDs differ between runs, and Hypothesis replays)
        assert self.v.can_undo == bool(self.cur.undo) and self.v.can_redo == bool(self.cur.redo)


TestAnnotationModel = AnnotationMachine.TestCase
# The invariant re-reads every record and index after every step. Sized as the other model tests are
# (tests/hypothesis_depth.py): the profile's 50 runs of Hypothesis's default 50 steps cost ~9 CPU-s; 25 runs
# of 30 steps reach every rule (a merge needs two commits: a few steps) at a third of it, and the "long"
# profile searches twenty times deeper.
TestAnnotationModel.settings = settings(max_examples=examples(25), stateful_step_count=30, deadline=None)
