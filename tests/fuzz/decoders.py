"""Header-field mutations of real encoded chunks, decoded by shardscope in a child process.

Every C decoder shardscope calls (compresso, compressed_segmentation, c-blosc, lz4, zstd, brotli,
libdeflate, bz2, xz, Draco) gets its input checked in Python first. This module tests that claim
the way an attacker would: it takes chunks the real writers encoded (:func:`samples`), overwrites
one field of their headers with a hostile value (:func:`mutate`) and hands the bytes to the same
decode function the readers use (:data:`DECODERS`), in a **child process** (:class:`DecoderChild`),
so that a segmentation fault is reported as a finding with the bytes that caused it instead of
killing pytest or the fuzz run.

What a decode may do with a mutated header:

* raise a :class:`~napari_shardscope.core.errors.ShardscopeError` (typed);
* return data of exactly the size the chunk's spec implies; and for the codecs in
  :data:`EXACT_CODECS`, whose every header field is pinned by another (compresso's section sizes
  and counts, a checksum, a declared size checked against the chunk), exactly the original data.

Anything else is a finding: an untyped exception, a dead child (``crash``), data of the wrong size
(``wrong_size``), or other data from a decoder that did not raise (``wrong_data``).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tests.realdata import REALDATA

#: Outcomes of one decode; the last five are findings.
OUTCOMES = ("exact", "typed", "other_data", "untyped", "crash", "hang", "wrong_size", "wrong_data")
FINDING_OUTCOMES = ("untyped", "crash", "hang", "wrong_size", "wrong_data")

#: Codecs whose every header field is pinned: a decode that succeeds must give back the original bytes.
#: (c-blosc's block starts are not: a permutation of them decodes the blocks in another order;
#: compressed_segmentation's offsets, Draco's and brotli's streams have no redundancy at all.)
EXACT_CODECS = frozenset({"compresso", "zarr2_lz4", "n5_lz4", "gzip", "zarr3_zstd", "n5_zstd", "zarr2_zstd",
                          "zarr2_bz2", "zarr2_lzma", "n5_bzip2", "n5_xz"})

#: Values an attacker writes into a field (as many low bytes as the field has).
HOSTILE_VALUES = (0, 1, 2, 3, 4, 6, 7, 8, 16, 17, 64, 255, 256, 4080, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
                  2**32, 2**63, 2**64 - 1)


@dataclass(frozen=True)
class HeaderField:
    """One field of an encoded chunk's header: ``width`` little-endian bytes at ``offset`` (negative: from the end)."""

    name: str
    offset: int
    width: int
    #: Whether another field or a checksum pins this one (False: compressed payload without a checksum).
    pinned: bool = True

    def at(self, size: int) -> int:
        return self.offset if self.offset >= 0 else size + self.offset


@dataclass(frozen=True)
class Sample:
    """A chunk a real encoder wrote, the decoder that reads it and what it decodes to."""

    name: str
    codec: str
    data: bytes
    params: dict[str, Any]
    expected: bytes
    fields: tuple[HeaderField, ...] = field(default=())

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.expected).hexdigest()


def mutate(sample: Sample, which: HeaderField, value: int) -> bytes:
    """``sample``'s bytes with ``which`` overwritten by ``value`` (its low bytes; fields past the end are skipped)."""
    data = bytearray(sample.data)
    at = which.at(len(data))
    if at < 0 or at + which.width > len(data):
        return bytes(data)
    data[at:at + which.width] = (value % (1 << (8 * which.width))).to_bytes(which.width, "little")
    return bytes(data)


