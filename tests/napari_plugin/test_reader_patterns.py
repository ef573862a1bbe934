"""The reader claims only the project's formats: napari never asks "choose reader" for a TIFF or a PNG.

Checked through npe2 (which readers napari offers for a path) and in a real viewer: a .tif opens with
napari's own reader without naming a plugin, while our metadata files, directories and URLs still
come to us.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.sample_data import SampleDataset
from tests.volume_cases import sample  # noqa: F401  (fixture)

PLUGIN = "napari-shardscope"


def offered(path: str) -> set[str]:
    """Plugins whose reader napari offers for ``path`` (by npe2's filename patterns)."""
    from npe2 import PluginManager

    pm = PluginManager.instance()
    pm.discover()
    return {r.plugin_name for r in pm.iter_compatible_readers([path])}


def test_manifest_names_no_catch_all_pattern() -> None:
    from npe2 import PluginManager

    pm = PluginManager.instance()
    pm.discover()
    (reader,) = pm.get_manifest(PLUGIN).contributions.readers or []
    assert "*" not in reader.filename_patterns and reader.accepts_directories
    assert {"info", "zarr.json", "attributes.json", "*.n5", "*.zarr", "https://*", "gs://*"} <= set(
        reader.filename_patterns)


@pytest.mark.parametrize("name", ["cells.tif", "cells.TIFF", "photo.png", "notes.csv", "stack.ome.tif"])
def test_image_files_are_not_claimed(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"")
    assert PLUGIN not in offered(str(path))


def test_project_formats_are_claimed(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    for path in (sample.segmentation / "info", sample.segmentation, tmp_path / "x.zarr" / "zarr.json",
                 tmp_path / "v.n5" / "attributes.json", tmp_path / "a" / ".zarray"):
        assert PLUGIN in offered(str(path)), path
    for url in ("https://example.org/seg", "gs://bucket/seg", "s3://bucket/seg", "precomputed://gs://b/seg",
                "zarr3://https://example.org/v.zarr", "https://example.org/v|zarr3:"):
        assert PLUGIN in offered(url), url


@pytest.mark.qt_binding_lane
def test_a_tif_opens_with_napari_reader_without_asking(make_napari_viewer: Any, tmp_path: Path) -> None:
    import tifffile

    path = tmp_path / "cells.tif"
    data = np.arange(4 * 16 * 16, dtype=np.uint16).reshape(4, 16, 16)
    tifffile.imwrite(path, data)
    viewer = make_napari_viewer()
    layers = viewer.open(str(path))  # no plugin named: one compatible reader, so napari asks nothing
    assert len(layers) == 1 and np.array_equal(np.asarray(layers[0].data), data)
    assert layers[0].source.reader_plugin != PLUGIN
