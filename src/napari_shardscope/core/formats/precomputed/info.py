"""The precomputed ``info`` file: volume type, data type, channels and scales.

Parsed strictly: a wrong field is reported with its JSON path and value, because a broken
``info`` is the most common reason a pipeline's output does not open in Neuroglancer.
Coordinates here are in the format's own x, y, z order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.bytestore.containment import key_problem
from napari_shardscope.core.errors import ArgumentError, MetadataError, UnsafeMetadataPathError
from napari_shardscope.core.formats.budget import check_chunk_budget
from napari_shardscope.core.formats.precomputed.morton import bits_per_dimension, decode_morton, encode_morton
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.json_document import load_json

DATA_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32", "float64")
VOLUME_TYPES = ("image", "segmentation")
CHUNK_ENCODINGS = ("raw", "jpeg", "png", "compressed_segmentation", "compresso", "jxl")


@dataclass(frozen=True)
class ScaleInfo:
    """One entry of ``info["scales"]`` (x, y, z order)."""

    key: str
    size: tuple[int, int, int]
    voxel_offset: tuple[int, int, int]
    resolution: tuple[float, float, float]
    chunk_sizes: tuple[tuple[int, int, int], ...]
    encoding: str
    sharding: ShardingSpec | None = None
    compressed_segmentation_block_size: tuple[int, int, int] | None = None

    @property
    def chunk_size(self) -> tuple[int, int, int]:
        """The chunk size used for storage (the first of ``chunk_sizes``)."""
        return self.chunk_sizes[0]

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        """Number of chunks along x, y, z."""
        return tuple(math.ceil(s / c) for s, c in zip(self.size, self.chunk_size, strict=True))  # type: ignore[return-value]

    @property
    def num_chunks(self) -> int:
        return math.prod(self.grid_shape)

    def grid_position(self, voxel: Sequence[int]) -> tuple[int, int, int]:
        """The chunk grid position holding ``voxel`` (absolute coordinates, x, y, z)."""
        if len(voxel) != 3:
            raise ArgumentError(f"a voxel has 3 coordinates (x, y, z), got {tuple(voxel)}")
        rel = [int(v) - o for v, o in zip(voxel, self.voxel_offset, strict=True)]
        if any(r < 0 or r >= s for r, s in zip(rel, self.size, strict=True)):
            lo = self.voxel_offset
            hi = tuple(o + s for o, s in zip(self.voxel_offset, self.size, strict=True))
            raise ArgumentError(f"voxel {tuple(voxel)} is outside scale {self.key!r} bounds [{lo}, {hi})")
        return tuple(r // c for r, c in zip(rel, self.chunk_size, strict=True))  # type: ignore[return-value]

    def chunk_id(self, grid_position: Sequence[int]) -> int:
        """The compressed Morton code of a grid position: the chunk's id in a sharded scale."""
        return int(encode_morton(np.asarray(grid_position, dtype=np.int64), self.grid_shape))

    def chunk_bounds(self, grid_position: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Absolute voxel bounds ``(start, stop)`` of a chunk, clipped to the volume."""
        start = tuple(o + g * c for o, g, c in zip(self.voxel_offset, grid_position, self.chunk_size, strict=True))
        stop = tuple(
            min(s + c, o + n) for s, c, o, n in zip(start, self.chunk_size, self.voxel_offset, self.size, strict=True)
        )
        return start, stop

    def grid_position_of_chunk_id(self, chunk_id: int) -> tuple[int, int, int]:
        """The grid position whose compressed Morton code is ``chunk_id`` (the inverse of :meth:`chunk_id`).

        Raises
        ------
        ArgumentError
            For an id that names no chunk of this scale (not a uint64, bits beyond the grid's).
        """
        if not 0 <= int(chunk_id) < 1 << 64:
            raise ArgumentError(f"chunk id {chunk_id} is not a chunk of scale {self.key!r}: chunk ids are uint64")
        try:
            pos = decode_morton(np.asarray([chunk_id], dtype=np.uint64), self.grid_shape)[0]
        except ArgumentError as exc:
            raise ArgumentError(f"chunk id {chunk_id} is not a chunk of scale {self.key!r}: {exc}") from None
        return int(pos[0]), int(pos[1]), int(pos[2])

    def chunk_voxels(self, grid_positions: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Voxels inside the volume of each chunk at ``grid_positions`` (shape ``(..., 3)``): edges are clipped."""
        pos = np.asarray(grid_positions, dtype=np.int64)
        chunk = np.asarray(self.chunk_size, dtype=np.int64)
        start = pos * chunk
        extent = np.minimum(start + chunk, np.asarray(self.size, dtype=np.int64)) - start
        return np.asarray(extent.prod(axis=-1), dtype=np.int64)

    def unsharded_chunk_key(self, grid_position: Sequence[int]) -> str:
        """The file name of a chunk in an unsharded scale: ``x0-x1_y0-y1_z0-z1`` under ``key``."""
        start, stop = self.chunk_bounds(grid_position)
        name = "_".join(f"{a}-{b}" for a, b in zip(start, stop, strict=True))
        return f"{self.key}/{name}"

    def grid_position_of_chunk_name(self, name: str) -> tuple[int, int, int] | None:
        """The grid position an unsharded chunk file ``x0-x1_y0-y1_z0-z1`` names, or ``None``.

        ``None`` also for a name whose bounds are not exactly a chunk of this scale's grid (a
        reader would never look for it): the inverse of :meth:`unsharded_chunk_key`'s file name.
        """
        bounds = parse_unsharded_chunk_name(name) if "/" not in name else None
        if bounds is None:
            return None
        grid = tuple((a - o) // c for a, o, c in zip(bounds[0], self.voxel_offset, self.chunk_size, strict=True))
        if any(not 0 <= g < n for g, n in zip(grid, self.grid_shape, strict=True)) or self.chunk_bounds(grid) != bounds:
            return None
        return grid[0], grid[1], grid[2]

    def chunk_ids_of_grid(self) -> npt.NDArray[np.uint64]:
        """All chunk ids of the scale (grid in x-fastest order); for small grids and tests."""
        gx, gy, gz = self.grid_shape
        pos = np.stack(np.meshgrid(np.arange(gx), np.arange(gy), np.arange(gz), indexing="ij"), axis=-1)
        return encode_morton(pos.reshape(-1, 3), self.grid_shape)


#: The largest compressed_segmentation block accepted (voxels): blocks are small units of a chunk (8³ by
#: convention); a huge one is damaged metadata, and its sizes would overflow the decoder's offsets.
MAX_CSEG_BLOCK_VOXELS = 1 << 21

_CHUNK_NAME_PART = re.compile(r"^(-?\d+)-(-?\d+)$")


def parse_unsharded_chunk_name(name: str) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """``(start, stop)`` of an unsharded chunk file name ``x0-x1_y0-y1_z0-z1``, or ``None``.

    The inverse of :meth:`ScaleInfo.unsharded_chunk_key`'s file name; coordinates may be
    negative (a negative ``voxel_offset`` gives names like ``-64-0_0-64_0-64``).
    """
    parts = name.split("_")
    if len(parts) != 3:
        return None
    matches = [_CHUNK_NAME_PART.match(p) for p in parts]
    if any(m is None for m in matches):
        return None
    pairs = [(int(m.group(1)), int(m.group(2))) for m in matches if m is not None]
    start = (pairs[0][0], pairs[1][0], pairs[2][0])
    stop = (pairs[0][1], pairs[1][1], pairs[2][1])
    return start, stop


@dataclass(frozen=True)
class PrecomputedInfo:
    """A parsed volume ``info``."""

    type: str
    data_type: str
    num_channels: int
    scales: tuple[ScaleInfo, ...]
    raw: Mapping[str, Any]

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.data_type).newbyteorder("<")

    @property
    def bytes_per_voxel(self) -> int:
        """Decoded bytes of one voxel: item size × channels."""
        return self.dtype.itemsize * self.num_channels

    def scale(self, key: str | None) -> ScaleInfo:
        """The scale named ``key`` (``None`` = the finest), or :class:`ArgumentError` listing the keys."""
        if key is None:
            return self.scales[0]
        for s in self.scales:
            if s.key == key:
                return s
        raise ArgumentError(f"no scale {key!r}; scales are {[s.key for s in self.scales]}")

    @property
    def mesh_dir(self) -> str | None:
        value = self.raw.get("mesh")
        return value if isinstance(value, str) else None

    @property
    def skeletons_dir(self) -> str | None:
        value = self.raw.get("skeletons")
        return value if isinstance(value, str) else None


def _triple(
    obj: Mapping[str, Any],
    name: str,
    where: str,
    key: str,
    kind: type = int,
    default: tuple[Any, ...] | None = None,
    positive: bool = False,
) -> tuple[Any, ...]:
    value = obj.get(name)
    if value is None and default is not None:
        return default
    ok_types: tuple[type, ...] = (int,) if kind is int else (int, float)
    if (
        not isinstance(value, list)
        or len(value) != 3
        or any(isinstance(v, bool) or not isinstance(v, ok_types) for v in value)
    ):
        raise MetadataError(f"{where}.{name} must be a list of 3 {kind.__name__}s, got {value!r}", key=key)
    if positive and any(v <= 0 for v in value):
        raise MetadataError(f"{where}.{name} must be positive, got {value!r}", key=key)
    if any(isinstance(v, int) and not -(2**63) <= v < 2**63 for v in value):
        raise MetadataError(f"{where}.{name} must hold 64-bit signed integers, got {value!r}", key=key)
    return tuple(value)


def parse_scale(obj: object, index: int, *, key: str = "info") -> ScaleInfo:
    """Validate one ``scales[i]`` entry."""
    where = f"scales[{index}]"
    if not isinstance(obj, Mapping):
        raise MetadataError(f"{where} must be a JSON object, got {obj!r}", key=key)
    scale_key = obj.get("key")
    if not isinstance(scale_key, str) or not scale_key:
        raise MetadataError(f"{where}.key must be a non-empty string, got {scale_key!r}", key=key)
    check_relative_path(scale_key, f"{where}.key", key=key)
    size = _triple(obj, "size", where, key, positive=True)
    offset = _triple(obj, "voxel_offset", where, key, default=(0, 0, 0))
    resolution = _triple(obj, "resolution", where, key, kind=float, positive=True)
    chunk_sizes = obj.get("chunk_sizes")
    if not isinstance(chunk_sizes, list) or not chunk_sizes:
        raise MetadataError(f"{where}.chunk_sizes must be a non-empty list of [x, y, z], got {chunk_sizes!r}", key=key)
    sizes = tuple(_triple({"c": c}, "c", f"{where}.chunk_sizes", key, positive=True) for c in chunk_sizes)
    encoding = obj.get("encoding")
    if encoding not in CHUNK_ENCODINGS:
        raise MetadataError(f"{where}.encoding must be one of {list(CHUNK_ENCODINGS)}, got {encoding!r}", key=key)
    sharding = None
    if obj.get("sharding") is not None:
        sharding = parse_sharding_spec(obj["sharding"], key=key, where=f"{where}.sharding")
        if len(sizes) != 1:
            raise MetadataError(
                f"{where}.chunk_sizes must have exactly one entry in a sharded scale, got {len(sizes)}", key=key
            )
        bits = sum(bits_per_dimension([-(-s // c) for s, c in zip(size, sizes[0], strict=True)]))
        if bits > 64:
            raise MetadataError(
                f"{where}: size {list(size)} in chunks of {list(sizes[0])} needs {bits} bits of compressed "
                "Morton code; sharded chunk ids are uint64",
                key=key,
            )
    block = None
    if encoding == "compressed_segmentation":
        block = _triple(obj, "compressed_segmentation_block_size", where, key, positive=True)
        if math.prod(block) > MAX_CSEG_BLOCK_VOXELS:  # a block is a unit of a chunk: 8³ by convention
            raise MetadataError(f"{where}.compressed_segmentation_block_size {list(block)} holds more than "
                                f"{MAX_CSEG_BLOCK_VOXELS} voxels", key=key)
    return ScaleInfo(
        key=scale_key,
        size=size,
        voxel_offset=offset,
        resolution=(float(resolution[0]), float(resolution[1]), float(resolution[2])),
        chunk_sizes=sizes,
        encoding=encoding,
        sharding=sharding,
        compressed_segmentation_block_size=block,
    )


def check_relative_path(value: str, field: str, *, key: str) -> None:
    """Refuse a path from ``info`` that would lead outside the dataset (``..``, absolute, ``\\`` …).

    Checked when the document is parsed, so that no consumer of the parsed info — TensorStore's
    voxel reads, the inspector, export, labelmap creation — can be led out of the dataset by it.
    """
    problem = key_problem(value)
    if problem is not None:
        raise UnsafeMetadataPathError(f"{field} {value!r} {problem}: it must be a path inside the dataset", key=key)


def parse_info(data: bytes | str | Mapping[str, Any], *, key: str = "info") -> PrecomputedInfo:
    """Parse and validate a precomputed volume ``info``.

    Raises
    ------
    MetadataError
        For invalid JSON (with the byte offset) or a field that breaks the spec (with its path).
    """
    if isinstance(data, Mapping):
        obj: Any = data
    else:
        obj = load_json(data, key=key)
    if not isinstance(obj, Mapping):
        raise MetadataError(f"must be a JSON object, got {type(obj).__name__}", key=key)
    type_at = obj.get("@type", "neuroglancer_multiscale_volume")
    if type_at != "neuroglancer_multiscale_volume":
        raise MetadataError(f'"@type" {type_at!r} is not a volume (neuroglancer_multiscale_volume)', key=key)
    vtype = obj.get("type")
    if vtype not in VOLUME_TYPES:
        raise MetadataError(f"type must be one of {list(VOLUME_TYPES)}, got {vtype!r}", key=key)
    dtype = obj.get("data_type")
    if dtype not in DATA_TYPES:
        raise MetadataError(f"data_type must be one of {list(DATA_TYPES)}, got {dtype!r}", key=key)
    channels = obj.get("num_channels")
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise MetadataError(f"num_channels must be a positive integer, got {channels!r}", key=key)
    scales = obj.get("scales")
    if not isinstance(scales, list) or not scales:
        raise MetadataError(f"scales must be a non-empty list, got {scales!r}", key=key)
    parsed = tuple(parse_scale(s, i, key=key) for i, s in enumerate(scales))
    bytes_per_voxel = np.dtype(dtype).itemsize * channels
    for i, sc in enumerate(parsed):
        for j, chunk in enumerate(sc.chunk_sizes):
            check_chunk_budget(chunk, bytes_per_voxel, field=f"scales[{i}].chunk_sizes[{j}]", key=key)
    for field in ("mesh", "skeletons"):  # directories a mesh or skeleton reader would list and read
        if isinstance(obj.get(field), str):
            check_relative_path(obj[field], field, key=key)
    keys = [s.key for s in parsed]
    if len(set(keys)) != len(keys):
        raise MetadataError(f"scale keys must be unique, got {keys}", key=key)
    return PrecomputedInfo(type=vtype, data_type=dtype, num_channels=channels, scales=parsed, raw=obj)
