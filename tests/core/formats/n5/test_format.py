"""N5 format details, exact to the spec text: the worked example, headers, paths, attributes, multiscale."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import (
    ArgumentError,
    ChunkDecodeError,
    MetadataError,
    NotADatasetError,
    UnsupportedFeatureError,
)
from napari_shardscope.core.formats.n5.attributes import (
    decode_attributes_json,
    list_scales,
    parse_dataset_attributes,
    write_attributes,
)
from napari_shardscope.core.formats.n5.block import (
    MODE_VARLENGTH,
    BlockHeader,
    decode_block,
    decode_block_header,
    encode_block,
    encode_block_header,
    encode_varlength_block,
    format_block_path,
    parse_block_path,
)
from napari_shardscope.core.formats.n5.compression import Compression, make_compression, parse_compression
from napari_shardscope.core.formats.n5.lz4_stream import compute_xxh32, decode_lz4_stream, encode_lz4_stream
from tests.n5_data import make_attributes

# The spec's worked example: a 1×2×3 uint16 block holding 1..6.
SPEC_HEADER = bytes.fromhex("0000" "0003" "00000001" "00000002" "00000003")
SPEC_PAYLOADS = {
    "raw": "000100020003000400050006",
    "bzip2": "425a683931415926535902 3e0dd20000004000 7f002000310c010d31a87394337c5dc914e1424008f83748",
    "gzip": "1f8b0800000000000000 63606460626066606160656003 00aaea6dbf0c000000",
    "xz": "fd377a585a000004e6d6b446020021011600000074 2fe5a301000b00010002000300040005000600"
          "0d0309ca34ec15a70001240ca618d8d81fb6f37d010000000004595a",
}


def spec_attributes(kind: str) -> Any:
    return make_attributes([1, 2, 3], [1, 2, 3], "uint16", {"type": kind})


@pytest.mark.parametrize("kind", sorted(SPEC_PAYLOADS))
def test_spec_example_decodes(kind: str) -> None:
    data = SPEC_HEADER + bytes.fromhex(SPEC_PAYLOADS[kind].replace(" ", ""))
    block = decode_block(data, spec_attributes(kind), key="0/0/0")
    assert block.header == BlockHeader(mode=0, shape=(1, 2, 3), num_elements=6)
    assert block.header.nbytes == 16
    # x fastest: numpy sees (z, y, x) = (3, 2, 1), the values in storage order.
    assert block.data.shape == (3, 2, 1)
    assert block.data.dtype == np.dtype(">u2")
    assert block.data.ravel().tolist() == [1, 2, 3, 4, 5, 6]
    xyz = block.data.T
    assert xyz[0, 1, 0] == 2 and xyz[0, 0, 1] == 3 and xyz[0, 1, 2] == 6


def test_spec_example_gzip_keeps_javas_framing() -> None:
    # The DEFLATE stream is libdeflate's (zlib's choices differ: here it stores 12 bytes where zlib
    # codes them), framed as Java frames it: the spec's 10-byte header, CRC32 and size trailer.
    values = np.arange(1, 7, dtype=np.uint16).reshape(3, 2, 1)
    spec = bytes.fromhex(SPEC_PAYLOADS["gzip"].replace(" ", ""))
    encoded = encode_block(values, spec_attributes("gzip"))
    assert encoded[:16] == SPEC_HEADER and encoded[16:26] == spec[:10] and encoded[-8:] == spec[-8:]
    assert decode_block(encoded, spec_attributes("gzip")).data.tolist() == values.tolist()
    assert zlib.decompress(encoded[26:-8], -15) == zlib.decompress(spec[10:-8], -15)


@pytest.mark.parametrize("kind", ["raw", "xz"])
def test_spec_example_encodes_byte_identically(kind: str) -> None:
    # xz is liblzma at preset 6 with a CRC64 check: it reproduces the spec's (Java-written) bytes exactly.
    values = np.arange(1, 7, dtype=np.uint16).reshape(3, 2, 1)
    expected = SPEC_HEADER + bytes.fromhex(SPEC_PAYLOADS[kind].replace(" ", ""))
    assert encode_block(values, spec_attributes(kind)) == expected


def test_spec_example_bzip2_round_trips() -> None:
    # libbz2 and commons-compress choose different Huffman tables, so bytes differ; both decode.
    attrs = spec_attributes("bzip2")
    values = np.arange(1, 7, dtype=np.uint16).reshape(3, 2, 1)
    encoded = encode_block(values, attrs)
    assert encoded[:16] == SPEC_HEADER and encoded[16:20] == b"BZh9"
    assert decode_block(encoded, attrs).data.tolist() == values.tolist()


def test_header_fields_are_big_endian() -> None:
    header = decode_block_header(SPEC_HEADER)
    assert (header.mode, header.shape, header.num_elements, header.varlength) == (0, (1, 2, 3), 6, False)
    assert encode_block_header(header) == SPEC_HEADER


def test_varlength_header_and_block() -> None:
    attrs = make_attributes([4, 4], [2, 2], "uint16", {"type": "raw"})
    values = np.array([7, 8, 9, 10, 11], dtype=np.uint16)
    data = encode_varlength_block(values, (2, 2), attrs)
    assert data[:16] == bytes.fromhex("0001" "0002" "00000002" "00000002" "00000005")
    assert data[16:] == bytes.fromhex("0007" "0008" "0009" "000a" "000b")
    block = decode_block(data, attrs)
    assert block.header == BlockHeader(mode=MODE_VARLENGTH, shape=(2, 2), num_elements=5)
    assert block.header.nbytes == 16
    assert block.data.tolist() == [7, 8, 9, 10, 11]  # varlength data stays 1-D


def test_header_encoder_rejects_bad_values() -> None:
    with pytest.raises(ArgumentError, match="mode"):
        encode_block_header(BlockHeader(mode=2, shape=(1,), num_elements=1))
    with pytest.raises(ArgumentError, match="uint32"):
        encode_block_header(BlockHeader(mode=0, shape=(1 << 32,), num_elements=1))


def test_block_paths() -> None:
    assert format_block_path((0, 4, 1, 7)) == "0/4/1/7"
    assert parse_block_path("0/4/1/7") == (0, 4, 1, 7)
    assert parse_block_path("0/4/1/7", 3) is None
    assert parse_block_path("10/0", 2) == (10, 0)
    for bad in ("07/1", "a/1", "-1/2", "1//2", "", "1/2/attributes.json", "١/2"):
        assert parse_block_path(bad) is None, bad
    with pytest.raises(ArgumentError):
        format_block_path((1, -2))


def test_encode_block_casts_and_checks() -> None:
    attrs = make_attributes([4, 4], [2, 2], "int16", {"type": "raw"})
    assert encode_block([[1, -2], [3, 4]], attrs)[12:] == bytes.fromhex("0001fffe00030004")
    with pytest.raises(ArgumentError, match="float64"):
        encode_block(np.ones((2, 2)), attrs)
    with pytest.raises(ArgumentError, match="dimensions"):
        encode_block(np.ones(4, dtype=np.int16), attrs)


# -- attributes --------------------------------------------------------------------------------


def test_dataset_attributes_geometry() -> None:
    attrs = make_attributes([100, 200, 30], [64, 64, 64], "float32", {"type": "gzip", "level": 4})
    assert attrs.ndim == 3 and attrs.dtype == np.dtype(">f4")
    assert attrs.grid_shape == (2, 4, 1) and attrs.num_blocks == 8
    assert attrs.grid_position([99, 0, 29]) == (1, 0, 0)
    assert attrs.block_shape((1, 3, 0)) == (36, 8, 30)
    assert attrs.block_origin((1, 3, 0)) == (64, 192, 0)
    assert attrs.compression == Compression("gzip", level=4)
    with pytest.raises(ArgumentError, match="outside"):
        attrs.grid_position([100, 0, 0])
    with pytest.raises(ArgumentError, match="3 coordinates"):
        attrs.grid_position([1, 2])
    with pytest.raises(ArgumentError, match="outside the block grid"):
        attrs.block_shape((2, 0, 0))


def test_attributes_as_tensorstore_and_java_write_them() -> None:
    doc = {"dimensions": [5, 7, 3], "blockSize": [2, 3, 2], "dataType": "uint16",
           "compression": {"type": "blosc", "blocksize": 0, "clevel": 5, "cname": "lz4", "shuffle": 1},
           "pixelResolution": {"unit": "nm", "dimensions": [4, 4, 40]}}
    attrs = parse_dataset_attributes(doc, path="raw")
    assert attrs.path == "raw" and attrs.extra["pixelResolution"]["unit"] == "nm"
    assert attrs.to_json()["compression"] == doc["compression"]
    assert parse_dataset_attributes(attrs.to_json()) == parse_dataset_attributes(doc)


@pytest.mark.parametrize(("legacy", "expected"), [
    ("gzip", Compression("gzip", level=-1)),
    ("bzip2", Compression("bzip2", block_size=9)),
    ("lz4", Compression("lz4", block_size=65536)),
    ("xz", Compression("xz", preset=6)),
    ("raw", Compression("raw")),
])
def test_legacy_compression_type(legacy: str, expected: Compression) -> None:
    doc = {"dimensions": [10], "blockSize": [5], "dataType": "UINT8", "compressionType": legacy}
    attrs = parse_dataset_attributes(doc)
    assert attrs.compression == expected and attrs.data_type == "uint8"


def test_missing_block_size_means_one_block() -> None:
    attrs = parse_dataset_attributes({"dimensions": [10, 3], "dataType": "int8", "compression": {"type": "raw"}})
    assert attrs.block_size == (10, 3) and attrs.grid_shape == (1, 1)


@pytest.mark.parametrize(("doc", "field", "value"), [
    ({"dataType": "uint7"}, "dataType", "uint7"),
    ({"dimensions": "abc"}, "dimensions", "abc"),
    ({"dimensions": [10, -1]}, "dimensions", "-1"),
    ({"dimensions": [10, True]}, "dimensions", "True"),
    ({"dimensions": []}, "dimensions", "[]"),
    ({"blockSize": [5]}, "blockSize", "[5]"),
    ({"blockSize": [5, 0]}, "blockSize", "0"),
    ({"compression": "gzip"}, "compression", "gzip"),
    ({"compression": {"type": "gzip", "level": 12}}, "compression.level", "12"),
    ({"compression": {"type": "gzip", "useZlib": "yes"}}, "compression.useZlib", "yes"),
    ({"compression": {"type": "bzip2", "blockSize": 0}}, "compression.blockSize", "0"),
    ({"compression": {"type": "xz", "preset": 10}}, "compression.preset", "10"),
    ({"compression": {"type": "lz4", "blockSize": 10}}, "compression.blockSize", "10"),
    ({"compression": {"type": "blosc", "cname": "brotli"}}, "compression.cname", "brotli"),
    ({"compression": {"type": "blosc", "shuffle": 3}}, "compression.shuffle", "3"),
    ({"compression": None, "compressionType": None}, "compression", "None"),
])
def test_metadata_errors_name_field_and_value(doc: dict[str, Any], field: str, value: str) -> None:
    base: dict[str, Any] = {"dimensions": [10, 10], "blockSize": [5, 5], "dataType": "uint8",
                            "compression": {"type": "raw"}}
    with pytest.raises(MetadataError) as info:
        parse_dataset_attributes({**base, **doc}, path="em")
    assert field in info.value.message and value in info.value.message
    assert info.value.key == "em/attributes.json"


def test_unknown_compression_is_an_unsupported_feature() -> None:
    # N5 compressions are open-ended (libraries register their own): valid metadata we cannot read,
    # not a broken file. The error names the feature and the file.
    base = {"dimensions": [1], "dataType": "uint8"}
    with pytest.raises(UnsupportedFeatureError, match=r"em/attributes.json: N5 compression 'snappy'") as info:
        parse_dataset_attributes({**base, "compression": {"type": "snappy"}}, path="em")
    assert info.value.key == "em/attributes.json" and info.value.feature.startswith("N5 compression 'snappy'")
    with pytest.raises(UnsupportedFeatureError, match=r"'compressionType\.type'"):
        parse_dataset_attributes({**base, "compressionType": "snappy"})
    with pytest.raises(MetadataError, match=r"'compression\.type' must be a compression name"):
        parse_dataset_attributes({**base, "compression": {"type": 3}})


def test_legacy_compression_type_errors() -> None:
    with pytest.raises(MetadataError, match="'compression' is missing"):
        parse_dataset_attributes({"dimensions": [1], "dataType": "uint8"})


def test_attributes_json_errors_carry_byte_offsets() -> None:
    with pytest.raises(MetadataError) as info:
        decode_attributes_json(b'{"dimensions": [1, 2,, 3]}', key="a/attributes.json")
    assert info.value.key == "a/attributes.json" and info.value.offset == 21
    assert "at byte 21" in str(info.value)
    with pytest.raises(MetadataError, match="JSON object"):
        decode_attributes_json(b"[1, 2]")
    with pytest.raises(MetadataError, match="UTF-8") as info:
        decode_attributes_json(b'{"a": "\xff"}')
    assert info.value.offset == 7


def test_compression_json_round_trip() -> None:
    for kind in ("raw", "gzip", "bzip2", "xz", "lz4", "blosc", "zstd"):
        comp = make_compression(kind)
        assert parse_compression(comp.to_json()) == comp
    assert make_compression("gzip", useZlib=True).to_json() == {"type": "gzip", "level": -1, "useZlib": True}


# -- multiscale groups -------------------------------------------------------------------------


def write_group(root: Path, group: dict[str, Any] | None, levels: list[dict[str, Any]],
                path: str = "") -> LocalByteStore:
    store = LocalByteStore(root)
    if group is not None:
        write_attributes(store, group, path)
    dims = [64, 48, 20]
    for i, extra in enumerate(levels):
        level_dims = extra.pop("dims", [max(1, d >> i) for d in dims])
        doc = {"dimensions": level_dims, "blockSize": [16, 16, 8], "dataType": "uint16",
               "compression": {"type": "gzip"}, **extra}
        write_attributes(store, doc, f"{path}/s{i}" if path else f"s{i}")
    return store


def test_bigdataviewer_group(tmp_path: Path) -> None:
    # BigDataViewer: factors on the setup group and on every sN dataset.
    store = write_group(tmp_path, {"downsamplingFactors": [[1, 1, 1], [2, 2, 1], [4, 4, 2]], "dataType": "uint16"},
                        [{"downsamplingFactors": [1, 1, 1]}, {"downsamplingFactors": [2, 2, 1], "dims": [32, 24, 20]},
                         {"downsamplingFactors": [4, 4, 2], "dims": [16, 12, 10]}], path="setup0/timepoint0")
    scales = list_scales(store, "setup0/timepoint0")
    assert [s.key for s in scales] == ["s0", "s1", "s2"]
    assert [s.downsampling_factors for s in scales] == [(1, 1, 1), (2, 2, 1), (4, 4, 2)]
    assert scales[2].attributes.path == "setup0/timepoint0/s2"
    assert scales[1].attributes.dimensions == (32, 24, 20)
    assert all(s.resolution is None for s in scales)


def test_group_factor_table_only(tmp_path: Path) -> None:
    store = write_group(tmp_path, {"downsamplingFactors": [[1, 1, 1], [2, 2, 2]]}, [{}, {}])
    assert [s.downsampling_factors for s in list_scales(store)] == [(1, 1, 1), (2, 2, 2)]


def test_n5_viewer_group(tmp_path: Path) -> None:
    store = write_group(tmp_path, {"pixelResolution": {"dimensions": [4.0, 4.0, 40.0], "unit": "nm"},
                                   "scales": [[1, 1, 1], [2, 2, 1]]}, [{}, {}])
    s0, s1 = list_scales(store)
    assert s1.downsampling_factors == (2, 2, 1)
    assert s0.resolution == (4.0, 4.0, 40.0) and s1.resolution == (8.0, 8.0, 40.0)
    assert s1.unit == "nm"
    assert s1.to_json()["downsamplingFactors"] == [2, 2, 1]


def test_paintera_group_resolution_and_dataset_factors(tmp_path: Path) -> None:
    store = write_group(tmp_path, {"multiScale": True, "resolution": [8, 8, 30]},
                        [{}, {"downsamplingFactors": [2, 2, 1]}, {"downsamplingFactors": [4.0, 4.0, 2.0]}])
    scales = list_scales(store)
    assert [s.resolution for s in scales] == [(8, 8, 30), (16, 16, 30), (32.0, 32.0, 60.0)]
    assert scales[0].unit is None


def test_dataset_level_resolution_wins(tmp_path: Path) -> None:
    store = write_group(tmp_path, {"resolution": [1, 1, 1]},
                        [{"pixelResolution": [2, 2, 2]},
                         {"pixelResolution": [2, 2, 2], "downsamplingFactors": [2, 2, 2]}])
    assert [s.resolution for s in list_scales(store)] == [(2, 2, 2), (4, 4, 4)]


def test_factors_inferred_when_absent(tmp_path: Path) -> None:
    store = write_group(tmp_path, None, [{}, {"dims": [32, 24, 20]}, {"dims": [16, 12, 10]}])
    assert [s.downsampling_factors for s in list_scales(store)] == [(1, 1, 1), (2, 2, 1), (4, 4, 2)]


def test_single_dataset_is_one_scale(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    write_attributes(store, {"dimensions": [3, 4], "blockSize": [2, 2], "dataType": "int64",
                             "compression": {"type": "raw"}, "pixelResolution": {"dimensions": [5, 6], "unit": "um"}})
    (scale,) = list_scales(store)
    assert scale.key == "" and scale.downsampling_factors == (1, 1)
    assert scale.resolution == (5, 6) and scale.unit == "um"


@pytest.mark.parametrize(("group", "levels", "match"), [
    ({"scales": [[1, 1, 1], [2, 2]]}, [{}, {}], r"'scales\[1\]' must list 3 positive numbers"),
    ({"downsamplingFactors": [1, 2]}, [{}], "'downsamplingFactors' must be a list of per-scale lists"),
    ({}, [{}, {"downsamplingFactors": [0, 1, 1]}], "'downsamplingFactors' must list 3"),
    ({"pixelResolution": {"dimensions": [1, 1]}}, [{}], r"'pixelResolution.dimensions' must list 3"),
    ({"pixelResolution": {"dimensions": [1, 1, 1], "unit": 5}}, [{}], "'pixelResolution.unit' must be a string"),
    ({}, [{}, {"dims": [4, 4], "blockSize": [2, 2]}], "s1 has 2 dimensions, s0 has 3"),
])
def test_multiscale_errors(tmp_path: Path, group: dict[str, Any], levels: list[dict[str, Any]], match: str) -> None:
    store = write_group(tmp_path, group, levels)
    with pytest.raises(MetadataError, match=match):
        list_scales(store)


def test_level_that_is_not_a_dataset(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    write_attributes(store, {"n5": "4.0.0"})
    write_attributes(store, {"note": "a group"}, "s0")
    with pytest.raises(MetadataError, match="s0 of a multiscale group is not a dataset") as info:
        list_scales(store)
    assert info.value.key == "s0/attributes.json"


def test_neither_dataset_nor_group(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    (tmp_path / "attributes.json").write_text(json.dumps({"n5": "4.0.0"}))
    with pytest.raises(NotADatasetError, match="not a multiscale group"):
        list_scales(store)


# -- lz4 (lz4-java's LZ4BlockOutputStream framing) ---------------------------------------------


def test_xxh32_reference_values() -> None:
    assert compute_xxh32(b"") == 0x02CC5D05
    assert compute_xxh32(b"abc") == 0x32D153FF


def test_lz4_java_fixtures() -> None:
    # Streams written by lz4-java itself, as published in two projects' test suites: a raw-method
    # block (block size 4096, token 0x12) and an LZ4-method block (64 KiB, token 0x26).
    abc = bytes.fromhex("4c5a34426c6f636b12030000000300000022b24c0d616263"
                        "4c5a34426c6f636b12000000000000000000000000")
    assert decode_lz4_stream(abc, 3) == b"abc"
    assert encode_lz4_stream(b"abc", 4096) == abc
    assert encode_lz4_stream(b"", 4096) == bytes.fromhex("4c5a34426c6f636b12000000000000000000000000")
    nbt = bytes.fromhex("4c5a34426c6f636b262100000026000000dfba8406c10a00000300047a506f7300000b0013780b00d0"
                        "08000570726f626500026f6b004c5a34426c6f636b16000000000000000000000000")
    out = decode_lz4_stream(nbt, 38)
    assert len(out) == 38 and b"probe" in out and out.endswith(b"ok\x00")


def test_lz4_multi_block_stream_and_block(tmp_path: Path) -> None:
    attrs = make_attributes([300, 7], [300, 7], "uint32", {"type": "lz4", "blockSize": 1024})
    values = (np.arange(2100, dtype=np.uint32) % 97).reshape(7, 300)
    data = encode_block(values, attrs)
    assert data[12:20] == b"LZ4Block" and data.count(b"LZ4Block") == 10  # 8400 bytes / 1024 + end marker
    assert np.array_equal(decode_block(data, attrs).data, values)


def test_lz4_truncated_stream_is_typed() -> None:
    data = encode_lz4_stream(bytes(range(200)) * 10, 1024)
    with pytest.raises(ChunkDecodeError, match="truncated") as info:
        decode_lz4_stream(data[:30], 2000, key="k", offset=16)
    assert info.value.key == "k" and info.value.offset == 16 + 21
