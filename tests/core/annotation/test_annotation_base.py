"""An annotation instance whose base is imported: a synapse table (CAVE, neuPrint; Parquet, CSV, Feather) or a
precomputed annotation source written by the ``neuroglancer`` wheel.

Every query must see base + edits exactly as if the base had been added with ``add`` (the peer instance
below is built that way); the versioned store holds only edits (a tombstone for a deleted base
annotation); hostile tables get :class:`AnnotationTableError` naming the file, the column and the row.
The model machine of ``test_annotation_model`` runs again over an instance that starts from a base.
"""

from __future__ import annotations

import functools
import itertools
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from napari_shardscope.core.annotation import (
    AnnotationInstance,
    create_annotation_instance,
    open_annotation_instance,
)
from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.base import TOMBSTONE
from napari_shardscope.core.annotation.base_import import SynapseColumns, synapse_ids
from napari_shardscope.core.annotation.errors import AnnotationArgumentError, AnnotationTableError
from napari_shardscope.core.errors import FormatError
from napari_shardscope.core.labelmap import Labelmap, create_labelmap
from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from tests.core.annotation.test_annotation_model import BLOCK, SHAPE, AnnotationMachine, Branch, base_volume
from tests.hypothesis_depth import examples

N = 40  # synapses in the tables below


def _repo(tmp: Path) -> tuple[Repository, Labelmap]:
    path, _ = base_volume()
    repo = create_repository(tmp / "repo")
    return repo, create_labelmap(repo, "seg", path, block=BLOCK)


