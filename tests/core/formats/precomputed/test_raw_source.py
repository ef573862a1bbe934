"""Our decoder of raw precomputed scales (the fast read path) reads exactly what TensorStore and CloudVolume read.

Volumes written by TensorStore (the peer writes, we read) over random shapes, voxel offsets, chunk
sizes, dtypes, channel counts and sharding specs (murmurhash/identity, gzip/raw, unsharded); the
real datasets other software wrote; damaged data (typed errors naming the file and offset, a gzip
bomb stopped at the chunk's size, missing chunks as the fill value) and a short seeded fuzz of
mutated shards (only our typed errors, and TensorStore's voxels whenever both read).
"""

from __future__ import annotations

import gzip
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.errors import ChunkDecodeError, ShardscopeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.raw_source import RawChunkSource
from napari_shardscope.core.volumes import make_context, open_volume
from tests.realdata import REALDATA

ts = pytest.importorskip("tensorstore")


SHARDINGS: dict[str, dict[str, Any] | None] = {
    "unsharded": None,
    "murmur-gzip": {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1, "hash": "murmurhash3_x86_128",
                    "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip",
                    "data_encoding": "gzip"},
    "identity-raw": {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                     "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "raw", "data_encoding": "raw"},
    "murmur-raw-data": {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
                        "hash": "murmurhash3_x86_128", "minishard_bits": 0, "shard_bits": 0,
                        "minishard_index_encoding": "gzip", "data_encoding": "raw"},
}


def write_volume(path: Path, *, size: tuple[int, int, int], chunk: tuple[int, int, int],
                 offset: tuple[int, int, int], dtype: str, channels: int, sharding: dict[str, Any] | None,
                 seed: int = 0, holes: bool = False) -> np.ndarray:
    """Write one scale with TensorStore; return its data as (x, y, z, c). ``holes``: leave some chunks unwritten."""
    scale: dict[str, Any] = {"size": list(size), "resolution": [4.0, 4.0, 40.0], "chunk_size": list(chunk),
                             "encoding": "raw", "voxel_offset": list(offset)}
    if sharding is not None:
        scale["sharding"] = sharding
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)},
                     "multiscale_metadata": {"type": "image", "data_type": dtype, "num_channels": channels},
                     "scale_metadata": scale, "create": True}, context=make_context(0)).result()
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in store.shape)
    if np.dtype(dtype).kind == "f":
        data = rng.normal(size=shape).astype(dtype)
    else:
        data = rng.integers(0, np.iinfo(dtype).max, size=shape, dtype=dtype, endpoint=True)
        data[rng.random(shape) < 0.5] = 7  # compressible runs, as real data has
    if not holes:
        store[...] = data
        return data
    written = np.zeros(shape, dtype=dtype)  # TensorStore's fill value where no chunk is stored
    step = tuple(c for c in chunk)
    origin = tuple(int(o) for o in store.domain.inclusive_min[:3])
    for i, gx in enumerate(range(0, size[0], step[0])):
        for j, gy in enumerate(range(0, size[1], step[1])):
            for k, gz in enumerate(range(0, size[2], step[2])):
                if (i + j + k) % 2:
                    continue
                box = tuple(slice(g, min(g + c, n)) for g, c, n in zip((gx, gy, gz), step, size, strict=True))
                written[box] = data[box]
                tbox = tuple(slice(o + b.start, o + b.stop) for o, b in zip(origin, box, strict=True))
                store[tbox].write(data[box]).result()
    return written


def presented(data: np.ndarray) -> np.ndarray:
    """(x, y, z, c) → the reader's (z, y, x) or (c, z, y, x)."""
    return data[..., 0].T if data.shape[-1] == 1 else np.moveaxis(data, 3, 0).transpose(0, 3, 2, 1)


def ts_presented(path: Path, scale_index: int = 0) -> np.ndarray:
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path) + "/"},
                     "scale_index": scale_index}, context=make_context(0)).result()
    return presented(np.asarray(store.read().result()))


def fast_sources(path: Path) -> list[Any]:
    return [lv.chunk_source for lv in open_dataset(path).volume_specs()[0].levels]


