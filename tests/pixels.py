"""Colours of screenshots, counted cheaply."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def rgb_codes(pixels: npt.NDArray[np.integer]) -> npt.NDArray[np.uint32]:
    """Each pixel's colour (the last axis: R, G, B, optionally A, which is ignored) as one integer.

    Why: distinct colours and their counts by a 1-D ``np.unique`` of these give what ``np.unique(axis=0)``
    over the rows of RGB triples gives, without its lexicographic sort of rows (1.4 CPU s for a 1600 x 1000
    screenshot, ~0.04 this way).
    """
    rgb = pixels[..., :3].astype(np.uint32)
    return (rgb[..., 0] << np.uint32(16)) | (rgb[..., 1] << np.uint32(8)) | rgb[..., 2]
