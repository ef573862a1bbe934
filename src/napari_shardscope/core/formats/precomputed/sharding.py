"""The ``neuroglancer_uint64_sharded_v1`` sharding specification and its chunk-id hash.

A sharded precomputed dataset maps each uint64 chunk id to a shard file and a minishard inside
it: ``hashed = hash(chunk_id >> preshift_bits)``, minishard = bits ``[0, minishard_bits)`` of
``hashed``, shard = bits ``[minishard_bits, minishard_bits + shard_bits)``. Everything here works
on numpy arrays of ids, because the shard browser and ``locate`` benchmarks map millions of ids.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import mmh3
import numpy as np
import numpy.typing as npt

from napari_shardscope.core.encoding import ENCODINGS, Encoding
from napari_shardscope.core.errors import ArgumentError, MetadataError

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
HASHES = ("identity", "murmurhash3_x86_128")
HashName = Literal["identity", "murmurhash3_x86_128"]

U64 = npt.NDArray[np.uint64]
_U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class ShardingSpec:
    """A validated ``sharding`` member of a precomputed ``info`` (or skeleton/mesh ``info``)."""

    preshift_bits: int
    hash: HashName
    minishard_bits: int
    shard_bits: int
    minishard_index_encoding: Encoding = "raw"
    data_encoding: Encoding = "raw"

    @property
    def num_shards(self) -> int:
        return 1 << self.shard_bits

    @property
    def num_minishards(self) -> int:
        return 1 << self.minishard_bits

    @property
    def shard_index_size(self) -> int:
        """Bytes of the fixed-size shard index at the head of every shard file."""
        return 16 * self.num_minishards

    def to_json(self) -> dict[str, Any]:
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }


def parse_sharding_spec(obj: object, *, key: str = "info", where: str = "sharding") -> ShardingSpec:
    """Validate a ``sharding`` JSON object against the spec.

    Parameters
    ----------
    obj
        The decoded JSON value of the ``sharding`` member.
    key
        The file it came from, for error messages.
    where
        The JSON path of the member, for error messages (e.g. ``scales[1].sharding``).

    Raises
    ------
    MetadataError
        Naming the field and the offending value.
    """
    if not isinstance(obj, Mapping):
        raise MetadataError(f"{where} must be a JSON object, got {obj!r}", key=key)
    type_ = obj.get("@type")
    if type_ != SHARDING_TYPE:
        raise MetadataError(f'{where}["@type"] must be "{SHARDING_TYPE}", got {type_!r}', key=key)

    def bits(name: str, low: int, high: int) -> int:
        value = obj.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise MetadataError(f"{where}.{name} must be an integer, got {value!r}", key=key)
        if not low <= value <= high:
            raise MetadataError(f"{where}.{name} must be in [{low}, {high}], got {value}", key=key)
        return value

    preshift = bits("preshift_bits", 0, 64)
    minishard_bits = bits("minishard_bits", 0, 64)
    shard_bits = bits("shard_bits", 0, 64)
    if minishard_bits + shard_bits > 64:
        raise MetadataError(
            f"{where}: minishard_bits + shard_bits must be <= 64, got {minishard_bits} + {shard_bits}",
            key=key,
        )
    hash_ = obj.get("hash")
    if hash_ not in HASHES:
        raise MetadataError(f"{where}.hash must be one of {list(HASHES)}, got {hash_!r}", key=key)

    def encoding(name: str) -> Encoding:
        value = obj.get(name, "raw")
        if value not in ENCODINGS:
            raise MetadataError(f"{where}.{name} must be one of {list(ENCODINGS)}, got {value!r}", key=key)
        return cast(Encoding, value)

    return ShardingSpec(
        preshift_bits=preshift,
        hash=cast(HashName, hash_),
        minishard_bits=minishard_bits,
        shard_bits=shard_bits,
        minishard_index_encoding=encoding("minishard_index_encoding"),
        data_encoding=encoding("data_encoding"),
    )


def as_chunk_ids(ids: object) -> U64:
    """Coerce ids (an int, a sequence or an array) to a 1-D uint64 array, rejecting negatives."""
    if isinstance(ids, np.ndarray) and ids.dtype == np.uint64:
        return ids.reshape(-1)
    arr = np.asarray(ids)
    if arr.dtype.kind == "f" and not isinstance(ids, np.ndarray):
        arr = np.asarray(ids, dtype=object)  # numpy makes float64 of ints mixing < 2**63 and >= 2**63
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64).reshape(-1)
    if arr.dtype.kind == "O":
        values = arr.reshape(-1).tolist()
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
            raise ArgumentError(f"chunk ids must be integers, got {ids!r}")
        try:
            return np.asarray(values, dtype=np.uint64)
        except (OverflowError, ValueError) as exc:
            raise ArgumentError(f"chunk ids must be integers in [0, 2**64), got {ids!r}") from exc
    if arr.dtype.kind == "i":
        if arr.size and int(arr.min()) < 0:
            raise ArgumentError(f"chunk ids must be non-negative, got {int(arr.min())}")
        return arr.astype(np.uint64).reshape(-1)
    raise ArgumentError(f"chunk ids must be integers, got dtype {arr.dtype}")


def shift_right(ids: U64, bits: int) -> U64:
    """``ids >> bits`` for 0 <= bits <= 64 (numpy's shift by 64 is undefined; the spec allows it)."""
    if bits >= 64:
        return np.zeros_like(ids)
    return ids >> np.uint64(bits)


def low_bits(values: U64, bits: int) -> U64:
    """Bits ``[0, bits)`` of each value (0 <= bits <= 64)."""
    if bits >= 64:
        return values.copy()
    return values & np.uint64((1 << bits) - 1)


def murmurhash3_x86_128_low64(values: U64) -> U64:
    """MurmurHash3_x86_128 (seed 0) of each value's 8 little-endian bytes; the low 8 bytes, LE.

    The hash runs in the ``mmh3`` C extension; the loop only slices the packed buffer.
    """
    buf = np.ascontiguousarray(values, dtype="<u8").tobytes()
    view = memoryview(buf)
    digest = mmh3.mmh3_x86_128_digest
    packed = b"".join([digest(view[i : i + 8], 0) for i in range(0, len(buf), 8)])
    return np.frombuffer(packed, dtype="<u8")[::2].astype(np.uint64)


def hash_chunk_ids(spec: ShardingSpec, ids: object) -> U64:
    """The hashed chunk ids: ``hash(chunk_id >> preshift_bits)``."""
    shifted = shift_right(as_chunk_ids(ids), spec.preshift_bits)
    if spec.hash == "identity":
        return shifted
    return murmurhash3_x86_128_low64(shifted)


@dataclass(frozen=True)
class ShardAssignment:
    """Where a batch of chunk ids live: parallel arrays of hashed id, shard and minishard."""

    chunk_ids: U64
    hashed: U64
    shard: U64
    minishard: U64


def assign_chunk_ids(spec: ShardingSpec, ids: object) -> ShardAssignment:
    """Map chunk ids to (hashed id, shard number, minishard number), vectorised."""
    chunk_ids = as_chunk_ids(ids)
    hashed = hash_chunk_ids(spec, chunk_ids)
    minishard = low_bits(hashed, spec.minishard_bits)
    shard = low_bits(shift_right(hashed, spec.minishard_bits), spec.shard_bits)
    return ShardAssignment(chunk_ids, hashed, shard, minishard)


def format_shard_name(spec: ShardingSpec, shard: int) -> str:
    """Lowercase hex shard number zero-padded to ``ceil(shard_bits / 4)`` digits (no suffix)."""
    if not 0 <= shard < spec.num_shards:
        raise ArgumentError(f"shard {shard} out of range [0, {spec.num_shards})")
    return format(shard, "x").zfill(math.ceil(spec.shard_bits / 4))


def parse_shard_name(spec: ShardingSpec, name: str) -> int | None:
    """The shard number of a ``<shard>.shard`` / ``.index`` / ``.data`` file name, or ``None``."""
    stem, dot, suffix = name.rpartition(".")
    if not dot or suffix not in ("shard", "index", "data"):
        return None
    width = math.ceil(spec.shard_bits / 4)
    if len(stem) != max(width, 1) or stem != stem.lower():
        return None
    try:
        number = int(stem, 16)
    except ValueError:
        return None
    return number if number < spec.num_shards else None
