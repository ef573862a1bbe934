"""Where the plugin's own layers go: on the volume's voxel grid, so that napari's dims stay the volume's.

napari derives its dims from every layer (0.9: ``LayerList._step_size`` and ``_get_extent_world``): the
step of an axis is the *smallest* scale among the layers, its range the union of their extents. One layer
placed in other units — a body surface in nm at scale 1 — made the z step 1 nm, so the Right arrow moved
1 nm instead of one plane, and taking the layer away put the view on another plane. A layer reaching past
the volume (a mesh closes half a voxel beyond the outermost voxel centres) moves the range's start off the
volume's planes just the same.

So every layer the plugin adds over a volume — body surfaces and skeletons, the selection overlays, split
seeds, the review's *after* layer, and any later kind (synapse points) — is made by :func:`add_on_grid`
with data from :func:`on_grid`: placed with the volume's scale, translate, axis labels and units, its
coordinates (vertices, points, segment ends) in the volume's voxel units and clipped to the volume's voxel
centres. Its step is the volume's and its extent lies inside the volume's, so the dims (steps, range, the
plane shown) are those of the volume whichever of these layers come and go. The clip moves only geometry
that lies outside the volume's outermost voxel centres, by at most half a voxel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import napari

#: The kinds of layer :func:`add_on_grid` makes.
LayerKind = Literal["labels", "image", "surface", "vectors", "points", "shapes"]


@dataclass(frozen=True)
class VolumeGrid:
    """A volume's voxel grid in napari's world: level 0's scale and translate, its shape, axis labels, units."""

    scale: tuple[float, ...]
    translate: tuple[float, ...]
    shape: tuple[int, ...]
    axis_labels: tuple[str, ...]
    units: tuple[str, ...] | None = None

    @classmethod
    def of_layer(cls, layer: Any) -> VolumeGrid:
        """The grid of an Image or Labels layer (its level 0 when multiscale)."""
        shape = tuple(int(n) for n in layer.level_shapes[0])  # never reads the (lazy) data
        units = getattr(layer, "units", None)
        return cls(tuple(float(s) for s in layer.scale), tuple(float(t) for t in layer.translate), shape,
                   tuple(str(a) for a in layer.axis_labels),
                   tuple(str(u) for u in units) if units is not None else None)

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
        return np.clip(pos, 0.0, np.maximum(top, 0.0)).astype(np.float32)

    def holds(self, layer: Any) -> bool:
        """Whether ``layer`` is placed on this grid (same scale, translate and axis labels)."""
        return (tuple(layer.axis_labels) == self.axis_labels
                and np.allclose(np.asarray(layer.scale, dtype=float), self.scale)
                and np.allclose(np.asarray(layer.translate, dtype=float), self.translate))


def on_grid(grid: VolumeGrid, kind: LayerKind, data: Any) -> Any:
    """napari data of a ``kind`` layer on ``grid`` from what the plugin has, in world units.

    * ``surface``: ``(vertices, faces)`` or ``(vertices, faces, values)``, vertices (n, ndim) in world units;
    * ``vectors``: segments (n, 2, ndim), each ``[start, end]`` in world units;
    * ``points``: positions (n, ndim) in world units;
    * ``shapes``: a list of vertex arrays (k, ndim) in world units;
    * ``labels`` / ``image``: arrays (or a multiscale list) on the grid's voxels, returned as given.
    """
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
    add = {"labels": viewer.add_labels, "image": viewer.add_image, "surface": viewer.add_surface,
           "vectors": viewer.add_vectors, "points": viewer.add_points, "shapes": viewer.add_shapes}[kind]
    layer = add(on_grid(grid, kind, data), **grid.placement(origin), **kwargs)
    if keep_active and active is not None and active in viewer.layers and viewer.layers.selection.active is not active:
        viewer.layers.selection.active = active
    return layer
