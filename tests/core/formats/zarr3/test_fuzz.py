"""Fuzzing every Zarr v3 decoder and parser with hypothesis: random bytes, random JSON, and
mutations of valid metadata and shard files. Only ShardscopeError subclasses may come out —
never an IndexError, a numpy error, a zlib error or a crash — and ``validate`` never raises."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.bytestore import ReadStats
from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.formats.zarr3.codecs import decode_chunk, split_codec_chain
from napari_shardscope.core.formats.zarr3.inspector import Zarr3Inspector
from napari_shardscope.core.formats.zarr3.metadata import (
    ArrayMetadata,
    ChunkKeyEncoding,
    CodecSpec,
    parse_array_metadata,
    parse_group_metadata,
    parse_node_metadata,
)
from napari_shardscope.core.formats.zarr3.reader import Zarr3ArrayReader
from napari_shardscope.core.formats.zarr3.sharding import (
    decode_shard_array,
    decode_shard_index,
    find_index_problems,
    parse_sharding_config,
)
from napari_shardscope.core.formats.zarr3.validate import validate_shard_bytes
from napari_shardscope.core.formats.zarr3.writer import write_array

# SHARDSCOPE_FUZZ_EXAMPLES=5000 for a deep run; the default keeps the suite quick.
FUZZ = settings(
    max_examples=int(os.environ.get("SHARDSCOPE_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LE = {"name": "bytes", "configuration": {"endian": "little"}}


class MemoryStore:
    """A dict-backed ByteStore (the protocol is all the format layer may rely on)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self._stats = ReadStats()

    @property
    def url(self) -> str:
        return "memory://"

    @property
    def stats(self) -> ReadStats:
        return self._stats

    @property
    def cheap_size(self) -> bool:
        return True

    def read(self, key: str) -> bytes | None:
        return self.files.get(key)

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        data = self.files.get(key)
        return None if data is None else data[start:end]

    def read_suffix(self, key: str, length: int) -> bytes | None:
        data = self.files.get(key)
        return None if data is None else data[max(0, len(data) - length) :]

    def size(self, key: str) -> int | None:
        data = self.files.get(key)
        return None if data is None else len(data)

    def list(self, prefix: str = "") -> Iterator[str]:
        return iter(sorted(k for k in self.files if k.startswith(prefix)))

    def write(self, key: str, data: bytes) -> None:
        self.files[key] = data

    def delete(self, key: str) -> None:
        self.files.pop(key, None)

    def clear(self) -> None:
        self.files.clear()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)

GOOD: dict[str, Any] = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [5, 6],
    "data_type": "uint16",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [2, 2],
                "codecs": [LE, {"name": "gzip", "configuration": {"level": 1}}],
                "index_codecs": [LE, {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ],
    "dimension_names": ["y", "x"],
    "attributes": {"ome": {"multiscales": [{"datasets": [{"path": "0"}]}]}},
}


def paths_of(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (dict keys and list indexes) into ``doc``."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths_of(v, (*prefix, i))
    return out


GOOD_PATHS = paths_of(GOOD)[1:]


@st.composite
def mutated_metadata(draw: st.DrawFn) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(GOOD_PATHS))
        target = doc
        try:
            for step in path[:-1]:
                target = target[step]
            if draw(st.booleans()) and isinstance(target, dict):
                target.pop(path[-1], None)
            else:
                target[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    return doc


def only_our_errors(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except ShardscopeError:
        return None


@FUZZ
@given(st.binary(max_size=300))
def test_metadata_parsers_on_random_bytes(data: bytes) -> None:
    for parse in (parse_node_metadata, parse_array_metadata, parse_group_metadata):
        only_our_errors(parse, data, key="zarr.json")


@FUZZ
@given(st.one_of(json_values, mutated_metadata()))
def test_metadata_parsers_and_reader_on_random_json(doc: Any) -> None:
    text = json.dumps(doc).encode()
    for parse in (parse_node_metadata, parse_array_metadata, parse_group_metadata):
        only_our_errors(parse, text, key="zarr.json")
    store = MemoryStore()
    store.write("zarr.json", text)
    reader = only_our_errors(Zarr3ArrayReader, store)
    if reader is not None:  # a mutation that is still valid: everything else must work too
        only_our_errors(reader.locate_voxel, [0] * reader.metadata.ndim)
        only_our_errors(lambda: list(reader.list_inner_chunks()))
    inspector = only_our_errors(lambda: Zarr3Inspector(store, parse_node_metadata(text, key="zarr.json")))
    if inspector is not None:
        only_our_errors(inspector.inspect)
        list(inspector.validate())  # validate reports, never raises on bad data


@FUZZ
@given(st.text(max_size=20), st.integers(0, 4))
def test_chunk_key_decoding_on_random_text(key: str, ndim: int) -> None:
    for encoding in (
        ChunkKeyEncoding(),
        ChunkKeyEncoding("default", "."),
        ChunkKeyEncoding("v2", "."),
        ChunkKeyEncoding("v2", "/"),
    ):
        pos = encoding.decode(key, ndim)
        assert pos is None or (len(pos) == ndim and encoding.decode(encoding.encode(pos), ndim) == pos)


CONFIGS = [
    parse_sharding_config(
        CodecSpec(
            "sharding_indexed",
            {
                "chunk_shape": [2, 2],
                "codecs": [LE, *extra],
                "index_codecs": index,
                "index_location": location,
            },
        ),
        (4, 4),
        np.dtype("uint16"),
        key="k",
    )
    for extra in ([], [{"name": "gzip", "configuration": {"level": 1}}], [{"name": "crc32c"}])
    for index in ([LE, {"name": "crc32c"}], [{"name": "bytes", "configuration": {"endian": "big"}}])
    for location in ("start", "end")
]


@FUZZ
@given(st.binary(max_size=200), st.sampled_from(CONFIGS))
def test_shard_decoders_on_random_bytes(data: bytes, config: Any) -> None:
    index = only_our_errors(decode_shard_index, data, config, key="k", offset=0)
    if index is not None:
        for problem in find_index_problems(index, config, len(data) + config.index_size):
            assert problem.message
    only_our_errors(decode_shard_array, data, config, (4, 4), np.dtype("uint16"), np.uint16(0), key="k")


CHAINS = [
    [LE],
    [{"name": "bytes", "configuration": {"endian": "big"}}],
    [LE, {"name": "gzip", "configuration": {"level": 1}}],
    [LE, {"name": "zstd", "configuration": {"level": 1}}],
    [LE, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1, "shuffle": "shuffle", "typesize": 2}}],
    [LE, {"name": "crc32c"}],
    [
        {"name": "transpose", "configuration": {"order": [1, 0]}},
        LE,
        {"name": "crc32c"},
        {"name": "gzip", "configuration": {"level": 1}},
    ],
    [
        {
            "name": "sharding_indexed",
            "configuration": {"chunk_shape": [1, 2], "codecs": [LE], "index_codecs": [LE, {"name": "crc32c"}]},
        }
    ],
]


