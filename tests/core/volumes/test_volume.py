"""Core volumes: lazy array semantics, every format's geometry and values, URLs, the shared cache."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from napari_shardscope.core.bytestore import context as context_module
from napari_shardscope.core.errors import ArgumentError, MetadataError, NotADatasetError, ShardscopeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.volume_spec import dtype_contrast_limits, guess_kind
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import (
    LazyArray,
    cache_pool_bytes,
    make_context,
    open_volume,
    open_volumes,
    parse_url,
    set_cache_pool_size,
    shared_context,
)
from tests.volume_cases import FormatCase, format_cases, sample  # noqa: F401  (fixtures)

# -- LazyArray ---------------------------------------------------------------------------------------
BASE = np.arange(6 * 7 * 5, dtype=np.int32).reshape(6, 7, 5)


def lazy_base() -> LazyArray:
    return LazyArray(ts.array(BASE))


@settings(max_examples=300)
@given(hnp.basic_indices(BASE.shape, allow_newaxis=True, allow_ellipsis=True))
def test_lazy_array_follows_numpy_basic_indexing(index: object) -> None:
    expected = BASE[index]  # type: ignore[index]
    got = lazy_base()[index]
    if isinstance(got, LazyArray):
        assert got.shape == expected.shape
        np.testing.assert_array_equal(np.asarray(got), expected)
    else:  # integers on every axis: a scalar, read at once
        assert np.ndim(expected) == 0 and got == expected


@settings(max_examples=150)
@given(hnp.basic_indices(BASE.shape), hnp.basic_indices((4, 4, 4), allow_ellipsis=True))
def test_lazy_views_compose_like_numpy(first: object, second: object) -> None:
    expected = BASE[first]  # type: ignore[index]
    view = lazy_base()[first]
    if not isinstance(view, LazyArray) or expected.ndim == 0:
        return
    try:
        expected2 = expected[second]
    except IndexError:
        with pytest.raises(IndexError):
            view[second]
        return
    got = view[second]
    np.testing.assert_array_equal(np.asarray(got), expected2)


@pytest.mark.parametrize("index", [
    np.array([4, -1, 0]),
    [1, 2],
    (slice(None), np.array([0, 6, 3])),
    (np.array([0, 2]), slice(1, 3), np.array([1, 4])),
    np.array([True, False, True, False, True, True]),
    (slice(None, None, -2), 3),
    (Ellipsis, slice(4, 1, -1)),
])
def test_lazy_array_index_arrays_and_negative_steps(index: object) -> None:
    np.testing.assert_array_equal(np.asarray(lazy_base()[index]), BASE[index])  # type: ignore[index]


@pytest.mark.parametrize("index", [6, -7, (0, 7), (0, 0, 5), np.array([6]), (0, 0, 0, 0)])
def test_lazy_array_out_of_bounds_is_index_error(index: object) -> None:
    with pytest.raises(IndexError):
        lazy_base()[index]


@pytest.mark.parametrize("index", [1.5, "a", np.array([0.5]), True])
def test_lazy_array_rejects_non_integer_keys(index: object) -> None:
    with pytest.raises(TypeError):
        lazy_base()[index]


def test_lazy_array_metadata_and_transform() -> None:
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "memory"}, "create": True,
                     "metadata": {"shape": [6, 7, 5], "data_type": "int32",
                                  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4, 5]}}}}
                    ).result()
    store.write(BASE).result()
    arr = LazyArray(store)
    assert (arr.shape, arr.ndim, arr.size, arr.dtype, arr.chunks) == ((6, 7, 5), 3, 210, np.dtype("int32"), (2, 4, 5))
    assert len(arr) == 6 and arr.nbytes == 840
    mapped = arr.with_transform(lambda a: a * 2 + 1, dtype="int64")
    assert mapped.dtype == np.dtype("int64")
    np.testing.assert_array_equal(np.asarray(mapped[1:3, ::2]), BASE[1:3, ::2] * 2 + 1)
    assert mapped[2, 3, 4] == BASE[2, 3, 4] * 2 + 1
    assert mapped.with_transform(None).dtype == np.dtype("int32")
    bad = arr.with_transform(lambda a: a[:1])
    with pytest.raises(ValueError, match="shape"):
        np.asarray(bad[0:2])
    # a view cut off the chunk grid reports no chunks rather than a misaligned grid
    assert arr[1:].chunks is None
    assert np.asarray(arr, dtype=np.float32).dtype == np.float32


def test_lazy_array_translates_domains_to_zero() -> None:
    store = ts.array(BASE)[ts.d[:].translate_by[10, -3, 4]]
    arr = LazyArray(store)
    np.testing.assert_array_equal(np.asarray(arr[-1, :2]), BASE[-1, :2])


# -- formats -------------------------------------------------------------------------------------------
CASES = ["precomputed", "precomputed-channels", "zarr3", "ome-zarr", "ome-zarr-labels", "zarr2", "ome-zarr-0.4",
         "ome-zarr-0.4-labels", "n5", "n5-multiscale",
         "n5-bdv"]


def sample_points(shape: tuple[int, ...], n: int = 25, seed: int = 0) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    corners = [tuple(0 for _ in shape), tuple(s - 1 for s in shape)]
    return corners + [tuple(int(rng.integers(0, s)) for s in shape) for _ in range(n)]


@pytest.mark.parametrize("name", CASES)
def test_open_volume_geometry_and_values(name: str, format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    case = format_cases[name]
    vol = open_volume(case.path)
    assert vol.shape == case.shape
    assert vol.voxel_size == pytest.approx(case.voxel_size)
    assert vol.translate == pytest.approx(case.translate)
    assert vol.dtype == np.dtype(case.dtype)
    assert vol.kind == case.kind
    assert vol.unit == case.unit
    assert len(vol.levels) == case.levels
    assert vol.axes[-3:] == ("z", "y", "x")
    for i, level in enumerate(vol.levels):
        reference = case.reference(i)
        assert level.shape == reference.shape
        for point in sample_points(level.shape, seed=i):
            assert level.array[point] == reference[point], (i, point)
        z = level.shape[-3] // 2
        np.testing.assert_array_equal(np.asarray(level.array[..., z, :, :]), reference[..., z, :, :])
    sizes = [np.prod(lv.shape) for lv in vol.levels]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    if vol.kind == "image":
        assert vol.contrast_limits is not None
    else:
        assert vol.contrast_limits is None


def test_precomputed_scales_and_metadata(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    vol = open_volume(format_cases["precomputed"].path)
    assert [lv.key for lv in vol.levels] == ["4_6_30", "8_12_30"]
    assert vol.levels[1].voxel_size == (30.0, 12.0, 8.0)
    assert vol.levels[1].translate == (7 * 30.0, 25 * 12.0, 50 * 8.0)
    assert vol.contrast_limits == (0.0, 65535.0)
    assert vol.metadata["info"]["type"] == "image"
    rgb = open_volume(format_cases["precomputed-channels"].path)
    assert rgb.axes == ("c", "z", "y", "x") and rgb.channel_axis == 0


def test_ome_zarr_image_brings_its_labels(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    image, labels = open_volumes(format_cases["ome-zarr"].path)
    assert (image.kind, labels.kind) == ("image", "segmentation")
    assert image.name == "em" and labels.name == "cells"
    assert image.contrast_limits == (100.0, 60000.0)  # from omero.window, not from the voxels
    assert image.levels[2].voxel_size == pytest.approx((80.0, 32.0, 32.0))
    # opening the labels group itself gives the label images only
    only = open_volumes(format_cases["ome-zarr"].path / "labels")
    assert [v.name for v in only] == ["cells"]


def test_n5_levels_use_downsampling_factors(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    vol = open_volume(format_cases["n5-multiscale"].path)
    assert [lv.key for lv in vol.levels] == ["s0", "s1", "s2"]
    assert [lv.voxel_size for lv in vol.levels] == [(40.0, 4.0, 4.0), (40.0, 8.0, 8.0), (80.0, 16.0, 16.0)]
    bdv = open_volume(format_cases["n5-bdv"].path)
    assert bdv.levels[1].voxel_size == (4.0, 1.0, 1.0)


def _n5_group(root: Path, group: dict[str, object], levels: list[dict[str, object]]) -> Path:
    """An N5 multiscale group of empty uint8 datasets (every block missing reads as 0)."""
    (root / "attributes.json").write_text(json.dumps(group))
    for k, extra in enumerate(levels):
        (root / f"s{k}").mkdir()
        doc = {"dimensions": [16 >> k, 12 >> k, 8 >> k], "blockSize": [4, 4, 4], "dataType": "uint8",
               "compression": {"type": "raw"}, **extra}
        (root / f"s{k}" / "attributes.json").write_text(json.dumps(doc))
    return root


def _inspected_levels(url: Path) -> list[dict[str, object]]:
    return [sc["volume"] for sc in open_dataset(url).inspector().inspect()["scales"]]


def test_n5_scale_with_its_own_pixel_resolution_is_scaled_by_its_factors(tmp_path: Path) -> None:
    # Bug fixed: the viewer took a scale's own pixelResolution as that scale's voxel size while
    # inspect multiplied it by the factors. n5-ij (and n5-spark, which copies s0's pixelResolution
    # onto every scale) read it as the full-resolution size: voxel size = pixelResolution x factors.
    res = {"pixelResolution": {"dimensions": [4, 4, 40], "unit": "nm"}}
    url = _n5_group(tmp_path, {"n5": "4.0.0"},
                    [{**res, "downsamplingFactors": [1, 1, 1]}, {**res, "downsamplingFactors": [2, 2, 2]}])
    vol = open_volume(url)
    assert [lv.voxel_size for lv in vol.levels] == [(40.0, 4.0, 4.0), (80.0, 8.0, 8.0)]
    assert [lv.downsampling_factors for lv in vol.levels] == [(1.0, 1.0, 1.0), (2.0, 2.0, 2.0)]
    assert [tuple(v["voxel_size"]) for v in _inspected_levels(url)] == [lv.voxel_size for lv in vol.levels]


def test_n5_group_factor_tables_are_read_one_way(tmp_path: Path) -> None:
    # Bug fixed: with both group tables the viewer read 'scales' first and inspect
    # 'downsamplingFactors' first; both now follow Neuroglancer ('scales' wins).
    url = _n5_group(tmp_path, {"scales": [[1, 1, 1], [2, 2, 2]], "downsamplingFactors": [[1, 1, 1], [2, 2, 1]],
                               "resolution": [1, 1, 10]}, [{}, {}])
    vol = open_volume(url)
    assert vol.levels[1].downsampling_factors == (2.0, 2.0, 2.0) and vol.levels[1].voxel_size == (20.0, 2.0, 2.0)
    assert _inspected_levels(url)[1]["downsampling_factors"] == [2.0, 2.0, 2.0]
    # A malformed table entry: the viewer skipped it and guessed from the shapes, inspect refused.
    (tmp_path / "attributes.json").write_text(json.dumps({"scales": [[1, 1, 1], [2, 2]]}))
    for call in (lambda: open_volume(url), lambda: open_dataset(url).inspector().inspect()):
        with pytest.raises(MetadataError, match=r"'scales\[1\]' must list 3 positive numbers"):
            call()


@pytest.mark.parametrize("doc", [{"resolution": [4, 0, 40]}, {"pixelResolution": {"dimensions": [0, 4, 40],
                                                                                   "unit": "nm"}},
                                 {"scales": [[1, 1, 1], [2, 0, 2]]}])
def test_n5_zero_resolution_or_factor_is_refused_by_every_reader(tmp_path: Path, doc: dict[str, object]) -> None:
    # Bug fixed: open accepted a zero resolution (a zero voxel size) that inspect refused.
    url = _n5_group(tmp_path, doc, [{}, {}])
    with pytest.raises(MetadataError, match="positive numbers"):
        open_volume(url)
    with pytest.raises(MetadataError, match="positive numbers"):
        open_dataset(url).inspector()


def test_kind_can_be_forced(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    assert open_volume(format_cases["zarr3"].path, kind="image").kind == "image"
    assert open_volume(format_cases["n5"].path, kind="segmentation").contrast_limits is None


def test_sample_is_sharded_precomputed(sample: SampleDataset) -> None:  # noqa: F811
    image, seg = open_volume(sample.image), open_volume(sample.segmentation)
    assert image.kind == "image" and seg.kind == "segmentation"
    assert image.shape == seg.shape == (64, 256, 256)
    assert image.voxel_size == (40.0, 8.0, 8.0)
    assert image.levels[0].array.chunks == (8, 64, 64)
    assert seg.dtype == np.dtype("uint64")


# -- URLs ------------------------------------------------------------------------------------------------
def test_metadata_file_and_prefixes_and_file_urls(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    pc = format_cases["precomputed"].path
    assert open_volume(pc / "info").shape == (20, 36, 40)
    assert open_volume(f"precomputed://{pc}").shape == (20, 36, 40)
    assert open_volume(pc.as_uri()).shape == (20, 36, 40)
    assert open_volume(f"n5://{format_cases['n5'].path}").format == "n5"
    assert open_volume(f"zarr3://{format_cases['zarr3'].path}").format == "zarr3"
    with pytest.raises(NotADatasetError):
        open_volume(f"n5://{pc}")


def test_not_a_volume_and_bad_urls(tmp_path: Path) -> None:
    with pytest.raises(NotADatasetError, match="not a precomputed"):
        open_volume(tmp_path)
    with pytest.raises(NotADatasetError):
        open_volume(tmp_path / "missing")
    with pytest.raises(ArgumentError, match="scheme"):
        open_volume("ftp://example.org/volume")
    with pytest.raises(ArgumentError):
        open_volume("   ")
    (tmp_path / "info").write_text('{"scales": [}')
    with pytest.raises(MetadataError) as err:
        open_volume(tmp_path)
    assert err.value.offset is not None and "info" in str(err.value)
    (tmp_path / "info").unlink()
    (tmp_path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    with pytest.raises(NotADatasetError, match="multiscales"):
        open_volume(tmp_path)


def test_broken_ome_metadata_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {
        "ome": {"multiscales": [{"axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
                                 "datasets": [{"path": "0", "coordinateTransformations": [
                                     {"type": "scale", "scale": [1.0]}]}]}]}}}))
    with pytest.raises(MetadataError, match=r"datasets\[0\].coordinateTransformations\[0\].scale"):
        open_volume(tmp_path)


def test_remote_urls_map_to_tensorstore_kvstores() -> None:
    assert parse_url("gs://bucket/ds/seg").kvstore == {"driver": "gcs", "bucket": "bucket", "path": "ds/seg/"}
    assert parse_url("s3://bucket/ds").kvstore["driver"] == "s3"
    loc = parse_url("precomputed://https://host.org/a/b")
    assert loc.format_hint == "precomputed" and loc.kvstore["driver"] == "http"
    assert loc.child("s0").kvstore["path"] == "/a/b/s0/"
    assert loc.name == "b"


def test_http_sharded_volume_reads_byte_ranges(sample: SampleDataset, http_root) -> None:  # noqa: F811
    root, server = http_root
    shutil.copytree(sample.segmentation, root / "seg")
    vol = open_volume(server.url + "seg", context=make_context(64 << 20))
    local = open_volume(sample.segmentation)
    server.requests.clear()
    view = vol.levels[0].array[20, 0:64, 64:128]  # one chunk
    # building a view opens the level (TensorStore reads its info) and reads no voxels
    assert [p for p, _ in server.requests if not p.endswith("/info")] == []
    np.testing.assert_array_equal(np.asarray(view), np.asarray(local.levels[0].array[20, 0:64, 64:128]))
    shard_reads = [(p, r) for p, r in server.requests if p.endswith(".shard")]
    assert shard_reads and all(r is not None and r.startswith("bytes=") for _, r in shard_reads)
    assert server.bytes_sent < 64 * 64 * 8 * 8  # at most about one compressed chunk plus index bytes


def test_cached_reads_are_not_revalidated(sample: SampleDataset, http_root) -> None:  # noqa: F811
    """recheck_cached_data="open": a warm read makes no request (the default would revalidate)."""
    root, server = http_root
    shutil.copytree(sample.image, root / "img")
    ctx = make_context(64 << 20)
    arr = open_volume(server.url + "img", context=ctx).levels[0].array
    np.asarray(arr[10])  # a script's first read of these chunks skips the cache (test_cache_admission.py)
    np.asarray(arr[10])  # the second fills it
    server.requests.clear()
    np.asarray(arr[10])
    np.asarray(arr[11, 5:60, 100:200])  # same chunks (z 8..15)
    assert server.requests == []
    plain = ts.open({"driver": "neuroglancer_precomputed", "kvstore": server.url + "img/", "scale_index": 0},
                    context=ctx).result()
    plain[:, :, 10].read().result()
    server.requests.clear()
    plain[:, :, 10].read().result()
    assert server.requests  # TensorStore's default policy re-checks every cached chunk


# -- the shared context ----------------------------------------------------------------------------
def test_cache_pool_size_is_settable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context_module, "_context", None)
    monkeypatch.setattr(context_module, "_cache_bytes", None)
    monkeypatch.setenv("SHARDSCOPE_CACHE_MB", "64")
    assert cache_pool_bytes() == 64 << 20
    first = shared_context()
    assert shared_context() is first
    set_cache_pool_size(8 << 20)
    assert cache_pool_bytes() == 8 << 20
    assert shared_context() is not first
    assert shared_context().spec.to_json()["cache_pool"]["total_bytes_limit"] == 8 << 20
    for bad in (-1, 1.5, True):
        with pytest.raises(ArgumentError):
            set_cache_pool_size(bad)  # type: ignore[arg-type]
    monkeypatch.setattr(context_module, "_cache_bytes", None)
    monkeypatch.setenv("SHARDSCOPE_CACHE_MB", "lots")
    with pytest.raises(ShardscopeError, match="SHARDSCOPE_CACHE_MB"):
        cache_pool_bytes()


def test_volumes_share_the_context_and_cache_policy(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    # a driver level (precomputed's local raw scales and plain local zarr v3 arrays are decoded here,
    # behind a virtual_chunked view)
    vol = open_volume(format_cases["zarr2"].path)
    spec = vol.levels[0].array.store.spec().to_json()
    assert spec["recheck_cached_data"] == "open"


def test_dtype_helpers() -> None:
    assert dtype_contrast_limits(np.dtype("uint8")) == (0.0, 255.0)
    assert dtype_contrast_limits(np.dtype("int16")) == (-32768.0, 32767.0)
    assert dtype_contrast_limits(np.dtype("float32")) == (0.0, 1.0)
    assert guess_kind(np.dtype("uint64")) == "segmentation"
    assert guess_kind(np.dtype("uint16")) == "image"


@given(st.text(max_size=40))
def test_parse_url_never_crashes_unexpectedly(text: str) -> None:
    with contextlib.suppress(ArgumentError):
        parse_url(text)
