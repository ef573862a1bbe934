"""``serve`` streams every body and reads ``Range`` as RFC 9110 says, over real HTTP on 127.0.0.1.

A sparse 3 GiB file (``truncate``: no disk used) is served whole, by range, with ``bytes=0-``, with
several ranges, with malformed ranges and with 5,000-digit numbers: every answer has the right
status, ``Content-Length`` and bytes, and the server process's peak memory stays a few MiB above
where it started (it used to read the whole file first: 3.1 GiB, or a 500 under a memory limit).
The file lies in RAM where the system has a tmpfs (``tests/sparse_files.py``): its holes then read
without the page-cache zeroing a disk file system does (about 6 CPU s for a whole read on ext4).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import select
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.serve.bodies import PIECE, probe_size
from napari_shardscope.core.serve.ranges import MAX_DIGITS, MAX_HEADER, ByteRangeSpec, parse_range
from napari_shardscope.core.serve.server import CONNECTION_THREAD, ShardServer, StoreMount
from tests.core.cli.test_flush import buffered_env
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.sparse_files import sparse_scratch

#: 3 GiB and a few bytes (an odd length: off-by-one errors at the end show).
BIG = (3 << 30) + 7
#: Bytes written into the sparse file, by offset (the rest reads as zeros).
MARKS = {0: b"FIRST-BYTES-0123", (3 << 29) + 5: b"MIDDLE-OF-3GIB!!", BIG - 16: b"LAST-16-BYTES-XY"}
#: How much more than at start the server's peak resident memory may grow while serving (a whole
#: read of the file adds 3 GiB; streaming adds one 1 MiB piece per connection).
RSS_GROWTH_LIMIT = 96 << 20
HUGE = "9" * 5000


def sparse_big_file(path: Path) -> Path:
    with open(path, "wb") as fh:
        for offset, mark in MARKS.items():
            fh.seek(offset)
            fh.write(mark)
        fh.truncate(BIG)
    return path


def expected(start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of the sparse file (only for small spans)."""
    out = bytearray(end - start)
    for offset, mark in MARKS.items():
        lo, hi = max(start, offset), min(end, offset + len(mark))
        if lo < hi:
            out[lo - start:hi - start] = mark[lo - offset:hi - offset]
    return bytes(out)


