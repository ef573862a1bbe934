"""Benchmark: locating chunk ids in bulk, and ``inspect`` against TensorStore's kvstore listing.

Run: ``python bench/locate.py [--rounds 5]`` (writes ``bench/results/locate.json``; ``python bench/table.py``
renders the table in ``bench/README.md``).

1. Chunk ids per second, 10^6 ids of a 1024 x 1024 x 128 volume (32³ chunks, murmurhash3, 16 shards x
   16 minishards): hashing + shard/minishard assignment, and full locates (byte ranges from the cached
   minishard indexes). The peer, in the same process and round, is the previous implementation: one
   ``mmh3`` call per id, then an argsort and a ``searchsorted`` per minishard. Goal (issue 20): >= 30 M ids/s.
2. ``inspect`` of the same volume from local disk and over loopback HTTP (real range requests),
   against TensorStore's ``neuroglancer_uint64_sharded`` kvstore ``list()`` of the same directory (the
   only way TensorStore enumerates a shard's chunks; it reads each shard file whole). Goal: HTTP inspect
   <= 3x the TensorStore list. Requests and bytes are counted at the server for both sides; two rows
   repeat a case with range coalescing off (``REMOTE_COALESCE_GAP = None``) to show what it trades.
   Servers: Debian's nginx on 127.0.0.1 (a real server, as users read from; ``apt-get install
   nginx-light``), on the volume as TensorStore wrote it and on the same chunks re-sharded by
   shardscope's writer; then the Python test server (``tests/http_range_server.py``) in its own process,
   which keeps connections alive as nginx and buckets do (before issue 20's wave work it closed each
   one, and libcurl then held part of every wave of requests back by a round trip: 8 round trips
   for an inspect whose dependencies need 3 — ``info``, shard indexes, minishard indexes).
3. ``ls`` (every chunk of the scale with its byte range) over loopback HTTP with 20 ms per request (the
   Python test server), against the same TensorStore list and against the previous listing (shard after
   shard, each costing its own dependent round trips: ``reader.iter_chunks`` per shard on a fresh
   inspector, as ``list_chunks`` did before). ``--part ls`` runs only these rows.

Chunk ids do not depend on the voxel type; the volume is uint8. Defaults everywhere (the shared
context, the reader's caches); ids are located with warm minishard caches, as a viewer's are.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


import napari_shardscope.core.bytestore.remote as remote_module
from common import Row, paired_rounds, rate, record, record_pair, save, spread
from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.bytestore.context import remote_limits
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.sharding import (
    assign_chunk_ids,
    format_shard_name,
    low_bits,
    murmurhash3_x86_128_low64_mmh3,
    shift_right,
)

BENCH = "locate"
GOAL_IDS = 30.0  # M ids/s
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 0,
    "hash": "murmurhash3_x86_128",
    "minishard_bits": 4,
    "shard_bits": 4,
    "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}


def make_volume(path: Path) -> None:
    """A 1024 x 1024 x 128 uint8 image in 32^3 chunks: 4096 chunks in 16 shards."""
    spec = {
        "driver": "neuroglancer_precomputed",
        "kvstore": {"driver": "file", "path": str(path)},
        "multiscale_metadata": {"type": "image", "data_type": "uint8", "num_channels": 1},
        "scale_metadata": {"size": [1024, 1024, 128], "resolution": [8, 8, 40], "chunk_size": [32, 32, 32],
                           "encoding": "raw", "sharding": SHARDING},
        "create": True,
    }
    store = ts.open(spec).result()
    z = np.arange(128, dtype=np.uint16)[None, None, :]
    y = np.arange(1024, dtype=np.uint16)[None, :, None]
    for x0 in range(0, 1024, 256):
        x = np.arange(x0, x0 + 256, dtype=np.uint16)[:, None, None]
        store[x0 : x0 + 256, :, :, 0] = ((x * 7 + y * 3 + z * 11) % 251).astype(np.uint8)


def previous_assign(spec, ids):  # type: ignore[no-untyped-def]
    """The implementation before issue 20: one mmh3 call per id."""
    hashed = murmurhash3_x86_128_low64_mmh3(shift_right(ids, spec.preshift_bits))
    shard = low_bits(shift_right(hashed, spec.minishard_bits), spec.shard_bits)
    return hashed, shard, low_bits(hashed, spec.minishard_bits)


def previous_locate(reader: ShardedReader, chunk_ids, shards, minishards):  # type: ignore[no-untyped-def]
    """The implementation before issue 20: sort by (shard, minishard), searchsorted per minishard."""
    n = chunk_ids.size
    starts = np.zeros(n, dtype=np.uint64)
    ends = np.zeros(n, dtype=np.uint64)
    present = np.zeros(n, dtype=bool)
    group = (shards << np.uint64(reader.spec.minishard_bits)) | minishards
    order = np.argsort(group, kind="stable")
    sorted_group = group[order]
    cuts = np.flatnonzero(sorted_group[1:] != sorted_group[:-1]) + 1
    bounds = np.concatenate([[0], cuts, [n]])
    for b0, b1 in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        members = order[b0:b1]
        first = members[0]
        index = reader.minishard_index(int(shards[first]), int(minishards[first]))
        if len(index) == 0:
            continue
        sorter, sorted_ids = index.sorted_view()
        wanted = chunk_ids[members]
        pos = np.minimum(np.searchsorted(sorted_ids, wanted), sorted_ids.size - 1)
        hit = sorted_ids[pos] == wanted
        src = sorter[pos[hit]]
        starts[members[hit]] = index.starts[src]
        ends[members[hit]] = index.ends[src]
        present[members[hit]] = True
    return starts, ends, present


class ServerProcess:
    """tests/http_range_server.RangeServer in a child process; :meth:`traffic` reads and resets its counts."""

    CODE = (
        "import sys\n"
        "from tests.http_range_server import RangeServer\n"
        "s = RangeServer(sys.argv[1], delay=float(sys.argv[2]))\n"
        "print(s.url, flush=True)\n"
        "for line in sys.stdin:\n"
        "    if line.strip() != 'traffic':\n"
        "        break\n"
        "    print(len(s.requests), s.bytes_sent, flush=True)\n"
        "    s.bytes_sent = 0\n"
        "    s.requests.clear()\n"
        "s.close()\n"
    )

    def __init__(self, root: Path, delay: float = 0.0) -> None:
        import subprocess

        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(root), str(delay)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def traffic(self) -> tuple[int, int]:
        """Requests answered and body bytes sent since the last call."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("traffic\n")
        self.proc.stdin.flush()
        n, sent = self.proc.stdout.readline().split()
        return int(n), int(sent)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class NginxServer:
    """Debian's nginx on 127.0.0.1 serving ``root`` with a private config (no daemon, pid and logs in a temp dir).

    nginx answers range requests on static files natively, as the servers users read from do; its access log
    records ``$body_bytes_sent`` per request (bodies, as the Python server counts), which :meth:`traffic`
    counts and sums since its last call. Startup waits at most 10 s.
    """

    def __init__(self, root: Path) -> None:
        import os
        import shutil
        import socket
        import subprocess
        import time

        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise FileNotFoundError("nginx is not installed (apt-get install nginx-light; scripts/install.sh bench)")
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.log = self.tmp / "access.log"
        user = "user root root;\n" if os.geteuid() == 0 else ""
        temps = "".join(f"    {k}_temp_path {self.tmp}/{k};\n"
                        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = (f"{user}daemon off;\nworker_processes auto;\npid {self.tmp}/nginx.pid;\n"
                f"error_log {self.tmp}/error.log;\nevents {{ worker_connections 512; }}\n"
                f"http {{\n    log_format sent '$body_bytes_sent';\n    access_log {self.log} sent;\n{temps}"
                f"    default_type application/octet-stream;\n    keepalive_requests 100000;\n"
                f"    server {{\n        listen 127.0.0.1:{port};\n        root {root};\n"
                f"        location / {{ }}\n    }}\n}}\n")
        (self.tmp / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen([binary, "-c", str(self.tmp / "nginx.conf"), "-p", str(self.tmp)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}/"
        self.offset = 0
        deadline = time.monotonic() + 10.0
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"nginx did not start: {(self.tmp / 'error.log').read_text()}") from None
                time.sleep(0.05)

    def traffic(self) -> tuple[int, int]:
        """Requests answered and body bytes sent since the last call (nginx writes its log line per request)."""
        if not self.log.exists():
            return 0, 0
        with self.log.open() as f:
            f.seek(self.offset)
            text = f.read()
            self.offset = f.tell()
        sent = [int(x) for x in text.split()]
        return len(sent), sum(sent)

    def close(self) -> None:
        import shutil
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: nginx's fast shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.tmp, ignore_errors=True)


def reshard_ours(src: Path, dst: Path) -> None:
    """The same volume with every shard rewritten by shardscope's writer (the same encoded chunks)."""
    import shutil

    from napari_shardscope.core.formats.precomputed.shard_writer import write_shards

    dst.mkdir()
    shutil.copy(src / "info", dst / "info")
    store = LocalByteStore(src)
    sc = parse_info(store.read("info") or b"").scales[0]
    assert sc.sharding is not None
    reader = ShardedReader(store, sc.key, sc.sharding)
    chunks: dict[int, bytes] = {}
    for shard in range(sc.sharding.num_shards):
        index = reader.shard_index(shard)
        if index is None:
            continue
        data = (src / sc.key / f"{format_shard_name(sc.sharding, shard)}.shard").read_bytes()
        for m in index.nonempty_minishards().tolist():
            mi = reader.minishard_index(shard, m)
            for cid, a, b in zip(mi.chunk_ids.tolist(), mi.starts.tolist(), mi.ends.tolist(), strict=True):
                chunks[cid] = data[a:b]
    write_shards(LocalByteStore(dst), sc.key, sc.sharding, chunks, encoded=True)


def ts_list(base: str) -> int:
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": base, "metadata": SHARDING}).result()
    return len(kv.list().result())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--part", choices=("all", "ls"), default="all",
                        help="ls: only the remote ls rows (the other rows of the last run kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_volume(root / "vol")
        store = LocalByteStore(root / "vol")
        sc = parse_info(store.read("info") or b"").scales[0]
        spec = sc.sharding
        assert spec is not None
        if args.part == "ls":
            ls_case(root, sc.key, len(sc.chunk_ids_of_grid()), args.rounds)
            save(BENCH, partial=True)
            return
        all_ids = sc.chunk_ids_of_grid()
        ids = np.resize(all_ids, 1_000_000)
        reader = ShardedReader(store, sc.key, spec)
        a = assign_chunk_ids(spec, ids)
        ours_loc, prev_loc = reader.locate_arrays(a.chunk_ids, a.shard, a.minishard), previous_locate(
            reader, a.chunk_ids, a.shard, a.minishard)
        assert all(np.array_equal(x, y) for x, y in zip(ours_loc, prev_loc, strict=True)) and ours_loc[2].all()
        n = ids.size
        print(f"locate: {n} ids, murmurhash3, {spec.num_shards} shards x {spec.num_minishards} minishards, "
              f"{args.rounds} rounds")

        pair = paired_rounds(lambda: assign_chunk_ids(spec, ids), lambda: previous_assign(spec, ids), args.rounds)
        ours_rate = statistics.median([n / t / 1e6 for t in pair.ours])
        record(Row(BENCH, "hash + shard/minishard of 10^6 ids", "-", rate(n, pair.ours, "M ids/s"),
                   "mmh3 per id (previous code)", rate(n, pair.peer, "M ids/s"), spread(pair.ratios) + "x",
                   f">= {GOAL_IDS:.0f} M ids/s", ours_rate >= GOAL_IDS, args.rounds))

        def ours_full() -> None:
            b = assign_chunk_ids(spec, ids)
            assert reader.locate_arrays(b.chunk_ids, b.shard, b.minishard)[2].all()

        def prev_full() -> None:
            _, s, m = previous_assign(spec, ids)
            assert previous_locate(reader, ids, s, m)[2].all()

        pair = paired_rounds(ours_full, prev_full, args.rounds)
        ours_rate = statistics.median([n / t / 1e6 for t in pair.ours])
        record(Row(BENCH, "full locate of 10^6 ids (byte ranges, warm index cache)", "-",
                   rate(n, pair.ours, "M ids/s"), "previous code", rate(n, pair.peer, "M ids/s"),
                   spread(pair.ratios) + "x", f">= {GOAL_IDS:.0f} M ids/s", ours_rate >= GOAL_IDS, args.rounds))

        counts: list[tuple[int, int]] = []

        def ours_inspect(url: str) -> None:
            counts.append((open_dataset(url).inspector().inspect()["scales"][0]["chunks"], 0))

        pair = paired_rounds(lambda: ours_inspect(str(root / "vol")),
                             lambda: ts_list(f"file://{root}/vol/{sc.key}/"), args.rounds)
        record_pair(BENCH, "inspect, local disk (4096 chunks, 16 shards)", "-", pair, "TensorStore kvstore list()",
                    None)

        # In its own process, as a real server is: it takes no GIL from either side. Python's server
        # spends ~0.3-0.5 ms of CPU per request on this machine (a thread and a connection each), far
        # more than a bucket's front end; the 20 ms run adds 20 ms to every answer (a bucket's round
        # trip, requests answered in parallel). Requests and bytes are counted at the server, both sides.
        def http_case(delay: float, case: str, nginx: bool = False, vol: str = "vol",
                      gap: int | str | None = "default") -> None:
            server: ServerProcess | NginxServer = NginxServer(root) if nginx else ServerProcess(root, delay)
            saved_gap = remote_module.REMOTE_COALESCE_GAP
            if gap != "default":
                remote_module.REMOTE_COALESCE_GAP = gap  # type: ignore[assignment]
            try:
                seen: dict[str, list[tuple[int, int]]] = {"ours": [], "ts": []}

                def ours_remote() -> None:
                    summary = open_dataset(server.url + vol).inspector().inspect()
                    counts.append((summary["scales"][0]["chunks"], 0))

                pair = paired_rounds(traffic_counted(server, ours_remote, seen["ours"]),
                                     traffic_counted(server, lambda: ts_list(f"{server.url}{vol}/{sc.key}/"),
                                                     seen["ts"]), args.rounds)
            finally:
                remote_module.REMOTE_COALESCE_GAP = saved_gap
                server.close()
            assert all(c == len(all_ids) for c, _ in counts), counts

            def median_of(who: str, i: int) -> float:
                return median_traffic(seen[who], i)

            gap_now = remote_module.REMOTE_COALESCE_GAP if gap == "default" else gap
            gap_text = "off" if gap_now is None else f"{gap_now // 1024} KiB"
            record_pair(BENCH, case, "-", pair, "TensorStore kvstore list()", 1 / 3,
                        goal_text="ours <= 3x TensorStore (ratio >= 0.33x)",
                        setting=f"requests: ours {median_of('ours', 0):.0f}, TensorStore {median_of('ts', 0):.0f}; "
                                f"bytes: ours {median_of('ours', 1):.0f}, TensorStore {median_of('ts', 1):.0f}; "
                                f"coalescing gap {gap_text}, {remote_limits().concurrency} requests in flight")

        http_case(0.0, "inspect over loopback HTTP, nginx (a real server)", nginx=True)
        http_case(0.0, "inspect over loopback HTTP, nginx, coalescing off (one request per minishard index)",
                  nginx=True, gap=None)
        reshard_ours(root / "vol", root / "vol-ours")
        http_case(0.0, "inspect over loopback HTTP, nginx, the volume re-sharded by shardscope's writer", nginx=True,
                  vol="vol-ours")
        http_case(0.0, "inspect over loopback HTTP, Python test server")
        http_case(0.02, "inspect over loopback HTTP, 20 ms per request (a bucket's latency)")
        http_case(0.02, "inspect over loopback HTTP, 20 ms per request, coalescing off", gap=None)
        pyramid_case(root / "pyramid", args.rounds)
        ls_case(root, sc.key, len(all_ids), args.rounds)
    save(BENCH)


def traffic_counted(server: ServerProcess | NginxServer, fn: Callable[[], None],
                    into: list[tuple[int, int]]) -> Callable[[], None]:
    """``fn`` as a timed round that also appends the (requests, bytes) the server answered during it to ``into``."""
    def run() -> None:
        server.traffic()  # what came before this round is not counted
        fn()
        into.append(server.traffic())
    return run


def median_traffic(seen: list[tuple[int, int]], i: int) -> float:
    """The median of field ``i`` (0 requests, 1 bytes) over the rounds ``seen``."""
    return statistics.median(t[i] for t in seen)


def ls_case(root: Path, key: str, chunks: int, rounds: int) -> None:
    """``ls`` of the 16-shard scale over 20 ms per request: ours, the previous shard-by-shard listing, TensorStore."""
    server = ServerProcess(root, 0.02)
    seen: dict[str, list[tuple[int, int]]] = {"ours": [], "previous": [], "ts": []}
    try:
        def counted(fn: Callable[[], None], who: str) -> Callable[[], None]:
            return traffic_counted(server, fn, seen[who])

        def ours() -> None:
            assert sum(1 for _ in open_dataset(server.url + "vol").inspector().list_chunks(key)) == chunks

        def previous() -> None:
            inspector = open_dataset(server.url + "vol").inspector()
            source = inspector.source(key)
            reader = inspector.reader(source)
            assert sum(len(list(reader.iter_chunks(s))) for s in inspector.shards_present(source)) == chunks

        def peer() -> None:
            assert ts_list(f"{server.url}vol/{key}/") == chunks

        ts_pair = paired_rounds(counted(ours, "ours"), counted(peer, "ts"), rounds)
        prev_pair = paired_rounds(counted(ours, "ours"), counted(previous, "previous"), rounds)
    finally:
        server.close()

    def median_of(who: str, i: int) -> float:
        return median_traffic(seen[who], i)

    setting = (f"requests: ours {median_of('ours', 0):.0f}, previous {median_of('previous', 0):.0f}, TensorStore "
               f"{median_of('ts', 0):.0f}; Python test server, 20 ms per request, {remote_limits().concurrency} "
               "requests in flight")
    record_pair(BENCH, f"ls over loopback HTTP, 20 ms per request ({chunks} chunks, 16 shards)", "-", ts_pair,
                "TensorStore kvstore list()", 1 / 3, goal_text="ours <= 3x TensorStore (ratio >= 0.33x)",
                setting=setting)
    record_pair(BENCH, f"ls over loopback HTTP, 20 ms per request ({chunks} chunks, 16 shards)", "-", prev_pair,
                "previous code (shard after shard)", None, setting=setting)


def pyramid_case(path: Path, rounds: int) -> None:
    """A 4-scale pyramid over 20 ms per request: every scale's indexes in the same three waves.

    The peer lists every scale's ``neuroglancer_uint64_sharded`` kvstore with the lists in flight
    together (TensorStore's best case: one wave). Before issue 20's wave work shardscope inspected
    scale after scale: 10 dependent waves here instead of 3.
    """
    from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume

    write_ts_volume(path, SHARDING_MURMUR_GZIP, size=(300, 277, 141), scales=4)
    scales = parse_info(LocalByteStore(path).read("info") or b"").scales
    server = ServerProcess(path.parent, 0.02)
    try:
        seen: dict[str, list[tuple[int, int]]] = {"ours": [], "ts": []}

        def ours() -> None:
            server.traffic()
            summary = open_dataset(server.url + path.name).inspector().inspect()
            assert sum(sc["chunks"] for sc in summary["scales"]) == sum(sc.num_chunks for sc in scales)
            seen["ours"].append(server.traffic())

        def peer() -> None:
            server.traffic()
            stores = [ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "metadata": SHARDING_MURMUR_GZIP,
                                       "base": f"{server.url}{path.name}/{sc.key}/"}).result() for sc in scales]
            assert sum(len(f.result()) for f in [kv.list() for kv in stores]) == sum(sc.num_chunks for sc in scales)
            seen["ts"].append(server.traffic())

        pair = paired_rounds(ours, peer, rounds)
    finally:
        server.close()

    def median_of(who: str, i: int) -> float:
        return statistics.median(t[i] for t in seen[who])

    record_pair(BENCH, "inspect over loopback HTTP, 20 ms per request, 4-scale pyramid (all scales)", "-", pair,
                "TensorStore kvstore list() of every scale, in flight together", 1 / 3,
                goal_text="ours <= 3x TensorStore (ratio >= 0.33x)",
                setting=f"requests: ours {median_of('ours', 0):.0f}, TensorStore {median_of('ts', 0):.0f}; "
                        f"bytes: ours {median_of('ours', 1):.0f}, TensorStore {median_of('ts', 1):.0f}; "
                        f"Python test server, {remote_limits().concurrency} requests in flight")


if __name__ == "__main__":
    main()
