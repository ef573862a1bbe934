"""A small synthetic EM-like dataset: grayscale image, supervoxels, and their grouping into bodies.

Why synthetic: the demo, the tests and the proofreading tools need a volume with the properties
of real connectomics data — an over-segmentation whose supervoxels must be merged into bodies,
membranes visible in the image where bodies meet, a multiscale pyramid stored as sharded
precomputed — without a multi-gigabyte download. Everything is generated with NumPy from a fixed
seed, written with TensorStore, and cached: the first call takes a few seconds, later calls
return at once.

Layout of the cache directory (``<cache>/sample-em-v1/``)::

    image/          precomputed, uint8, 4 scales, sharded (murmurhash3_x86_128, gzip)
    segmentation/   precomputed, uint64 supervoxel ids, same geometry and sharding
    bodies.json     the supervoxel -> body grouping (ground truth for merges / cleaves)
    sample.json     written last: the dataset is complete when it exists

Geometry: 256 × 256 × 64 voxels (x, y, z) of 8 × 8 × 40 nm, downsampled by (2, 2, 1),
(4, 4, 2) and (8, 8, 4): the coarsest level is 32 × 32 × 16, far below napari's ~1024² limit for
the plane it reads on every slice change. Chunks are 64 × 64 × 8, so a z-plane of the finest
scale spans 16 chunks in 4 shards — enough to see partial reads in tests.

The cache directory is ``$SHARDSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/napari-shardscope``,
else ``~/.cache/napari-shardscope``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, MetadataError

SAMPLE_VERSION = 1
CACHE_DIR_ENV = "SHARDSCOPE_CACHE_DIR"
#: Shape of the finest scale in NumPy order (z, y, x).
SAMPLE_SHAPE_ZYX = (64, 256, 256)
#: Voxel size of the finest scale in nm (x, y, z), as precomputed writes it.
SAMPLE_VOXEL_NM_XYZ = (8.0, 8.0, 40.0)
#: Downsampling factors of each scale relative to the finest (x, y, z).
SAMPLE_FACTORS_XYZ = ((1, 1, 1), (2, 2, 1), (4, 4, 2), (8, 8, 4))
SAMPLE_CHUNK_XYZ = (64, 64, 8)
BODIES_FORMAT = "napari-shardscope/bodies"


@dataclass(frozen=True)
class SampleDataset:
    """Paths of the generated sample dataset.

    Attributes
    ----------
    root
        The dataset directory.
    image
        Precomputed grayscale image (uint8).
    segmentation
        Precomputed supervoxel segmentation (uint64).
    bodies
        The sidecar JSON grouping supervoxels into bodies (see :func:`load_body_map`).
    """

    root: Path
    image: Path
    segmentation: Path
    bodies: Path

    def body_map(self) -> dict[int, int]:
        """Supervoxel id → body id, read from :attr:`bodies`."""
        return load_body_map(self.bodies)


@dataclass(frozen=True)
class SyntheticEM:
    """Arrays of a generated volume, NumPy order (z, y, x).

    Attributes
    ----------
    image
        uint8 grayscale: bright cytoplasm, dark membranes between bodies, faint ones between
        supervoxels of one body, dark organelle blobs, noise.
    supervoxels
        uint64 supervoxel ids (no background: every voxel belongs to a supervoxel).
    body_of
        Supervoxel id → body id. A body's id is the smallest id of its supervoxels, as in DVID
        where a body starts out named after a supervoxel.
    """

    image: npt.NDArray[np.uint8]
    supervoxels: npt.NDArray[np.uint64]
    body_of: dict[int, int]


def sample_cache_dir() -> Path:
    """Where generated sample data is cached (see the module docstring for the lookup order)."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "napari-shardscope"


def sample_dataset_paths(cache_dir: str | os.PathLike[str] | None = None) -> SampleDataset:
    """The paths the sample dataset has (or will have) under ``cache_dir``; nothing is written."""
    root = Path(cache_dir) if cache_dir is not None else sample_cache_dir()
    root = root / f"sample-em-v{SAMPLE_VERSION}"
    return SampleDataset(root=root, image=root / "image", segmentation=root / "segmentation",
                         bodies=root / "bodies.json")


