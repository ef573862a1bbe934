"""COSEM / OpenOrganelle ``transform`` metadata on N5 scales (issue 16).

Each scale's ``attributes.json`` carries ``transform`` (``axes``, ``scale``, ``translate``, ``units``,
slowest axis first): that scale's own voxel size and offset. Every consumer — the viewer, ``inspect``,
the shard browser, export's source — must place the scales by it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.volumes import open_volume
from tests.core.formats.test_consistency import check_dataset


def write_cosem(root: Path, translate: list[float] | None = None) -> np.ndarray:
    data = np.arange(8 * 20 * 24, dtype="uint8").reshape(8, 20, 24)  # z, y, x
    for i, f in enumerate((1, 2)):
        level = data[:, ::f, ::f]
        store = ts.open({"driver": "n5", "kvstore": f"file://{root}/s{i}/", "create": True,
                         "metadata": {"dimensions": list(level.shape[::-1]), "blockSize": [8, 8, 8],
                                      "dataType": "uint8", "compression": {"type": "gzip"}}}).result()
        store.write(level.T).result()
        attrs_path = root / f"s{i}" / "attributes.json"
        attrs = json.loads(attrs_path.read_text())
        attrs["transform"] = {"axes": ["z", "y", "x"], "scale": [5.0, 4.0 * f, 4.0 * f],
                              "translate": translate or [100.0, 2.0 * (f - 1), 2.0 * (f - 1)],
                              "units": ["nm", "nm", "nm"]}
        attrs_path.write_text(json.dumps(attrs))
    (root / "attributes.json").write_text(json.dumps({"multiscales": [{"datasets": [{"path": "s0"},
                                                                                     {"path": "s1"}]}]}))
    return data


def test_cosem_transform_places_every_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_cosem(tmp_path / "em.n5")
    vol = open_volume(tmp_path / "em.n5")
    assert vol.unit == "nm"
    assert [lv.voxel_size for lv in vol.levels] == [(5.0, 4.0, 4.0), (5.0, 8.0, 8.0)]
    assert [lv.translate for lv in vol.levels] == [(100.0, 0.0, 0.0), (100.0, 2.0, 2.0)]
    np.testing.assert_array_equal(vol.levels[1].array.read(), data[:, ::2, ::2])
    assert set(check_dataset(str(tmp_path / "em.n5"), capsys)) == {"open_volume", "inspect", "tree", "export"}


def test_a_bad_transform_names_the_field(tmp_path: Path) -> None:
    write_cosem(tmp_path / "bad.n5", translate=[0.0, "x", 0.0])  # type: ignore[list-item]
    with pytest.raises(MetadataError, match=r"transform\.translate"):
        open_volume(tmp_path / "bad.n5")
