"""N5 ``gzip`` blocks (gzip members and ``useZlib`` zlib streams) through libdeflate, checked against zlib,
numcodecs (zarr-python's N5 codecs) and TensorStore's ``n5`` driver both ways, real N5 data included.

What must hold after the move off CPython's zlib: every reader decodes what we write at every level,
we decode what every writer wrote (concatenated members too), damage is a typed error naming the
block and the damaged member's byte offset, and a bomb (or a header promising gigabytes) costs no
more than the block's size.
"""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats.n5.attributes import parse_dataset_attributes
from napari_shardscope.core.formats.n5.block import decode_block, encode_block, write_block
from napari_shardscope.core.formats.n5.compression import (
    DEFAULT_DEFLATE_LEVEL,
    JAVA_GZIP_HEADER,
    decode_payload,
    deflate_level,
    encode_java_gzip,
    encode_payload,
    make_compression,
)
from tests.n5_data import make_attributes, random_array, ts_create, ts_read, write_dataset
from tests.realdata import realdata_path

#: The gzip datasets of ../shared/realdata, each written by another N5 implementation.
REAL_GZIP = {
    "n5-java": "n5java_zi/n5-java.n5/gzip",
    "zarr-python N5Store": "zarrpy_n5_zi/zarr.n5/gzip",
    "z5py": "z5py_n5_zi/z5py.n5/gzip",
    "TensorStore testdata (zarr-python)": "ts_n5_testdata/gzip",
    "webKnossos": "wk_simple_n5/color/1",
}

payloads = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda n, v: bytes([v]) * n, st.integers(0, 100_000), st.integers(0, 255)),
    st.builds(lambda seed, n: np.random.default_rng(seed).integers(0, 6, n, dtype=np.uint8).tobytes(),
              st.integers(0, 100), st.integers(0, 40_000)),
)
levels = st.integers(-1, 9)


# -- round trips against the other codecs ------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(payloads, levels, st.booleans())
def test_our_blocks_decode_with_zlib_and_numcodecs(data: bytes, level: int, use_zlib: bool) -> None:
    from numcodecs import GZip, Zlib

    comp = make_compression("gzip", level=level, useZlib=use_zlib)
    stored = encode_payload(data, comp)
    if use_zlib:
        assert zlib.decompress(stored) == data
        assert bytes(Zlib(level=max(level, 0)).decode(stored)) == data
    else:
        assert stored[:10] == JAVA_GZIP_HEADER  # Java's framing, whatever the DEFLATE inside
        assert gzip.decompress(stored) == data
        assert bytes(GZip(level=max(level, 0)).decode(stored)) == data  # zarr-python 2's N5Store codec
    assert decode_payload(stored, comp, len(data)) == data
    theirs = (Zlib if use_zlib else GZip)(level=max(level, 0)).encode(data)  # and the other way
    assert decode_payload(bytes(theirs), comp, len(data), key="k", offset=16) == data