def _synapses(n: int = N, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hi = [SHAPE[2], SHAPE[1], SHAPE[0]]  # x, y, z
    return {"id": rng.permutation(np.arange(100, 100 + 3 * n))[:n].astype(np.int64),
            "pre": rng.integers(0, hi, size=(n, 3)), "post": rng.integers(0, hi, size=(n, 3)),
            "size": rng.integers(1, 500, n), "score": rng.random(n), "valid": rng.random(n) < 0.5}


def cave_table(s: dict[str, np.ndarray], *, split: bool = False) -> pa.Table:
    cols: dict[str, Any] = {"id": s["id"]}
    for side in ("pre", "post"):
        if split:
            for i, a in enumerate("xyz"):
                cols[f"{side}_pt_position_{a}"] = s[side][:, i]
        else:
            cols[f"{side}_pt_position"] = pa.array(s[side].tolist(), type=pa.list_(pa.int64()))
    cols.update(size=s["size"], score=s["score"], valid=s["valid"], created=["2024-01-01"] * len(s["id"]))
    return pa.table(cols)


def neuprint_table(s: dict[str, np.ndarray]) -> pa.Table:
    cols: dict[str, Any] = {}
    for side in ("pre", "post"):
        for i, a in enumerate("xyz"):
            cols[f"{a}_{side}"] = s[side][:, i]
    cols.update(bodyId_pre=s["size"] * 3, bodyId_post=s["size"] * 5, confidence_pre=s["score"],
                confidence_post=1 - s["score"], roi_pre=["EB"] * len(s["size"]))
    return pa.table(cols)


def peer(repo: Repository, lm: Labelmap, s: dict[str, np.ndarray], props: Any, ids: np.ndarray
         ) -> AnnotationInstance:
    """The same synapses added one by one (the behaviour a base must reproduce)."""
    inst = create_annotation_instance(repo, "peer", labelmap=lm)
    v = inst.at("main")
    a_ids, b_ids = synapse_ids(ids)
    for i in range(len(ids)):
        pre_props, post_props = props(i)
        a = v.add("pre", s["pre"][i][::-1].tolist(), id=int(a_ids[i]), properties=pre_props)
        b = v.add("post", s["post"][i][::-1].tolist(), id=int(b_ids[i]), properties=post_props)
        v.relate(a.id, b.id)
    return inst


def assert_same_queries(x: AnnotationInstance, y: AnnotationInstance, ref: str = "main") -> None:
    vx, vy = x.at(ref), y.at(ref)
    assert vx.all() == vy.all()
    for lo, hi in (((0, 0, 0), SHAPE), ((1, 3, 2), (5, 17, 19)), ((2, 8, 8), (3, 9, 9))):
        assert vx.in_box(lo, hi) == vy.in_box(lo, hi)
    lmv = x.labelmap.at(ref)
    bodies = {lmv.body_at(a.point) for a in vx.all()} - {0}
    for body in sorted(bodies)[:4]:
        assert vx.by_body(body) == vy.by_body(body)
    for a in vx.all()[:6]:
        assert vx.get(a.id) == vy.get(a.id)
        assert vx.body_of(a.id) == vy.body_of(a.id)


def cave_props(s: dict[str, np.ndarray]) -> Any:
    def props(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        p = {"size": int(s["size"][i]), "score": float(s["score"][i]), "valid": bool(s["valid"][i])}
        return p, p
    return props


@pytest.mark.parametrize("fmt", ["parquet", "feather", "split-csv", "split-parquet"])
def test_cave_table_base_equals_the_same_synapses_added(fmt: str, tmp_path: Path) -> None:
    repo, lm = _repo(tmp_path)
    s = _synapses()
    table = cave_table(s, split=fmt == "split-csv")
    path = tmp_path / f"syn.{fmt.replace('split-', '')}"
    if fmt.endswith("parquet"):
        pq.write_table(table, path)
    elif fmt == "feather":
        feather.write_feather(table, path)
    else:  # a CSV holds no list columns: CAVE's CSVs spell positions as _x/_y/_z columns
        pacsv.write_csv(table, path)
    syn = create_annotation_instance(repo, "syn", labelmap=lm, base=path)
    assert_same_queries(syn, peer(repo, lm, s, cave_props(s), s["id"]))
    # the base is beside the repository, and no annotation record entered the versioned store
    assert (tmp_path / "repo" / "annotation-bases" / "syn" / "records.parquet").exists()
    with repo.read("main") as view:
        assert list(view.keys("syn", prefix=K.RECORD_PREFIX)) == []
        assert list(view.keys("syn", prefix=K.SPATIAL_PREFIX)) == []


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_neuprint_table_base_puts_pre_and_post_columns_on_their_sites(fmt: str, tmp_path: Path) -> None:
    repo, lm = _repo(tmp_path)
    s = _synapses(seed=2)
    table = neuprint_table(s)
    path = tmp_path / f"np.{fmt}"
    (pq.write_table if fmt == "parquet" else pacsv.write_csv)(table, path)
    syn = create_annotation_instance(repo, "syn", labelmap=lm, base=path)

    def props(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({"bodyId": int(s["size"][i]) * 3, "confidence": float(s["score"][i])},
                {"bodyId": int(s["size"][i]) * 5, "confidence": float(1 - s["score"][i])})

    # neuPrint rows have no id: the row number is the synapse id
    assert_same_queries(syn, peer(repo, lm, s, props, np.arange(N)))
    assert syn.at("main").get(1).relationships[0].to == 2


def test_table_in_nm_with_voxel_size_and_named_columns(tmp_path: Path) -> None:
    repo, lm = _repo(tmp_path)
    s = _synapses(seed=3)
    vs = np.asarray([8.0, 8.0, 40.0])
    t = pa.table({"sid": s["id"], "ax": s["pre"][:, 0] * vs[0] + 3, "ay": s["pre"][:, 1] * vs[1],
                  "az": s["pre"][:, 2] * vs[2] + 39.5, "bx": s["post"][:, 0] * vs[0], "by": s["post"][:, 1] * vs[1],
                  "bz": s["post"][:, 2] * vs[2], "size": s["size"], "junk": s["score"]})
    pq.write_table(t, tmp_path / "nm.parquet")
    cols = SynapseColumns(pre=("ax", "ay", "az"), post=("bx", "by", "bz"), id="sid", properties=("size",))
    syn = create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "nm.parquet", columns=cols,
                                     voxel_size=vs.tolist())

    def props(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"size": int(s["size"][i])}, {"size": int(s["size"][i])}

    assert_same_queries(syn, peer(repo, lm, s, props, s["id"]))


def test_edits_over_the_base_are_records_and_tombstones_and_undo_restores_the_base(tmp_path: Path) -> None:
    repo, lm = _repo(tmp_path)
    s = _synapses()
    pq.write_table(cave_table(s), tmp_path / "syn.parquet")
    syn = create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "syn.parquet")
    other = peer(repo, lm, s, cave_props(s), s["id"])
    pre, post = (int(x[0]) for x in synapse_ids(s["id"][:1]))
    pre2, post2 = (int(x[0]) for x in synapse_ids(s["id"][1:2]))
    for inst in (syn, other):
        v = inst.at("main")
        v.move(pre, (1, 2, 3))
        v.set_tags(post, ["checked"])
        v.delete(pre2)
        added = v.add("point", (0, 0, 0), id=7)
    assert_same_queries(syn, other)
    # ids the instance hands out start above the base's
    top = int(synapse_ids(s["id"])[1].max())
    assert syn.at("main").add("point", (0, 0, 1)).id > top
    syn.at("main").undo()
    assert [a.id for a in syn.at("main").with_tag("checked")] == [post]
    with repo.read("main") as view:
        assert view.get("syn", K.record_key(pre2)) == TOMBSTONE
        records = {K.id_of_record_key(k) for k in view.keys("syn", prefix=K.RECORD_PREFIX)}
    # only what the edits changed: the moved, tagged, deleted, added ones and the deleted one's partner
    assert records == {pre, post, pre2, post2, added.id}
    for inst in (syn, other):
        for _ in range(4):
            inst.at("main").undo()
    assert_same_queries(syn, other)
    with repo.read("main") as view:
        assert {K.id_of_record_key(k) for k in view.keys("syn", prefix=K.RECORD_PREFIX)} == set()
    # an explicit id of a base annotation is taken; of a deleted one, free again
    from napari_shardscope.core.annotation import AnnotationExistsError

    with pytest.raises(AnnotationExistsError):
        syn.at("main").add("point", (0, 0, 0), id=pre)


# -- precomputed annotations written by the neuroglancer wheel ------------------------------------------------
def test_precomputed_base_from_the_neuroglancer_wheel(tmp_path: Path) -> None:
    neuroglancer = pytest.importorskip("neuroglancer")
    from neuroglancer import write_annotations as ng_write

    space = neuroglancer.CoordinateSpace(names=["x", "y", "z"], units="nm", scales=[4, 4, 40])
    specs = [neuroglancer.AnnotationPropertySpec(id="score", type="float32"),
             neuroglancer.AnnotationPropertySpec(id="kind", type="uint8", enum_values=[0, 1],
                                                 enum_labels=["chemical", "electrical"]),
             neuroglancer.AnnotationPropertySpec(id="color", type="rgb")]
    s = _synapses(seed=4)
    lines = ng_write.AnnotationWriter(space, "line", relationships=["pre_segment", "post_segment"], properties=specs)
    for i in range(N):
        lines.add_line(s["pre"][i].tolist(), s["post"][i].tolist(), id=int(s["id"][i]), score=float(s["score"][i]),
                       kind=i % 2, color=(255, 0, 0), pre_segment=[int(s["size"][i])], post_segment=[])
    lines.write(tmp_path / "lines")
    points = ng_write.AnnotationWriter(space, "point", properties=specs[:1])
    for i in range(N):
        points.add_point(s["pre"][i].tolist(), id=int(s["id"][i]), score=0.5)
    points.write(tmp_path / "points")

    repo, lm = _repo(tmp_path)
    syn = create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "lines", voxel_size=(4, 4, 40))

    def props(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        p = {"score": float(np.float32(s["score"][i])), "kind": ["chemical", "electrical"][i % 2],
             "pre_segment": int(s["size"][i]), "post_segment": 0}
        return p, p

    assert_same_queries(syn, peer(repo, lm, s, props, s["id"]))
    pts = create_annotation_instance(repo, "pts", labelmap=lm, base=tmp_path / "points")
    v = pts.at("main")
    assert [a.id for a in v.all()] == sorted(s["id"].tolist())
    a = v.get(int(s["id"][0]))
    assert a.kind == "point" and a.point == tuple(s["pre"][0][::-1].tolist()) and a.properties == {"score": 0.5}


def test_a_precomputed_source_in_micrometres_lands_where_its_nanometre_twin_does_and_seconds_are_refused(
        tmp_path: Path) -> None:
    """A source's dimensions are read through Neuroglancer's length units: the same points written in µm
    (scales 0.004, 0.004, 0.04) land on the voxels the nm source's (4, 4, 40) do; a unit that is not a length
    is a typed error naming the source."""
    neuroglancer = pytest.importorskip("neuroglancer")
    from neuroglancer import write_annotations as ng_write

    s = _synapses(seed=5)
    for name, units, scales in (("nm", "nm", [4, 4, 40]), ("um", "um", [0.004, 0.004, 0.04]),
                                ("s", ["s", "nm", "nm"], [4, 4, 40])):
        space = neuroglancer.CoordinateSpace(names=["x", "y", "z"], units=units, scales=scales)
        writer = ng_write.AnnotationWriter(space, "point")
        for i in range(N):
            writer.add_point(s["pre"][i].tolist(), id=int(s["id"][i]))
        writer.write(tmp_path / name)
    repo, lm = _repo(tmp_path)
    nm, um = (create_annotation_instance(repo, n, labelmap=lm, base=tmp_path / n, voxel_size=(4, 4, 40)).at("main")
              for n in ("nm", "um"))
    assert [(a.id, a.point) for a in um.all()] == [(a.id, a.point) for a in nm.all()]
    assert {a.point for a in nm.all()} == {tuple(p[::-1].tolist()) for p in s["pre"]}
    with pytest.raises(AnnotationTableError, match=r"dimension unit 's' is not a length") as info:
        create_annotation_instance(repo, "s", labelmap=lm, base=tmp_path / "s", voxel_size=(4, 4, 40))
    assert str(tmp_path / "s") in str(info.value)


# -- hostile tables -------------------------------------------------------------------------------------------
def _hostile(tmp_path: Path, change: Any, name: str = "bad.parquet") -> Path:
    s = _synapses()
    table = change(cave_table(s, split=True))
    path = tmp_path / name
    (pq.write_table if name.endswith(".parquet") else pacsv.write_csv)(table, path)
    return path


def _set(table: pa.Table, name: str, values: Any) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, pa.array(values))


