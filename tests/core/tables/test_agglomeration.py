"""TableAgglomeration answers the labelmap's agglomeration questions like a plain dict would."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables import (
    TableAgglomeration,
    memory_table,
    open_sorted_table,
    write_reverse_table,
    write_sorted_table,
)
from napari_shardscope.core.tables.reverse import reverse_rows

MAPPING = {5: 100, 6: 100, 9: 200, 12: 5, 40: 100}


def test_lookup_rules_from_a_mapping() -> None:
    agglo = TableAgglomeration.from_mapping(MAPPING)
    plane = np.array([[0, 5, 6], [7, 9, 40]], dtype=np.uint64)
    np.testing.assert_array_equal(agglo.lookup(plane), [[0, 100, 100], [7, 200, 100]])  # unlisted 7 is itself
    np.testing.assert_array_equal(agglo.listed_mask(plane), [[False, True, True], [False, True, True]])
    np.testing.assert_array_equal(agglo.is_listed([12, 13]), [True, False])
    np.testing.assert_array_equal(agglo.members(100), [5, 6, 40])
    np.testing.assert_array_equal(agglo.members_of([200, 5, 0, 999]), [9, 12])
    assert agglo.max_id == 200 and agglo.listed == 5
    svs, bodies = zip(*agglo.iter_pages(), strict=True)
    assert np.concatenate(svs).tolist() == [5, 6, 9, 12, 40]
    assert np.concatenate(bodies).tolist() == [100, 100, 200, 5, 100]
    assert agglo.lookup(np.zeros((0, 3), dtype=np.uint64)).shape == (0, 3)
    with pytest.raises(ArgumentError, match="positive"):
        TableAgglomeration.from_mapping({0: 3})


def test_has_the_labelmap_agglomeration_protocol() -> None:
    """The methods and properties the labelmap's AgglomerationSource asks for (branch h33-scale)."""
    agglo = TableAgglomeration.from_mapping(MAPPING)
    for name in ("max_id", "listed", "lookup", "listed_mask", "members_of", "iter_pages", "members", "is_listed"):
        assert hasattr(agglo, name), name


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.integers(1, 10_000), st.integers(1, 60), max_size=400),
       st.lists(st.integers(0, 10_050), max_size=80))
def test_same_answers_as_a_dict(mapping: dict[int, int], asked: list[int]) -> None:
    agglo = TableAgglomeration.from_mapping(mapping)
    a = np.asarray(asked, dtype=np.uint64)
    assert agglo.lookup(a).tolist() == [mapping.get(x, x) for x in asked]
    assert agglo.listed_mask(a).tolist() == [x in mapping for x in asked]
    for body in set(mapping.values()) | {61}:
        assert agglo.members(body).tolist() == sorted(k for k, v in mapping.items() if v == body)
    assert agglo.max_id == (max(max(mapping), max(mapping.values())) if mapping else 0)


def test_reverse_by_ranges_equals_reverse_in_memory(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(1, 10**9, 30_000)).astype(np.uint64)
    bodies = rng.zipf(1.5, keys.size).astype(np.uint64) % 5000 + 1  # a few huge bodies, many small ones
    table = memory_table(keys, {"body": bodies}, key="sv", page_rows=1000)
    whole = list(reverse_rows(table, "body"))
    parts = list(reverse_rows(table, "body", memory_rows=2000, scratch=tmp_path))
    assert len(whole) == 1 and len(parts) > 5
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), whole[0][0])
    np.testing.assert_array_equal(np.concatenate([p[1]["sv"] for p in parts]), whole[0][1]["sv"])
    assert list(tmp_path.iterdir()) == []  # the spill files are gone
    write_reverse_table(table, tmp_path / "rev", page_rows=700, memory_rows=2000)
    rev = open_sorted_table(tmp_path / "rev")
    agglo = TableAgglomeration(table, rev)
    for body in (1, 2, 3, 4999):
        np.testing.assert_array_equal(agglo.members(body), np.sort(keys[bodies == body]))


def test_foreign_table_without_recorded_maximum(tmp_path: Path) -> None:
    import zarr

    g = zarr.open_group(str(tmp_path / "g"), mode="w")
    keys = np.arange(1, 1001, dtype=np.uint64)
    g.create_array("sv", shape=keys.shape, chunks=(128,), dtype="uint64")[:] = keys
    g.create_array("body", shape=keys.shape, chunks=(128,), dtype="uint64")[:] = keys * 3
    agglo = TableAgglomeration(open_sorted_table(tmp_path / "g", key="sv", values=["body"]))
    assert agglo.max_id == 3000  # one pass over the body column, then remembered
    write_sorted_table(tmp_path / "ours", keys, {"body": keys * 3}, key="sv")
    ours = open_sorted_table(tmp_path / "ours")
    assert ours.value_max == {"body": 3000}
    assert TableAgglomeration(ours).max_id == 3000


def test_body_column_must_be_named_when_there_are_several() -> None:
    table = memory_table(np.array([1, 2]), {"body": np.array([3, 4]), "score": np.array([0.5, 0.25])})
    with pytest.raises(ArgumentError, match="name the body column"):
        TableAgglomeration(table)
    with pytest.raises(ArgumentError, match="not an integer"):
        TableAgglomeration(table, body="score")
    assert TableAgglomeration(table, body="body").lookup([2]).tolist() == [4]