class Answer:
    """Status, headers and (the start of) the body of one response; the connection is closed after it."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes, total: int) -> None:
        self.status, self.headers, self.body, self.total = status, headers, body, total

    @property
    def length(self) -> int:
        return int(self.headers["content-length"])


def fetch(port: int, path: str, headers: dict[str, str] | None = None, *, method: str = "GET",
          keep: int = 1 << 16, read_all: bool = True) -> Answer:
    """One request; keeps the first ``keep`` bytes of the body, reads (and counts) all of it or stops early.

    Stopping early closes the connection mid-body: a client that goes away, which the server must take calmly.
    """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        head = {k.lower(): v for k, v in resp.getheaders()}
        kept, total = bytearray(), 0
        while True:
            piece = resp.read(1 << 20) if method != "HEAD" else b""
            if not piece:
                break
            if len(kept) < keep:
                kept += piece[: keep - len(kept)]
            total += len(piece)
            if not read_all and total >= keep:
                break
        return Answer(resp.status, head, bytes(kept), total)
    finally:
        conn.close()


# -- the Range header, as a function -----------------------------------------------------------------
@pytest.mark.parametrize(("header", "want"), [
    ("bytes=0-9", ByteRangeSpec(0, 9)),
    ("bytes=5-", ByteRangeSpec(5, None)),
    ("bytes=-16", ByteRangeSpec(None, 16)),
    ("BYTES = 3-4 ", ByteRangeSpec(3, 4)),
    ("bytes=0-0,", ByteRangeSpec(0, 0)),  # an empty list element is no range
    ("bytes=0-1,5-9", None),  # several ranges: the whole value
    ("bytes=5-2", None), ("bytes=-", None), ("bytes=a-b", None), ("items=0-1", None), ("bytes 0-1", None),
    ("bytes=" + HUGE + "-", None), ("bytes=0-" + HUGE, None), ("bytes=-" + HUGE, None),
    ("bytes=0-" + "9" * (MAX_DIGITS + 1), None), ("bytes=0-1" + " " * MAX_HEADER, None),
    ("bytes=0-" + "9" * MAX_DIGITS, ByteRangeSpec(0, int("9" * MAX_DIGITS))),
    ("", None), ("bytes=\x00-1", None), ("bytes=１-2", None),  # a full-width digit is no DIGIT
])
def test_range_headers_are_read_as_rfc_9110_says(header: str, want: ByteRangeSpec | None) -> None:
    assert parse_range(header) == want


def test_if_range_and_satisfiability() -> None:
    assert parse_range("bytes=0-9", if_range='"etag"') is None  # no validator of ours can match
    assert ByteRangeSpec(0, 9).resolve(5) == (0, 5)
    assert ByteRangeSpec(5, None).resolve(5) is None
    assert ByteRangeSpec(None, 0).resolve(5) is None and ByteRangeSpec(None, 9).resolve(5) == (0, 5)
    assert ByteRangeSpec(None, 1).resolve(0) is None and ByteRangeSpec(0, 0).resolve(0) is None


# -- in-process: statuses and bodies -----------------------------------------------------------------
@pytest.fixture
def big_served() -> Iterator[tuple[ShardServer, Path]]:
    with sparse_scratch("big-served-") as scratch:
        root = scratch / "ds"
        root.mkdir()
        sparse_big_file(root / "big")
        (root / "empty").write_bytes(b"")
        (root / "small").write_bytes(bytes(range(256)) * 3)
        with ShardServer() as server:
            server.mount("data/ds", StoreMount(open_store(str(root))))
            yield server, root


@pytest.fixture
def server_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG, logger="napari_shardscope.core.serve")
    yield caplog
    for record in caplog.records:  # a client's input never costs a traceback or a multi-line record
        assert record.exc_info is None, record.getMessage()
        assert "\n" not in record.getMessage() and "Traceback" not in record.getMessage()
        assert record.levelno < logging.WARNING, record.getMessage()


def test_ranges_of_a_3_gib_file(big_served: tuple[ShardServer, Path], server_log: pytest.LogCaptureFixture) -> None:
    server, _ = big_served
    port, path = server.port, "/data/ds/big"
    for header, start, end in [("bytes=0-15", 0, 16), (f"bytes={BIG - 20}-{BIG + 1000}", BIG - 20, BIG),
                               ("bytes=-16", BIG - 16, BIG), (f"bytes={(3 << 29)}-", 3 << 29, BIG),
                               (f"bytes=0-{'9' * MAX_DIGITS}", 0, BIG)]:
        got = fetch(port, path, {"Range": header}, keep=64, read_all=end - start <= 64)
        assert got.status == 206, header
        assert got.headers["content-range"] == f"bytes {start}-{end - 1}/{BIG}", header
        assert got.length == end - start
        assert got.body == expected(start, min(end, start + 64)), header
    for header in (f"bytes={BIG}-", f"bytes={BIG}-{BIG + 5}", "bytes=-0"):  # unsatisfiable
        got = fetch(port, path, {"Range": header})
        assert (got.status, got.headers["content-range"], got.length, got.total) == (416, f"bytes */{BIG}", 0, 0)
    for header in ("bytes=0-1,5-9", "bytes=5-2", "bytes=x", "lines=0-1", f"bytes={HUGE}-{HUGE}", f"bytes=-{HUGE}",
                   "bytes=0-" + "1" * 300):  # ignored: the whole file, streamed (stopped after 2 MiB)
        got = fetch(port, path, {"Range": header}, keep=2 * PIECE, read_all=False)
        assert (got.status, got.length, "content-range" in got.headers) == (200, BIG, False), header
        assert got.body[:16] == MARKS[0] and got.total >= 2 * PIECE
    got = fetch(port, path, {"Range": "bytes=0-15", "If-Range": '"v1"'}, keep=16, read_all=False)
    assert (got.status, got.length) == (200, BIG)
    got = fetch(port, path, method="HEAD")
    assert (got.status, got.length, got.total, got.headers["accept-ranges"]) == (200, BIG, 0, "bytes")
    got = fetch(port, path, {"Range": "bytes=-16"}, method="HEAD")
    assert (got.status, got.length, got.headers["content-range"]) == (206, 16, f"bytes {BIG - 16}-{BIG - 1}/{BIG}")


def test_small_and_empty_files(big_served: tuple[ShardServer, Path], server_log: pytest.LogCaptureFixture) -> None:
    server, root = big_served
    data = (root / "small").read_bytes()
    got = fetch(server.port, "/data/ds/small")
    assert (got.status, got.length, got.body) == (200, len(data), data)
    got = fetch(server.port, "/data/ds/small", {"Range": "bytes=700-"})
    assert (got.status, got.body, got.headers["content-range"]) == (206, data[700:], f"bytes 700-767/{len(data)}")
    got = fetch(server.port, "/data/ds/empty")
    assert (got.status, got.length, got.body) == (200, 0, b"")
    for header in ("bytes=0-0", "bytes=-5", "bytes=0-"):
        got = fetch(server.port, "/data/ds/empty", {"Range": header})
        assert (got.status, got.headers["content-range"]) == (416, "bytes */0")


def test_one_slow_client_does_not_hold_up_others_and_connections_are_bounded(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    sparse_big_file(root / "big")
    (root / "small").write_bytes(b"small")
    with ShardServer(max_connections=3) as server:
        server.mount("data/ds", StoreMount(open_store(str(root))))
        slow = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        slow.request("GET", "/data/ds/big")  # never read: its thread blocks writing
        assert slow.getresponse().status == 200
        assert fetch(server.port, "/data/ds/small").body == b"small"
        streams = []
        for _ in range(2):  # event streams hold their connection (and its thread) open
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            conn.request("GET", f"/events/{server.token}")
            assert conn.getresponse().status == 200
            streams.append(conn)
        waiting = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        waiting.request("GET", "/data/ds/small")  # accepted by the kernel; no slot until one closes
        assert server.connections == 3
        assert select.select([waiting.sock], [], [], 0.5)[0] == []  # (never fails when the limit holds)
        threads = [t for t in threading.enumerate() if t.name == f"{CONNECTION_THREAD}-{server.port}"]
        assert len(threads) <= 4  # three serving, perhaps one that just released its slot
        slow.close()
        resp = waiting.getresponse()
        assert (resp.status, resp.read()) == (200, b"small")
        for conn in (*streams, waiting):
            conn.close()


def test_a_remote_store_is_streamed_without_a_whole_read(big_served: tuple[ShardServer, Path]) -> None:
    """Through a relay (a remote store has no stat): sizes by probing, bodies by range, never a whole read."""
    origin, root = big_served
    remote = open_store(origin.url + "/data/ds/")
    assert probe_size(remote, "big") == BIG and probe_size(remote, "small") == 768
    with ShardServer() as relay:
        relay.mount("data/remote", StoreMount(remote))
        got = fetch(relay.port, "/data/remote/big", method="HEAD")
        assert (got.status, got.length) == (200, BIG)
        got = fetch(relay.port, "/data/remote/big", {"Range": "bytes=-16"})
        assert (got.status, got.body) == (206, MARKS[BIG - 16])
        got = fetch(relay.port, "/data/remote/big", keep=PIECE, read_all=False)
        assert (got.status, got.length, got.body[:16]) == (200, BIG, MARKS[0])
        got = fetch(relay.port, "/data/remote/small")
        assert (got.status, got.body) == (200, (root / "small").read_bytes())
        got = fetch(relay.port, "/data/remote/small", {"Range": "bytes=5000-5001"})
        assert (got.status, got.headers["content-range"]) == (416, "bytes */768")
    assert remote.stats.bytes_read < 8 * PIECE


# -- a real `shardscope serve` process: memory, and its link on a pipe ------------------------------------
def vm_hwm(pid: int) -> int:
    """Peak resident memory of process ``pid`` in bytes (``VmHWM``)."""
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
    assert m is not None
    return int(m.group(1)) << 10


def read_line(proc: subprocess.Popen[bytes], limit: float = 120.0) -> bytes:
    """The first line ``proc`` writes on stdout, waiting at most ``limit`` seconds (b"" if none came)."""
    got: list[bytes] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(limit)
    return got[0] if got else b""


@pytest.fixture
def dataset_with_big_file() -> Iterator[Path]:
    """A small segmentation with the sparse 3 GiB file beside its ``info`` (in RAM where there is a tmpfs:
    ``tests/sparse_files.py``; the whole read below is about 6 CPU s of page-cache zeroing on ext4)."""
    with sparse_scratch("big-dataset-") as scratch:
        write_precomputed(scratch / "seg", voronoi_supervoxels((4, 16, 16), 5, seed=3), ((1, 1, 1),),
                          chunk_xyz=(8, 8, 4))
        sparse_big_file(scratch / "seg" / "big")
        yield scratch / "seg"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (VmHWM)")
def test_serve_json_link_arrives_on_a_pipe_and_big_files_stream(dataset_with_big_file: Path) -> None:
    """``shardscope serve DATASET --json`` read through a pipe: the link comes while it serves, and a 3 GiB
    file fetched every way keeps the server's peak memory where it was."""
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "serve", str(dataset_with_big_file), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=buffered_env())
    try:
        line = read_line(proc)
        assert line.endswith(b"\n") and proc.poll() is None, (line, proc.poll())
        record = json.loads(line)
        assert record["serving"] and record["url"].startswith(record["server"] + "/v/")
        source = record["state"]["layers"][0]["source"].removeprefix("precomputed://")
        assert source.startswith(record["server"])
        port = int(record["server"].rsplit(":", 1)[1])
        base = source.removeprefix(record["server"])
        assert fetch(port, base + "info").status == 200
        before = vm_hwm(proc.pid)
        got = fetch(port, base + "big")  # the whole file, to the end
        assert (got.status, got.length, got.total, got.body[:16]) == (200, BIG, BIG, MARKS[0])
        got = fetch(port, base + "big", {"Range": "bytes=0-"}, keep=PIECE, read_all=False)
        assert (got.status, got.length, got.headers["content-range"]) == (206, BIG, f"bytes 0-{BIG - 1}/{BIG}")
        for header in ("bytes=0-1,5-9", "bytes=zz", f"bytes={HUGE}-{HUGE}"):
            got = fetch(port, base + "big", {"Range": header}, keep=PIECE, read_all=False)
            assert (got.status, got.length) == (200, BIG), header
        got = fetch(port, base + "big", {"Range": f"bytes={BIG}-"})
        assert (got.status, got.headers["content-range"]) == (416, f"bytes */{BIG}")
        assert fetch(port, base + "info").status == 200  # still serving after clients left mid-body
        growth = vm_hwm(proc.pid) - before
        assert growth < RSS_GROWTH_LIMIT, f"server peak RSS grew by {growth >> 20} MiB"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err, err.decode(errors="replace")[-3000:]


