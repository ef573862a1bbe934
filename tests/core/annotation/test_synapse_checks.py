"""Orphan synapses and weak partners against a brute-force recount on a tiny labelmap with background.

Random pre/post sites (some linked, some not, some on background), random deletes and labelmap
merges (which make autapses and move sites between bodies without an annotation rewritten). The
recount reads every record and the whole body volume at the version (no index, no recorded
supervoxel) and derives the findings from the definitions in the module text; the library's
findings must equal it, for the whole version and for every body.
"""

from __future__ import annotations

import functools
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.annotation import add_many, create_annotation_instance
from napari_shardscope.core.annotation.errors import AnnotationArgumentError
from napari_shardscope.core.annotation.synapse_checks import find_orphans, find_synapse_issues, find_weak_partners
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.proofreading.synapse_todo import list_name, make_synapse_todo, synapse_todo
from napari_shardscope.core.proofreading.todo import TodoStore, Worklist
from napari_shardscope.core.versioned import create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

SHAPE = (8, 20, 24)
BLOCK = (4, 8, 8)


@functools.cache
def volume_with_background() -> Path:
    """Voronoi supervoxels with a slab of background (label 0) across y 0..3 and a hole in the middle."""
    svs = voronoi_supervoxels(SHAPE, 8, seed=11)
    svs[:, :4, :] = 0
    svs[3:5, 9:12, 10:14] = 0
    root = Path(tempfile.mkdtemp(prefix="synapse-checks-"))
    write_precomputed(root / "seg", svs, ((1, 1, 1),))
    return root / "seg"


def make(seed: int) -> tuple[Any, Any, Any]:
    repo = create_repository(None, engine="memory")
    lm = create_labelmap(repo, "seg", volume_with_background(), block=BLOCK)
    inst = create_annotation_instance(repo, "syn", labelmap=lm)
    uuid = repo.root.uuid
    rng = np.random.default_rng(seed)
    n_pre, n_post = 30, 45
    pts = np.stack([rng.integers(0, s, n_pre + n_post) for s in SHAPE], axis=1)
    # most posts linked to a pre (polyadic: a pre may have several), some pres and posts left alone
    pairs = [(int(rng.integers(0, n_pre - 4)), n_pre + j) for j in range(n_post - 5)]
    ids = add_many(inst.at(uuid), ["pre"] * n_pre + ["post"] * n_post, pts, synapses=pairs)
    v = inst.at(uuid)
    for aid in rng.choice(ids, 4, replace=False).tolist():  # a deleted end leaves its partner alone
        v.delete(int(aid))
    lmv = lm.at(uuid)
    for _ in range(3):  # merges: sites change body, some synapses become autapses
        bodies = sorted(int(b) for b in np.unique(lmv.read_bodies()) if b)
        if len(bodies) >= 2:
            a, b = rng.choice(bodies, 2, replace=False).tolist()
            lmv.merge(int(a), [int(b)])
    return repo, inst, uuid


def brute_orphans(v: Any, body: int | None) -> dict[int, set[str]]:
    """Site id → reason codes, from every record and the whole body volume."""
    vol = v.instance.labelmap.at(v.uuid).read_bodies()
    recs = {a.id: a for a in v.all()}
    owner = {i: int(vol[a.point]) for i, a in recs.items()}
    out: dict[int, set[str]] = {}
    for a in recs.values():
        if a.kind not in ("pre", "post") or (body is not None and owner[a.id] != body):
            continue
        own, other, back = ("PreSynTo", "post", "PostSynTo") if a.kind == "pre" else ("PostSynTo", "pre", "PreSynTo")
        links = [r.to for r in a.relationships if r.rel == own]
        if body is None and owner[a.id] == 0:
            out.setdefault(a.id, set()).add("background")
        if not links:
            out.setdefault(a.id, set()).add("no-partner")
        for p in links:
            q = recs.get(p)
            if q is None or q.kind != other or not any(r.rel == back and r.to == a.id for r in q.relationships):
                out.setdefault(a.id, set()).add("partner-missing")
                continue
            if body is not None and owner[p] == 0:
                out.setdefault(p, set()).add("partner-background")
            if a.kind == "pre" and owner[a.id] and owner[a.id] == owner[p]:
                out.setdefault(a.id, set()).add("autapse")
    return out


