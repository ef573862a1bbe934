"""Label downsampling by mode, exactly as TensorStore's ``downsample`` driver does it.

After a supervoxel split the coarser scales must show the new ids. They are recomputed from the
patched scale 0 with TensorStore's own ``mode`` method (not a hand-written one): the pyramid a
pipeline writes with TensorStore, what Neuroglancer's downsampling shows, and the overlay then
agree voxel for voxel, ties included.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.labelmap.geometry import Coord


def downsample_mode(data: npt.NDArray[Any], factors: Coord) -> npt.NDArray[np.uint64]:
    """Mode of every ``factors`` window of ``data`` (windows start at element 0; partial ones at the end)."""
    import tensorstore as ts

    if factors == (1, 1, 1):
        return np.asarray(data, dtype=np.uint64)
    view = ts.downsample(ts.array(np.ascontiguousarray(data, dtype=np.uint64)), list(factors), "mode")
    return np.asarray(view.read().result(), dtype=np.uint64)


def downsample_any(mask: npt.NDArray[np.bool_], factors: Coord) -> npt.NDArray[np.bool_]:
    """True for every ``factors`` window of ``mask`` holding at least one True (TensorStore ``max``)."""
    import tensorstore as ts

    if factors == (1, 1, 1):
        return np.asarray(mask, dtype=bool)
    view = ts.downsample(ts.array(np.ascontiguousarray(mask, dtype=np.uint8)), list(factors), "max")
    return np.asarray(view.read().result()) > 0
