"""compresso chunks with lying header fields, read the ways a user reads them (issue 27).

A ``location_size`` of 17 instead of 4080 killed ``shardscope validate``, ``open_volume(...).read()``
and the viewer's chunk reader with a segmentation fault; a lying ``id_size``, ``xstep`` or
``value_size`` decoded to thousands of wrong voxels and ``validate`` said "no problems found". Each
case here runs in a child process (the CLI as a subprocess, a read in ``python -c``), so a crash is
a failed test and not a dead pytest.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats.precomputed.compresso_stream import (
    FIELD_OFFSETS,
    check_compresso_stream,
    parse_compresso_header,
)
from napari_shardscope.core.volumes import open_volume
from tests import precomputed_data
from tests.fuzz.decoders import _label_volume


def write_compresso_volume(root: Path, *, sharded: bool) -> np.ndarray:
    """A 64 x 48 x 16 uint64 segmentation in four 32 x 24 x 16 compresso chunks (raw data encoding when sharded)."""
    return precomputed_data.write_compresso_volume(root, sharded=sharded, size=(64, 48, 16), chunk=(32, 24, 16))


def lie(root: Path, lies: list[tuple[str, int]]) -> int:
    """Overwrite one field of each compresso stream in the dataset's data files, in turn; how many lies were told."""
    widths = {"id_size": 8, "location_size": 8, "value_size": 4, "sx": 2, "sy": 2, "sz": 2}
    todo = list(lies)
    for path in sorted((root / "s0").iterdir()):
        data = bytearray(path.read_bytes())
        at = data.find(b"cpso")
        while at >= 0 and todo:
            field, value = todo.pop(0)
            width = widths.get(field, 1)
            data[at + FIELD_OFFSETS[field]:at + FIELD_OFFSETS[field] + width] = value.to_bytes(width, "little")
            at = data.find(b"cpso", at + 4)
        path.write_bytes(bytes(data))
    return len(lies) - len(todo)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)


READ = ("import sys; from napari_shardscope.core.volumes import open_volume; "
        "from napari_shardscope.core.errors import ShardscopeError\n"
        "try:\n    open_volume(sys.argv[1]).levels[0].array.read()\n"
        "except ShardscopeError as exc:\n    print('typed', type(exc).__name__, exc)\nelse:\n    print('read')")

CHUNK_READER = ("import sys; from napari_shardscope.core.formats import open_dataset\n"
                "from napari_shardscope.core.errors import ShardscopeError\n"
                "(spec,) = open_dataset(sys.argv[1]).volume_specs()\n"
                "src = spec.levels[0].chunk_source\n"
                "try:\n    src.read_chunk((0, 0, 0, 0))\n"
                "except ShardscopeError as exc:\n    print('typed', type(exc).__name__, exc)\nelse:\n    print('read')")


LIES = {True: [("location_size", 17), ("id_size", 3), ("xstep", 8), ("value_size", 2)],
        False: [("location_size", 17), ("connectivity", 6), ("format_version", 0), ("zstep", 2)]}


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "unsharded"])
def test_lying_header_fields_are_validate_findings_and_typed_read_errors(tmp_path: Path, sharded: bool) -> None:
    root = tmp_path / "seg"
    labels = write_compresso_volume(root, sharded=sharded)
    np.testing.assert_array_equal(open_volume(root).levels[0].array.read(), labels.T)
    assert lie(root, LIES[sharded]) == 4  # one per chunk

    checked = run("-m", "napari_shardscope", "validate", str(root))
    assert checked.returncode == 1, (checked.returncode, checked.stderr[-2000:])  # 139 was the segfault
    problems = [line for line in checked.stdout.splitlines() if "compresso" in line]
    assert len(problems) == 4, checked.stdout
    read = run("-c", READ, str(root))
    assert read.returncode == 0, (read.returncode, read.stderr[-2000:])
    assert read.stdout.startswith("typed ChunkDecodeError") and "compresso" in read.stdout, read.stdout


def test_the_viewer_chunk_reader_refuses_the_lying_chunk(tmp_path: Path) -> None:
    root = tmp_path / "seg"
    write_compresso_volume(root, sharded=True)
    lie(root, [("location_size", 17)])
    read = run("-c", CHUNK_READER, str(root))
    assert read.returncode == 0, (read.returncode, read.stderr[-2000:])
    assert read.stdout.startswith("typed ChunkDecodeError"), read.stdout


