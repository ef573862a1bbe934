"""Annotations on the sample labelmap: which body owns a synapse follows merges, cleaves and supervoxel
splits of the same version without a write to the annotations; branch merges of annotations, with
conflicts named like the labelmap's; typed errors for bad input and damaged records.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.annotation import (
    AnnotationArgumentError,
    AnnotationExistsError,
    AnnotationInstance,
    AnnotationMergeConflictError,
    AnnotationRecordError,
    NothingToUndoError,
    UnknownAnnotationError,
    create_annotation_instance,
    merge_annotation_branches,
    open_annotation_instance,
    plan_annotation_merge,
)
from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.model import decode_record
from napari_shardscope.core.annotation.mutations import AnnotationMutation, KeyChange
from napari_shardscope.core.errors import ArgumentError, ConflictError, NotFoundError
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import CommittedVersionError, Repository, open_repository


def truth(syn: AnnotationInstance, ref: str) -> dict[int, set[int]]:
    """Body → annotation ids, by reading the labelmap's body under every point (the oracle)."""
    lmv = syn.labelmap.at(ref)
    out: dict[int, set[int]] = {}
    for a in syn.at(ref).all():
        out.setdefault(lmv.body_at(a.point), set()).add(a.id)
    return out


def assert_by_body(syn: AnnotationInstance, ref: str) -> dict[int, set[int]]:
    want = truth(syn, ref)
    v = syn.at(ref)
    for body, ids in want.items():
        assert {a.id for a in v.by_body(body)} == ids, f"body {body}"
    return want