@FUZZ
@given(st.binary(max_size=200), st.sampled_from(CHAINS))
def test_chunk_decoders_on_random_bytes(data: bytes, chain: list[dict[str, Any]]) -> None:
    codecs = split_codec_chain(
        [CodecSpec(c["name"], c.get("configuration", {})) for c in chain], 2, np.dtype("uint16"), key="k"
    )
    only_our_errors(decode_chunk, data, codecs, (2, 4), np.dtype("uint16"), np.uint16(0), key="k", offset=0)


def valid_dataset(location: str) -> MemoryStore:
    codec = CodecSpec(
        "sharding_indexed",
        {
            "chunk_shape": [2, 2],
            "codecs": [LE, {"name": "gzip", "configuration": {"level": 1}}],
            "index_codecs": [LE, {"name": "crc32c"}],
            "index_location": location,
        },
    )
    meta = ArrayMetadata((5, 6), "uint16", (4, 4), ChunkKeyEncoding(), 0, (codec,))
    store = MemoryStore()
    write_array(store, "", meta, np.arange(30, dtype="uint16").reshape(5, 6) + 1)
    return store


DATASETS = {location: valid_dataset(location) for location in ("start", "end")}


@FUZZ
@given(st.sampled_from(["start", "end"]), st.data())
def test_mutated_shard_files(location: str, data: st.DataObject) -> None:
    store = MemoryStore()
    store.files = dict(DATASETS[location].files)
    key = data.draw(st.sampled_from(sorted(k for k in store.files if k != "zarr.json")))
    blob = bytearray(store.files[key])
    action = data.draw(st.sampled_from(["flip", "truncate", "random", "splice"]))
    if action == "flip":
        for i in data.draw(st.lists(st.integers(0, len(blob) - 1), min_size=1, max_size=4)):
            blob[i] ^= data.draw(st.integers(1, 255))
    elif action == "truncate":
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif action == "random":
        blob = bytearray(data.draw(st.binary(max_size=200)))
    else:
        at = data.draw(st.integers(0, len(blob)))
        blob[at:at] = data.draw(st.binary(min_size=1, max_size=20))
    store.files[key] = bytes(blob)
    reader = Zarr3ArrayReader(store)
    problems = list(validate_shard_bytes(reader, key, bytes(blob)))
    assert all(p.key == key and p.message for p in problems)
    inspector = Zarr3Inspector(store, parse_node_metadata(store.files["zarr.json"], key="zarr.json"))
    all_problems = list(inspector.validate())
    assert [str(p) for p in all_problems] == [str(p) for p in problems]
    for voxel in ([0, 0], [4, 5], [3, 3]):
        only_our_errors(inspector.locate_format_voxel, voxel)
    only_our_errors(lambda: list(inspector.list_chunks()))
    report = inspector.inspect()
    json.dumps(report)
    for grid in ((0, 0), (1, 1), (2, 2)):
        only_our_errors(reader.read_inner_chunk, grid)
    if not problems:  # whatever validate accepts must read without error
        for rec in inspector.list_chunks():
            reader.read_inner_chunk(rec["inner_chunk"])
