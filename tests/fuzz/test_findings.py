"""Regression tests for the defects the fuzz suite found, one per door, each written before its fix.

Each test names the fuzz seed that found the defect (``scripts/fuzz.py --replay SEED`` on the commit
before the fix reproduces it) and checks the rule it broke: a typed error, no read outside the root,
no hang, no unbounded allocation.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore.context import RemoteLimits
from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import (
    ArgumentError,
    FormatError,
    MetadataError,
    NotARegularFileError,
    OutsideRootError,
    ShardscopeError,
)
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.volumes import open_volume
from tests.n5_data import write_dataset as write_n5_dataset
from tests.precomputed_data import SHARDING_IDENTITY_RAW, write_ts_volume
from tests.volume_cases import write_ome_zarr, write_zarr3_array

#: A sparse file this large cannot be read whole on any machine the tests run on.
HUGE = 1 << 40


def _aged(path: Path) -> float:
    """Set ``path``'s access time before its modification time (so a read moves it, under relatime)."""
    st = path.stat()
    os.utime(path, (st.st_mtime - 3600, st.st_mtime))
    return path.stat().st_atime


def _precomputed(tmp_path: Path) -> Path:
    ds = tmp_path / "pc"
    write_ts_volume(ds, SHARDING_IDENTITY_RAW, size=(16, 16, 8), chunk=(8, 8, 8), scales=1)
    return ds


def _n5(tmp_path: Path) -> Path:
    ds = tmp_path / "n5"
    write_n5_dataset(ds, np.arange(8 * 8 * 4, dtype="uint16").reshape(8, 8, 4), [4, 4, 4], {"type": "gzip"})
    return ds


def _zarr3(tmp_path: Path) -> Path:
    return write_zarr3_array(tmp_path).path


WRITERS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "precomputed": (_precomputed, "info"),
    "zarr3": (_zarr3, "zarr.json"),
    "n5": (_n5, "attributes.json"),
}


