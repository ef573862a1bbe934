"""Synapse sites keep a size you can see at every zoom: 5 voxels across, held between 6 and 40 screen pixels.

(napari draws the dark rim outside that diameter: the blot measured is 15 % wider, plus antialiasing.)

Measured on the rendered canvas (Xvfb): one site, the other layers hidden, the camera centred on it; the
width of the non-black blot is read from a screenshot at a zoom where 5 voxels are half a pixel, one where
they are 20 pixels, and one where they are 500.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.widgets.synapses import BORDER, SCREEN_PIXELS, SIZE_VOXELS
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_dims_kept import assert_dims, dims_of
from tests.widgets.test_proofreading import Proofread, Z, proofread, two_bodies  # noqa: F401  (fixture)
from tests.widgets.test_synapses import settled, synapse_layer


def blot_width(viewer: Any) -> int:
    """Width in screen pixels of what is drawn on the (black) canvas around its centre row."""
    shot = np.asarray(viewer.screenshot(canvas_only=True, flash=False))
    lit = (shot[..., :3].astype(int) > 8).any(axis=-1)
    cols = np.flatnonzero(lit.any(axis=0))
    return 0 if not cols.size else int(cols[-1] - cols[0] + 1)


@pytest.mark.qt_binding_lane
def test_site_size_follows_the_zoom_within_screen_limits(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    viewer, _panel, _repo, _, c = proofread
    a, _b, va, _ = two_bodies(c)
    v = c.version
    assert v is not None and c.session.repo is not None
    syn = create_annotation_instance(c.session.repo, "synapses", labelmap=c.session.labelmap)
    syn.at(v.uuid).add("pre", va)
    c.select(a)
    qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is not None, timeout=60000)
    layer = synapse_layer(viewer)
    assert tuple(layer.canvas_size_limits) == SCREEN_PIXELS
    base = dims_of(viewer)
    for other in viewer.layers:
        if other is not layer:
            other.visible = False
    g = v.scales[0]
    world = np.asarray(g.translate) + np.asarray(va) * np.asarray(g.voxel_size)
    assert viewer.dims.point[0] == pytest.approx(world[0])  # the site's plane is shown
    viewer.camera.center = (float(world[1]), float(world[2]))
    voxel = float(g.voxel_size[2])
    widths = {}
    for pixels in (0.5, 20.0, 500.0):  # the diameter napari would draw from the size alone
        viewer.camera.zoom = pixels / (SIZE_VOXELS * voxel)
        qtbot.wait(50)
        widths[pixels] = blot_width(viewer)
    lo, hi = SCREEN_PIXELS

    def drawn(diameter: float) -> float:  # napari draws the rim outside the diameter, plus a pixel of smoothing
        return diameter * (1 + BORDER)

    assert drawn(lo) - 1 <= widths[0.5] <= drawn(lo) + 3, widths  # held at the smallest size, not a speck
    assert abs(widths[20.0] - drawn(20.0)) <= 3, widths  # in between: 5 voxels at this zoom
    assert abs(widths[500.0] - drawn(hi)) <= 3, widths  # held at the largest size, not a disc over the view
    assert_dims(viewer, base, "zoomed")
