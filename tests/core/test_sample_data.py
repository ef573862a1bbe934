"""The synthetic EM sample: layout and sharding, supervoxel→body grouping, caching, the demo command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core import sample_data
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.sample_data import (
    SampleDataset,
    ensure_sample_dataset,
    generate_synthetic_em,
    load_body_map,
    sample_cache_dir,
    sample_dataset_paths,
    write_body_map,
)
from napari_shardscope.core.volumes import open_volume
from tests.pixels import rgb_codes
from tests.volume_cases import sample  # noqa: F401  (fixture)


def test_layout_sharding_and_scales(sample: SampleDataset) -> None:  # noqa: F811
    meta = json.loads((sample.root / "sample.json").read_text())
    assert meta["version"] == sample_data.SAMPLE_VERSION
    for path, kind, dtype in ((sample.image, "image", "uint8"), (sample.segmentation, "segmentation", "uint64")):
        info = json.loads((path / "info").read_text())
        assert info["type"] == kind and info["data_type"] == dtype
        assert len(info["scales"]) >= 3
        for scale in info["scales"]:
            sharding = scale["sharding"]
            assert sharding["hash"] == "murmurhash3_x86_128"
            assert sharding["data_encoding"] == sharding["minishard_index_encoding"] == "gzip"
            assert list((path / scale["key"]).glob("*.shard"))
        assert info["scales"][0]["sharding"]["shard_bits"] > 0  # several shard files at the finest scale
        coarsest = info["scales"][-1]["size"]
        assert coarsest[0] * coarsest[1] <= 1024 * 1024


def test_supervoxels_group_into_touching_bodies(sample: SampleDataset) -> None:  # noqa: F811
    body_of = sample.body_map()
    seg = np.asarray(open_volume(sample.segmentation).levels[0].array)
    ids = np.unique(seg)
    assert set(body_of) == {int(i) for i in ids}
    bodies: dict[int, list[int]] = {}
    for sv, body in body_of.items():
        bodies.setdefault(body, []).append(sv)
    assert all(body == min(svs) for body, svs in bodies.items())  # DVID-style: named after a supervoxel
    assert sum(len(svs) > 1 for svs in bodies.values()) >= len(bodies) // 2
    # every body is one connected group of touching supervoxels
    # each touching pair once: (a, b) packed into one uint64 for a 1-D unique (the ids are below 2**32), instead of
    # a Python tuple for each of the ~10^5 boundary faces
    assert int(ids[-1]) < 1 << 32
    touching: set[tuple[int, int]] = set()
    for axis in range(3):
        a, b = np.moveaxis(seg, axis, 0)[:-1].ravel(), np.moveaxis(seg, axis, 0)[1:].ravel()
        keep = a != b
        pairs = np.unique((a[keep] << np.uint64(32)) | b[keep])
        touching.update(zip((pairs >> np.uint64(32)).tolist(), (pairs & np.uint64(0xFFFFFFFF)).tolist(), strict=True))
    neighbours: dict[int, set[int]] = {}
    for u, v in touching:
        neighbours.setdefault(u, set()).add(v)
        neighbours.setdefault(v, set()).add(u)
    for svs in bodies.values():
        reached, todo = {svs[0]}, [svs[0]]
        members = set(svs)
        while todo:
            cur = todo.pop()
            for y in neighbours.get(cur, ()):
                if y in members and y not in reached:
                    reached.add(y)
                    todo.append(y)
        assert reached == members


def test_image_shows_membranes_between_bodies(sample: SampleDataset) -> None:  # noqa: F811
    image = np.asarray(open_volume(sample.image).levels[0].array).astype(float)
    seg = np.asarray(open_volume(sample.segmentation).levels[0].array)
    body_of = sample.body_map()
    keys = np.array(sorted(body_of), dtype=np.uint64)
    values = np.array([body_of[int(k)] for k in keys], dtype=np.uint64)
    bodies = values[np.searchsorted(keys, seg)]
    edge_body = np.zeros(seg.shape, bool)
    edge_sv = np.zeros(seg.shape, bool)
    for axis in (1, 2):
        d_body = np.diff(bodies, axis=axis) != 0
        d_sv = (np.diff(seg, axis=axis) != 0) & ~d_body
        pad = [(0, 0)] * 3
        pad[axis] = (0, 1)
        edge_body |= np.pad(d_body, pad)
        edge_sv |= np.pad(d_sv, pad)
    interior = ~(edge_body | edge_sv)
    assert image[edge_body].mean() + 40 < image[interior].mean()  # dark membranes between bodies
    assert image[edge_body].mean() < image[edge_sv].mean() < image[interior].mean()  # faint inside a body


def test_generation_is_deterministic() -> None:
    a = generate_synthetic_em((8, 40, 48), seed=3, cell_zyx=(4, 16, 16))
    b = generate_synthetic_em((8, 40, 48), seed=3, cell_zyx=(4, 16, 16))
    c = generate_synthetic_em((8, 40, 48), seed=4, cell_zyx=(4, 16, 16))
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.supervoxels, b.supervoxels)
    assert a.body_of == b.body_of
    assert not np.array_equal(a.supervoxels, c.supervoxels)
    assert a.image.dtype == np.uint8 and a.supervoxels.dtype == np.uint64


def test_cached_after_first_call(sample: SampleDataset) -> None:  # noqa: F811
    stamp = (sample.root / "sample.json").stat().st_mtime_ns
    again = ensure_sample_dataset(sample.root.parent)
    assert again == sample
    assert (sample.root / "sample.json").stat().st_mtime_ns == stamp


def test_generation_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(root: Path, *, seed: int = 0) -> None:
        (root / "image").mkdir()
        raise OSError("disk full")

    monkeypatch.setattr(sample_data, "write_sample_dataset", fail)
    with pytest.raises(OSError):
        ensure_sample_dataset(tmp_path)
    assert not sample_dataset_paths(tmp_path).root.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary directory left behind

    def fake(root: Path, *, seed: int = 0) -> None:
        (root / "sample.json").write_text("{}")

    stale = sample_dataset_paths(tmp_path).root
    stale.mkdir()
    (stale / "half-written").write_text("x")
    monkeypatch.setattr(sample_data, "write_sample_dataset", fake)
    paths = ensure_sample_dataset(tmp_path)
    assert (paths.root / "sample.json").exists() and not (paths.root / "half-written").exists()


def test_cache_dir_lookup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHARDSCOPE_CACHE_DIR", str(tmp_path / "c"))
    assert sample_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SHARDSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sample_cache_dir() == tmp_path / "xdg" / "napari-shardscope"


def test_body_map_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "bodies.json"
    write_body_map(path, {5: 5, 9: 5, 7: 7}, segmentation="seg")
    assert load_body_map(path) == {5: 5, 9: 5, 7: 7}
    assert json.loads(path.read_text())["bodies"][0] == {"id": 5, "supervoxels": [5, 9]}
    path.write_text(json.dumps({"format": "napari-shardscope/bodies", "bodies": [
        {"id": 1, "supervoxels": [1, 2]}, {"id": 3, "supervoxels": [2]}]}))
    with pytest.raises(MetadataError, match="repeated"):
        load_body_map(path)
    path.write_text("[1, 2]")
    with pytest.raises(MetadataError):
        load_body_map(path)
    path.write_text("{oops")
    with pytest.raises(MetadataError) as err:
        load_body_map(path)
    assert err.value.offset == 1


def test_cloudvolume_reads_the_sample(sample: SampleDataset) -> None:  # noqa: F811
    """Interoperability: the sharded sample written by TensorStore reads the same in CloudVolume."""
    from cloudvolume import CloudVolume

    vol = open_volume(sample.segmentation)
    for mip in (0, 2):
        cv = CloudVolume(f"file://{sample.segmentation}", mip=mip, progress=False, fill_missing=False)
        got = np.asarray(cv[10:50, 20:60, 3:7])[..., 0]  # x, y, z
        ours = np.asarray(vol.levels[mip].array[3:7, 20:60, 10:50])  # z, y, x
        np.testing.assert_array_equal(got.T, ours)


@pytest.mark.qt_binding_lane
def test_demo_screenshot(tmp_path: Path, sample: SampleDataset) -> None:  # noqa: F811
    """``shardscope demo --screenshot`` renders the sample (under pytest-xvfb's display). Also the ``demo`` verb's
    piped run of tests/core/cli/test_every_verb.py (its ``RUN_ELSEWHERE``): exit 0, no internal error."""
    import imageio.v3 as iio

    assert os.environ.get("DISPLAY"), "pytest-xvfb provides a display"
    out = tmp_path / "demo.png"
    result = subprocess.run([sys.executable, "-m", "napari_shardscope", "demo", "--screenshot", str(out)],
                            capture_output=True, text=True, timeout=180,
                            env={**os.environ, "SHARDSCOPE_CACHE_DIR": str(sample.root.parent)})
    assert result.returncode == 0, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    pixels = iio.imread(out)[..., :3]
    assert pixels.shape[:2] == (1000, 1600)  # the whole window (data and the docked panels), not a squeezed canvas
    assert pixels.std() > 20
    colours = np.unique(rgb_codes(pixels))  # distinct colours
    assert len(colours) > 200  # grey EM texture under many label colours, not a blank canvas
