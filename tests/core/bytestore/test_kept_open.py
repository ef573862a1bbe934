"""KeptOpenLocalStore: the same answers and the same refusals as LocalByteStore, one descriptor per file."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore import local
from napari_shardscope.core.bytestore.local import KeptOpenLocalStore, LocalByteStore
from napari_shardscope.core.errors import ArgumentError, NotARegularFileError, OutsideRootError


def test_reads_match_the_plain_store_and_files_are_opened_once(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit is per process: stores that earlier tests of this worker keep alive (cached datasets) may
    # hold all of it, and then this store would (rightly) keep nothing open. Leave it room for its file.
    gc.collect()
    monkeypatch.setattr(local, "MAX_KEPT_OPEN", local._kept_open[0] + 8)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.shard").write_bytes(bytes(range(200)))
    plain, kept = LocalByteStore(tmp_path), KeptOpenLocalStore(tmp_path)
    for start, end in [(0, 10), (5, 5), (190, 400), (300, 400), (0, 1 << 62)]:
        assert kept.read_range("d/a.shard", start, end) == plain.read_range("d/a.shard", start, end)
    assert kept.read_range("d/missing", 0, 4) is None
    with pytest.raises(ArgumentError):
        kept.read_range("d/a.shard", 5, 2)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        kept.read_range("d/a.shard", 3, 9)
    assert len(os.listdir("/proc/self/fd")) == before
    gc.collect()  # stores of earlier tests awaiting collection would release their descriptors below
    count = local._kept_open[0]
    del kept
    gc.collect()
    assert local._kept_open[0] == count - 1


def test_refusals_are_the_plain_stores(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    os.mkfifo(root / "fifo")
    kept = KeptOpenLocalStore(root)
    with pytest.raises(OutsideRootError):
        kept.read_range("link", 0, 6)
    with pytest.raises(NotARegularFileError):
        kept.read_range("fifo", 0, 6)
    with pytest.raises(OutsideRootError):
        kept.read_range("../outside", 0, 6)


def test_sizes_match_the_plain_store_and_keep_the_file_for_its_reads(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.shard").write_bytes(bytes(range(200)))
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path.parent)
    plain, kept = LocalByteStore(tmp_path), KeptOpenLocalStore(tmp_path)
    for key in ("d/a.shard", "d", "d/missing", "missing/x"):
        assert kept.size(key) == plain.size(key)
    for store in (plain, kept):
        with pytest.raises(NotARegularFileError):
            store.size("fifo")
        with pytest.raises(OutsideRootError):
            store.size("link/x")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):  # the size asked opened the file once; its reads use that descriptor
        assert kept.read_range("d/a.shard", 190, 210) == bytes(range(190, 200))
        assert kept.size("d/a.shard") == 200
    assert len(os.listdir("/proc/self/fd")) == before
