"""Damaged and hostile datasets of every format, one per seed, for the fuzz suite.

:func:`build_seeds` writes (once per run) small valid datasets of every kind shardscope opens —
precomputed sharded and unsharded, zarr v3 sharded and unsharded, an OME-Zarr group, N5 datasets and
multiscale groups — with the project's own test writers (TensorStore underneath), plus copies of
small datasets from ``shared/realdata`` written by other software. :func:`make_case` then copies one
of them, chosen by the seed, and applies one to three mutations chosen by the seed too: damaged
bytes (truncation, bit flips, bytes prepended/appended, huge integers written over index entries,
gzip bombs), hostile metadata (wrong types, huge/negative/zero/NaN values, huge strings and arrays,
deep nesting, keys and paths leading out of the dataset) and hostile files (links to a canary
outside the root, link loops, FIFOs, sockets and directories where a file should be, missing files,
huge sparse files). The same seed always gives the same case, so a finding is reproduced with
``scripts/fuzz.py --replay SEED``.

Outside the dataset root, each case holds a *canary*: a file of unique bytes and a directory that is
a valid copy of the dataset (so a ``..`` key that escapes finds data worth reading). Their access
times are set before the mutated dataset is used; :func:`canary_reads` reports any that changed, which
catches reads by TensorStore's C++ code too (the filesystem is mounted ``relatime``: the first read
after the modification time updates the access time).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realdata import REALDATA

#: Small real datasets used as seeds: (name, format, path below REALDATA). Big ones (n5java_zi) are left
#: out because every case copies its seed.
REALDATA_SEEDS: tuple[tuple[str, str, str], ...] = (
    ("rd_cloudvolume_gz", "precomputed", "cloudvolume_gz"),
    ("rd_wk_png_gray", "precomputed", "wk_ng_png/gray"),
    ("rd_cloudvolume_jpeg", "precomputed", "cloudvolume_jpeg"),
    ("rd_igneous_sharded", "precomputed", "igneous_pinky_sharded"),
    ("rd_noduli_negoffset", "precomputed", "noduli_seg_negoffset"),
    ("rd_ng_nodata", "precomputed", "ng_precomputed_nodata/two_channels"),
    ("rd_zarrita_sharded3d", "zarr3", "ng_zarrita_v3/data.zarr/3d.chunked.mixed.compressed.sharded.i2"),
    ("rd_zarrita_ragged2d", "zarr3", "ng_zarrita_v3/data.zarr/2d.chunked.ragged.compressed.sharded.i2"),
    ("rd_zarrita_blosc1d", "zarr3", "ng_zarrita_v3/data.zarr/1d.contiguous.blosc.i2"),
    ("rd_zarrs_sharded", "zarr3", "zarrs_rust/sharded_array_write_read.zarr"),
    ("rd_zarrpy_zstd", "zarr3", "zarrs_v3_zarrpython/array_zstd.zarr"),
    ("rd_zarrjava_start", "zarr3", "zarrjava_sharding/start"),
    ("rd_wk_zarr3", "zarr3", "wk_zarr3_sharded"),
    ("rd_ome_simple", "zarr3", "ng_ome_zarr/simple_0.5"),
    ("rd_ome_zarrjava", "zarr3", "zarrjava_ome05"),
    ("rd_n5_ts_gzip", "n5", "ts_n5_testdata/gzip"),
    ("rd_n5_ts_raw", "n5", "ts_n5_testdata/raw"),
    ("rd_n5_java150", "n5", "n5java_backward/data-1.5.0.n5"),
    ("rd_n5_wk", "n5", "wk_simple_n5/color"),
    ("rd_n5_ng_modern", "n5", "ng_n5_multiscale/n5_viewer_multiscale_modern"),
)

#: The metadata documents of the formats (mutated as JSON, not as bytes, most of the time).
METADATA_NAMES = frozenset({"info", "zarr.json", "attributes.json", ".zarray", ".zgroup", ".zattrs"})
#: Metadata fields whose hostile values are most likely to reach an allocation, a loop or a path.
INTERESTING_FIELDS = frozenset({
    "size", "shape", "chunk_size", "chunk_sizes", "chunk_shape", "blockSize", "dimensions", "voxel_offset",
    "resolution", "pixelResolution", "downsamplingFactors", "scales", "key", "path", "datasets", "preshift_bits",
    "minishard_bits", "shard_bits", "num_channels", "data_type", "dataType", "codecs", "index_codecs",
    "index_location", "compression", "encoding", "sharding", "mesh", "skeletons", "segment_properties",
    "fill_value", "chunk_key_encoding", "separator", "order", "level", "blocksize", "coordinateTransformations",
    "multiscales", "axes", "scale", "translation", "type", "hash", "endian", "compressed_segmentation_block_size",
})

#: The bytes of the canary file: a marker no dataset holds, repeated, so any piece of it that a read
#: returns is recognisable.
CANARY_MARKER = b"SHARDSCOPE-CANARY-5f3c9e1d-OUTSIDE-THE-ROOT:"
CANARY_BYTES = CANARY_MARKER * 1024

#: Files larger than this (sparse files made by an earlier mutation) are not mutated again.
MAX_MUTATED_FILE_BYTES = 64 << 20

#: A gzip stream that inflates to this many bytes (4 GiB of zeros) from a few megabytes.
BOMB_INFLATED_BYTES = 4 << 30


@dataclass(frozen=True)
class SeedDataset:
    """One valid dataset a case starts from (a pristine copy under the run's seed directory)."""

    name: str
    fmt: str
    path: Path


@dataclass
class HostileCase:
    """One damaged/hostile dataset and what was done to it.

    ``root`` is what the operations open; ``canary_file`` and ``canary_dir`` lie outside it, next to
    ``root`` (``root/../canary``): nothing shardscope does with ``root`` may read them.
    """

    seed: int
    base: str
    fmt: str
    root: Path
    canary_file: Path
    canary_dir: Path
    mutations: list[str] = field(default_factory=list)
    #: Access and modification times of every canary path, as set before the case was used.
    canary_times: dict[str, float] = field(default_factory=dict)

    @property
    def mutation_kinds(self) -> list[str]:
        """The mutation names without their details (``"truncate"`` of ``"truncate:s0/0/0@12"``)."""
        return [m.split(":", 1)[0] for m in self.mutations]


# -- seeds -------------------------------------------------------------------------------------------------
def build_seeds(root: Path) -> list[SeedDataset]:
    """Write the valid seed datasets under ``root`` (once: a marker file says they are complete).

    Our own small datasets come from the project's test writers (:mod:`tests.volume_cases`,
    :mod:`tests.precomputed_data`); the real ones are copies of ``shared/realdata`` entries (skipped
    when that directory is absent).
    """
    done = root / ".complete"
    if not done.exists() or done.read_text() != SEEDS_VERSION:  # seeds written by an older suite: rebuild
        if root.exists():
            shutil.rmtree(root)
        _write_own_seeds(root / "own")
        for name, _fmt, rel in REALDATA_SEEDS:
            src = REALDATA / rel
            if src.is_dir():
                shutil.copytree(src, root / "real" / name, symlinks=True)
        (root / "bomb.gz").write_bytes(gzip_bomb(BOMB_INFLATED_BYTES))
        done.write_text(SEEDS_VERSION)
    return list_seeds(root)


def list_seeds(root: Path) -> list[SeedDataset]:
    """The seed datasets :func:`build_seeds` wrote under ``root``, in a fixed order."""
    own = [SeedDataset(name, fmt, root / "own" / rel) for name, fmt, rel in _OWN_SEEDS]
    real = [SeedDataset(name, fmt, root / "real" / name) for name, fmt, _ in REALDATA_SEEDS]
    return [s for s in own + real if s.path.is_dir()]


#: What :func:`build_seeds` writes; a seed directory marked with another version is rebuilt.
SEEDS_VERSION = "2: compresso and compressed_segmentation seeds"

#: Our own seeds: (name, format, directory below ``own``), as :func:`_write_own_seeds` lays them out.
_OWN_SEEDS: tuple[tuple[str, str, str], ...] = (
    ("pc_sharded_raw", "precomputed", "pc_sharded_raw"),
    ("pc_sharded_gzip", "precomputed", "pc_sharded_gzip"),
    ("pc_compresso_sharded", "precomputed", "pc_compresso_sharded"),
    ("pc_compresso_unsharded", "precomputed", "pc_compresso_unsharded"),
    ("pc_cseg_unsharded", "precomputed", "pc_cseg_unsharded"),
    ("pc_unsharded", "precomputed", "cases/pc_unsharded"),
    ("pc_channels", "precomputed", "cases/pc_rgb"),
    ("zarr3_sharded", "zarr3", "cases/labels.zarr"),
    ("zarr3_unsharded", "zarr3", "cases/image.ome.zarr/0"),
    ("ome_zarr", "zarr3", "cases/image.ome.zarr"),
    ("n5_dataset", "n5", "cases/single.n5/raw"),
    ("n5_viewer_group", "n5", "cases/seg.n5"),
    ("n5_bdv_group", "n5", "cases/bdv.n5/setup0/timepoint0"),
    ("zarr2_array", "zarr2", "cases/v2labels.zarr"),
    ("ome_zarr_04", "zarr2", "cases/image04.ome.zarr"),
)


def _write_own_seeds(own: Path) -> None:
    from tests.precomputed_data import (
        SHARDING_IDENTITY_RAW,
        SHARDING_MURMUR_GZIP,
        write_compresso_volume,
        write_cseg_volume,
        write_ts_volume,
    )
    from tests.volume_cases import build_format_cases

    write_ts_volume(own / "pc_sharded_raw", SHARDING_IDENTITY_RAW, size=(20, 18, 10), chunk=(8, 8, 4), scales=2)
    write_ts_volume(own / "pc_sharded_gzip", SHARDING_MURMUR_GZIP, size=(20, 18, 10), chunk=(8, 8, 4), scales=2)
    # compresso and compressed_segmentation, whose C++ decoders get the chunks' bytes (codec_header mutates them)
    write_compresso_volume(own / "pc_compresso_sharded", sharded=True, size=(40, 36, 12), chunk=(20, 18, 12))
    write_compresso_volume(own / "pc_compresso_unsharded", sharded=False, size=(40, 36, 12), chunk=(20, 18, 12))
    write_cseg_volume(own / "pc_cseg_unsharded", size=(24, 20, 12), chunk=(12, 10, 12))
    cases = build_format_cases(own / "cases")
    expected = {rel for _, _, rel in _OWN_SEEDS if rel.startswith("cases/")}
    written = {str(c.path.relative_to(own)) for c in cases.values()}
    missing = {rel for rel in expected if not (own / rel).is_dir()}
    if missing:  # the test writers changed their layout: say so instead of fuzzing fewer formats
        raise RuntimeError(f"seed datasets missing: {sorted(missing)} (written: {sorted(written)})")


def gzip_bomb(inflated: int, *, zlib_wrapper: bool = False) -> bytes:
    """A gzip member (``zlib_wrapper``: a zlib stream) that inflates to ``inflated`` zero bytes, built without
    compressing them all.

    16 MiB of zeros are deflated once, ended with a full flush (which makes the piece independent
    of what precedes it), and the piece is repeated. The gzip trailer's CRC is not the real one: the
    point is what a decoder allocates before it gets there. (The zlib stream's Adler-32 is: over zeros it
    is ``n mod 65521`` in its high half and 1 in its low.) Deflate's ratio on zeros is about
    1000:1 whatever the piece: a 4 GiB bomb is ~4 MB from a 16 MiB piece as from a 1 GiB one,
    which cost 2.9 CPU s to deflate and a GiB of memory; the piece costs 0.04 s.
    """
    piece_size = min(inflated, 1 << 24)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = comp.compress(bytes(piece_size)) + comp.flush(zlib.Z_FULL_FLUSH)
    body = piece * max(1, inflated // piece_size) + comp.flush(zlib.Z_FINISH)
    if zlib_wrapper:
        return b"\x78\xda" + body + struct.pack(">I", (inflated % 65521) << 16 | 1)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + body + struct.pack("<II", 0, inflated & 0xFFFFFFFF)


# -- cases --------------------------------------------------------------------------------------------------
def make_case(seed: int, seeds: list[SeedDataset], work: Path, bomb: Path | None = None) -> HostileCase:
    """Build the hostile dataset of ``seed`` in ``work`` (which must not exist yet).

    ``work/ds`` is the dataset root, ``work/canary`` and ``work/canary_dir`` the canary. ``bomb`` is a
    prebuilt gzip bomb (:func:`gzip_bomb`); without it the bomb mutation is skipped.
    """
    rng = random.Random(seed)
    base = seeds[rng.randrange(len(seeds))]
    work.mkdir(parents=True)
    root = work / "ds"
    shutil.copytree(base.path, root, symlinks=True)
    case = HostileCase(seed, base.name, base.fmt, root, work / "canary", work / "canary_dir")
    case.canary_file.write_bytes(CANARY_BYTES)
    shutil.copytree(base.path, case.canary_dir, symlinks=True)
    target = _Target(rng, root, case, bomb)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        kind, mutate = rng.choices(MUTATIONS, weights=[w for _, w, _ in _MUTATION_TABLE])[0]
        detail = mutate(target)
        if detail is not None:
            case.mutations.append(f"{kind}:{detail}")
    if not case.mutations:
        case.mutations.append("none")
    _age_canary(case)
    return case


def canary_reads(case: HostileCase) -> list[str]:
    """The canary paths whose access time changed since the case was built (each was read)."""
    touched = []
    for path, atime in case.canary_times.items():
        try:
            now = os.stat(path, follow_symlinks=False).st_atime
        except OSError:
            continue
        if now != atime:
            touched.append(path)
    return touched


def _age_canary(case: HostileCase) -> None:
    """Set every canary path's access time before its modification time, and remember it.

    Under ``relatime`` the next read (``read``, ``readdir``) then updates the access time; a ``stat``
    does not, so :func:`canary_reads` can look without reading.
    """
    paths = [case.canary_file, case.canary_dir]
    for dirpath, dirnames, filenames in os.walk(case.canary_dir):
        paths.extend(Path(dirpath) / n for n in dirnames + filenames)
    for path in reversed(paths):  # children first: changing a child does not change its parent's times
        st = os.stat(path, follow_symlinks=False)
        if os.path.islink(path):
            continue
        atime = st.st_mtime - 3600
        os.utime(path, (atime, st.st_mtime), follow_symlinks=False)
        case.canary_times[str(path)] = os.stat(path, follow_symlinks=False).st_atime


class _Target:
    """What the mutations work on: the dataset's files, the canary, the random generator."""

    def __init__(self, rng: random.Random, root: Path, case: HostileCase, bomb: Path | None) -> None:
        self.rng = rng
        self.root = root
        self.case = case
        self.bomb = bomb

    def files(self) -> list[Path]:
        """Regular files of the dataset (not following links, not the huge sparse files an earlier
        mutation made: reading those whole is what the dataset must not make *us* do), sorted so the
        seed decides."""
        out = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            for name in filenames:
                path = Path(dirpath) / name
                if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_MUTATED_FILE_BYTES:
                    out.append(path)
        return sorted(out)

    def dirs(self) -> list[Path]:
        return sorted(Path(d) for d, _, _ in os.walk(self.root) if Path(d) != self.root)

    def metadata_files(self) -> list[Path]:
        return [f for f in self.files() if f.name in METADATA_NAMES]

    def data_files(self) -> list[Path]:
        return [f for f in self.files() if f.name not in METADATA_NAMES and not f.name.endswith(".json")]

    def pick_file(self, prefer_data: bool) -> Path | None:
        data, meta = self.data_files(), self.metadata_files()
        pool = (data or meta) if prefer_data and self.rng.random() < 0.8 else (data + meta)
        return self.rng.choice(pool) if pool else None

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def offset(self, size: int) -> int:
        """A byte offset biased towards the ends of a file, where shard indexes and headers live."""
        if size <= 0:
            return 0
        r = self.rng.random()
        if r < 0.35:
            return self.rng.randrange(min(size, 64))
        if r < 0.7:
            return max(0, size - 1 - self.rng.randrange(min(size, 64)))
        return self.rng.randrange(size)


# -- byte mutations ---------------------------------------------------------------------------------------
def _truncate(t: _Target) -> str | None:
    path = t.pick_file(prefer_data=True)
    if path is None:
        return None
    size = path.stat().st_size
    cut = t.rng.choice((0, 1, t.offset(size), size // 2, max(0, size - 1), max(0, size - 4)))
    os.truncate(path, cut)
    return f"{t.rel(path)}@{cut}"


def _flip_bits(t: _Target) -> str | None:
    path = t.pick_file(prefer_data=True)
    if path is None or path.stat().st_size == 0:
        return None
    data = bytearray(path.read_bytes())
    where = []
    for _ in range(t.rng.randint(1, 8)):
        i = t.offset(len(data))
        data[i] ^= 1 << t.rng.randrange(8)
        where.append(i)
    path.write_bytes(bytes(data))
    return f"{t.rel(path)}@{where}"


def _splice_bytes(t: _Target) -> str | None:
    path = t.pick_file(prefer_data=True)
    if path is None:
        return None
    n = t.rng.choice((1, 3, 8, 16, 64, 4096, 1 << 20))
    extra = bytes(n) if t.rng.random() < 0.3 else t.rng.randbytes(n)
    data = path.read_bytes()
    front = t.rng.random() < 0.5
    path.write_bytes(extra + data if front else data + extra)
    return f"{t.rel(path)}:{'prepend' if front else 'append'} {n}"


#: Little-endian integers that break offsets, lengths and counts in shard indexes and block headers.
_HOSTILE_U64 = (0, 1, 2**31 - 1, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1)


def _overwrite_integer(t: _Target) -> str | None:
    path = t.pick_file(prefer_data=True)
    if path is None:
        return None
    data = bytearray(path.read_bytes())
    if len(data) < 8:
        return None
    value = t.rng.choice((*_HOSTILE_U64, len(data) - 1, len(data), len(data) + 1))
    width = t.rng.choice((8, 8, 4, 2))
    at = t.offset(len(data) - width + 1)
    at -= at % width
    order = "<" if t.rng.random() < 0.7 else ">"  # N5 headers are big-endian
    fmt = {8: "Q", 4: "I", 2: "H"}[width]
    data[at:at + width] = struct.pack(order + fmt, value % (1 << (8 * width)))
    path.write_bytes(bytes(data))
    return f"{t.rel(path)}@{at}={value}/{width}{order}"


def _gzip_bomb(t: _Target) -> str | None:
    if t.bomb is None:
        return None
    path = t.pick_file(prefer_data=True)
    if path is None or path.name in METADATA_NAMES:
        return None
    bomb = t.bomb.read_bytes()
    if t.rng.random() < 0.5:  # N5 and zarr blocks put a header or index around the stream: keep the ends
        data = path.read_bytes()
        bomb = data[: min(16, len(data))] + bomb
    path.write_bytes(bomb)
    return t.rel(path)


def _codec_header(t: _Target) -> str | None:
    """Overwrite one header field of an encoded stream inside a data file (the decoders' own trust boundary).

    Streams are found by their magic (compresso ``cpso``, Draco, zstd, gzip, N5's LZ4Block), by a
    blosc header whose compressed size reaches the end of the file, or by the precomputed scale's
    ``encoding`` (compressed_segmentation chunk files, which have no magic). The detail names the
    stream kind, the field and the value: ``kind.field`` of an exact kind (compresso) promises that a
    read which does not raise gives the original voxels (the runner checks it).
    """
    from tests.fuzz.decoders import HOSTILE_VALUES, codec_streams

    files = t.data_files()
    found = [(path, kind, at, fields) for path in files
             for kind, at, fields in codec_streams(path, t.root)]
    if not found:
        return None
    path, kind, at, fields = t.rng.choice(found)
    fld = t.rng.choice(fields)
    data = bytearray(path.read_bytes())
    where = at + fld.offset if fld.offset >= 0 else len(data) + fld.offset
    if where < 0 or where + fld.width > len(data):
        return None
    orig = int.from_bytes(data[where:where + fld.width], "little")
    value = t.rng.choice((*HOSTILE_VALUES, orig + 1, max(0, orig - 1), 2 * orig, orig // 2, orig ^ 1,
                         t.rng.getrandbits(8 * fld.width)))
    data[where:where + fld.width] = (value % (1 << (8 * fld.width))).to_bytes(fld.width, "little")
    path.write_bytes(bytes(data))
    return f"{t.rel(path)}@{where}:{kind}.{fld.name}={value}"


# -- file mutations ---------------------------------------------------------------------------------------
def _replace_path(t: _Target) -> str | None:
    """Replace a file or directory by something hostile: a link out, a loop, a FIFO, a socket, nothing."""
    pool = t.files() + (t.dirs() if t.rng.random() < 0.3 else [])
    if not pool:
        return None
    path = t.rng.choice(pool)
    kind = t.rng.choice(("link_canary", "link_canary_abs", "link_sibling", "link_dangling", "link_loop", "fifo",
                         "socket", "directory", "missing", "sparse"))
    rel = t.rel(path)
    was_dir = path.is_dir() and not path.is_symlink()
    if kind == "sparse" and was_dir:
        kind = "missing"
    if was_dir:
        shutil.rmtree(path)
    elif kind != "sparse":
        path.unlink()
    depth = rel.count("/") + 1  # how many ``..`` lead from the path's directory to the root's parent
    up = "/".join([".."] * depth)
    if kind == "link_canary":
        os.symlink(f"{up}/canary", path)
    elif kind == "link_canary_abs":
        os.symlink(t.case.canary_file, path)
    elif kind == "link_sibling":  # the same path in the valid copy next to the root: data worth reading
        os.symlink(f"{up}/canary_dir/{rel}", path)
    elif kind == "link_dangling":
        os.symlink(f"{up}/no-such-file", path)
    elif kind == "link_loop":
        os.symlink(path.name, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        _make_socket(path)
    elif kind == "directory":
        path.mkdir()
        (path / "0").write_bytes(b"\x00" * 8)
    elif kind == "sparse":
        size = t.rng.choice((1 << 31, 1 << 36, 1 << 40))
        os.truncate(path, size)
        return f"{rel}:sparse {size}"
    return f"{rel}:{kind}"


def _make_socket(path: Path) -> None:
    """A listening-less UNIX socket file at ``path`` (binding creates the file)."""
    cwd = os.getcwd()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(path.parent)  # bind a short name: socket paths are limited to ~107 bytes
        sock.bind(path.name)
    finally:
        os.chdir(cwd)
        sock.close()


# -- metadata mutations -------------------------------------------------------------------------------------
#: Raw JSON texts that ``json.dumps`` cannot produce (too deep) or that we want verbatim.
_RAW_PLACEHOLDER = "@@RAW{}@@"


def _hostile_value(t: _Target, old: Any) -> tuple[Any, str | None]:
    """A value to put where ``old`` was, and (for texts json cannot make) the raw JSON that replaces it."""
    rng = t.rng
    up_canary = str(t.case.canary_dir.name)
    choices: list[Callable[[], Any]] = [
        lambda: None, lambda: True, lambda: -1, lambda: 0, lambda: 2**31, lambda: 2**53 + 1, lambda: 2**63,
        lambda: 2**64, lambda: -(2**63), lambda: 10**30, lambda: 1e308, lambda: float("nan"), lambda: float("inf"),
        lambda: -0.0, lambda: 0.5, lambda: "", lambda: "x" * rng.choice((1, 1000, 1 << 20)), lambda: "µm\u202e",
        lambda: f"../{up_canary}", lambda: str(t.case.canary_dir), lambda: f"a/../../{up_canary}",
        lambda: "..\\..\\x", lambda: "%2e%2e/x", lambda: "a//b", lambda: "./.", lambda: [], lambda: {},
        lambda: [old], lambda: {"a": old}, lambda: str(old),
    ]
    if isinstance(old, list):
        choices += [
            lambda: [-1] * len(old), lambda: [0] * len(old), lambda: [2**40] * len(old), lambda: [2**63] * len(old),
            lambda: old[:-1], lambda: [*old, old[-1] if old else 1], lambda: [None] * len(old),
            lambda: [float("nan")] * len(old), lambda: list(reversed(old)), lambda: [str(v) for v in old],
        ]
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        choices += [lambda: -old, lambda: old * 2**32, lambda: old + 1, lambda: str(old)]
    if rng.random() < 0.06:  # deep nesting or a huge array, written as raw text
        if rng.random() < 0.5:
            depth = rng.choice((100, 10_000, 200_000))
            return None, "[" * depth + "]" * depth
        return None, "[" + ",".join(["7"] * rng.choice((10_000, 300_000))) + "]"
    return rng.choice(choices)(), None


def _json_nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) in a JSON document, the root excluded."""
    out: list[tuple[tuple[Any, ...], Any]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out.append(((*path, k), v))
        out.extend(_json_nodes(v, (*path, k)))
    return out


def _random_document(t: _Target) -> tuple[Path, Any] | None:
    """A metadata document of the dataset, chosen by the seed, and its parsed JSON (``None``: none usable)."""
    metas = t.metadata_files()
    if not metas:
        return None
    path = t.rng.choice(metas)
    try:
        return path, json.loads(path.read_bytes())
    except (ValueError, RecursionError):  # damaged by an earlier mutation (not JSON, or nested too deep)
        return None


def _parent(doc: Any, where: tuple[Any, ...]) -> Any:
    """The object or array holding the node at ``where``."""
    for k in where[:-1]:
        doc = doc[k]
    return doc


def _mutate_metadata(t: _Target) -> str | None:
    found = _random_document(t)
    if found is None:
        return None
    path, doc = found
    nodes = _json_nodes(doc)
    if not nodes:
        return None
    interesting = [n for n in nodes if isinstance(n[0][-1], str) and n[0][-1] in INTERESTING_FIELDS]
    where, old = t.rng.choice(interesting if interesting and t.rng.random() < 0.7 else nodes)
    action = t.rng.random()
    raw: str | None = None
    parent = _parent(doc, where)
    if (action < 0.12 and isinstance(parent, dict)) or (action < 0.2 and isinstance(parent, list)):
        del parent[where[-1]]
        label = "deleted"
    else:
        new, raw = _hostile_value(t, old)
        parent[where[-1]] = _RAW_PLACEHOLDER.format(0) if raw is not None else new
        label = f"{raw[:12]}…{len(raw)}" if raw is not None else _short(new)
    text = json.dumps(doc)  # NaN and Infinity are written as json.dumps writes them (not strict JSON)
    if raw is not None:
        text = text.replace(json.dumps(_RAW_PLACEHOLDER.format(0)), raw, 1)
    path.write_text(text)
    return f"{t.rel(path)}:{'.'.join(map(str, where))}={label}"


def _escape_paths(t: _Target) -> str | None:
    """Point a path the metadata names (scale key, OME dataset path, mesh dir) at the valid copy outside."""
    found = _random_document(t)
    if found is None:
        return None
    path, doc = found
    names = ("key", "path", "mesh", "skeletons", "segment_properties")
    nodes = [n for n in _json_nodes(doc) if isinstance(n[0][-1], str) and n[0][-1] in names
             and isinstance(n[1], str)]
    if not nodes:
        return None
    where, old = t.rng.choice(nodes)
    depth = t.rel(path).count("/") + 1
    up = "/".join([".."] * depth)
    new = t.rng.choice((f"{up}/canary_dir/{old}", str(t.case.canary_dir / old), f"{old}/../../canary_dir/{old}",
                        f"{up}/canary", "/etc", f"..\\canary_dir\\{old}"))
    _parent(doc, where)[where[-1]] = new
    path.write_text(json.dumps(doc))
    return f"{t.rel(path)}:{'.'.join(map(str, where))}={new}"


def _replace_metadata_bytes(t: _Target) -> str | None:
    metas = t.metadata_files()
    if not metas:
        return None
    path = t.rng.choice(metas)
    kind = t.rng.choice(("empty", "not_json", "not_utf8", "scalar", "array", "huge", "bom", "dup_keys"))
    content = {
        "empty": b"",
        "not_json": b"{\"a\": ",
        "not_utf8": b"{\"a\": \"\xff\xfe\"}",
        "scalar": b"42",
        "array": b"[1, 2, 3]",
        "huge": b"{}",  # made 65 MiB (sparse) below, over json_document's limit
        "bom": b"\xef\xbb\xbf" + path.read_bytes(),
        "dup_keys": path.read_bytes().rstrip().rstrip(b"}") + b', "zarr_format": 2, "@type": 7}',
    }[kind]
    path.write_bytes(content)
    if kind == "huge":
        os.truncate(path, 65 << 20)
    return f"{t.rel(path)}:{kind}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}…({len(text)} chars)"


#: (name, weight, mutation). Metadata and byte damage dominate: they reach the most code.
_MUTATION_TABLE: tuple[tuple[str, float, Callable[[_Target], str | None]], ...] = (
    ("truncate", 1.0, _truncate),
    ("flip", 1.5, _flip_bits),
    ("splice", 0.7, _splice_bytes),
    ("integer", 1.5, _overwrite_integer),
    ("codec_header", 1.0, _codec_header),
    ("bomb", 0.25, _gzip_bomb),
    ("path", 1.2, _replace_path),
    ("metadata", 3.0, _mutate_metadata),
    ("escape", 0.6, _escape_paths),
    ("metabytes", 0.5, _replace_metadata_bytes),
)
MUTATIONS: list[tuple[str, Callable[[_Target], str | None]]] = [(n, f) for n, _, f in _MUTATION_TABLE]
