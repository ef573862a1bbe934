"""Property tests: every precomputed encoder/decoder round-trips; random bytes give only our errors."""

from __future__ import annotations

import contextlib
import json

import mmh3
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.encoding import decode_bytes, encode_bytes, gunzip
from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.morton import decode_morton, encode_morton
from napari_shardscope.core.formats.precomputed.shard_index import (
    decode_minishard_index,
    decode_shard_index,
    encode_minishard_index,
    encode_shard_index,
)
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.shard_writer import encode_shard, write_shards
from napari_shardscope.core.formats.precomputed.sharding import (
    ShardingSpec,
    assign_chunk_ids,
    format_shard_name,
    hash_chunk_ids,
    parse_shard_name,
    parse_sharding_spec,
)
from napari_shardscope.core.formats.precomputed.validate import validate_shard_file

u64 = st.integers(0, 2**64 - 1)


@st.composite
def specs(draw: st.DrawFn, max_bits: int = 6) -> ShardingSpec:
    return parse_sharding_spec(
        {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": draw(st.integers(0, 64)),
            "hash": draw(st.sampled_from(["identity", "murmurhash3_x86_128"])),
            "minishard_bits": draw(st.integers(0, max_bits)),
            "shard_bits": draw(st.integers(0, max_bits)),
            "minishard_index_encoding": draw(st.sampled_from(["raw", "gzip"])),
            "data_encoding": draw(st.sampled_from(["raw", "gzip"])),
        }
    )


def test_murmurhash_matches_reference_bytes() -> None:
    # The spec: MurmurHash3_x86_128 of the id's 8 little-endian bytes, low 8 bytes read little endian.
    spec = parse_sharding_spec(
        {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 0,
            "hash": "murmurhash3_x86_128",
            "minishard_bits": 0,
            "shard_bits": 0,
        }
    )
    for cid in (0, 1, 12345, 2**63 + 5, 2**64 - 1):
        digest = mmh3.mmh3_x86_128_digest(cid.to_bytes(8, "little"), 0)
        assert int(hash_chunk_ids(spec, [cid])[0]) == int.from_bytes(digest[:8], "little")


def test_known_morton_codes() -> None:
    # grid (4, 2, 1): x has 2 bits, y 1, z 0 -> output bits x0, y0, x1.
    pos = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [2, 0, 0], [3, 1, 0]])
    assert encode_morton(pos, (4, 2, 1)).tolist() == [0, 1, 2, 3, 4, 7]
    # grid (3, 5, 2): bits x=2, y=3, z=1 -> x0 y0 z0 x1 y1 y2
    # (2, 4, 1): z0 -> bit 2, x1 -> bit 3, y2 -> bit 5
    assert int(encode_morton(np.array([2, 4, 1]), (3, 5, 2))) == 0b101100
    assert int(encode_morton(np.array([0, 0, 1]), (3, 5, 2))) == 0b100
    assert int(encode_morton(np.array([0, 4, 0]), (3, 5, 2))) == 0b100000
    assert int(encode_morton(np.array([2, 0, 0]), (3, 5, 2))) == 0b1000


@given(st.lists(st.integers(1, 300), min_size=3, max_size=3), st.data())
def test_morton_round_trip_and_bijection(grid: list[int], data: st.DataObject) -> None:
    pos = np.array([data.draw(st.integers(0, g - 1)) for g in grid])
    code = encode_morton(pos, grid)
    assert decode_morton(code, grid).tolist() == pos.tolist()
    assert int(code) < 2 ** sum(max(0, g - 1).bit_length() for g in grid)


@given(st.lists(st.integers(1, 6), min_size=3, max_size=3))
def test_morton_codes_of_a_grid_are_distinct(grid: list[int]) -> None:
    pos = np.stack(np.meshgrid(*[np.arange(g) for g in grid], indexing="ij"), -1).reshape(-1, 3)
    codes = encode_morton(pos, grid)
    assert len(set(codes.tolist())) == len(pos)


