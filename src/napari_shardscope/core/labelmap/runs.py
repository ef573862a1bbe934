"""Runs of one label along x: how the label index counts blocks and the body map remaps tiles.

Segmentations are spatially coherent: a 64³ block of supervoxels is a few thousand runs of one id
along x, not 262 144 independent voxels. Work done per run instead of per voxel (sorting the run
ids, looking them up) is an order of magnitude smaller, and finding the runs is one ufunc pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def run_starts(flat: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """Where each run of equal values of the non-empty 1-d ``flat`` starts, ascending.

    Only ufunc work (which releases the GIL), so threads find the runs of their chunks in parallel.
    """
    change = np.empty(flat.size, dtype=bool)
    change[0] = True
    np.not_equal(flat[1:], flat[:-1], out=change[1:])
    return np.flatnonzero(change)