HOSTILE = {
    "text coordinates": (lambda t: _set(t, "pre_pt_position_x", ["a"] * N), r"'pre_pt_position_x' is string"),
    "NaN coordinate": (lambda t: _set(t, "post_pt_position_y", [1.0] * 7 + [float("nan")] + [1.0] * (N - 8)),
                       r"post_pt_position_.*row 7: (no value|coordinate .* not a finite)"),
    "outside the labelmap": (lambda t: _set(t, "pre_pt_position_z", [0] * 3 + [SHAPE[0]] + [0] * (N - 4)),
                             r"row 3: voxel .* outside the labelmap"),
    "negative": (lambda t: _set(t, "pre_pt_position_x", [0] * 5 + [-1] + [0] * (N - 6)), r"row 5: voxel .* outside"),
    "duplicate ids": (lambda t: _set(t, "id", [5, *list(range(10, 10 + N - 2)), 5]),
                      rf"'id': rows 0 and {N - 1} have the same id 5"),
    "float ids": (lambda t: _set(t, "id", [1.5] * N), r"'id' is float64, not integer ids"),
    "empty cell": (lambda t: _set(t, "size", [1] * 9 + [None] + [1] * (N - 10)), r"'size', row 9: no value"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_hostile_tables_get_typed_errors_naming_file_column_and_row(case: str, suffix: str, tmp_path: Path) -> None:
    change, message = HOSTILE[case]
    path = _hostile(tmp_path, change, "bad" + suffix)
    repo, lm = _repo(tmp_path)
    with pytest.raises(AnnotationTableError, match=message) as err:
        create_annotation_instance(repo, "syn", labelmap=lm, base=path)
    assert str(path) in str(err.value)
    assert "syn" not in {i.name for i in repo.instances()}  # nothing half-made


def test_truncated_parquet_and_a_short_position_list(tmp_path: Path) -> None:
    s = _synapses()
    pq.write_table(cave_table(s), tmp_path / "ok.parquet")
    data = (tmp_path / "ok.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    repo, lm = _repo(tmp_path)
    with pytest.raises(AnnotationTableError, match="not a readable table") as err:
        create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "cut.parquet")
    assert isinstance(err.value, FormatError) and "cut.parquet" in str(err.value)
    t = cave_table(s)
    short = [[1, 2, 3]] * 11 + [[1, 2]] + [[1, 2, 3]] * (N - 12)
    t = t.set_column(t.column_names.index("pre_pt_position"), "pre_pt_position",
                     pa.array(short, type=pa.list_(pa.int64())))
    pq.write_table(t, tmp_path / "short.parquet")
    with pytest.raises(AnnotationTableError, match=r"'pre_pt_position', row 11: 2 values"):
        create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "short.parquet")
    pq.write_table(pa.table({"a": [1], "b": [2]}), tmp_path / "what.parquet")
    with pytest.raises(AnnotationArgumentError, match="cannot tell which columns"):
        create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "what.parquet")


