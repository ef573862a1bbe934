"""Where the plugin's own layers go: on the volume's voxel grid, so that napari's dims stay the volume's.

napari derives its dims from every layer (0.9: ``LayerList._step_size`` and ``_get_extent_world``): the
step of an axis is the *smallest* scale among the layers, its range the union of their extents. One layer
placed in other units — a body surface in nm at scale 1 — made the z step 1 nm, so the Right arrow moved
1 nm instead of one plane, and taking the layer away put the view on another plane. A layer reaching past
the volume (a mesh closes half a voxel beyond the outermost voxel centres) moves the range's start off the
volume's planes just the same.

So every layer the plugin adds over a volume — body surfaces and skeletons, the selection overlays, split
seeds, the review's *after* layer, the shard browser's chunk outline and shard map, and any later kind
(synapse points) — is made by :func:`add_on_grid`
with data from :func:`on_grid`: placed with the volume's scale, translate, axis labels and units, its
coordinates (vertices, points, segment ends) in the volume's voxel units and clipped to the volume's voxel
centres. Its step is the volume's and its extent lies inside the volume's, so the dims (steps, range, the
plane shown) are those of the volume whichever of these layers come and go. The clip moves only geometry
that lies outside the volume's outermost voxel centres, by at most half a voxel.

Values on a coarser grid (one per chunk: the shard map) are not placed at the chunk's scale — a last,
partial chunk would put its centre past the volume's last voxel and lengthen the slider — but read on
the volume's own voxels and levels (:class:`BlockView`, lazily: napari slices a plane and only that
plane's chunks are looked up).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import napari

    from napari_shardscope.core.layout import LayoutTree

#: The kinds of layer :func:`add_on_grid` makes.
LayerKind = Literal["labels", "image", "surface", "vectors", "points", "shapes", "blocks"]


@dataclass(frozen=True)
class VolumeGrid:
    """A volume's voxel grid in napari's world: level 0's scale and translate, its shape, axis labels, units."""

    scale: tuple[float, ...]
    translate: tuple[float, ...]
    shape: tuple[int, ...]
    axis_labels: tuple[str, ...]
    units: tuple[str, ...] | None = None
    #: Every level's shape, finest first (``()``: one level, ``shape``).
    level_shapes: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of_layer(cls, layer: Any) -> VolumeGrid:
        """The grid of an Image or Labels layer (its level 0 when multiscale)."""
        levels = tuple(tuple(int(n) for n in shape) for shape in layer.level_shapes)  # never reads the data
        units = getattr(layer, "units", None)
        return cls(tuple(float(s) for s in layer.scale), tuple(float(t) for t in layer.translate), levels[0],
                   tuple(str(a) for a in layer.axis_labels),
                   tuple(str(u) for u in units) if units is not None else None, levels)

    @classmethod
    def of_layout(cls, tree: LayoutTree) -> VolumeGrid:
        """The grid of a layout tree's finest scale, for a dataset shown with no layer (the shard browser)."""
        geos = [tree.geometry(s) for s in tree.spatial_scales()]
        geo = geos[0]
        units = (geo.unit,) * len(geo.voxel_size) if geo.unit is not None else None
        return cls(tuple(float(v) for v in geo.voxel_size), tuple(float(t) for t in geo.translate),
                   tuple(geo.array_shape), tuple(geo.array_axes), units,
                   tuple(tuple(g.array_shape) for g in geos if g.ndim == geo.ndim))

    @property
    def ndim(self) -> int:
        return len(self.scale)

    def placement(self, origin: Sequence[float] | None = None) -> dict[str, Any]:
        """``scale``, ``translate`` (shifted by ``origin`` voxels), ``axis_labels`` and ``units`` for a layer."""
        translate = np.asarray(self.translate, dtype=float)
        if origin is not None:
            translate = translate + np.asarray(origin, dtype=float) * np.asarray(self.scale, dtype=float)
        out: dict[str, Any] = {"scale": self.scale, "translate": tuple(float(t) for t in translate),
                               "axis_labels": self.axis_labels}
        if self.units is not None:
            out["units"] = self.units
        return out

    def to_voxels(self, world: Any) -> np.ndarray:
        """World positions (..., ndim) → voxel units of this grid, clipped to the volume's voxel centres."""
        pos = (np.asarray(world, dtype=np.float64) - np.asarray(self.translate)) / np.asarray(self.scale)
        top = np.asarray(self.shape, dtype=np.float64) - 1
        voxels: np.ndarray = np.clip(pos, 0.0, np.maximum(top, 0.0)).astype(np.float32)
        return voxels

    def holds(self, layer: Any) -> bool:
        """Whether ``layer`` is placed on this grid (same scale, translate and axis labels)."""
        return (tuple(layer.axis_labels) == self.axis_labels
                and np.allclose(np.asarray(layer.scale, dtype=float), self.scale)
                and np.allclose(np.asarray(layer.translate, dtype=float), self.translate))


@dataclass(frozen=True)
class Blocks:
    """One value per block of a regular block grid in the world (a scale's chunks).

    ``values`` is indexed like the grid's axes; block ``i`` is centred at ``translate + i * size`` (world).
    """

    values: npt.NDArray[Any]
    size: tuple[float, ...]
    translate: tuple[float, ...]


