"""TensorStore's failures reach the caller as our typed errors, naming the array and the chunk file.

Each format's volume is written, one chunk is damaged on disk (truncated, or its bytes flipped),
and the volume is read through the one door (``open_volume`` -> ``LazyArray``): the read must raise
a :class:`CorruptDataError` whose message names the damaged file, never TensorStore's raw
``ValueError``. The status-code table itself is checked on TensorStore's own message shapes.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
from napari_shardscope.core.errors import (
    ChunkDecodeError,
    CorruptDataError,
    FormatError,
    NotFoundError,
    ShardscopeError,
    StoreError,
    StoreUnreachableError,
    UnsupportedError,
    exit_code_for,
)
from napari_shardscope.core.volumes.opening import open_volume
from tests.volume_cases import FormatCase, write_n5_single, write_precomputed_unsharded, write_zarr3_array


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flip(data: bytes) -> bytes:
    # Flip every byte after a small header, and the first: codec headers and checksums both break.
    return bytes([data[0] ^ 0xFF]) + data[1:20] + bytes(b ^ 0x5A for b in data[20:])


WRITERS: dict[str, Callable[[Path], FormatCase]] = {
    "precomputed": write_precomputed_unsharded, "zarr3": write_zarr3_array, "n5": write_n5_single}
# A raw precomputed chunk has no header or checksum: flipped bytes are valid voxels; only truncation shows.
DAMAGES = [(fmt, damage) for fmt in WRITERS for damage in ("truncate", "flip")
           if not (fmt == "precomputed" and damage == "flip")]


def _first_chunk(case: FormatCase) -> Path:
    files = sorted(p for p in case.path.rglob("*")
                   if p.is_file() and p.name not in ("info", "zarr.json", "attributes.json"))
    return files[0]


@pytest.mark.parametrize(("fmt", "damage"), DAMAGES)
def test_damaged_chunk_read_is_a_typed_error_naming_the_file(tmp_path: Path, fmt: str, damage: str) -> None:
    case = WRITERS[fmt](tmp_path)
    chunk = _first_chunk(case)
    chunk.write_bytes((_truncate if damage == "truncate" else _flip)(chunk.read_bytes()))
    volume = open_volume(case.path)
    with pytest.raises(CorruptDataError) as info:
        np.asarray(volume.levels[0].array)
    assert isinstance(info.value, ChunkDecodeError)
    assert str(chunk) in str(info.value)
    assert exit_code_for(info.value) == 4


def test_damaged_chunk_in_a_scalar_read_is_typed(tmp_path: Path) -> None:
    case = write_n5_single(tmp_path)
    chunk = _first_chunk(case)
    chunk.write_bytes(_truncate(chunk.read_bytes()))
    array = open_volume(case.path).levels[0].array
    with pytest.raises(ChunkDecodeError, match=str(chunk)):
        array[0, 0, 0]


def test_a_missing_metadata_file_after_open_is_not_a_raw_valueerror(tmp_path: Path) -> None:
    case = write_zarr3_array(tmp_path)
    array = open_volume(case.path).levels[0].array
    shutil.rmtree(case.path / "c")  # every chunk gone: zarr reads fill values, which is not an error
    assert np.asarray(array).max() == 0


@pytest.mark.parametrize(("message", "group"), [
    ('DATA_LOSS: Error reading shard entry {1, 1, 1}/{2, 2, 2} in local file "/d/c/0/0/0": Digest mismatch',
     ChunkDecodeError),
    ('FAILED_PRECONDITION: Error reading local file "/d/0/0/0": Unexpected N5 chunk mode: 65280', ChunkDecodeError),
    ('OUT_OF_RANGE: Error reading "s0/0/0/0": short read', ChunkDecodeError),
    ('NOT_FOUND: Error opening "zarr3" driver: Metadata at "x/zarr.json" does not exist', NotFoundError),
    ("UNIMPLEMENTED: codec 'foo' is not registered", UnsupportedError),
    ("UNAVAILABLE: HTTP request failed: Couldn't connect to server", StoreUnreachableError),
    ("DEADLINE_EXCEEDED: Operation timed out after 1000 milliseconds", StoreUnreachableError),
    ("PERMISSION_DENIED: HTTP response code: 403", StoreError),
    ("UNAUTHENTICATED: no credentials", StoreError),
    ("RESOURCE_EXHAUSTED: out of memory", StoreError),
    ("INTERNAL: something", StoreError),
])
def test_each_status_code_has_its_group(message: str, group: type[ShardscopeError]) -> None:
    err = error_from_tensorstore(ValueError(message), where="gs://bucket/array/")
    assert isinstance(err, group)
    assert "gs://bucket/array/" in str(err)


def test_the_file_tensorstore_names_becomes_the_key() -> None:
    err = error_from_tensorstore(
        ValueError('DATA_LOSS: Error reading local file "/d/c/0/0/0": Digest mismatch'), where="/d")
    assert isinstance(err, FormatError)
    assert err.key == "/d/c/0/0/0"
    assert "/d" in str(err)


def test_metadata_errors_while_opening_stay_format_errors() -> None:
    err = error_from_tensorstore(ValueError('INVALID_ARGUMENT: Error parsing object member "shape"'),
                                 where="/d/zarr.json", opening=True)
    assert isinstance(err, FormatError) and not isinstance(err, ChunkDecodeError)


def test_an_error_that_is_ours_passes_through() -> None:
    ours = StoreError("x")
    assert error_from_tensorstore(ours, where="y") is ours


def test_a_damaged_base_chunk_under_a_labelmap_is_typed(tmp_path: Path) -> None:
    from napari_shardscope.core.labelmap.geometry import Box
    from napari_shardscope.core.labelmap.reading import BaseSource

    case = write_zarr3_array(tmp_path)
    chunk = _first_chunk(case)
    chunk.write_bytes(_flip(chunk.read_bytes()))
    base = BaseSource(open_volume(case.path))
    with pytest.raises(ChunkDecodeError, match=str(chunk)):
        base.read(0, Box((0, 0, 0), (4, 8, 8)))


def test_a_bare_decoding_failure_is_corrupt_data_not_a_storage_fault() -> None:
    """TensorStore's sharded reader quotes no status code for a minishard index it cannot decode."""
    from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
    from napari_shardscope.core.errors import ChunkDecodeError

    exc = ValueError('Error reading chunk 3 in minishard 1 in local file "/d/16mm/1.shard": Error decoding '
                     "existing minishard index for minishard 0: Error decoding zlib-compressed data")
    err = error_from_tensorstore(exc, where="file:///d/")
    assert isinstance(err, ChunkDecodeError) and "zlib" in str(err)