def check_reads(path: Path, expected: np.ndarray) -> None:
    """Every read path of level 0 (uncached direct, cached virtual, a viewer's prefetching level) gives ``expected``."""
    array = open_volume(path, context=make_context(64 << 20)).levels[0].array
    np.testing.assert_array_equal(array.read(), expected)  # bulk/first touch: decoded here, no TensorStore
    np.testing.assert_array_equal(array.read(), expected)  # through the cache (virtual_chunked)
    np.testing.assert_array_equal(np.asarray(array), expected)
    n = expected.ndim
    mid = tuple(s // 3 for s in expected.shape)
    box = tuple(slice(m, max(m + 1, s - m)) for m, s in zip(mid, expected.shape, strict=True))
    np.testing.assert_array_equal(array[box].read(), expected[box])
    plane = (expected.shape[0] - 1,) if n == 3 else (slice(None), expected.shape[1] - 1)
    np.testing.assert_array_equal(array[plane].read(), expected[plane])
    np.testing.assert_array_equal(array[..., ::2].read(), expected[..., ::2])  # strided: TensorStore's path
    point = tuple(s - 1 for s in expected.shape)
    assert array[point] == expected[point]
    viewer = open_volume(path, context=make_context(64 << 20)).levels[0].array.with_prefetch()
    np.testing.assert_array_equal(viewer[plane].read(), expected[plane])
    if viewer.prefetcher is not None:
        viewer.prefetcher.close()


EXAMPLES = int(os.environ.get("SHARDSCOPE_RAW_EXAMPLES", "20"))  # more for a long local run


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    size=st.tuples(st.integers(1, 40), st.integers(1, 40), st.integers(1, 20)),
    chunk=st.tuples(st.integers(1, 16), st.integers(1, 16), st.integers(1, 8)),
    offset=st.tuples(st.integers(-20, 20), st.integers(-20, 20), st.integers(-5, 5)),
    dtype=st.sampled_from(["uint8", "uint16", "uint32", "uint64", "float32"]),
    channels=st.sampled_from([1, 1, 2]),
    sharding=st.sampled_from(sorted(SHARDINGS)),
    holes=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_fast_path_reads_what_tensorstore_reads(tmp_path_factory: pytest.TempPathFactory,
                                                size: tuple[int, int, int], chunk: tuple[int, int, int],
                                                offset: tuple[int, int, int], dtype: str, channels: int,
                                                sharding: str, holes: bool, seed: int) -> None:
    """Any size, chunking, offset, type, channels and sharding reads as TensorStore reads it.

    At most 512 chunks (the shardings here have at most 8 shards of 4 minishards): a 40×40×20 volume in
    1-voxel chunks is 32,000 of them (one such draw cost ~10 CPU-s), and the reader does the same per chunk.
    """
    assume(int(np.prod([-(-s // c) for s, c in zip(size, chunk, strict=True)])) <= 512)
    path = tmp_path_factory.mktemp("raw") / "v"
    written = write_volume(path, size=size, chunk=chunk, offset=offset, dtype=dtype, channels=channels,
                           sharding=SHARDINGS[sharding], seed=seed, holes=holes)
    assert isinstance(fast_sources(path)[0], RawChunkSource)
    expected = ts_presented(path)
    np.testing.assert_array_equal(expected, presented(written))
    check_reads(path, expected)


def test_multiscale_and_channel_layout(tmp_path: Path) -> None:
    """A TensorStore-written pyramid and a 3-channel volume: values, shapes and placement as TensorStore's."""
    from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume

    written = write_ts_volume(tmp_path / "p", SHARDING_MURMUR_GZIP, scales=3, dtype="uint64")
    volume = open_volume(tmp_path / "p")
    assert all(isinstance(s, RawChunkSource) for s in fast_sources(tmp_path / "p"))
    for i, level in enumerate(volume.levels):
        np.testing.assert_array_equal(level.array.read(), written[i].T)
        np.testing.assert_array_equal(level.array.read(), ts_presented(tmp_path / "p", i))
    assert volume.levels[0].translate == (7 * 40.0, 5 * 8.0, 3 * 8.0)  # voxel_offset [3, 5, 7] x resolution
    data = write_volume(tmp_path / "c", size=(20, 12, 9), chunk=(8, 8, 4), offset=(1, 2, 3), dtype="uint8",
                        channels=3, sharding=SHARDINGS["murmur-gzip"])
    three = open_volume(tmp_path / "c")
    assert three.levels[0].array.shape == (3, 9, 12, 20)
    np.testing.assert_array_equal(three.levels[0].array.read(), presented(data))


def test_cloudvolume_reads_what_we_read(tmp_path: Path) -> None:
    cloudvolume = pytest.importorskip("cloudvolume")
    for name in ("unsharded", "murmur-gzip"):
        path = tmp_path / name
        write_volume(path, size=(37, 29, 11), chunk=(16, 8, 4), offset=(3, -4, 2), dtype="uint32", channels=1,
                     sharding=SHARDINGS[name], seed=3)
        ours = open_volume(path).levels[0].array.read()  # z, y, x
        cv = cloudvolume.CloudVolume(f"file://{path}", mip=0, progress=False, fill_missing=True)
        theirs = np.asarray(cv[:, :, :])[..., 0]  # x, y, z
        np.testing.assert_array_equal(ours, theirs.T)


# -- real data written by other software --------------------------------------------------------------------
REAL = ["noduli_seg_head", "noduli_seg_negoffset", "ngscripts_sharded/raw", "ng_precomputed_nodata/two_channels",
        "ng_precomputed_nodata/one_channel"]


@pytest.mark.realdata
@pytest.mark.parametrize("rel", REAL)
def test_real_datasets_read_as_tensorstore_and_cloudvolume_read_them(rel: str) -> None:
    path = REALDATA / rel
    volume = open_volume(path)
    sources = fast_sources(path)
    assert all(isinstance(s, RawChunkSource) for s in sources)
    for i, level in enumerate(volume.levels):
        expected = ts_presented(path, i)
        np.testing.assert_array_equal(level.array.read(), expected)
        np.testing.assert_array_equal(level.array.read(), expected)
        if expected.ndim == 3:
            z = expected.shape[0] // 2
            np.testing.assert_array_equal(level.array[z].read(), expected[z])
    cloudvolume = pytest.importorskip("cloudvolume")
    cv = cloudvolume.CloudVolume(f"file://{path}", mip=0, progress=False, fill_missing=True)
    theirs = np.asarray(cv[:, :, :])
    np.testing.assert_array_equal(volume.levels[0].array.read(), presented(theirs))


@pytest.mark.realdata
def test_zlib_where_gzip_is_declared_is_named() -> None:
    array = open_volume(REALDATA / "ngscripts_sharded" / "zlib_as_gzip").levels[0].array
    zlib_named = r"/8mm/\d\.shard: bad gzip data .*a zlib stream, not gzip\) at byte \d+"
    with pytest.raises(ChunkDecodeError, match=zlib_named):
        array.read()


# -- damage --------------------------------------------------------------------------------------------------
def _one_chunk_shard(tmp_path: Path, data_encoding: str = "gzip") -> tuple[Path, np.ndarray, Path]:
    """A 16³ uint32 volume in one 16³ chunk of one shard (no hashing, raw index): easy to damage by hand."""
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                "minishard_bits": 0, "shard_bits": 0, "minishard_index_encoding": "raw",
                "data_encoding": data_encoding}
    data = write_volume(tmp_path / "v", size=(16, 16, 16), chunk=(16, 16, 16), offset=(0, 0, 0), dtype="uint32",
                        channels=1, sharding=sharding)
    (shard,) = (tmp_path / "v").rglob("*.shard")
    return tmp_path / "v", data, shard


def _chunk_range(shard: Path) -> tuple[int, int]:
    """The byte range of the one chunk (after the 16-byte shard index; minishard index at the end)."""
    blob = shard.read_bytes()
    lo, hi = struct.unpack_from("<QQ", blob, 0)
    index = np.frombuffer(blob[16 + lo:16 + hi], dtype="<u8").reshape(3, -1)
    start = 16 + int(index[1, 0])
    return start, start + int(index[2, 0])


def _replace_chunk(shard: Path, new: bytes) -> None:
    """Put ``new`` where the chunk's bytes were, keeping the index right (the minishard index follows the data)."""
    blob = bytearray(shard.read_bytes())
    start, end = _chunk_range(shard)
    lo, hi = struct.unpack_from("<QQ", blob, 0)
    index = np.frombuffer(bytes(blob[16 + lo:16 + hi]), dtype="<u8").reshape(3, -1).copy()
    index[2, 0] = len(new)
    rest = bytes(blob[end:16 + lo])
    out = bytes(blob[:start]) + new + rest
    new_lo = len(out) - 16
    out += index.tobytes()
    shard.write_bytes(struct.pack("<QQ", new_lo, new_lo + index.nbytes) + out[16:])


def test_damaged_gzip_chunk_names_the_shard_and_offset(tmp_path: Path) -> None:
    path, _, shard = _one_chunk_shard(tmp_path)
    start, end = _chunk_range(shard)
    blob = bytearray(shard.read_bytes())
    blob[start + 12:end] = bytes(end - start - 12)
    shard.write_bytes(bytes(blob))
    array = open_volume(path).levels[0].array
    for read in (array.read, lambda: array[3].read(), array.read):  # uncached, then cached paths
        with pytest.raises(ChunkDecodeError, match=rf"{shard}: .*gzip.* at byte {start}$"):
            read()


@pytest.mark.parametrize(("payload", "message"), [
    (gzip.compress(bytes(16 ** 3 * 4 + 4), mtime=0), "decodes to more than 16384 bytes"),  # a small bomb
    (gzip.compress(bytes(100), mtime=0), "decodes to 100 bytes, expected 16384"),
    (gzip.compress(bytes(16 ** 3 * 4), mtime=0) + b"junk", "bad gzip data"),  # bytes after the member
])
def test_gzip_of_the_wrong_size_is_refused(tmp_path: Path, payload: bytes, message: str) -> None:
    path, _, shard = _one_chunk_shard(tmp_path)
    _replace_chunk(shard, payload)
    start, _ = _chunk_range(shard)
    # junk after the member is named where it starts (a bad second member); anything else where the chunk does
    at = start + len(payload) - 4 if payload.endswith(b"junk") else start
    array = open_volume(path).levels[0].array
    with pytest.raises(ChunkDecodeError, match=rf"{message}.* at byte {at}$"):
        array.read()
    with pytest.raises(ChunkDecodeError, match=message):
        array[0].read()


def test_bomb_stops_at_the_chunk_size(tmp_path: Path) -> None:
    """A chunk inflating to 64 MiB is refused after 16 KiB of output (no buffer of the claimed size)."""
    path, _, shard = _one_chunk_shard(tmp_path)
    _replace_chunk(shard, gzip.compress(bytes(64 << 20), 9))  # 64 KiB: within the scale's shard-size limit
    with pytest.raises(ChunkDecodeError, match="decodes to more than 16384 bytes"):
        open_volume(path).levels[0].array.read()


def test_raw_data_encoding_and_unsharded_files_of_the_wrong_size(tmp_path: Path) -> None:
    path, _, shard = _one_chunk_shard(tmp_path, "raw")
    _replace_chunk(shard, bytes(100))
    start, _ = _chunk_range(shard)
    with pytest.raises(ChunkDecodeError, match=rf"raw chunk has 100 bytes, expected 16384 at byte {start}$"):
        open_volume(path).levels[0].array.read()
    write_volume(tmp_path / "u", size=(16, 16, 16), chunk=(8, 8, 8), offset=(0, 0, 0), dtype="uint8", channels=1,
                 sharding=None)
    chunk = tmp_path / "u" / "4_4_40" / "8-16_0-8_0-8"
    chunk.write_bytes(chunk.read_bytes()[:-1])
    with pytest.raises(ChunkDecodeError, match=rf"{chunk}: raw chunk has 511 bytes, expected 512"):
        open_volume(tmp_path / "u").levels[0].array.read()


def test_chunk_range_past_the_end_of_the_shard_names_it(tmp_path: Path) -> None:
    path, _, shard = _one_chunk_shard(tmp_path)
    blob = bytearray(shard.read_bytes())
    lo, _hi = struct.unpack_from("<QQ", blob, 0)
    size_at = 16 + lo + 16  # the size column of the one-entry minishard index
    struct.pack_into("<Q", blob, size_at, struct.unpack_from("<Q", blob, size_at)[0] + 10 ** 6)
    shard.write_bytes(bytes(blob))
    with pytest.raises(ChunkDecodeError, match=rf"{shard}: .*runs past the end of the {len(blob)}-byte file"):
        open_volume(path).levels[0].array.read()


def test_missing_chunks_and_shards_read_as_zero(tmp_path: Path) -> None:
    written = write_volume(tmp_path / "v", size=(40, 30, 12), chunk=(8, 8, 4), offset=(5, 5, 5), dtype="uint16",
                           channels=1, sharding=SHARDINGS["murmur-gzip"], holes=True)
    shards = sorted((tmp_path / "v").rglob("*.shard"))
    shards[0].unlink()  # a whole shard gone: its chunks are missing too
    expected = ts_presented(tmp_path / "v")
    assert (expected == 0).any() and not np.array_equal(expected, presented(written))
    check_reads(tmp_path / "v", expected)


# -- fuzz ----------------------------------------------------------------------------------------------------
def _fuzz(tmp_path: Path, seeds: range) -> None:
    base = tmp_path / "base"
    write_volume(base, size=(24, 20, 10), chunk=(8, 8, 4), offset=(0, 3, 0), dtype="uint16", channels=1,
                 sharding=SHARDINGS["murmur-gzip"], seed=1)
    originals = {p.relative_to(base): p.read_bytes() for p in base.rglob("*.shard")}
    info = (base / "info").read_text()
    for seed in seeds:
        rng = np.random.default_rng(seed)
        case = tmp_path / f"m{seed}"
        scale = json.loads(info)["scales"][0]["key"]
        (case / scale).mkdir(parents=True)
        (case / "info").write_text(info)
        for rel, blob in originals.items():
            data = bytearray(blob)
            for _ in range(int(rng.integers(1, 4))):
                kind = rng.integers(3)
                at = int(rng.integers(len(data)))
                if kind == 0:
                    data[at] ^= 1 << int(rng.integers(8))
                elif kind == 1:
                    del data[at:at + int(rng.integers(1, 64))]
                else:
                    data[at:at] = rng.integers(0, 256, int(rng.integers(1, 32)), dtype=np.uint8).tobytes()
            (case / rel).write_bytes(bytes(data))
        try:
            ours = open_volume(case).levels[0].array.read()
        except ShardscopeError:
            continue  # a typed error naming what is damaged: what a user gets
        try:
            theirs = ts_presented(case)
        except ValueError:
            continue  # TensorStore refuses what we read: nothing to compare
        np.testing.assert_array_equal(ours, theirs)


def test_fuzzed_shards_give_typed_errors_or_tensorstores_voxels(tmp_path: Path) -> None:
    _fuzz(tmp_path, range(12))


@pytest.mark.slow
def test_fuzzed_shards_many(tmp_path: Path) -> None:
    _fuzz(tmp_path, range(12, 400))


def test_shard_files_kept_open_are_bounded_and_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no budget left a read opens and closes its shard; otherwise each shard is opened once, and closed
    when the volume is dropped."""
    import gc

    from napari_shardscope.core.bytestore import local

    written = write_volume(tmp_path / "v", size=(64, 64, 16), chunk=(8, 8, 8), offset=(0, 0, 0), dtype="uint32",
                           channels=1, sharding=SHARDINGS["murmur-gzip"])
    assert len(list((tmp_path / "v").rglob("*.shard"))) == 4

    def kept_files(volume: Any) -> dict[str, int]:
        store = volume.levels[0].array._direct.source._shard_reader().store
        assert isinstance(store, local.KeptOpenLocalStore)
        return store._fds

    monkeypatch.setattr(local, "MAX_KEPT_OPEN", 0)  # the process's budget is spent
    volume = open_volume(tmp_path / "v")
    np.testing.assert_array_equal(volume.levels[0].array.read(), presented(written))
    assert kept_files(volume) == {}
    monkeypatch.setattr(local, "MAX_KEPT_OPEN", 1 << 20)
    volume = open_volume(tmp_path / "v")
    np.testing.assert_array_equal(volume.levels[0].array.read(), presented(written))
    fds = kept_files(volume)
    assert len(fds) == 4
    del volume
    gc.collect()
    assert fds == {}  # closed with the store


def test_minishard_tables_stay_within_their_entry_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Minishards listing many chunks: the id → range tables kept stay under TABLE_ENTRIES, reads stay exact."""
    from napari_shardscope.core.formats.precomputed import raw_source

    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
                "minishard_bits": 2, "shard_bits": 0, "minishard_index_encoding": "raw", "data_encoding": "gzip"}
    data = write_volume(tmp_path / "v", size=(64, 64, 32), chunk=(8, 8, 8), offset=(0, 0, 0), dtype="uint16",
                        channels=1, sharding=sharding)  # 256 chunks in 4 minishards of 64
    monkeypatch.setattr(raw_source, "TABLE_ENTRIES", 100)  # room for one minishard's table, not two
    (source,) = fast_sources(tmp_path / "v")
    assert isinstance(source, RawChunkSource)
    for gx in range(8):
        for gy in range(8):
            for gz in range(4):
                chunk = source.read_chunk((gx, gy, gz, 0))
                assert chunk is not None
                np.testing.assert_array_equal(chunk, data[gx * 8:gx * 8 + 8, gy * 8:gy * 8 + 8, gz * 8:gz * 8 + 8])
                assert source._tables.total_weight <= 100
    assert source._tables.total_weight == 64  # exactly the last minishard's table is kept, and weighed


def test_prepared_tables_read_as_before_and_damage_is_raised_by_the_decode(tmp_path: Path) -> None:
    """A multi-chunk uncached read loads its minishard tables in one batch first (``prepare_chunks``):
    the voxels are TensorStore's, and a damaged minishard index is still a typed error naming the
    shard file and the index's offset, raised by the read, not swallowed by the batch."""
    written = write_volume(tmp_path / "v", size=(64, 64, 16), chunk=(8, 8, 4), offset=(0, 0, 0), dtype="uint8",
                           channels=1, sharding=SHARDINGS["murmur-gzip"])
    expected = presented(written)
    np.testing.assert_array_equal(open_volume(tmp_path / "v").levels[0].array.read(), expected)
    source = fast_sources(tmp_path / "v")[0]
    grids = [(x, y, 0) for x in range(8) for y in range(8)]
    pairs = [(s, m) for s in range(4) for m in range(4)]
    assert not any(source._tables.contains(p) for p in pairs)
    source.prepare_chunks(grids)
    assert sum(source._tables.contains(p) for p in pairs) > 1  # loaded before any chunk is decoded
    out = np.empty((8, 8, 4, 1), dtype=np.uint8, order="F")
    assert source.decode_into((3, 5, 0), out)
    np.testing.assert_array_equal(out, written[24:32, 40:48, 0:4, :])

    shard = sorted((tmp_path / "v").rglob("*.shard"))[0]
    blob = bytearray(shard.read_bytes())
    ranges = [struct.unpack_from("<QQ", blob, 16 * m) for m in range(4)]  # after the 64-byte shard index
    lo, hi = next(r for r in ranges if r[1] - r[0] > 18)  # a non-empty minishard index
    start = 16 * 4 + lo
    blob[start + 10 : start + hi - lo - 8] = b"\xff" * (hi - lo - 18)  # the deflate body, header and trailer kept
    shard.write_bytes(bytes(blob))
    # the source reports the index's IndexDecodeError as the read's ChunkDecodeError, key and offset kept
    with pytest.raises(ChunkDecodeError, match=rf"{shard}: bad gzip data .* at byte {start}$"):
        open_volume(tmp_path / "v").levels[0].array.read()
    with pytest.raises(ChunkDecodeError, match=rf"{shard}: bad gzip data .* at byte {start}$"):
        fresh = fast_sources(tmp_path / "v")[0]
        every = [(x, y, z) for x in range(8) for y in range(8) for z in range(4)]
        fresh.prepare_chunks(every)  # raises nothing: the error is cached ...
        for grid in every:  # ... and raised by the decode that meets it
            fresh.decode_into(grid, out)
