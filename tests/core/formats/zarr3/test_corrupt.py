"""Corrupted Zarr v3 shards and metadata: typed errors naming the key and byte offset, and
``validate`` reporting each problem (``file: problem at byte N``)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import (
    ChecksumError,
    ChunkDecodeError,
    IndexDecodeError,
    MetadataError,
    NotADatasetError,
    UnsupportedFeatureError,
)
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.zarr3.metadata import ArrayMetadata, ChunkKeyEncoding, CodecSpec
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.sharding import (
    EMPTY,
    ShardIndex,
    decode_shard_index,
    encode_shard_index,
    index_span,
)
from napari_shardscope.core.formats.zarr3.writer import write_array
from napari_shardscope.core.volumes import open_volume

SHAPE = (12, 16)
SHARD = (8, 8)
INNER = (4, 4)
KEY = "c/0/0"  # the shard every corruption below targets; 4 inner chunks, all stored
INDEX_SIZE = 16 * 4 + 4


def build(root: Path, location: str) -> Zarr3ArrayReader:
    codecs = (
        CodecSpec(
            "sharding_indexed",
            {
                "chunk_shape": list(INNER),
                "codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "gzip", "configuration": {"level": 1}},
                ],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": location,
            },
        ),
    )
    meta = ArrayMetadata(SHAPE, "uint16", SHARD, ChunkKeyEncoding(), 0, codecs)
    data = (np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE) % 251) + 1
    store = LocalByteStore(root)
    write_array(store, "", meta, data)
    return Zarr3ArrayReader(store)


def rewrite_index(root: Path, reader: Zarr3ArrayReader, mutate: Callable[[ShardIndex], None]) -> None:
    """Change index entries of shard KEY and re-encode the index with a *valid* crc32c."""
    config = reader.sharding
    assert config is not None
    blob = bytearray((root / KEY).read_bytes())
    lo, hi = index_span(config, len(blob))
    index = decode_shard_index(bytes(blob[lo:hi]), config, key=KEY)
    mutate(index)
    blob[lo:hi] = encode_shard_index(index, config)
    (root / KEY).write_bytes(bytes(blob))
    reader.clear_cache()


def problems(root: Path) -> list[tuple[str, str, int | None]]:
    return [(p.key, p.message, p.offset) for p in open_dataset(root).inspector().validate()]


@pytest.fixture(params=["end", "start"])
def dataset(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Zarr3ArrayReader, str]:
    return tmp_path, build(tmp_path, request.param), request.param


def test_clean_dataset_validates(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, _ = dataset
    assert problems(root) == []
    assert reader.locate_voxel((0, 0)).present


def test_truncated_index(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, _ = dataset
    (root / KEY).write_bytes((root / KEY).read_bytes()[: INDEX_SIZE - 10])
    with pytest.raises(IndexDecodeError) as err:
        reader.locate_voxel((0, 0))
    assert err.value.key == KEY and err.value.offset == 0
    assert f"{KEY}:" in str(err.value) and "at byte 0" in str(err.value)
    found = problems(root)
    assert len(found) == 1 and found[0][0] == KEY and found[0][2] == 0 and "truncated" in found[0][1]


def test_wrong_crc32c(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, location = dataset
    blob = bytearray((root / KEY).read_bytes())
    lo = 0 if location == "start" else len(blob) - INDEX_SIZE
    blob[lo + 3] ^= 0x40  # flip one bit of the first index entry
    (root / KEY).write_bytes(bytes(blob))
    crc_at = lo + INDEX_SIZE - 4
    with pytest.raises(ChecksumError) as err:
        reader.locate_voxel((0, 0))
    assert err.value.key == KEY and err.value.offset == crc_at
    assert problems(root) == [(KEY, err.value.message, crc_at)]


def test_offset_past_the_end(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, location = dataset
    size = (root / KEY).stat().st_size

    def mutate(index: ShardIndex) -> None:
        index.offsets[0, 1] = size - 2  # runs past the end by nbytes - 2

    rewrite_index(root, reader, mutate)
    entry_at = (0 if location == "start" else size - INDEX_SIZE) + 16 * 1
    with pytest.raises(IndexDecodeError) as err:
        reader.locate_voxel((0, 4))  # inner chunk (0, 1)
    assert err.value.key == KEY and err.value.offset == entry_at and "past the end" in err.value.message
    assert reader.locate_voxel((0, 0)).present  # the other entries stay usable
    with pytest.raises(IndexDecodeError):
        list(reader.list_inner_chunks((0, 0)))
    found = problems(root)
    assert [(k, o) for k, _, o in found] == [(KEY, entry_at)]
    assert "ends past the end of the file" in found[0][1]


def test_overlapping_ranges(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, _ = dataset
    starts: dict[str, int] = {}

    def mutate(index: ShardIndex) -> None:
        index.offsets[1, 1] = index.offsets[0, 0] + 1
        index.nbytes[1, 1] = index.nbytes[0, 0]
        starts["overlap"] = int(index.offsets[1, 1])

    rewrite_index(root, reader, mutate)
    found = problems(root)
    overlap = [p for p in found if "overlaps inner chunk [0, 0]" in p[1]]
    assert len(overlap) == 1 and overlap[0][0] == KEY and overlap[0][2] == starts["overlap"]


def test_range_over_the_index_and_half_empty_entry(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, location = dataset
    size = (root / KEY).stat().st_size
    lo = 0 if location == "start" else size - INDEX_SIZE

    def mutate(index: ShardIndex) -> None:
        index.offsets[1, 0] = lo + 2
        index.nbytes[1, 0] = 8
        index.nbytes[0, 1] = EMPTY  # offset still set: neither stored nor properly empty

    rewrite_index(root, reader, mutate)
    found = problems(root)
    messages = {m.split(":")[0]: (m, o) for _, m, o in found}
    assert "overlaps the shard index" in messages["inner chunk [1, 0]"][0]
    assert messages["inner chunk [1, 0]"][1] == lo + 16 * 2
    assert "half-empty" in messages["inner chunk [0, 1]"][0]
    assert messages["inner chunk [0, 1]"][1] == lo + 16 * 1
    with pytest.raises(IndexDecodeError, match="half-empty"):
        reader.locate_voxel((0, 4))


def test_bad_gzip(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, _ = dataset
    loc = reader.locate_voxel((4, 4))  # inner chunk (1, 1)
    assert loc.byte_range is not None
    start, end = loc.byte_range
    blob = bytearray((root / KEY).read_bytes())
    blob[start + 12 : end - 8] = bytes(end - 20 - start)  # zero the deflate body, keep header/trailer
    (root / KEY).write_bytes(bytes(blob))
    with pytest.raises(ChunkDecodeError) as err:
        reader.read_inner_chunk((1, 1))
    assert err.value.key == KEY and err.value.offset == start
    found = problems(root)
    assert len(found) == 1
    assert found[0][0] == KEY and found[0][2] == start and found[0][1].startswith("inner chunk [1, 1]: ")


def test_empty_data_range_is_reported(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    root, reader, _ = dataset

    def mutate(index: ShardIndex) -> None:
        index.nbytes[0, 0] = 0

    rewrite_index(root, reader, mutate)
    found = problems(root)
    assert len(found) == 1 and "gzip" in found[0][1]


def test_shard_key_outside_the_grid(tmp_path: Path) -> None:
    build(tmp_path, "end")
    (tmp_path / "c" / "9").mkdir()
    (tmp_path / "c" / "9" / "0").write_bytes(b"stray")
    (tmp_path / "c" / "notachunk").write_bytes(b"ignored: not a chunk key")
    found = problems(tmp_path)
    assert found == [("c/9/0", "shard key [9, 0] is outside the array's shard grid [2, 2]", None)]


def test_progress_is_reported(tmp_path: Path) -> None:
    build(tmp_path, "end")
    calls: list[tuple[int, int, str]] = []
    assert list(open_dataset(tmp_path).inspector().validate(progress=lambda *a: calls.append(a))) == []
    assert calls[0] == (0, 4, "c/0/0") and calls[-1] == (4, 4, "done")


# -- metadata --------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [12, 16],
    "data_type": "uint16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [4, 4],
                "codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "gzip", "configuration": {"level": 1}},
                ],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ],
}


def with_change(path: str, value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    parts = path.split(".")
    target = doc
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return doc


DELETE = object()
SHARDING = "codecs.0.configuration"
BAD_METADATA = [
    ("zarr_format", 2, "zarr_format", "2"),
    ("node_type", "thing", "node_type", "'thing'"),
    ("shape", [12, -1], "shape", "-1"),
    ("shape", [12, 1.5], "shape", "1.5"),
    ("chunk_grid.configuration.chunk_shape", [8], "chunk_shape", "[8]"),
    ("chunk_grid.configuration.chunk_shape", [8, 0], "chunk_shape", "0"),
    ("chunk_key_encoding.configuration.separator", "-", "separator", "'-'"),
    ("chunk_key_encoding.name", "v9", "chunk_key_encoding", "'v9'"),
    ("fill_value", "zero", "fill_value", "'zero'"),
    ("fill_value", 70000, "fill_value", "70000"),
    ("fill_value", DELETE, "fill_value", "missing"),
    ("codecs", [], "codecs", "at least one"),
    (f"{SHARDING}.chunk_shape", [3, 4], "chunk_shape", "[3, 4]"),
    (f"{SHARDING}.index_location", "middle", "index_location", "'middle'"),
    (
        f"{SHARDING}.index_codecs",
        [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}],
        "index_codecs",
        "'gzip'",
    ),
    (f"{SHARDING}.codecs", [{"name": "bytes"}], "endian", "2-byte"),
    (f"{SHARDING}.codecs", [{"name": "gzip", "configuration": {"level": 1}}], "codecs", "gzip"),
    (f"{SHARDING}.codecs.1.configuration.level", 11, "level", "11"),
    ("dimension_names", ["a"], "dimension_names", "['a']"),
]


@pytest.mark.parametrize(("path", "value", "field", "shown"), BAD_METADATA)
def test_bad_metadata_names_field_and_value(tmp_path: Path, path: str, value: Any, field: str, shown: str) -> None:
    (tmp_path / "zarr.json").write_text(json.dumps(with_change(path, value)))
    with pytest.raises(MetadataError) as err:
        open_dataset(tmp_path).inspector().reader()
    # the document is parsed by the dataset (which names its URL), the codec chain by the reader
    # (which names its key in the store): either way the file
    assert err.value.key in (f"{tmp_path}/zarr.json", "zarr.json")
    assert field in err.value.message and shown in err.value.message, err.value.message


#: Valid zarr v3 that asks for what shardscope does not implement: ``(path, value, feature)``.
UNSUPPORTED_METADATA = [
    ("data_type", "float128", "data_type 'float128'"),
    ("data_type", {"name": "datetime64", "configuration": {"unit": "s"}}, "data_type {'name': 'datetime64'"),
    ("chunk_grid.name", "rectilinear", "chunk_grid 'rectilinear'"),
    ("codecs.0.name", "sharding_maybe", "codec 'sharding_maybe'"),
    ("storage_transformers", [{"name": "x"}], "storage_transformers [{'name': 'x'}]"),
]


@pytest.mark.parametrize(("path", "value", "feature"), UNSUPPORTED_METADATA)
def test_unsupported_features_name_feature_and_file(tmp_path: Path, path: str, value: Any, feature: str) -> None:
    (tmp_path / "zarr.json").write_text(json.dumps(with_change(path, value)))
    for call in (lambda: open_dataset(tmp_path).inspector().reader(), lambda: open_volume(tmp_path)):
        with pytest.raises(UnsupportedFeatureError) as err:
            call()
        assert err.value.key is not None and err.value.key.endswith("zarr.json")
        assert feature in err.value.feature and "is not supported" in str(err.value), str(err.value)


def test_bad_metadata_of_a_scale_is_a_validate_problem(tmp_path: Path) -> None:
    group = {
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"ome": {"version": "0.5", "multiscales": [{"datasets": [{"path": "s0"}]}]}},
    }
    (tmp_path / "zarr.json").write_text(json.dumps(group))
    (tmp_path / "s0").mkdir()
    (tmp_path / "s0" / "zarr.json").write_text("{not json")
    found = list(open_dataset(tmp_path).inspector().validate())
    assert [(p.key, p.offset) for p in found] == [("s0/zarr.json", 1)]
    assert "invalid JSON" in found[0].message


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(NotADatasetError):
        open_dataset(tmp_path).inspector()
    (tmp_path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    with pytest.raises(NotADatasetError, match="multiscales"):
        open_dataset(tmp_path).inspector()


def test_problems_name_inner_chunks_in_array_axis_order(tmp_path: Path) -> None:
    """With a transpose before sharding the index is laid out transposed; messages are not."""
    codecs = (
        CodecSpec("transpose", {"order": [1, 0]}),
        CodecSpec(
            "sharding_indexed",
            {
                "chunk_shape": [4, 2],  # (x, y) order: inner chunks of 2 (y) x 4 (x) in the array
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            },
        ),
    )
    meta = ArrayMetadata((4, 8), "uint8", (4, 8), ChunkKeyEncoding(), 0, codecs)
    write_array(LocalByteStore(tmp_path), "", meta, np.arange(32, dtype="uint8").reshape(4, 8) + 1)
    reader = Zarr3ArrayReader(LocalByteStore(tmp_path))
    assert reader.inner_chunk_shape == (2, 4) and reader.chunks_per_shard == (2, 2)
    loc = reader.locate_voxel((3, 1))  # array inner chunk (1, 0) = index position (0, 1)
    assert loc.inner_chunk_in_shard == (1, 0)
    blob = (tmp_path / "c/0/0").read_bytes()
    index_at = len(blob) - 64
    entry = index_at + 16 * 1  # C order over the transposed (2, 2) index: position (0, 1)
    blob = blob[:entry] + (len(blob) + 5).to_bytes(8, "little") + blob[entry + 8 :]
    (tmp_path / "c/0/0").write_bytes(blob)
    assert problems(tmp_path) == [
        (
            "c/0/0",
            f"inner chunk [1, 0]: byte range [{len(blob) + 5}, {len(blob) + 13}) ends past the end of the "
            f"file ({len(blob)} bytes)",
            entry,
        ),
    ]


def test_unusable_json_is_a_metadata_error(tmp_path: Path) -> None:
    # An integer longer than Python's int conversion limit makes json.loads raise a plain ValueError.
    (tmp_path / "zarr.json").write_bytes(b'{"zarr_format": ' + b"3" * 5000 + b"}")
    with pytest.raises(MetadataError, match=r"zarr\.json: unusable JSON"):
        open_dataset(tmp_path).inspector()


def test_a_shard_replaced_by_a_directory_is_reported(dataset: tuple[Path, Zarr3ArrayReader, str]) -> None:
    # Every read of the shard returns fill values (no file there); validate used to report nothing.
    root, _, _ = dataset
    (root / KEY).unlink()
    (root / KEY).mkdir()
    (root / KEY / "stray").write_bytes(b"x")
    assert problems(root) == [(KEY, "is a directory, not a shard file", None)]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_compression_bomb_is_capped_at_the_chunk_size(codec: str) -> None:
    # 64 MB of zeros in place of a 2x2 uint16 chunk: the codec next to ``bytes`` must give exactly the
    # chunk's 8 bytes, so gzip stops decoding after 8 and zstd's frame header, which declares its 64 MB,
    # is refused before any decoding. (zstd's level 3 makes the same 2 KB frame as 19, at a tenth of the CPU.)
    import tracemalloc

    import zstandard

    from napari_shardscope.core.errors import ChunkDecodeError
    from napari_shardscope.core.formats.zarr3.codecs import decode_chunk, split_codec_chain

    spec = CodecSpec(codec, {"level": 1})
    chain = split_codec_chain((CodecSpec("bytes", {"endian": "little"}), spec), 2, np.dtype("uint16"), key="k")
    zeros = b"\0" * (64 << 20)
    bomb = gzip.compress(zeros, 9) if codec == "gzip" else zstandard.ZstdCompressor(level=3).compress(zeros)
    tracemalloc.start()
    try:
        expected = (r"k: gzip data decodes to more than 8 bytes at byte 5" if codec == "gzip" else
                    rf"k: zstd frame header declares {64 << 20} bytes of content, the chunk has 8 at byte 9")
        with pytest.raises(ChunkDecodeError, match=expected):
            decode_chunk(bomb, chain, (2, 2), np.dtype("uint16"), np.uint16(0), key="k", offset=5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
