"""N5 lz4 blocks: decoding with the ``xxhash`` package's checksum vs the pure-Python xxHash32 it replaced.

N5 lz4 blocks are lz4-java block streams whose every 64 KiB block carries an xxHash32 checksum
(:mod:`napari_shardscope.core.formats.n5.lz4_stream`). The checksum is verified on every read; until
this change it was computed in pure Python. This script decodes the same blocks both ways, paired
round by round in one process (same bytes, same cache state, same LZ4 decoder), and also reads the
whole volume through the viewer's path (TensorStore's ``virtual_chunked`` over our block reader)
against TensorStore's own ``n5`` driver reading the gzip copy of the same image.

Run from the repository root::

    python bench/n5_lz4.py [--repeats 7] [--size 1024]

Data: n5-java's ``lz4`` and ``gzip`` datasets from ``../shared/realdata/n5java_zi`` (3 x 512 x 512
uint8) when present; ``--size N`` also writes an N x N x 16 uint16 lz4 dataset with our encoder.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REALDATA = ROOT / ".." / "shared" / "realdata" / "n5java_zi" / "n5-java.n5"


def python_xxh32(data: bytes, seed: int = 0) -> int:
    """The pure-Python xxHash32 the project used before (kept here as the "before" of this benchmark)."""
    p1, p2, p3, p4, p5, m = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1, 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    n = len(data)
    seed &= m
    pos = 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed, (seed - p1) & m]
        nwords = (n // 16) * 4
        words = struct.unpack_from(f"<{nwords}I", data)
        for i in range(0, nwords, 4):
            for j in range(4):
                a = (v[j] + words[i + j] * p2) & m
                v[j] = (((a << 13) | (a >> 19)) * p1) & m
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
        pos = nwords * 4
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (rotl((h + word * p3) & m, 17) * p4) & m
        pos += 4
    while pos < n:
        h = (rotl((h + data[pos] * p5) & m, 11) * p1) & m
        pos += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def blocks_of(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file() and p.name.isdigit()]


def timed(func: Callable[[], object]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def summary(label: str, ours: list[float], peer: list[float], unit_bytes: int) -> None:
    ratios = [p / o for o, p in zip(ours, peer, strict=True)]
    mb = unit_bytes / 1e6
    print(f"{label}: ours {statistics.median(ours) * 1e3:.1f} ms ({mb / statistics.median(ours):.0f} MB/s), "
          f"peer {statistics.median(peer) * 1e3:.1f} ms; speed ratio peer/ours median {statistics.median(ratios):.1f}x "
          f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x, {len(ratios)} paired rounds)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size", type=int, default=1024, help="side of the generated lz4 dataset (0: none)")
    args = parser.parse_args()

    import tensorstore as ts

    from napari_shardscope.core.formats import open_dataset
    from napari_shardscope.core.formats.n5 import lz4_stream
    from napari_shardscope.core.formats.n5.block import decode_block
    from napari_shardscope.core.volumes import open_volume

    datasets: list[tuple[str, Path]] = []
    if REALDATA.is_dir():
        datasets.append(("n5-java lz4 3x512x512 uint8", REALDATA / "lz4"))
    tmp = tempfile.TemporaryDirectory()
    if args.size:
        from napari_shardscope.core.bytestore import LocalByteStore
        from napari_shardscope.core.formats.n5.attributes import parse_dataset_attributes
        from napari_shardscope.core.formats.n5.block import write_block

        path = Path(tmp.name) / "gen.n5"
        path.mkdir()
        doc = {"dimensions": [args.size, args.size, 16], "blockSize": [256, 256, 16], "dataType": "uint16",
               "compression": {"type": "lz4", "blockSize": 65536}}
        (path / "attributes.json").write_text(__import__("json").dumps(doc))
        attrs = parse_dataset_attributes(doc, key="attributes.json")
        store = LocalByteStore(path)
        rng = np.random.default_rng(0)
        for gx in range(args.size // 256):
            for gy in range(args.size // 256):
                block = (rng.integers(0, 64, size=(16, 256, 256)) * 1000).astype(">u2")
                write_block(store, attrs, (gx, gy, 0), block)
        datasets.append((f"generated lz4 {args.size}x{args.size}x16 uint16", path))

    fast = lz4_stream.compute_xxh32
    for label, path in datasets:
        attrs = open_dataset(path).inspector().attributes()
        blocks = blocks_of(path)
        nbytes = sum(len(decode_block(b, attrs).data.tobytes()) for b in blocks)

        def decode_all(blocks: list[bytes] = blocks, attrs: object = attrs) -> None:
            for b in blocks:
                decode_block(b, attrs)  # type: ignore[arg-type]

        ours, before = [], []
        for _ in range(args.repeats):
            lz4_stream.compute_xxh32 = fast
            ours.append(timed(decode_all))
            lz4_stream.compute_xxh32 = python_xxh32
            before.append(timed(decode_all))
        lz4_stream.compute_xxh32 = fast
        summary(f"{label}: decode {len(blocks)} blocks, xxhash vs pure-Python checksum (before)", ours, before,
                nbytes)

    if REALDATA.is_dir():  # the viewer's path vs TensorStore's n5 driver on the gzip copy, cold each round
        ours, peer = [], []
        for _ in range(args.repeats):
            ours.append(timed(lambda: open_volume(REALDATA / "lz4", context=ts.Context()).levels[0].array.read()))
            peer.append(timed(lambda: ts.open({"driver": "n5", "kvstore": f"file://{REALDATA / 'gzip'}/"},
                                              context=ts.Context()).result().read().result()))
        summary("n5-java 3x512x512: open + read all, lz4 through virtual_chunked vs TensorStore n5 (gzip copy)",
                ours, peer, 3 * 512 * 512)
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
