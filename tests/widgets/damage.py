"""A damaged copy of the sample segmentation, as the shard-browser tests use it."""

from __future__ import annotations

import shutil
from pathlib import Path

from napari_shardscope.core.layout import Located, open_layout
from napari_shardscope.core.sample_data import SampleDataset


def damaged_copy(sample: SampleDataset, tmp_path: Path) -> tuple[Path, Located]:
    """A copy of the sample segmentation whose chunk holding voxel (200, 140, 50) of 8_8_40 no longer
    decodes, and where that chunk is."""
    copy = tmp_path / "broken-segmentation"
    shutil.copytree(sample.segmentation, copy)
    bad = open_layout(str(copy)).locate_voxel((50, 140, 200), "8_8_40")  # z, y, x
    assert bad.node.byte_range is not None and bad.node.file is not None
    a, b = bad.node.byte_range
    data = bytearray((copy / bad.node.file).read_bytes())
    data[a + 12 : b] = bytes(b - a - 12)  # the chunk's gzip stream no longer decodes
    (copy / bad.node.file).write_bytes(bytes(data))
    return copy, bad
