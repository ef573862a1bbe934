"""Body meshes at a version, true to merge, cleave, split, undo and branches, over a real base with meshes.

The base is ``igneous_pinky_sharded`` (real pinky40 segmentation, sharded, with igneous's sharded
multilod meshes): its supervoxel meshes come from the source; supervoxels a split makes are meshed
from the labels and cached in the repository.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import IndexDecodeError
from napari_shardscope.core.labelmap import UnknownLabelError, create_labelmap, open_labelmap
from napari_shardscope.core.labelmap.meshes import BodyMesher, cache_key, decode_mesh, encode_mesh, mesh_labels
from napari_shardscope.core.versioned import create_repository, open_repository

REALDATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "realdata"
PINKY = REALDATA / "igneous_pinky_sharded"


def bounds(m):  # type: ignore[no-untyped-def]
    lo, hi = m.bounds
    return np.array(lo), np.array(hi)


@pytest.fixture
def pinky(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", PINKY)
    yield repo, lm
    repo.close()


def biggest_bodies(lm, n: int = 2) -> list[int]:  # type: ignore[no-untyped-def]
    source = lm.mesher().source
    ids = source.segment_ids()
    sizes = {i: len(source.mesh(i).faces) for i in ids}
    return sorted(ids, key=lambda i: -sizes[i])[:n]


def test_body_mesh_is_the_source_mesh(pinky) -> None:  # type: ignore[no-untyped-def]
    _repo, lm = pinky
    a, _b = biggest_bodies(lm)
    m = lm.mesh(a, "main")
    source = lm.mesher().source.mesh(a)
    np.testing.assert_array_equal(m.vertices, source.vertices)
    np.testing.assert_array_equal(m.faces, source.faces)
    assert lm.mesher().origins[a] == "source"
    import trimesh

    t = trimesh.Trimesh(m.vertices, m.faces, process=False)
    assert t.bounds.shape == (2, 3) and len(t.faces) == len(m.faces)


def test_merge_covers_both_undo_goes_back_cleave_splits_again(pinky) -> None:  # type: ignore[no-untyped-def]
    _repo, lm = pinky
    a, b = biggest_bodies(lm)
    v = lm.at("main")
    ma, mb = v.mesh(a), v.mesh(b)
    v.merge(a, [b])
    merged = v.mesh(a)
    assert len(merged.faces) == len(ma.faces) + len(mb.faces)
    lo, hi = bounds(merged)
    np.testing.assert_allclose(lo, np.minimum(bounds(ma)[0], bounds(mb)[0]))
    np.testing.assert_allclose(hi, np.maximum(bounds(ma)[1], bounds(mb)[1]))
    v.undo()
    back = v.mesh(a)
    np.testing.assert_array_equal(back.vertices, ma.vertices)
    v.redo()
    new_body = v.cleave(a, [b])
    assert len(v.mesh(a).faces) == len(ma.faces)
    assert len(v.mesh(new_body).faces) == len(mb.faces)


def test_versions_and_branches_keep_their_meshes(pinky) -> None:  # type: ignore[no-untyped-def]
    repo, lm = pinky
    a, b = biggest_bodies(lm)
    root = repo.commit("main", "base")
    repo.new_version(root, branch="edits")
    lm.at("edits").merge(a, [b])
    assert len(lm.mesh(a, "edits").faces) > len(lm.mesh(a, root.uuid).faces)
    with pytest.raises(UnknownLabelError, match=r"merged into"):
        lm.mesh(b, "edits")
    assert len(lm.mesh(b, root.uuid).faces) > 0


def test_split_supervoxel_meshes_the_new_ids_from_labels_and_caches_them(pinky, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo, lm = pinky
    a, _b = biggest_bodies(lm)
    v = lm.at("main")
    before = v.mesh(a)
    box = v.bbox(a)
    labels = v.read_supervoxels(box)
    where = np.argwhere(labels == a) + np.asarray(box.lo)
    cut = where[:, 2] < np.median(where[:, 2])  # the low-x half
    part, rest = v.split_supervoxel(a, where[cut])
    after = v.mesh(a)
    mesher = lm.mesher()
    assert mesher.origins[part] == "labels" and mesher.origins[rest] == "labels"
    # the two halves, meshed from labels, span the body the source mesh showed (within two voxels)
    voxel = np.asarray(lm.config.scales[0].voxel_size[::-1])
    np.testing.assert_allclose(bounds(after)[0], bounds(before)[0], atol=float(2 * voxel.max()))
    np.testing.assert_allclose(bounds(after)[1], bounds(before)[1], atol=float(2 * voxel.max()))
    assert bounds(v.mesh(a))[1][0] > bounds(lm.mesher().supervoxel_meshes([part], v)[part])[1][0]
    assert repo.get_unversioned(lm.instance, cache_key(part)) is not None
    repo.close()
    # another session reads the repository's cache instead of meshing again
    repo2 = open_repository(tmp_path / "repo")
    lm2 = open_labelmap(repo2, "seg")
    again = lm2.mesh(a, "main")
    assert lm2.mesher().origins[part] == "cache"
    assert len(again.faces) == len(after.faces)
    lm2.at("main").undo()  # the split undone: the retired supervoxel and its source mesh are back
    np.testing.assert_array_equal(lm2.mesh(a, "main").vertices, before.vertices)
    repo2.close()


def test_labels_only_mesher_agrees_with_the_source(pinky) -> None:  # type: ignore[no-untyped-def]
    _repo, lm = pinky
    v = lm.at("main")
    a, b = biggest_bodies(lm)
    from_labels = BodyMesher(lm, source=None)
    voxel = np.asarray(lm.config.scales[0].voxel_size[::-1])
    for body in (a, b):
        ours, theirs = from_labels.mesh(body, v), lm.mesh(body, "main")
        assert from_labels.origins[body] == "labels"
        np.testing.assert_allclose(bounds(ours)[0], bounds(theirs)[0], atol=float(voxel.max()))
        np.testing.assert_allclose(bounds(ours)[1], bounds(theirs)[1], atol=float(voxel.max()))


def test_mesh_labels_places_a_box() -> None:
    labels = np.zeros((6, 8, 10), dtype=np.uint64)
    labels[1:4, 2:6, 3:9] = 5  # z, y, x
    m = mesh_labels(labels, [5], voxel_size=(40, 8, 4), origin=(1000, 100, 10))[5]
    lo, hi = bounds(m)
    # x spans voxels 3..8, y 2..5, z 1..3; voxel i covers [i, i + 1) * size from the origin (precomputed's
    # convention); marching cubes cuts halfway between an inside and an outside voxel
    np.testing.assert_allclose(lo, [10 + 3 * 4, 100 + 2 * 8, 1000 + 1 * 40])
    np.testing.assert_allclose(hi, [10 + 9 * 4, 100 + 6 * 8, 1000 + 4 * 40])


def test_cached_mesh_codec() -> None:
    labels = np.zeros((5, 5, 5), dtype=np.uint64)
    labels[1:4, 1:4, 1:4] = 3
    m = mesh_labels(labels, [3], voxel_size=(1, 1, 1), origin=(0, 0, 0))[3]
    back = decode_mesh(3, encode_mesh(m), key="k")
    np.testing.assert_array_equal(back.vertices, m.vertices)
    np.testing.assert_array_equal(back.faces, m.faces)
    with pytest.raises(IndexDecodeError, match="bytes"):
        decode_mesh(3, encode_mesh(m)[:-1], key="k")
