"""The outline of a located chunk in the viewer, and the move of the view to it.

A Shapes layer on the volume's voxel grid (its scale and translate, :func:`.placement.add_on_grid`),
one rectangle per displayed plane the chunk covers: napari shows a shape only on the plane it lies
in, one voxel deep, so a chunk 64 planes deep is 64 rectangles (at most :data:`MAX_OUTLINE_PLANES`).
The view then moves there: the dims to the plane nearest the chunk's centre, the camera centred on it.

Split from :mod:`.shard_browser`, the panel that locates chunks: this is only what the viewer shows,
given the volume's grid, the volume layer and a box in world coordinates. :func:`camera` is here
because a view move needs it; the canvas's go-to moves use it too.
"""

from __future__ import annotations

import math
from itertools import product
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_shardscope.widgets.placement import VolumeGrid, add_on_grid, on_grid

if TYPE_CHECKING:
    from napari.layers import Layer, Shapes

#: At most this many rectangles outline one chunk (one per displayed plane it spans).
MAX_OUTLINE_PLANES = 2048
OUTLINE_NAME = "chunk outline"


def camera(viewer: Any) -> Any:
    """The viewer's camera: ``viewer.scene.camera`` since napari 0.9, ``viewer.camera`` before."""
    scene = getattr(viewer, "scene", None)
    return scene.camera if scene is not None else viewer.camera


def layer_box(layer: Layer | None,
              box: tuple[tuple[float, ...], tuple[float, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """The world box in the layer's dimensions (a channel axis split off by napari is dropped)."""
    lo, hi = np.asarray(box[0], dtype=float), np.asarray(box[1], dtype=float)
    ndim = layer.ndim if layer is not None else lo.size
    return lo[-ndim:], hi[-ndim:]


def view_axes(viewer: Any, layer: Layer | None) -> tuple[list[int], list[int], int]:
    """(displayed layer axes, other layer axes, viewer-to-layer axis offset)."""
    ndim = layer.ndim if layer is not None else 3
    offset = viewer.dims.ndim - ndim
    displayed = [d - offset for d in viewer.dims.displayed if d >= offset]
    rect = displayed[-2:]
    others = [a for a in range(ndim) if a not in rect]
    return rect, others, offset


def plane_positions(grid: VolumeGrid, axis: int, lo: float, hi: float) -> list[float]:
    """World positions of the finest-level planes along ``axis`` whose centres lie in ``[lo, hi]``.

    The planes are those of the volume's finest level (where napari's planes are): ``grid``'s voxel
    size and translate.
    """
    scale, translate = np.asarray(grid.scale, dtype=float), np.asarray(grid.translate, dtype=float)
    step, start = float(scale[axis]), float(translate[axis])
    first = math.ceil((lo - start) / step - 1e-9)
    last = math.floor((hi - start) / step + 1e-9)
    values = [start + k * step for k in range(first, last + 1) if lo < start + k * step < hi]
    return values or [(lo + hi) / 2]


def draw_outline(viewer: Any, grid: VolumeGrid, layer: Layer | None, outline: Shapes | None,
                 lo: np.ndarray, hi: np.ndarray) -> Shapes | None:
    """Outline the box ``[lo, hi]`` (the volume layer's dimensions); returns the outline layer.

    ``outline`` is the previous outline layer, reused while it still fits the volume's grid; ``layer``
    (the volume) gets the selection back when adding the outline took it.
    """
    rect, others, _ = view_axes(viewer, layer)
    if len(rect) < 2:
        return outline
    planes = [plane_positions(grid, a, lo[a], hi[a]) for a in others]
    shapes = []
    (ay, ax) = rect
    for values in product(*planes):
        corners = [(lo[ay], lo[ax]), (lo[ay], hi[ax]), (hi[ay], hi[ax]), (hi[ay], lo[ax])]
        vertices = np.zeros((4, lo.size))
        for i, (y, x) in enumerate(corners):
            vertices[i, ay], vertices[i, ax] = y, x
            for a, v in zip(others, values, strict=True):
                vertices[i, a] = v
        shapes.append(vertices)
        if len(shapes) >= MAX_OUTLINE_PLANES:
            break
    # The outline goes on the volume's grid through add_on_grid (its scale, translate, axis labels, units;
    # vertices clipped to the volume's voxel centres): in world units (scale 1) a shape would be 1 nm deep
    # along z and vanish between planes, and a chunk edge half a voxel outside the volume would move the
    # dims range's start (and the plane the arrows step from).
    scale = np.asarray(grid.scale, dtype=float)
    width = float(np.min((hi[list(rect)] - lo[list(rect)]) / scale[list(rect)])) / 40
    active = viewer.layers.selection.active  # adding the outline selects it; give the clicks back
    shown = outline
    if shown is None or shown not in viewer.layers or shown.ndim != lo.size or not grid.holds(shown):
        if shown is not None and shown in viewer.layers:
            viewer.layers.remove(shown)
        shown = add_on_grid(viewer, grid, "shapes", shapes, shape_type="rectangle", edge_color="yellow",
                            face_color="transparent", edge_width=width, name=OUTLINE_NAME, ndim=lo.size)
    else:
        shown.data = on_grid(grid, "shapes", shapes)
        shown.shape_type = ["rectangle"] * len(shapes)
        shown.edge_width = [width] * len(shapes)
        shown.edge_color = "yellow"
        shown.face_color = "transparent"
    if active is not None and active in viewer.layers and active is not shown:
        viewer.layers.selection.active = active
    elif layer is not None:
        viewer.layers.selection.active = layer
    return shown


def move_view(viewer: Any, grid: VolumeGrid, layer: Layer | None, lo: np.ndarray, hi: np.ndarray) -> None:
    """Put the dims on the plane nearest the box's centre and centre the camera on it."""
    _, others, offset = view_axes(viewer, layer)
    center = (lo + hi) / 2
    for a in others:
        planes = plane_positions(grid, a, lo[a], hi[a])
        nearest = min(planes, key=lambda v: abs(v - center[a]))
        viewer.dims.set_point(a + offset, nearest)
    displayed = [d - offset for d in viewer.dims.displayed if d >= offset]
    camera(viewer).center = tuple(float(center[d]) for d in displayed)
