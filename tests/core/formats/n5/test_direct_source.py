"""Our decoder of local raw and gzip N5 (the fast read path) reads exactly what TensorStore's ``n5`` driver reads.

The real N5 datasets other software wrote (n5-java, zarr-python, z5py, webKnossos, TensorStore's
fixtures); datasets TensorStore writes (full-size edge blocks) and datasets our block writer
writes (cropped edge blocks, as Java's), over random shapes, block sizes and data types; blocks
stored larger or smaller than their extent, read as TensorStore reads them; damaged blocks (typed
errors naming the block file and offset, a gzip bomb stopped at the block's size); and which
datasets stay on TensorStore's driver or on :class:`~napari_shardscope.core.formats.n5.volume.N5ChunkSource`.
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import LocalByteStore, TensorStoreByteStore
from napari_shardscope.core.errors import ChunkDecodeError, UnsupportedFeatureError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.n5.direct_source import N5DirectSource
from napari_shardscope.core.formats.n5.volume import N5ChunkSource, level_chunk_source
from napari_shardscope.core.volumes import make_context, open_volume
from napari_shardscope.core.volumes.lazy import zero_origin
from napari_shardscope.core.volumes.opening import apply_transform
from tests.fuzz.hostile import gzip_bomb
from tests.n5_data import random_array, ts_create, write_dataset
from tests.realdata import REALDATA
from tests.volume_cases import assert_boxes_read_alike

ts = pytest.importorskip("tensorstore")

#: Every real N5 dataset (or multiscale group) and who reads its voxels: ours, TensorStore's driver, N5ChunkSource.
REAL: dict[str, str] = {
    "n5java_zi/n5-java.n5/raw": "direct",
    "n5java_zi/n5-java.n5/gzip": "direct",
    "zarrpy_n5_zi/zarr.n5/gzip": "direct",
    "z5py_n5_zi/z5py.n5/gzip": "direct",
    "ts_n5_testdata/raw": "direct",  # full-size edge blocks (zarr-python's N5Store)
    "ts_n5_testdata/gzip": "direct",
    "n5java_backward/data-2.5.1.n5/raw": "direct",  # cropped edge blocks (Java)
    "n5java_backward/data-3.1.3.n5/raw": "direct",
    "wk_simple_n5/color/1": "direct",  # 4-D, channels first
    "n5java_zi/n5-java.n5/bzip2": "tensorstore",
    "n5java_zi/n5-java.n5/xz": "tensorstore",
    "ts_n5_testdata/bzip2": "tensorstore",
    "ts_n5_testdata/xz": "tensorstore",
    "ts_n5_testdata/blosc": "tensorstore",
    "ng_n5_multiscale/n5_viewer_multiscale_modern": "tensorstore",  # blosc, no blocks
    "ng_n5_multiscale/n5_viewer_multiscale_deprecated": "tensorstore",
    "n5java_zi/n5-java.n5/lz4": "own",
    "n5java_backward/data-1.5.0.n5/raw": "own",  # compressionType: before N5 1.0
}
READER = {"direct": N5DirectSource, "own": N5ChunkSource, "tensorstore": type(None)}


def level_reference(path: Path, index: int = 0) -> np.ndarray:
    """Level ``index`` as TensorStore's n5 driver presents it (the level's own transform, no cache)."""
    level = open_dataset(path).volume_specs()[0].levels[index]
    store = ts.open(dict(level.tensorstore), context=make_context(0)).result()
    return np.asarray(zero_origin(apply_transform(store, level.transform)).read().result())


def check_reads(path: Path, expected: np.ndarray, index: int = 0) -> None:
    """Every read path of a level (uncached direct, cached, boxes across edges, planes, points) gives ``expected``."""
    array = open_volume(path, context=make_context(64 << 20)).levels[index].array
    np.testing.assert_array_equal(array.read(), expected)  # first touch: decoded here, no TensorStore
    np.testing.assert_array_equal(array.read(), expected)  # through the cache (virtual_chunked)
    for cache in (0, 64 << 20):
        fresh = open_volume(path, context=make_context(cache)).levels[index].array
        assert_boxes_read_alike(fresh, expected)
        tail = tuple(slice(max(0, s - 3 - s // 4), s) for s in expected.shape)  # odd box reaching the far edges
        np.testing.assert_array_equal(fresh[tail].read(), expected[tail])


def sources(path: Path) -> list[Any]:
    return [level.chunk_source for level in open_dataset(path).volume_specs()[0].levels]


# -- real data ------------------------------------------------------------------------------------------------
@pytest.mark.realdata
@pytest.mark.parametrize(("rel", "reader"), sorted(REAL.items()))
def test_real_datasets_take_the_expected_path_and_read_as_tensorstore_reads_them(rel: str, reader: str) -> None:
    path = REALDATA / rel
    got = sources(path)
    assert got and all(isinstance(s, READER[reader]) for s in got), (rel, got)
    if reader == "own":
        return  # TensorStore cannot read these; test_own_reader checks them
    for index in range(len(got)):
        check_reads(path, level_reference(path, index), index)


# -- written by TensorStore and by us -------------------------------------------------------------------------
COMPRESSIONS = [{"type": "raw"}, {"type": "gzip"}, {"type": "gzip", "level": 9, "useZlib": True}]


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=["raw", "gzip", "zlib"])
@pytest.mark.parametrize("data_type", ["uint8", "uint16", "uint64", "float32"])
def test_tensorstore_written_datasets_both_ways(tmp_path: Path, compression: dict[str, Any], data_type: str) -> None:
    """TensorStore writes (full-size edge blocks) → we read; we write (cropped edge blocks) → TensorStore, we read."""
    data = random_array((13, 10, 7), data_type, seed=len(data_type))  # x, y, z: no axis a multiple of the block
    ts_create(tmp_path / "ts", data, (4, 3, 5), compression)
    written = json.loads((tmp_path / "ts" / "attributes.json").read_text())["compression"]
    assert written["type"] == compression["type"] and written.get("useZlib", False) == compression.get("useZlib", False)
    edge = tmp_path / "ts" / "3" / "3" / "1"
    assert struct.unpack_from(">3I", edge.read_bytes(), 4) == (4, 3, 5)  # stored larger than its extent (1, 1, 2)
    write_dataset(tmp_path / "ours", data, (4, 3, 5), compression)
    for path in (tmp_path / "ts", tmp_path / "ours"):
        assert [type(s) for s in sources(path)] == [N5DirectSource]
        np.testing.assert_array_equal(level_reference(path), data.T)
        check_reads(path, data.T)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(1, 24), min_size=1, max_size=4),
    block=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    data_type=st.sampled_from(["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
                               "float32", "float64"]),
    compression=st.sampled_from(COMPRESSIONS),
    writer=st.sampled_from(["tensorstore", "ours-cropped", "ours-full"]),
    holes=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_random_datasets_read_as_tensorstore_reads_them(
        tmp_path_factory: pytest.TempPathFactory, shape: list[int], block: list[int], data_type: str,
        compression: dict[str, Any], writer: str, holes: bool, seed: int) -> None:
    """Any shape, block size, type, compression and writer reads as TensorStore reads it.

    At most 512 blocks: a 24⁴ dataset in 1-voxel blocks is 331,776 block files (one draw of that cost
    half a minute), while what the reader does per block is the same at 512 as at 10⁵.
    """
    block_size = tuple(block[:len(shape)])
    assume(int(np.prod([-(-s // b) for s, b in zip(shape, block_size, strict=True)])) <= 512)
    path = tmp_path_factory.mktemp("n5") / "d"
    data = random_array(tuple(shape), data_type, seed=seed)
    if writer == "tensorstore":
        ts_create(path, data, block_size, compression)
    else:
        write_dataset(path, data, block_size, compression, full_end_blocks=writer == "ours-full")
    stored = data.copy()  # N5 order, x first
    if holes:  # a missing block reads as 0
        (path / "/".join("0" for _ in shape)).unlink()
        stored[tuple(slice(0, b) for b in block_size)] = 0
    # presented in the reader's order: reversed, unless a 4-D layout names a channel axis (n5.volume.stored_axes)
    expected = np.transpose(stored, open_dataset(path).volume_specs()[0].levels[0].transform.order)
    assert [type(s) for s in sources(path)] == [N5DirectSource]
    np.testing.assert_array_equal(level_reference(path), expected)
    check_reads(path, expected)


def test_other_compressions_and_other_stores_stay_on_tensorstore(tmp_path: Path) -> None:
    data = random_array((9, 8, 7), "uint16")
    for comp in ({"type": "bzip2", "blockSize": 3}, {"type": "xz", "preset": 2}, {"type": "zstd", "level": 5},
                 {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}):
        ts_create(tmp_path / comp["type"], data, (4, 4, 4), comp)
        assert sources(tmp_path / comp["type"]) == [None]
    ts_create(tmp_path / "gzip", data, (4, 4, 4), {"type": "gzip"})
    attrs = open_dataset(tmp_path / "gzip").inspector().attributes()
    assert isinstance(level_chunk_source(LocalByteStore(tmp_path / "gzip"), attrs), N5DirectSource)
    assert level_chunk_source(None, attrs) is None  # no store: the driver reads it
    # a store that is not a local directory (TensorStore's kvstore: what remote URLs get) keeps the driver
    assert level_chunk_source(TensorStoreByteStore(f"file://{tmp_path}/gzip/"), attrs) is None


# -- blocks stored at another size ----------------------------------------------------------------------------
def raw_block(dims: tuple[int, ...], values: np.ndarray) -> bytes:
    return struct.pack(f">HH{len(dims)}I", 0, len(dims), *dims) + np.asarray(values, ">u2").tobytes()


def small_dataset(tmp_path: Path, compression: dict[str, Any] | None = None) -> tuple[Path, np.ndarray]:
    """A 5 × 7 uint16 dataset (x, y) in 3 × 4 blocks, written by TensorStore (full-size edge blocks)."""
    data = np.arange(1, 36, dtype=np.uint16).reshape(5, 7)
    ts_create(tmp_path / "d", data, (3, 4), compression or {"type": "raw"})
    return tmp_path / "d", data


def test_blocks_stored_larger_or_smaller_than_their_extent_read_as_tensorstore_reads_them(tmp_path: Path) -> None:
    """A full-size edge block: its inside part; a truncated block (edge or not, even 0-wide): padded with 0."""
    path, _ = small_dataset(tmp_path)
    (path / "1" / "1").write_bytes(raw_block((3, 4), np.arange(100, 112)))  # extent (2, 3): stored larger
    (path / "0" / "0").write_bytes(raw_block((2, 3), np.arange(200, 206)))  # extent (3, 4): stored smaller
    (path / "1" / "0").write_bytes(raw_block((1, 4), np.arange(300, 304)))  # an edge block, smaller still
    (path / "0" / "1").write_bytes(raw_block((0, 3), np.arange(0)))  # no elements at all
    expected = level_reference(path)
    # presented (y, x): the stored parts, and 0 where a block is stored smaller than its extent
    assert expected[0, 0] == 200 and expected[0, 2] == 0 and expected[3, 0] == 0  # block 0/0, 2 × 3 of 3 × 4
    assert expected[0, 3] == 300 and expected[0, 4] == 0  # block 1/0, 1 × 4 of 2 × 4
    assert expected[4, 3] == 100 and expected[5, 1] == 0  # block 1/1 stored 3 × 4 for 2 × 3; block 0/1 empty
    check_reads(path, expected)
    source = sources(path)[0]
    np.testing.assert_array_equal(source.read_chunk((1, 1)), np.arange(100, 112).reshape(4, 3).T[:2, :3])


# -- damage ---------------------------------------------------------------------------------------------------
def read_all(path: Path) -> np.ndarray:
    return np.asarray(open_volume(path, context=make_context(0)).levels[0].array.read())


def damaged(tmp_path: Path, payload: bytes, compression: dict[str, Any]) -> Path:
    path, _ = small_dataset(tmp_path, compression)
    (path / "0" / "1").write_bytes(payload)
    return path


def header(dims: tuple[int, ...], mode: int = 0) -> bytes:
    return struct.pack(f">HH{len(dims)}I", mode, len(dims), *dims)


GZIP = {"type": "gzip"}
ZLIB = {"type": "gzip", "useZlib": True}
RAW = {"type": "raw"}
BLOCK_VALUES = np.arange(12, dtype=">u2").tobytes()


@pytest.mark.parametrize(("payload", "compression", "message", "offset"), [
    (b"\x00\x00\x00", RAW, "header truncated", 3),
    (header((3, 4))[:8], GZIP, "header truncated", 8),
    (header((3, 4, 1)) + BLOCK_VALUES, RAW, "3 dimensions, the dataset has 2", 2),
    (header((3, 5)) + BLOCK_VALUES, RAW, r"exceed the dataset's blockSize", 8),
    (b"\x00\x07" + header((3, 4))[2:] + BLOCK_VALUES, RAW, "unknown block mode 7", 0),
    (header((3, 4)) + BLOCK_VALUES[:-2], RAW, "raw data has 22 bytes, expected 24", 12),
    (header((3, 4)) + BLOCK_VALUES + b"\x00", RAW, "raw data has 25 bytes, expected 24", 12),
    (header((3, 4)) + gzip.compress(BLOCK_VALUES[:-4], mtime=0), GZIP, "gzip data decodes to 20 bytes, expected 24",
     12),
    (header((3, 4)) + zlib.compress(BLOCK_VALUES + b"\x00\x00"), ZLIB, "zlib data decodes to more than 24", 12),
    (header((3, 4)) + gzip.compress(BLOCK_VALUES, mtime=0)[:-12], GZIP, "truncated", 12),
    (header((3, 4)) + gzip.compress(BLOCK_VALUES, mtime=0)[:12] + b"\xff" * 20, GZIP, "bad gzip data", 12),
    (header((3, 4)) + zlib.compress(BLOCK_VALUES), GZIP, "zlib stream, not gzip", 12),
])
def test_damaged_blocks_are_chunk_errors_naming_the_block_and_offset(
        tmp_path: Path, payload: bytes, compression: dict[str, Any], message: str, offset: int) -> None:
    path = damaged(tmp_path, payload, compression)
    assert [type(s) for s in sources(path)] == [N5DirectSource]
    for cache in (0, 64 << 20):  # the uncached reader and TensorStore's cache fill alike
        with pytest.raises(ChunkDecodeError, match=message) as err:
            np.asarray(open_volume(path, context=make_context(cache)).levels[0].array.read())
        assert err.value.key is not None and err.value.key.endswith("/d/0/1"), err.value.key
        assert err.value.offset == offset
    with pytest.raises(ValueError):  # TensorStore refuses the block too
        level_reference(path)


def test_a_varlength_block_is_unsupported_as_in_the_block_reader(tmp_path: Path) -> None:
    path = damaged(tmp_path, header((3, 4), mode=1) + struct.pack(">I", 12) + BLOCK_VALUES, RAW)
    with pytest.raises(UnsupportedFeatureError, match="varlength") as err:
        read_all(path)
    assert err.value.key is not None and err.value.key.endswith("/d/0/1")


def test_a_file_too_large_for_a_block_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path, _ = small_dataset(tmp_path)
    array = open_volume(path, context=make_context(0)).levels[0].array  # (opening checks the sizes too)
    with open(path / "0" / "1", "wb") as f:  # a sparse terabyte where a 36-byte block belongs
        f.truncate(1 << 40)
    with pytest.raises(ChunkDecodeError, match="larger than the") as err:
        array.read()
    assert err.value.key is not None and err.value.key.endswith("/d/0/1")


@pytest.mark.parametrize("compression", [GZIP, ZLIB], ids=["gzip", "zlib"])
def test_a_bomb_stops_at_the_block_size(tmp_path: Path, compression: dict[str, Any]) -> None:
    """A 64³ uint8 block whose data inflates to 256 MiB: refused after 256 KiB of output, with bounded memory."""
    data = np.ones((64, 64, 64), np.uint8)
    ts_create(tmp_path / "d", data, (64, 64, 64), compression)
    bomb = gzip_bomb(256 << 20, zlib_wrapper=bool(compression.get("useZlib")))
    assert zlib.decompressobj(47).decompress(bomb, 1 << 20) == bytes(1 << 20)  # a stream of zeros
    assert len(bomb) < 300_000  # within the size a 64³ uint8 block's file may have
    (tmp_path / "d" / "0" / "0" / "0").write_bytes(header((64, 64, 64)) + bomb)
    assert [type(s) for s in sources(tmp_path / "d")] == [N5DirectSource]
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match="decodes to more than 262144 bytes") as err:
            read_all(tmp_path / "d")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.key is not None and err.value.key.endswith("/d/0/0/0") and err.value.offset == 16
    assert peak < 16 << 20, peak  # the block and the compressed bytes, never the 256 MiB


def test_missing_blocks_read_as_zero(tmp_path: Path) -> None:
    path, data = small_dataset(tmp_path, GZIP)
    (path / "0" / "1").unlink()
    shutil.rmtree(path / "1")
    expected = data.T.copy()
    expected[4:, :] = 0
    expected[:, 3:] = 0
    np.testing.assert_array_equal(level_reference(path), expected)
    check_reads(path, expected)
