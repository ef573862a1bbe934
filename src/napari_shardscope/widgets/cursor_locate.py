"""Locate under the cursor: viewer mouse callbacks that show the chunk under the mouse and outline it on a click.

The cursor's world position is mapped through the volume layer's own transform to its data (so a
moved layer still picks right), at the level napari is showing, then to the core's world, where the
layout tree finds the chunk. A chunk is looked up once while the mouse stays in it. Split from
:mod:`.shard_browser`: the callbacks, their registration on the viewer and the hover state are one
thing the panel switches on and off; what it shows is the panel's (``on_hover``, ``on_click``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.layout import LayoutTree, Located

if TYPE_CHECKING:
    from napari.layers import Layer


class CursorLocator:
    """The mouse callbacks of "locate under cursor" on one viewer, and the chunk under the cursor.

    ``shown`` gives the tree and volume layer currently browsed; ``on_hover`` is called when the chunk
    under the cursor changes (``None``: none), ``on_click`` with the chunk clicked.
    """

    def __init__(self, viewer: Any, shown: Callable[[], tuple[LayoutTree | None, Layer | None]],
                 on_hover: Callable[[Located | None], None], on_click: Callable[[Located], None]) -> None:
        self.viewer = viewer
        self._shown = shown
        self._on_hover = on_hover
        self._on_click = on_click
        self.enabled = False
        self.hover: Located | None = None
        self._hover_grid: tuple[str, tuple[int, ...]] | None = None

    def set_enabled(self, enabled: bool) -> None:
        """Add or remove the viewer's mouse callbacks."""
        if enabled == self.enabled:
            return
        self.enabled = enabled
        moves, drags = self.viewer.mouse_move_callbacks, self.viewer.mouse_drag_callbacks
        if enabled:
            moves.append(self._on_mouse_move)
            drags.append(self._on_mouse_press)
        else:
            for callbacks, cb in ((moves, self._on_mouse_move), (drags, self._on_mouse_press)):
                if cb in callbacks:
                    callbacks.remove(cb)
            self._hover_grid = None

    def forget(self) -> None:
        """Another dataset is shown: the next move looks its chunk up again."""
        self._hover_grid = None

    def is_listening(self) -> bool:
        """True while the callbacks are on the viewer."""
        return (self._on_mouse_move in self.viewer.mouse_move_callbacks
                or self._on_mouse_press in self.viewer.mouse_drag_callbacks)

    def locate_position(self, position: Sequence[float]) -> Located | None:
        """The chunk under a viewer world position, at the level the layer is showing (``None`` outside)."""
        tree, layer = self._shown()
        if tree is None or layer is None:
            return None
        level = int(getattr(layer, "data_level", 0)) if getattr(layer, "multiscale", False) else 0
        try:
            scale = tree.scale_of_volume_level(level)
            # the layer may have been moved: go through its own transform to its data, then to the core's world
            data = np.asarray(layer.world_to_data(tuple(position)), dtype=float)
            geo0 = tree.geometry(tree.scale_of_volume_level(0))
            world = np.asarray(geo0.translate) + data[-geo0.ndim:] * np.asarray(geo0.voxel_size)
            geo = tree.geometry(scale)
            grid = geo.grid_position(geo.voxel_at_world(world))
            if self.hover is not None and self._hover_grid == (scale, grid):
                return self.hover
            located = tree.locate_chunk(geo.to_array_order(grid), scale)
        except ShardscopeError:
            return None
        self._hover_grid = (scale, grid)
        return located

    def _on_mouse_move(self, viewer: Any, event: Any) -> None:
        located = self.locate_position(event.position)
        if located is self.hover:
            return
        self.hover = located
        self._on_hover(located)

    def _on_mouse_press(self, viewer: Any, event: Any) -> None:
        if event.type != "mouse_press" or getattr(event, "button", 1) != 1:
            return
        located = self.locate_position(event.position)
        if located is not None:
            self.hover = located
            self._on_click(located)
