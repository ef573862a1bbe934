"""Mutation log records: wire format round trip, the fast delta-only decoder, damaged records."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.errors import FormatError, ShardscopeError
from napari_shardscope.core.labelmap.bodymap import MapDelta
from napari_shardscope.core.labelmap.mutations import (
    MAGIC,
    OPERATIONS,
    BlockChange,
    Mutation,
    MutationLogError,
    decode_delta,
)

ids = st.integers(1, 2**64 - 2)
rows = st.lists(st.tuples(ids, st.none() | ids, st.none() | ids), max_size=6).map(tuple)
deltas = st.builds(MapDelta, rows, rows, rows)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
args = st.dictionaries(st.text(min_size=1, max_size=8), json_scalars | st.lists(json_scalars, max_size=4), max_size=4)
mutations = st.builds(
    Mutation,
    mutation_id=st.integers(1, 2**63),
    operation=st.sampled_from(OPERATIONS),
    args=args,
    user=st.text(max_size=12),
    time=st.floats(0, 2e9, allow_nan=False),
    delta=deltas,
    blocks=st.lists(st.builds(BlockChange, st.integers(0, 255),
                              st.tuples(*(st.integers(0, 2**32 - 1),) * 3)), max_size=4).map(tuple),
    bodies=st.lists(ids, max_size=4).map(tuple),
    supervoxels=st.lists(ids, max_size=4).map(tuple),
    target=st.none() | st.integers(1, 2**63),
)


@given(mutations)
def test_round_trip(m: Mutation) -> None:
    data = m.to_bytes()
    assert data.startswith(MAGIC)
    assert Mutation.from_bytes(data) == m
    assert decode_delta(data) == m.delta


def test_delta_stays_binary() -> None:
    # A cleave of many supervoxels: the delta is 24 bytes a row, not JSON.
    delta = MapDelta(explicit=tuple((sv, None, 7) for sv in range(1, 10_001)))
    m = Mutation(1, "cleave", {"body": 3}, "me", 0.0, delta)
    data = m.to_bytes()
    assert len(data) < 24 * 10_000 + 1_000
    assert Mutation.from_bytes(data).delta == delta


def _header(data: bytes) -> dict[str, object]:
    (length,) = struct.unpack_from("<I", data, 5)
    return dict(json.loads(data[9:9 + length]))


def _with_header(m: Mutation, **changes: object) -> bytes:
    data = m.to_bytes()
    (length,) = struct.unpack_from("<I", data, 5)
    head = _header(data)
    head.update(changes)
    text = json.dumps(head).encode()
    return data[:5] + struct.pack("<I", len(text)) + text + data[9 + length:]


@pytest.mark.parametrize("change", [{"op": "rename"}, {"id": "x"}, {"blocks": [[1, 2]]}, {"args": [1]}])
def test_bad_header_fields(change: dict[str, object]) -> None:
    m = Mutation(5, "merge", {"target": 1, "others": [2]}, "me", 1.0, MapDelta(parent=((2, None, 1),)))
    with pytest.raises(MutationLogError, match="malformed record"):
        Mutation.from_bytes(_with_header(m, **change))


def test_damaged_records() -> None:
    m = Mutation(5, "merge", {"target": 1, "others": [2]}, "me", 1.0, MapDelta(parent=((2, None, 1),)))
    data = m.to_bytes()
    cases = [(b"", "truncated"), (b"XXXX" + data[4:], "bad magic"), (data[:4] + b"\x02" + data[5:], "version"),
             (data[:12], "header truncated"), (data[:-3], "malformed")]
    for bad, match in cases:
        with pytest.raises(MutationLogError, match=match):
            Mutation.from_bytes(bad)
    with pytest.raises(MutationLogError, match="malformed map delta"):
        decode_delta(data[:-3])
    with pytest.raises(MutationLogError) as info:
        Mutation.from_bytes(data[:12], key="log of v1")
    assert isinstance(info.value, FormatError) and info.value.key == "log of v1"


@given(st.binary(max_size=120))
def test_decoders_never_crash(blob: bytes) -> None:
    for decode in (Mutation.from_bytes, decode_delta):
        with contextlib.suppress(ShardscopeError):
            decode(MAGIC + b"\x01" + blob)
        with contextlib.suppress(ShardscopeError):
            decode(blob)
