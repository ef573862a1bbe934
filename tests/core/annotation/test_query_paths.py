"""The interactive query paths of issue 29: what their shortcuts must never get wrong.

``connections(body)`` takes the labelmap state once per query and reads the body map through it
(no store probe per read): an edit made through another handle (another process) must still be
seen by the next query. ``add_many`` builds its engine keys as arrays: what it stores must be what
adding and relating the same annotations one by one stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import add_many, create_annotation_instance, open_annotation_instance
from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation import synapse_index as S
from napari_shardscope.core.annotation.connectome import _connections_from, recount_connectivity
from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.versioned import Repository, create_repository
from tests.volume_cases import sample  # noqa: F401  (fixture: the session's sample, read only)


@pytest.fixture
def repo(tmp_path: Path, sample: SampleDataset) -> Iterator[Repository]:  # noqa: F811
    r = create_repository(tmp_path / "repo")
    create_labelmap(r, "seg", sample.segmentation, agglomeration=sample.bodies)
    yield r
    r.close()


def synapse_rows(n: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pts = np.stack([rng.integers(0, s, 2 * n) for s in (64, 256, 256)], axis=1)
    pairs = np.stack([np.arange(n), n + np.arange(n)], axis=1)
    # one pre with three posts and one post with two pres: records with several relationships
    extra = np.asarray([[0, n + 1], [0, n + 2], [1, n + 2]])
    return ["pre"] * n + ["post"] * n, pts, np.concatenate([pairs, extra])


def recounted(v: object, body: int) -> object:
    return _connections_from(recount_connectivity(v).as_dict(), body)


def test_connections_see_labelmap_edits_made_through_another_handle(repo: Repository) -> None:
    create_annotation_instance(repo, "synapses", labelmap="seg")
    mine = open_annotation_instance(repo, "synapses").at("main")  # its own labelmap object and states
    kinds, pts, pairs = synapse_rows(300, 5)
    ids = add_many(mine, kinds, pts, synapses=pairs)
    bodies = sorted({b for b in (mine.body_of(i) for i in ids) if b})
    a, b = bodies[0], bodies[1]
    before = mine.connections(a)  # mine's labelmap state is now warm (records, roots)
    theirs = open_labelmap(repo, "seg").at("main")  # another process's handle on the same store
    theirs.merge(a, [b])
    merged = mine.connections(a)
    assert merged == recounted(mine, a)
    assert merged.out_total + merged.in_total > before.out_total + before.in_total
    moved = theirs.supervoxels(a)[:1]
    new_body = theirs.cleave(a, moved)
    assert mine.connections(a) == recounted(mine, a)
    assert mine.connections(new_body) == recounted(mine, new_body)
    theirs.undo()
    theirs.undo()
    assert mine.connections(a) == recounted(mine, a) == before


def stored_entries(repo: Repository, name: str) -> dict[bytes, bytes]:
    """Every record, spatial, supervoxel and synapse-index entry the instance holds at main."""
    kept = (K.RECORD_PREFIX, K.SPATIAL_PREFIX, K.SUPERVOXEL_PREFIX, S.EDGE_PREFIX)
    with repo.read("main") as view:
        return {k: x for k, x in view.scan(repo.instance(name)) if k[:1] in kept}


def test_add_many_stores_what_adding_one_by_one_stores(repo: Repository) -> None:
    kinds, pts, pairs = synapse_rows(40, 6)
    kinds += ["point", "point"]
    pts = np.concatenate([pts, [[0, 0, 0], [63, 255, 255]]])  # corners: keys with zero and 0xff bytes
    bulk = create_annotation_instance(repo, "bulk", labelmap="seg").at("main")
    single = create_annotation_instance(repo, "single", labelmap="seg").at("main")
    ids = add_many(bulk, kinds, pts, synapses=pairs)
    one = [single.add(k, tuple(int(c) for c in p)).id for k, p in zip(kinds, pts, strict=True)]
    for pre, post in np.unique(pairs, axis=0).tolist():
        single.relate(one[pre], one[post])
    assert ids == one  # both counters start at 1: the same ids, so the same keys
    assert stored_entries(repo, "bulk") == stored_entries(repo, "single")
    for body in sorted({b for b in (bulk.body_of(i) for i in ids) if b}):
        assert bulk.connections(body) == single.connections(body) == recounted(single, body)
    assert bulk.all() == single.all()


def write_base_table(path: Path, n: int, seed: int) -> Path:
    """``n`` synapses at random voxels of the sample as a CAVE Parquet table (positions x, y, z)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    hi = [256, 256, 64]
    pq.write_table(pa.table({"id": np.arange(n, dtype=np.int64),
                             "pre_pt_position": pa.array(rng.integers(0, hi, size=(n, 3)).tolist(),
                                                         pa.list_(pa.int64())),
                             "post_pt_position": pa.array(rng.integers(0, hi, size=(n, 3)).tolist(),
                                                          pa.list_(pa.int64()))}), path)
    return path


def test_connections_over_a_base_see_every_kind_of_edit_made_through_another_handle(repo: Repository,
                                                                                    tmp_path: Path) -> None:
    """Over an imported base, a warm handle keeps what it resolved across edits (the labelmap catches up on
    another handle's mutations from the log, its body cache drops only what they wrote): every answer must
    still be the recount's, after merges, a cleave, a supervoxel split, undo and redo, and several edits
    made between two queries."""
    table = write_base_table(tmp_path / "syn.parquet", 400, 3)
    create_annotation_instance(repo, "synapses", labelmap="seg", base=table, base_dir=tmp_path / "base")
    mine = open_annotation_instance(repo, "synapses").at("main")
    theirs = open_labelmap(repo, "seg").at("main")
    sizes: dict[int, int] = {}
    for b in mine.all():
        body = mine.body_of(b.id)
        if body:
            sizes[body] = sizes.get(body, 0) + 1
    a, b, c = sorted(sizes, key=lambda x: -sizes[x])[:3]

    def check(*bodies: int) -> None:
        for body in bodies:
            if theirs.exists(body):
                assert mine.connections(body) == recounted(mine, body), body

    check(a, b, c)  # warm
    theirs.merge(a, [b])
    check(a, c)
    cleaved = theirs.cleave(a, theirs.supervoxels(a)[:1])
    check(a, c, cleaved)
    sv = theirs.supervoxels(c)[0]
    voxels = np.argwhere(np.asarray(theirs.supervoxel_arrays()[0]) == sv)
    theirs.split_supervoxel(sv, voxels[: len(voxels) // 2])
    check(a, c, cleaved)
    theirs.undo()
    check(a, c, cleaved)
    theirs.redo()
    check(a, c, cleaved)
    theirs.undo()
    theirs.undo()
    theirs.undo()
    check(a, b, c)
    theirs.merge(c, [a, b])
    theirs.undo()
    theirs.merge(b, [c])
    check(a, b)
