"""Corrupted shard files give our typed errors naming the file and byte offset, and validate finds them.

Each test damages a real shard file (written by our writer, which the cross-checks show TensorStore
and CloudVolume read) in one specific way.
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.errors import ChunkDecodeError, IndexDecodeError, MetadataError, ShardscopeError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.shard_index import decode_minishard_index, decode_shard_index
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.shard_writer import encode_shard
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from tests.cli_batch import run_commands

SPEC_JSON = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 0,
    "hash": "identity",
    "minishard_bits": 1,
    "shard_bits": 0,
    "minishard_index_encoding": "raw",
    "data_encoding": "gzip",
}


def _make(tmp_path: Path, spec_json: dict[str, object] = SPEC_JSON) -> tuple[Path, ShardingSpec, dict[int, bytes]]:
    spec = parse_sharding_spec(spec_json)
    chunks = {i: bytes([i]) * (10 + i) for i in range(1, 9)}
    root = tmp_path / "skel"
    root.mkdir()
    (root / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_json}))
    (root / "0.shard").write_bytes(encode_shard(spec, chunks))
    return root, spec, chunks


def _problems(root: Path) -> list[str]:
    return [str(p) for p in open_dataset(root).inspector().validate()]


def test_clean_file_validates(tmp_path: Path) -> None:
    root, spec, chunks = _make(tmp_path)
    assert _problems(root) == []
    reader = ShardedReader(LocalByteStore(root), "", spec)
    assert {cid: reader.read_chunk(cid) for cid in chunks} == chunks


def test_truncated_shard_index(tmp_path: Path) -> None:
    root, spec, _ = _make(tmp_path)
    (root / "0.shard").write_bytes((root / "0.shard").read_bytes()[:20])
    with pytest.raises(IndexDecodeError, match=r"0\.shard: shard index truncated: 20 of 32 bytes at byte 20"):
        ShardedReader(LocalByteStore(root), "", spec).read_chunk(1)
    assert _problems(root) == ["0.shard: shard index truncated: 20 of 32 bytes at byte 20"]


def test_minishard_index_past_end_of_file(tmp_path: Path) -> None:
    root, spec, _ = _make(tmp_path)
    blob = bytearray((root / "0.shard").read_bytes())
    struct.pack_into("<QQ", blob, 16, 0, len(blob) + 100)  # minishard 1's index range
    (root / "0.shard").write_bytes(bytes(blob))
    with pytest.raises(IndexDecodeError, match=r"0\.shard: minishard 1 index range .* runs past the end .* at byte 16"):
        ShardedReader(LocalByteStore(root), "", spec).read_chunk(1)
    problems = _problems(root)
    assert len(problems) == 1 and problems[0].endswith("at byte 16")


def test_chunk_offset_past_end_of_file(tmp_path: Path) -> None:
    root, spec, _ = _make(tmp_path)
    blob = bytearray((root / "0.shard").read_bytes())
    start, end = struct.unpack_from("<QQ", blob, 0)
    n = (end - start) // 24
    base = 32 + start
    struct.pack_into("<Q", blob, base + 8 * n, len(blob))  # first chunk's offset delta: far past the end
    (root / "0.shard").write_bytes(bytes(blob))
    with pytest.raises(IndexDecodeError, match=rf"runs past the end of the {len(blob)}-byte file at byte {base}"):
        ShardedReader(LocalByteStore(root), "", spec).read_chunk(2)
    assert any(f"at byte {base}" in p for p in _problems(root))


def test_overlapping_ranges_reported(tmp_path: Path) -> None:
    root, _, _ = _make(tmp_path)
    blob = bytearray((root / "0.shard").read_bytes())
    # Point minishard 1's index at minishard 0's index bytes: both claim the same region.
    s0, e0 = struct.unpack_from("<QQ", blob, 0)
    struct.pack_into("<QQ", blob, 16, s0, e0)
    (root / "0.shard").write_bytes(bytes(blob))
    problems = _problems(root)
    assert any("overlaps" in p and p.startswith("0.shard: ") and f"at byte {32 + s0}" in p for p in problems)
    # The ids of minishard 0 now also sit in minishard 1: validate says they hash elsewhere.
    assert any("hashes to shard 0 minishard 0 but is stored in shard 0 minishard 1" in p for p in problems)


def test_bad_gzip_chunk(tmp_path: Path) -> None:
    root, spec, _ = _make(tmp_path)
    reader = ShardedReader(LocalByteStore(root), "", spec)
    loc = reader.locate(3)
    assert loc.byte_range is not None
    start, end = loc.byte_range
    blob = bytearray((root / "0.shard").read_bytes())
    blob[start + 12 : end - 4] = b"\xff" * (end - 16 - start)
    (root / "0.shard").write_bytes(bytes(blob))
    with pytest.raises(ChunkDecodeError, match=rf"0\.shard: (bad gzip data|gzip stream).* at byte {start}$"):
        ShardedReader(LocalByteStore(root), "", spec).read_chunk(3)
    problems = _problems(root)
    assert len(problems) == 1
    assert problems[0].startswith("0.shard: chunk 3: ") and problems[0].endswith(f"at byte {start}")


def test_bad_gzip_minishard_index(tmp_path: Path) -> None:
    # An index that does not decode is an IndexDecodeError (it was a ChunkDecodeError: same group, exit code).
    spec_json = dict(SPEC_JSON, minishard_index_encoding="gzip")
    root, spec, _ = _make(tmp_path, spec_json)
    blob = bytearray((root / "0.shard").read_bytes())
    s, _ = struct.unpack_from("<QQ", blob, 0)
    blob[32 + s] ^= 0xFF  # break the gzip magic
    (root / "0.shard").write_bytes(bytes(blob))
    with pytest.raises(IndexDecodeError, match=rf"0\.shard: bad gzip data .* at byte {32 + s}"):
        ShardedReader(LocalByteStore(root), "", spec).read_chunk(2)
    assert any("minishard 0: bad gzip data" in p and p.endswith(f"at byte {32 + s}") for p in _problems(root))


def test_duplicate_and_unsorted_ids(tmp_path: Path) -> None:
    spec = parse_sharding_spec(SPEC_JSON)
    base = spec.shard_index_size
    data = [gzip.compress(b"a", mtime=0), gzip.compress(b"b", mtime=0)]
    # Two entries with the same id 4 (delta 0): duplicate.
    arr = np.array([[4, 0], [0, 0], [len(data[0]), len(data[1])]], dtype="<u8")
    mini = arr.tobytes()
    body = data[0] + data[1]
    index = struct.pack("<QQQQ", len(body), len(body) + len(mini), 0, 0)
    root = tmp_path / "skel"
    root.mkdir()
    (root / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": SPEC_JSON}))
    (root / "0.shard").write_bytes(index + body + mini)
    problems = _problems(root)
    assert any("duplicate chunk id 4 at entry 1" in p and p.endswith(f"at byte {base + len(body)}") for p in problems)
    # Unsorted: 6 then 4 (delta wraps modulo 2**64, as every reader sums it).
    arr = np.array([[6, (1 << 64) - 2], [0, 0], [len(data[0]), len(data[1])]], dtype="<u8")
    mini = arr.tobytes()
    (root / "0.shard").write_bytes(struct.pack("<QQQQ", len(body), len(body) + len(mini), 0, 0) + body + mini)
    problems = _problems(root)
    assert any("unsorted chunk id 4 at entry 1" in p for p in problems)
    # Ids 6 and 4 are even: with identity hash and minishard_bits=1 they belong to minishard 0 — fine here.
    assert not any("hashes to" in p for p in problems)


def test_wrong_shard_for_id(tmp_path: Path) -> None:
    spec_json = dict(SPEC_JSON, shard_bits=1, minishard_bits=1)
    spec = parse_sharding_spec(spec_json)
    root = tmp_path / "skel"
    root.mkdir()
    (root / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_json}))
    # Ids 2 and 6 hash (identity) to shard 1; we store that shard's bytes under the name of shard 0.
    (root / "0.shard").write_bytes(encode_shard(spec, {2: b"x", 6: b"y"}))
    problems = _problems(root)
    assert sum("but is stored in shard 0" in p for p in problems) == 2


def test_shard_index_reversed_range_names_entry_offset() -> None:
    spec = parse_sharding_spec(SPEC_JSON)
    data = struct.pack("<QQQQ", 0, 0, 50, 10)
    with pytest.raises(IndexDecodeError, match=r"minishard 1 index range ends before it starts .* at byte 16"):
        decode_shard_index(data, spec, key="k.shard")


def test_minishard_index_wrong_length() -> None:
    spec = parse_sharding_spec(SPEC_JSON)
    with pytest.raises(IndexDecodeError, match="not a multiple of 24 at byte 99"):
        decode_minishard_index(b"\0" * 25, spec, key="k.shard", offset=99)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("@type", "neuroglancer_uint64_sharded_v2", r'sharding\["@type"\] must be "neuroglancer_uint64_sharded_v1"'),
        ("hash", "murmurhash3_x64_128", r"sharding\.hash must be one of .* got 'murmurhash3_x64_128'"),
        ("preshift_bits", 65, r"sharding\.preshift_bits must be in \[0, 64\], got 65"),
        ("preshift_bits", -1, r"sharding\.preshift_bits must be in \[0, 64\], got -1"),
        ("shard_bits", 40, r"minishard_bits \+ shard_bits must be <= 64, got 30 \+ 40"),
        ("minishard_index_encoding", "zstd", r"sharding\.minishard_index_encoding must be one of .* got 'zstd'"),
        ("data_encoding", "jpeg", r"sharding\.data_encoding must be one of .* got 'jpeg'"),
        ("minishard_bits", "3", r"sharding\.minishard_bits must be an integer, got '3'"),
    ],
)
def test_sharding_spec_errors_name_field_and_value(field: str, value: object, message: str) -> None:
    spec = dict(SPEC_JSON, minishard_bits=30)
    spec[field] = value
    with pytest.raises(MetadataError, match=message):
        parse_sharding_spec(spec, key="vol/info")


def test_absent_encodings_mean_raw() -> None:
    spec = {k: v for k, v in SPEC_JSON.items() if not k.endswith("encoding")}
    parsed = parse_sharding_spec(spec)
    assert parsed.minishard_index_encoding == "raw" and parsed.data_encoding == "raw"


def test_info_errors(tmp_path: Path) -> None:
    from napari_shardscope.core.formats.precomputed.info import parse_info

    good = {
        "type": "image",
        "data_type": "uint8",
        "num_channels": 1,
        "scales": [
            {"key": "a", "size": [4, 4, 4], "resolution": [1, 1, 1], "chunk_sizes": [[2, 2, 2]], "encoding": "raw"}
        ],
    }
    assert parse_info(good).scales[0].voxel_offset == (0, 0, 0)
    with pytest.raises(MetadataError, match=r"info: invalid JSON .* at byte 1"):
        parse_info(b"{x")
    with pytest.raises(MetadataError, match=r"data_type must be one of .* got 'uint7'"):
        parse_info(dict(good, data_type="uint7"))
    bad_scale = dict(good["scales"][0], size=[4, 4])  # type: ignore[arg-type]
    with pytest.raises(MetadataError, match=r"scales\[0\]\.size must be a list of 3 ints, got \[4, 4\]"):
        parse_info(dict(good, scales=[bad_scale]))


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    root, _, _ = _make(tmp_path)
    cut = tmp_path / "cut"
    shutil.copytree(root, cut)
    blob = (cut / "0.shard").read_bytes()
    (cut / "0.shard").write_bytes(blob[:20])
    # the four command lines in one child process (tests/cli_batch.py): each prints and returns as on its own
    good, run, nope, usage = run_commands([["validate", str(root), "--quiet"], ["validate", str(cut), "--quiet"],
                                           ["validate", str(tmp_path / "nope")], ["validate"]])
    assert good.returncode == 0, good.stderr
    assert run.returncode == 1
    assert run.stdout.strip().splitlines() == ["0.shard: shard index truncated: 20 of 32 bytes at byte 20"]
    assert nope.returncode == 3 and "no info" in nope.stderr  # not found
    assert usage.returncode == 2


def test_errors_are_shardscope_errors() -> None:
    assert issubclass(IndexDecodeError, ShardscopeError) and issubclass(ChunkDecodeError, ShardscopeError)


@pytest.mark.parametrize("blob", [b'{"type": ' + b"1" * 5000 + b"}", b"[" * 100_000], ids=["long-int", "deep"])
def test_unusable_info_json_is_a_metadata_error(tmp_path: Path, blob: bytes) -> None:
    # json.loads raises plain ValueError (int digit limit) and RecursionError for these.
    from napari_shardscope.core.formats.precomputed.info import parse_info

    message = "info: (unusable JSON|JSON nested deeper than 64 levels)"
    with pytest.raises(MetadataError, match=message):
        parse_info(blob)
    (tmp_path / "info").write_bytes(blob)
    with pytest.raises(MetadataError, match=message):
        open_dataset(tmp_path).inspector()


def test_huge_shard_index_of_a_short_file_is_reported_not_allocated(tmp_path: Path) -> None:
    # minishard_bits 40 is a valid spec (a 16 TiB shard index); a 100-byte file cannot hold it.
    spec_json = dict(SPEC_JSON, minishard_bits=40)
    (tmp_path / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_json}))
    (tmp_path / "0.shard").write_bytes(b"\0" * 100)
    with pytest.raises(IndexDecodeError, match=r"0\.shard: shard index truncated: 100 of 17592186044416 bytes"):
        ShardedReader(LocalByteStore(tmp_path), "", parse_sharding_spec(spec_json)).read_chunk(1)


def test_info_sizes_beyond_what_chunk_ids_and_int64_hold(tmp_path: Path) -> None:
    # TensorStore refuses both; we used to accept them and overflow later in locate/ls/validate.
    from napari_shardscope.core.formats.precomputed.info import parse_info

    scale = {"key": "s0", "size": [2**64, 1, 1], "resolution": [1, 1, 1], "chunk_sizes": [[1, 1, 1]]}
    info = {"type": "image", "data_type": "uint8", "num_channels": 1, "scales": [dict(scale, encoding="raw")]}
    with pytest.raises(MetadataError, match=r"scales\[0\]\.size must hold 64-bit signed integers"):
        parse_info(info)
    info["scales"][0].update(size=[2**40, 2**40, 1], sharding=SPEC_JSON)  # type: ignore[index]
    with pytest.raises(MetadataError, match=r"scales\[0\]: size .* needs 80 bits of compressed Morton code"):
        parse_info(info)
    (tmp_path / "info").write_text(json.dumps(info))
    run = subprocess.run(
        [sys.executable, "-m", "napari_shardscope", "locate", str(tmp_path), "--voxel", "3,0,0"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 4 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_a_bad_minishard_range_leaves_the_other_minishards_readable(tmp_path: Path) -> None:
    # Minishard 1's index range runs past the end; minishard 0 is intact (TensorStore still reads it),
    # and validate reports each bad entry and goes on checking the rest of the shard.
    root, spec, chunks = _make(tmp_path, dict(SPEC_JSON, minishard_bits=2))
    blob = bytearray((root / "0.shard").read_bytes())
    struct.pack_into("<QQ", blob, 16, 0, len(blob))  # minishard 1
    struct.pack_into("<QQ", blob, 48, 0, len(blob) + 7)  # minishard 3
    (root / "0.shard").write_bytes(bytes(blob))
    reader = ShardedReader(LocalByteStore(root), "", spec)
    assert reader.read_chunk(4) == chunks[4] and reader.read_chunk(2) == chunks[2]  # minishards 0 and 2
    with pytest.raises(IndexDecodeError, match=r"minishard 1 index range .* runs past the end .* at byte 16"):
        reader.read_chunk(1)
    loc = reader.locate(2)
    assert loc.byte_range is not None
    blob[loc.byte_range[0]] ^= 0xFF  # and a broken chunk in minishard 2
    (root / "0.shard").write_bytes(bytes(blob))
    problems = _problems(root)
    assert [p.rsplit(" at byte ", 1)[1] for p in problems if "runs past the end" in p] == ["16", "48"]
    assert any(p.startswith("0.shard: chunk 2: ") for p in problems)