class BlockView:
    """:class:`Blocks` read on one level of a volume's voxel grid: each voxel takes its centre's block.

    A level of shape ``shape`` is ``level_0 / shape`` voxels of level 0 per voxel (napari places the
    levels of a multiscale layer by these shape ratios, so this view is where napari draws that level).
    Nothing is computed until napari slices it; a slice costs one look-up per voxel it holds.
    """

    def __init__(self, blocks: Blocks, grid: VolumeGrid, shape: Sequence[int]) -> None:
        self.blocks = blocks
        self.grid = grid
        self._shape = tuple(int(n) for n in shape)
        self._down = np.asarray(grid.shape, dtype=np.float64) / np.maximum(np.asarray(self._shape), 1)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.blocks.values.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def __len__(self) -> int:
        return self._shape[0]

    def block_index(self, axis: int, voxels: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The block (along ``axis``) holding the centre of each of this level's ``voxels``."""
        g, b = self.grid, self.blocks
        world = g.translate[axis] + ((voxels + 0.5) * self._down[axis] - 0.5) * g.scale[axis]
        first_edge = b.translate[axis] - b.size[axis] / 2
        index = np.floor((world - first_edge) / b.size[axis]).astype(np.int64)
        clipped: npt.NDArray[np.int64] = np.clip(index, 0, b.values.shape[axis] - 1)
        return clipped

    def __getitem__(self, key: Any) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - len(key) + 1) + key[at + 1:]
        if len(key) > self.ndim or not all(isinstance(k, slice | int | np.integer) for k in key):
            raise IndexError(f"a block view takes integers and slices for {self.ndim} axes, not {key!r}")
        key = key + (slice(None),) * (self.ndim - len(key))
        picks, kept = [], []
        for axis, (k, n) in enumerate(zip(key, self._shape, strict=True)):
            voxels = np.arange(n, dtype=np.int64)[k]
            if not isinstance(k, slice):
                voxels = np.atleast_1d(voxels)
            else:
                kept.append(voxels.size)
            picks.append(self.block_index(axis, voxels))
        out = self.blocks.values[np.ix_(*picks)].reshape(kept)
        return out[()] if not kept else out

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> npt.NDArray[Any]:
        data = np.asarray(self[...])
        return data if dtype is None else data.astype(dtype, copy=False)


def on_grid(grid: VolumeGrid, kind: LayerKind, data: Any) -> Any:
    """napari data of a ``kind`` layer on ``grid`` from what the plugin has, in world units.

    * ``surface``: ``(vertices, faces)`` or ``(vertices, faces, values)``, vertices (n, ndim) in world units;
    * ``vectors``: segments (n, 2, ndim), each ``[start, end]`` in world units;
    * ``points``: positions (n, ndim) in world units;
    * ``shapes``: a list of vertex arrays (k, ndim) in world units;
    * ``labels`` / ``image``: arrays (or a multiscale list) on the grid's voxels, returned as given;
    * ``blocks``: :class:`Blocks`, as one :class:`BlockView` per level of the grid (a Labels layer).
    """
    if kind == "blocks":
        return [BlockView(data, grid, shape) for shape in grid.level_shapes or (grid.shape,)]
    if kind == "surface":
        vertices, faces, *rest = data
        return (grid.to_voxels(np.asarray(vertices).reshape(-1, grid.ndim)), np.asarray(faces), *rest)
    if kind == "vectors":
        seg = np.asarray(data, dtype=np.float64).reshape(-1, 2, grid.ndim)
        start, end = grid.to_voxels(seg[:, 0]), grid.to_voxels(seg[:, 1])
        return np.stack([start, end - start], axis=1)  # napari's vectors: start and projection
    if kind == "points":
        return grid.to_voxels(np.asarray(data, dtype=np.float64).reshape(-1, grid.ndim))
    if kind == "shapes":
        return [grid.to_voxels(np.asarray(s, dtype=np.float64)) for s in data]
    return data


def add_on_grid(viewer: napari.Viewer, grid: VolumeGrid, kind: LayerKind, data: Any, *,
                origin: Sequence[float] | None = None, keep_active: bool = True, **kwargs: Any) -> Any:
    """Add a ``kind`` layer over the volume of ``grid``; the dims stay the volume's (see the module).

    ``data`` is as :func:`on_grid` takes it (world units for geometry; voxels of the grid for arrays, whose
    first voxel is ``origin``). napari makes a new layer the active one; with ``keep_active`` the layer
    that was active stays so (clicks keep going to the body layer).
    """
    active = viewer.layers.selection.active
    # napari attaches add_labels, add_points, ... to ViewerModel at import (setattr): mypy sees add_image only.
    add = {"labels": viewer.add_labels,  # type: ignore[attr-defined]
           "image": viewer.add_image,
           "surface": viewer.add_surface,  # type: ignore[attr-defined]
           "vectors": viewer.add_vectors,  # type: ignore[attr-defined]
           "points": viewer.add_points,  # type: ignore[attr-defined]
           "shapes": viewer.add_shapes,  # type: ignore[attr-defined]
           "blocks": viewer.add_labels}[kind]  # type: ignore[attr-defined]
    placed = on_grid(grid, kind, data)
    if kind == "blocks":
        placed = placed if len(placed) > 1 else placed[0]
        kwargs.setdefault("multiscale", isinstance(placed, list))
    layer = add(placed, **grid.placement(origin), **kwargs)
    if keep_active and active is not None and active in viewer.layers and viewer.layers.selection.active is not active:
        viewer.layers.selection.active = active
    return layer
