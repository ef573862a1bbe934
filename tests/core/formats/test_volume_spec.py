"""Volume specs: pure data from the one metadata parse, shared with the inspector, opened by volumes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import FormatError
from napari_shardscope.core.formats import VolumeSpec, open_dataset
from napari_shardscope.core.formats.n5.dataset import N5Dataset
from napari_shardscope.core.formats.precomputed.dataset import PrecomputedDataset
from napari_shardscope.core.formats.volume_spec import ArrayTransform, default_axes
from napari_shardscope.core.formats.zarr3.dataset import Zarr3Dataset
from napari_shardscope.core.volumes import open_volume_specs
from tests.volume_cases import FormatCase, format_cases  # noqa: F401  (fixture)

CASES = ["precomputed", "precomputed-channels", "zarr3", "ome-zarr", "ome-zarr-labels", "n5", "n5-multiscale",
         "n5-bdv"]


@pytest.mark.parametrize("name", CASES)
def test_specs_are_frozen_pure_data_and_open_to_the_case(name: str, format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    case = format_cases[name]
    spec = open_dataset(case.path).volume_specs()[0]
    assert isinstance(spec, VolumeSpec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.levels[0].key = "x"  # type: ignore[misc]
    json.dumps([dict(lv.tensorstore) for lv in spec.levels])  # the TensorStore specs are plain JSON
    assert (spec.levels[0].shape, spec.levels[0].voxel_size, spec.levels[0].dtype) == (
        case.shape, pytest.approx(case.voxel_size), case.dtype)
    assert len(spec.levels) == case.levels and spec.unit == case.unit and spec.kind == case.kind
    assert spec.levels[0].downsampling_factors == (1.0,) * len(case.shape)
    # opening a level's TensorStore spec and applying its transform gives the presented array
    level = spec.levels[-1]
    (vol,) = open_volume_specs([spec])
    stored = ts.open(dict(level.tensorstore), read=True).result()
    assert level.transform.presented_shape(stored.shape) == level.shape == vol.levels[-1].shape
    np.testing.assert_array_equal(vol.levels[-1].array.read(), case.reference(len(spec.levels) - 1))


def test_the_inspector_gets_the_datasets_parse(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    pc = open_dataset(format_cases["precomputed"].path)
    assert isinstance(pc, PrecomputedDataset)
    assert pc.inspector().volume is pc.info
    n5 = open_dataset(format_cases["n5-multiscale"].path)
    assert isinstance(n5, N5Dataset)
    n5.volume_specs()
    reads = n5.store.stats.requests
    inspector = n5.inspector()
    assert n5.store.stats.requests == reads  # no attributes.json read again
    assert all(a is b for a, b in zip(inspector.levels, n5.levels, strict=True))
    ome = open_dataset(format_cases["ome-zarr"].path)
    assert isinstance(ome, Zarr3Dataset)
    ome.volume_specs()
    reads = ome.store.stats.requests
    assert ome.inspector().reader("0").metadata is ome.array_metadata("0")
    assert ome.store.stats.requests == reads  # the scale's zarr.json was parsed once, for both


def test_labels_come_with_their_image(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    image, labels = open_dataset(format_cases["ome-zarr"].path).volume_specs()
    assert (image.format, labels.format, labels.kind, labels.name) == ("ome-zarr", "ome-zarr", "segmentation", "cells")
    assert labels.url == str(format_cases["ome-zarr-labels"].path)
    assert [lv.downsampling_factors for lv in image.levels] == [(1.0, 1.0, 1.0), (1.0, 2.0, 2.0), (2.0, 4.0, 4.0)]


def test_a_tensorstore_disagreement_is_an_error_not_a_silent_difference(
        format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    spec = open_dataset(format_cases["zarr3"].path).volume_specs()[0]
    wrong = dataclasses.replace(spec, levels=(dataclasses.replace(spec.levels[0], shape=(1, 2, 3)),))
    (vol,) = open_volume_specs([wrong])  # levels open on first read (core/volumes/deferred.py)
    with pytest.raises(FormatError, match=r"TensorStore reads \(12, 40, 30\) uint32 where the metadata gives"):
        vol.levels[0].array.read()


def test_array_transform_and_default_axes() -> None:
    drop_channel = ArrayTransform(fixed=((3, 0),), order=(2, 1, 0))
    assert drop_channel.presented_shape((40, 36, 20, 1)) == (20, 36, 40)
    assert ArrayTransform(order=(3, 2, 1, 0)).presented_shape((40, 36, 20, 3)) == (3, 20, 36, 40)
    assert ArrayTransform().presented_shape((5, 6)) == (5, 6)
    assert drop_channel.to_json() == {"fixed": [[3, 0]], "order": [2, 1, 0]}
    assert default_axes(2) == ("y", "x") and default_axes(5) == ("t", "c", "z", "y", "x")
    assert default_axes(6) == ("d0", "d1", "d2", "z", "y", "x")


def test_n5_units_that_are_not_all_lengths_keep_values_as_written(tmp_path: Path) -> None:
    # Neuroglancer's fixture: units ["nm", "s"]. Converting one axis and not the other would mix
    # units in one volume; both stay as written and the volume is unitless.
    (tmp_path / "attributes.json").write_text(json.dumps(
        {"dimensions": [10, 20], "blockSize": [5, 5], "dataType": "uint16", "compression": {"type": "raw"},
         "resolution": [10, 20], "units": ["nm", "s"], "axes": ["x", "t"]}))
    (spec,) = open_dataset(tmp_path).volume_specs()
    assert (spec.axes, spec.unit, spec.levels[0].voxel_size) == (("t", "x"), None, (20.0, 10.0))
    (tmp_path / "attributes.json").write_text(json.dumps(
        {"dimensions": [10, 20], "blockSize": [5, 5], "dataType": "uint16", "compression": {"type": "raw"},
         "resolution": [10, 20], "units": ["um", "nm"]}))
    (spec,) = open_dataset(tmp_path).volume_specs()
    assert (spec.unit, spec.levels[0].voxel_size) == ("nm", (20.0, 10_000.0))
