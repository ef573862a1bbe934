"""Whole-key reads are bounded before the bytes arrive, on every kind of store (issue 27, item 2).

``read_bounded`` (metadata documents, remote objects), ``ConditionalStore.read_generation`` (a
remote's refs and id counters) and metadata detection (``kvreads.read_keys``) refuse a key over
their limit having read at most one byte of it: a local file by its size (a 5 GiB sparse file),
TensorStore's ``file`` driver (by its size too), HTTP (at most the first window of 64 KiB sent, in one
request) and S3 (moto; one probe byte, then the read).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import tensorstore as ts

from napari_shardscope.core.bytestore import LocalByteStore, TensorStoreByteStore, parse_url, read_bounded
from napari_shardscope.core.bytestore.bounded import FIRST_WINDOW
from napari_shardscope.core.bytestore.conditional import ConditionalStore
from napari_shardscope.core.bytestore.context import shared_context
from napari_shardscope.core.bytestore.kvreads import read_keys
from napari_shardscope.core.errors import FormatError, MetadataError
from tests.http_range_server import RangeServer
from tests.moto_s3 import S3Server, s3, s3_server, serve_moto  # noqa: F401  (fixtures)

LIMIT = 1 << 20
BIG = 48 << 20


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    (root / "small").write_bytes(b"x" * 1000)
    (root / "exact").write_bytes(b"y" * LIMIT)
    with open(root / "big", "wb") as f:  # real bytes: a server or a driver reading it whole would send them
        f.truncate(BIG)
    return root


def _check(store: Any) -> None:
    assert read_bounded(store, "small", LIMIT, "a test value") == b"x" * 1000
    assert read_bounded(store, "exact", LIMIT, "a test value") == b"y" * LIMIT
    assert read_bounded(store, "missing", LIMIT, "a test value") is None
    store.stats.reset()
    with pytest.raises(FormatError, match=r"big.*limit for a test value"):
        read_bounded(store, "big", LIMIT, "a test value")
    assert store.stats.bytes_read <= 1, store.stats.bytes_read


def test_local_store_refuses_a_sparse_file_by_its_size(files: Path) -> None:
    os.truncate(files / "big", 5 << 30)
    _check(LocalByteStore(files))


def test_tensorstore_file_driver(files: Path) -> None:
    os.truncate(files / "big", 5 << 30)
    _check(TensorStoreByteStore(f"file://{files}/", context=shared_context()))


def test_http(files: Path) -> None:
    with open(files / "info", "wb") as f:  # a metadata document over MAX_JSON_BYTES (64 MiB)
        f.truncate(80 << 20)
    server = RangeServer(files)
    try:
        _check(TensorStoreByteStore(server.url, context=shared_context()))
        assert server.bytes_sent < 3 * LIMIT  # small and exact, and the first window of big
        server.requests.clear()
        with pytest.raises(MetadataError, match=r"info.*limit for a metadata document"):
            read_keys(parse_url(server.url), ["info", "zarr.json"], shared_context())  # format detection
        # one request per candidate, each asking for at most the first window: the 80 MiB info is
        # refused having been sent 64 KiB (the server's count may land after the refusal: the Range asked)
        assert sorted(server.requests) == [("/info", f"bytes=0-{FIRST_WINDOW - 1}"),
                                           ("/zarr.json", f"bytes=0-{FIRST_WINDOW - 1}")], server.requests
    finally:
        server.close()


def test_http_reads_a_bounded_value_in_one_request(files: Path) -> None:
    """A value within the first window costs one GET (no probe first); a larger one within the limit two;
    an empty one (which the test server answers with a 206 TensorStore refuses) is still read."""
    (files / "empty").write_bytes(b"")
    server = RangeServer(files)
    try:
        store = TensorStoreByteStore(server.url, context=shared_context())
        assert read_bounded(store, "small", LIMIT, "a test value") == b"x" * 1000
        assert server.requests == [("/small", f"bytes=0-{FIRST_WINDOW - 1}")]
        server.requests.clear()
        assert read_bounded(store, "exact", LIMIT, "a test value") == b"y" * LIMIT
        assert server.requests == [("/exact", f"bytes=0-{FIRST_WINDOW - 1}"), ("/exact", f"bytes=0-{LIMIT - 1}")]
        assert read_bounded(store, "empty", LIMIT, "a test value") == b""
        server.requests.clear()
        keys = ["small", "zarr.json", ".zarray", "attributes.json"]
        assert read_keys(parse_url(server.url), keys, shared_context()) == {
            "small": b"x" * 1000, "zarr.json": None, ".zarray": None, "attributes.json": None}
        assert sorted(p for p, _ in server.requests) == sorted(f"/{k}" for k in keys)  # one request each
    finally:
        server.close()


def test_s3_sizes_by_a_probe_then_reads(files: Path, request: pytest.FixtureRequest) -> None:
    """S3 (and GCS) refuse any range past a value's end and take no header of ours: the real bound
    there is a one-byte probe and then the read, two requests (the reason remote opens on a bucket
    cost one more round trip than over HTTP)."""
    log: list[tuple[str, str, str | None]] = []
    with serve_moto(log=log) as endpoint:
        server = S3Server(endpoint, S3Server(endpoint, "").new_bucket())
        monkeypatch = request.getfixturevalue("monkeypatch")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        url = server.url("probe/")
        store = TensorStoreByteStore(parse_url(url).kvstore, context=shared_context(), url=url)
        store.write("small", b"x" * 1000)
        del log[:]
        assert read_bounded(store, "small", LIMIT, "a test value") == b"x" * 1000
        assert [rng for _, _, rng in log] == [f"bytes={LIMIT}-{LIMIT}", None], log


def test_s3(files: Path, request: pytest.FixtureRequest) -> None:
    server: S3Server = request.getfixturevalue("s3")
    url = server.url("bounded/")
    kv = ts.KvStore.open(parse_url(url).kvstore, context=shared_context()).result()
    for name in ("small", "exact", "big"):
        kv.write(name, (files / name).read_bytes()).result()
    _check(TensorStoreByteStore(parse_url(url).kvstore, context=shared_context(), url=url))


@pytest.mark.parametrize("where", ["file", "s3"])
def test_conditional_reads_are_bounded(files: Path, where: str, request: pytest.FixtureRequest) -> None:
    if where == "file":
        os.truncate(files / "big", 5 << 30)
        store = ConditionalStore(str(files))
    else:
        server: S3Server = request.getfixturevalue("s3")
        url = server.url("cas/")
        store = ConditionalStore(url)
        kv = ts.KvStore.open(parse_url(url).kvstore, context=shared_context()).result()
        for name in ("small", "big"):
            kv.write(name, (files / name).read_bytes()).result()
    assert store.read_generation("small", LIMIT, "a test value").value == b"x" * 1000
    assert store.read_generation("missing", LIMIT, "a test value").value is None
    with pytest.raises(FormatError, match=r"big.*more than 1048576 bytes"):
        store.read_generation("big", LIMIT, "a test value")
