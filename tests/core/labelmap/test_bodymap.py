"""BodyMap against a flat model: random merges, cleaves, splits and undos agree on every supervoxel."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.labelmap.bodymap import BaseAgglomeration, BodyMap, MapDelta, MappingError, remap_labels


class BodyMapMachine(RuleBasedStateMachine):
    """The model: a plain dict supervoxel -> body, updated the slow obvious way."""

    def __init__(self) -> None:
        super().__init__()
        base = {sv: 100 + sv % 4 for sv in range(1, 13)}  # 12 supervoxels in 4 base bodies
        base.update({13: 13, 14: 14})  # two singletons named by their own id
        self.model: dict[int, int] = dict(base)
        self.map = BodyMap(base=BaseAgglomeration.from_mapping({k: v for k, v in base.items() if k != v}))
        self.next_id = 1000
        self.undo: list[tuple[MapDelta, dict[int, int]]] = []

    def bodies(self) -> list[int]:
        return sorted(set(self.model.values()))

    def _apply(self, delta: MapDelta) -> None:
        before = dict(self.model)
        self.map.apply(MapDelta.from_bytes(delta.to_bytes()))
        self.undo.append((delta, before))

    @rule(data=st.data())
    @precondition(lambda self: len(self.bodies()) >= 2)
    def merge(self, data: st.DataObject) -> None:
        bodies = self.bodies()
        target = data.draw(st.sampled_from(bodies))
        others = data.draw(
            st.lists(st.sampled_from([b for b in bodies if b != target]), min_size=1, max_size=3, unique=True)
        )
        delta = self.map.plan_merge(target, others)
        self._apply(delta)
        for sv, b in self.model.items():
            if b in others:
                self.model[sv] = target

    @rule(data=st.data())
    def cleave(self, data: st.DataObject) -> None:
        body = data.draw(st.sampled_from(self.bodies()))
        members = sorted(sv for sv, b in self.model.items() if b == body)
        svs = data.draw(st.lists(st.sampled_from(members), min_size=1, unique=True))
        new = self.next_id
        self.next_id += 1
        self._apply(self.map.plan_cleave(body, svs, new))
        for sv in svs:
            self.model[sv] = new

    @rule(data=st.data())
    def cleave_wrong_body_fails(self, data: st.DataObject) -> None:
        sv = data.draw(st.sampled_from(sorted(self.model)))
        wrong = data.draw(st.sampled_from([*self.bodies(), 999999]))
        if self.model[sv] == wrong:
            return
        with pytest.raises(MappingError, match=f"supervoxel {sv} is in body"):
            self.map.plan_cleave(wrong, [sv], self.next_id)

    @rule(data=st.data())
    def split_supervoxel(self, data: st.DataObject) -> None:
        sv = data.draw(st.sampled_from(sorted(self.model)))
        a, b = self.next_id, self.next_id + 1
        self.next_id += 2
        self._apply(self.map.plan_split_supervoxel(sv, a, b))
        body = self.model.pop(sv)
        self.model[a] = self.model[b] = body

    @rule()
    @precondition(lambda self: bool(self.undo))
    def undo_last(self) -> None:
        delta, before = self.undo.pop()
        self.map.apply(delta.inverse())
        self.model = before

    @invariant()
    def every_supervoxel_agrees(self) -> None:
        svs = np.array(sorted(self.model), dtype=np.uint64)
        assert [self.map.body_of(int(s)) for s in svs] == [self.model[int(s)] for s in svs]
        assert self.map.bodies_of(svs).tolist() == [self.model[int(s)] for s in svs]
        for body in self.bodies():
            listed = [sv for sv in self.map.supervoxels(body) if sv in self.model]
            assert listed == sorted(sv for sv, b in self.model.items() if b == body)

    @invariant()
    def copies_are_independent(self) -> None:
        clone = self.map.copy()
        svs = sorted(self.model)
        assert [clone.body_of(s) for s in svs] == [self.map.body_of(s) for s in svs]


TestBodyMap = BodyMapMachine.TestCase
TestBodyMap.settings = settings(max_examples=60, stateful_step_count=25)


def test_merge_cost_does_not_depend_on_body_size() -> None:
    # A base body of 10^6 supervoxels: merging it adds exactly one parent pointer.
    n = 1_000_000
    base = BaseAgglomeration(np.arange(1, n + 1, dtype=np.uint64), np.full(n, 7, dtype=np.uint64))
    m = BodyMap(base=base)
    delta = m.plan_merge(5, [7])
    assert delta.parent == ((7, None, 5),) and not delta.explicit
    m.apply(delta)
    assert m.body_of(123_456) == 5 and m.bodies_of(np.array([0, 1, n], dtype=np.uint64)).tolist() == [0, 5, 5]


def test_merge_errors() -> None:
    m = BodyMap()
    m.apply(m.plan_merge(1, [2]))
    with pytest.raises(MappingError, match="body 2 was already merged into body 1"):
        m.plan_merge(3, [2])
    with pytest.raises(MappingError, match="body 2 was merged into body 1; merge into that"):
        m.plan_merge(2, [3])
    with pytest.raises(MappingError, match="into itself"):
        m.plan_merge(1, [1])
    with pytest.raises(ArgumentError):
        m.plan_merge(1, [])


@given(st.binary(max_size=200))
def test_delta_decoder_fuzz(blob: bytes) -> None:
    with contextlib.suppress(ShardscopeError):
        MapDelta.from_bytes(blob)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**64 - 2), st.none() | st.integers(0, 2**64 - 2), st.none() | st.integers(0, 2**64 - 2)
        ),
        max_size=20,
    )
)
def test_delta_round_trip(rows: list[tuple[int, int | None, int | None]]) -> None:
    delta = MapDelta(explicit=tuple(rows), parent=tuple(rows[:3]), retired=tuple(rows[3:5]))
    assert MapDelta.from_bytes(delta.to_bytes()) == delta
    assert delta.inverse().inverse() == delta


@given(st.integers(0, 2**32), st.sampled_from([(1,), (7,), (3, 5, 7), (4, 16, 16)]), st.integers(1, 30),
       st.integers(1, 9))
def test_remap_labels_by_runs_or_voxels_maps_every_voxel(seed: int, shape: tuple[int, ...], labels: int,
                                                          run: int) -> None:
    """Long runs (mapped run by run) and noise (mapped voxel by voxel) both give lookup's id for every voxel."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    svs = np.repeat(rng.integers(0, labels, size=-(-n // run), dtype=np.uint64), run)[:n].reshape(shape)
    table = {int(s): int(s) * 7 % 11 for s in np.unique(svs)}
    asked: list[int] = []

    def lookup(uniq: np.ndarray) -> np.ndarray:
        asked.append(uniq.size)
        return np.asarray([table[int(u)] for u in uniq], dtype=np.uint64)

    out = remap_labels(svs, lookup)
    assert out.shape == svs.shape and out.dtype == np.uint64
    assert out.reshape(-1).tolist() == [table[int(s)] for s in svs.reshape(-1)]
    assert asked == [len(table)]  # each distinct id asked about once
    same = remap_labels(svs, lambda u: u)
    assert np.array_equal(same, svs) and not np.shares_memory(same, svs)