def points_in(base0: np.ndarray, svs: list[int], n: int, seed: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    where = np.argwhere(np.isin(base0, svs))
    return [tuple(int(c) for c in where[i]) for i in rng.choice(len(where), size=n, replace=False)]  # type: ignore


def test_by_body_follows_merge_cleave_and_split(syn: AnnotationInstance, repo: Repository, base0: np.ndarray,
                                                sample: SampleDataset) -> None:
    body_of = sample.body_map()
    lmv = syn.labelmap.at("main")
    a_body, b_body = int(lmv.body_at((10, 60, 60))), int(lmv.body_at((10, 200, 200)))
    assert a_body != b_body
    a_svs, b_svs = lmv.supervoxels(a_body), lmv.supervoxels(b_body)
    assert len(a_svs) >= 2
    v = syn.at("main")
    made = {}
    for i, p in enumerate(points_in(base0, a_svs, 6, 1) + points_in(base0, b_svs, 6, 2)):
        made[p] = v.add("pre" if i % 2 == 0 else "post", p, tags=["auto"])
    assert {a.id for a in v.by_body(a_body)} == {a.id for p, a in made.items() if body_of[int(base0[p])] == a_body}
    assert_by_body(syn, "main")
    root = repo.commit("main", "synapses")
    child = repo.new_version(root)

    # a merge of bodies: the merged body owns both bodies' synapses, and no annotation key was written
    lm_child = syn.labelmap.at(child.uuid)
    lm_child.merge(a_body, [b_body])
    merged = {a.id for a in syn.at(child.uuid).by_body(a_body)}
    assert merged == {a.id for a in made.values()}
    with repo.read(child) as view:
        assert list(view.changes("synapses")) == []
    assert syn.at(child.uuid).body_of(next(iter(made.values())).id) == a_body
    # the committed parent still answers with its own map
    assert {a.id for a in syn.at(root.uuid).by_body(a_body)} < merged

    # a cleave: the cleaved supervoxels' synapses go to the new body
    cleaved = [s for s in a_svs if any(int(base0[p]) == s for p in made)][:1]
    new_body = lm_child.cleave(a_body, cleaved)
    want = assert_by_body(syn, child.uuid)
    assert want[new_body] == {a.id for p, a in made.items() if int(base0[p]) in cleaved}

    # a supervoxel split: the synapses' recorded supervoxel is retired; the voxel under each decides
    sv = cleaved[0]
    inside = np.argwhere(base0 == sv)
    half = inside[inside[:, 2] < np.median(inside[:, 2])]
    lm_child.split_supervoxel(sv, half)
    want = assert_by_body(syn, child.uuid)
    assert sum(len(ids) for ids in want.values()) == len(made)
    with repo.read(child) as view:
        assert list(view.changes("synapses")) == []

    # undo of the labelmap edits brings the ownership back, still without annotation writes
    for _ in range(3):
        lm_child.undo()
    assert {a.id for a in syn.at(child.uuid).by_body(b_body)} == \
        {a.id for p, a in made.items() if body_of[int(base0[p])] == b_body}
    assert_by_body(syn, child.uuid)


def test_edits_queries_undo_and_errors(syn: AnnotationInstance, repo: Repository, base0: np.ndarray) -> None:
    v = syn.at("main")
    pre = v.add("pre", (5, 10, 10), properties={"score": 0.5})
    post = v.add("post", (5, 10, 14), id=1000)
    v.relate(pre.id, post.id)
    assert v.get(post.id).relationships[0].rel == "PostSynTo"
    assert [r.to for r in v.get(pre.id).relationships] == [post.id]
    with pytest.raises(AnnotationExistsError) as e1:
        v.add("point", (0, 0, 0), id=1000)
    assert isinstance(e1.value, ConflictError)
    nxt = v.add("point", (1, 1, 1))
    assert nxt.id > 1000  # handed-out ids pass the ones chosen by callers
    with pytest.raises(AnnotationArgumentError):
        v.relate(post.id, pre.id, "PreSynTo")  # a post is never PreSynTo
    with pytest.raises(AnnotationArgumentError) as e2:
        v.add("pre", (64, 0, 0))  # outside the labelmap (z is 0..63)
    assert isinstance(e2.value, ArgumentError) and "outside" in str(e2.value)
    for bad in ((1, 2), ("a", 1, 2), (1.5, 0, 0), None):
        with pytest.raises(AnnotationArgumentError):
            v.add("pre", bad)  # type: ignore[arg-type]
    with pytest.raises(AnnotationArgumentError):
        v.add("synapse", (0, 0, 0))
    with pytest.raises(AnnotationArgumentError):
        v.set_tags(pre.id, ["bad\x00tag"])
    with pytest.raises(AnnotationArgumentError):
        v.set_properties(pre.id, {"x": float("nan")})
    with pytest.raises(UnknownAnnotationError) as e3:
        v.move(424242, (0, 0, 0))
    assert isinstance(e3.value, NotFoundError)

    v.move(pre.id, (30, 100, 100))
    assert [a.id for a in v.in_box((25, 90, 90), (35, 110, 110))] == [pre.id]
    assert pre.id not in {a.id for a in v.in_box((0, 0, 0), (10, 20, 20))}
    v.set_tags(pre.id, ["todo"])
    assert [a.id for a in v.with_tag("todo")] == [pre.id]
    v.delete(post.id)  # the partner loses its relationship
    assert v.get(pre.id).relationships == ()

    v.undo()  # the delete
    assert [r.to for r in v.get(pre.id).relationships] == [post.id]
    v.undo()  # the tags
    assert v.with_tag("todo") == []
    v.redo()
    assert [a.id for a in v.with_tag("todo")] == [pre.id]
    ops = [m.operation for m in v.mutations()]
    assert ops == ["add", "add", "relate", "add", "move", "set-tags", "delete", "undo", "undo", "redo"]
    assert all(isinstance(m, AnnotationMutation) for m in v.mutations())

    done = repo.commit("main", "edits")
    with pytest.raises(CommittedVersionError):
        syn.at(done.uuid).add("pre", (0, 0, 0))
    child = repo.new_version(done)
    with pytest.raises(NothingToUndoError):
        syn.at(child.uuid).undo()  # a child starts with empty stacks; the parent stays as committed

    # reopening: the instance and its records survive a new repository handle
    path = repo.path
    repo.close()
    with open_repository(path) as again:
        reopened = open_annotation_instance(again, "synapses")
        assert reopened.at(done.uuid).get(pre.id).tags == ("todo",)
        assert reopened.labelmap.name == "seg"


def test_damaged_records_are_typed_errors() -> None:
    from napari_shardscope.core.annotation.model import Annotation, Stored, encode_record

    good = encode_record(Stored(Annotation(7, "pre", (1, 2, 3), ("t",)), 99))
    assert decode_record(7, good, key="k").supervoxel == 99
    for bad in (good[:10], good[:-1], good + b"x", b"\x02" + good[1:], good[:1] + b"\x09" + good[2:],
                good[:-len(b'{"tags":["t"]}')] + b'{"tags":[1]}'.ljust(len(b'{"tags":["t"]}'))):
        with pytest.raises(AnnotationRecordError):
            decode_record(7, bad, key="k")
    m = AnnotationMutation(1, "add", (7,), {}, "u", 0.0).to_bytes()
    for bad in (m[:5], m[:-1], m + b"\x00", b"XXXX" + m[4:]):
        with pytest.raises(AnnotationRecordError):
            AnnotationMutation.from_bytes(bad)


# -- branch merges ------------------------------------------------------------------------------------


def two_branches(syn: AnnotationInstance, repo: Repository) -> tuple[dict[str, int], str, str]:
    v = syn.at("main")
    ids = {"pre": v.add("pre", (5, 10, 10)).id, "post": v.add("post", (5, 10, 20)).id,
           "loose": v.add("point", (40, 200, 200)).id}
    root = repo.commit("main", "base")
    repo.new_version(root)
    alt = repo.new_version(root, "alt")
    return ids, "main", alt.uuid


def test_branch_merge_of_disjoint_edits(syn: AnnotationInstance, repo: Repository) -> None:
    ids, main, alt = two_branches(syn, repo)
    syn.at(main).move(ids["pre"], (6, 11, 11))
    added = syn.at(main).add("point", (7, 7, 7), tags=["mine"])
    syn.at(alt).move(ids["loose"], (41, 201, 201))
    syn.at(alt).set_tags(ids["loose"], ["theirs"])
    theirs_new = syn.at(alt).add("post", (8, 8, 8))
    repo.commit(main, "ours")
    repo.commit(alt, "theirs")
    plan = plan_annotation_merge(syn, "main", "alt")
    assert plan.conflicts == () and set(plan.take) == {ids["loose"], theirs_new.id}
    result = merge_annotation_branches(syn, "main", "alt")
    m = syn.at(result.version.uuid)
    assert m.get(ids["pre"]).point == (6, 11, 11)
    assert m.get(ids["loose"]).point == (41, 201, 201) and m.get(ids["loose"]).tags == ("theirs",)
    assert {a.id for a in m.all()} == {*ids.values(), added.id, theirs_new.id}
    assert [a.id for a in m.with_tag("theirs")] == [ids["loose"]]
    assert [a.id for a in m.in_box((40, 199, 199), (42, 203, 203))] == [ids["loose"]]
    assert m.in_box((39, 199, 199), (41, 201, 201)) == []  # its old place is gone from the spatial index
    assert result.mutation.operation == "merge-branches"
    m.undo()  # one undo takes the whole merge back to ours
    assert m.get(ids["loose"]).point == (40, 200, 200) and m.find(theirs_new.id) is None


def test_branch_merge_conflicts_named_by_annotation(syn: AnnotationInstance, repo: Repository) -> None:
    ids, main, alt = two_branches(syn, repo)
    syn.at(main).move(ids["loose"], (30, 30, 30))
    syn.at(alt).move(ids["loose"], (31, 31, 31))
    syn.at(main).relate(ids["pre"], ids["post"])  # rewrites both ends
    syn.at(alt).delete(ids["post"])  # so this is a conflict of "post"
    syn.at(alt).set_properties(ids["pre"], {"score": 1})  # and of "pre"
    repo.commit(main, "ours")
    repo.commit(alt, "theirs")
    count = repo.version_count()
    with pytest.raises(AnnotationMergeConflictError) as exc:
        merge_annotation_branches(syn, "main", "alt")
    assert isinstance(exc.value, ConflictError)
    assert sorted(c.key for c in exc.value.unresolved) == sorted(
        f"annotation:{ids[k]}" for k in ("loose", "post", "pre"))
    assert repo.version_count() == count  # nothing written
    loose = next(c for c in exc.value.unresolved if c.id == ids["loose"])
    assert loose.ours is not None and loose.ours.point == (30, 30, 30)
    assert loose.theirs is not None and loose.theirs.point == (31, 31, 31)
    with pytest.raises(AnnotationArgumentError):
        merge_annotation_branches(syn, "main", "alt", resolutions={"annotation:999": "ours"}, policy="ours")

    result = merge_annotation_branches(syn, "main", "alt", policy="ours",
                                       resolutions={f"annotation:{ids['loose']}": "theirs"})
    m = syn.at(result.version.uuid)
    assert m.get(ids["loose"]).point == (31, 31, 31)
    assert [a.id for a in m.in_box((31, 31, 31), (32, 32, 32))] == [ids["loose"]]
    assert m.in_box((30, 30, 30), (31, 31, 31)) == []  # no stale spatial key of ours' place
    assert m.get(ids["post"]).relationships[0].to == ids["pre"]  # ours kept the synapse whole
    assert m.get(ids["pre"]).properties == {}
    with repo.read(result.version) as view:  # every spatial key names a record at its block
        for key in view.keys("synapses", prefix=K.SPATIAL_PREFIX):
            a = m.get(K.id_of_index_key(key))
            assert key == K.spatial_key(tuple(p // b for p, b in zip(a.point, syn.block, strict=True)), a.id)


def test_merge_with_labelmap_edited_on_both_sides(syn: AnnotationInstance, repo: Repository,
                                                  base0: np.ndarray) -> None:
    ids, main, alt = two_branches(syn, repo)
    lm = syn.labelmap
    a_body = lm.at(main).body_at((10, 60, 60))
    b_body = lm.at(main).body_at((10, 200, 200))
    c_body = lm.at(main).body_at((50, 20, 230))
    assert len({a_body, b_body, c_body}) == 3
    lm.at(main).merge(a_body, [b_body])  # ours: a labelmap edit and an annotation edit
    syn.at(main).move(ids["pre"], (10, 60, 60))
    lm.at(alt).merge(c_body, [lm.at(alt).body_at((50, 230, 20))])  # theirs: the same
    syn.at(alt).move(ids["post"], (10, 200, 200))
    repo.commit(main, "ours")
    repo.commit(alt, "theirs")
    with pytest.raises(ConflictError):  # the annotation merge alone cannot merge two labelmap histories
        merge_annotation_branches(syn, "main", "alt")
    from napari_shardscope.core.annotation import merge_with_labelmap

    result = merge_with_labelmap(lm, [syn], "main", "alt", message="both")
    m = syn.at(result.version.uuid)
    assert m.get(ids["pre"]).point == (10, 60, 60) and m.get(ids["post"]).point == (10, 200, 200)
    # the synapse's two ends now lie in one merged body of the merge version's labelmap
    assert m.body_of(ids["pre"]) == m.body_of(ids["post"]) == a_body
    assert {a.id for a in m.by_body(a_body)} >= {ids["pre"], ids["post"]}
    assert_by_body(syn, result.version.uuid)
    assert result.annotations["synapses"].mutation.operation == "merge-branches"


def test_instance_binding_and_format_are_checked(syn: AnnotationInstance, repo: Repository) -> None:
    from napari_shardscope.core.errors import UnsupportedError
    from napari_shardscope.core.versioned.migrate import migrate_repository

    with pytest.raises(AnnotationArgumentError):
        create_annotation_instance(repo, "bad", labelmap="synapses")  # not a labelmap
    repo.create_instance("future", "annotation", {"format": 99, "labelmap": "seg"})
    with pytest.raises(UnsupportedError, match="format 99"):
        open_annotation_instance(repo, "future")
    with pytest.raises(UnsupportedError, match="format 99"):
        migrate_repository(repo)  # the annotation step refuses what it cannot read
    repo.create_instance("broken", "annotation", {"labelmap": 5})
    with pytest.raises(AnnotationRecordError):
        open_annotation_instance(repo, "broken")


@settings(max_examples=300)
@given(body=st.binary(max_size=200), cut=st.integers(0, 80), nest=st.integers(0, 3000))
def test_hostile_records_and_log_entries_give_only_typed_errors(body: bytes, cut: int, nest: int) -> None:
    from napari_shardscope.core.annotation.model import Annotation, Relationship, Stored, encode_record

    good = encode_record(Stored(Annotation(7, "pre", (1, 2, 3), ("t",), {"s": 1}, (Relationship("PreSynTo", 8),)), 9))
    deep = b"[" * nest + b"]" * nest
    head = good[:good.index(b"{")]
    for raw in (body, good[:cut] + body, head[:-4] + len(deep).to_bytes(4, "little") + deep):
        with contextlib.suppress(AnnotationRecordError):
            decode_record(7, raw, key="k")
    m = AnnotationMutation(1, "add", (7,), {"a": [1]}, "u", 0.0, None,
                           (KeyChange(b"i1", None, b"x"), KeyChange(b"s1", b"", None))).to_bytes()
    assert AnnotationMutation.from_bytes(m).changes[1] == KeyChange(b"s1", b"", None)
    for raw in (body, m[:cut] + body, m[:9] + len(deep).to_bytes(4, "little")[:0] + body):
        with contextlib.suppress(AnnotationRecordError):
            AnnotationMutation.from_bytes(raw)
    text = b"[" * nest + b"]" * nest
    crafted = b"SSAN\x01" + len(text).to_bytes(4, "little") + text + b"\x00\x00\x00\x00"
    with pytest.raises(AnnotationRecordError):
        AnnotationMutation.from_bytes(crafted)


def test_bad_query_arguments_are_typed(syn: AnnotationInstance) -> None:
    from napari_shardscope.core.labelmap import UnknownLabelError

    v = syn.at("main")
    v.add("pre", (3, 3, 3))
    for lo, hi in (((0, 0), (1, 1, 1)), (("a", 0, 0), (1, 1, 1)), (None, (1, 1, 1)), ((0.5, 0, 0), (9, 9, 9))):
        with pytest.raises(AnnotationArgumentError):
            v.in_box(lo, hi)  # type: ignore[arg-type]
    assert [a.point for a in v.in_box((-5, -5, -5), (10**6, 10**6, 10**6))] == [(3, 3, 3)]
    assert v.in_box((9, 9, 9), (1, 1, 1)) == []
    for bad in (0, -1, 2**64, "7", True):
        with pytest.raises(AnnotationArgumentError):
            v.get(bad)  # type: ignore[arg-type]
    with pytest.raises(AnnotationArgumentError):
        v.with_tag("")
    with pytest.raises(UnknownLabelError):
        v.by_body(2**63)
