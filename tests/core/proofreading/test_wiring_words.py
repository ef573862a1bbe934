"""The wiring change of an edit in plain words (describe_wiring), from the touched bodies' connections."""

from __future__ import annotations

from napari_shardscope.core.annotation import Connections, Partner
from napari_shardscope.core.proofreading.synapses import describe_wiring


def conns(body: int, out: dict[int, int], inc: dict[int, int] | None = None) -> Connections:
    return Connections(body, tuple(Partner(p, n) for p, n in out.items()),
                       tuple(Partner(p, n) for p, n in (inc or {}).items()))


def test_a_merge_joins_the_merged_bodys_synapses_onto_its_partners() -> None:
    before = {10: conns(10, {77: 3}), 30: conns(30, {77: 14})}
    after = {10: conns(10, {77: 17}), 30: None}
    assert describe_wiring("merge of 30 into 10", before, after) == \
        "merge of 30 into 10 joined 14 synapses onto partner 77"
    before[30] = conns(30, {77: 14, 5: 2}, {6: 1})
    after[10] = conns(10, {77: 17, 5: 2}, {6: 1})
    assert describe_wiring("merge of 30 into 10", before, after) == \
        "merge of 30 into 10 joined 17 synapses onto 3 partners (most: 14 with partner 77)"


def test_a_cleave_moves_synapses_to_the_new_body() -> None:
    before = {10: conns(10, {77: 5, 8: 2}, {9: 1})}
    after = {10: conns(10, {77: 1, 8: 2}, {9: 1}), 31: conns(31, {77: 4})}
    assert describe_wiring("cleave of 2 supervoxels off 10 into 31", before, after) == \
        "cleave of 2 supervoxels off 10 into 31 moved 4 synapses: 4 with partner 77 to 31"


def test_an_edit_away_from_synapses_says_so() -> None:
    before = {10: conns(10, {77: 5})}
    after = {10: conns(10, {77: 5}), 31: conns(31, {})}
    assert describe_wiring("cleave of 1 supervoxel off 10 into 31", before, after) == \
        "cleave of 1 supervoxel off 10 into 31 changed no synapse connection"