# -- the metadata document is read through the same guards as every other key --------------------------
@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_metadata_document_linked_out_of_the_dataset_is_refused_unread(tmp_path: Path, fmt: str) -> None:
    """Seeds 1024, 1284, 1514, 1599: ``info``/``zarr.json``/``attributes.json`` a link to a file outside.

    Detection read the document through TensorStore, which follows links: the outside file was read
    (its bytes then failed to parse, or were refused only afterwards).
    """
    write, doc = WRITERS[fmt]
    ds = write(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_bytes((ds / doc).read_bytes())
    (ds / doc).unlink()
    (ds / doc).symlink_to(outside)
    atime = _aged(outside)
    with pytest.raises(OutsideRootError, match=doc):
        open_dataset(ds)
    assert run(["inspect", str(ds)]) == 2
    assert outside.stat().st_atime == atime, "the file outside the dataset was read"


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_fifo_in_place_of_the_metadata_document_does_not_hang(tmp_path: Path, fmt: str) -> None:
    """Seed 1003: a FIFO named ``info`` blocked format detection forever."""
    write, doc = WRITERS[fmt]
    ds = write(tmp_path)
    (ds / doc).unlink()
    os.mkfifo(ds / doc)
    outcome: list[BaseException | None] = []

    def detect() -> None:
        try:
            open_dataset(ds)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=detect, daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # release the blocked reader so the test process can end
        fd = os.open(ds / doc, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        pytest.fail("format detection blocked on a FIFO")
    assert isinstance(outcome[0], NotARegularFileError), outcome


# -- sizes are checked before a whole file is read ------------------------------------------------------
@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_huge_metadata_document_is_refused_before_it_is_read(tmp_path: Path, fmt: str) -> None:
    """Seeds 1684 (crash: TensorStore aborted allocating 1 TiB), 2349 and 1716 (20 s reading 2 GiB)."""
    write, doc = WRITERS[fmt]
    ds = write(tmp_path)
    os.truncate(ds / doc, HUGE)
    with pytest.raises(MetadataError, match="larger than"):
        open_dataset(ds)


def test_a_huge_array_document_inside_an_ome_group_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Seed 1893: a 1 TiB sparse ``scale1/zarr.json`` below an OME-Zarr group raised MemoryError."""
    image, _labels = write_ome_zarr(tmp_path)
    os.truncate(image.path / "1" / "zarr.json", HUGE)
    with pytest.raises(MetadataError, match="larger than") as info:
        open_dataset(image.path).volume_specs()
    assert info.value.key is not None and "1/zarr.json" in info.value.key
    with pytest.raises(MetadataError, match="larger than"):
        open_volume(image.path)


def _huge_data_file(ds: Path) -> Path:
    """The first data file of ``ds`` (not a metadata document), made a 1 TiB sparse file."""
    files = sorted(p for p in ds.rglob("*") if p.is_file() and p.name not in ("info", "zarr.json", "attributes.json"))
    os.truncate(files[0], HUGE)
    return files[0]


def _precomputed_unsharded(tmp_path: Path) -> Path:
    ds = tmp_path / "pc_unsharded"
    write_ts_volume(ds, None, size=(16, 16, 8), chunk=(8, 8, 8), scales=1)
    return ds


@pytest.mark.parametrize("fmt", [*sorted(WRITERS), "precomputed_unsharded"])
def test_validate_reports_a_huge_data_file_instead_of_allocating_it(tmp_path: Path, fmt: str) -> None:
    """Seed 1392: ``validate`` read a 1 TiB sparse N5 block whole (MemoryError); shards likewise.

    Seed 121 (after merging main's check of unsharded precomputed chunk files): the same for a chunk file.
    """
    write = _precomputed_unsharded if fmt == "precomputed_unsharded" else WRITERS[fmt][0]
    ds = write(tmp_path)
    huge = _huge_data_file(ds)
    problems = _validate_or_typed_error(ds)
    assert any(huge.name in str(p) and "larger than" in str(p) for p in problems), problems


def _validate_or_typed_error(ds: Path) -> list[Any]:
    try:
        return [str(p) for p in open_dataset(ds).inspector().validate()]
    except ShardscopeError as exc:  # a typed refusal names the file too
        return [str(exc)]


def test_a_huge_n5_block_read_is_a_typed_error(tmp_path: Path) -> None:
    """Reading a block through the format layer refuses a block file larger than its spec allows."""
    from napari_shardscope.core.bytestore import LocalByteStore
    from napari_shardscope.core.formats.n5.attributes import parse_dataset_attributes, read_attributes
    from napari_shardscope.core.formats.n5.block import read_block

    ds = _n5(tmp_path)
    os.truncate(ds / "0" / "0" / "0", HUGE)
    store = LocalByteStore(ds)
    with pytest.raises(ShardscopeError, match="larger than"):
        read_block(store, parse_dataset_attributes(read_attributes(store, "") or {}), (0, 0, 0))


# -- global options ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["99999999999999999999999999", "18446744073709551615", "100000"])
def test_an_absurd_retry_count_is_an_argument_error(tmp_path: Path, value: str) -> None:
    """Seed 1002: ``--retries 99999999999999999999999999`` was an OverflowError (exit 70)."""
    assert run(["--retries", value, "inspect", str(tmp_path)]) == 2
    with pytest.raises(ArgumentError, match="retr"):
        RemoteLimits(retries=int(value))


@pytest.mark.parametrize("value", ["1e308", "86401"])
def test_an_absurd_timeout_is_an_argument_error(tmp_path: Path, value: str) -> None:
    """A timeout past a day is a typo (and 1e308 s is no timeout at all)."""
    assert run(["--timeout", value, "inspect", str(tmp_path)]) == 2



@pytest.mark.parametrize("url", ["file:///tmp/%00", "file:///tmp/ds%00/x", "/tmp/a\x00b"])
def test_a_path_with_a_nul_byte_is_an_argument_error(url: str) -> None:
    """Seed 10270: ``file://…/%00`` reached ``os.path.realpath`` (ValueError: embedded null byte, exit 70)."""
    with pytest.raises(ArgumentError, match="NUL"):
        open_dataset(url)
    assert run(["inspect", url]) == 2


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_huge_chunk_file_is_refused_before_tensorstore_reads_it(tmp_path: Path, fmt: str) -> None:
    """Seed 10247: a 64 GiB sparse N5 block aborted the process inside TensorStore's allocator.

    TensorStore reads a chunk file whole, so the check is made when a local volume is opened, with
    the scan for links and special files: no chunk or shard file may exceed what its spec allows.
    """
    write, _doc = WRITERS[fmt]
    ds = write(tmp_path)
    huge = _huge_data_file(ds)
    with pytest.raises(FormatError, match="larger than") as info:
        open_volume(ds)
    assert info.value.key is not None and huge.name in info.value.key


def test_a_scale_key_too_long_for_the_file_system_is_a_typed_error(tmp_path: Path) -> None:
    """Seed 102687: a 1 MB precomputed scale ``key`` made ``inspect`` raise OSError (ENAMETOOLONG) from ``list``."""
    from napari_shardscope.core.bytestore import LocalByteStore

    with pytest.raises(ShardscopeError, match="too long"):
        list(LocalByteStore(tmp_path).list("x" * 5000))
    ds = _precomputed(tmp_path)
    info = json.loads((ds / "info").read_text())
    info["scales"][0]["key"] = "x" * 5000
    (ds / "info").write_text(json.dumps(info))
    with pytest.raises(ShardscopeError):
        open_dataset(ds).inspector().inspect()
    assert run(["validate", str(ds)]) not in (0, 70)


@pytest.mark.parametrize("shuffle", [[], {}, ["shuffle"]])
def test_a_blosc_shuffle_of_the_wrong_type_is_a_metadata_error(shuffle: Any) -> None:
    """Seed 203427: ``"shuffle": []`` in a zarr v3 blosc codec was a TypeError (unhashable list)."""
    from napari_shardscope.core.formats.zarr3.codecs import check_codec_configuration
    from napari_shardscope.core.formats.zarr3.metadata import CodecSpec

    codec = CodecSpec("blosc", {"cname": "lz4", "clevel": 5, "shuffle": shuffle, "typesize": 2})
    with pytest.raises(MetadataError, match="shuffle"):
        check_codec_configuration(codec, 1, np.dtype("int16"), key="zarr.json", field="codecs[1]")


def test_a_minishard_index_range_larger_than_the_scale_allows_is_refused_unread(tmp_path: Path) -> None:
    """Seed 1039424 (long run): a shard index entry claiming a multi-GB minishard index in a sparse shard
    file made the shard browser read it whole (4.7 GB, then MemoryError)."""
    import struct

    from napari_shardscope.core.errors import IndexDecodeError
    from napari_shardscope.core.layout import open_layout
    from tests.precomputed_data import SHARDING_MURMUR_GZIP

    ds = tmp_path / "pc"
    write_ts_volume(ds, SHARDING_MURMUR_GZIP, size=(16, 16, 8), chunk=(8, 8, 8), scales=1)
    shard = sorted((ds / "8_8_40").glob("*.shard"))[0]
    data = bytearray(shard.read_bytes())
    data[0:16] = struct.pack("<QQ", 0, 1 << 39)  # minishard 0: [index end, index end + 512 GiB)
    shard.write_bytes(bytes(data))
    os.truncate(shard, HUGE)
    inspector = open_dataset(ds).inspector()
    with pytest.raises(IndexDecodeError, match="minishard 0") as info:
        list(inspector.list_chunks())
    assert info.value.offset == 0
    tree = open_layout(ds)  # the browser shows the damaged minishard as a node with its error, reading nothing
    for root in tree.roots():
        for node in tree.children(root):
            tree.children(node)


def test_damaged_compressed_segmentation_is_a_typed_error_not_a_segfault() -> None:
    """Seed 1045209 (long run, after merging main's own compressed_segmentation decoding): gzip bytes
    decoded as compressed_segmentation crashed the process (SIGSEGV) inside the C decoder."""
    import gzip
    import struct

    import compressed_segmentation

    from napari_shardscope.core.errors import ChunkDecodeError
    from napari_shardscope.core.formats.precomputed.chunk_encoding import check_compressed_segmentation

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, size=(16, 16, 8), dtype=np.uint32)
    good = bytes(compressed_segmentation.compress(labels, block_size=(8, 8, 8), order="F"))
    check_compressed_segmentation(good, (16, 16, 8), 1, (8, 8, 8), 4, key="k")  # valid data passes
    for bad in (gzip.compress(good), good[:-4], good[:10] + b"\xff" * (len(good) - 10),
                struct.pack("<I", 1) + struct.pack("<II", 0x20FFFFFF, 3) + good[12:]):
        with pytest.raises(ChunkDecodeError, match="compressed_segmentation"):
            check_compressed_segmentation(bad, (16, 16, 8), 1, (8, 8, 8), 4, key="k")
    for block in ((2**63, 8, 8), (0, 8, 8)):  # seed 1072477: an absurd block size overflowed the checker itself
        with pytest.raises(ChunkDecodeError, match="block size"):
            check_compressed_segmentation(good, (16, 16, 8), 1, block, 4, key="k")
    from napari_shardscope.core.formats.precomputed.chunk_encoding import decode_chunk_encoding
    from napari_shardscope.core.formats.precomputed.info import parse_info

    info = parse_info({"type": "segmentation", "data_type": "uint32", "num_channels": 1, "scales": [{
        "key": "s", "size": [16, 16, 8], "resolution": [1, 1, 1], "chunk_sizes": [[16, 16, 8]],
        "voxel_offset": [0, 0, 0], "encoding": "compressed_segmentation",
        "compressed_segmentation_block_size": [8, 8, 8]}]})
    decoded = decode_chunk_encoding(good, info, info.scales[0], (16, 16, 8), key="s/0-16_0-16_0-8")
    expected = compressed_segmentation.decompress(good, (16, 16, 8), np.uint32, block_size=(8, 8, 8), order="F")
    assert (decoded[..., 0] == expected).all()  # valid chunks decode as before
    with pytest.raises(ChunkDecodeError):  # the whole door: before the fix, a segmentation fault
        decode_chunk_encoding(gzip.compress(good), info, info.scales[0], (16, 16, 8), key="s/0-16_0-16_0-8")


def test_a_block_whose_wider_indices_name_entries_past_its_table_is_refused_before_the_decoder() -> None:
    """CI decoder-header fuzz (cseg_u64_own, block0_bits 2 -> 16): 64 voxels at 16 bits name entry 51,076.

    The check read the packed indices only of blocks whose table could not hold ``min(2**bits, voxels)``
    entries, as if a block's largest index were bounded by its voxel count; the decoder then read the
    lookup table 400 KB past an 889-word chunk (a segmentation fault in some heap layouts).
    """
    import compressed_segmentation

    from napari_shardscope.core.errors import ChunkDecodeError
    from napari_shardscope.core.formats.precomputed.chunk_encoding import check_compressed_segmentation

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, size=(16, 16, 16), dtype=np.uint64) * np.uint64(2**40)
    good = bytearray(compressed_segmentation.compress(labels, block_size=(4, 4, 4), order="F"))
    check_compressed_segmentation(bytes(good), (16, 16, 16), 1, (4, 4, 4), 8, key="k")
    words = np.frombuffer(bytes(good), "<u4")
    start = int(words[0])
    header = int(words[start])
    assert header >> 24 == 2  # four labels: two bits
    good[4 * start + 3] = 16  # block 0 now claims 16-bit indices: its values run into the next blocks' words
    with pytest.raises(ChunkDecodeError, match=r"block 0 of channel 0: lookup table at word \d+ is shorter"):
        check_compressed_segmentation(bytes(good), (16, 16, 16), 1, (4, 4, 4), 8, key="k")


def _cseg_reads_in_bounds(data: bytes, extent: tuple[int, int, int], block: tuple[int, int, int],
                          itemsize: int) -> bool:
    """Whether every word the format has a decoder read (headers, packed values, table entries) is inside the chunk."""
    words = np.frombuffer(data, "<u4")
    n, start = len(words), int(words[0])
    grid = [-(-e // b) for e, b in zip(extent, block, strict=True)]
    nblocks, voxels = int(np.prod(grid)), int(np.prod(block))
    if start + 2 * nblocks > n:
        return False
    entry = 2 if itemsize == 8 else 1
    for i in range(nblocks):
        head, vals = int(words[start + 2 * i]), int(words[start + 2 * i + 1]) + start
        bits, table = head >> 24, (head & 0xFFFFFF) + start
        if bits not in (0, 1, 2, 4, 8, 16, 32):
            return False
        if bits == 0:
            if table + entry > n:
                return False
            continue
        pos = np.arange(voxels, dtype=np.int64) * bits
        if vals + (voxels * bits + 31) // 32 > n:
            return False
        idx = (words[vals + pos // 32].astype(np.uint64) >> (pos % 32).astype(np.uint64)) & np.uint64((1 << bits) - 1)
        if table + entry * (int(idx.max()) + 1) > n:
            return False
    return True


def test_a_compressed_segmentation_chunk_the_check_passes_is_read_in_bounds_whatever_its_lies() -> None:
    """An oracle independent of the heap: every chunk the check lets through is one a decoder reads inside.

    The decoder-header fuzz judges by whether the C decoder crashes, which an over-read does only when it
    leaves mapped memory; a bound the check missed (indices wider than a block's voxel count) hid for weeks.
    """
    import compressed_segmentation

    from napari_shardscope.core.errors import ChunkDecodeError
    from napari_shardscope.core.formats.precomputed.chunk_encoding import check_compressed_segmentation

    rng = np.random.default_rng(27)
    passed = refused = 0
    for case in range(300):
        dtype = (np.uint32, np.uint64)[case % 2]
        labels = rng.integers(0, int(rng.choice([1, 2, 3, 5, 17, 300])), size=(8, 8, 8)).astype(dtype)
        good = bytearray(compressed_segmentation.compress(labels, block_size=(4, 4, 4), order="F"))
        words = len(good) // 4
        for _ in range(int(rng.integers(1, 4))):  # lie in a header word or anywhere
            at = int(rng.integers(1, min(words, 17))) if rng.random() < 0.7 else int(rng.integers(0, words))
            byte = int(rng.integers(0, 4))
            good[4 * at + byte] = int(rng.choice([0, 1, 2, 4, 8, 16, 32, 255, int(rng.integers(0, 256))]))
        data = bytes(good)
        try:
            check_compressed_segmentation(data, (8, 8, 8), 1, (4, 4, 4), np.dtype(dtype).itemsize, key="k")
        except ChunkDecodeError:
            refused += 1
            continue
        passed += 1
        assert _cseg_reads_in_bounds(data, (8, 8, 8), (4, 4, 4), np.dtype(dtype).itemsize), (case, data.hex())
    assert passed > 30 and refused > 30, (passed, refused)  # both sides of the check were exercised


def test_a_huge_compressed_segmentation_block_size_is_a_metadata_error() -> None:
    """Fuzz seed 6005996: a 2**40-voxel block overflowed the offset checks (OverflowError) in validate."""
    from napari_shardscope.core.errors import MetadataError
    from napari_shardscope.core.formats.precomputed.info import parse_info

    info = {"type": "segmentation", "data_type": "uint32", "num_channels": 1, "scales": [{
        "key": "s0", "size": [16, 16, 16], "voxel_offset": [0, 0, 0], "resolution": [1, 1, 1],
        "chunk_sizes": [[8, 8, 8]], "encoding": "compressed_segmentation",
        "compressed_segmentation_block_size": [1 << 40, 1 << 40, 1 << 40]}]}
    with pytest.raises(MetadataError, match="compressed_segmentation_block_size"):
        parse_info(info, key="info")
    info["scales"][0]["compressed_segmentation_block_size"] = [8, 8, 8]
    assert parse_info(info, key="info").scales[0].compressed_segmentation_block_size == (8, 8, 8)


@pytest.mark.parametrize("configuration", ["µm\u202e", ["ab"], 7])
def test_an_inner_codec_configuration_that_is_not_an_object_is_a_typed_error(tmp_path: Path,
                                                                              configuration: Any) -> None:
    """Seeds 104409 and 109578 (long run, after merging the zarr v3 fast path): an inner codec's
    ``configuration`` replaced by a string made the fast-path check raise ``ValueError``
    (``dict("µm")``) from ``open_dataset`` and ``open_volume``."""
    path = write_zarr3_array(tmp_path).path
    doc = json.loads((path / "zarr.json").read_text())
    doc["codecs"][0]["configuration"]["codecs"][0]["configuration"] = configuration
    (path / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(ShardscopeError):  # refused by the codec parser or TensorStore, typed
        open_volume(path).levels[0].array.read()
