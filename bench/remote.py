"""Benchmark of remotes (issue 18): push and fetch of a version with k changed blocks over loopback S3.

Run ``python bench/remote.py`` (``--rounds N``, ``--blocks K``, ``--json``). A real S3 API (moto,
in-process on 127.0.0.1) is reached through TensorStore's s3 kvstore, as a bucket would be.

Each round makes a fresh remote holding a committed root, a clone of it, and a new committed version
with K changed 28 KB blocks (the size of a compressed 64³ label block) in the origin. Measured, paired
in the same round:

* **push** of that version (ours: objects the remote lacks, then one compare-and-swap of the refs)
  against **the peer**: writing the same K blocks to the same S3 with TensorStore directly
  (concurrent ``kvstore.write`` calls, no versioning);
* **fetch** of it into the clone (ours: walk, verify hashes, adopt in one transaction) against the
  peer reading the K blocks back with TensorStore;
* bytes sent per changed block (a push of k changed blocks moves O(k) bytes), for K and K/10;
* **clone --region** to first frame (clone a 16x128x128 region of a 32x256x256 base from the remote,
  open its labelmap, read the region's bodies) against TensorStore reading the same region of the
  base directly (the base stays where it is: a clone copies versions, not the base).

Printed: median [min–max] over the rounds of each time and of the paired ratio ours/peer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.moto_s3 import serve_moto  # the one loopback S3 the tests use too

BLOCK = 28 * 1024


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}–{max(values):.3f}]"


def one_round(work: Path, bucket: str, i: int, k: int, rng: random.Random) -> dict[str, float]:
    import tensorstore as ts

    from napari_shardscope.core.versioned import create_repository, open_repository
    from napari_shardscope.core.versioned import remotes as R

    url = f"s3://{bucket}/round-{i}-{k}"
    a = create_repository(work / f"a-{i}-{k}")
    inst = a.create_instance("blocks", "keyvalue")
    a.commit(a.root, "root")
    R.add_remote(a, "origin", url)
    R.push(a)
    clone_path, _ = R.clone(url, work / f"b-{i}-{k}")
    blocks = {b"b" + j.to_bytes(4, "big"): rng.randbytes(BLOCK) for j in range(k)}
    v = a.new_version("main")
    with a.write(v) as w:
        w.put_many(inst, blocks)
    a.commit(v, f"{k} blocks")

    t0 = time.perf_counter()
    pushed = R.push(a)
    push_s = time.perf_counter() - t0

    kv = ts.KvStore.open({"driver": "s3", "bucket": bucket, "path": f"peer-{i}-{k}/",
                          "endpoint": os.environ["AWS_ENDPOINT_URL"], "aws_region": "us-east-1"}).result()
    t0 = time.perf_counter()
    futures = [kv.write(key.hex(), value) for key, value in blocks.items()]
    for f in futures:
        f.result()
    peer_write_s = time.perf_counter() - t0

    b = open_repository(clone_path)
    t0 = time.perf_counter()
    fetched = R.fetch(b)
    fetch_s = time.perf_counter() - t0
    with b.read("main") as view:
        assert view.get(inst.name, next(iter(blocks))) == next(iter(blocks.values()))

    t0 = time.perf_counter()
    reads = [kv.read(key.hex()) for key in blocks]
    for r in reads:
        assert r.result().value
    peer_read_s = time.perf_counter() - t0
    a.close()
    b.close()
    return {"push_s": push_s, "peer_write_s": peer_write_s, "fetch_s": fetch_s, "peer_read_s": peer_read_s,
            "push_bytes_per_block": pushed.transfer.bytes_sent / k,
            "fetch_bytes_per_block": fetched.transfer.bytes_received / k,
            "push_objects": pushed.transfer.objects_sent}


def write_base(path: Path, shape: tuple[int, int, int] = (32, 256, 256)) -> None:
    """A blocky supervoxel volume (precomputed, one scale) written by TensorStore."""
    import numpy as np
    import tensorstore as ts

    rng = np.random.default_rng(18)
    cells = rng.integers(1, 5000, size=(shape[0] // 8, shape[1] // 32, shape[2] // 32), dtype=np.uint64)
    data = np.kron(cells, np.ones((8, 32, 32), dtype=np.uint64))
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path) + "/"},
            "multiscale_metadata": {"type": "segmentation", "data_type": "uint64", "num_channels": 1},
            "scale_metadata": {"size": [shape[2], shape[1], shape[0]], "resolution": [4, 4, 40],
                               "chunk_size": [64, 64, 16], "encoding": "raw", "voxel_offset": [0, 0, 0]},
            "create": True}
    store = ts.open(spec).result()
    store[ts.d["channel"][0]].translate_to[0, 0, 0].write(data.transpose(2, 1, 0)).result()


def region_round(work: Path, bucket: str, base: Path, i: int) -> dict[str, float]:
    """Clone a region and read its bodies (time to first frame) vs reading the region with TensorStore."""
    import numpy as np
    import tensorstore as ts

    from napari_shardscope.core.labelmap import create_labelmap, open_labelmap
    from napari_shardscope.core.versioned import create_repository, open_repository
    from napari_shardscope.core.versioned import remotes as R

    url = f"s3://{bucket}/region-{i}"
    if i == 0 or not (work / "origin").exists():
        origin = create_repository(work / "origin")
        create_labelmap(origin, "seg", base, block=64)
        origin.commit(origin.root, "base")
        origin.close()
    origin = open_repository(work / "origin")
    R.add_remote(origin, f"r{i}", url)
    R.push(origin, f"r{i}")
    origin.close()
    t0 = time.perf_counter()
    path, _ = R.clone(url, work / f"region-{i}", region="0:16,0:128,0:128")
    clone = open_repository(path)
    frame = open_labelmap(clone, "seg").at("main").read_bodies((slice(0, 16), slice(0, 128), slice(0, 128)))
    ours = time.perf_counter() - t0
    clone.close()
    t0 = time.perf_counter()
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": {"driver": "file", "path": str(base) + "/"}}).result()
    peer = np.asarray(store[0:128, 0:128, 0:16, 0].read().result()).transpose(2, 1, 0)
    peer_s = time.perf_counter() - t0
    assert np.array_equal(frame, peer)  # identity agglomeration: bodies are the supervoxels
    return {"region_s": ours, "peer_region_s": peer_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = random.Random(18)
    with serve_moto() as endpoint, tempfile.TemporaryDirectory() as tmp:
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "bench",
                           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_EC2_METADATA_DISABLED": "true"})
        bucket = "bench-remote"
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=30).close()
        rows = [one_round(Path(tmp), bucket, i, args.blocks, rng) for i in range(args.rounds)]
        small = one_round(Path(tmp), bucket, 999, max(1, args.blocks // 10), rng)
        write_base(Path(tmp) / "base")
        regions = [region_round(Path(tmp), bucket, Path(tmp) / "base", i) for i in range(args.rounds)]
    out = {
        "blocks": args.blocks, "block_bytes": BLOCK, "rounds": args.rounds,
        "push_s": [r["push_s"] for r in rows], "peer_write_s": [r["peer_write_s"] for r in rows],
        "push_ratio": [r["push_s"] / r["peer_write_s"] for r in rows],
        "fetch_s": [r["fetch_s"] for r in rows], "peer_read_s": [r["peer_read_s"] for r in rows],
        "fetch_ratio": [r["fetch_s"] / r["peer_read_s"] for r in rows],
        "push_bytes_per_block": rows[0]["push_bytes_per_block"],
        "push_bytes_per_block_small": small["push_bytes_per_block"],
        "fetch_bytes_per_block": rows[0]["fetch_bytes_per_block"],
        "push_objects": rows[0]["push_objects"],
        "region_s": [r["region_s"] for r in regions], "peer_region_s": [r["peer_region_s"] for r in regions],
        "region_ratio": [r["region_s"] / r["peer_region_s"] for r in regions],
    }
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    mb = args.blocks * BLOCK / 2**20
    print(f"remote over loopback S3 (moto): a version with {args.blocks} changed 28 KB blocks ({mb:.1f} MiB), "
          f"{args.rounds} rounds, median [min–max]")
    print(f"  push   ours {summary(out['push_s'])} s   TensorStore writes {summary(out['peer_write_s'])} s   "
          f"ratio {summary(out['push_ratio'])}")
    print(f"  fetch  ours {summary(out['fetch_s'])} s   TensorStore reads  {summary(out['peer_read_s'])} s   "
          f"ratio {summary(out['fetch_ratio'])}")
    print(f"  bytes sent per changed block: {out['push_bytes_per_block']:.0f} with {args.blocks} blocks, "
          f"{out['push_bytes_per_block_small']:.0f} with {max(1, args.blocks // 10)} "
          f"(block itself {BLOCK}); {out['push_objects']} objects per push")
    print(f"  bytes received per changed block: {out['fetch_bytes_per_block']:.0f}")
    print(f"  clone --region 0:16,0:128,0:128 to first frame (bodies of the region) {summary(out['region_s'])} s   "
          f"TensorStore reading the region {summary(out['peer_region_s'])} s   ratio {summary(out['region_ratio'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
