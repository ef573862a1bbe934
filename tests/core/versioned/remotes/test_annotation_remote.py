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
