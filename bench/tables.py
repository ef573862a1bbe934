"""Benchmark of sorted tables (issue 28, item 2): lookups in agglomeration tables of 10⁶ … 10⁹ rows.

Run ``PYTHONPATH=src:. python bench/tables.py`` (``--sizes 6,7,8,9`` as powers of ten, ``--rounds 3``,
``--only disk|http0|http20|peer``). Every point runs in a fresh process (``--point``), so its time is
a cold open plus a cold lookup and its peak RSS is its own; the median of ``--rounds`` is reported.

The table is ``supervoxel → body`` with ``supervoxel = 7·i + 1`` and ``body = supervoxel // 1000 + 1``
(about 143 supervoxels per body), in pages of 16,384 rows (uint64, uint64: 256 KiB a page).

Stores:

* **disk** — the table written by ``write_sorted_table`` as sharded Zarr v3 (gzip) on the local disk,
  for the sizes that fit the disk in reasonable time (10⁶–10⁸; 10⁸ rows is about 0.5 GB gzip'd);
* **http0 / http20** — the same layout (unsharded, uncompressed chunks) generated *procedurally*
  by a loopback HTTP server: each chunk's bytes are computed when asked for, so a 10⁹-row table
  (16 GB) needs no file; ``http20`` answers every request 20 ms late, as a bucket would, and the
  server counts the requests;
* **peer** — plain ``np.searchsorted`` over the whole key column and a gather from the whole body
  column, loaded into memory from the disk table by TensorStore (the time includes the load, as a
  process that must answer a first lookup would pay it), where the columns fit in memory.

Lookups (distinct supervoxel ids, all of them in the table):

* ``plane-1e3`` / ``plane-1e5``: ids as a plane of a volume whose supervoxel ids were allocated per
  chunk shows them — 100 (resp. 1,000) runs of 100 consecutive rows at random places, 10 ids per run
  (resp. 100): the connectome-shaped case;
* ``random-1e3`` / ``random-1e5``: ids drawn uniformly from the whole table — the worst case, one
  page per id (at 10⁸ rows, 10⁵ random ids touch every page: the whole table is read).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAGE_ROWS = 1 << 14
STRIDE = 7
DIR_CHUNK = 1 << 16
CASES = {"plane-1e3": (100, 10), "plane-1e5": (1000, 100), "random-1e3": 1000, "random-1e5": 100_000}
CACHE = Path(os.environ.get("SHARDSCOPE_BENCH_CACHE", Path(tempfile.gettempdir()) / "shardscope-bench-tables"))
GOAL_RSS_MB = 500
GOAL_SECONDS = 1.0


def keys_of(rows: np.ndarray) -> np.ndarray:
    return rows.astype(np.uint64) * np.uint64(STRIDE) + np.uint64(1)


def bodies_of(keys: np.ndarray) -> np.ndarray:
    return keys // np.uint64(1000) + np.uint64(1)


def asked_keys(case: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spec = CASES[case]
    if isinstance(spec, tuple):
        runs, per = spec
        starts = rng.integers(0, max(1, n - 100), runs)
        rows = np.concatenate([s + rng.choice(100, per, replace=False) for s in starts])
    else:
        rows = rng.choice(n, spec, replace=False) if n > 4 * spec else rng.permutation(n)[:spec]
    return keys_of(np.unique(rows))


# -- the procedural table server -----------------------------------------------------------------------
def group_doc(n: int) -> dict[str, Any]:
    pages = -(-n // PAGE_ROWS)
    return {"zarr_format": 3, "node_type": "group", "attributes": {"shardscope_sorted_table": {
        "format": 1, "key": "supervoxel", "values": [{"name": "body", "dtype": "<u8"}], "unique": True,
        "num_rows": n, "page_rows": PAGE_ROWS, "pages": pages, "value_max": {"body": int(bodies_of(
            keys_of(np.asarray([n - 1])))[0])}}}}


def array_doc(shape: list[int], chunks: list[int]) -> dict[str, Any]:
    return {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint64",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}


def procedural_bytes(n: int, path: str) -> bytes | None:
    """The bytes the table's store would hold at ``path`` (``None``: no such key)."""
    pages = -(-n // PAGE_ROWS)
    if path == "zarr.json":
        return json.dumps(group_doc(n)).encode()
    if path in ("supervoxel/zarr.json", "body/zarr.json"):
        return json.dumps(array_doc([n], [PAGE_ROWS])).encode()
    if path == "page_directory/zarr.json":
        return json.dumps(array_doc([pages, 3], [DIR_CHUNK, 3])).encode()
    m = re.fullmatch(r"(supervoxel|body)/c/(\d+)", path)
    if m:
        p = int(m.group(2))
        if p >= pages:
            return None
        rows = np.arange(p * PAGE_ROWS, (p + 1) * PAGE_ROWS, dtype=np.uint64)
        rows[rows >= n] = 0
        keys = np.where(rows < n, keys_of(rows), 0).astype(np.uint64)
        if p == pages - 1:
            keys[n - p * PAGE_ROWS:] = 0
        col = keys if m.group(1) == "supervoxel" else np.where(keys > 0, bodies_of(keys), 0).astype(np.uint64)
        return col.astype("<u8").tobytes()
    m = re.fullmatch(r"page_directory/c/(\d+)/0", path)
    if m:
        i = int(m.group(1))
        p = np.arange(i * DIR_CHUNK, (i + 1) * DIR_CHUNK, dtype=np.int64)
        valid = p < pages
        first = np.where(valid, p * PAGE_ROWS, 0)
        last = np.where(valid, np.minimum(n, (p + 1) * PAGE_ROWS) - 1, 0)
        out = np.zeros((DIR_CHUNK, 3), dtype=np.uint64)
        out[:, 0] = np.where(valid, keys_of(first), 0)
        out[:, 1] = np.where(valid, keys_of(last), 0)
        out[:, 2] = np.where(valid, last - first + 1, 0)
        return out.astype("<u8").tobytes()
    return None


class ProceduralServer:
    """A loopback server of procedurally generated tables: ``/<rows>/<key>``; counts requests."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0
        self.bytes = 0
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, body: bool) -> None:
                with lock:
                    server.requests += 1
                if server.delay:
                    time.sleep(server.delay)
                parts = self.path.lstrip("/").split("/", 1)
                data = procedural_bytes(int(parts[0]), parts[1]) if len(parts) == 2 and parts[0].isdigit() \
                    else None
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, start, end = 200, 0, len(data)
                rng = self.headers.get("Range")
                if rng:
                    m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng)
                    if m and m.group(1):
                        start = int(m.group(1))
                        end = min(len(data), int(m.group(2)) + 1) if m.group(2) else len(data)
                    elif m and m.group(2):
                        start = max(0, len(data) - int(m.group(2)))
                    status = 206
                chunk = data[start:end]
                self.send_response(status)
                self.send_header("Content-Length", str(len(chunk)))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()
                if body:
                    self.wfile.write(chunk)
                with lock:
                    server.bytes += len(chunk) if body else 0

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


# -- one point, in a fresh process ------------------------------------------------------------------------
def run_point(store: str, url: str, n: int, case: str, seed: int) -> dict[str, Any]:
    asked = asked_keys(case, n, seed)
    want = bodies_of(asked)
    t_import = time.perf_counter()
    import tensorstore as ts

    import napari_shardscope.core.tables.zarr_table  # noqa: F401  (the backend, imported lazily by an open)
    from napari_shardscope.core.tables import open_sorted_table

    t0 = time.perf_counter()  # the process's imports (about 2 s, mostly TensorStore's) are not the table's cost
    if store == "peer":

        def column(name: str) -> np.ndarray:
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{url}/{name}"}}
            return np.asarray(ts.open(spec).result().read().result())

        keys, bodies = column("supervoxel"), column("body")
        t_open = time.perf_counter()
        pos = np.searchsorted(keys, asked)
        got = bodies[np.minimum(pos, keys.size - 1)]
        found = keys[np.minimum(pos, keys.size - 1)] == asked
        requests = None
    else:
        table = open_sorted_table(url)
        t_open = time.perf_counter()
        values, found = table.lookup(asked, ["body"])
        got = values["body"]
        requests = table.source.stats.requests
    t_end = time.perf_counter()
    assert bool(found.all()) and bool((got == want).all()), "wrong answers"
    return {"import_s": t0 - t_import, "open_s": t_open - t0, "lookup_s": t_end - t_open, "total_s": t_end - t0,
            "rss_mb": own_peak_rss_mb(), "client_requests": requests,
            "keys": int(asked.size)}


def own_peak_rss_mb() -> float:
    """This process's own peak RSS (``VmHWM``): ``ru_maxrss`` is inherited from the bench process that
    started this one (Linux keeps it across ``fork`` and ``exec``), so it would report the parent's peak."""
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


def fresh_point(store: str, url: str, n: int, case: str, seed: int, server: ProceduralServer | None
                ) -> dict[str, Any]:
    before = server.requests if server else 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                        str(Path(__file__).resolve().parents[1])])}
    out = subprocess.run([sys.executable, __file__, "--point", json.dumps([store, url, n, case, seed])],
                         capture_output=True, text=True, env=env, timeout=1800, check=False)
    if out.returncode:
        raise RuntimeError(f"point {store} {n} {case} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if server:
        result["server_requests"] = server.requests - before
    return result


# -- the tables on disk ----------------------------------------------------------------------------------
def disk_table(n: int) -> Path:
    path = CACHE / f"agglo-{n}.zarr"
    if (path / "zarr.json").exists():
        return path
    from napari_shardscope.core.tables import write_sorted_table

    def chunks() -> Any:
        step = 1 << 20
        for start in range(0, n, step):
            keys = keys_of(np.arange(start, min(n, start + step), dtype=np.uint64))
            yield keys, bodies_of(keys)

    CACHE.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_sorted_table(path, chunks(), key="supervoxel", value_name="body", page_rows=PAGE_ROWS, overwrite=True)
    print(f"  wrote {n:.0e} rows to {path} in {time.perf_counter() - t0:.1f} s "
          f"({sum(f.stat().st_size for f in path.rglob('*') if f.is_file()) / 1e6:.0f} MB)", flush=True)
    return path


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        vals = [r[key] for r in results if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    return {k: med(k) for k in ("open_s", "lookup_s", "total_s", "rss_mb", "client_requests", "server_requests")} \
        | {"rounds": len(results), "range_total_s": [min(r["total_s"] for r in results),
                                                        max(r["total_s"] for r in results)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="6,7,8,9")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="disk,peer,http0,http20")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--point")
    args = parser.parse_args()
    if args.point:
        store, url, n, case, seed = json.loads(args.point)
        print(json.dumps(run_point(store, url, int(n), case, int(seed))))
        return 0
    sizes = [10 ** int(s) for s in args.sizes.split(",")]
    stores = args.only.split(",")
    cases = args.cases.split(",")
    servers = {"http0": ProceduralServer(0.0), "http20": ProceduralServer(0.020)}
    rows = []
    try:
        for n in sizes:
            disk = disk_table(n) if n <= 10**8 and ({"disk", "peer"} & set(stores)) else None
            for case in cases:
                for store in stores:
                    if store in ("disk", "peer") and disk is None:
                        continue
                    if store == "peer" and n > 10**8:
                        continue
                    if store.startswith("http") and case == "random-1e5" and n >= 10**8:
                        continue  # ~every page of a 1.6-16 GB table through a Python server: minutes, not a point
                    url = str(disk) if store in ("disk", "peer") else f"{servers[store].url}/{n}"
                    results = [fresh_point(store, url, n, case, seed, servers.get(store))
                               for seed in range(args.rounds)]
                    s = summarize(results)
                    row = {"rows": n, "case": case, "store": store, **s}
                    rows.append(row)
                    req = f", {s['server_requests']:.0f} requests" if s.get("server_requests") is not None else ""
                    print(f"{n:.0e} {case:11s} {store:6s} total {s['total_s']:.3f} s (open {s['open_s']:.3f}, "
                          f"lookup {s['lookup_s']:.3f}) [{s['range_total_s'][0]:.3f}-{s['range_total_s'][1]:.3f}]"
                          f", peak RSS {s['rss_mb']:.0f} MB{req}", flush=True)
    finally:
        for s in servers.values():
            s.close()
    out = Path(__file__).resolve().parent / "results" / "tables-points.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "machine": f"{os.cpu_count()} cpus", "goal": {"rss_mb": GOAL_RSS_MB,
                                                                              "seconds": GOAL_SECONDS},
                               "points": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    if os.environ.get("SHARDSCOPE_BENCH_KEEP") != "1" and os.environ.get("SHARDSCOPE_BENCH_CLEAN") == "1":
        shutil.rmtree(CACHE, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
