"""The proofreader's split: painted seeds in two or more groups partition a body.

1. Every seed voxel must lie in the body. A supervoxel holding seeds of several groups is cut
   first: a seeded watershed inside that supervoxel (landscape: minus the distance to its
   boundary, so cuts fall at narrow necks), each part then split off with
   :func:`~napari_shardscope.core.labelmap.splitting.split_supervoxel`.
2. The body's supervoxels are then grouped by seeded region growing over supervoxel adjacency
   (face contacts counted in the body's blocks): the strongest contact between a grouped and an
   ungrouped supervoxel is always taken next, so a group grows across wide contacts before thin
   ones. Supervoxels no seed group reaches stay with the first group.
3. The first group (smallest group id) keeps the body id; every other group is cleaved off into a
   new body.

All of it is one mutation: one undo reverts the whole split.
"""

from __future__ import annotations

import heapq
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.edits import Workspace
from napari_shardscope.core.labelmap.errors import MappingError, UnknownLabelError
from napari_shardscope.core.labelmap.geometry import Box, Coord, VoxelMask
from napari_shardscope.core.labelmap.splitting import split_supervoxel

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BodySplit:
    """Outcome of a body split.

    Attributes
    ----------
    bodies
        Seed group → the body holding it afterwards (the first group keeps the original id).
    supervoxels
        Seed group → its supervoxels afterwards.
    cut
        Supervoxels that held seeds of several groups → the new supervoxels they were cut into.
    """

    bodies: dict[int, int]
    supervoxels: dict[int, tuple[int, ...]]
    cut: dict[int, tuple[int, ...]]


def split_body(ws: Workspace, body: int, seeds: Mapping[int, VoxelMask], members: list[int],
               voxel_size: tuple[float, float, float]) -> BodySplit:
    """Plan a body split in ``ws`` (each step plans on the previous ones' records); ``members``: its supervoxels."""
    name = ws.map.resolve(body)[1].name
    if name != body:
        raise MappingError(f"body {body} was merged into body {name}; split that body")
    groups = sorted(g for g, m in seeds.items() if m.count)
    if len(groups) < 2:
        raise ArgumentError(f"a body split needs seeds in at least two groups, got {len(groups)}")
    if not members:
        raise UnknownLabelError(f"body {body} does not exist here")
    seed_svs = _seed_supervoxels(ws, body, groups, seeds)
    assigned: dict[int, int] = {}
    cut: dict[int, tuple[int, ...]] = {}
    for sv, by_group in sorted(seed_svs.items()):
        if len(by_group) == 1:
            assigned[sv] = next(iter(by_group))
            continue
        parts = _watershed(ws, sv, by_group, voxel_size)
        order = sorted(parts)
        current, made = sv, []
        for g in order[:-1]:
            piece, current = split_supervoxel(ws, current, parts[g])
            assigned[piece] = g
            made.append(piece)
        assigned[current] = order[-1]
        cut[sv] = (*made, current)
    svs = sorted({s for s in members if s not in cut} | {p for ps in cut.values() for p in ps})
    groups_of = _grow(np.asarray(svs, dtype=np.uint64), assigned, _contacts(ws, svs), keeper=groups[0])
    bodies = {groups[0]: body}
    members_of: dict[int, list[int]] = {g: [] for g in groups}
    for sv, g in groups_of.items():
        members_of[g].append(sv)
    for g in groups[1:]:
        new_body = ws.allocate(1)[0]
        ws.map.cleave(body, members_of[g], new_body)
        bodies[g] = new_body
    return BodySplit(bodies, {g: tuple(sorted(v)) for g, v in members_of.items()}, cut)


def _seed_supervoxels(ws: Workspace, body: int, groups: list[int],
                      seeds: Mapping[int, VoxelMask]) -> dict[int, dict[int, I64]]:
    """Supervoxel → group → seed voxel coordinates (z, y, x), checking every seed is in ``body``."""
    out: dict[int, dict[int, I64]] = {}
    shape = ws.config.shape
    painted: dict[tuple[int, int, int], int] = {}
    for g in groups:
        for z, y, x in seeds[g].coordinates():
            other = painted.setdefault((int(z), int(y), int(x)), g)
            if other != g:
                raise ArgumentError(f"voxel {(int(z), int(y), int(x))} is a seed of groups {other} and {g}")
    for g in groups:
        m = seeds[g]
        if m.box.intersect(Box.of_shape(shape)) != m.box:
            raise ArgumentError(f"seeds of group {g} reach outside the volume {shape}")
        data = ws.reader.read(0, m.box)
        coords = m.coordinates()
        values = data[m.mask]
        owners = ws.map.bodies_of(values)
        wrong = np.flatnonzero((owners != np.uint64(body)) | (values == 0))
        if wrong.size:
            i = int(wrong[0])
            raise MappingError(f"seed voxel {tuple(int(v) for v in coords[i])} of group {g} is in body "
                               f"{int(owners[i])}, not in body {body}")
        for sv in np.unique(values):
            out.setdefault(int(sv), {})[g] = coords[values == sv]
    return out


