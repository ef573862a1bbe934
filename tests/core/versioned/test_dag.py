"""The in-memory DAG: prefix resolution, heads, merge bases, and the consistency checker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from napari_shardscope.core.versioned.dag import Dag, Version, decode_version, encode_version
from napari_shardscope.core.versioned.errors import (
    AmbiguousVersionError,
    StoreCorruptError,
    UnknownBranchError,
    UnknownVersionError,
)


def v(uuid_head: str, vid: int, parents: tuple[str, ...], branch: str, locked: bool = True) -> Version:
    return Version(uuid=(uuid_head * 32)[:32], vid=vid, parents=tuple((p * 32)[:32] for p in parents),
                   branch=branch, locked=locked, message="", created=float(vid),
                   committed=float(vid) if locked else None)


def diamond() -> Dag:
    #   a1 (main) -> b2 (main) -> d4 (main, merge of b2 and c3)
    #            \-> c3 (side) -/
    return Dag([v("a1", 1, (), "main"), v("b2", 2, ("a1",), "main"), v("c3", 3, ("a1",), "side"),
                v("d4", 4, ("b2", "c3"), "main", locked=False)])


def test_resolution_and_heads() -> None:
    dag = diamond()
    assert dag.resolve("main").vid == 4 and dag.resolve("side").vid == 3
    assert dag.resolve("c3c").vid == 3 and dag.resolve("B2B2").vid == 2
    with pytest.raises(UnknownVersionError):
        dag.resolve("ff")
    with pytest.raises(UnknownVersionError):
        dag.resolve("not-hex")
    dag.add(v("a2", 5, ("c3",), "other"))
    with pytest.raises(AmbiguousVersionError):
        dag.resolve("a")
    with pytest.raises(UnknownBranchError):
        dag.head("none")
    assert [b.name for b in dag.branches()] == ["main", "side", "other"]


def test_ancestry_and_merge_base() -> None:
    dag = diamond()
    d = dag.by_vid(4)
    assert dag.ancestors(d) == frozenset({1, 2, 3, 4})
    assert [x.vid for x in dag.ancestry(d)] == [4, 3, 2, 1]
    assert dag.merge_base(dag.by_vid(2), dag.by_vid(3)).vid == 1
    assert dag.merge_base(d, dag.by_vid(3)).vid == 3
    assert dag.continuing_child(dag.by_vid(2)) == d and dag.continuing_child(dag.by_vid(3)) is None


def test_check_finds_structural_problems() -> None:
    assert diamond().check() == []
    bad = Dag([v("a1", 1, (), "main", locked=False), v("b2", 2, ("a1",), "main")])
    assert any("not committed" in p for p in bad.check())
    twins = Dag([v("a1", 1, (), "main"), v("b2", 2, ("a1",), "main"), v("c3", 3, ("a1",), "main")])
    assert any("continue branch" in p for p in twins.check())
    with pytest.raises(StoreCorruptError):
        Dag([v("b2", 2, ("a1",), "main")])


def test_record_round_trip() -> None:
    x = v("d4", 4, ("b2", "c3"), "main", locked=False)
    assert decode_version(encode_version(x)) == x
    y = replace(x, locked=True, message="done ✓", committed=5.0)
    assert decode_version(encode_version(y)) == y
    with pytest.raises(StoreCorruptError):
        decode_version(b'{"uuid": 1}')