def test_a_base_table_that_changed_is_refused(tmp_path: Path) -> None:
    repo, lm = _repo(tmp_path)
    pq.write_table(cave_table(_synapses()), tmp_path / "syn.parquet")
    create_annotation_instance(repo, "syn", labelmap=lm, base=tmp_path / "syn.parquet")
    records = tmp_path / "repo" / "annotation-bases" / "syn" / "records.parquet"
    t = pq.read_table(records)
    pq.write_table(t.slice(0, 10), records)
    repo.close()
    again = open_repository(tmp_path / "repo")
    with pytest.raises(FormatError, match="must not change"):
        open_annotation_instance(again, "syn").at("main").get(1)


# -- the model, over a base -------------------------------------------------------------------------------------
_dirs = itertools.count()


@functools.cache
def _model_table() -> tuple[Path, dict[int, Any]]:
    """A small CAVE table and the model state it stands for (ids 2S+1, 2S+2; property 'score' on both sites)."""
    root = Path(tempfile.mkdtemp(prefix="annotation-base-model-"))
    rng = np.random.default_rng(9)
    n = 5
    sid = np.arange(n, dtype=np.int64) * 3 + 1
    pre = rng.integers(0, [SHAPE[2], SHAPE[1], SHAPE[0]], size=(n, 3))
    post = rng.integers(0, [SHAPE[2], SHAPE[1], SHAPE[0]], size=(n, 3))
    score = rng.integers(-5, 5, n)
    pq.write_table(pa.table({"id": sid, "pre_pt_position": pre.tolist(), "post_pt_position": post.tolist(),
                             "score": score}), root / "syn.parquet")
    state: dict[int, Any] = {}
    a, b = synapse_ids(sid)
    for i in range(n):
        p = (("score", int(score[i])),)
        state[int(a[i])] = ("pre", tuple(pre[i][::-1].tolist()), (), p, frozenset({("PreSynTo", int(b[i]))}))
        state[int(b[i])] = ("post", tuple(post[i][::-1].tolist()), (), p, frozenset({("PostSynTo", int(a[i]))}))
    return root, state