def brute_weak(v: Any, body: int, min_synapses: int) -> dict[tuple[str, int], int]:
    vol = v.instance.labelmap.at(v.uuid).read_bodies()
    recs = {a.id: a for a in v.all()}
    count: Counter[tuple[str, int]] = Counter()
    for a in recs.values():
        if a.kind != "pre":
            continue
        for r in a.relationships:
            q = recs.get(r.to)
            if r.rel != "PreSynTo" or q is None or q.kind != "post":
                continue
            pre, post = int(vol[a.point]), int(vol[q.point])
            if pre == 0 or post == 0:
                continue
            if pre == body:
                count[("out", post)] += 1
            if post == body:
                count[("in", pre)] += 1
    return {k: n for k, n in count.items() if n < min_synapses}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_orphans_equal_a_brute_force_recount(seed: int) -> None:
    _, inst, uuid = make(seed)
    v = inst.at(uuid)
    got = {f.annotation: set(f.reasons) for f in find_orphans(v)}
    want = brute_orphans(v, None)
    assert got == want
    reasons = set().union(*want.values())
    assert {"background", "no-partner", "autapse"} <= reasons  # the data exercises each kind
    bodies = sorted(int(b) for b in np.unique(inst.labelmap.at(uuid).read_bodies()) if b)
    for body in bodies:
        assert {f.annotation: set(f.reasons) for f in find_orphans(v, body)} == brute_orphans(v, body)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("min_synapses", [1, 2, 3, 5])
def test_weak_partners_equal_a_brute_force_recount(seed: int, min_synapses: int) -> None:
    _, inst, uuid = make(seed)
    v = inst.at(uuid)
    vol = inst.labelmap.at(uuid).read_bodies()
    for body in sorted(int(b) for b in np.unique(vol) if b):
        found = find_weak_partners(v, body, min_synapses=min_synapses)
        got = {("out" if f.kind == "pre" else "in", f.partner_body): f.count for f in found}
        assert got == brute_weak(v, body, min_synapses)
        counts = [f.count for f in found]
        assert counts == sorted(counts)  # weakest first
        for f in found:  # the item's point is one of the body's own sites on that connection
            assert int(vol[f.point]) == body
            assert f"weak partner {f.partner_body} ({f.count} synapse" in f.note


def test_notes_say_why_in_words() -> None:
    _, inst, uuid = make(1)
    v = inst.at(uuid)
    found = find_orphans(v)
    for f in found:
        assert f.note.startswith(f"{f.kind} site {f.annotation} ")
        if "background" in f.reasons:
            assert "on background" in f.note
        if "no-partner" in f.reasons:
            assert "no partner" in f.note
        if "autapse" in f.reasons:
            assert f"in the same body {f.body}" in f.note


def test_saved_as_a_todo_list_at_the_version() -> None:
    repo, inst, uuid = make(2)
    v = inst.at(uuid)
    w = Worklist(lambda: repo, lambda: uuid)
    name, n = make_synapse_todo(w, v, "orphans")
    assert name == list_name("orphans") == "orphan-synapses-all"
    entries = TodoStore(repo).entries(uuid, name)
    findings = find_orphans(v)
    assert n == len(entries) == len(findings)
    assert [(e.item.kind, e.item.value, e.item.text) for e in entries] == \
        [("point", f.point, f.note) for f in findings]
    assert w.next().item.value == findings[0].point
    w.mark("done")
    # made again: the stored list (and its statuses) is opened, not replaced
    name2, _ = make_synapse_todo(w, v, "orphans")
    assert name2 == name and w.entries[0].status == "done"
    # a body with no weak partner at threshold 1: nothing to list, a clear error, no list stored
    body = int(np.unique(inst.labelmap.at(uuid).read_bodies())[-1])
    with pytest.raises(Exception, match="nothing to put on a to-do list"):
        make_synapse_todo(w, v, "weak", body=body, min_synapses=1)
    assert list_name("weak", body, 1) not in w.lists()
    assert synapse_todo(v, "weak", body=body, min_synapses=1) == []


def test_bad_arguments_are_typed() -> None:
    _, inst, uuid = make(1)
    v = inst.at(uuid)
    with pytest.raises(AnnotationArgumentError, match="synapse check"):
        find_synapse_issues(v, "lonely")
    with pytest.raises(AnnotationArgumentError, match="min_synapses"):
        find_weak_partners(v, 5, min_synapses=0)
    with pytest.raises(AnnotationArgumentError, match="body id"):
        find_orphans(v, -3)