def _watershed(ws: Workspace, sv: int, by_group: Mapping[int, I64],
               voxel_size: tuple[float, float, float]) -> dict[int, VoxelMask]:
    """Cut supervoxel ``sv`` among seed groups: seeded watershed on minus the boundary distance."""
    # scikit-image (and SciPy, which it depends on) are imported only when a supervoxel must be cut;
    # both ship without type information, hence Any.
    ndimage: Any = importlib.import_module("scipy.ndimage")
    watershed: Any = importlib.import_module("skimage.segmentation").watershed

    entry = ws.sv_index(sv)
    if entry is None:  # pragma: no cover - seeds were just read from it
        raise UnknownLabelError(f"supervoxel {sv} does not exist here")
    grid = ws.config.grid(0)
    box = Box((0, 0, 0), (0, 0, 0))
    for c in entry.block_set():
        box = box.union(grid.box(c))
    data = ws.reader.read(0, box)
    inside = data == np.uint64(sv)
    markers = np.zeros(inside.shape, dtype=np.int32)
    order = sorted(by_group)
    for k, g in enumerate(order, start=1):
        rel = by_group[g] - np.asarray(box.lo, dtype=np.int64)
        markers[rel[:, 0], rel[:, 1], rel[:, 2]] = k
    distance = ndimage.distance_transform_edt(inside, sampling=voxel_size)
    labels = np.asarray(watershed(-distance, markers, mask=inside), dtype=np.int32)
    unreached = inside & (labels == 0)
    if unreached.any():  # parts of the supervoxel no seed connects to: nearest seeded voxel decides
        _, nearest = ndimage.distance_transform_edt(labels == 0, sampling=voxel_size, return_indices=True)
        labels = np.where(unreached, labels[tuple(nearest)], labels)
    return {g: VoxelMask(box.lo, (labels == k) & inside) for k, g in enumerate(order, start=1)}


def _contacts(ws: Workspace, svs: list[int]) -> dict[tuple[int, int], int]:
    """Face contacts (voxel pairs) between the given supervoxels, counted over their scale-0 blocks."""
    members = np.asarray(svs, dtype=np.uint64)
    grid = ws.config.grid(0)
    shape = ws.config.shape
    blocks: set[Coord] = set()
    for sv in svs:
        entry = ws.sv_index(sv)
        if entry is not None:
            blocks.update(entry.block_set())
    n = members.size
    codes: list[I64] = []
    for c in sorted(blocks):
        core = grid.box(c)
        ext = Box(core.lo, (min(core.hi[0] + 1, shape[0]), min(core.hi[1] + 1, shape[1]),
                            min(core.hi[2] + 1, shape[2])))
        data = ws.reader.read(0, ext)
        pos = np.minimum(np.searchsorted(members, data), n - 1)
        idx = np.where(members[pos] == data, pos, -1).astype(np.int64)
        cz, cy, cx = core.shape
        for axis in range(3):
            size = [cz, cy, cx]
            size[axis] = min(size[axis], idx.shape[axis] - 1)
            first = idx[: size[0], : size[1], : size[2]]
            sl = [slice(0, size[0]), slice(0, size[1]), slice(0, size[2])]
            sl[axis] = slice(1, size[axis] + 1)
            second = idx[tuple(sl)]
            keep = (first >= 0) & (second >= 0) & (first != second)
            a, b = first[keep], second[keep]
            codes.append(np.minimum(a, b) * n + np.maximum(a, b))
    if not codes:
        return {}
    uniq, counts = np.unique(np.concatenate(codes), return_counts=True)
    return {(int(members[u // n]), int(members[u % n])): int(k) for u, k in zip(uniq, counts, strict=True)}


def _grow(svs: U64, assigned: Mapping[int, int], contacts: Mapping[tuple[int, int], int],
          keeper: int) -> dict[int, int]:
    """Seeded region growing: repeatedly take the strongest contact from a grouped to an ungrouped supervoxel."""
    neighbours: dict[int, list[tuple[int, int]]] = {}
    for (a, b), weight in contacts.items():
        neighbours.setdefault(a, []).append((weight, b))
        neighbours.setdefault(b, []).append((weight, a))
    group = dict(assigned)
    heap: list[tuple[int, int, int, int]] = []
    tick = 0
    for sv, g in sorted(assigned.items()):
        for weight, other in neighbours.get(sv, ()):
            heap.append((-weight, tick, other, g))
            tick += 1
    heapq.heapify(heap)
    while heap:
        _, _, sv, g = heapq.heappop(heap)
        if sv in group:
            continue
        group[sv] = g
        for weight, other in neighbours.get(sv, ()):
            if other not in group:
                heapq.heappush(heap, (-weight, tick, other, g))
                tick += 1
    return {int(sv): group.get(int(sv), keeper) for sv in svs}
