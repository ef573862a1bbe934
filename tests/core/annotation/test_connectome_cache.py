"""What the connectome's in-memory aggregates and the bulk add's engine writes must never get wrong.

``connections(body)`` keeps per-supervoxel aggregates per state of the annotations (the version and
how many edits it logged): every kind of annotation write — a bulk add (which empties the undo
stacks, so the stack tops alone cannot tell the states apart), another handle (another process) —
must be seen by the next query. The bulk add writes without the per-key tombstone removal only for
ids it just handed out; an explicit id deleted earlier in the same version must come back readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import add_many, create_annotation_instance, open_annotation_instance
from napari_shardscope.core.annotation.connectome import _connections_from, recount_connectivity
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import Repository, create_repository
from tests.volume_cases import sample  # noqa: F401  (fixture: the session's sample, read only)


@pytest.fixture
def repo(tmp_path: Path, sample: SampleDataset) -> Iterator[Repository]:  # noqa: F811
    r = create_repository(tmp_path / "repo")
    create_labelmap(r, "seg", sample.segmentation, agglomeration=sample.bodies)
    create_annotation_instance(r, "synapses", labelmap="seg")
    yield r
    r.close()


def synapse_rows(n: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pts = np.stack([rng.integers(0, s, 2 * n) for s in (64, 256, 256)], axis=1)
    return ["pre"] * n + ["post"] * n, pts, np.stack([np.arange(n), n + np.arange(n)], axis=1)


def test_a_bulk_add_after_a_query_is_counted(repo: Repository) -> None:
    v = open_annotation_instance(repo, "synapses").at("main")
    kinds, pts, pairs = synapse_rows(200, 1)
    ids = add_many(v, kinds, pts, synapses=pairs)
    body = next(b for b in (v.body_of(i) for i in ids) if b)
    first = v.connections(body)  # aggregates cached for this state
    kinds, pts, pairs = synapse_rows(200, 2)
    add_many(v, kinds, pts, synapses=pairs)  # undo stacks were empty and stay empty
    after = v.connections(body)
    assert after == _connections_from(recount_connectivity(v).as_dict(), body)
    assert after.out_total + after.in_total > first.out_total + first.in_total


def test_an_edit_through_another_handle_is_seen(repo: Repository) -> None:
    mine = open_annotation_instance(repo, "synapses").at("main")
    theirs = open_annotation_instance(repo, "synapses").at("main")  # another process's view of the store
    kinds, pts, pairs = synapse_rows(100, 3)
    ids = add_many(mine, kinds, pts, synapses=pairs)
    body = next(b for b in (mine.body_of(i) for i in ids) if b)
    mine.connections(body)
    partner = next(a for a in mine.by_body(body) if a.kind == "pre")
    post = theirs.add("post", tuple(int(c) for c in pts[-1]))
    theirs.relate(partner.id, post.id)
    assert mine.connections(body) == _connections_from(recount_connectivity(mine).as_dict(), body)


def test_a_bulk_add_of_an_id_deleted_in_the_same_version_is_readable(repo: Repository) -> None:
    v = open_annotation_instance(repo, "synapses").at("main")
    a = v.add("point", (1, 2, 3))
    v2 = open_annotation_instance(repo, "synapses").at(repo.new_version(repo.commit("main", "one point")))
    v2.delete(a.id)  # a tombstone at v2 over the parent's record
    add_many(v2, "point", np.asarray([[4, 5, 6]]), ids=[a.id])
    assert v2.get(a.id).point == (4, 5, 6)
    assert [x.id for x in v2.in_box((4, 5, 6), (5, 6, 7))] == [a.id]
