"""Exported annotations read back by independent code: the ``neuroglancer`` wheel's ``AnnotationReader``
(sharded indexes through TensorStore's ``neuroglancer_uint64_sharded`` kvstore) finds every synapse by id,
at its voxel, related to the body that owns it *at the exported version* — after a merge, a cleave and a
supervoxel split of the sample labelmap — and the CLI writes the same through ``shardscope export``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import (
    AnnotationArgumentError,
    AnnotationInstance,
)
from napari_shardscope.core.annotation.export import PAIR_ID_BIT, export_annotations
from napari_shardscope.core.errors import ArgumentError, RefusedDestinationError
from napari_shardscope.core.versioned import Repository
from tests.cli_batch import run_commands

AnnotationReader = pytest.importorskip("neuroglancer.read_precomputed_annotations").AnnotationReader


def points_in(base0: np.ndarray, svs: list[int], n: int, seed: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    where = np.argwhere(np.isin(base0, svs))
    return [tuple(int(c) for c in where[i]) for i in rng.choice(len(where), size=n, replace=False)]  # type: ignore


def centre(p: tuple[int, int, int]) -> list[float]:
    """Where a (z, y, x) voxel's annotation lies in the collection: x, y, z, at the voxel's centre."""
    return [p[2] + 0.5, p[1] + 0.5, p[0] + 0.5]


def synapses(syn: AnnotationInstance, base0: np.ndarray) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """Pre sites in body A paired with post sites in body B and the other way; one unpaired point."""
    lmv = syn.labelmap.at("main")
    a_body, b_body = int(lmv.body_at((10, 60, 60))), int(lmv.body_at((10, 200, 200)))
    assert a_body != b_body
    in_a = points_in(base0, lmv.supervoxels(a_body), 8, 1)
    in_b = points_in(base0, lmv.supervoxels(b_body), 8, 2)
    v = syn.at("main")
    pairs = {}
    for i, (p, q) in enumerate(zip(in_a, in_b, strict=True)):
        pre_p, post_p = (p, q) if i % 2 == 0 else (q, p)
        pre = v.add("pre", pre_p, properties={"confidence": 0.5 + i / 20}, tags=["auto"] if i % 3 == 0 else [])
        post = v.add("post", post_p, properties={"confidence": 0.9, "checked_by": "ann" if i % 2 else "bob"})
        v.relate(pre.id, post.id)
        pairs[post.id] = (pre.id, post.id)
    v.add("point", (3, 3, 3))
    return a_body, b_body, pairs


def check_lines(syn: AnnotationInstance, ref: str, dest: Path, pairs: dict[int, tuple[int, int]]) -> None:
    """The wheel reads every line at its sites, related to the bodies the labelmap shows under them at ``ref``."""
    reader = AnnotationReader(dest.as_uri())
    assert reader.metadata["annotation_type"].lower() == "line"
    assert [r["id"] for r in reader.metadata["relationships"]] == ["pre_segment", "post_segment"]
    v, lmv = syn.at(ref), syn.labelmap.at(ref)
    by_body: dict[str, dict[int, set[int]]] = {"pre_segment": {}, "post_segment": {}}
    for line_id, (pre_id, post_id) in pairs.items():
        got = reader.by_id[line_id]
        pre, post = v.get(pre_id), v.get(post_id)
        np.testing.assert_array_equal(np.asarray(got.point_a), centre(pre.point))
        np.testing.assert_array_equal(np.asarray(got.point_b), centre(post.point))
        want = [lmv.body_at(pre.point), lmv.body_at(post.point)]  # the oracle: the voxel under each site
        assert [[int(s) for s in segs] for segs in got.segments] == [[want[0]], [want[1]]]
        by_body["pre_segment"].setdefault(want[0], set()).add(line_id)
        by_body["post_segment"].setdefault(want[1], set()).add(line_id)
    for rel, bodies in by_body.items():
        for body, ids in bodies.items():
            assert {int(a.id) for a in reader.relationships[rel][body]} == ids, (rel, body)
    everything = {int(a.id) for a in reader.get_within_spatial_bounds()}
    assert everything == set(pairs)


@pytest.mark.parametrize("sharded", [True, False])
def test_the_wheel_reads_a_version_after_merge_cleave_and_split(syn: AnnotationInstance, repo: Repository,
                                                                base0: np.ndarray, tmp_path: Path,
                                                                sharded: bool) -> None:
    a_body, b_body, pairs = synapses(syn, base0)
    root = repo.commit("main", "synapses")
    report = syn.at(root.uuid).export(tmp_path / "root", sharded=sharded)
    assert (report.annotations, report.written, report.unpaired) == (17, 8, 1)
    check_lines(syn, root.uuid, tmp_path / "root", pairs)
    assert len(AnnotationReader((tmp_path / "root").as_uri()).relationships["pre_segment"][a_body]) == 4

    child = repo.new_version(root)
    lmv = syn.labelmap.at(child.uuid)
    lmv.merge(a_body, [b_body])  # every synapse is now inside body A: A's index holds all 8 both ways
    syn.at(child.uuid).export(tmp_path / "merged", sharded=sharded)
    check_lines(syn, child.uuid, tmp_path / "merged", pairs)
    merged = AnnotationReader((tmp_path / "merged").as_uri())
    assert len(merged.relationships["pre_segment"][a_body]) == 8
    with pytest.raises(KeyError):  # merged away: no synapse names it
        merged.relationships["post_segment"][b_body]

    # a cleave and a supervoxel split: the sites' recorded supervoxels are retired or moved
    some_pre = syn.at(child.uuid).get(next(iter(pairs.values()))[0])
    sv = lmv.supervoxel_at(some_pre.point)
    new_body = lmv.cleave(a_body, [sv])
    inside = np.argwhere(base0 == sv)
    lmv.split_supervoxel(sv, inside[inside[:, 2] < np.median(inside[:, 2])])
    syn.at(child.uuid).export(tmp_path / "split", sharded=sharded)
    check_lines(syn, child.uuid, tmp_path / "split", pairs)
    assert lmv.body_at(some_pre.point) != a_body  # the pre site left body A (to the cleaved or split-off body)
    assert new_body != a_body

    points = syn.at(child.uuid).export(tmp_path / "points", geometry="points", sharded=sharded)
    assert points.written == 17
    reader = AnnotationReader((tmp_path / "points").as_uri())
    kind = next(p for p in reader.properties if p.id == "kind")
    assert list(kind.enum_labels) == ["pre", "post", "point"]
    for a in syn.at(child.uuid).all():
        got = reader.by_id[a.id]
        np.testing.assert_array_equal(np.asarray(got.point), centre(a.point))
        body = lmv.body_at(a.point)
        assert [[int(s) for s in segs] for segs in got.segments] == [[body] if body else []]


def test_export_properties_tags_and_pair_ids(syn: AnnotationInstance, tmp_path: Path) -> None:
    v = syn.at("main")
    pre1 = v.add("pre", (10, 60, 60), properties={"score": 7, "ok": True, "who": "ann"}, tags=["needs review"])
    pre2 = v.add("pre", (10, 61, 60), properties={"score": 2.5})
    post = v.add("post", (10, 60, 64))
    v.relate(pre1.id, post.id)
    v.relate(pre2.id, post.id)  # a post site with two pre sites: two lines
    report = v.export(tmp_path / "lines", sharded=False)
    assert report.written == 2
    reader = AnnotationReader((tmp_path / "lines").as_uri())
    specs = {p.id: p for p in reader.properties}
    assert specs["pre_score"].type == "float32"  # 7 and 2.5: one float column
    assert list(specs["pre_ok"].enum_labels) == ["false", "true", "unset"]
    assert list(specs["pre_who"].enum_labels) == ["ann", ""]
    assert list(specs["pre_tag_needs_review"].enum_labels) == ["no", "yes"]
    first = reader.by_id[post.id]  # the lower pre id keeps the post site's id
    names = [p.id for p in reader.properties]
    props = dict(zip(names, first.props, strict=True))
    assert props["pre_score"] == 7 and props["pre_ok"] == 1 and props["pre_tag_needs_review"] == 1
    assert specs["pre_who"].enum_labels[props["pre_who"]] == "ann"
    other = [i for i in (int(a.id) for a in reader.get_within_spatial_bounds()) if i != post.id]
    assert len(other) == 1 and other[0] & PAIR_ID_BIT
    np.testing.assert_array_equal(np.asarray(reader.by_id[other[0]].point_a), centre(pre2.point))


def test_empty_instance_and_refusals(syn: AnnotationInstance, tmp_path: Path) -> None:
    v = syn.at("main")
    for geometry in ("lines", "points"):
        report = v.export(tmp_path / geometry, geometry=geometry)
        assert report.written == 0
        reader = AnnotationReader((tmp_path / geometry).as_uri())
        assert list(reader.get_within_spatial_bounds()) == []
        assert reader.upper_bound == (256.0, 256.0, 64.0)  # the volume's extent (x, y, z)
    with pytest.raises(RefusedDestinationError):
        v.export(tmp_path / "lines")
    v.add("point", (1, 1, 1))
    assert v.export(tmp_path / "points", geometry="points", overwrite=True).written == 1
    with pytest.raises(ArgumentError, match="geometry must be one of"):
        export_annotations(v, tmp_path / "x", geometry="boxes")  # type: ignore[arg-type]
    with pytest.raises(AnnotationArgumentError, match="outside the labelmap"):
        v.add("point", (64, 0, 0))  # outside the volume: never stored, so never exported


def test_huge_property_lists_are_refused_with_a_remedy(syn: AnnotationInstance, tmp_path: Path) -> None:
    v = syn.at("main")
    for i in range(5):
        v.add("point", (1, 1, 1 + i), properties={f"p{i}_{j}": j for j in range(60)})
    with pytest.raises(ArgumentError, match=r"300 properties.*properties="):
        v.export(tmp_path / "all", geometry="points")
    assert not (tmp_path / "all").exists()  # refused before anything was written
    report = v.export(tmp_path / "some", geometry="points", properties=["p0_1", "p4_59"])
    names = [p["id"] for p in report.write.info.to_json()["properties"]]
    assert sorted(names) == ["kind", "p0_1", "p4_59"]


def test_cli_export_annotations(syn: AnnotationInstance, repo: Repository, base0: np.ndarray,
                                tmp_path: Path) -> None:
    _, _, pairs = synapses(syn, base0)
    head = repo.commit("main", "synapses")
    repo.close()
    # The four command lines run in one child process (tests/cli_batch.py: each through the console script's main
    # on real pipes): what is checked is what each prints, returns and writes, not a process starting.
    cmd = ["export", str(tmp_path / "repo"), str(tmp_path / "syn"), "--annotations", "synapses", "--version",
           head.uuid[:8], "--json"]
    done, points, bad, missing = run_commands([
        cmd,
        [*cmd[:2], str(tmp_path / "pts"), *cmd[3:-1], "--geometry", "points", "--unsharded"],
        [*cmd[:2], str(tmp_path / "z"), "--annotations", "synapses", "--format", "zarr3"],
        [*cmd[:2], str(tmp_path / "m"), "--annotations", "nope"],
    ], timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["written"] == 8 and summary["geometry"] == "lines" and summary["version"] == head.uuid
    reader = AnnotationReader((tmp_path / "syn").as_uri())
    assert {int(a.id) for a in reader.get_within_spatial_bounds()} == set(pairs)
    assert "sharding" in reader.metadata["by_id"]

    assert points.returncode == 0, points.stderr
    assert "wrote 17 annotations" in points.stdout
    assert "sharding" not in json.loads((tmp_path / "pts" / "info").read_text())["by_id"]

    assert bad.returncode == 2 and "--format" in bad.stderr and "--annotations" in bad.stderr
    assert missing.returncode != 0 and "nope" in missing.stderr
    assert not (tmp_path / "m").exists()
