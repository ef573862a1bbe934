"""An annotation instance travels through remotes like every instance: clone, edit offline, push, pull.

Two clones add annotations with ids they hand out themselves (from blocks reserved from the remote:
never the same id) and both edit the labelmap; the second pull merges both with the annotation
pull merger, into one version where every annotation and both labelmap edits are present.
"""

from __future__ import annotations

from pathlib import Path

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


def test_cli_pull_merges_annotations_id_by_id_with_named_conflicts(base: Path, tmp_path: Path) -> None:
    """``shardscope pull`` (a subprocess, as a user runs it) uses the annotation merge: an annotation both
    sides moved is the conflict ``annotation:<id>`` (exit 7, nothing written), settled by ``--resolve``;
    an annotation only one side added arrives."""
    from tests.core.versioned.remotes.cli import shardscope, shardscope_json

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
    refused = shardscope_json("pull", str(tmp_path / "a"), "origin", "main", expect=7)
    assert [c["key"] for c in refused["conflicts"]] == [f"annotation:{p.id}"]
    out = shardscope("pull", str(tmp_path / "a"), "origin", "main", "--resolve", f"annotation:{p.id}=theirs")
    assert "merge" in out.stdout
    a = open_repository(tmp_path / "a")
    m = open_annotation_instance(a, "synapses").at("main")
    assert m.get(p.id).point == (3, 3, 3)
    assert m.get(theirs_new.id).point == (6, 6, 6)
    a.close()


def test_cli_branch_merge_merges_annotations_id_by_id(base: Path, tmp_path: Path) -> None:
    """``shardscope branch merge`` merges the annotation instances bound to the labelmap too (one merge
    version): a conflict names ``annotation:<id>`` and exits 7; resolved, both sides' annotations are there."""
    from tests.core.versioned.remotes.cli import shardscope_json

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
    refused = shardscope_json("branch", "merge", str(tmp_path / "a"), "main", "trial", "seg", expect=7)
    assert f"annotation:{p.id}" in [c["key"] for c in refused["conflicts"]]
    done = shardscope_json("branch", "merge", str(tmp_path / "a"), "main", "trial", "seg",
                           "--resolve", f"annotation:{p.id}=ours")
    assert done["annotations"]["synapses"]["taken"] == [added.id]
    a = open_repository(tmp_path / "a")
    merged = open_annotation_instance(a, "synapses").at(done["version"])
    assert merged.get(p.id).point == (4, 4, 4)
    assert merged.get(added.id).point == (6, 6, 6)
    a.close()