class BasedAnnotationMachine(AnnotationMachine):
    """The model machine of test_annotation_model, on an instance that starts from an imported base."""

    def __init__(self) -> None:
        super().__init__()
        table, state = _model_table()
        self.inst = create_annotation_instance(self.repo, "based", labelmap=self.inst.labelmap,
                                               base=table / "syn.parquet",
                                               base_dir=table / f"base-{next(_dirs)}")
        self.cur = Branch(self.repo.root.uuid, dict(state))

    def check(self, uuid: str, state: dict[int, Any]) -> None:
        v = self.inst.at(uuid)
        got = {a.id: (a.kind, a.point, a.tags, tuple(sorted(a.properties.items())),
                      frozenset((r.rel, r.to) for r in a.relationships)) for a in v.all()}
        assert got == state
        for tag in ("a", "b", "checked"):
            assert [a.id for a in v.with_tag(tag)] == sorted(i for i, rec in state.items() if tag in rec[2])
        for aid in sorted(state)[:3]:
            assert v.body_of(aid) == int(self.svs[state[aid][1]])

    @rule(data=st.data())
    def by_body(self, data: st.DataObject) -> None:
        if not self.cur.state:
            return
        aid = data.draw(st.sampled_from(sorted(self.cur.state)))
        body = int(self.svs[self.cur.state[aid][1]])
        if body == 0:
            return
        want = sorted(i for i, rec in self.cur.state.items() if int(self.svs[rec[1]]) == body)
        assert [a.id for a in self.v.by_body(body)] == want


TestBasedAnnotationModel = BasedAnnotationMachine.TestCase
# Examples bounded for the default run (tests/hypothesis_depth.py): each step's invariant reads every annotation back
# through each index, so the cost is examples x steps; the default run keeps every step of a long sequence (25
# examples before, 10 now) and ``--hypothesis-profile long`` searches twenty times as many.
TestBasedAnnotationModel.settings = settings(max_examples=examples(10), stateful_step_count=20, deadline=None)
