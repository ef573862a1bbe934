"""Benchmark: chunks per second served for a labelmap version vs the same chunks from an exported copy.

Run: ``.venv/bin/python bench/serve.py [--rounds 5]``

Both sides are read the way a client reads them: TensorStore's ``neuroglancer_precomputed`` driver
over HTTP from the one loopback server (``core.serve``), every scale-0 chunk of the volume, with a
new TensorStore context each round (no client cache):

* ``version`` — the committed version (a merge and a cleave over a sharded base), mounted afresh each
  round (an empty server-side chunk cache), each chunk computed on request: base blocks read,
  patched by the overlay and mapped to bodies (``read_bodies``), sent raw;
* ``export`` — the same version exported once (``export_precomputed``, sharded, gzip'd raw chunks,
  the same 32³ chunks) and served as stored: the client makes range requests for shard and minishard
  indexes and chunk data.

Server-side reads are warm on both sides (the base's chunks in TensorStore's shared cache, the
export's files in the page cache). Rounds are paired (both sides in each round, order alternating);
the ratio is version / export, median [min–max].
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from blocky_base import write_blocky_base
from napari_shardscope.core.bytestore import open_store
from napari_shardscope.core.export.precomputed import export_precomputed
from napari_shardscope.core.export.source import labelmap_source
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.serve.server import ShardServer, StoreMount
from napari_shardscope.core.serve.version_source import VersionMount
from napari_shardscope.core.versioned import create_repository

SHAPE = (64, 256, 256)  # z, y, x: 2 x 8 x 8 = 128 chunks of 32³ at scale 0
BLOCK = 32


def read_all(url: str) -> tuple[int, float, np.ndarray]:
    """Read scale 0 of the precomputed volume at ``url`` (http) with a fresh context; chunks, seconds, data."""
    spec = {"driver": "neuroglancer_precomputed", "kvstore": url, "scale_index": 0,
            "context": {"cache_pool": {"total_bytes_limit": 0}}}
    t0 = time.perf_counter()
    store = ts.open(spec, context=ts.Context()).result()
    data = np.asarray(store[..., 0].read().result())
    dt = time.perf_counter() - t0
    chunk = store.schema.chunk_layout.read_chunk.shape
    n = 1
    for size, c in zip(store.shape[:3], chunk[:3], strict=True):
        n *= -(-int(size) // int(c))
    return n, dt, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        write_blocky_base(root / "base", SHAPE, (8, 24, 24), (32, 32, 16), shard_bits=2)
        repo = create_repository(root / "repo")
        lm = create_labelmap(repo, "seg", root / "base", block=BLOCK)
        v = lm.at("main")
        plane = v.read_supervoxels(np.s_[10, :, :])
        svs = [int(s) for s in np.unique(plane)[:6]]
        v.merge(svs[0], svs[1:5])
        v.cleave(svs[0], [svs[4]])
        committed = repo.commit(v.uuid, "merge and cleave")
        export_precomputed(labelmap_source(repo, "seg", committed.uuid), str(root / "export"),
                           chunk_size=(BLOCK, BLOCK, BLOCK))
        with ShardServer() as server:
            export_url = server.mount("export", StoreMount(open_store(str(root / "export"))))
            rows: dict[str, list[float]] = {"version": [], "export": []}
            want: Any = None
            for r in range(args.rounds):
                order = ("version", "export") if r % 2 == 0 else ("export", "version")
                for side in order:
                    if side == "version":  # a fresh mount: no computed chunk is cached server-side
                        url = server.mount(f"version/round{r}/{committed.uuid}", VersionMount(lm, committed.uuid))
                    else:
                        url = export_url
                    n, dt, data = read_all(url)
                    if want is None:
                        want = data
                    assert np.array_equal(data, want), f"{side} served other voxels"
                    rows[side].append(n / dt)
                print(f"round {r + 1}: version {rows['version'][-1]:.0f} chunks/s, "
                      f"export {rows['export'][-1]:.0f} chunks/s", flush=True)
        repo.close()
    ratios = [a / b for a, b in zip(rows["version"], rows["export"], strict=True)]
    for side in ("version", "export"):
        vals = rows[side]
        print(f"{side:8s} {statistics.median(vals):8.0f} chunks/s [{min(vals):.0f}–{max(vals):.0f}]")
    print(f"version / export: {statistics.median(ratios):.2f}x [{min(ratios):.2f}–{max(ratios):.2f}] "
          f"over {args.rounds} paired rounds ({n} chunks of {BLOCK}³ uint64 each)")


if __name__ == "__main__":
    main()