def test_version_chunks_are_only_the_info_chunks(tmp_path: Path) -> None:
    """A labelmap version's route computes only the chunks its ``info`` declares: a box of the whole scale
    (one request, the whole volume computed) and 5,000-digit coordinates are 404s."""
    from napari_shardscope.core.labelmap import create_labelmap
    from napari_shardscope.core.serve.handoff import mount_version
    from napari_shardscope.core.versioned import create_repository

    base = voronoi_supervoxels((8, 40, 48), 10, seed=2)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1),), chunk_xyz=(16, 16, 4))
    repo = create_repository(tmp_path / "repo")
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
        with ShardServer() as server:
            url = mount_version(server, lm, "main").layer.source.removeprefix("precomputed://")
            prefix = url.removeprefix(server.url)
            info = json.loads(fetch(server.port, prefix + "info").body)
            assert info["scales"][0]["chunk_sizes"] == [[16, 16, 16]]  # z: 8 voxels, one chunk
            got = fetch(server.port, prefix + "s0/16-32_0-16_0-8")
            assert got.status == 200 and got.length == 16 * 16 * 8 * 8
            np.testing.assert_array_equal(np.frombuffer(got.body, "<u8").reshape(8, 16, 16),
                                          lm.at("main").read_bodies(np.s_[0:8, 0:16, 16:32], 0))
            got = fetch(server.port, prefix + "s0/32-48_32-40_0-8")  # the edge chunk, clipped to the volume
            assert got.status == 200 and got.length == 16 * 8 * 8 * 8
            for bad in ("s0/0-48_0-40_0-8", "s0/8-24_0-16_0-8", "s0/0-8_0-16_0-8", f"s0/0-{HUGE}_0-16_0-8",
                        f"mesh/{HUGE}:0", f"mesh/{1 << 64}:0:body"):
                assert fetch(server.port, prefix + bad).status == 404, bad
    finally:
        repo.close()


def test_keys_too_long_for_a_file_system_are_not_found(big_served: tuple[ShardServer, Path],
                                                      server_log: pytest.LogCaptureFixture) -> None:
    server, _ = big_served
    for key in ("a" * 300, "/".join(["abc"] * 1500), "%00", "a%2f..%2fb"):
        got = fetch(server.port, "/data/ds/" + key)
        assert got.status in (400, 404), key

