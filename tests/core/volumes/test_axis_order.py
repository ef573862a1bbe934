"""Axes as written, presented in the reader's order (issue 16).

Whatever order a dataset stores its axes in — zarr v3 ``dimension_names`` such as webKnossos'
``c, x, y, z``, xarray's ``_ARRAY_DIMENSIONS`` in zarr v2, OME axes — it is presented with the
axes other than x, y, z first (as written) and then z, y, x, names kept. The voxels are a lazy
transpose of the stored array, and the shard browser maps a presented voxel back to the stored
chunk that holds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.layout import open_layout
from napari_shardscope.core.volumes import open_volume


def zarr3_array(path: Path, data: np.ndarray, names: list[str]) -> Path:
    store = ts.open({"driver": "zarr3", "kvstore": f"file://{path}/", "create": True,
                     "metadata": {"shape": list(data.shape), "data_type": data.dtype.name, "dimension_names": names,
                                  "chunk_grid": {"name": "regular",
                                                 "configuration": {"chunk_shape": [min(4, n) for n in data.shape]}},
                                  "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}).result()
    store.write(data).result()
    return path


@pytest.mark.parametrize(("names", "order"), [
    (["c", "x", "y", "z"], (0, 3, 2, 1)),
    (["x", "y", "z"], (2, 1, 0)),
    (["t", "x", "c", "y"], (0, 2, 3, 1)),
    (["z", "y", "x"], (0, 1, 2)),
    (["a", "b", "c"], (0, 1, 2)),  # no x and y: as stored
])
def test_zarr3_dimension_names_are_presented_in_reader_order(tmp_path: Path, names: list[str],
                                                             order: tuple[int, ...]) -> None:
    shape = (2, 5, 6, 7)[: len(names)] if len(names) == 4 else (5, 6, 7)
    data = np.arange(int(np.prod(shape)), dtype="u2").reshape(shape)
    path = zarr3_array(tmp_path / "a.zarr", data, names)
    vol = open_volume(path, kind="image")
    assert vol.axes == tuple(names[i] for i in order)
    np.testing.assert_array_equal(vol.levels[0].array.read(), data.transpose(order))
    if "c" in names:
        assert vol.axes[vol.channel_axis] == "c"
    record = open_dataset(path).inspector().inspect()["scales"][0]["volume"]
    assert tuple(record["axes"]) == vol.axes and tuple(record["shape"]) == vol.shape


def test_the_shard_browser_maps_a_presented_voxel_to_its_stored_chunk(tmp_path: Path) -> None:
    data = np.zeros((3, 8, 12, 16), dtype="u1")  # c, x, y, z
    path = zarr3_array(tmp_path / "w.zarr", data, ["c", "x", "y", "z"])
    tree = open_layout(path)
    (root,) = tree.roots()
    geo = tree.geometry(root.scale)
    assert geo.array_axes == ("c", "z", "y", "x")
    assert geo.to_format_order(("c", "z", "y", "x")) == ("c", "x", "y", "z")
    voxel = geo.voxel_at_world((0, 13, 9, 5))  # c, z, y, x world (unit voxels at 0)
    assert voxel == (0, 5, 9, 13)
    assert geo.grid_position(voxel) == (0, 1, 2, 3)


def test_zarr2_array_dimensions_and_ome_04_axes(tmp_path: Path) -> None:
    data = np.arange(4 * 5 * 6, dtype="u2").reshape(4, 5, 6)  # x, y, z
    z = zarr.create(shape=data.shape, chunks=(2, 2, 2), dtype=data.dtype, store=str(tmp_path / "v2.zarr"),
                    zarr_format=2)
    z[:] = data
    z.attrs["_ARRAY_DIMENSIONS"] = ["x", "y", "z"]
    vol = open_volume(tmp_path / "v2.zarr", kind="image")
    assert vol.axes == ("z", "y", "x")
    np.testing.assert_array_equal(vol.levels[0].array.read(), data.T)

    group = zarr.open_group(str(tmp_path / "ome.zarr"), mode="w", zarr_format=2)
    arr = group.create_array("0", shape=data.shape, chunks=(2, 2, 2), dtype=data.dtype)
    arr[:] = data
    group.attrs["multiscales"] = [{"version": "0.4", "axes": [
        {"name": "x", "type": "space", "unit": "nanometer"}, {"name": "y", "type": "space", "unit": "nanometer"},
        {"name": "z", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [4.0, 5.0, 0.04]}]}]}]
    ome = open_volume(tmp_path / "ome.zarr")
    assert ome.axes == ("z", "y", "x") and ome.voxel_size == pytest.approx((40.0, 5.0, 4.0))
    np.testing.assert_array_equal(ome.levels[0].array.read(), data.T)
    assert json.loads((tmp_path / "ome.zarr" / ".zattrs").read_text())["multiscales"][0]["axes"][0]["name"] == "x"


@pytest.mark.parametrize(("dims", "block", "names", "order"), [
    ([3, 24, 20, 16], [1, 8, 8, 8], ("c", "z", "y", "x"), (0, 3, 2, 1)),  # webKnossos: channel fastest
    ([24, 20, 16, 3], [8, 8, 8, 1], ("c", "z", "y", "x"), (3, 2, 1, 0)),  # x, y, z, c
    ([24, 20, 16], [8, 8, 8], ("z", "y", "x"), (2, 1, 0)),
])
def test_n5_axes_by_layout_when_unnamed(tmp_path: Path, dims: list[int], block: list[int],
                                        names: tuple[str, ...], order: tuple[int, ...]) -> None:
    store = ts.open({"driver": "n5", "kvstore": f"file://{tmp_path}/d.n5/", "create": True,
                     "metadata": {"dimensions": dims, "blockSize": block, "dataType": "uint16",
                                  "compression": {"type": "raw"}}}).result()
    data = np.arange(int(np.prod(dims)), dtype="u2").reshape(dims)  # N5 order, as TensorStore indexes it
    store.write(data).result()
    vol = open_volume(tmp_path / "d.n5")
    assert vol.axes == names
    np.testing.assert_array_equal(vol.levels[0].array.read(), data.transpose(order))
    assert open_dataset(tmp_path / "d.n5").inspector().inspect()["scales"][0]["volume"]["axes"] == list(names)


def test_n5_axes_attribute_is_read_in_n5_order(tmp_path: Path) -> None:
    store = ts.open({"driver": "n5", "kvstore": f"file://{tmp_path}/a.n5/", "create": True,
                     "metadata": {"dimensions": [4, 5, 6, 2], "blockSize": [4, 5, 6, 1], "dataType": "uint8",
                                  "compression": {"type": "raw"}, "axes": ["x", "y", "z", "t"]}}).result()
    data = np.arange(4 * 5 * 6 * 2, dtype="u1").reshape(4, 5, 6, 2)
    store.write(data).result()
    vol = open_volume(tmp_path / "a.n5")
    assert vol.axes == ("t", "z", "y", "x")
    np.testing.assert_array_equal(vol.levels[0].array.read(), data.transpose(3, 2, 1, 0))
