"""An annotation instance travels through remotes like every instance: clone, edit offline, push, pull.

Two clones add annotations with ids they hand out themselves (from blocks reserved from the remote:
never the same id) and both edit the labelmap; the second pull merges both with the annotation
pull merger, into one version where every annotation and both labelmap edits are present.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from napari_shardscope.core.annotation import create_annotation_instance, open_annotation_instance
from napari_shardscope.core.annotation.remote import pull_merger
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.core.versioned import remotes as R
from tests.core.versioned.remotes.helpers import make_repo


def test_clone_push_pull_of_annotations(base: Path, tmp_path: Path) -> None:
    remote_url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    syn = create_annotation_instance(a, "synapses", labelmap="seg")
    v = a.new_version(a.head("main"))
    pre = syn.at(v).add("pre", (1, 2, 3), tags=["seed"])
    post = syn.at(v).add("post", (1, 2, 9))
    syn.at(v).relate(pre.id, post.id)
    a.commit(v, "synapses")
    R.add_remote(a, "origin", remote_url)
    R.push(a, "origin", "main")

    path, _ = R.clone(remote_url, tmp_path / "b")
    b = open_repository(path)
    syn_b = open_annotation_instance(b, "synapses")
    assert syn_b.at("main").get(pre.id).relationships[0].to == post.id
    assert [x.id for x in syn_b.at("main").with_tag("seed")] == [pre.id]
    # the clone edits: annotations (ids from its reserved blocks) and the labelmap
    vb = b.new_version(b.head("main"))
    added_b = syn_b.at(vb).add("point", (4, 4, 4))
    syn_b.at(vb).move(pre.id, (2, 2, 3))
    lm_b = open_labelmap(b, "seg")
    bodies = sorted({lm_b.at(vb).body_at((0, y, 0)) for y in (0, 31)})
    lm_b.at(vb).merge(bodies[0], bodies[1:])
    b.commit(vb, "clone edits")
    R.push(b, "origin", "main")

    # the origin edited meanwhile: a new annotation, and the labelmap elsewhere
    va = a.new_version(a.head("main"))
    added_a = syn.at(va).add("point", (5, 5, 5))
    lm_a = open_labelmap(a, "seg")
    others = sorted({lm_a.at(va).body_at((7, y, 31)) for y in (0, 31)})
    lm_a.at(va).merge(others[0], others[1:])
    a.commit(va, "origin edits")
    assert added_a.id != added_b.id
    pulled = R.pull(a, "origin", "main", merge=pull_merger())
    assert pulled.kind == "merge"
    m = open_annotation_instance(a, "synapses").at("main")
    assert {x.id for x in m.all()} == {pre.id, post.id, added_a.id, added_b.id}
    assert m.get(pre.id).point == (2, 2, 3)
    merged = open_labelmap(a, "seg").at("main")
    assert merged.body_at((0, 0, 0)) == merged.body_at((0, 31, 0))
    assert merged.body_at((7, 0, 31)) == merged.body_at((7, 31, 31))
    assert a.verify() == []
    a.close()
    b.close()


def test_clone_of_an_instance_whose_base_is_a_table_references_the_base(base: Path, tmp_path: Path) -> None:
    """The base tables are referenced, like the labelmap's base volume and agglomeration table: push and
    clone move only the instance record and its edits; the clone reads the base where the import wrote it,
    hands out ids above the base's, and its tombstone of a base annotation travels back on pull."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from napari_shardscope.core.annotation import keys as K
    from napari_shardscope.core.annotation.base_import import synapse_ids

    rng = np.random.default_rng(3)
    n = 30
    table = pa.table({"id": np.arange(1000, 1000 + n), "pre_pt_position": rng.integers(0, [32, 32, 8], (n, 3)).tolist(),
                      "post_pt_position": rng.integers(0, [32, 32, 8], (n, 3)).tolist(), "size": rng.integers(1, 9, n)})
    pq.write_table(table, tmp_path / "syn.parquet")
    remote_url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    syn = create_annotation_instance(a, "synapses", labelmap="seg", base=tmp_path / "syn.parquet")
    pre, post = (int(x[0]) for x in synapse_ids([1000]))
    R.add_remote(a, "origin", remote_url)
    R.push(a, "origin", "main")
    assert not any("annotation-bases" in str(p) for p in Path(remote_url).rglob("*"))  # referenced, not copied

    path, _ = R.clone(remote_url, tmp_path / "b")
    b = open_repository(path)
    syn_b = open_annotation_instance(b, "synapses")
    assert syn_b.at("main").all() == syn.at("main").all()
    assert len(syn_b.at("main").all()) == 2 * n
    vb = b.new_version(b.head("main"))
    syn_b.at(vb).delete(pre)
    added = syn_b.at(vb).add("point", (1, 1, 1))
    assert added.id > int(synapse_ids([1000 + n - 1])[1][0])
    b.commit(vb, "clone edits")
    R.push(b, "origin", "main")

    R.pull(a, "origin", "main", merge=pull_merger())
    m = open_annotation_instance(a, "synapses").at("main")
    assert m.find(pre) is None and m.get(post).relationships == ()
    assert m.get(added.id).point == (1, 1, 1)
    with a.read("main") as view:
        assert {K.id_of_record_key(k) for k in view.keys("synapses", prefix=K.RECORD_PREFIX)} == {pre, post, added.id}


