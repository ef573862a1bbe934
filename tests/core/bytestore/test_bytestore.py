"""The byte-store interface over local files and over TensorStore's http kvstore (real range requests)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore import ByteStore, LocalByteStore, TensorStoreByteStore, open_store
from napari_shardscope.core.errors import ArgumentError, DiskFullError, StoreError
from tests.http_range_server import RangeServer


def _fill(root: Path) -> None:
    (root / "sub").mkdir(parents=True, exist_ok=True)
    (root / "a.bin").write_bytes(bytes(range(100)))
    (root / "sub" / "b").write_bytes(b"hello")


def _check_reads(store: ByteStore) -> None:
    assert store.read("a.bin") == bytes(range(100))
    assert store.read_range("a.bin", 10, 20) == bytes(range(10, 20))
    assert store.read_range("a.bin", 95, 120) == bytes(range(95, 100))  # short read at the end, like a file
    assert store.read_suffix("a.bin", 4) == bytes(range(96, 100))
    assert store.read_suffix("a.bin", 1000) == bytes(range(100))
    assert store.read("missing") is None
    assert store.read_range("missing", 0, 10) is None
    assert store.read_suffix("missing", 4) is None
    assert store.read("sub/b") == b"hello"


def test_local_store(tmp_path: Path) -> None:
    _fill(tmp_path)
    store = LocalByteStore(tmp_path)
    _check_reads(store)
    assert store.size("a.bin") == 100 and store.size("missing") is None and store.size("sub") is None
    assert list(store.list()) == ["a.bin", "sub/b"]
    assert list(store.list("sub/")) == ["sub/b"]
    assert store.cheap_size


def test_local_store_counts_bytes(tmp_path: Path) -> None:
    _fill(tmp_path)
    store = LocalByteStore(tmp_path)
    store.read_range("a.bin", 0, 10)
    store.read("sub/b")
    assert (store.stats.bytes_read, store.stats.requests) == (15, 2)


def test_local_store_rejects_escaping_keys(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    with pytest.raises(ArgumentError):
        store.read("../etc/passwd")
    with pytest.raises(ArgumentError):
        store.read_range("a", 5, 2)


def test_atomic_write_keeps_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalByteStore(tmp_path)
    store.write("d/x.shard", b"old")
    assert (tmp_path / "d" / "x.shard").read_bytes() == b"old"

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(DiskFullError, match="disk full") as info:  # typed, naming the file (issue 14)
        store.write("d/x.shard", b"new")
    assert str(tmp_path / "d" / "x.shard") in str(info.value)
    monkeypatch.undo()
    assert (tmp_path / "d" / "x.shard").read_bytes() == b"old"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["x.shard"]  # no temp file left behind


def test_http_store_through_tensorstore(http_root: tuple[Path, RangeServer]) -> None:
    root, server = http_root
    _fill(root)
    store = open_store(server.url)
    assert isinstance(store, TensorStoreByteStore) and not store.cheap_size
    _check_reads(store)
    ranges = [r for p, r in server.requests if p.endswith("a.bin") and r]
    assert "bytes=10-19" in ranges  # real range requests reached the server
    with pytest.raises(StoreError):
        list(store.list())  # HTTP cannot list


def test_open_store_schemes(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path), LocalByteStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalByteStore)
    with pytest.raises(ArgumentError, match="unknown URL scheme 'ftp'"):
        open_store("ftp://example/x")


def test_local_range_reads_past_the_end_allocate_only_what_exists(tmp_path: Path) -> None:
    # A corrupt index may claim any range; pread would allocate the requested count first.
    _fill(tmp_path)
    store = LocalByteStore(tmp_path)
    assert store.read_range("a.bin", 90, 2**40) == bytes(range(90, 100))
    assert store.read_range("a.bin", 0, 2**64) == bytes(range(100))
    assert store.read_range("a.bin", 2**63 + 5, 2**64) == b""


def test_http_range_past_the_end_reads_only_the_part_that_exists(http_root: tuple[Path, RangeServer]) -> None:
    # TensorStore refuses a range the server answers short (OUT_OF_RANGE); the retry must not fetch
    # the whole value, or a corrupt index entry near the end of a large shard downloads the shard.
    root, server = http_root
    blob = os.urandom(200_000)
    (root / "big.shard").write_bytes(blob)
    store = open_store(server.url)
    assert store.read_range("big.shard", 199_000, 10**9) == blob[199_000:]
    assert server.bytes_sent <= 2 * 1000
    assert store.read_range("big.shard", 300_000, 300_016) == b""
    assert store.read_range("missing.shard", 5, 10**9) is None
    assert server.bytes_sent <= 2 * 1000
    assert store.read_suffix("big.shard", 10**6) == blob  # a suffix longer than the value is all of it


@pytest.mark.parametrize("kind", ["local", "tensorstore"])
def test_delete_and_clear_remove_keys_but_not_what_links_point_to(tmp_path: Path, kind: str) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    _fill(root)
    outside.mkdir()
    (outside / "keep.bin").write_bytes(b"not ours")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    store: ByteStore = LocalByteStore(root) if kind == "local" else TensorStoreByteStore(f"file://{root}/")
    store.delete("a.bin")
    store.delete("missing")  # deleting what is not there is no error
    assert store.read("a.bin") is None and store.read("sub/b") == b"hello"
    store.clear()
    assert list(store.list()) == [] and store.read("sub/b") is None
    assert (outside / "keep.bin").read_bytes() == b"not ours"  # a linked directory is unlinked, not emptied
