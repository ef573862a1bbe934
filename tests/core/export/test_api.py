"""``napari_shardscope.export``: one call for a path, a Volume or a LabelmapVersion, in either format.

What it writes is read back (by the package's own reader and, for precomputed, TensorStore) and compared
with the source; what it refuses is refused before anything is written, with an error naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

import napari_shardscope as ss
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import ArraySource

LABELS = np.zeros((16, 32, 32), dtype=np.uint32)  # z, y, x: three supervoxels
LABELS[:, :16, :] = 1
LABELS[:, 16:, :16] = 2
LABELS[:, 16:, 16:] = 3
SMALL = {"inner_chunk": (16, 16, 16)}


@pytest.fixture(scope="module")
def segmentation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export-api") / "seg"
    export_precomputed(ArraySource((LABELS,), ((4.0, 4.0, 40.0),)), str(path), chunk_size=(16, 16, 16))
    return path


def _zarr_level0(dest: Path) -> np.ndarray:
    return np.asarray(ss.open_volume(dest).levels[0].array.read())


def test_a_volume_and_its_path_export_alike(segmentation: Path, tmp_path: Path) -> None:
    by_volume = ss.export(ss.open_volume(segmentation), tmp_path / "a.zarr", format="zarr3", **SMALL)
    by_path = ss.export(str(segmentation), tmp_path / "b.zarr", format="zarr3", **SMALL)
    assert by_volume.to_json()["scales"] == by_path.to_json()["scales"]
    assert np.array_equal(_zarr_level0(tmp_path / "a.zarr"), LABELS)
    assert np.array_equal(_zarr_level0(tmp_path / "b.zarr"), LABELS)


def test_a_labelmap_version_exports_its_bodies_or_supervoxels(segmentation: Path, tmp_path: Path) -> None:
    repo = ss.init_repository(tmp_path / "seg.repo")
    lm = ss.create_labelmap(repo, "seg", segmentation)
    v = lm.at("main")
    v.merge(1, [2])
    with pytest.raises(ss.ArgumentError, match="is open: commit it first"):  # not a snapshot
        ss.export(v, tmp_path / "open")
    assert not (tmp_path / "open").exists()
    committed = lm.at(repo.commit("main", "merged 2 into 1"))
    ss.export(committed, tmp_path / "bodies")
    back = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path / 'bodies'}"}).result()
    bodies = np.asarray(back[..., 0].read().result()).T
    assert np.array_equal(bodies, np.where(LABELS == 2, 1, LABELS))
    ss.export(committed, tmp_path / "svs.zarr", format="zarr3", labels="supervoxels", **SMALL)
    assert np.array_equal(_zarr_level0(tmp_path / "svs.zarr"), LABELS)
    ss.export(lm.at(repo.new_version("main")), tmp_path / "open", allow_open=True)  # asked for: written
    assert (tmp_path / "open" / "info").is_file()


@pytest.mark.parametrize("call,message", [
    (lambda seg, tmp: ss.export(seg, tmp / "x", format="n5"), "format must be one of precomputed, zarr3"),
    (lambda seg, tmp: ss.export(seg, tmp / "x", shard_shape=(8, 8, 8)),
     "shard_shape: not an option of a precomputed export; its options are chunk_size, gzip_level, shard_bytes"),
    (lambda seg, tmp: ss.export(seg, tmp / "x", labels="supervoxels"), "labels: only for a labelmap version"),
    (lambda seg, tmp: ss.export(ss.init_repository(tmp / "r.repo"), tmp / "x"), "cannot export a Repository"),
    (lambda seg, tmp: (ss.init_repository(tmp / "r.repo"), ss.export(tmp / "r.repo", tmp / "x")),
     "is a repository: export one of its labelmap versions"),
    (lambda seg, tmp: ss.export(ss.create_labelmap(ss.init_repository(None), "seg", seg).at("main"), tmp / "x",
                                allow_open=True), "in-memory repository"),
])
def test_what_export_refuses(segmentation: Path, tmp_path: Path, call: Callable[[Path, Path], object],
                             message: str) -> None:
    with pytest.raises(ss.ArgumentError, match=message):
        call(segmentation, tmp_path)
    assert not (tmp_path / "x").exists()
