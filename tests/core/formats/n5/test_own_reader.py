"""N5 that TensorStore's ``n5`` driver does not read opens all the same, through our block decoder.

Written by n5-java (``../shared/realdata``): the same image stored raw, gzip, bzip2, xz and lz4, and
a dataset of N5 1.5 (before 1.0's ``compression`` object: ``compressionType``). The lz4 and legacy
datasets go through :class:`~napari_shardscope.core.formats.n5.volume.N5ChunkSource` and must read
exactly what TensorStore reads of the others; a damaged lz4 block is a typed error naming the block.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.n5.volume import needs_own_reader
from napari_shardscope.core.volumes import open_volume
from tests.realdata import REALDATA

ZI = REALDATA / "n5java_zi" / "n5-java.n5"
pytestmark = pytest.mark.realdata


def tensorstore_read(path: Path) -> np.ndarray:
    """TensorStore's read of an n5java_zi copy (N5 order c, x, y) in the reader's order c, y, x."""
    return ts.open({"driver": "n5", "kvstore": f"file://{path}/"}).result().read().result().transpose(0, 2, 1)


def test_lz4_blocks_read_as_tensorstore_reads_the_gzip_copy() -> None:
    reference = tensorstore_read(ZI / "gzip")
    assert not needs_own_reader(open_dataset(ZI / "gzip").inspector().attributes())
    assert needs_own_reader(open_dataset(ZI / "lz4").inspector().attributes())
    vol = open_volume(ZI / "lz4")
    level = vol.levels[0].array
    np.testing.assert_array_equal(level.read(), reference)
    np.testing.assert_array_equal(level[1, 100:300, 50:60].read(), reference[1, 100:300, 50:60])


def test_pre_1_0_compression_type_reads() -> None:
    legacy = REALDATA / "n5java_backward" / "data-1.5.0.n5" / "raw"
    attrs = open_dataset(legacy).inspector().attributes()
    assert needs_own_reader(attrs) and "compressionType" in attrs.extra
    data = open_volume(legacy).levels[0].array.read()
    block = open_dataset(legacy).inspector().read_block([0] * attrs.ndim)
    assert block is not None
    np.testing.assert_array_equal(data[tuple(slice(0, n) for n in block.data.shape)], block.data)


def test_a_damaged_lz4_block_names_its_key(tmp_path: Path) -> None:
    shutil.copytree(ZI / "lz4", tmp_path / "lz4")
    block = tmp_path / "lz4" / "0" / "1" / "1"
    block.write_bytes(block.read_bytes()[:-10])
    vol = open_volume(tmp_path / "lz4")
    reference = tensorstore_read(ZI / "gzip")
    np.testing.assert_array_equal(vol.levels[0].array[:, :100, :100].read(), reference[:, :100, :100])
    with pytest.raises(ChunkDecodeError, match="0/1/1"):  # block (c 0, x 1, y 1)
        vol.levels[0].array[0, 100:200, 100:200].read()


def test_a_multiscale_group_without_attributes_of_its_own(tmp_path: Path) -> None:
    """N5 groups need no attributes.json: a plain directory of s0 (, s1, …) datasets is a multiscale volume."""
    shutil.copytree(ZI / "gzip", tmp_path / "pyramid" / "s0")
    assert not (tmp_path / "pyramid" / "attributes.json").exists()
    vol = open_volume(tmp_path / "pyramid")
    assert vol.format == "n5" and [lv.key for lv in vol.levels] == ["s0"]
    np.testing.assert_array_equal(vol.levels[0].array.read(), tensorstore_read(ZI / "gzip"))
    assert open_dataset(tmp_path / "pyramid").inspector().scale_keys() == ["s0"]


#: Who decodes each copy of the n5java_zi image: TensorStore's driver, our own block decoder, or libdeflate directly.
ZI_ROUTES = {"raw": "N5DirectSource", "gzip": "N5DirectSource", "bzip2": None, "xz": None, "lz4": "N5ChunkSource"}


@pytest.mark.parametrize("compression", sorted(ZI_ROUTES))
def test_every_n5java_zi_copy_presents_the_block_1_axis_as_channels(compression: str) -> None:
    """dims [3, 512, 512], blockSize [1, 100, 100], no ``axes``: the block-1 first axis is a channel axis
    (README "Axes as written"), whichever route decodes the blocks, and the voxels are the PNG the copies came from.
    """
    import imageio.v3 as iio

    png = iio.imread(REALDATA / "n5java_zi" / "reference_image.png")  # y, x, rgb
    spec = open_dataset(ZI / compression).volume_specs()[0]
    source = spec.levels[0].chunk_source
    assert (type(source).__name__ if source is not None else None) == ZI_ROUTES[compression]
    vol = open_volume(ZI / compression)
    assert (vol.axes, vol.shape, vol.channel_axis, vol.kind) == (("c", "y", "x"), (3, 512, 512), 0, "image")
    np.testing.assert_array_equal(vol.levels[0].array.read(), png.transpose(2, 0, 1))
    np.testing.assert_array_equal(vol.levels[0].array[1, 40:60, 300:333].read(), png[40:60, 300:333, 1])


@pytest.mark.parametrize("rel", ["zarrpy_n5_zi/zarr.n5/gzip", "z5py_n5_zi/z5py.n5/gzip"])
def test_the_same_image_written_by_zarr_python_and_z5py_presents_alike(rel: str) -> None:
    import imageio.v3 as iio

    png = iio.imread(REALDATA / "n5java_zi" / "reference_image.png")
    vol = open_volume(REALDATA / rel)
    assert (vol.axes, vol.channel_axis) == (("c", "y", "x"), 0)
    np.testing.assert_array_equal(vol.levels[0].array.read(), png.transpose(2, 0, 1))
