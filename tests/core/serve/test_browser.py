"""Neuroglancer (the real client, in headless Chromium) shows what the server serves, where napari shows it.

A labelmap version after a merge and a cleave, a sharded precomputed segmentation written by igneous,
a sharded zarr v3 array and an OME-Zarr 0.5 label image are served, the link built from a napari-like
view is opened, and the rendered pixels are grouped by the labels the project reads at the same place: every label has
one colour, the merged supervoxels share one, the cleaved one has another.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.serve.handoff import default_view, mount_dataset, mount_version
from napari_shardscope.core.serve.ngstate import build_state, state_url
from napari_shardscope.core.serve.server import ShardServer
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.core.volumes import open_volume
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.core.serve.browser import Browser, chromium, colours_by_label, needs_chromium
from tests.realdata import REALDATA

pytestmark = needs_chromium
PX = 6.0  # screen pixels per voxel in the pictures


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture
def server() -> Iterator[ShardServer]:
    with ShardServer() as s:
        yield s


def show(server: ShardServer, browser: Browser, layer, position) -> tuple[object, dict]:  # type: ignore[no-untyped-def]
    view = default_view([layer], position=position, zoom=PX / layer.voxel_size[2])
    state = build_state(view)
    state.update({"showAxisLines": False, "showScaleBar": False, "showDefaultAnnotations": False})
    state["layers"][0]["selectedAlpha"] = 1.0
    return browser.render(state_url(server.client_url, state)), state


def check_slice(rendered, labels: np.ndarray, center_yx: tuple[float, float]) -> dict[int, tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    colours, agreement = colours_by_label(rendered, labels, center_yx, PX)
    assert agreement > 0.99, f"only {agreement:.1%} of voxel centres have their label's colour"
    nonzero = {k: c for k, c in colours.items() if k}
    assert len(set(nonzero.values())) >= 0.9 * len(nonzero), "distinct labels should mostly get distinct colours"
    return colours


def test_version_after_merge_and_cleave(tmp_path: Path, server: ShardServer, browser: Browser) -> None:
    base = voronoi_supervoxels((6, 64, 80), 24, seed=11)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(32, 32, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
        v = lm.at("main")
        z = 3
        plane = base[z]
        svs = [int(s) for s in np.unique(plane)]
        a, b, c = svs[0], svs[1], svs[2]
        v.merge(a, [b, c])
        v.cleave(a, [c])
        bodies = v.read_bodies(np.s_[z], 0)
        assert bodies[plane == a][0] == bodies[plane == b][0] != bodies[plane == c][0]
        layer = mount_version(server, lm, v.uuid)
        g = lm.config.scales[0]
        # a napari world position on a voxel centre in the middle of the plane
        pos = (g.translate[0] + z * g.voxel_size[0], g.translate[1] + 32 * g.voxel_size[1],
               g.translate[2] + 40 * g.voxel_size[2])
        rendered, _ = show(server, browser, layer, pos)
        colours = check_slice(rendered, bodies, (32.0, 40.0))
        assert colours[int(bodies[plane == a][0])] == colours[int(bodies[plane == b][0])]
        assert colours[int(bodies[plane == c][0])] != colours[int(bodies[plane == a][0])]
    finally:
        repo.close()


@pytest.mark.realdata
def test_sharded_precomputed_as_on_disk(server: ShardServer, browser: Browser) -> None:
    url = str(REALDATA / "igneous_pinky_sharded")
    layer = mount_dataset(server, url)
    vol = open_volume(url)
    level = vol.levels[0]
    vz, vy, vx = level.voxel_size
    tz, ty, tx = level.translate
    iz, iy, ix = 25, 115, 100  # array indices of the voxel at the centre of the view
    pos = (tz + iz * vz, ty + iy * vy, tx + ix * vx)
    rendered, _ = show(server, browser, layer, pos)
    labels = np.asarray(level.array[iz].read(), dtype=np.uint64)
    check_slice(rendered, labels, (float(iy), float(ix)))


def test_sharded_zarr3_as_on_disk(tmp_path: Path, server: ShardServer, browser: Browser) -> None:
    data = voronoi_supervoxels((4, 48, 56), 20, seed=5).astype(np.uint32)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "seg.zarr")},
            "metadata": {"shape": list(data.shape), "data_type": "uint32", "dimension_names": ["z", "y", "x"],
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 32, 32]}},
                         "codecs": [{"name": "sharding_indexed", "configuration": {
                             "chunk_shape": [2, 16, 16], "codecs": [{"name": "bytes"}, {"name": "gzip"}],
                             "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}}]},
            "create": True}
    ts.open(spec).result().write(data).result()
    layer = mount_dataset(server, str(tmp_path / "seg.zarr"))
    assert layer.layer.source.startswith("zarr3://")
    vol = open_volume(str(tmp_path / "seg.zarr"))
    level = vol.levels[0]
    assert vol.kind == "segmentation" and not layer.layer.ome
    iz, iy, ix = 2, 24, 28
    vz, vy, vx = level.voxel_size
    tz, ty, tx = level.translate
    rendered, _ = show(server, browser, layer, (tz + iz * vz, ty + iy * vy, tx + ix * vx))
    check_slice(rendered, data[iz].astype(np.uint64), (float(iy), float(ix)))


def write_ome_zarr3(path: Path, data: np.ndarray, voxel: tuple[float, float, float],
                    translate: tuple[float, float, float]) -> None:
    """An OME-Zarr 0.5 label image (zarr v3, sharded) with one scale placed at ``translate`` (nm)."""
    import json

    path.mkdir(parents=True)
    axes = [{"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"]
    ome = {"version": "0.5", "image-label": {},
           "multiscales": [{"axes": axes, "datasets": [{"path": "s0", "coordinateTransformations": [
               {"type": "scale", "scale": list(voxel)}, {"type": "translation", "translation": list(translate)}]}]}]}
    (path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {"ome": ome}}))
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / "s0")},
            "metadata": {"shape": list(data.shape), "data_type": "uint32", "dimension_names": ["z", "y", "x"],
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 32, 32]}},
                         "codecs": [{"name": "sharding_indexed", "configuration": {
                             "chunk_shape": [2, 16, 16], "codecs": [{"name": "bytes"}, {"name": "gzip"}],
                             "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}}]},
            "create": True}
    ts.open(spec).result().write(data).result()


def test_ome_zarr3_as_on_disk(tmp_path: Path, server: ShardServer, browser: Browser) -> None:
    data = voronoi_supervoxels((4, 48, 56), 20, seed=6).astype(np.uint32)
    write_ome_zarr3(tmp_path / "seg.ome.zarr", data, (40.0, 8.0, 8.0), (400.0, 80.0, 160.0))
    layer = mount_dataset(server, str(tmp_path / "seg.ome.zarr"))
    vol = open_volume(str(tmp_path / "seg.ome.zarr"))
    level = vol.levels[0]
    assert vol.kind == "segmentation" and layer.layer.ome
    iz, iy, ix = 2, 24, 28
    vz, vy, vx = level.voxel_size
    tz, ty, tx = level.translate
    rendered, _ = show(server, browser, layer, (tz + iz * vz, ty + iy * vy, tx + ix * vx))
    check_slice(rendered, data[iz].astype(np.uint64), (float(iy), float(ix)))


def test_remote_ome_zarr3_relayed(tmp_path: Path, server: ShardServer, browser: Browser) -> None:
    """A dataset that is remote for the project (served over HTTP elsewhere) is relayed through its byte store."""
    data = voronoi_supervoxels((4, 48, 56), 20, seed=9).astype(np.uint32)
    write_ome_zarr3(tmp_path / "seg.ome.zarr", data, (40.0, 8.0, 8.0), (0.0, 0.0, 0.0))
    with ShardServer() as origin:
        from napari_shardscope.core.bytestore import open_store
        from napari_shardscope.core.serve.server import StoreMount

        remote = origin.mount("data/seg.ome.zarr", StoreMount(open_store(str(tmp_path / "seg.ome.zarr"))))
        layer = mount_dataset(server, remote)
        assert layer.layer.source.startswith(f"zarr3://{server.url}/") and layer.layer.ome
        iz, iy, ix = 1, 20, 30
        rendered, _ = show(server, browser, layer, (iz * 40.0, iy * 8.0, ix * 8.0))
        check_slice(rendered, data[iz].astype(np.uint64), (float(iy), float(ix)))


def test_version_body_meshes_in_the_3d_panel(tmp_path: Path, server: ShardServer, browser: Browser) -> None:
    """A merged body of a served version is drawn in Neuroglancer's 3-D panel from the served meshes."""
    base = voronoi_supervoxels((16, 48, 48), 12, seed=5)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 16, 16), sharded=True)
    repo = create_repository(tmp_path / "repo")
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
        v = lm.at("main")
        svs = [int(s) for s in np.unique(base)]
        v.merge(svs[0], [svs[1]])
        assert len(lm.mesh(svs[0], v.uuid).faces) > 0

        def nonblack(segments: tuple[int, ...]) -> int:
            layer = mount_version(server, lm, v.uuid, segments=segments)
            view = default_view([layer], zoom=PX / layer.voxel_size[2], layout="3d")
            state = build_state(view)
            state.update({"showAxisLines": False, "showScaleBar": False, "showDefaultAnnotations": False,
                          "showSlices": False})
            rendered = browser.render(state_url(server.client_url, state))
            x, y, w, h = (round(a) for a in rendered.panel)
            # the panel's middle (its corners hold the axis names and a button)
            panel = rendered.pixels[y + h // 5:y + h - h // 5, x + w // 5:x + w - w // 5, :3].astype(int)
            return int((panel.sum(axis=2) > 30).sum())

        # no body selected: slices hidden, nothing in 3-D; the merged body selected: its mesh is drawn
        assert nonblack(()) == 0
        assert nonblack((svs[0],)) > 500
    finally:
        repo.close()
