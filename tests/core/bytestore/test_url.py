"""The one URL grammar: every entry point (volumes, inspect, browser, export) parses URLs alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.bytestore import LocalByteStore, open_store, parse_url
from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.layout import open_layout
from napari_shardscope.core.volumes import open_volume


@pytest.mark.parametrize(
    ("text", "url", "hint"),
    [
        ("precomputed://gs://bkt/ds", "gs://bkt/ds", "precomputed"),
        ("zarr3://s3://bkt/a/b", "s3://bkt/a/b", "zarr3"),
        ("zarr2://s3://bkt/a/b", "s3://bkt/a/b", "zarr2"),
        ("zarr://s3://bkt/a/b", "s3://bkt/a/b", "zarr"),
        ("n5://https://host.org/x", "https://host.org/x", "n5"),
        ("gs://bkt/ds|zarr3:", "gs://bkt/ds", "zarr3"),
        ("gs://bkt/ds|zarr2:", "gs://bkt/ds", "zarr2"),
        ("https://host.org/x/|precomputed:", "https://host.org/x/", "precomputed"),
        ("https://host.org/ds/info", "https://host.org/ds", "precomputed"),
        ("s3://bkt/p/zarr.json", "s3://bkt/p", "zarr3"),
        ("s3://bkt/p/.zarray", "s3://bkt/p", "zarr2"),
        ("s3://bkt/p/.zgroup", "s3://bkt/p", "zarr2"),
        ("gs://bkt/n/attributes.json", "gs://bkt/n", "n5"),
        ("gs://bkt/ds", "gs://bkt/ds", None),
    ],
)
def test_parse_url_prefixes_suffixes_and_documents(text: str, url: str, hint: str | None) -> None:
    loc = parse_url(text)
    assert (loc.url, loc.format_hint) == (url, hint)
    assert loc.kvstore["path"].endswith("/")


def test_a_local_metadata_file_means_its_directory_but_a_directory_so_named_does_not(tmp_path: Path) -> None:
    (tmp_path / "info").write_text("{}")
    assert parse_url(tmp_path / "info").kvstore["path"] == f"{tmp_path}/"
    (tmp_path / "zarr.json").mkdir()  # a directory that happens to be called zarr.json is a place
    assert parse_url(tmp_path / "zarr.json").kvstore["path"] == f"{tmp_path}/zarr.json/"


@pytest.mark.parametrize("text", ["", "   ", "ftp://host/x", "precomputed://ftp://host/x"])
def test_parse_url_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ArgumentError):
        parse_url(text)


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    path = tmp_path / "vol"
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)},
            "multiscale_metadata": {"type": "segmentation", "data_type": "uint32", "num_channels": 1},
            "scale_metadata": {"size": [16, 12, 8], "resolution": [4, 4, 40], "chunk_size": [8, 8, 8],
                               "encoding": "raw"},
            "create": True}
    store = ts.open(spec).result()
    store[..., 0].write(np.arange(16 * 12 * 8, dtype=np.uint32).reshape(16, 12, 8)).result()
    return path


@pytest.mark.parametrize("form", ["precomputed://{p}", "{p}|precomputed:", "{p}/info", "file://{p}"])
def test_every_entry_point_takes_every_form(volume: Path, form: str, capsys: pytest.CaptureFixture[str]) -> None:
    # `shardscope open precomputed://…` worked while `shardscope inspect precomputed://…` said the
    # scheme was unsupported: both now go through parse_url.
    text = form.format(p=volume)
    assert open_volume(text).shape == (8, 12, 16)
    assert open_dataset(text).format_name == "precomputed"
    assert isinstance(open_store(text), LocalByteStore)
    assert open_layout(text).geometry().grid_shape == (2, 2, 1)
    assert run(["inspect", text, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "precomputed"