# -- the decoders, as the readers call them (run in the child) ------------------------------------------------
def _decode_compresso(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.formats.precomputed.chunk_encoding import decode_compresso

    return decode_compresso(data, np.dtype(p["dtype"]), tuple(p["extent"]), 1, key="chunk").tobytes(order="F")


def _decode_cseg(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.formats.precomputed.chunk_encoding import decode_compressed_segmentation

    out = decode_compressed_segmentation(data, np.dtype(p["dtype"]), tuple(p["block"]), tuple(p["extent"]),
                                         p["channels"], key="chunk")
    return out.tobytes(order="F")


def _zarr2(codec: str) -> Callable[[bytes, dict[str, Any]], bytes]:
    def decode(data: bytes, p: dict[str, Any]) -> bytes:
        from napari_shardscope.core.formats.zarr2.chunk import decode_chunk
        from napari_shardscope.core.formats.zarr2.metadata import parse_zarray

        meta = parse_zarray(p["zarray"], key=".zarray")
        return decode_chunk(data, meta, key="0.0").tobytes()
    return decode


def _n5(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.formats.n5.compression import decode_payload, parse_compression

    return bytes(decode_payload(data, parse_compression(p["compression"]), p["nbytes"], key="0/0",
                                itemsize=p["itemsize"]))


def _zarr3(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.formats.zarr3.codecs import decode_chunk, split_codec_chain
    from napari_shardscope.core.formats.zarr3.metadata import CodecSpec

    dtype = np.dtype(p["dtype"])
    chain = split_codec_chain(tuple(CodecSpec(n, c) for n, c in p["codecs"]), len(p["shape"]), dtype, key="k")
    return decode_chunk(data, chain, tuple(p["shape"]), dtype, dtype.type(0), key="c/0").tobytes()


def _gzip(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.encoding import gunzip

    return gunzip(data, key="chunk.gz", offset=0, max_size=p["nbytes"])


def _brotli(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.encoding import unbrotli

    return unbrotli(data, key="chunk.br", offset=0, max_size=p["nbytes"])


def _draco(data: bytes, p: dict[str, Any]) -> bytes:
    from napari_shardscope.core.formats.precomputed.meshes import decode_draco_fragment

    points, faces = decode_draco_fragment(data, key="fragment", offset=0)
    return points.tobytes() + faces.tobytes()


DECODERS: dict[str, Callable[[bytes, dict[str, Any]], bytes]] = {
    "compresso": _decode_compresso,
    "compressed_segmentation": _decode_cseg,
    "zarr2_blosc": _zarr2("blosc"), "zarr2_lz4": _zarr2("lz4"), "zarr2_zstd": _zarr2("zstd"),
    "zarr2_bz2": _zarr2("bz2"), "zarr2_lzma": _zarr2("lzma"),
    "n5_blosc": _n5, "n5_lz4": _n5, "n5_zstd": _n5, "n5_xz": _n5, "n5_bzip2": _n5,
    "zarr3_blosc": _zarr3, "zarr3_zstd": _zarr3,
    "gzip": _gzip, "brotli": _brotli, "draco": _draco,
}


def decode_here(codec: str, data: bytes, params: dict[str, Any]) -> tuple[str, str, int]:
    """Decode in this process: ``("ok", sha256, length)``, ``("typed", message, 0)`` or ``("untyped", …, 0)``."""
    from napari_shardscope.core.errors import ShardscopeError

    try:
        out = DECODERS[codec](data, params)
    except ShardscopeError as exc:
        return "typed", f"{type(exc).__name__}: {exc}"[:300], 0
    except Exception as exc:
        return "untyped", f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"[:300], 0
    return "ok", hashlib.sha256(out).hexdigest(), len(out)


def _child_main() -> None:  # pragma: no cover - runs in the child
    """Read ``(codec, data, params)`` messages from stdin, answer each with :func:`decode_here`'s result."""
    import resource

    limit = int(os.environ.get("SHARDSCOPE_DECODER_CHILD_AS_MB", "4096")) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = stdin.read(8)
        if len(head) < 8:
            return
        codec, data, params = pickle.loads(stdin.read(struct.unpack("<Q", head)[0]))
        if codec == "crash_for_test":  # the harness's own test: a read of address 0, as a bad decoder does
            import ctypes

            ctypes.string_at(0)
        try:
            answer = decode_here(codec, data, params)
        except MemoryError:
            answer = ("untyped", "MemoryError", 0)
        blob = pickle.dumps(answer)
        stdout.write(struct.pack("<Q", len(blob)) + blob)
        stdout.flush()


@dataclass(frozen=True)
class Verdict:
    """How one mutated chunk decoded, judged against the original."""

    outcome: str
    detail: str = ""


class DecoderChild:
    """A child Python process that decodes what it is sent; restarted after it dies.

    ``decode`` returns the child's answer, ``("crash", "exit code N", 0)`` when the child died on
    that input (a segmentation fault is ``-11``), or ``("hang", …, 0)`` when one decode used more than
    ``cpu_seconds`` of CPU time (or ``wall_seconds`` of wall time, a backstop): the child is killed
    and the next call starts a fresh one.
    """

    def __init__(self, cpu_seconds: float = 20.0, wall_seconds: float = 300.0) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu_seconds = cpu_seconds
        self.wall_seconds = wall_seconds
        #: The highest peak resident memory (MiB) of the children so far (read when each one ends).
        self.peak_rss_mb = 0.0

    def _start(self) -> subprocess.Popen[bytes]:
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
        return subprocess.Popen([sys.executable, "-c", "from tests.fuzz.decoders import _child_main; _child_main()"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=root)

    def decode(self, codec: str, data: bytes, params: dict[str, Any]) -> tuple[str, str, int]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        blob = pickle.dumps((codec, data, params))
        try:
            self.proc.stdin.write(struct.pack("<Q", len(blob)) + blob)
            self.proc.stdin.flush()
            hung = self._wait_for_answer()
            if hung is not None:
                self._stop(kill=True)
                return "hang", hung, 0
            head = self.proc.stdout.read(8)
            if len(head) == 8:
                answer: tuple[str, str, int] = pickle.loads(self.proc.stdout.read(struct.unpack("<Q", head)[0]))
                return answer
        except (BrokenPipeError, OSError):
            pass
        code = self.proc.wait(timeout=30)
        self.proc = None
        return "crash", f"exit code {code}", 0

    def _wait_for_answer(self) -> str | None:
        """Wait until the child answers or dies; why it counts as hung instead (CPU time, wall backstop)."""
        import select
        import time

        from tests.fuzz.runner import process_cpu_seconds

        assert self.proc is not None and self.proc.stdout is not None
        pid = self.proc.pid
        cpu0, t0 = process_cpu_seconds(pid) or 0.0, time.monotonic()
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                return None
            cpu = process_cpu_seconds(pid)
            if cpu is None:
                return None  # gone: read() sees the end and the caller reports the crash
            if cpu - cpu0 > self.cpu_seconds:
                return f"{cpu - cpu0:.1f} s of CPU time (limit {self.cpu_seconds:g} s)"
            if time.monotonic() - t0 > self.wall_seconds:
                return f"no answer after {time.monotonic() - t0:.0f} s of wall time (backstop {self.wall_seconds:g} s)"

    def _stop(self, *, kill: bool) -> None:
        from tests.fuzz.runner import process_peak_rss_mb

        if self.proc is None:
            return
        peak = process_peak_rss_mb(self.proc.pid)
        if peak is not None:
            self.peak_rss_mb = max(self.peak_rss_mb, peak)
        if kill:
            self.proc.kill()
        elif self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def judge(self, sample: Sample, data: bytes, pinned: bool = True) -> Verdict:
        """Decode ``data`` (a mutation of ``sample``, of a ``pinned`` field) in the child and judge what came back."""
        status, detail, size = self.decode(sample.codec, data, sample.params)
        if status in ("typed", "untyped", "crash", "hang"):
            return Verdict(status, detail)
        if size != len(sample.expected) and sample.codec != "draco":
            return Verdict("wrong_size", f"{size} bytes decoded, the chunk has {len(sample.expected)}")
        if detail == sample.digest:
            return Verdict("exact")
        if sample.codec in EXACT_CODECS and pinned:
            return Verdict("wrong_data", "decoded without an error to other data than was encoded")
        return Verdict("other_data")

    def close(self) -> None:
        self._stop(kill=False)


# -- the samples --------------------------------------------------------------------------------------------
#: The samples cut from real datasets (name: the directory below :data:`REALDATA` they come from).
REAL_SAMPLE_DIRS = {"cseg_cloudvolume_gz": "cloudvolume_gz/8_8_40", "cseg_igneous_pinky": "igneous_pinky_sharded"}

COMPRESSO_FIELDS = tuple(HeaderField(n, o, w) for n, o, w in (
    ("magic", 0, 4), ("format_version", 4, 1), ("data_width", 5, 1), ("sx", 6, 2), ("sy", 8, 2), ("sz", 10, 2),
    ("xstep", 12, 1), ("ystep", 13, 1), ("zstep", 14, 1), ("id_size", 15, 8), ("value_size", 23, 4),
    ("location_size", 27, 8), ("connectivity", 35, 1)))
BLOSC_FIELDS = tuple(HeaderField(n, o, w) for n, o, w in (
    ("version", 0, 1), ("versionlz", 1, 1), ("flags", 2, 1), ("typesize", 3, 1), ("nbytes", 4, 4),
    ("blocksize", 8, 4), ("cbytes", 12, 4), ("bstart0", 16, 4), ("bstart1", 20, 4)))
ZSTD_FIELDS = (HeaderField("magic", 0, 4), *(HeaderField(f"frame_header{i}", 4 + i, 1) for i in range(10)),
               HeaderField("content_size32", 6, 4), HeaderField("block_header", -3, 3))
GZIP_FIELDS = (*(HeaderField(n, o, w) for n, o, w in (("magic", 0, 2), ("method", 2, 1), ("flags", 3, 1),
                                                       ("mtime", 4, 4), ("xfl", 8, 1), ("os", 9, 1))),
               HeaderField("crc32", -8, 4), HeaderField("isize", -4, 4))
N5_LZ4_FIELDS = tuple(HeaderField(n, o, w) for n, o, w in (
    ("magic", 0, 8), ("token", 8, 1), ("compressed", 9, 4), ("decompressed", 13, 4), ("checksum", 17, 4)))
DRACO_FIELDS = (*(HeaderField(n, o, w) for n, o, w in (("magic", 0, 5), ("major", 5, 1), ("minor", 6, 1),
                                                        ("encoder_type", 7, 1), ("method", 8, 1), ("flags", 9, 2))),
                *(HeaderField(f"body{i}", 11 + i, 1) for i in range(24)),
                *(HeaderField(f"varint{i}", 11 + i, 4) for i in range(0, 24, 3)))
BROTLI_FIELDS = tuple(HeaderField(f"byte{i}", i, 1) for i in range(8))
STREAM_FIELDS = (*(HeaderField(f"byte{i}", i, 1) for i in range(12)), HeaderField("tail", -4, 4))


def _label_volume(shape: tuple[int, int, int], seed: int, n: int = 30, huge: bool = False,
                  dtype: str = "uint64") -> np.ndarray:
    """Segmentation-like labels (x, y, z): nearest of ``n`` random points, a few labels near the type's maximum."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    points = rng.integers(0, shape, size=(n, 3))
    grid = np.indices(shape).reshape(3, -1).T
    _, nearest = cKDTree(points).query(grid)
    labels = (nearest.reshape(shape).astype(np.uint64) * 7919 + 11) % np.iinfo(dtype).max
    if huge:  # labels the locations stream stores after a 6 (within 7 of the maximum)
        labels[rng.random(shape) < 0.01] = np.iinfo(dtype).max - 2
    return np.asfortranarray(labels.astype(dtype))


def _compresso_samples() -> list[Sample]:
    import compresso

    out: list[Sample] = []
    for name, shape, dtype, kw, huge in (
            ("compresso_v1_u64", (40, 36, 12), "uint64", {}, False),
            ("compresso_v0_u32", (33, 30, 9), "uint32", {"random_access_z_index": False}, True),
            ("compresso_8x8_u16", (48, 40, 6), "uint16", {"steps": (8, 8, 1)}, False),
            ("compresso_conn6_u8", (24, 20, 10), "uint8", {"connectivity": 6}, True),
            ("compresso_v0_u64_huge", (32, 32, 8), "uint64", {"random_access_z_index": False}, True)):
        labels = _label_volume(shape, seed=len(out), huge=huge, dtype=dtype)
        data = bytes(compresso.compress(labels, **kw))
        tail = compresso.header(data)["format_version"] == 1
        fields = COMPRESSO_FIELDS + ((HeaderField("z_index_first", -2 * shape[2] * 2, 2),
                                      HeaderField("z_index_offsets", -shape[2] * 2, 2)) if tail else ())
        out.append(Sample(name, "compresso", data, {"dtype": dtype, "extent": shape}, labels.tobytes(order="F"),
                          fields))
    return out


def _cseg_fields(data: bytes, channels: int) -> tuple[HeaderField, ...]:
    """Channel offsets and the first block headers (table offset: 3 bytes, bits: 1, values offset: 4)."""
    start = min(4 * int.from_bytes(data[:4], "little"), max(0, len(data) - 48))
    fields = [HeaderField(f"channel{c}", 4 * c, 4) for c in range(channels)]
    for i in range(6):
        at = start + 8 * i
        fields += [HeaderField(f"block{i}_table", at, 3), HeaderField(f"block{i}_bits", at + 3, 1),
                   HeaderField(f"block{i}_values", at + 4, 4)]
    return tuple(fields)


def _cseg_samples() -> list[Sample]:
    import compressed_segmentation as cseg

    from napari_shardscope.core.encoding import gunzip

    out: list[Sample] = []
    labels = _label_volume((20, 18, 10), seed=7, dtype="uint32")
    data = bytes(cseg.compress(labels, block_size=(8, 8, 8), order="F"))
    out.append(Sample("cseg_u32_own", "compressed_segmentation", data,
                      {"dtype": "uint32", "block": (8, 8, 8), "extent": labels.shape, "channels": 1},
                      labels.tobytes(order="F"), _cseg_fields(data, 1)))
    labels64 = _label_volume((16, 16, 16), seed=8, dtype="uint64")
    data = bytes(cseg.compress(labels64, block_size=(4, 4, 4), order="F"))
    out.append(Sample("cseg_u64_own", "compressed_segmentation", data,
                      {"dtype": "uint64", "block": (4, 4, 4), "extent": labels64.shape, "channels": 1},
                      labels64.tobytes(order="F"), _cseg_fields(data, 1)))
    cv = REALDATA / REAL_SAMPLE_DIRS["cseg_cloudvolume_gz"]
    if cv.is_dir():  # CloudVolume's compressed_segmentation, gzipped files
        path = sorted(cv.glob("*.gz"))[0]
        data = gunzip(path.read_bytes(), max_size=1 << 24)
        x0, x1, y0, y1, z0, z1 = (int(v) for part in path.name[:-3].split("_") for v in part.split("-"))
        out.append(_cseg_real("cseg_cloudvolume_gz", data, (x1 - x0, y1 - y0, z1 - z0), "uint32", (8, 8, 8)))
    pinky = REALDATA / REAL_SAMPLE_DIRS["cseg_igneous_pinky"]
    if pinky.is_dir():  # igneous' compressed_segmentation, inside gzipped shards
        from napari_shardscope.core.formats import open_dataset
        from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector

        inspector = open_dataset(pinky).inspector()
        assert isinstance(inspector, PrecomputedInspector)  # its sources and shard reader
        source = inspector.source("8_8_40")
        scale = source.scale
        assert scale is not None
        position = (1, 1, 0)
        start, stop = scale.chunk_bounds(position)
        chunk = inspector.reader(source).read_chunk(scale.chunk_id(position))
        assert chunk is not None
        extent = (stop[0] - start[0], stop[1] - start[1], stop[2] - start[2])
        out.append(_cseg_real("cseg_igneous_pinky", chunk, extent, "uint32", (8, 8, 8)))
    return out


def _cseg_real(name: str, data: bytes, extent: tuple[int, int, int], dtype: str,
               block: tuple[int, int, int]) -> Sample:
    """A compressed_segmentation chunk another writer wrote, with what the reference decoder makes of it."""
    import compressed_segmentation as cseg

    decoded = cseg.decompress(data, extent, np.dtype(dtype), block_size=block, order="F")
    return Sample(name, "compressed_segmentation", data,
                  {"dtype": dtype, "block": block, "extent": extent, "channels": 1},
                  np.asarray(decoded).tobytes(order="F"), _cseg_fields(data, 1))


def _n5_samples(block: np.ndarray) -> list[Sample]:
    from napari_shardscope.core.formats.n5.compression import encode_payload, parse_compression

    raw = block.astype(">u2").tobytes()
    out: list[Sample] = []
    for kind, attrs, fields in (("n5_blosc", {"type": "blosc", "cname": "lz4", "shuffle": 1, "clevel": 5},
                                 BLOSC_FIELDS),
                                ("n5_blosc", {"type": "blosc", "cname": "zstd", "shuffle": 2, "clevel": 3,
                                              "blocksize": 1024}, BLOSC_FIELDS),
                                ("n5_lz4", {"type": "lz4", "blockSize": 4096}, N5_LZ4_FIELDS),
                                ("n5_zstd", {"type": "zstd", "level": 3}, ZSTD_FIELDS),
                                ("n5_xz", {"type": "xz"}, STREAM_FIELDS),
                                ("n5_bzip2", {"type": "bzip2"}, STREAM_FIELDS)):
        data = encode_payload(raw, parse_compression(attrs), 2)
        out.append(Sample(f"{kind}_{len(out)}", kind, data, {"compression": attrs, "nbytes": len(raw), "itemsize": 2},
                          raw, fields))
    return out


def _zarr2_samples(block: np.ndarray) -> list[Sample]:
    import numcodecs

    out: list[Sample] = []
    for cfg, fields in (({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}, BLOSC_FIELDS),
                        ({"id": "blosc", "cname": "zlib", "clevel": 5, "shuffle": -1, "blocksize": 2048},
                         BLOSC_FIELDS),
                        ({"id": "lz4", "acceleration": 1},
                         (HeaderField("size", 0, 4), *(HeaderField(f"block{i}", 4 + i, 1, pinned=False)
                                                       for i in range(4)))),
                        ({"id": "zstd", "level": 3}, ZSTD_FIELDS),
                        ({"id": "bz2", "level": 9}, STREAM_FIELDS),
                        ({"id": "lzma"}, STREAM_FIELDS)):
        codec = numcodecs.get_codec(cfg)
        data = bytes(codec.encode(np.ascontiguousarray(block)))
        zarray = {"zarr_format": 2, "shape": list(block.shape), "chunks": list(block.shape), "dtype": "<u2",
                  "compressor": cfg, "fill_value": 0, "order": "C", "filters": None}
        out.append(Sample(f"zarr2_{cfg['id']}_{len(out)}", f"zarr2_{cfg['id']}", data, {"zarray": zarray},
                          block.tobytes(), fields))
    return out


def _zarr3_samples(block: np.ndarray) -> list[Sample]:
    from napari_shardscope.core.formats.zarr3.codecs import encode_chunk, split_codec_chain
    from napari_shardscope.core.formats.zarr3.metadata import CodecSpec

    out: list[Sample] = []
    for codecs, fields in (((("bytes", {"endian": "little"}),
                             ("blosc", {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2,
                                        "blocksize": 0})), BLOSC_FIELDS),
                           ((("bytes", {"endian": "little"}),
                             ("zstd", {"level": 3, "checksum": False})), ZSTD_FIELDS)):
        chain = split_codec_chain(tuple(CodecSpec(n, c) for n, c in codecs), 2, np.dtype("uint16"), key="k")
        data = encode_chunk(block, chain)
        out.append(Sample(f"zarr3_{codecs[1][0]}", f"zarr3_{codecs[1][0]}", data,
                          {"codecs": codecs, "shape": block.shape, "dtype": "uint16"}, block.tobytes(), fields))
    return out


def _stream_samples(block: np.ndarray) -> list[Sample]:
    import brotli

    from napari_shardscope.core.encoding import gzip_compress

    raw = block.tobytes()
    return [Sample("gzip", "gzip", gzip_compress(raw), {"nbytes": len(raw)}, raw, GZIP_FIELDS),
            Sample("brotli", "brotli", brotli.compress(raw), {"nbytes": len(raw)}, raw, BROTLI_FIELDS)]


def _draco_samples() -> list[Sample]:
    import DracoPy

    from napari_shardscope.core.formats.precomputed.meshes import decode_draco_fragment

    out: list[Sample] = []
    rng = np.random.default_rng(3)
    for method, n in ((10, 60), (0, 40)):  # edgebreaker (speed 0..9 default) and sequential (speed 10)
        points = rng.integers(0, 1023, size=(n, 3)).astype(np.float32)
        faces = np.array([(i, (i + 1) % n, (i + 7) % n) for i in range(n)], dtype=np.uint32)
        data = DracoPy.encode(points, faces, quantization_bits=10, quantization_range=1023,
                              quantization_origin=[0, 0, 0], compression_level=method % 10,
                              create_metadata=False)
        p, f = decode_draco_fragment(data, key="fragment", offset=0)
        out.append(Sample(f"draco_{len(out)}", "draco", data, {}, p.tobytes() + f.tobytes(), DRACO_FIELDS))
    return out


@cache
def samples() -> tuple[Sample, ...]:
    """Every sample chunk (deterministic; the real ones when :data:`tests.realdata.REALDATA` is present: the
    campaign also runs on a fresh clone, and ``test_the_real_chunks_are_among_the_samples`` fails or skips
    by the realdata rule)."""
    rng = np.random.default_rng(2)
    block = np.ascontiguousarray((rng.integers(0, 9, size=(40, 52)) * 37).astype(np.uint16))
    return tuple(_compresso_samples() + _cseg_samples() + _n5_samples(block) + _zarr2_samples(block)
                 + _zarr3_samples(block) + _stream_samples(block) + _draco_samples())


# -- streams inside a dataset's files (the dataset fuzz's codec_header mutation) ---------------------------------
#: Stream kinds whose header lies a read must catch or decode exactly (the runner compares with the seed).
EXACT_STREAM_KINDS = frozenset({"compresso", "gzip", "lz4block"})
#: At most this many streams of one kind are offered per file (a shard holds many chunks).
MAX_STREAMS_PER_FILE = 32


def _offsets(data: bytes, magic: bytes) -> list[int]:
    out: list[int] = []
    at = data.find(magic)
    while at >= 0 and len(out) < MAX_STREAMS_PER_FILE:
        out.append(at)
        at = data.find(magic, at + 1)
    return out


def _positive(fields: tuple[HeaderField, ...]) -> tuple[HeaderField, ...]:
    return tuple(f for f in fields if f.offset >= 0)


def _precomputed_encodings(root: str) -> dict[str, tuple[str, bool]]:
    """``scale key -> (encoding, sharded)`` of the precomputed dataset at ``root`` (empty when it is none).

    The ``info`` an earlier mutation of the same case damaged is read with care: a regular file of at
    most a megabyte (a mutation may have made it a huge sparse file, a FIFO or deeply nested JSON).
    """
    import json
    import stat

    path = Path(root) / "info"
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            return {}
        info = json.loads(path.read_bytes())
        return {str(s["key"]): (str(s.get("encoding")), "sharding" in s) for s in info.get("scales", [])
                if isinstance(s, dict)}
    except (OSError, ValueError, AttributeError, TypeError, KeyError, RecursionError):
        return {}


def codec_streams(path: Path, root: Path) -> list[tuple[str, int, tuple[HeaderField, ...]]]:
    """The encoded streams in the file ``path`` of the dataset at ``root``: ``(kind, start, header fields)``."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    out: list[tuple[str, int, tuple[HeaderField, ...]]] = []
    out += [("compresso", at, COMPRESSO_FIELDS) for at in _offsets(data, b"cpso")]
    out += [("draco", at, _positive(DRACO_FIELDS)) for at in _offsets(data, b"DRACO")]
    out += [("zstd", at, _positive(ZSTD_FIELDS)) for at in _offsets(data, b"\x28\xb5\x2f\xfd")]
    out += [("gzip", at, GZIP_FIELDS if at == 0 else _positive(GZIP_FIELDS))
            for at in _offsets(data, b"\x1f\x8b\x08")]
    out += [("lz4block", at, N5_LZ4_FIELDS) for at in _offsets(data, b"LZ4Block")]
    for at in range(min(64, len(data) - 16)):  # a blosc buffer that ends with the file (zarr chunk, N5 block)
        if data[at] in (1, 2) and data[at + 1] in (1, 2, 3, 4) and \
                int.from_bytes(data[at + 12:at + 16], "little") == len(data) - at:
            out.append(("blosc", at, BLOSC_FIELDS))
    try:
        scale = path.parent.relative_to(root).as_posix()
    except ValueError:
        return out
    encoding, sharded = _precomputed_encodings(str(root)).get(scale, ("", False))
    if encoding == "compressed_segmentation" and not sharded and not path.name.endswith((".gz", ".br")) \
            and len(data) >= 4:
        out.append(("cseg", 0, _cseg_fields(data, 1)))
    return out



# -- a campaign over the decoders (scripts/fuzz.py --surfaces decoders) ---------------------------------------
@dataclass
class DecoderReport:
    """Counts over a decoder campaign, and every finding with the seed that reproduces it."""

    cases: int = 0
    wall_seconds: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    by_codec: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    peak_rss_mb: float = 0.0

    def add(self, seed: int, sample: Sample, which: HeaderField, value: int, verdict: Verdict) -> None:
        self.cases += 1
        self.outcomes[verdict.outcome] = self.outcomes.get(verdict.outcome, 0) + 1
        per = self.by_codec.setdefault(sample.codec, {})
        per[verdict.outcome] = per.get(verdict.outcome, 0) + 1
        if verdict.outcome in FINDING_OUTCOMES:
            self.findings.append({"seed": seed, "class": verdict.outcome, "sample": sample.name,
                                  "field": which.name, "value": value, "detail": verdict.detail})

    def to_json(self, max_findings: int = 200) -> dict[str, Any]:
        return {"cases": self.cases, "wall_seconds": round(self.wall_seconds, 1),
                "cases_per_second": round(self.cases / self.wall_seconds, 1) if self.wall_seconds else 0.0,
                "peak_child_rss_mb": round(self.peak_rss_mb, 1), "findings": len(self.findings),
                "findings_by_class": {c: self.outcomes.get(c, 0) for c in FINDING_OUTCOMES},
                "outcomes": dict(sorted(self.outcomes.items())), "by_codec": dict(sorted(self.by_codec.items())),
                "finding_list": self.findings[:max_findings]}

    def summary(self) -> str:
        doc = self.to_json(max_findings=0)
        lines = [f"decoders: cases {doc['cases']}, wall {doc['wall_seconds']} s, {doc['cases_per_second']} cases/s, "
                 f"findings {doc['findings']}, peak child RSS {doc['peak_child_rss_mb']} MiB",
                 f"  findings by class: {doc['findings_by_class']}", f"  outcomes: {doc['outcomes']}"]
        lines += [f"  {codec:24} {counts}" for codec, counts in doc["by_codec"].items()]
        lines += [f"FINDING seed={f['seed']} {f['class']} {f['sample']}.{f['field']}={f['value']}: {f['detail']}"
                  for f in self.findings[:50]]
        return "\n".join(lines)


def decoder_case(seed: int) -> tuple[Sample, HeaderField, int, bytes]:
    """The mutation of ``seed``: a sample, one of its header fields, a hostile value, and the mutated bytes."""
    import random

    rng = random.Random(seed)
    sample = rng.choice(samples())
    which = rng.choice(sample.fields)
    at = which.at(len(sample.data))
    orig = int.from_bytes(sample.data[at:at + which.width], "little")
    value = rng.choice((*HOSTILE_VALUES, orig + 1, max(0, orig - 1), 2 * orig, orig // 2, orig ^ 1,
                        rng.getrandbits(8 * which.width), rng.getrandbits(8 * which.width)))
    return sample, which, value, mutate(sample, which, value)


#: Cases one decoder child process decodes before it is replaced.
CHILD_CASES = 5000


def fuzz_decoders(seeds: Any, *, workers: int = 2, deadline: float | None = None, cpu_seconds: float = 20.0,
                  wall_seconds: float = 300.0,
                  on_case: Callable[[int, Verdict], None] = lambda seed, verdict: None) -> DecoderReport:
    """Decode one header mutation per seed in ``workers`` child processes; the report of the campaign."""
    import threading
    import time

    samples()  # build them once, before the threads ask
    report = DecoderReport()
    lock = threading.Lock()
    todo = iter(seeds)
    t0 = time.monotonic()

    def work() -> None:
        child = DecoderChild(cpu_seconds, wall_seconds)
        done = 0
        try:
            while deadline is None or time.monotonic() < deadline:
                with lock:
                    seed = next(todo, None)
                if seed is None:
                    return
                done += 1
                if done % CHILD_CASES == 0:  # a fresh child now and then: a leak must not pile up into findings
                    child.close()  # (its peak memory is kept; the next decode starts a new one)
                sample, which, value, data = decoder_case(seed)
                verdict = child.judge(sample, data, which.pinned) if data != sample.data else Verdict("exact")
                with lock:
                    report.add(seed, sample, which, value, verdict)
                on_case(seed, verdict)
        finally:
            child.close()
            with lock:
                report.peak_rss_mb = max(report.peak_rss_mb, child.peak_rss_mb)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, workers))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    report.wall_seconds = time.monotonic() - t0
    return report