def ensure_sample_dataset(cache_dir: str | os.PathLike[str] | None = None, *, seed: int = 0) -> SampleDataset:
    """The sample dataset, generated into the cache the first time it is asked for.

    Generation writes into a temporary directory next to the target and renames it into place,
    so an interrupted run leaves no half-written dataset, and two processes racing to generate
    it both end up using one complete copy.
    """
    paths = sample_dataset_paths(cache_dir)
    if (paths.root / "sample.json").is_file():
        return paths
    paths.root.parent.mkdir(parents=True, exist_ok=True)
    if paths.root.exists() and not (paths.root / "sample.json").is_file():
        # an incomplete leftover (a complete dataset only ever appears by rename, with sample.json)
        shutil.rmtree(paths.root, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-sample-", dir=paths.root.parent))
    try:
        write_sample_dataset(tmp, seed=seed)
        try:
            os.rename(tmp, paths.root)
        except OSError:
            if not (paths.root / "sample.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return paths


def write_sample_dataset(root: Path, *, seed: int = 0) -> None:
    """Generate the sample volume and write image, segmentation, bodies.json, then sample.json."""
    em = generate_synthetic_em(SAMPLE_SHAPE_ZYX, seed=seed)
    from napari_shardscope.core.bytestore.context import make_context

    context = make_context(0)
    write_precomputed_pyramid(root / "image", em.image, "image", SAMPLE_VOXEL_NM_XYZ, SAMPLE_FACTORS_XYZ,
                              SAMPLE_CHUNK_XYZ, context=context)
    write_precomputed_pyramid(root / "segmentation", em.supervoxels, "segmentation", SAMPLE_VOXEL_NM_XYZ,
                              SAMPLE_FACTORS_XYZ, SAMPLE_CHUNK_XYZ, context=context)
    write_body_map(root / "bodies.json", em.body_of, segmentation="segmentation")
    meta = {
        "version": SAMPLE_VERSION,
        "seed": seed,
        "description": "synthetic EM-like volume: image, supervoxel segmentation, supervoxel->body map",
        "image": "image",
        "segmentation": "segmentation",
        "bodies": "bodies.json",
        "size_xyz": list(reversed(SAMPLE_SHAPE_ZYX)),
        "resolution_nm_xyz": list(SAMPLE_VOXEL_NM_XYZ),
        "downsampling_factors_xyz": [list(f) for f in SAMPLE_FACTORS_XYZ],
    }
    (root / "sample.json").write_text(json.dumps(meta, indent=2) + "\n")


# -- bodies sidecar --------------------------------------------------------------------------------
def write_body_map(path: Path, body_of: Mapping[int, int], *, segmentation: str) -> None:
    """Write the supervoxel → body grouping as JSON (bodies sorted, supervoxels sorted).

    Shape: ``{"format": "napari-shardscope/bodies", "version": 1, "segmentation": "<dir>",
    "bodies": [{"id": <body>, "supervoxels": [<sv>, ...]}, ...]}``. Grouped by body because that
    is how a proofreader reads it (and a body's supervoxel list is what a cleave edits).
    """
    groups: dict[int, list[int]] = {}
    for sv, body in body_of.items():
        groups.setdefault(int(body), []).append(int(sv))
    doc = {
        "format": BODIES_FORMAT,
        "version": 1,
        "segmentation": segmentation,
        "bodies": [{"id": body, "supervoxels": sorted(svs)} for body, svs in sorted(groups.items())],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def load_body_map(path: str | os.PathLike[str]) -> dict[int, int]:
    """Read a bodies sidecar written by :func:`write_body_map`: supervoxel id → body id.

    Raises
    ------
    MetadataError
        When the file is not a bodies document or lists a supervoxel twice.
    """
    where = os.fspath(path)
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise MetadataError(f"invalid JSON ({exc.msg})", key=where, offset=exc.pos) from None
    if not isinstance(doc, dict) or doc.get("format") != BODIES_FORMAT or not isinstance(doc.get("bodies"), list):
        raise MetadataError(f"not a {BODIES_FORMAT} document", key=where)
    out: dict[int, int] = {}
    for i, entry in enumerate(doc["bodies"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            raise MetadataError(f"bodies[{i}] must be an object with an integer id, got {entry!r}", key=where)
        for sv in entry.get("supervoxels", []):
            if not isinstance(sv, int) or sv in out:
                raise MetadataError(f"bodies[{i}].supervoxels: bad or repeated supervoxel {sv!r}", key=where)
            out[sv] = int(entry["id"])
    return out


# -- generation ------------------------------------------------------------------------------------
def generate_synthetic_em(shape_zyx: Sequence[int], *, seed: int = 0,
                          cell_zyx: Sequence[int] = (16, 32, 32),
                          voxel_nm_zyx: Sequence[float] = (40.0, 8.0, 8.0)) -> SyntheticEM:
    """Generate an EM-like image and its supervoxel over-segmentation.

    Supervoxels are the Voronoi cells of seeds on a jittered grid (one per ``cell_zyx`` block)
    in a smoothly warped space, so their boundaries are curved like membranes. Neighbouring
    supervoxels are merged at random into bodies, preferring neighbours along z so bodies are
    elongated like neurites. The image draws dark membranes where two *bodies* meet and only
    faint ones between supervoxels of one body — the ambiguity that makes proofreading needed.
    """
    shape = tuple(int(s) for s in shape_zyx)
    if len(shape) != 3 or any(s <= 0 for s in shape):
        raise ArgumentError(f"shape_zyx must be 3 positive sizes, got {tuple(shape_zyx)}")
    rng = np.random.default_rng(seed)
    cell = np.asarray(cell_zyx, dtype=np.int64)
    grid = tuple(math.ceil(s / c) for s, c in zip(shape, cell, strict=True))
    n_seeds = int(np.prod(grid))
    gz, gy, gx = np.meshgrid(*(np.arange(g) for g in grid), indexing="ij")
    cells = np.stack([gz, gy, gx], axis=-1).reshape(-1, 3).astype(np.float64)
    seeds = (cells + 0.15 + 0.7 * rng.random((n_seeds, 3))) * cell  # voxel coordinates
    nm = np.asarray(voxel_nm_zyx, dtype=np.float64)
    warp = [smooth_noise(shape, (4, 6, 6), rng) * amp for amp in (0.5 * cell[0], 0.45 * cell[1], 0.45 * cell[2])]

    d1, i1, d2, i2 = _two_nearest_seeds(shape, grid, cell, seeds, nm, warp)
    sv_ids = (np.sort(rng.choice(9_999_999, size=n_seeds, replace=False)) + 1).astype(np.uint64)
    supervoxels = sv_ids[i1]
    body_index = _group_bodies(i1, n_seeds, rng)
    present = np.flatnonzero(np.bincount(i1.ravel(), minlength=n_seeds))
    body_of = {int(sv_ids[s]): int(sv_ids[body_index[s]]) for s in present}
    image = _render_image(shape, d1, d2, body_index[i1], body_index[i2], rng)
    return SyntheticEM(image=image, supervoxels=supervoxels, body_of=body_of)


def smooth_noise(shape: Sequence[int], coarse: Sequence[int], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """Uniform noise in [-1, 1] on a coarse grid, linearly interpolated up to ``shape``."""
    data = rng.uniform(-1.0, 1.0, size=tuple(int(c) + 1 for c in coarse)).astype(np.float32)
    for axis in sorted(range(len(shape)), key=lambda a: int(shape[a]) / data.shape[a]):
        # smallest growth first, so the big intermediate arrays are made as late as possible
        n = int(shape[axis])
        pos = np.linspace(0, data.shape[axis] - 1, n, dtype=np.float32)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, data.shape[axis] - 1)
        frac = (pos - lo).astype(np.float32).reshape([-1 if a == axis else 1 for a in range(data.ndim)])
        low = np.take(data, lo, axis=axis)
        low += (np.take(data, hi, axis=axis) - low) * frac
        data = low
    return data


def _two_nearest_seeds(shape: tuple[int, ...], grid: tuple[int, ...], cell: npt.NDArray[np.int64],
                       seeds: npt.NDArray[np.float64], nm: npt.NDArray[np.float64],
                       warp: list[npt.NDArray[np.float32]]
                       ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32],
                                  npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """Squared nm distance and index of the nearest and second-nearest seed of every voxel.

    Only seeds of the 27 grid cells around a voxel's own cell can be nearest (the jitter keeps
    seeds inside their cell and the warp is below a cell), which makes this O(27·N) instead of
    O(seeds·N). Work is in float32 and in z-slabs to stay fast and small.
    """
    d1 = np.empty(shape, np.float32)
    d2 = np.empty(shape, np.float32)
    i1 = np.empty(shape, np.int32)
    i2 = np.empty(shape, np.int32)
    # seed coordinates pre-scaled to nm, one flat array per axis (cheap gathers)
    sz, sy, sx = (np.ascontiguousarray(seeds[:, a] * nm[a], dtype=np.float32) for a in range(3))
    ys = np.arange(shape[1], dtype=np.int32)
    xs = np.arange(shape[2], dtype=np.int32)
    slab = 8
    for z0 in range(0, shape[0], slab):
        z1 = min(shape[0], z0 + slab)
        zs = np.arange(z0, z1, dtype=np.int32)
        pz = (zs[:, None, None] + warp[0][z0:z1]) * np.float32(nm[0])
        py = (ys[None, :, None] + warp[1][z0:z1]) * np.float32(nm[1])
        px = (xs[None, None, :] + warp[2][z0:z1]) * np.float32(nm[2])
        b1 = np.full(pz.shape, np.inf, np.float32)
        b2 = np.full(pz.shape, np.inf, np.float32)
        j1 = np.zeros(pz.shape, np.int32)
        j2 = np.zeros(pz.shape, np.int32)
        for oz in (-1, 0, 1):
            nz = np.clip(zs // cell[0] + oz, 0, grid[0] - 1)[:, None, None]
            for oy in (-1, 0, 1):
                ny = np.clip(ys // cell[1] + oy, 0, grid[1] - 1)[None, :, None]
                row = (nz * grid[1] + ny) * grid[2]
                for ox in (-1, 0, 1):
                    nx = np.clip(xs // cell[2] + ox, 0, grid[2] - 1)[None, None, :]
                    idx = row + nx
                    d = np.square(pz - sz[idx])
                    d += np.square(py - sy[idx])
                    d += np.square(px - sx[idx])
                    closer = d < b1
                    second = (d < b2) & ~closer & (idx != j1)
                    np.copyto(b2, b1, where=closer)
                    np.copyto(j2, j1, where=closer)
                    np.copyto(b2, d, where=second)
                    np.copyto(j2, idx, where=second)
                    np.copyto(b1, d, where=closer)
                    np.copyto(j1, idx, where=closer)
        d1[z0:z1], d2[z0:z1], i1[z0:z1], i2[z0:z1] = b1, b2, j1, j2
    return d1, i1, d2, i2


def _group_bodies(labels: npt.NDArray[np.int32], n: int, rng: np.random.Generator,
                  max_size: int = 6) -> npt.NDArray[np.int64]:
    """Union touching supervoxels at random into bodies; returns each seed's body root seed.

    z-neighbours merge with probability 0.5, in-plane neighbours with 0.12, and a body stops
    growing at ``max_size`` supervoxels, so most bodies are short vertical chains — a plausible
    over-segmentation of neurites.
    """
    pairs: list[tuple[int, int, float]] = []
    for axis, p in ((0, 0.5), (1, 0.12), (2, 0.12)):
        a = np.moveaxis(labels, axis, 0)
        lo, hi = a[:-1].ravel(), a[1:].ravel()
        keep = lo != hi
        u, v = np.minimum(lo[keep], hi[keep]), np.maximum(lo[keep], hi[keep])
        codes = np.unique(u.astype(np.int64) * n + v)  # one int per unordered pair: a 1-D unique is fast
        pairs.extend((int(c // n), int(c % n), p) for c in codes)
    order = rng.permutation(len(pairs))
    parent = np.arange(n)
    size = np.ones(n, np.int64)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    draws = rng.random(len(pairs))
    for k in order:
        u, v, p = pairs[k]
        if draws[k] >= p:
            continue
        ru, rv = find(u), find(v)
        if ru == rv or size[ru] + size[rv] > max_size:
            continue
        if ru > rv:
            ru, rv = rv, ru
        parent[rv] = ru  # the smaller seed index (= smaller supervoxel id) names the body
        size[ru] += size[rv]
    return np.array([find(i) for i in range(n)], dtype=np.int64)


def _render_image(shape: tuple[int, ...], d1: npt.NDArray[np.float32], d2: npt.NDArray[np.float32],
                  body1: npt.NDArray[np.int64], body2: npt.NDArray[np.int64],
                  rng: np.random.Generator) -> npt.NDArray[np.uint8]:
    """Grayscale intensities: membranes from the distance margin between the two nearest seeds."""
    margin = np.sqrt(d2) - np.sqrt(d1)  # nm; 0 on a Voronoi boundary
    ridge = np.exp(-((margin / 22.0) ** 2))
    between_bodies = body1 != body2
    img = 168.0 + 14.0 * smooth_noise(shape, (6, 24, 24), rng)
    shade = rng.uniform(-12.0, 12.0, size=int(body1.max()) + 1)
    img += shade[body1]
    blobs = smooth_noise(shape, (8, 40, 40), rng)
    img = np.where(blobs > 0.72, img - 70.0, img)
    img -= np.where(between_bodies, 115.0, 28.0) * ridge
    img += rng.normal(0.0, 9.0, size=shape)
    out: npt.NDArray[np.uint8] = np.clip(img, 0, 255).astype(np.uint8)
    return out


# -- writing ---------------------------------------------------------------------------------------
def sharding_spec_for(grid_xyz: Sequence[int]) -> dict[str, Any]:
    """A murmurhash3/gzip sharding spec giving a few shards and minishards for a chunk grid.

    Sized from the number of chunk-id bits so that small scales still exercise every field:
    preshift groups neighbouring chunks, minishards split a shard's index, shards split files.
    """
    n = max(1, int(np.prod([int(g) for g in grid_xyz])))
    bits = max(0, math.ceil(math.log2(n)))
    shard_bits = max(0, (bits - 3) // 2)
    minishard_bits = min(2, max(0, bits - shard_bits - 1))
    preshift_bits = min(2, max(0, bits - shard_bits - minishard_bits))
    return {
        "@type": "neuroglancer_uint64_sharded_v1",
        "hash": "murmurhash3_x86_128",
        "preshift_bits": preshift_bits,
        "minishard_bits": minishard_bits,
        "shard_bits": shard_bits,
        "minishard_index_encoding": "gzip",
        "data_encoding": "gzip",
    }


def downsample(data: npt.NDArray[Any], factors_zyx: Sequence[int], kind: str) -> npt.NDArray[Any]:
    """Downsample by integer factors: block mean for images, striding for segmentations.

    Striding keeps label ids real (a mean of ids is meaningless) and is what a viewer needs for
    a coarse overview; the shape is rounded down to whole blocks for images.
    """
    fz, fy, fx = (int(f) for f in factors_zyx)
    if kind == "segmentation":
        return np.ascontiguousarray(data[::fz, ::fy, ::fx])
    z, y, x = (s // f for s, f in zip(data.shape, (fz, fy, fx), strict=True))
    blocks = data[: z * fz, : y * fy, : x * fx].reshape(z, fz, y, fy, x, fx)
    out: npt.NDArray[Any] = blocks.mean(axis=(1, 3, 5)).round().astype(data.dtype)
    return out


def write_precomputed_pyramid(path: Path, data_zyx: npt.NDArray[Any], kind: str,
                              voxel_nm_xyz: Sequence[float], factors_xyz: Sequence[Sequence[int]],
                              chunk_xyz: Sequence[int], *, context: Any = None,
                              voxel_offset_xyz: Sequence[int] = (0, 0, 0)) -> None:
    """Write ``data_zyx`` and its downsamplings as a sharded precomputed volume with TensorStore.

    One TensorStore write per scale (whole shards at once, which is how sharded precomputed is
    meant to be written). Each scale's chunk size is ``chunk_xyz`` clipped to its size.
    """
    import tensorstore as ts

    if kind not in ("image", "segmentation"):
        raise ArgumentError(f"kind must be 'image' or 'segmentation', got {kind!r}")
    base = np.asarray(data_zyx)
    for i, fxyz in enumerate(factors_xyz):
        fzyx = tuple(reversed([int(f) for f in fxyz]))
        level = base if all(f == 1 for f in fzyx) else downsample(base, fzyx, kind)
        size_xyz = [int(s) for s in reversed(level.shape)]
        chunk = [min(int(c), s) for c, s in zip(chunk_xyz, size_xyz, strict=True)]
        grid = [math.ceil(s / c) for s, c in zip(size_xyz, chunk, strict=True)]
        offset = [int(o) // int(f) for o, f in zip(voxel_offset_xyz, fxyz, strict=True)]
        spec = {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path) + "/"},
            "multiscale_metadata": {"type": kind, "data_type": str(level.dtype), "num_channels": 1},
            "scale_metadata": {
                "size": size_xyz,
                "voxel_offset": offset,
                "resolution": [float(r) * int(f) for r, f in zip(voxel_nm_xyz, fxyz, strict=True)],
                "chunk_size": chunk,
                "encoding": "raw",
                "sharding": sharding_spec_for(grid),
            },
            "create": True,
        }
        if i > 0:
            spec["open"] = True
        store = ts.open(spec, context=context).result()
        store[ts.d[:].translate_to[0]].write(level.T[..., np.newaxis]).result()