def test_cli_pull_merges_annotations_id_by_id_with_named_conflicts(base: Path, tmp_path: Path) -> None:
    """``shardscope pull`` (a subprocess, as a user runs it) uses the annotation merge: an annotation both
    sides moved is the conflict ``annotation:<id>`` (exit 7, nothing written), settled by ``--resolve``;
    an annotation only one side added arrives."""
    from tests.core.versioned.remotes.cli import shardscope_batch

    remote_url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    syn = create_annotation_instance(a, "synapses", labelmap="seg")
    v = a.new_version(a.head("main"))
    p = syn.at(v).add("point", (1, 2, 3))
    a.commit(v, "a point")
    R.add_remote(a, "origin", remote_url)
    R.push(a, "origin", "main")
    path, _ = R.clone(remote_url, tmp_path / "b")
    b = open_repository(path)
    syn_b = open_annotation_instance(b, "synapses")
    vb = b.new_version(b.head("main"))
    syn_b.at(vb).move(p.id, (3, 3, 3))
    theirs_new = syn_b.at(vb).add("point", (6, 6, 6))
    b.commit(vb, "theirs")
    R.push(b, "origin", "main")
    b.close()
    va = a.new_version(a.head("main"))
    syn.at(va).move(p.id, (4, 4, 4))
    a.commit(va, "ours")
    a.close()
    # the refused pull and the resolved one follow each other: one child process runs both (shardscope_batch)
    refused_run, out = shardscope_batch(
        ["pull", str(tmp_path / "a"), "origin", "main", "--json"],
        ["pull", str(tmp_path / "a"), "origin", "main", "--resolve", f"annotation:{p.id}=theirs"], expect=[7, 0])
    refused = json.loads(refused_run.stdout)
    assert [c["key"] for c in refused["conflicts"]] == [f"annotation:{p.id}"]
    assert "merge" in out.stdout
    a = open_repository(tmp_path / "a")
    m = open_annotation_instance(a, "synapses").at("main")
    assert m.get(p.id).point == (3, 3, 3)
    assert m.get(theirs_new.id).point == (6, 6, 6)
    a.close()


def test_cli_branch_merge_merges_annotations_id_by_id(base: Path, tmp_path: Path) -> None:
    """``shardscope branch merge`` merges the annotation instances bound to the labelmap too (one merge
    version): a conflict names ``annotation:<id>`` and exits 7; resolved, both sides' annotations are there."""
    from tests.core.versioned.remotes.cli import shardscope_batch

    a = make_repo(tmp_path / "a", base)
    syn = create_annotation_instance(a, "synapses", labelmap="seg")
    v = a.new_version(a.head("main"))
    p = syn.at(v).add("point", (1, 2, 3))
    a.commit(v, "a point")
    vt = a.new_version(a.head("main"), branch="trial")
    syn.at(vt).move(p.id, (3, 3, 3))
    added = syn.at(vt).add("point", (6, 6, 6))
    a.commit(vt, "theirs")
    vm = a.new_version(a.head("main"))
    syn.at(vm).move(p.id, (4, 4, 4))
    a.commit(vm, "ours")
    a.close()
    # the refused merge and the resolved one follow each other: one child process runs both (shardscope_batch)
    refused_run, done_run = shardscope_batch(
        ["branch", "merge", str(tmp_path / "a"), "main", "trial", "seg", "--json"],
        ["branch", "merge", str(tmp_path / "a"), "main", "trial", "seg", "--resolve", f"annotation:{p.id}=ours",
         "--json"], expect=[7, 0])
    refused, done = json.loads(refused_run.stdout), json.loads(done_run.stdout)
    assert f"annotation:{p.id}" in [c["key"] for c in refused["conflicts"]]
    assert done["annotations"]["synapses"]["taken"] == [added.id]
    a = open_repository(tmp_path / "a")
    merged = open_annotation_instance(a, "synapses").at(done["version"])
    assert merged.get(p.id).point == (4, 4, 4)
    assert merged.get(added.id).point == (6, 6, 6)
    a.close()
