"""LocalByteStore.read_ranges: read_range's answers and refusals, each file resolved and opened once per batch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore import read_ranges
from napari_shardscope.core.bytestore.local import KeptOpenLocalStore, LocalByteStore
from napari_shardscope.core.errors import ArgumentError, NotARegularFileError, OutsideRootError

RANGES = [(0, 10), (5, 5), (190, 400), (300, 400), (0, 1 << 62), (17, 18)]


@pytest.mark.parametrize("cls", [LocalByteStore, KeptOpenLocalStore])
@pytest.mark.parametrize("max_gap", ["store", None, 0, 64])
def test_batch_answers_equal_single_reads(tmp_path: Path, cls: type[LocalByteStore], max_gap: object) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.shard").write_bytes(bytes(range(200)))
    (tmp_path / "d" / "b.shard").write_bytes(bytes(range(100, 0, -1)))
    store = cls(tmp_path)
    requests = [(k, a, b) for k in ("d/a.shard", "d/missing", "d/b.shard") for a, b in RANGES]
    requests.reverse()  # order of answers follows the requests, not the files
    expected = [LocalByteStore(tmp_path).read_range(*r) for r in requests]
    before = store.stats.bytes_read
    assert read_ranges(store, requests, max_gap) == expected  # type: ignore[arg-type]
    assert expected[-1] == bytes(range(10)) and expected[6] is None
    if max_gap in ("store", None):  # uncoalesced: exactly the bytes answered
        assert store.stats.bytes_read - before == sum(len(e) for e in expected if e is not None)


def test_batch_leaves_no_descriptor_open(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 1000)
    store = LocalByteStore(tmp_path)
    before = len(os.listdir("/proc/self/fd"))
    assert store.read_ranges([("a", i, i + 3) for i in range(0, 900, 10)]) == [b"xxx"] * 90
    assert len(os.listdir("/proc/self/fd")) == before


def test_batch_refusals_are_read_ranges(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok").write_bytes(b"fine")
    (root / "link").symlink_to(outside)
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    for cls in (LocalByteStore, KeptOpenLocalStore):
        store = cls(root)
        with pytest.raises(OutsideRootError, match="follow-symlinks"):
            store.read_ranges([("ok", 0, 2), ("link", 0, 3)])
        with pytest.raises(OutsideRootError):
            store.read_ranges([("ok", 0, 2), ("../outside", 0, 3)])
        with pytest.raises(NotARegularFileError):
            store.read_ranges([("fifo", 0, 3)])
        with pytest.raises(NotARegularFileError):
            store.read_ranges([("dir", 0, 3)])
        with pytest.raises(ArgumentError):
            store.read_ranges([("ok", 0, 2), ("ok", 3, 1)])
        assert cls(root, follow_symlinks=True).read_ranges([("link", 1, 4), ("ok", 0, 2)]) == [b"ecr", b"fi"]
