"""The napari side: reader contribution, layers in a real viewer (Xvfb), chunk reads, manifest, CLI.

The read-count proof serves the sample volume over HTTP (real range requests) and maps every
request back to the chunk whose bytes it covers, using our own shard index reader on the served
files: after a z-step, the chunks read at the displayed level must be exactly those intersecting
the displayed region, and nothing may be read at any other level except the coarsest one (napari
reads its plane for the layer thumbnail).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import make_context, open_volume
from napari_shardscope.napari_plugin.layers import METADATA_KEY, volume_layer_data
from napari_shardscope.napari_plugin.reader import get_reader, read_volumes
from tests.volume_cases import FormatCase, format_cases, sample  # noqa: F401  (fixtures)

# -- get_reader ------------------------------------------------------------------------------------


def test_get_reader_declines_what_it_cannot_read(tmp_path: Path, http_root: Any) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.csv").write_text("1,2")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "info").write_text("{not json")
    _, server = http_root
    for path in [tmp_path / "missing", tmp_path / "notes.txt", tmp_path / "empty", tmp_path / "other",
                 tmp_path / "broken", "", "ftp://example.org/x"]:
        assert get_reader(str(path)) is None, path
    # Without a Qt application (a script), a remote URL is probed at once and declined when it is not
    # a volume; in napari it is opened in the background (tests/napari_plugin/test_background_open.py).
    probe = ("import sys; from napari_shardscope.napari_plugin.reader import get_reader; "
             "sys.exit(0 if get_reader(sys.argv[1]) is None else 1)")
    result = subprocess.run([sys.executable, "-c", probe, server.url + "nothing-here"], capture_output=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert get_reader([str(tmp_path / "empty")]) is None
    assert get_reader([]) is None
    assert get_reader(None) is None  # type: ignore[arg-type]
    assert get_reader(42) is None  # type: ignore[arg-type]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=30), st.lists(st.text(max_size=10), max_size=3), st.integers(), st.none()))
def test_get_reader_never_raises(junk: Any) -> None:
    if isinstance(junk, str) and "://" in junk:
        return  # arbitrary URLs would be probed over the network
    assert get_reader(junk) is None or callable(get_reader(junk))


def test_get_reader_layer_data(format_cases: dict[str, FormatCase], sample: SampleDataset) -> None:  # noqa: F811
    reader = get_reader(str(format_cases["ome-zarr"].path))
    assert reader is not None
    (img, img_kw, img_type), (_lab, lab_kw, lab_type) = reader(str(format_cases["ome-zarr"].path))
    assert (img_type, lab_type) == ("image", "labels")
    assert img_kw["multiscale"] and len(img) == 3
    assert img_kw["contrast_limits"] == (100.0, 60000.0)
    assert img_kw["scale"] == pytest.approx((40.0, 8.0, 8.0))
    assert img_kw["units"] == ("nm", "nm", "nm")
    assert "contrast_limits" not in lab_kw
    assert lab_kw["metadata"][METADATA_KEY]["format"] == "ome-zarr"
    seg = read_volumes(str(sample.segmentation))
    assert seg[0][2] == "labels" and seg[0][1]["name"] == "segmentation"
    (single, kw, _), = read_volumes(str(format_cases["zarr3"].path))
    assert kw["multiscale"] is False and not isinstance(single, list)
    assert "units" not in kw  # no unit in zarr v3 metadata: napari shows pixels


# -- real viewer ------------------------------------------------------------------------------------
CASES = ["precomputed", "precomputed-channels", "zarr3", "ome-zarr", "ome-zarr-labels", "zarr2", "ome-zarr-0.4",
         "ome-zarr-0.4-labels", "n5", "n5-multiscale",
         "n5-bdv"]


# The PyQt5 lane opens one of them, an OME-Zarr image with its label image (an Image and a Labels layer): the
# reader is the same code under either binding. The others open one after another in one viewer (its layers
# cleared between them, as a user opens one volume after another), which saves a viewer's start and close
# (about 0.4 CPU s) per format; each format's checks are those it had in a viewer of its own.
@pytest.mark.parametrize("names", [pytest.param(("ome-zarr",), marks=pytest.mark.qt_binding_lane, id="ome-zarr"),
                                   pytest.param(tuple(c for c in CASES if c != "ome-zarr"), id="the-others")])
def test_every_format_opens_in_a_viewer(names: tuple[str, ...], make_napari_viewer: Any,
                                        format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    viewer = make_napari_viewer()
    for name in names:
        viewer.layers.clear()
        opens_in(viewer, name, format_cases[name])


def opens_in(viewer: Any, name: str, case: FormatCase) -> None:
    """Open ``case`` in ``viewer`` (empty) and check its layers: kind, levels, dtype, placement, voxels, plane shown."""
    layers = viewer.open(str(case.path), plugin="napari-shardscope")
    if name in ("ome-zarr", "ome-zarr-0.4"):  # an OME-Zarr image brings its label images
        assert [type(la).__name__ for la in layers] == ["Image", "Labels"], name
        layers = layers[:1]
    channels = case.shape[0] if name == "precomputed-channels" else 1
    assert len(layers) == channels, name
    for c, layer in enumerate(layers):
        assert type(layer).__name__ == ("Labels" if case.kind == "segmentation" else "Image"), name
        spatial = case.shape[-3:]
        levels = layer.data if layer.multiscale else [layer.data]
        assert layer.multiscale == (case.levels > 1) and len(levels) == case.levels, name
        assert tuple(levels[0].shape) == spatial, name
        assert layer.dtype == np.dtype(case.dtype), name
        np.testing.assert_allclose(layer.scale, case.voxel_size[-3:], err_msg=name)
        np.testing.assert_allclose(layer.translate, case.translate[-3:], err_msg=name)
        for level_index, level in enumerate(levels):
            ref = case.reference(level_index)
            ref = ref[c] if channels > 1 else ref
            rng = np.random.default_rng(level_index)
            for _ in range(10):
                point = tuple(int(rng.integers(0, s)) for s in level.shape)
                assert np.asarray(level[point]) == ref[point], (name, level_index, point)
        # what the viewer is showing is the reference plane at the current step
        z_world = viewer.dims.point[0]
        z = round((z_world - case.translate[-3]) / case.voxel_size[-3])
        level_index = layer.data_level if layer.multiscale else 0
        ref = case.reference(level_index)
        ref = ref[c] if channels > 1 else ref
        factor = levels[0].shape[0] / levels[level_index].shape[0]
        shown = np.asarray(layer._slice.image.raw)
        z_level = int(np.clip(round(z / factor), 0, ref.shape[0] - 1))
        assert shown.shape == ref.shape[1:], name
        assert np.array_equal(shown, ref[z_level]) or np.array_equal(shown, ref[int(z / factor)]), name


@pytest.mark.qt_binding_lane
def test_sample_data_contribution(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSCOPE_CACHE_DIR", str(sample.root.parent))
    viewer = make_napari_viewer()
    viewer.open_sample("napari-shardscope", "synthetic-em")
    assert [type(la).__name__ for la in viewer.layers] == ["Image", "Labels"]
    image, labels = viewer.layers
    assert image.multiscale and len(image.data) == 4
    assert tuple(image.contrast_limits) == (0.0, 255.0)
    assert labels.dtype == np.dtype("uint64")
    assert labels.metadata[METADATA_KEY]["url"] == str(sample.segmentation)


def test_manifest_is_valid() -> None:
    from npe2 import PluginManifest

    pm = PluginManifest._from_package_or_name("napari-shardscope")
    pm.validate_imports()
    assert [r.command for r in pm.contributions.readers or []] == ["napari-shardscope.get_reader"]
    assert [s.key for s in pm.contributions.sample_data or []] == ["synthetic-em"]


# -- chunk reads while a viewer shows one slice -------------------------------------------------------
ChunkMap = dict[str, list[tuple[int, int, str, tuple[int, ...]]]]


def chunk_map(volume_dir: Path) -> ChunkMap:
    """Shard file key -> [(start, end, scale key, grid z-y-x)] of every chunk stored in it."""
    info = parse_info((volume_dir / "info").read_bytes())
    store = LocalByteStore(volume_dir)
    out: ChunkMap = {}
    for scale in info.scales:
        assert scale.sharding is not None
        grid = scale.grid_shape
        by_id = {}
        for gx in range(grid[0]):
            for gy in range(grid[1]):
                for gz in range(grid[2]):
                    by_id[scale.chunk_id((gx, gy, gz))] = (gz, gy, gx)  # z, y, x like the arrays
        reader = ShardedReader(store, scale.key, scale.sharding)
        for shard in reader.existing_shards():
            for loc in reader.iter_chunks(shard):
                assert loc.byte_range is not None
                out.setdefault(reader.shard_key(shard), []).append((*loc.byte_range, scale.key,
                                                                    by_id[loc.chunk_id]))
    return out


def chunks_read(requests: list[tuple[str, str | None]], chunks: ChunkMap,
                prefix: str) -> set[tuple[str, tuple[int, ...]]]:
    """The (scale key, grid z-y-x) of every chunk whose bytes a request covered."""
    read = set()
    for path, rng in requests:
        if rng is None or not path.startswith(prefix):
            continue
        a, b = (int(v) for v in rng.removeprefix("bytes=").split("-"))
        for start, end, scale, grid in chunks.get(path[len(prefix):], []):
            if start <= b and a < end:
                read.add((scale, grid))
    return read


def displayed_chunks(layer: Any, level: int, z: int, scale_key: str,
                     chunk_zyx: tuple[int, ...]) -> set[tuple[str, tuple[int, ...]]]:
    """Chunks of ``level`` intersecting the layer's displayed region (corner pixels) at plane ``z``."""
    lo, hi = layer.corner_pixels[0], layer.corner_pixels[1]
    cz, cy, cx = chunk_zyx
    return {(scale_key, (z // cz, gy, gx))
            for gy in range(lo[1] // cy, hi[1] // cy + 1)
            for gx in range(lo[2] // cx, hi[2] // cx + 1)}


def test_viewer_reads_only_chunks_of_the_displayed_region(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                                         http_root: Any) -> None:
    from qtpy.QtWidgets import QApplication

    root, server = http_root
    shutil.copytree(sample.image, root / "img")
    chunks = chunk_map(root / "img")
    info = parse_info((root / "img" / "info").read_bytes())
    keys = [s.key for s in info.scales]
    volume = open_volume(server.url + "img", context=make_context(256 << 20))
    data, kwargs, _ = volume_layer_data(volume)
    for level in data:  # what napari's slicing reads, alone: the reads ahead are counted in test_viewer_levels.py
        level.inner.prefetcher.close()

    viewer = make_napari_viewer(show=True)
    layer = viewer.add_image(data, **kwargs)
    canvas = viewer.window._qt_viewer.canvas

    def settle() -> None:
        for _ in range(3):
            QApplication.processEvents()
            time.sleep(0.02)
        canvas.on_draw(None)  # the draw callback is where napari picks the level and region
        QApplication.processEvents()

    def step_to(z: int) -> set[tuple[str, tuple[int, ...]]]:
        settle()
        server.requests.clear()
        viewer.dims.set_current_step(0, z)
        settle()
        return chunks_read(server.requests, chunks, "/img/")

    def check(z: int, read: set[tuple[str, tuple[int, ...]]]) -> tuple[int, set[Any]]:
        level = layer.data_level
        factor = [round(volume.levels[0].shape[0] / lv.shape[0]) for lv in volume.levels]
        chunk = tuple(reversed(info.scales[level].chunk_size))
        expected = displayed_chunks(layer, level, z // factor[level], keys[level], chunk)
        at_level = {c for c in read if c[0] == keys[level]}
        assert at_level == expected, (level, layer.corner_pixels.tolist())
        thumb = len(keys) - 1
        thumb_z = min(round(z / factor[thumb]), volume.levels[thumb].shape[0] - 1)
        thumb_chunks = {(keys[thumb], (zz // info.scales[thumb].chunk_size[2], 0, 0))
                        for zz in {thumb_z, z // factor[thumb]}}
        others = {c for c in read if c[0] not in (keys[level], keys[thumb])}
        assert others == set(), others
        assert {c for c in read if c[0] == keys[thumb]} <= thumb_chunks | expected
        return level, expected

    settle()
    # zoomed out until napari shows the next coarser level (the whole plane of it)
    for _ in range(20):
        if layer.data_level == 1:
            break
        viewer.camera.zoom = viewer.camera.zoom * 0.85
        settle()
    read = step_to(50)
    level, expected = check(50, read)
    assert level > 0 and expected

    # zoomed into one corner: the finest level, and only part of the plane
    viewer.camera.zoom = viewer.camera.zoom * 40
    viewer.camera.center = (viewer.camera.center[0], 1800.0, 300.0)
    settle()
    read = step_to(10)
    level, expected = check(10, read)
    chunks_per_plane = (256 // 64) ** 2
    assert level == 0 and 0 < len(expected) < chunks_per_plane
    assert len(read) >= len(expected)


# -- CLI -----------------------------------------------------------------------------------------------
def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "napari_shardscope", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_cli_open_bad_path_fails_fast_without_napari(tmp_path: Path) -> None:
    result = run_cli("open", str(tmp_path / "nope"))
    assert result.returncode == 3  # not found
    assert "not a precomputed, zarr v3, N5 or zarr v2 dataset" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.qt_binding_lane
def test_cli_open_screenshot(tmp_path: Path, format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    """``shardscope open LINK STATE_FILE DATASETS --screenshot`` draws them: every door of ``open`` in one napari
    start (``open`` takes several paths into one window; each start costs about 4 CPU s).

    The link and the state file name a volume a real ``shardscope serve`` serves, and a source nobody can read:
    it is named once per state (a file not read as a state fails), never dropped silently. Also the ``open``
    verb's piped run of tests/core/cli/test_every_verb.py (its ``RUN_ELSEWHERE``): exit 0, no internal error.
    The link comes first, so the window goes to the state's position (taken from the first layer's format).
    """
    import imageio.v3 as iio

    from napari_shardscope.core.serve.states import load_state

    assert os.environ.get("DISPLAY"), "pytest-xvfb provides a display"
    out = tmp_path / "shot.png"
    with served(format_cases["precomputed"].path) as url:
        state = load_state(url)  # the link names the state document the server keeps
        state["layers"].append({"type": "segmentation", "source": "graphene://https://example.org/table",
                                "name": "chunkedgraph"})
        link = url.split("#!", 1)[0] + "#!" + json.dumps(state)
        file = tmp_path / "state.json"
        file.write_text(json.dumps(state))
        result = run_cli("open", link, str(file), str(format_cases["ome-zarr"].path),
                         str(format_cases["n5-multiscale"].path), "--screenshot", str(out), "--cache-mb", "64")
    assert result.returncode == 0, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    named = [line for line in result.stderr.splitlines() if "not opened" in line]
    # named, not dropped silently: once for the link and once for the file
    assert len(named) == 2 and all("chunkedgraph" in line and "graphene" in line for line in named), result.stderr
    pixels = iio.imread(out)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels[..., :3].std() > 10


@contextmanager
def served(path: Path) -> Iterator[str]:
    """``shardscope serve PATH`` running (a real subprocess, 127.0.0.1); yields the link it printed, then stops it."""
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "serve", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # bounded: the process prints the link first or exits
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        yield url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_a_thin_last_axis_is_not_taken_for_rgb(tmp_path: Path, make_napari_viewer: Any) -> None:
    """A last axis of 3 and of 4 (napari would guess RGB, RGBA): one viewer, the first layer removed before the next."""
    import zarr

    viewer = make_napari_viewer()
    for last in (3, 4):
        data = (np.arange(40 * 40 * last) % 251).astype("u1").reshape(40, 40, last)  # napari would guess RGB(A)
        path = tmp_path / f"thin{last}.zarr"
        z = zarr.create(shape=data.shape, chunks=(20, 20, last), dtype="u1", store=str(path), zarr_format=2)
        z[:] = data
        viewer.layers.clear()
        (layer,) = viewer.open(str(path), plugin="napari-shardscope")
        assert not layer.rgb and layer.ndim == 3 and viewer.dims.nsteps == (40, 40, last), last
