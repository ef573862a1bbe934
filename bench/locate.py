"""Benchmark: locating chunks, and ``inspect`` against TensorStore's kvstore listing.

Run: ``.venv/bin/python bench/locate.py [--repeats 5]``

1. Chunk ids located per second: hashing + shard/minishard assignment alone, and full locates
   (byte ranges from the cached minishard indexes), vectorised over 10^6 ids. Goal >= 1 M/s.
2. ``inspect`` of a sharded volume served over loopback HTTP (real range requests), against
   TensorStore's ``neuroglancer_uint64_sharded`` kvstore ``list()`` of the same directory — the only
   way TensorStore offers to enumerate a shard's chunks. Bytes are counted by the HTTP server, so
   both sides are measured the same way. Medians of several runs; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.http_range_server import RangeServer

from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.shard_reader import ShardedReader
from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids

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
        "scale_metadata": {
            "size": [1024, 1024, 128],
            "resolution": [8, 8, 40],
            "chunk_size": [32, 32, 32],
            "encoding": "raw",
            "sharding": SHARDING,
        },
        "create": True,
    }
    store = ts.open(spec).result()
    z = np.arange(128, dtype=np.uint16)[None, None, :]
    y = np.arange(1024, dtype=np.uint16)[None, :, None]
    for x0 in range(0, 1024, 256):
        x = np.arange(x0, x0 + 256, dtype=np.uint16)[:, None, None]
        store[x0 : x0 + 256, :, :, 0] = ((x * 7 + y * 3 + z * 11) % 251).astype(np.uint8)


def median_time(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_volume(root / "vol")
        store = LocalByteStore(root / "vol")
        sc = parse_info(store.read("info") or b"").scales[0]
        assert sc.sharding is not None
        all_ids = sc.chunk_ids_of_grid()
        ids = np.resize(all_ids, 1_000_000)
        reader = ShardedReader(store, sc.key, sc.sharding)
        reader.locate_arrays(all_ids, *(lambda a: (a.shard, a.minishard))(assign_chunk_ids(sc.sharding, all_ids)))

        t_assign = median_time(lambda: assign_chunk_ids(sc.sharding, ids), args.repeats)

        def full_locate() -> None:
            a = assign_chunk_ids(sc.sharding, ids)
            _, _, present = reader.locate_arrays(a.chunk_ids, a.shard, a.minishard)
            assert present.all()

        t_locate = median_time(full_locate, args.repeats)
        print(
            f"locate: {len(ids)} ids (murmurhash3, {sc.sharding.num_shards} shards x "
            f"{sc.sharding.num_minishards} minishards), median of {args.repeats}"
        )
        print(f"  hash + shard/minishard assignment: {len(ids) / t_assign / 1e6:6.2f} M ids/s")
        print(
            f"  full locate (byte ranges, warm index cache): {len(ids) / t_locate / 1e6:6.2f} M ids/s  (goal >= 1 M/s)"
        )

        local_t, ts_local_t = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            n_local = open_dataset(root / "vol").inspector().inspect()["scales"][0]["chunks"]
            local_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            kv = ts.KvStore.open(
                {
                    "driver": "neuroglancer_uint64_sharded",
                    "base": f"file://{root}/vol/{sc.key}/",
                    "metadata": SHARDING,
                    "context": {"cache_pool": {"total_bytes_limit": 0}},
                }
            ).result()
            n_ts_local = len(kv.list().result())
            ts_local_t.append(time.perf_counter() - t0)
        assert n_local == n_ts_local == len(all_ids)
        lo, lt = statistics.median(local_t), statistics.median(ts_local_t)
        print(
            f"inspect on local disk: shardscope {lo * 1e3:.1f} ms vs tensorstore list() {lt * 1e3:.1f} ms "
            f"(ratio tensorstore/shardscope {lt / lo:.2f}x)"
        )

        server = RangeServer(root)
        try:
            total = sum(p.stat().st_size for p in (root / "vol").rglob("*.shard"))
            ours_t, ours_b, ts_t, ts_b = [], [], [], []
            n_ours = n_ts = 0
            for _ in range(args.repeats):
                server.bytes_sent = 0
                t0 = time.perf_counter()
                summary = open_dataset(server.url + "vol").inspector().inspect()
                ours_t.append(time.perf_counter() - t0)
                ours_b.append(server.bytes_sent)
                n_ours = summary["scales"][0]["chunks"]

                server.bytes_sent = 0
                t0 = time.perf_counter()
                kv = ts.KvStore.open(
                    {
                        "driver": "neuroglancer_uint64_sharded",
                        "base": f"{server.url}vol/{sc.key}/",
                        "metadata": SHARDING,
                        "context": {"cache_pool": {"total_bytes_limit": 0}},
                    }
                ).result()
                n_ts = len(kv.list().result())
                ts_t.append(time.perf_counter() - t0)
                ts_b.append(server.bytes_sent)
        finally:
            server.close()
        assert n_ours == n_ts == len(all_ids), (n_ours, n_ts)
        mo, mt = statistics.median(ours_t), statistics.median(ts_t)
        bo, bt = statistics.median(ours_b), statistics.median(ts_b)
        print(f"inspect over loopback HTTP: {len(all_ids)} chunks in 16 shard files, {total} bytes on disk")
        print(f"  shardscope inspect : {mo * 1e3:8.1f} ms, {bo:>10} bytes transferred")
        print(f"  tensorstore list() : {mt * 1e3:8.1f} ms, {bt:>10} bytes transferred")
        print(f"  ratio (tensorstore / shardscope): time {mt / mo:5.2f}x, bytes {bt / max(bo, 1):7.1f}x")
        print(
            "  (loopback has no bandwidth cost and the test server handles ~1 request/ms in Python; on a bucket"
            " the bytes column is what scales with shard size)"
        )


if __name__ == "__main__":
    main()
