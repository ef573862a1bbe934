"""Corrupted N5 blocks and metadata: typed errors naming key and byte offset; validate reports them."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.cli import run
from napari_shardscope.core.errors import (
    ArgumentError,
    ChecksumError,
    ChunkDecodeError,
    MetadataError,
    UnsupportedFeatureError,
)
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.n5.attributes import DatasetAttributes
from napari_shardscope.core.formats.n5.block import decode_block, encode_block, encode_varlength_block
from napari_shardscope.core.formats.problem import Problem
from tests.n5_data import make_attributes, random_array, write_dataset

SHAPE = (10, 9, 4)
BLOCK = (4, 3, 4)  # grid (3, 3, 1); x end blocks hold 2 voxels


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, DatasetAttributes, np.ndarray]:
    array = random_array(SHAPE, "uint16", seed=11)
    attrs = write_dataset(tmp_path, array, BLOCK, {"type": "gzip"})
    return tmp_path, attrs, array


def problems_of(root: Path) -> list[Problem]:
    return list(open_dataset(root).inspector().validate())


def block_bytes(root: Path, key: str) -> bytes:
    return (root / key).read_bytes()


@pytest.mark.parametrize(("cut", "offset"), [(0, 0), (3, 3), (10, 10), (15, 15)])
def test_truncated_header(dataset: tuple[Path, DatasetAttributes, np.ndarray], cut: int, offset: int) -> None:
    root, attrs, _ = dataset
    (root / "1/1/0").write_bytes(block_bytes(root, "1/1/0")[:cut])
    with pytest.raises(ChunkDecodeError, match="header truncated") as info:
        decode_block(block_bytes(root, "1/1/0"), attrs, key="1/1/0")
    assert (info.value.key, info.value.offset) == ("1/1/0", offset)
    assert str(info.value).startswith("1/1/0: ") and str(info.value).endswith(f"at byte {offset}")
    (problem,) = problems_of(root)
    assert (problem.key, problem.offset) == ("1/1/0", offset) and "truncated" in problem.message


def test_unknown_mode(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, _, _ = dataset
    data = bytearray(block_bytes(root, "0/0/0"))
    data[1] = 7
    (root / "0/0/0").write_bytes(bytes(data))
    (problem,) = problems_of(root)
    assert problem == Problem("0/0/0", "unknown block mode 7 (0 = default, 1 = varlength)", 0)


def test_wrong_dimension_count(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, attrs, _ = dataset
    flat = make_attributes([12, 12], [4, 3], "uint16", {"type": "gzip"})
    (root / "0/1/0").write_bytes(encode_block(np.ones((3, 4), dtype=np.uint16), flat))
    with pytest.raises(ChunkDecodeError, match="block has 2 dimensions, the dataset has 3") as info:
        decode_block(block_bytes(root, "0/1/0"), attrs, key="0/1/0")
    assert info.value.offset == 2
    (problem,) = problems_of(root)
    assert (problem.key, problem.offset) == ("0/1/0", 2)


def test_interior_block_too_small(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, attrs, _ = dataset
    (root / "1/1/0").write_bytes(encode_block(np.ones((4, 3, 2), dtype=np.uint16), attrs))
    (problem,) = problems_of(root)
    assert problem.key == "1/1/0" and problem.offset == 4
    assert problem.message == ("header dimensions (2, 3, 4) do not fit grid position (1, 1, 0): "
                               "expected (4, 3, 4)")


def test_end_block_sizes(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, attrs, _ = dataset
    # x end block: 2 voxels inside; 2 (Java), 3 or 4 (TensorStore) are fine, 1 misses data, 5 is too big.
    for x, ok in ((2, True), (3, True), (4, True), (1, False), (5, False)):
        (root / "2/0/0").write_bytes(encode_block(np.ones((4, 3, x), dtype=np.uint16), attrs))
        problems = problems_of(root)
        assert (problems == []) == ok, (x, problems)
        if not ok:
            assert problems[0].message.endswith("expected (2, 3, 4) (or up to (4, 3, 4))")


def test_varlength_block_validates(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, attrs, _ = dataset
    (root / "0/2/0").write_bytes(encode_varlength_block(np.arange(5, dtype=np.uint16), (4, 3, 4), attrs))
    assert problems_of(root) == []
    (root / "0/2/0").write_bytes(encode_varlength_block(np.arange(5, dtype=np.uint16), (4, 3, 3), attrs))
    (problem,) = problems_of(root)
    assert problem.offset == 4


def test_bad_gzip(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, attrs, _ = dataset
    data = bytearray(block_bytes(root, "1/0/0"))
    data[16 + 3] ^= 0xFF  # the gzip flags byte: reserved bits set
    (root / "1/0/0").write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError, match="bad gzip data") as info:
        decode_block(bytes(data), attrs, key="1/0/0")
    assert info.value.offset == 16  # where the compressed data starts
    (problem,) = problems_of(root)
    assert (problem.key, problem.offset) == ("1/0/0", 16) and "gzip" in problem.message


def test_truncated_gzip_and_trailing_garbage(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, attrs, _ = dataset
    data = block_bytes(root, "1/0/0")
    with pytest.raises(ChunkDecodeError, match="truncated"):
        decode_block(data[:-5], attrs)
    with pytest.raises(ChunkDecodeError, match="gzip"):
        decode_block(data + b"garbage!", attrs)


@pytest.mark.parametrize("compression", [{"type": "raw"}, {"type": "gzip"}, {"type": "gzip", "useZlib": True},
                                         {"type": "bzip2"}, {"type": "xz"}, {"type": "lz4"}, {"type": "zstd"},
                                         {"type": "blosc"}], ids=lambda c: "-".join(map(str, c.values())))
def test_wrong_decoded_size(compression: dict[str, Any]) -> None:
    # A header promising 12 elements over data holding 11 or 13: every codec says so, with the offset.
    attrs = make_attributes([4, 3], [4, 3], "uint16", compression)
    for n in (11, 13):
        stored = encode_block(np.ones((1, n), dtype=np.uint16), make_attributes([n, 1], [n, 1], "uint16", compression))
        forged = struct.pack(">HHII", 0, 2, 4, 3) + stored[12:]
        with pytest.raises(ChunkDecodeError, match=r"decodes to|declares") as info:
            decode_block(forged, attrs, key="b")
        # Where the data starts; blosc points at the size field of its own header, 4 bytes in, and zstd at
        # its frame header's content size (which it declares), after the 4-byte magic.
        assert info.value.offset == (16 if compression["type"] in ("blosc", "zstd") else 12)
        assert str(12 * 2) in info.value.message


@pytest.mark.parametrize("compression", [{"type": "bzip2"}, {"type": "xz"}, {"type": "zstd"}, {"type": "blosc"},
                                         {"type": "gzip", "useZlib": True}],
                         ids=lambda c: "-".join(map(str, c.values())))
def test_garbled_data_is_typed(compression: dict[str, Any]) -> None:
    attrs = make_attributes([40, 30], [40, 30], "uint16", compression)
    data = bytearray(encode_block(random_array((30, 40), "uint16"), attrs))
    for i in range(12 + 4, len(data), 7):
        data[i] ^= 0x5A
    with pytest.raises(ChunkDecodeError) as info:
        decode_block(bytes(data), attrs, key="b")
    assert info.value.key == "b" and info.value.offset is not None and info.value.offset >= 12


def test_lz4_corruption(tmp_path: Path) -> None:
    array = random_array((8, 8), "uint8")
    attrs = write_dataset(tmp_path, np.repeat(array, 8, axis=0), (64, 8), {"type": "lz4", "blockSize": 256})
    key = "0/0"
    data = bytearray(block_bytes(tmp_path, key))
    bad_checksum = bytearray(data)
    bad_checksum[12 + 17] ^= 0x01  # first LZ4Block's checksum field
    with pytest.raises(ChecksumError, match="checksum") as info:
        decode_block(bytes(bad_checksum), attrs, key=key)
    assert info.value.offset == 12 + 17
    bad_magic = bytearray(data)
    bad_magic[12] = ord("X")
    with pytest.raises(ChunkDecodeError, match="magic") as info:
        decode_block(bytes(bad_magic), attrs, key=key)
    assert info.value.offset == 12
    bad_token = bytearray(data)
    bad_token[12 + 8] = 0x30
    with pytest.raises(ChunkDecodeError, match="token 0x30"):
        decode_block(bytes(bad_token), attrs, key=key)
    (tmp_path / key).write_bytes(bytes(bad_checksum))
    (problem,) = problems_of(tmp_path)
    assert problem.offset == 12 + 17


def test_block_positions_outside_grid_and_odd_paths(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, _, _ = dataset
    good = block_bytes(root, "0/0/0")
    (root / "3/0").mkdir(parents=True)
    (root / "3/0/0").write_bytes(good)
    (root / "01/0").mkdir(parents=True)
    (root / "01/0/0").write_bytes(good)
    (root / "5").mkdir()
    (root / "5/5").write_bytes(good)  # too shallow for a 3-D dataset
    (root / "7/7/7").mkdir(parents=True)
    (root / "7/7/7/7").write_bytes(good)  # too deep
    (root / "notes.txt").write_text("ignored")
    problems = {p.key: p for p in problems_of(root)}
    assert set(problems) == {"3/0/0", "01/0/0", "5/5", "7/7/7/7"}
    assert problems["3/0/0"].message == "grid position (3, 0, 0) is outside the block grid (3, 3, 1)"
    assert "not a block path" in problems["01/0/0"].message
    assert "not a block path" in problems["5/5"].message and "not a block path" in problems["7/7/7/7"].message
    listed = [r["block_path"] for r in open_dataset(root).inspector().list_chunks()]
    assert "3/0/0" in listed and "01/0/0" not in listed


def test_validate_progress_and_clean_dataset(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, _, _ = dataset
    calls: list[tuple[int, int, str]] = []
    assert list(open_dataset(root).inspector().validate(progress=lambda d, t, w: calls.append((d, t, w)))) == []
    assert [c[0] for c in calls] == list(range(1, 10)) and {c[1] for c in calls} == {9}
    assert {c[2] for c in calls} == {f"{x}/{y}/0" for x in range(3) for y in range(3)}


def test_broken_attributes_json(tmp_path: Path) -> None:
    (tmp_path / "attributes.json").write_text(
        '{"dimensions": [4], "dataType": "uint8", "compression": {"type": "lz5"}}')
    with pytest.raises(UnsupportedFeatureError, match=r"N5 compression 'lz5'") as info:
        open_dataset(str(tmp_path)).inspector()
    assert info.value.key == "attributes.json"
    (tmp_path / "attributes.json").write_text('{"dimensions": [4], ')
    with pytest.raises(MetadataError, match="invalid JSON") as info:
        open_dataset(str(tmp_path)).inspector()
    assert info.value.offset == 20


def test_bad_voxel_and_filters(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    root, _, _ = dataset
    inspector = open_dataset(root).inspector()
    with pytest.raises(ArgumentError, match="outside"):
        inspector.locate_format_voxel([10, 0, 0])
    with pytest.raises(ArgumentError, match="3 coordinates"):
        inspector.locate_format_voxel([1, 2])
    with pytest.raises(ArgumentError, match="no shards"):
        list(inspector.list_chunks(shard=1))
    with pytest.raises(ArgumentError, match="no scale"):
        inspector.inspect("s0")


# -- through the CLI ---------------------------------------------------------------------------


def test_cli_on_n5(dataset: tuple[Path, DatasetAttributes, np.ndarray], capsys: pytest.CaptureFixture[str]) -> None:
    root, _, _ = dataset
    assert run(["inspect", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "n5" and report["scales"][0]["blocks_present"] == 9 and "bytes_read" in report
    assert run(["locate", str(root), "--voxel", "3,8,9", "--json"]) == 0  # z,y,x (N5 stores x,y,z)
    located = json.loads(capsys.readouterr().out)
    assert located["block_path"] == "2/2/0" and located["present"] is True and located["size"] > 0
    assert run(["ls", str(root), "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 9 and json.loads(lines[0])["block_path"] == "0/0/0"
    assert run(["validate", str(root), "--quiet"]) == 0
    capsys.readouterr()
    (root / "1/2/0").write_bytes(b"\x00\x00\x00")
    assert run(["validate", str(root), "--quiet"]) == 1
    assert capsys.readouterr().out.strip() == ("1/2/0: block header truncated: 3 bytes, mode and dimension count "
                                               "need 4 at byte 3")
    assert run(["locate", str(root), "--voxel", "0,0,99"]) == 2
    assert "outside" in capsys.readouterr().err


def test_block_larger_than_block_size_is_refused(dataset: tuple[Path, DatasetAttributes, np.ndarray]) -> None:
    # The spec: all blocks have the block size except end blocks, which may be smaller. TensorStore
    # refuses a larger one ("exceeds blockSize"); we returned it, and a header claiming huge dims made
    # the decoders size their output by it.
    root, attrs, _ = dataset
    (root / "1/1/0").write_bytes(encode_block(np.ones((4, 4, 4), dtype=np.uint16), attrs))
    with pytest.raises(ChunkDecodeError, match=r"block dimensions \(4, 4, 4\) exceed .* \(4, 3, 4\)") as info:
        open_dataset(root).inspector().read_block((1, 1, 0))
    assert (info.value.key, info.value.offset) == ("1/1/0", 8)
    (problem,) = problems_of(root)
    assert (problem.key, problem.offset) == ("1/1/0", 4) and "do not fit" in problem.message
