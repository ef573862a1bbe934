"""How a volume asks to be shown: channel names, colours, visibility and contrast limits (``display_of``).

From metadata where it says (OME-Zarr ``omero.channels``: ``label``, ``color``, ``window`` start/end
or min/max, ``active``; NGFF 0.4 in ``.zattrs``, 0.5 under ``attributes.ome``), else for float images
from the data — the coarsest level when it is small, else a few chunks at its centre, never the whole
volume — and for integer images from the dtype. The voxels compared against come from zarr-python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.volumes import open_volume, open_volumes
from napari_shardscope.core.volumes.display import SAMPLE_VOXELS, ChannelView, display_of
from tests.realdata import REALDATA, missing


def _ome_group(path: Path, data: np.ndarray, omero: dict[str, Any], *, version: str) -> Path:
    """A one-level OME-Zarr image (c, y, x) written by zarr-python: NGFF 0.4 (zarr v2) or 0.5 (zarr v3)."""
    import zarr

    fmt = 2 if version == "0.4" else 3
    group = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    group.create_array("0", data=data, chunks=(1, 16, 16))
    ms = {"axes": [{"name": "c", "type": "channel"}, {"name": "y", "type": "space", "unit": "nanometer"},
                   {"name": "x", "type": "space", "unit": "nanometer"}],
          "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 4, 4]}]}]}
    if version == "0.4":
        group.attrs.update({"multiscales": [{**ms, "version": "0.4"}], "omero": omero})
    else:
        group.attrs.update({"ome": {"version": "0.5", "multiscales": [ms], "omero": omero}})
    return path


OMERO = {"channels": [
    {"label": "DAPI", "color": "0000FF", "window": {"start": 10, "end": 200, "min": 0, "max": 255}, "active": True},
    {"label": "GFP", "color": "00ff00", "window": {"min": 5, "max": 90}, "active": False},
    {"label": "", "color": "not a colour", "active": "yes"},  # unusable fields: defaults
]}


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_omero_channels_name_colour_window_and_show_each_channel(tmp_path: Path, version: str) -> None:
    data = (np.arange(3 * 32 * 32) % 251).astype(np.uint8).reshape(3, 32, 32)
    vol = open_volume(_ome_group(tmp_path / "img.zarr", data, OMERO, version=version))
    assert vol.channel_axis == 0
    views = display_of(vol)
    assert views == (
        ChannelView("DAPI", "#0000ff", (10.0, 200.0), True, "metadata"),
        ChannelView("GFP", "#00ff00", (5.0, 90.0), False, "metadata"),  # min/max when start/end are absent
        ChannelView("img.zarr [2]", None, (0.0, 255.0), True, "dtype"),
    )


def test_three_channels_without_colours_are_red_green_blue(tmp_path: Path) -> None:
    """No channel colour in the metadata and three channels: red, green, blue (napari's split of an RGB image),
    not napari's cyan/magenta/yellow cycle; any metadata colour keeps the metadata's say; two channels keep
    napari's magenta/green (``None``)."""
    data = (np.arange(3 * 32 * 32) % 251).astype(np.uint8).reshape(3, 32, 32)
    unnamed = {"channels": [{"window": {"start": 0, "end": 255}} for _ in range(3)]}
    vol = open_volume(_ome_group(tmp_path / "rgb.zarr", data, unnamed, version="0.5"))
    assert [v.colormap for v in display_of(vol)] == ["red", "green", "blue"]
    one = {"channels": [{"color": "ff00ff"}, {}, {}]}
    vol = open_volume(_ome_group(tmp_path / "one.zarr", data, one, version="0.5"))
    assert [v.colormap for v in display_of(vol)] == ["#ff00ff", None, None]
    vol = open_volume(_ome_group(tmp_path / "two.zarr", data[:2], unnamed, version="0.4"))
    assert [v.colormap for v in display_of(vol)] == [None, None]


def test_ome_zarr_0_5_from_zarr_java_names_its_channels_and_ranges_float_data() -> None:
    """zarrjava_ome05: t, c, z, y, x float32, omero labels and colours but no window: limits from the data."""
    import zarr

    if not (REALDATA / "zarrjava_ome05").is_dir():
        missing()
    vol = open_volumes(REALDATA / "zarrjava_ome05")[0]
    views = display_of(vol)
    assert [(v.name, v.colormap, v.visible, v.source) for v in views] == [
        ("DAPI", "#0000ff", True, "data"), ("GFP", "#00ff00", True, "data")]
    coarsest = np.asarray(zarr.open_array(str(REALDATA / "zarrjava_ome05" / "1"), mode="r")[:])  # t, c, z, y, x
    for c, view in enumerate(views):
        channel = coarsest[:, c]
        assert view.contrast_limits == (float(np.nanmin(channel)), float(np.nanmax(channel)))


def _float_array(path: Path, data: np.ndarray, chunks: tuple[int, ...]) -> Path:
    import zarr

    z = zarr.create(shape=data.shape, chunks=chunks, dtype=data.dtype, store=str(path), zarr_format=2)
    z[:] = data
    return path


def test_a_float_array_takes_its_limits_from_its_values(tmp_path: Path) -> None:
    """A float32 zarr v2 array of 0..99 has limits (0, 99), not the dtype's (0, 1) (a solid white square)."""
    data = (np.arange(64 * 64, dtype=np.float32) % 100).reshape(64, 64)
    (view,) = display_of(open_volume(_float_array(tmp_path / "f.zarr", data, (32, 32))))
    assert (view.name, view.colormap, view.contrast_limits, view.source) == ("f.zarr", None, (0.0, 99.0), "data")


def test_nan_and_inf_are_left_out_and_a_constant_image_gets_a_usable_range(tmp_path: Path) -> None:
    data = np.full((16, 16), 7.5, np.float32)
    data[0, :4] = [np.nan, np.inf, -np.inf, np.nan]
    (view,) = display_of(open_volume(_float_array(tmp_path / "c.zarr", data, (16, 16))))
    assert view.contrast_limits == (7.5, 8.5)
    (empty,) = display_of(open_volume(_float_array(tmp_path / "n.zarr", np.full((8, 8), np.nan, np.float32),
                                                   (8, 8))))
    assert empty.contrast_limits == (0.0, 1.0) and empty.source == "dtype"


def test_a_large_float_volume_is_sampled_at_its_centre_never_read_whole(tmp_path: Path) -> None:
    """Above SAMPLE_VOXELS only chunks at the centre are read: a far corner with extreme values and a chunk
    file that does not decode are never touched."""
    side = 2048
    assert side * side > SAMPLE_VOXELS
    data = np.zeros((side, side), np.float32)
    data[:] = (np.arange(side, dtype=np.float32) % 50)[None, :]
    data[:256, :256] = 1e9  # the corner chunk: would dominate the range if read
    path = _float_array(tmp_path / "big.zarr", data, (256, 256))
    (path / "7.7").write_bytes(b"not a chunk")  # a damaged chunk far from the centre
    (view,) = display_of(open_volume(path))
    assert view.source == "data" and view.contrast_limits == (0.0, 49.0)


def test_integer_images_keep_their_dtype_range_and_labels_have_none(tmp_path: Path) -> None:
    import zarr

    z = zarr.create(shape=(16, 16), chunks=(8, 8), dtype="uint16", store=str(tmp_path / "u.zarr"), zarr_format=2)
    z[:] = 3
    (view,) = display_of(open_volume(tmp_path / "u.zarr"))
    assert (view.contrast_limits, view.source) == ((0.0, 65535.0), "dtype")
    (labels,) = display_of(open_volume(tmp_path / "u.zarr", kind="segmentation"))
    assert labels.contrast_limits is None and labels.colormap is None


def test_the_display_is_worked_out_once_per_volume(tmp_path: Path) -> None:
    data = (np.arange(64 * 64, dtype=np.float32) % 100).reshape(64, 64)
    vol = open_volume(_float_array(tmp_path / "f.zarr", data, (32, 32)))
    first = display_of(vol)
    (tmp_path / "f.zarr" / "0.0").write_bytes(b"gone")  # a second estimate would fail to read: it is not made
    assert display_of(vol) is first
    json.dumps([v.contrast_limits for v in first])  # plain floats
