"""Shared test data for the volume, reader and sample tests (fixtures and builders, no tests).

Every format the reader supports is written here with TensorStore (voxels) and by hand (the small
group metadata that TensorStore does not write: OME-Zarr groups, N5 multiscale attributes), once
per test session, into a directory under pytest's base temp. Each case records what the reader
must report (shape, voxel size, offset, dtype, kind) and how to read the same voxels with
TensorStore directly, in the format's own axis order, as the reference.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.sample_data import SampleDataset, ensure_sample_dataset


@dataclass(frozen=True)
class FormatCase:
    """One on-disk volume and what opening it must give."""

    name: str
    path: Path
    shape: tuple[int, ...]  # finest level, z, y, x (or c, z, y, x)
    voxel_size: tuple[float, ...]
    translate: tuple[float, ...]
    dtype: str
    kind: str
    levels: int
    unit: str | None
    reference: Callable[[int], np.ndarray]  # level -> array read by TensorStore directly, z, y, x


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def _rng_volume(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    return rng.integers(0, min(info.max, 2**40), size=shape, dtype=dtype)


def _precomputed_reference(path: Path, channels: int) -> Callable[[int], np.ndarray]:
    def read(level: int) -> np.ndarray:
        store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                         "scale_index": level}).result()
        data = store.read().result()  # x, y, z, c
        return data.T if channels > 1 else data[..., 0].T

    return read


def _zarr_reference(paths: list[Path]) -> Callable[[int], np.ndarray]:
    def read(level: int) -> np.ndarray:
        return ts.open({"driver": "zarr3", "kvstore": f"file://{paths[level]}/"}).result().read().result()

    return read


def _n5_reference(paths: list[Path]) -> Callable[[int], np.ndarray]:
    def read(level: int) -> np.ndarray:
        return ts.open({"driver": "n5", "kvstore": f"file://{paths[level]}/"}).result().read().result().T

    return read


def write_precomputed_unsharded(root: Path) -> FormatCase:
    """uint16 image, 2 scales, non-zero voxel offset, anisotropic voxels, sizes not chunk multiples."""
    path = root / "pc_unsharded"
    size0, offset0, res0 = (40, 36, 20), (100, 50, 7), (4.0, 6.0, 30.0)
    data0 = _rng_volume((20, 36, 40), "uint16", 1)
    for i, f in enumerate((1, 2)):
        size = [size0[0] // f, size0[1] // f, size0[2]]
        offset = [offset0[0] // f, offset0[1] // f, offset0[2]]
        spec = {
            "driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
            "multiscale_metadata": {"type": "image", "data_type": "uint16", "num_channels": 1},
            "scale_metadata": {"size": size, "voxel_offset": offset, "resolution": [res0[0] * f, res0[1] * f, res0[2]],
                               "chunk_size": [16, 16, 8], "encoding": "raw"},
            "create": True, "open": i > 0,
        }
        store = ts.open(spec).result()
        level = data0[:, ::f, ::f][:, : size[1], : size[0]]
        store[ts.d[:].translate_to[0]].write(level.T[..., None]).result()
    return FormatCase("precomputed", path, (20, 36, 40), (30.0, 6.0, 4.0), (7 * 30.0, 50 * 6.0, 100 * 4.0),
                      "uint16", "image", 2, "nm", _precomputed_reference(path, 1))


def write_precomputed_channels(root: Path) -> FormatCase:
    """A 3-channel uint8 precomputed image (presented as c, z, y, x)."""
    path = root / "pc_rgb"
    spec = {
        "driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
        "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 3},
        "scale_metadata": {"size": [24, 20, 6], "resolution": [5, 5, 50], "chunk_size": [8, 8, 3],
                           "encoding": "raw"},
        "create": True,
    }
    store = ts.open(spec).result()
    store.write(_rng_volume((24, 20, 6, 3), "uint8", 2)).result()
    return FormatCase("precomputed-channels", path, (3, 6, 20, 24), (1.0, 50.0, 5.0, 5.0), (0.0, 0.0, 0.0, 0.0),
                      "uint8", "image", 1, "nm", _precomputed_reference(path, 3))


def write_zarr3_array(root: Path) -> FormatCase:
    """A single sharded zarr v3 uint32 array with dimension names (a segmentation by dtype)."""
    path = root / "labels.zarr"
    store = ts.open({
        "driver": "zarr3", "kvstore": f"file://{path}/", "create": True,
        "metadata": {"shape": [12, 40, 30], "data_type": "uint32", "dimension_names": ["z", "y", "x"],
                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 16, 16]}},
                     "codecs": [{"name": "sharding_indexed", "configuration": {
                         "chunk_shape": [4, 8, 8], "codecs": [{"name": "bytes"}, {"name": "gzip"}]}}]},
    }).result()
    store.write(_rng_volume((12, 40, 30), "uint32", 3) % 50).result()
    return FormatCase("zarr3", path, (12, 40, 30), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), "uint32", "segmentation",
                      1, None, _zarr_reference([path]))


def _ome_level(path: Path, shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    data = _rng_volume(shape, dtype, seed)
    store = ts.open({
        "driver": "zarr3", "kvstore": f"file://{path}/", "create": True,
        "metadata": {"shape": list(shape), "data_type": dtype, "dimension_names": ["z", "y", "x"],
                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 16, 16]}},
                     "codecs": [{"name": "bytes"}, {"name": "gzip"}]},
    }).result()
    store.write(data).result()
    return data


def write_ome_zarr(root: Path) -> tuple[FormatCase, FormatCase]:
    """An OME-Zarr 0.5 image (3 levels, µm units, translation, omero window) with one label image."""
    group = root / "image.ome.zarr"
    axes = [{"name": "z", "type": "space", "unit": "micrometer"},
            {"name": "y", "type": "space", "unit": "micrometer"},
            {"name": "x", "type": "space", "unit": "micrometer"}]
    shapes = [(8, 64, 48), (8, 32, 24), (4, 16, 12)]
    datasets = []
    for i, shape in enumerate(shapes):
        _ome_level(group / str(i), shape, "uint16", 10 + i)
        f = 2**i
        datasets.append({"path": str(i), "coordinateTransformations": [
            {"type": "scale", "scale": [0.04 * (1 if i < 2 else 2), 0.008 * f, 0.008 * f]},
            {"type": "translation", "translation": [0.4, 0.08, 0.08]}]})
    _write_json(group / "zarr.json", {
        "zarr_format": 3, "node_type": "group",
        "attributes": {"ome": {"version": "0.5", "multiscales": [{
            "name": "em", "axes": axes, "datasets": datasets,
            "coordinateTransformations": [{"type": "translation", "translation": [1.0, 0.0, 0.0]}]}],
            "omero": {"channels": [{"window": {"start": 100, "end": 60000, "min": 0, "max": 65535}}]}}},
    })
    _write_json(group / "labels" / "zarr.json", {"zarr_format": 3, "node_type": "group",
                                                  "attributes": {"ome": {"version": "0.5", "labels": ["cells"]}}})
    label = group / "labels" / "cells"
    for i, shape in enumerate(shapes[:2]):
        _ome_level(label / str(i), shape, "uint32", 20 + i)
    _write_json(label / "zarr.json", {
        "zarr_format": 3, "node_type": "group",
        "attributes": {"ome": {"version": "0.5", "image-label": {"source": {"image": "../../"}},
                               "multiscales": [{"axes": axes, "datasets": [
                                   {"path": str(i), "coordinateTransformations": [
                                       {"type": "scale", "scale": [0.04, 0.008 * 2**i, 0.008 * 2**i]},
                                       {"type": "translation", "translation": [0.4, 0.08, 0.08]}]}
                                   for i in range(2)]}]}},
    })
    image = FormatCase("ome-zarr", group, shapes[0], (40.0, 8.0, 8.0), (1400.0, 80.0, 80.0), "uint16", "image", 3,
                       "nm", _zarr_reference([group / str(i) for i in range(3)]))
    labels = FormatCase("ome-zarr-labels", label, shapes[0], (40.0, 8.0, 8.0), (400.0, 80.0, 80.0), "uint32",
                        "segmentation", 2, "nm", _zarr_reference([label / str(i) for i in range(2)]))
    return image, labels


def write_zarr2_array(root: Path) -> FormatCase:
    """A zarr v2 uint64 array written by zarr-python: F order, ``/`` separator, zstd, xarray dimension names."""
    import zarr
    from numcodecs import Zstd

    path = root / "v2labels.zarr"
    data = _rng_volume((10, 36, 28), "uint64", 5) % 40
    z = zarr.create(shape=data.shape, chunks=(4, 16, 16), dtype=data.dtype, compressor=Zstd(level=3), order="F",
                    dimension_separator="/", store=str(path), zarr_format=2)
    z[:] = data
    z.attrs["_ARRAY_DIMENSIONS"] = ["z", "y", "x"]

    def read(level: int) -> np.ndarray:
        return np.asarray(zarr.open_array(str(path), mode="r")[:])

    return FormatCase("zarr2", path, (10, 36, 28), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), "uint64", "segmentation",
                      1, None, read)


def write_ome_zarr_04(root: Path) -> tuple[FormatCase, FormatCase]:
    """An OME-Zarr 0.4 image (zarr v2, 3 levels) with one label image, written by the ``ome-zarr`` package."""
    import zarr
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    group = root / "image04.ome.zarr"
    g = zarr.open_group(str(group), mode="w", zarr_format=2)
    image = _rng_volume((8, 64, 48), "uint16", 30)
    labels = _rng_volume((8, 64, 48), "uint32", 31) % 20
    write_image(image=image, group=g, axes="zyx", fmt=FormatV04(), scale_factors=(2, 4),
                storage_options={"chunks": (4, 16, 16)})
    write_labels(labels=labels, group=g, name="cells", axes="zyx", fmt=FormatV04(), scale_factors=(2,))

    def reference(paths: list[Path]) -> Callable[[int], np.ndarray]:
        return lambda level: np.asarray(zarr.open_array(str(paths[level]), mode="r")[:])

    def paths(where: Path) -> list[Path]:
        attrs = json.loads((where / ".zattrs").read_text())
        return [where / ds["path"] for ds in attrs["multiscales"][0]["datasets"]]

    cells = group / "labels" / "cells"
    return (FormatCase("ome-zarr-0.4", group, (8, 64, 48), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), "uint16", "image",
                       len(paths(group)), None, reference(paths(group))),
            FormatCase("ome-zarr-0.4-labels", cells, (8, 64, 48), (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), "uint32",
                       "segmentation", len(paths(cells)), None, reference(paths(cells))))


def _n5_dataset(path: Path, data_zyx: np.ndarray, block_xyz: list[int], extra: dict[str, Any]) -> None:
    ts.open({"driver": "n5", "kvstore": f"file://{path}/", "create": True,
             "metadata": {"dimensions": list(reversed(data_zyx.shape)), "blockSize": block_xyz,
                          "dataType": str(data_zyx.dtype), "compression": {"type": "gzip"}}}).result().write(
        data_zyx.T).result()
    attrs = json.loads((path / "attributes.json").read_text())
    attrs.update(extra)
    _write_json(path / "attributes.json", attrs)


def write_n5_single(root: Path) -> FormatCase:
    """One N5 dataset (uint8) with ``resolution`` + ``units``."""
    path = root / "single.n5" / "raw"
    _write_json(root / "single.n5" / "attributes.json", {"n5": "4.0.0"})
    _n5_dataset(path, _rng_volume((10, 30, 20), "uint8", 30), [8, 8, 4],
                {"resolution": [4, 4, 40], "units": ["nm", "nm", "nm"]})
    return FormatCase("n5", path, (10, 30, 20), (40.0, 4.0, 4.0), (0.0, 0.0, 0.0), "uint8", "image", 1, "nm",
                      _n5_reference([path]))


def write_n5_viewer_group(root: Path) -> FormatCase:
    """An n5-viewer style multiscale group: ``scales`` + ``pixelResolution`` (µm) on the group."""
    group = root / "seg.n5"
    base = _rng_volume((16, 48, 40), "uint64", 40) % 1000
    paths = []
    for k, f in enumerate([(1, 1, 1), (2, 2, 1), (4, 4, 2)]):
        level = base[:: f[2], :: f[1], :: f[0]]
        _n5_dataset(group / f"s{k}", level, [16, 16, 8], {"downsamplingFactors": list(f)})
        paths.append(group / f"s{k}")
    _write_json(group / "attributes.json", {
        "n5": "4.0.0", "scales": [[1, 1, 1], [2, 2, 1], [4, 4, 2]],
        "pixelResolution": {"dimensions": [0.004, 0.004, 0.04], "unit": "um"}, "axes": ["x", "y", "z"]})
    return FormatCase("n5-multiscale", group, (16, 48, 40), (40.0, 4.0, 4.0), (0.0, 0.0, 0.0), "uint64",
                      "segmentation", 3, "nm", _n5_reference(paths))


def write_n5_bdv_group(root: Path) -> FormatCase:
    """A BigDataViewer style group: factors only on the datasets and as a table on the group, no units."""
    group = root / "bdv.n5" / "setup0" / "timepoint0"
    _write_json(root / "bdv.n5" / "attributes.json", {"n5": "4.0.0"})
    _write_json(root / "bdv.n5" / "setup0" / "attributes.json",
                {"downsamplingFactors": [[1, 1, 1], [2, 2, 2]], "dataType": "uint16"})
    base = _rng_volume((16, 32, 32), "uint16", 50)
    paths = []
    for k, f in enumerate([1, 2]):
        _n5_dataset(group / f"s{k}", base[::f, ::f, ::f], [16, 16, 16], {"downsamplingFactors": [f, f, f]})
        paths.append(group / f"s{k}")
    _write_json(group / "attributes.json", {"resolution": [0.5, 0.5, 2.0]})
    return FormatCase("n5-bdv", group, (16, 32, 32), (2.0, 0.5, 0.5), (0.0, 0.0, 0.0), "uint16", "image", 2,
                      None, _n5_reference(paths))


_CASES: dict[Path, dict[str, FormatCase]] = {}


def build_format_cases(root: Path) -> dict[str, FormatCase]:
    """Write (once per process and directory) and describe one volume of every supported kind.

    Cached at module level because two test modules importing the session fixture get two
    fixture definitions, and the data must be written only once.
    """
    if root not in _CASES:
        root.mkdir(parents=True, exist_ok=True)
        cases = [w(root) for w in (write_precomputed_unsharded, write_precomputed_channels, write_zarr3_array,
                                   write_n5_single, write_n5_viewer_group, write_n5_bdv_group, write_zarr2_array)]
        cases.extend(write_ome_zarr(root))
        cases.extend(write_ome_zarr_04(root))
        _CASES[root] = {c.name: c for c in cases}
    return _CASES[root]


@pytest.fixture(scope="session")
def format_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FormatCase]:
    """Every supported format, written once per session."""
    return build_format_cases(tmp_path_factory.getbasetemp() / "shardscope-formats")


def run_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's base temp, shared by its xdist workers: the controller's, which holds each worker's own
    (``<basetemp>/popen-gw0``, ``popen-gw1``); without xdist, the process's. For data every worker would otherwise write
    alike (the sample), made once under :func:`run_lock`."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if missing): one xdist worker writes shared data, the others
    wait for it and then find it. Where ``fcntl`` is missing (Windows) nothing is locked: the data's writers
    (written beside, renamed into place) stay correct, each worker may just write it once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - POSIX here
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDataset:
    """The synthetic EM sample dataset, generated once per test run (for every xdist worker: generating it
    takes about 2.5 CPU s) into a test cache directory. What every ``sample`` fixture returns."""
    cache = run_tmp(tmp_path_factory) / "shardscope-cache"
    with run_lock(cache.with_name("shardscope-cache.lock")):
        return ensure_sample_dataset(cache)


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> SampleDataset:
    """The synthetic EM sample dataset (:func:`run_sample`)."""
    return run_sample(tmp_path_factory)


def assert_boxes_read_alike(fresh: Any, expected: np.ndarray) -> None:
    """``fresh`` (a just-opened TensorStore array) reads like ``expected``: a middle box, the last plane,
    a strided read (TensorStore's own path, not the direct decoder's) and the far corner voxel."""
    mid = tuple(s // 3 for s in expected.shape)
    box = tuple(slice(m, max(m + 1, s - m)) for m, s in zip(mid, expected.shape, strict=True))
    np.testing.assert_array_equal(fresh[box].read(), expected[box])
    if expected.ndim > 1:
        np.testing.assert_array_equal(fresh[expected.shape[0] - 1].read(), expected[expected.shape[0] - 1])
    np.testing.assert_array_equal(fresh[..., ::2].read(), expected[..., ::2])
    point = tuple(s - 1 for s in expected.shape)
    assert fresh[point] == expected[point]
