"""Bounds before work: hostile shard files cost bounded memory and end in a typed error.

A gzip bomb in place of a minishard index (a few hundred KB inflating to 64 MB of zeros) used to be
inflated in full, and again for every chunk looked up, and its zeros counted as phantom chunks.
Decoding is now capped at what the metadata implies (here 8 chunks x 24 B), and a failed decode is
remembered, so each index is inflated at most once. Memory is measured, not time.
"""

from __future__ import annotations

import gzip
import json
import struct
import tracemalloc
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.encoding import decode_bytes, gunzip
from napari_shardscope.core.errors import ChunkDecodeError, IndexDecodeError, ShardscopeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.shard_writer import encode_shard
from napari_shardscope.core.formats.precomputed.sharding import parse_sharding_spec

BOMB_BYTES = 64 << 20
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 0,
    "hash": "identity",
    "minishard_bits": 0,
    "shard_bits": 0,
    "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}


def _volume(root: Path, shard: bytes, encoding: str = "raw") -> Path:
    """A 4x4x4 uint8 volume of 2x2x2 chunks (8 chunks) whose one shard file is ``shard``."""
    root.mkdir()
    scale = {"key": "s", "size": [4, 4, 4], "resolution": [1, 1, 1], "chunk_sizes": [[2, 2, 2]]}
    info = {
        "type": "image",
        "data_type": "uint8",
        "num_channels": 1,
        "scales": [dict(scale, encoding=encoding, sharding=SHARDING)],
    }
    (root / "info").write_text(json.dumps(info))
    (root / "s").mkdir()
    (root / "s" / "0.shard").write_bytes(shard)
    return root


def _bomb_shard() -> bytes:
    bomb = gzip.compress(b"\0" * BOMB_BYTES, 9)
    return struct.pack("<QQ", 0, len(bomb)) + bomb


def _peak(fn: object) -> int:
    tracemalloc.start()
    try:
        fn()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_gunzip_is_capped() -> None:
    data = gzip.compress(b"\0" * BOMB_BYTES, 9)
    with pytest.raises(ChunkDecodeError, match=r"k: gzip data decodes to more than 1000 bytes at byte 7"):
        gunzip(data, max_size=1000, key="k", offset=7)
    assert gunzip(gzip.compress(b"abc") * 2, max_size=6) == b"abcabc"
    with pytest.raises(ChunkDecodeError, match="more than 5 bytes"):
        gunzip(gzip.compress(b"abc") * 2, max_size=5)

    def decode() -> None:
        with pytest.raises(ChunkDecodeError):
            decode_bytes(data, "gzip", max_size=1 << 20)

    assert _peak(decode) < 8 << 20


def test_minishard_index_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    root = _volume(tmp_path / "v", _bomb_shard())
    inspector = open_dataset(root).inspector()
    errors: list[BaseException] = []

    def run_all() -> None:
        for call in (lambda: inspector.inspect("s"), lambda: inspector.locate_format_voxel([1, 1, 1], "s")):
            try:
                call()
            except ShardscopeError as exc:
                errors.append(exc)
        errors.extend(inspector.validate("s"))  # type: ignore[arg-type]

    assert _peak(run_all) < 16 << 20
    assert len(errors) == 3
    assert all("more than 192 bytes" in str(e) and "s/0.shard" in str(e) and "at byte 16" in str(e) for e in errors)
    assert isinstance(errors[0], IndexDecodeError)


def test_a_failed_index_is_decoded_once(tmp_path: Path) -> None:
    root = _volume(tmp_path / "v", _bomb_shard())
    reader = open_dataset(root).inspector().reader(open_dataset(root).inspector().source("s"))  # type: ignore[attr-defined]
    with pytest.raises(IndexDecodeError):
        reader.read_chunk(0)
    first = reader.minishard_index.__self__  # the same reader: the second lookup hits the cache

    def again() -> None:
        for i in range(8):
            with pytest.raises(IndexDecodeError):
                first.read_chunk(i)

    assert _peak(again) < 1 << 20


def test_read_chunk_of_the_wrong_length_is_an_error(tmp_path: Path) -> None:
    spec = parse_sharding_spec(SHARDING)
    chunks = {i: bytes([i]) * 8 for i in range(8)}
    chunks[3] = b"\3" * 5  # a raw 2x2x2 uint8 chunk must be 8 bytes
    root = _volume(tmp_path / "v", encode_shard(spec, chunks))
    inspector = open_dataset(root).inspector()
    reader = inspector.reader(inspector.source("s"))  # type: ignore[attr-defined]
    assert reader.read_chunk(2) == chunks[2]
    with pytest.raises(ChunkDecodeError, match=r"s/0.shard: chunk 3 decodes to 5 bytes, expected 8 at byte \d+"):
        reader.read_chunk(3)
    assert ShardedReader(LocalByteStore(root), "s", spec).read_chunk(3) == chunks[3]  # no metadata, no check


def test_chunk_data_bomb_is_capped(tmp_path: Path) -> None:
    spec_json = dict(SHARDING, minishard_index_encoding="raw", data_encoding="gzip")
    spec = parse_sharding_spec(spec_json)
    SHARDING_SAVED = dict(SHARDING)
    SHARDING.update(spec_json)
    try:
        # zlib's deflate packs the bomb tighter than libdeflate (the project's writer): 1032:1, inside the
        # file-size bound of this scale, so the decode cap is what stops it
        bomb = gzip.compress(b"\0" * BOMB_BYTES, compresslevel=9, mtime=0)
        shard = encode_shard(spec, {0: bomb}, encoded=True)
        root = _volume(tmp_path / "v", shard)
    finally:
        SHARDING.clear()
        SHARDING.update(SHARDING_SAVED)
    inspector = open_dataset(root).inspector()
    reader = inspector.reader(inspector.source("s"))  # type: ignore[attr-defined]
    with pytest.raises(ChunkDecodeError, match="more than 8 bytes"):
        reader.read_chunk(0)
    problems = [str(p) for p in inspector.validate("s")]
    assert any("chunk 0" in p and "more than 8 bytes" in p for p in problems), problems
    assert _peak(lambda: list(inspector.validate("s"))) < 16 << 20


@pytest.mark.parametrize("where", ["prepended", "appended"])
def test_validate_finds_bytes_no_index_entry_claims(tmp_path: Path, where: str) -> None:
    # Prepending one shard index's worth of zeros leaves a valid-looking (empty) index at the head:
    # every read then returns fill values, and validate used to report nothing.
    spec = parse_sharding_spec(dict(SHARDING, minishard_index_encoding="raw"))
    shard = encode_shard(spec, {i: bytes([i]) * 8 for i in range(8)})
    extra = b"\0" * 16
    SAVED = dict(SHARDING)
    SHARDING["minishard_index_encoding"] = "raw"
    try:
        root = _volume(tmp_path / "v", extra + shard if where == "prepended" else shard + extra)
    finally:
        SHARDING.update(SAVED)
    problems = [str(p) for p in open_dataset(root).inspector().validate("s")]
    n = len(shard) if where == "prepended" else 16
    start = 16 if where == "prepended" else len(shard)
    assert problems == [
        f"s/0.shard: {n} bytes [{start}, {start + n}) belong to no index entry (bytes prepended, appended or left "
        f"behind) at byte {start}"
    ]
