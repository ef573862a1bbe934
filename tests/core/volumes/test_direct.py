"""Reads of a level decoded here (precomputed raw scales): the uncached direct path and the cached virtual path.

Checked with TensorStore's own reader of the same files and with TensorStore's cache counters (no
timing): every kind of view a script or napari asks for gives TensorStore's voxels; a first touch
and a bulk read leave the shared cache as it was, later reads fill and hit it; the viewer's
prefetch warms it; a labelmap's base reads (which chain on TensorStore futures) see the same voxels;
a damaged chunk in a many-chunk read is a typed error naming its shard file.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.raw_source import RawChunkSource
from napari_shardscope.core.volumes import lazy, make_context, open_volume
from napari_shardscope.core.volumes.direct import DirectReader, DirectView

ts = pytest.importorskip("tensorstore")

SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1, "hash": "murmurhash3_x86_128",
            "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
SIZE_XYZ = (70, 50, 40)


def _metric(name: str) -> int:
    found = ts.experimental_collect_matching_metrics(name)
    return sum(v["value"] for m in found for v in m["values"])


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A sharded gzip uint64 volume (x, y, z = 70, 50, 40 in 16³ chunks, offset (2, -3, 5)), and its z, y, x voxels."""
    path = tmp_path_factory.mktemp("direct") / "v"
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)},
                     "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
                     "scale_metadata": {"size": list(SIZE_XYZ), "resolution": [8, 8, 8], "chunk_size": [16, 16, 16],
                                        "encoding": "raw", "voxel_offset": [2, -3, 5], "sharding": SHARDING},
                     "create": True}, context=make_context(0)).result()
    zyx = (np.arange(np.prod(SIZE_XYZ), dtype=np.uint64) * 2654435761 % 10007).reshape(SIZE_XYZ[::-1])
    store[..., 0].write(zyx.T).result()
    return path, zyx


def test_the_level_is_read_by_our_decoder(volume: tuple[Path, np.ndarray]) -> None:
    path, _ = volume
    (level,) = open_dataset(path).volume_specs()[0].levels
    assert isinstance(level.chunk_source, RawChunkSource)


@pytest.mark.parametrize("key", [
    (5,), (-1,), (slice(None), 7), (Ellipsis, 3), (slice(3, 30), slice(-20, None), slice(5, 6)),
    (slice(None, None, -1), 4), (slice(1, 30, 3),), (np.array([0, 5, 39]),), (None, 2), (slice(10, 10),),
    (np.arange(40) % 2 == 0, 1),
])
def test_every_kind_of_view_reads_tensorstores_voxels(volume: tuple[Path, np.ndarray], key: tuple) -> None:
    path, zyx = volume
    array = open_volume(path, context=make_context(32 << 20)).levels[0].array
    for _ in range(2):  # first touch (direct), then through the cache
        np.testing.assert_array_equal(np.asarray(array[key]), zyx[key])
    if not any(isinstance(k, np.ndarray) for k in key):  # a view of a view (napari indexes twice)
        np.testing.assert_array_equal(np.asarray(array[3:30][key]), zyx[3:30][key])


def test_direct_reader_plans_plain_views_and_declines_others(volume: tuple[Path, np.ndarray]) -> None:
    path, zyx = volume
    array = open_volume(path, context=make_context(0)).levels[0].array
    reader = DirectReader(open_dataset(path).volume_specs()[0].levels[0].chunk_source)
    store = array.store
    got = reader.read(store[3:17, 4, ::1])
    assert got is not None
    np.testing.assert_array_equal(got, zyx[3:17, 4, :])
    assert reader.read(store[::2]) is None  # a stride: TensorStore reads it
    assert reader.read(store[ts.d[0].translate_by[5]][7:9]) is not None
    np.testing.assert_array_equal(DirectView(store[::2], reader).read().result(), zyx[::2])