@settings(max_examples=120, deadline=None)
@given(payloads, levels, st.booleans(), st.integers(1, 4))
def test_zlib_written_blocks_decode_here(data: bytes, level: int, use_zlib: bool, members: int) -> None:
    comp = make_compression("gzip", level=level, useZlib=use_zlib)
    if use_zlib:  # Java N5 with useZlib: DeflaterOutputStream, one zlib stream
        stored = zlib.compress(data, level)
    else:  # Java's GZIPOutputStream per member; readers (commons-compress, gzip) take concatenated members
        cuts = sorted({0, len(data), *(len(data) * i // members for i in range(1, members))})
        stored = b"".join(_java_gzip_by_zlib(data[a:b], level) for a, b in itertools.pairwise(cuts))
        stored = stored or _java_gzip_by_zlib(b"", level)
        assert gzip.decompress(stored) == data
    assert decode_payload(stored, comp, len(data), key="k", offset=12) == data


def _java_gzip_by_zlib(data: bytes, level: int) -> bytes:
    """A member as Java's GZIPOutputStream writes it (zlib's DEFLATE): the bytes N5 files held before."""
    packer = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = packer.compress(data) + packer.flush()
    return JAVA_GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data), len(data))


def test_level_is_the_attributes_and_defaults_to_the_peers() -> None:
    """-1 (Java N5's and TensorStore's default) is zlib's level 6; each level is honoured, 0 stores."""
    assert deflate_level(-1) == DEFAULT_DEFLATE_LEVEL == 6 and deflate_level(3) == 3
    assert make_compression("gzip").level == -1  # what attributes.json says stays what the peers write
    data = np.random.default_rng(1).integers(0, 12, 1 << 17, dtype=np.uint8).tobytes()
    sizes = {lvl: len(encode_java_gzip(data, lvl)) for lvl in (-1, 0, 1, 9)}
    assert sizes[0] > len(data) > sizes[1] > sizes[9]
    assert encode_java_gzip(data, -1) == encode_java_gzip(data, 6)


# -- TensorStore's n5 driver, both ways ------------------------------------------------------------------


@pytest.mark.parametrize("data_type", ["uint8", "uint64"])
@pytest.mark.parametrize("compression", [{"type": "gzip"}, {"type": "gzip", "level": 1},
                                         {"type": "gzip", "level": 9, "useZlib": True},
                                         {"type": "gzip", "level": 0, "useZlib": False}],
                         ids=lambda c: "-".join(map(str, c.values())))
def test_tensorstore_reads_ours_and_we_read_tensorstores(tmp_path: Path, compression: dict[str, Any],
                                                         data_type: str) -> None:
    array = random_array((37, 20, 9), data_type, seed=3)
    array[:20] = 7  # a compressible half
    write_dataset(tmp_path / "ours", array, (16, 16, 8), compression)
    np.testing.assert_array_equal(ts_read(tmp_path / "ours"), array)
    ts_create(tmp_path / "ts", array, (16, 16, 8), compression)
    store = LocalByteStore(tmp_path / "ts")
    attrs = parse_dataset_attributes(json.loads((tmp_path / "ts" / "attributes.json").read_text()))
    for path in sorted(p for p in (tmp_path / "ts").rglob("*") if p.is_file() and p.name.isdigit()):
        key = path.relative_to(tmp_path / "ts").as_posix()
        block = decode_block(store.read(key), attrs, key=key)
        origin = [int(p) * b for p, b in zip(key.split("/"), attrs.block_size, strict=True)]
        inside = [min(b, s - o) for b, s, o in zip(attrs.block_size, attrs.dimensions, origin, strict=True)]
        want = array[tuple(slice(o, o + n) for o, n in zip(origin, inside, strict=True))]
        np.testing.assert_array_equal(block.data.T[tuple(slice(0, n) for n in inside)], want)


@pytest.mark.realdata
@pytest.mark.parametrize("writer", sorted(REAL_GZIP))
def test_real_gzip_datasets_read_and_rewrite(tmp_path: Path, writer: str) -> None:
    """Blocks other N5 writers wrote decode here as TensorStore decodes them; re-encoded, TensorStore reads them."""
    source = realdata_path(REAL_GZIP[writer])
    reference = ts_read(source)
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    doc = json.loads((copy / "attributes.json").read_text())
    attrs = parse_dataset_attributes(doc)
    store = LocalByteStore(copy)
    blocks = [p for p in copy.rglob("*") if p.is_file() and p.name.isdigit()]
    assert blocks
    for path in blocks:
        key = path.relative_to(copy).as_posix()
        decoded = decode_block(store.read(key), attrs, key=key)
        origin = [int(p) * b for p, b in zip(key.split("/"), attrs.block_size, strict=True)]
        region = tuple(slice(o, o + s) for o, s in zip(origin, decoded.header.shape, strict=True))
        inside = reference[region]
        np.testing.assert_array_equal(decoded.data.T[tuple(slice(0, n) for n in inside.shape)], inside)
        write_block(store, attrs, [int(p) for p in key.split("/")], decoded.data)  # ours, same level
        assert store.read(key)[decoded.header.nbytes:][:10] == JAVA_GZIP_HEADER
    np.testing.assert_array_equal(ts_read(copy), reference)


# -- damage, bombs, lies -----------------------------------------------------------------------------


def _block(compression: dict[str, Any], members: int = 1) -> tuple[bytes, Any, np.ndarray]:
    attrs = make_attributes([32, 16], [32, 16], "uint16", compression)
    values = random_array((16, 32), "uint16", seed=5)
    stored = encode_block(values, attrs)
    if members > 1:  # the same block as several Java members
        raw = values.astype(">u2").tobytes()
        step = -(-len(raw) // members)
        stored = stored[:12] + b"".join(encode_java_gzip(raw[i:i + step]) for i in range(0, len(raw), step))
    return stored, attrs, values


def test_concatenated_members_decode() -> None:
    stored, attrs, values = _block({"type": "gzip"}, members=3)
    np.testing.assert_array_equal(decode_block(stored, attrs, key="m").data, values)


def test_damage_in_a_later_member_names_that_member() -> None:
    stored, attrs, values = _block({"type": "gzip"}, members=3)
    raw = values.astype(">u2").tobytes()
    first = len(encode_java_gzip(raw[: -(-len(raw) // 3)]))
    damaged = bytearray(stored)
    damaged[12 + first + 3] = 0xE0  # the second member's FLG: reserved bits
    with pytest.raises(ChunkDecodeError, match="bad gzip data") as info:
        decode_block(bytes(damaged), attrs, key="0/0")
    assert (info.value.key, info.value.offset) == ("0/0", 12 + first)


@pytest.mark.parametrize("compression", [{"type": "gzip"}, {"type": "gzip", "useZlib": True}],
                         ids=["gzip", "zlib"])
def test_every_truncation_and_bit_flip_is_a_typed_error(compression: dict[str, Any]) -> None:
    stored, attrs, values = _block(compression)
    label = "zlib" if compression.get("useZlib") else "gzip"
    for cut in range(12, len(stored)):
        with pytest.raises(ChunkDecodeError, match=label) as info:
            decode_block(stored[:cut], attrs, key="t")
        assert info.value.key == "t" and info.value.offset is not None and info.value.offset >= 12
    rng = np.random.default_rng(0)
    for pos in rng.integers(12, len(stored), 200):
        flipped = bytearray(stored)
        flipped[pos] ^= 1 << int(rng.integers(0, 8))
        try:
            got = decode_block(bytes(flipped), attrs, key="t").data
        except ChunkDecodeError as exc:
            assert exc.key == "t" and exc.offset is not None and exc.offset >= 12
        else:  # a flip the format cannot see (gzip's header OS byte, say) must still decode right
            np.testing.assert_array_equal(got, values)


def test_trailing_bytes_after_a_zlib_stream_are_named_where_they_start() -> None:
    stored, attrs, _ = _block({"type": "gzip", "useZlib": True})
    with pytest.raises(ChunkDecodeError, match="4 bytes after the end of the zlib stream") as info:
        decode_block(stored + b"junk", attrs, key="z")
    assert info.value.offset == len(stored)


@pytest.mark.parametrize("use_zlib", [False, True])
def test_a_bomb_costs_no_more_than_the_block(use_zlib: bool) -> None:
    """64 MiB of zeros in a 2 KiB block: refused having produced about a block's bytes, not 64 MiB."""
    comp = make_compression("gzip", useZlib=use_zlib)
    bomb = encode_payload(bytes(64 << 20), comp)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match="decodes to more than 2048 bytes") as info:
            decode_payload(bomb, comp, 2048, key="b", offset=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.offset == 16
    assert peak < (1 << 20)


def test_a_header_promising_gigabytes_allocates_nothing_of_the_sort() -> None:
    comp = make_compression("gzip")
    small = encode_payload(bytes(1000), comp)
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match="decodes to 1000 bytes, expected 4000000000"):
            decode_payload(small, comp, 4_000_000_000, key="h", offset=16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20)
