"""Proofreading any labels: an array with no file becomes a base stored inside its repository; default places.

The repository is checked by reopening it with a new controller (what a later session does), the
stored base by reading it back with zarr-python, an independent reader.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.imported import IMPORTED_DIR, labels_array
from napari_shardscope.core.proofreading.places import (
    config_dir,
    default_repository,
    remember_folder,
    remembered_folder,
)


def blobs() -> np.ndarray:
    labels = np.zeros((6, 20, 24), dtype=np.int32)  # napari's own labels dtype, signed
    labels[1:5, 2:9, 2:10] = 3
    labels[1:5, 11:18, 2:10] = 7
    labels[1:5, 2:18, 14:22] = 9
    return labels


def test_an_array_becomes_a_base_inside_the_repository_and_reopens(tmp_path: Path) -> None:
    import zarr

    repo = tmp_path / "cells.repo"
    c = ProofreadingController()
    labels = blobs()
    c.create_from_labels(repo, labels, labels_name="cells [painted]", voxel_size=(40.0, 8.0, 8.0),
                         translate=(80.0, 0.0, 16.0))
    base = repo / IMPORTED_DIR / "cells-painted"
    assert c.state.status.text == (f"created {repo} over the labels 'cells [painted]' "
                                   f"(stored in the repository as {base})")
    stored = zarr.open_group(str(base), mode="r")
    assert np.array_equal(stored["0"][...], labels)  # zarr-python reads the base back as written
    ome = dict(stored.attrs)["ome"]
    assert ome["multiscales"][0]["datasets"][0]["coordinateTransformations"][1]["translation"] == [80.0, 0.0, 16.0]
    v = c.version
    assert v is not None and v.scales[0].voxel_size == (40.0, 8.0, 8.0) and v.scales[0].translate == (80.0, 0.0, 16.0)
    assert v.body_at((2, 5, 5)) == 3 and v.body_at((2, 15, 5)) == 7
    c.select(3)
    c.add_to_selection(7)
    c.merge()
    child = c.commit_and_continue("merged 7 into 3")
    c.disconnect()
    again = ProofreadingController()
    again.connect(repo)  # a later session: the base is found inside the repository
    assert again.version is not None and again.version.uuid == child.uuid
    assert again.version.body_at((2, 15, 5)) == 3 and again.version.body_at((2, 5, 18)) == 9
    again.disconnect()


def test_labels_that_cannot_be_a_base_are_refused(tmp_path: Path) -> None:
    assert labels_array(np.ones((4, 5), dtype=bool)).shape == (1, 4, 5)  # a 2-D mask: one plane of ids 0/1
    with pytest.raises(ArgumentError, match="non-negative"):
        labels_array(-np.ones((2, 2, 2), dtype=np.int8))
    with pytest.raises(ArgumentError, match="integer ids"):
        labels_array(np.zeros((2, 2, 2), dtype=np.float32))
    with pytest.raises(ArgumentError, match="2-D or 3-D"):
        labels_array(np.zeros((2, 2, 2, 2), dtype=np.uint8))
    c = ProofreadingController()
    with pytest.raises(ArgumentError, match="integer ids"):
        c.create_from_labels(tmp_path / "bad.repo", np.zeros((2, 2, 2), dtype=np.float32))
    assert not (tmp_path / "bad.repo").exists()  # refused before anything was written


def test_a_path_napari_read_but_we_do_not_falls_back_to_the_array(tmp_path: Path) -> None:
    tif = tmp_path / "cells.tif"
    tif.write_bytes(b"II*\x00")  # not a volume shardscope reads
    c = ProofreadingController()
    c.create_job(tmp_path / "cells.repo", str(tif), labels=blobs(), labels_name="cells").run_here()
    assert c.version is not None and c.version.labelmap.config.base.endswith(f"{IMPORTED_DIR}/cells")
    c.disconnect()


def test_default_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    data = tmp_path / "data" / "seg"
    data.mkdir(parents=True)
    # local, writable data: a visible folder beside it
    assert default_repository(str(data), "seg") == tmp_path / "data" / "seg.shardscope" / "seg.repo"
    beside = tmp_path / "data" / "seg.shardscope" / "seg.repo"
    assert default_repository(f"precomputed://file://{data}", "seg") == beside
    # remote data or an array: nothing until a folder is chosen once, then that folder
    assert remembered_folder() is None and default_repository("gs://bucket/fafb/seg", "seg") is None
    assert default_repository(None, "cells") is None
    remember_folder(tmp_path / "work")
    assert (config_dir() / "settings.json").is_file() and config_dir() == tmp_path / "config"
    assert default_repository("gs://bucket/fafb/seg", "x") == tmp_path / "work" / "seg.shardscope" / "seg.repo"
    assert default_repository(None, "cells [1]") == tmp_path / "work" / "cells-1.shardscope" / "cells-1.repo"
    assert "cache" not in str(default_repository(None, "cells"))
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "ro"
        (locked / "seg").mkdir(parents=True)
        locked.chmod(0o555)
        try:
            assert default_repository(str(locked / "seg"), "seg") == tmp_path / "work" / "seg.shardscope" / "seg.repo"
        finally:
            locked.chmod(0o755)