@given(specs(), st.lists(u64, max_size=50))
def test_assignment_is_bit_exact(spec: ShardingSpec, ids: list[int]) -> None:
    a = assign_chunk_ids(spec, np.array(ids, dtype=np.uint64))
    for i, cid in enumerate(ids):
        shifted = cid >> spec.preshift_bits if spec.preshift_bits < 64 else 0
        h = (
            shifted
            if spec.hash == "identity"
            else int.from_bytes(mmh3.mmh3_x86_128_digest(shifted.to_bytes(8, "little"), 0)[:8], "little")
        )
        assert int(a.hashed[i]) == h
        assert int(a.minishard[i]) == h & ((1 << spec.minishard_bits) - 1)
        assert int(a.shard[i]) == (h >> spec.minishard_bits) & ((1 << spec.shard_bits) - 1)


@given(specs(max_bits=10), st.data())
def test_shard_names_round_trip(spec: ShardingSpec, data: st.DataObject) -> None:
    shard = data.draw(st.integers(0, spec.num_shards - 1))
    name = format_shard_name(spec, shard)
    assert len(name) == max(1, -(-spec.shard_bits // 4)) and name == name.lower()
    assert parse_shard_name(spec, name + ".shard") == shard


@given(specs(max_bits=4), st.data())
def test_shard_index_round_trip(spec: ShardingSpec, data: st.DataObject) -> None:
    base = spec.shard_index_size
    starts, ends = [], []
    for _ in range(spec.num_minishards):
        s = data.draw(st.integers(base, 2**40))
        e = data.draw(st.integers(s, s + 2**20))
        starts.append(s)
        ends.append(e)
    decoded = decode_shard_index(encode_shard_index(spec, starts, ends), spec, key="k")
    nonempty = [s != e for s, e in zip(starts, ends, strict=True)]
    assert [int(v) for v, ne in zip(decoded.starts, nonempty, strict=True) if ne] == [
        s for s, ne in zip(starts, nonempty, strict=True) if ne
    ]
    assert (decoded.ends - decoded.starts).tolist() == [e - s for s, e in zip(starts, ends, strict=True)]


@given(specs(max_bits=2), st.sets(u64, max_size=40), st.data())
def test_minishard_index_round_trip(spec: ShardingSpec, idset: set[int], data: st.DataObject) -> None:
    ids = sorted(idset)
    pos = spec.shard_index_size
    starts, ends = [], []
    for _ in ids:
        pos += data.draw(st.integers(0, 100))
        starts.append(pos)
        pos += data.draw(st.integers(0, 1000))
        ends.append(pos)
    blob = encode_minishard_index(spec, ids, starts, ends)
    mi = decode_minishard_index(blob, spec, key="k", offset=0)
    assert mi.chunk_ids.tolist() == ids and mi.starts.tolist() == starts and mi.ends.tolist() == ends


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(specs(max_bits=3), st.dictionaries(st.integers(0, 2**20), st.binary(max_size=64), max_size=40))
def test_whole_shards_round_trip_and_validate(
    tmp_path_factory,
    spec: ShardingSpec,  # type: ignore[no-untyped-def]
    chunks: dict[int, bytes],
) -> None:
    root = tmp_path_factory.mktemp("shards")
    store = LocalByteStore(root)
    by_shard: dict[int, dict[int, bytes]] = {}
    for cid, value in chunks.items():
        by_shard.setdefault(int(assign_chunk_ids(spec, [cid]).shard[0]), {})[cid] = value
    for shard, group in by_shard.items():
        blob = encode_shard(spec, group, shard=shard)
        store.write(f"{format_shard_name(spec, shard)}.shard", blob)
        assert list(validate_shard_file(spec, blob, key="s", shard=shard)) == []
    reader = ShardedReader(store, "", spec)
    for cid, value in chunks.items():
        assert reader.read_chunk(cid) == value
    listed = {loc.chunk_id for s in by_shard for loc in reader.iter_chunks(s)}
    assert listed == set(chunks)


@given(st.binary(max_size=2000), st.sampled_from(["raw", "gzip"]))
def test_encodings_round_trip(data: bytes, encoding: str) -> None:
    assert decode_bytes(encode_bytes(data, encoding), encoding) == data  # type: ignore[arg-type]


# -- fuzz: random bytes into every decoder -----------------------------------------------------
@settings(max_examples=300)
@given(specs(max_bits=3), st.binary(max_size=400), st.integers(0, 10**6))
def test_fuzz_index_decoders_raise_only_our_errors(spec: ShardingSpec, blob: bytes, file_size: int) -> None:
    for call in (
        lambda: decode_shard_index(blob, spec, key="f", file_size=file_size),
        lambda: decode_minishard_index(blob, spec, key="f", offset=0, file_size=file_size),
        lambda: list(validate_shard_file(spec, blob, key="f", shard=0)),
        lambda: gunzip(blob),
    ):
        with contextlib.suppress(ShardscopeError):
            call()


@settings(max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
            lambda c: (
                st.lists(c, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "type",
                            "data_type",
                            "num_channels",
                            "scales",
                            "key",
                            "size",
                            "resolution",
                            "chunk_sizes",
                            "encoding",
                            "sharding",
                            "voxel_offset",
                            "@type",
                            "hash",
                            "preshift_bits",
                            "minishard_bits",
                            "shard_bits",
                        ]
                    ),
                    c,
                    max_size=8,
                )
            ),
            max_leaves=30,
        ),
    )
)
def test_fuzz_metadata_parsers_raise_only_our_errors(value: object) -> None:
    blob = value if isinstance(value, bytes) else json.dumps(value).encode()
    for call in (lambda: parse_info(blob), lambda: parse_sharding_spec(value)):
        with contextlib.suppress(ShardscopeError):
            call()


