"""Scale levels open on first use: once, only when read, from any thread, with typed errors.

Counted through what is observable without mocks: whether a level is open, how many times its
opener ran, the requests an HTTP server saw.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import MetadataError, NotFoundError, ShardscopeError
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.core.volumes import LazyArray, make_context, open_volume
from napari_shardscope.core.volumes.deferred import DeferredStore
from napari_shardscope.core.volumes.opening import open_level
from tests.volume_cases import sample  # noqa: F401  (fixture)

ts = pytest.importorskip("tensorstore")


def test_opening_a_volume_opens_no_level_and_metadata_answers_without_opening(
        sample: SampleDataset) -> None:  # noqa: F811
    vol = open_volume(sample.segmentation, context=make_context(64 << 20))
    arrays = vol.arrays
    assert len(arrays) > 2 and not any(a.is_open for a in arrays)
    for a, level in zip(arrays, vol.levels, strict=True):
        assert (a.shape, a.ndim, a.dtype, a.size) == (level.shape, 3, np.dtype("uint64"), int(np.prod(level.shape)))
        assert "not opened" in repr(a)
        a.with_prefetch()  # a viewer's level with its prefetcher: still nothing opened
    assert not any(a.is_open for a in arrays)
    plane = np.asarray(arrays[1][5])  # the first read opens that level and no other
    assert [a.is_open for a in arrays] == [False, True] + [False] * (len(arrays) - 2)
    reference = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{sample.segmentation}/",
                         "scale_index": 1}).result()
    np.testing.assert_array_equal(plane, reference[:, :, 5, 0].read().result().T)
    assert arrays[1].chunks is not None and "chunks=" in repr(arrays[1])


def test_a_level_opens_once_whatever_the_threads(sample: SampleDataset) -> None:  # noqa: F811
    vol = open_volume(sample.segmentation, context=make_context(64 << 20))
    level = vol.levels[0]
    spec_level = next(lv for lv in _specs(sample) if lv.key == level.key)
    calls = []
    gate = threading.Barrier(8)

    def opener() -> object:
        calls.append(threading.get_ident())
        return open_level(_spec(sample), spec_level, make_context(64 << 20))

    deferred = DeferredStore(opener, shape=level.shape, dtype="uint64", where=vol.url)
    array = LazyArray(deferred).with_prefetch()
    planes: dict[int, np.ndarray] = {}

    def read(z: int) -> None:
        gate.wait(timeout=30)
        planes[z] = np.asarray(array[z])

    threads = [threading.Thread(target=read, args=(z,)) for z in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(calls) == 1 and deferred.opens == 1 and sorted(planes) == list(range(8))
    expected = np.asarray(level.array[0:8])
    for z, plane in planes.items():
        np.testing.assert_array_equal(plane, expected[z])
    prefetcher = array.prefetcher
    assert prefetcher is not None
    prefetcher.wait()
    assert deferred.opens == 1  # the prefetch workers shared the one open
    prefetcher.close()


def test_a_level_that_fails_to_open_raises_a_typed_error_on_first_read_and_recovers(tmp_path: Path) -> None:
    # a level TensorStore's driver opens (precomputed's local raw scales and plain local zarr v3 arrays
    # are decoded here from the metadata parsed at open_volume, so their levels open without reading it again)
    from tests.volume_cases import write_zarr2_array

    root = write_zarr2_array(tmp_path).path
    vol = open_volume(root, context=make_context(64 << 20))  # the metadata parse reads .zarray here
    info = (root / ".zarray").read_bytes()
    (root / ".zarray").unlink()  # now TensorStore's open of the level fails
    array = vol.levels[0].array
    with pytest.raises(ShardscopeError) as caught:
        np.asarray(array[3])
    view_error = caught.value
    assert isinstance(view_error, NotFoundError) and str(root) in str(view_error)
    assert not array.is_open  # a failed open is not remembered...
    (root / ".zarray").write_bytes(info)
    np.testing.assert_array_equal(np.asarray(array[3]), np.asarray(open_volume(root).levels[0].array[3]))
    assert array.is_open  # ...so the next read opens it


def test_broken_metadata_is_still_an_error_when_opening(sample: SampleDataset, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "seg"
    shutil.copytree(sample.segmentation, root)
    (root / "info").write_text('{"type": "segmentation", "scales": "nope"}')
    with pytest.raises(MetadataError):
        open_volume(root)


def test_opening_over_http_reads_the_metadata_once_and_no_level(sample: SampleDataset, http_root) -> None:  # noqa: F811
    root, server = http_root
    shutil.copytree(sample.segmentation, root / "seg")
    vol = open_volume(server.url + "seg", context=make_context(64 << 20))
    paths = [p for p, _ in server.requests]
    # our parse reads the info once (after probing for other formats' metadata); no TensorStore open per scale
    assert paths.count("/seg/info") == 1 and not any(p.endswith(".shard") for p in paths)
    server.requests.clear()
    np.asarray(vol.levels[-1].array[0])
    assert any(p.endswith(".shard") for p, _ in server.requests)


def _spec(sample: SampleDataset):  # noqa: F811
    from napari_shardscope.core.formats import open_dataset

    return open_dataset(sample.segmentation).volume_specs()[0]


def _specs(sample: SampleDataset):  # noqa: F811
    return _spec(sample).levels
