"""napari-shardscope: open, inspect and proofread sharded connectomics volumes in napari.

The library lives in :mod:`napari_shardscope.core` (no Qt); the napari plugin in
:mod:`napari_shardscope.napari_plugin` and :mod:`napari_shardscope.widgets`.
"""

__version__ = "0.1.0"