def test_errors_name_the_field_and_its_byte_offset() -> None:
    import compresso

    labels = _label_volume((32, 24, 8), seed=3)
    good = bytes(compresso.compress(labels))
    assert parse_compresso_header(good, key="k").size == (32, 24, 8)
    check_compresso_stream(good, (32, 24, 8), 8, key="k")
    for field, value, offset, words in (
            ("connectivity", 5, FIELD_OFFSETS["connectivity"], "connectivity"),
            ("data_width", 3, FIELD_OFFSETS["data_width"], "data width"),
            ("zstep", 0, FIELD_OFFSETS["zstep"], "zstep is 0"),
            ("format_version", 2, FIELD_OFFSETS["format_version"], "format version 2")):
        bad = bytearray(good)
        bad[FIELD_OFFSETS[field]] = value
        with pytest.raises(ChunkDecodeError, match=words) as info:
            check_compresso_stream(bytes(bad), (32, 24, 8), 8, key="s0/chunk")
        assert (info.value.key, info.value.offset) == ("s0/chunk", offset)
    # one id fewer and one location more: the sections still add up, the component count does not
    head = parse_compresso_header(good, key="k")
    bad = bytearray(good)
    struct.pack_into("<Q", bad, FIELD_OFFSETS["id_size"], head.id_size - 1)
    struct.pack_into("<Q", bad, FIELD_OFFSETS["location_size"], head.location_size + 1)
    with pytest.raises(ChunkDecodeError, match=rf"id_size {head.id_size - 1}, but its boundaries hold \d+ "
                                               "connected components") as info:
        check_compresso_stream(bytes(bad), (32, 24, 8), 8, key="s0/chunk")
    assert info.value.offset == FIELD_OFFSETS["id_size"]
    with pytest.raises(ChunkDecodeError, match=r"chunk of \[32, 24, 8\] voxels where the scale needs"):
        check_compresso_stream(good, (32, 24, 9), 8, key="k")
    with pytest.raises(ChunkDecodeError, match="8-byte labels where"):
        check_compresso_stream(good, (32, 24, 8), 4, key="k")
    with pytest.raises(ChunkDecodeError, match="shorter than its 36-byte header"):
        check_compresso_stream(good[:20], (32, 24, 8), 8, key="k")
    with pytest.raises(ChunkDecodeError, match="does not start with"):
        check_compresso_stream(b"xxxx" + good[4:], (32, 24, 8), 8, key="k")


def test_location_codes_that_point_outside_the_chunk_are_refused() -> None:
    # The 5 ("copy the voxel above") code on the last slice: the C++ decoder read past its output.
    import compresso

    labels = np.zeros((8, 8, 2), dtype=np.uint32, order="F")
    labels[2:5, 2:5, 1] = 9
    labels[3, 3, 1] = 4000000000  # a label that needs a location code
    data = bytearray(compresso.compress(labels, random_access_z_index=False))
    head = parse_compresso_header(bytes(data), key="k")
    start = 36 + head.id_size * 4 + head.value_size * head.window_width
    codes = np.frombuffer(bytes(data[start:start + 4 * head.location_size]), "<u4")
    assert codes.size and (codes >= 7).any()
    data[start:start + 4] = (5).to_bytes(4, "little")  # first code: copy from the slice above, from slice 0
    out = check_or_error(bytes(data), labels.shape)
    assert out is None or "location code" in out


def check_or_error(data: bytes, extent: tuple[int, int, int]) -> str | None:
    try:
        check_compresso_stream(data, extent, 4, key="k")
    except ChunkDecodeError as exc:
        return exc.message
    return None


def test_a_label_announced_by_the_last_entry_is_missing() -> None:
    import compresso

    labels = np.full((8, 8, 1), 7, dtype=np.uint8, order="F")
    labels[4, 4, 0] = 254  # within 7 of the maximum: stored after a 6
    data = bytes(compresso.compress(labels, random_access_z_index=False))
    head = parse_compresso_header(data, key="k")
    start = 36 + head.id_size + head.value_size * head.window_width
    codes = data[start:start + head.location_size]
    assert codes[-2:] == bytes([6, 254])
    check_compresso_stream(data, (8, 8, 1), 1, key="k")
    # drop the label: one entry fewer, the header says so; the windows section starts one byte earlier
    cut = bytearray(data[:start + head.location_size - 1] + data[start + head.location_size:])
    cut[27:35] = (head.location_size - 1).to_bytes(8, "little")
    with pytest.raises(ChunkDecodeError, match=r"code 6 is the last entry|codes|windows"):
        check_compresso_stream(bytes(cut), (8, 8, 1), 1, key="k")


def test_an_unchanged_header_with_damaged_sections_never_decodes_silently_wrong(tmp_path: Path) -> None:
    # struct-level sanity: the checker accepts what the writer wrote for every format variant it writes.
    import compresso

    for kw in ({}, {"random_access_z_index": False}, {"steps": (8, 8, 1)}, {"connectivity": 6}):
        for dtype in ("uint8", "uint16", "uint32", "uint64"):
            labels = _label_volume((20, 17, 5), seed=5, dtype=dtype, huge=True)
            data = bytes(compresso.compress(labels, **kw))
            head = check_compresso_stream(data, (20, 17, 5), np.dtype(dtype).itemsize, key="k")
            assert head.id_size >= 1
            assert struct.unpack_from("<Q", data, 15)[0] == head.id_size
