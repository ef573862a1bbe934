"""The napari helpers of napari-shardscope: volumes into a viewer, and the proofreading state of a viewer.

The panels of one viewer (Shard browser, Proofreading, Versions) share one session; a notebook reaches
the same objects, so a call here and a click in a panel change one thing. Like :mod:`napari_shardscope`,
this module is light: napari and Qt load when a name is first used.

Examples
--------
>>> import napari
>>> import napari_shardscope as ss
>>> from napari_shardscope import gui
>>> viewer = napari.Viewer(show=False)
>>> sample = ss.ensure_sample_dataset()
>>> [layer.name for layer in gui.add_volumes(viewer, gui.sample_volumes(sample))]
['image', 'segmentation']
>>> c = gui.controller_for(viewer)         # what the Proofreading and Versions panels render
>>> version = c.create("proofread.repo", str(sample.segmentation), agglomeration=sample.bodies)
INFO: created proofread.repo over ...
>>> [layer.name for layer in viewer.layers]   # the body layer follows the checked-out version
['image', 'segmentation', 'seg supervoxels', 'seg bodies']
>>> c.select(19273), c.add_to_selection(70268)   # what a click and a Shift-click do
((19273,), (19273, 70268))
>>> mutation = c.merge()                           # the Merge button (Shift-M)
INFO: merged body 70268 into 19273
>>> c.version.body_of(70268)
19273
>>> viewer.close()
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import Any

    from napari_shardscope.core.proofreading import ProofreadingController
    from napari_shardscope.napari_plugin.background import open_in_background
    from napari_shardscope.napari_plugin.neuroglancer import neuroglancer_url
    from napari_shardscope.napari_plugin.sample import sample_volumes
    from napari_shardscope.napari_plugin.viewer import add_volumes
    from napari_shardscope.widgets.canvas import canvas_for
    from napari_shardscope.widgets.placement import add_on_grid
    from napari_shardscope.widgets.session import ViewerSession, session_for

#: Each public name and the module it lives in (see :func:`napari_shardscope._lazy.attach`).
_PUBLIC: dict[str, str] = {
    "add_volumes": "napari_shardscope.napari_plugin.viewer",
    "open_in_background": "napari_shardscope.napari_plugin.background",
    "sample_volumes": "napari_shardscope.napari_plugin.sample",
    "session_for": "napari_shardscope.widgets.session",
    "ViewerSession": "napari_shardscope.widgets.session",
    "canvas_for": "napari_shardscope.widgets.canvas",
    "add_on_grid": "napari_shardscope.widgets.placement",
    "neuroglancer_url": "napari_shardscope.napari_plugin.neuroglancer",
}

__all__ = [
    "ViewerSession",
    "add_on_grid",
    "add_volumes",
    "canvas_for",
    "controller_for",
    "neuroglancer_url",
    "open_in_background",
    "sample_volumes",
    "session_for",
]


def controller_for(viewer: Any) -> ProofreadingController:
    """The proofreading controller of ``viewer``: the one its Proofreading and Versions panels render.

    Made on first call, with the viewer's session (:func:`session_for`), whose layers follow it: a
    checkout swaps the body layer, an edit refreshes it. The same as ``session_for(viewer).controller``.
    """
    from napari_shardscope.widgets.session import session_for

    return session_for(viewer).controller


if not TYPE_CHECKING:
    from napari_shardscope._lazy import attach

    __getattr__, __dir__ = attach(globals(), _PUBLIC)
    del attach