def test_first_touch_and_bulk_reads_leave_the_cache_as_it_was(volume: tuple[Path, np.ndarray],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path, zyx = volume
    array = open_volume(path, context=make_context(64 << 20)).levels[0].array

    def misses(read: object) -> int:
        before = _metric("/tensorstore/cache/miss_count")
        read()  # type: ignore[operator]
        return _metric("/tensorstore/cache/miss_count") - before

    assert misses(lambda: np.testing.assert_array_equal(array[20].read(), zyx[20])) == 0  # direct: no cache at all
    assert misses(lambda: array.store[20].read().result()) > 0  # so the cache does not hold it
    assert misses(lambda: np.testing.assert_array_equal(array[21].read(), zyx[21])) == 0  # second touch: cached
    monkeypatch.setattr(lazy, "BULK_READ_BYTES", 1 << 10)
    assert misses(lambda: np.testing.assert_array_equal(array.read(), zyx)) == 0  # bulk: direct
    assert misses(lambda: array.store[0].read().result()) > 0


def test_the_viewers_prefetch_warms_the_cache(volume: tuple[Path, np.ndarray]) -> None:
    path, zyx = volume
    viewer = open_volume(path, context=make_context(64 << 20)).levels[0].array.with_prefetch()
    prefetcher = viewer.prefetcher
    assert prefetcher is not None
    np.testing.assert_array_equal(viewer[17].read(), zyx[17])  # layer 1 (z 16-31): 0 and 2 are prefetched
    prefetcher.wait()
    before = _metric("/tensorstore/cache/miss_count")
    np.testing.assert_array_equal(viewer[32].read(), zyx[32])
    np.testing.assert_array_equal(viewer[15].read(), zyx[15])
    assert _metric("/tensorstore/cache/miss_count") == before
    prefetcher.close()


def test_labelmap_base_reads_see_the_same_voxels(volume: tuple[Path, np.ndarray]) -> None:
    from napari_shardscope.core.labelmap.geometry import Box
    from napari_shardscope.core.labelmap.reading import BaseSource

    path, zyx = volume
    base = BaseSource(open_volume(path))
    np.testing.assert_array_equal(base.read(0, Box((3, 4, 5), (33, 44, 66))), zyx[3:33, 4:44, 5:66])
    np.testing.assert_array_equal(base.read_async(0, Box((0, 0, 0), (40, 50, 70))).result(), zyx)


def test_concurrent_reads_from_many_threads(volume: tuple[Path, np.ndarray]) -> None:
    path, zyx = volume
    array = open_volume(path, context=make_context(8 << 20)).levels[0].array
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(15):
                z0 = int(rng.integers(0, 39))
                y0 = int(rng.integers(0, 49))
                key = (slice(z0, z0 + int(rng.integers(1, 12))), slice(y0, None), slice(int(rng.integers(0, 69)), None))
                np.testing.assert_array_equal(array[key].read(), zyx[key])
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors


def test_a_damaged_chunk_in_a_many_chunk_read_is_typed(tmp_path: Path, volume: tuple[Path, np.ndarray]) -> None:
    import shutil

    path, zyx = volume
    copy = tmp_path / "v"
    shutil.copytree(path, copy)
    layout = open_dataset(copy).inspector()
    where = layout.locate_format_voxel([40, 10, 30])  # absolute x, y, z inside the volume
    start, end = where["byte_range"]
    shard = copy / where["shard_file"]
    blob = bytearray(shard.read_bytes())
    blob[start + 12:end] = bytes(end - start - 12)
    shard.write_bytes(bytes(blob))
    array = open_volume(copy).levels[0].array
    with pytest.raises(ChunkDecodeError, match=rf"{shard}: .* at byte {start}$"):
        array.read()
    np.testing.assert_array_equal(array[:, 20:].read(), zyx[:, 20:])  # the other chunks still read


def test_reads_made_from_inside_the_decode_pool_finish(volume: tuple[Path, np.ndarray]) -> None:
    """Many-chunk reads run by every decode worker at once: the reading threads decode their own chunks.

    (A read whose chunks were all queued behind the workers that wait for them would never finish.)
    """
    from napari_shardscope.core.volumes import direct

    path, zyx = volume
    reader = DirectReader(open_dataset(path).volume_specs()[0].levels[0].chunk_source)
    store = open_volume(path, context=make_context(0)).levels[0].array.store
    pool = direct._decode_pool()
    started = threading.Barrier(direct.DECODE_WORKERS, timeout=60)

    def read_all(z0: int) -> np.ndarray | None:
        started.wait()  # every worker of the pool is inside a read before any read submits its helpers
        return reader.read(store[z0:])

    futures = [pool.submit(read_all, z0) for z0 in range(direct.DECODE_WORKERS)]
    for z0, fut in enumerate(futures):
        np.testing.assert_array_equal(fut.result(timeout=120), zyx[z0:])


def test_a_reading_thread_keeps_no_large_decode_buffer(volume: tuple[Path, np.ndarray],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's threads decode too; each keeps at most KEEP_SCRATCH_BYTES_READER of buffer after a read."""
    from napari_shardscope.core.volumes import direct

    path, zyx = volume
    reader = DirectReader(open_dataset(path).volume_specs()[0].levels[0].chunk_source)
    store = open_volume(path, context=make_context(0)).levels[0].array.store
    kept: list[int] = []

    def read(limit: int) -> None:
        monkeypatch.setattr(direct, "KEEP_SCRATCH_BYTES_READER", limit)
        np.testing.assert_array_equal(reader.read(store[3:30, 5]), zyx[3:30, 5])  # 16³ uint64 chunks: 32 KiB
        buf = getattr(direct._scratch, "buf", None)
        kept.append(0 if buf is None else buf.nbytes)

    monkeypatch.setattr(direct, "DECODE_WORKERS", 1)  # no helpers: the reading thread decodes every chunk
    for limit in (1 << 10, 1 << 20):
        thread = threading.Thread(target=read, args=(limit,))
        thread.start()
        thread.join(timeout=60)
    assert kept == [0, 16 ** 3 * 8]
