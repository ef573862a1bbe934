"""Export to OME-Zarr 0.5 / Zarr v3 sharding_indexed: zarr-python and TensorStore read it back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.export.source import ArraySource
from napari_shardscope.core.export.zarr3 import choose_shard_shape, export_zarr3
from napari_shardscope.core.formats import open_dataset


def test_zarr_export_reads_back(tmp_path: Path) -> None:
    import zarr

    rng = np.random.default_rng(4)
    s0 = rng.integers(0, 9, size=(40, 70, 90), dtype=np.uint32)
    s0[:, :, 60:] = 0  # all-zero shards are not written
    s1 = s0[::2, ::2, ::2].copy()
    source = ArraySource((s0, s1), ((4.0, 4.0, 40.0), (8.0, 8.0, 80.0)))
    report = export_zarr3(source, str(tmp_path / "out.zarr"), inner_chunk=(16, 16, 16), shard_shape=(32, 32, 32))
    assert report.shards
    group = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")
    ms = group.attrs["ome"]["multiscales"][0]
    assert [d["path"] for d in ms["datasets"]] == ["0", "1"]
    assert ms["datasets"][1]["coordinateTransformations"][0]["scale"] == [80.0, 8.0, 8.0]
    for level, expected in enumerate((s0, s1)):
        np.testing.assert_array_equal(group[str(level)][...], expected)
        t = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "out.zarr" / str(level))}}
        ).result()
        np.testing.assert_array_equal(t.read().result(), expected)
    assert list(open_dataset(tmp_path / "out.zarr").inspector().validate()) == []


def test_shard_shape_is_whole_inner_chunks_under_the_budget() -> None:
    shape = choose_shard_shape((1000, 3000, 3000), (64, 64, 64), 8)
    assert all(s % 64 == 0 for s in shape)
    assert np.prod(shape) * 8 <= 1 << 28 and np.prod(shape) * 8 > 1 << 26
    assert choose_shard_shape((10, 10, 10), (10, 10, 10), 1) == (10, 10, 10)


def test_shard_shape_and_budget_are_honoured_at_every_level(tmp_path: Path) -> None:
    import zarr

    rng = np.random.default_rng(5)
    s0 = rng.integers(1, 9, size=(40, 70, 90), dtype=np.uint16)
    s1 = s0[::4, ::4, ::4].copy()  # (10, 18, 23): shorter than the 32³ inner chunk on every axis
    source = ArraySource((s0, s1), ((4.0, 4.0, 40.0), (16.0, 16.0, 160.0)))
    export_zarr3(source, str(tmp_path / "given.zarr"), inner_chunk=(32, 32, 32), shard_shape=(32, 64, 64))
    group = zarr.open_group(str(tmp_path / "given.zarr"), mode="r")
    assert group["0"].shards == (32, 64, 64) and group["0"].chunks == (32, 32, 32)
    assert group["1"].shards == group["1"].chunks == (10, 18, 23)
    for level, expected in enumerate((s0, s1)):
        np.testing.assert_array_equal(group[str(level)][...], expected)
    budget = export_zarr3(source, str(tmp_path / "small.zarr"), inner_chunk=(16, 16, 16), shard_bytes=16**3 * 2 * 8)
    default = export_zarr3(source, str(tmp_path / "large.zarr"), inner_chunk=(16, 16, 16))
    assert zarr.open_group(str(tmp_path / "small.zarr"), mode="r")["0"].shards == (32, 32, 32)
    assert len(budget.shards) > len(default.shards)
    with pytest.raises(ArgumentError, match="multiples of the inner chunk"):
        export_zarr3(source, str(tmp_path / "bad.zarr"), inner_chunk=(32, 32, 32), shard_shape=(48, 64, 64))


def test_overwrite_deletes_a_shard_the_new_export_leaves_all_zero(tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    old = np.full((64, 64, 128), 7, np.uint8)  # z, y, x: two 64³ shards, both written
    new = np.zeros_like(old)
    new[:, :, :64] = 3  # the second shard is all zero: not written, so the old one must go
    export_zarr3(ArraySource((old,), ((4.0, 4.0, 4.0),), kind="image"), str(out), inner_chunk=(32, 32, 32),
                 shard_shape=(64, 64, 64))
    assert (out / "0" / "c" / "0" / "0" / "1").is_file()
    export_zarr3(ArraySource((new,), ((4.0, 4.0, 4.0),), kind="image"), str(out), inner_chunk=(32, 32, 32),
                 shard_shape=(64, 64, 64), overwrite=True)
    assert not (out / "0" / "c" / "0" / "0" / "1").exists()
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(out / "0")}}).result()
    np.testing.assert_array_equal(t.read().result(), new)
    assert list(open_dataset(out).inspector().validate()) == []


def test_inner_chunk_and_shard_shape_must_be_three_positive_integers(tmp_path: Path) -> None:
    source = ArraySource((np.ones((8, 8, 8), np.uint8),), ((1.0, 1.0, 1.0),))
    with pytest.raises(ArgumentError, match="inner_chunk must be 3 positive integers"):
        export_zarr3(source, str(tmp_path / "out"), inner_chunk=(0, 64, 64))
    with pytest.raises(ArgumentError, match="inner_chunk must be 3 positive integers"):
        export_zarr3(source, str(tmp_path / "out"), inner_chunk=(64, 64))
    with pytest.raises(ArgumentError, match="shard_shape must be 3 positive integers"):
        export_zarr3(source, str(tmp_path / "out"), shard_shape=(64, 64))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["segmentation", "image"])
def test_a_segmentation_opens_as_labels(tmp_path: Path, kind: str) -> None:
    from napari_shardscope.core.volumes import open_volume

    data = np.arange(8 * 8 * 8, dtype=np.uint32).reshape(8, 8, 8)
    export_zarr3(ArraySource((data,), ((1.0, 1.0, 1.0),), kind=kind), str(tmp_path / "out"))  # type: ignore[arg-type]
    ome = json.loads((tmp_path / "out" / "zarr.json").read_text())["attributes"]["ome"]
    assert ("image-label" in ome) == (kind == "segmentation")
    assert open_volume(str(tmp_path / "out")).kind == kind