@settings(max_examples=200)
@given(specs(max_bits=2), st.binary(min_size=0, max_size=600))
def test_fuzz_reader_on_random_shard_file(tmp_path_factory, spec: ShardingSpec, blob: bytes) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("fuzz")
    store = LocalByteStore(root)
    store.write(f"{format_shard_name(spec, 0)}.shard", blob)
    reader = ShardedReader(store, "", spec)
    for cid in range(8):
        with contextlib.suppress(ShardscopeError):
            reader.read_chunk(cid)
    with contextlib.suppress(ShardscopeError):
        list(reader.iter_chunks(0))


def test_id_lists_mixing_small_and_large_ids(tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    # numpy turns [5, 2**63] into float64; uint64 segment ids >= 2**63 are valid chunk ids.
    spec = parse_sharding_spec(
        {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 0,
            "hash": "murmurhash3_x86_128",
            "minishard_bits": 1,
            "shard_bits": 1,
        }
    )
    ids = [5, 2**63 + 7, 2**64 - 1]
    by_list, by_array = assign_chunk_ids(spec, ids), assign_chunk_ids(spec, np.array(ids, dtype=np.uint64))
    assert by_list.chunk_ids.tolist() == ids and by_list.shard.tolist() == by_array.shard.tolist()
    store = LocalByteStore(tmp_path_factory.mktemp("mixed"))
    write_shards(store, "", spec, {i: str(i).encode() for i in ids})
    reader = ShardedReader(store, "", spec)
    assert [reader.read_chunk(i) for i in ids] == [str(i).encode() for i in ids]
    assert write_shards(store, "", spec, {}) == []
    with pytest.raises(ArgumentError, match="must be integers"):
        assign_chunk_ids(spec, [1.5, 2**63])


@given(
    st.lists(st.integers(-(2**20), 2**20), min_size=3, max_size=3),
    st.lists(st.integers(1, 300), min_size=3, max_size=3),
    st.data(),
)
def test_unsharded_chunk_names_round_trip(offset: list[int], size: list[int], data: st.DataObject) -> None:
    from napari_shardscope.core.formats.precomputed.info import ScaleInfo, parse_unsharded_chunk_name

    sc = ScaleInfo("s", tuple(size), tuple(offset), (1.0, 1.0, 1.0), ((7, 5, 3),), "raw")  # type: ignore[arg-type]
    grid = [data.draw(st.integers(0, g - 1)) for g in sc.grid_shape]
    name = sc.unsharded_chunk_key(grid).split("/", 1)[1]
    assert parse_unsharded_chunk_name(name) == sc.chunk_bounds(grid)
