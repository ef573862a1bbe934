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
from napari_shardscope.core.labelmap.config import ScaleGeometry
from napari_shardscope.core.labelmap.geometry import Box
from napari_shardscope.core.labelmap.meshes import (
    MIN_RESOLVE_VOXELS,
    BodyMesher,
    cache_key,
    decode_mesh,
    encode_mesh,
    mesh_labels,
    resolving_scale,
    simplify_max_error,
)
from napari_shardscope.core.versioned import create_repository, open_repository
from tests.core.labelmap.volumes import write_precomputed
from tests.realdata import realdata_path


def bounds(m):  # type: ignore[no-untyped-def]
    lo, hi = m.bounds
    return np.array(lo), np.array(hi)


@pytest.fixture
def pinky(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", realdata_path("igneous_pinky_sharded"))
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
        # ours are simplified (no vertex moved more than simplify_max_error) and igneous's are too (40 nm):
        # the extents agree within a voxel of the coarsest axis plus our simplifier's bound
        tol = float(voxel.max()) + simplify_max_error(lm.config.scales[0].voxel_size)
        np.testing.assert_allclose(bounds(ours)[0], bounds(theirs)[0], atol=tol)
        np.testing.assert_allclose(bounds(ours)[1], bounds(theirs)[1], atol=tol)


def test_mesh_labels_places_a_box() -> None:
    labels = np.zeros((6, 8, 10), dtype=np.uint64)
    labels[1:4, 2:6, 3:9] = 5  # z, y, x
    raw = mesh_labels(labels, [5], voxel_size=(40, 8, 4), origin=(1000, 100, 10), simplify=False)[5]
    # x spans voxels 3..8, y 2..5, z 1..3; voxel i covers [i, i + 1) * size from the origin (precomputed's
    # convention); marching cubes cuts halfway between an inside and an outside voxel
    want_lo, want_hi = [10 + 3 * 4, 100 + 2 * 8, 1000 + 1 * 40], [10 + 9 * 4, 100 + 6 * 8, 1000 + 4 * 40]
    np.testing.assert_allclose(bounds(raw)[0], want_lo)
    np.testing.assert_allclose(bounds(raw)[1], want_hi)
    # simplified (the default): fewer faces, no corner moved further than the simplifier's bound (one 4 nm voxel)
    m = mesh_labels(labels, [5], voxel_size=(40, 8, 4), origin=(1000, 100, 10))[5]
    assert simplify_max_error((40, 8, 4)) == 4.0
    assert 0 < len(m.faces) < len(raw.faces)
    np.testing.assert_allclose(bounds(m)[0], want_lo, atol=4.0)
    np.testing.assert_allclose(bounds(m)[1], want_hi, atol=4.0)


def test_simplified_sphere_stays_within_the_error_bound() -> None:
    z, y, x = np.mgrid[:40, :40, :40]
    labels = (((z - 19.5) ** 2 + (y - 19.5) ** 2 + (x - 19.5) ** 2) < 15.0**2).astype(np.uint64) * 7
    raw = mesh_labels(labels, [7], voxel_size=(2, 2, 2), origin=(0, 0, 0), simplify=False)[7]
    m = mesh_labels(labels, [7], voxel_size=(2, 2, 2), origin=(0, 0, 0))[7]
    assert len(m.faces) * 4 < len(raw.faces)  # a curved surface under a one-voxel bound: >4x fewer faces (6.4x)
    centre = np.array([40.0, 40.0, 40.0])  # voxel 19.5 of 2 nm, cell-corner convention: (19.5 + 0.5) * 2
    r_raw = np.linalg.norm(raw.vertices - centre, axis=1)
    r = np.linalg.norm(m.vertices - centre, axis=1)
    bound = simplify_max_error((2, 2, 2))  # one voxel
    assert r.min() >= r_raw.min() - bound - 1e-3
    assert r.max() <= r_raw.max() + bound + 1e-3
    # closed: every edge is shared by exactly two faces
    edges = np.sort(np.concatenate([m.faces[:, [0, 1]], m.faces[:, [1, 2]], m.faces[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    assert set(counts.tolist()) == {2}


def test_cached_mesh_codec() -> None:
    labels = np.zeros((5, 5, 5), dtype=np.uint64)
    labels[1:4, 1:4, 1:4] = 3
    m = mesh_labels(labels, [3], voxel_size=(1, 1, 1), origin=(0, 0, 0))[3]
    back = decode_mesh(3, encode_mesh(m), key="k")
    np.testing.assert_array_equal(back.vertices, m.vertices)
    np.testing.assert_array_equal(back.faces, m.faces)
    with pytest.raises(IndexDecodeError, match="bytes"):
        decode_mesh(3, encode_mesh(m)[:-1], key="k")


def _scales(*factors: tuple[int, int, int]) -> list[ScaleGeometry]:
    return [ScaleGeometry(str(i), (64 // f[0], 1024 // f[1], 1024 // f[2]), f, (40.0 * f[0], 8.0 * f[1], 8.0 * f[2]),
                          (0.0, 0.0, 0.0)) for i, f in enumerate(factors)]


def test_resolving_scale_is_the_coarsest_keeping_enough_voxels() -> None:
    scales = _scales((1, 1, 1), (1, 2, 2), (1, 4, 4), (2, 8, 8))
    small = Box((0, 0, 0), (64, 64, 64))  # the union of its blocks: thickness is judged by the voxel count
    assert MIN_RESOLVE_VOXELS == 256
    assert resolving_scale(small, 4 * 16 * 16, scales) == 1  # 256 voxels at 2x, 64 at 4x
    assert resolving_scale(small, 4 * 16 * 16 - 4, scales) == 0  # 255 at 2x: too few, stays at full resolution
    assert resolving_scale(small, 4 * 32 * 32, scales) == 2
    assert resolving_scale(small, 0, scales) == 0  # no count (coarsen=False): the finest that fits
    # a box beyond 128³ at full resolution starts at the scale that fits it, never finer
    big = Box((0, 0, 0), (64, 512, 512))
    assert resolving_scale(big, 10, scales) == 2
    # ... and never at a scale whose voxel is wider than scale 0's widest side (64 x 64 x 80 > 40 nm)
    assert resolving_scale(big, 64 * 512 * 512, scales) == 2


def test_coarse_scale_meshes_fewer_faces_within_a_coarse_voxel(tmp_path: Path) -> None:
    """Blocky 4 x 16 x 16 supervoxels are meshed at 2x: fewer faces before simplifying, every mesh's bounds the
    supervoxel's box within scale 0's widest voxel side (40 nm); cached apart from the full-resolution meshes
    (``coarsen=False``)."""
    z, y, x = np.ogrid[0:8, 0:64, 0:64]
    sv = (1 + x // 16 + 4 * (y // 16) + 16 * (z // 4)).astype(np.uint64)
    write_precomputed(tmp_path / "base", sv, [(1, 1, 1), (1, 2, 2)], chunk_xyz=(32, 32, 8),
                      resolution_xyz=(8.0, 8.0, 40.0))
    repo = create_repository(tmp_path / "repo")
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "base", agglomeration={i: 500 for i in range(1, 33)})
        v = lm.at("main")
        coarse_raw = BodyMesher(lm, source=None, simplify=False).supervoxel_meshes(list(range(1, 33)), v)
        fine_raw = BodyMesher(lm, source=None, simplify=False, coarsen=False).supervoxel_meshes(list(range(1, 33)), v)
        coarse = BodyMesher(lm, source=None).supervoxel_meshes(list(range(1, 33)), v)
        assert sum(len(m.faces) for m in coarse_raw.values()) * 2 < sum(len(m.faces) for m in fine_raw.values())
        bound = 40.0
        for i in range(1, 33):
            k = i - 1
            want_lo = np.array([16 * 8 * (k % 4), 16 * 8 * (k // 4 % 4), 4 * 40 * (k // 16)], dtype=float)
            want_hi = want_lo + np.array([16 * 8, 16 * 8, 4 * 40])
            for m in (coarse[i], coarse_raw[i]):
                assert len(m.faces) > 0
                np.testing.assert_allclose(bounds(m)[0], want_lo, atol=bound)
                np.testing.assert_allclose(bounds(m)[1], want_hi, atol=bound)
        assert repo.get_unversioned(lm.instance, cache_key(1)) is not None
        assert repo.get_unversioned(lm.instance, cache_key(1, simplified=False, coarsened=False)) is not None
        assert cache_key(1) != cache_key(1, coarsened=False)
        # the body's mesh is the default (coarse, simplified) one
        body = lm.mesh(500, "main")
        assert len(body.faces) == sum(len(m.faces) for m in coarse.values())
    finally:
        repo.close()
