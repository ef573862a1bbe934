"""Benchmark: N5 gzip blocks written and read by our block codec (libdeflate) against TensorStore's ``n5`` driver.

Run: ``python bench/n5_gzip.py [--rounds 5] [--size 256]`` (writes ``bench/results/n5_gzip.json``;
``python bench/table.py`` renders ``bench/README.md``).

A ``size``³ volume (default 256³) of uint8 (an image: gradient plus noise) and of uint64 (blocky
labels), 64³ blocks, compression ``{"type": "gzip"}`` with N5's default level -1 on both sides
(zlib's 6; TensorStore's n5 driver and Java N5 write that too). Per round, alternating who goes first:

* write: every block through :func:`~napari_shardscope.core.formats.n5.block.write_block` on a
  thread pool of one worker per CPU (libdeflate releases the GIL), against TensorStore's
  ``store[...] = array`` with its default context (a fresh dataset each time). The output-size ratio
  is recorded too (zlib level 6, which our encoder writes as libdeflate level 7, the level of the same size).
* read: the volume read whole through the viewer's path for N5 data TensorStore cannot read
  (``open_chunk_source`` over :class:`~napari_shardscope.core.formats.n5.volume.N5ChunkSource`:
  TensorStore's ``virtual_chunked`` calling our block decoder) against TensorStore's ``n5`` driver,
  each with a fresh context (cold cache), both reading the same files (TensorStore's).
* encode only, one thread: our gzip block encoder (libdeflate) against the one it replaced (CPython
  zlib at the same level, Java's framing), same blocks; the ratio is the change's own effect.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tensorstore as ts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIN_ROUNDS, Row, paired_rounds, record, record_pair, save, spread
from napari_shardscope.core.bytestore import LocalByteStore
from napari_shardscope.core.formats.n5.attributes import parse_dataset_attributes
from napari_shardscope.core.formats.n5.block import write_block
from napari_shardscope.core.formats.n5.compression import JAVA_GZIP_HEADER, encode_payload
from napari_shardscope.core.formats.n5.volume import N5ChunkSource
from napari_shardscope.core.volumes.tsopen import open_chunk_source

BENCH = "n5_gzip"
BLOCK = 64
#: N5's defaults (level -1 = zlib's 6, gzip not zlib framing), then level 9 (where libdeflate and zlib
#: compress labels to the same size at the same number; 6 is written as libdeflate 7, see encoding).
LEVELS = (-1, 9)


def make_image(n: int) -> np.ndarray:
    z, y, x = np.ogrid[0:n, 0:n, 0:n]
    noise = np.random.default_rng(0).integers(0, 12, (n, n, n), dtype=np.uint8)
    return (((x * 3 + y * 5 + z * 7) // 9) % 200 + noise).astype(np.uint8)


def make_labels(n: int) -> np.ndarray:
    z, y, x = np.ogrid[0:n, 0:n, 0:n]
    return (1 + (x // 37) + 11 * (y // 29) + 131 * (z // 17)).astype(np.uint64)


def blocks_of(volume: np.ndarray) -> list[tuple[tuple[int, int, int], np.ndarray]]:
    """``(grid position x,y,z, block (z,y,x))`` of a (z, y, x) volume, as N5 stores them."""
    n = volume.shape[0] // BLOCK
    b = BLOCK
    return [((gx, gy, gz), volume[gz * b:(gz + 1) * b, gy * b:(gy + 1) * b, gx * b:(gx + 1) * b])
            for gz in range(n) for gy in range(n) for gx in range(n)]


def ts_spec(path: Path, volume: np.ndarray, level: int = -1) -> dict:
    return {"driver": "n5", "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {"dimensions": list(volume.shape[::-1]), "blockSize": [BLOCK] * 3,
                         "dataType": volume.dtype.name, "compression": {"type": "gzip", "level": level}}}


def block_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name.isdigit())


def zlib_java_gzip(data: bytes, level: int) -> bytes:
    """The encoder this change replaced: zlib's DEFLATE in Java's gzip framing."""
    packer = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = packer.compress(data) + packer.flush()
    return JAVA_GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def bench_write(volume: np.ndarray, rounds: int, root: Path, level: int) -> None:
    dtype = volume.dtype.name
    n = volume.shape[0]
    mb = volume.nbytes / 2**20
    blocks = blocks_of(volume)
    ours_dir, ts_dir = root / f"ours-{dtype}", root / f"ts-{dtype}"
    doc = {"dimensions": list(volume.shape[::-1]), "blockSize": [BLOCK] * 3, "dataType": dtype,
           "compression": {"type": "gzip", "level": level}}
    attrs = parse_dataset_attributes(doc)
    sizes: dict[str, list[int]] = {"ours": [], "ts": []}
    workers = os.cpu_count() or 1

    def ours_write() -> None:
        shutil.rmtree(ours_dir, ignore_errors=True)
        ours_dir.mkdir()
        (ours_dir / "attributes.json").write_text(json.dumps(doc))
        store = LocalByteStore(ours_dir)
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda b: write_block(store, attrs, b[0], b[1]), blocks))
        sizes["ours"].append(block_bytes(ours_dir))

    def ts_write() -> None:
        store = ts.open({**ts_spec(ts_dir, volume, level), "create": True, "delete_existing": True},
                        context=ts.Context()).result()
        store[...] = volume.T
        sizes["ts"].append(block_bytes(ts_dir))

    pair = paired_rounds(ours_write, ts_write, rounds)
    size_ratio = [o / t for o, t in zip(sizes["ours"], sizes["ts"], strict=True)]
    said = "level -1 (zlib's 6)" if level == -1 else f"level {level}"
    record_pair(BENCH, f"N5 gzip write {n}^3 ({mb:.0f} MiB), {BLOCK}^3 blocks, {said}", dtype, pair,
                "TensorStore n5 write", 1.0, unit="ms",
                setting=f"gzip {said} both{' (defaults)' if level == -1 else ''}; ours write_block on {workers} "
                        f"threads; size ours/TensorStore {spread(size_ratio, '{:.3f}')}")
    record(Row(BENCH, f"N5 gzip output size ours / TensorStore, {said}", dtype,
               spread(sizes["ours"], "{:.0f}") + " B", "TensorStore", spread(sizes["ts"], "{:.0f}") + " B",
               spread(size_ratio, "{:.3f}") + "x", "within 5% (or smaller)", statistics.median(size_ratio) <= 1.05,
               rounds, f"gzip {said} both"))


def bench_read_encode(volume: np.ndarray, rounds: int, root: Path) -> None:
    """Reads of TensorStore's files (written at the default level) and single-thread encoding."""
    dtype = volume.dtype.name
    n = volume.shape[0]
    mb = volume.nbytes / 2**20
    ts_dir = root / f"ts-{dtype}"
    store = ts.open({**ts_spec(ts_dir, volume), "create": True, "delete_existing": True}).result()
    store[...] = volume.T
    attrs = parse_dataset_attributes(json.loads((ts_dir / "attributes.json").read_text()))

    def ours_read() -> None:
        source = N5ChunkSource(LocalByteStore(ts_dir), attrs)
        got = open_chunk_source(source, ts.Context(), where=str(ts_dir)).read().result()
        assert got.shape == volume.shape[::-1]

    def ts_read() -> None:
        ts.open(ts_spec(ts_dir, volume), open=True, context=ts.Context()).result().read().result()

    np.testing.assert_array_equal(  # both read the same (TensorStore's) files, and correctly
        open_chunk_source(N5ChunkSource(LocalByteStore(ts_dir), attrs), ts.Context(), where="").read().result(),
        volume.T)
    pair = paired_rounds(ours_read, ts_read, rounds)
    record_pair(BENCH, f"N5 gzip read {n}^3 ({mb:.0f} MiB), cold", dtype, pair, "TensorStore n5 read", 1.0,
                unit="ms", setting="TensorStore-written files; ours: our block decoder under virtual_chunked")

    payloads = [np.ascontiguousarray(b, dtype=attrs.dtype).tobytes() for _, b in blocks_of(volume)[:8]]
    comp = attrs.compression
    pair = paired_rounds(lambda: [encode_payload(p, comp) for p in payloads],
                         lambda: [zlib_java_gzip(p, 6) for p in payloads], rounds)
    record_pair(BENCH, f"N5 gzip encode {len(payloads)} blocks, 1 thread", dtype, pair,
                "CPython zlib (the encoder before)", 1.0, unit="ms", setting="level 6 both")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--size", type=int, default=256, help="side of the cubic volume (a multiple of 64)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for volume in (make_image(args.size), make_labels(args.size)):
            for level in LEVELS:
                bench_write(volume, args.rounds, Path(tmp), level)
            bench_read_encode(volume, args.rounds, Path(tmp))
    save(BENCH)
    return 0


if __name__ == "__main__":
    sys.exit(main())
