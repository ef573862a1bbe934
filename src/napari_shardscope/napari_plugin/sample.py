"""The npe2 sample-data contribution: File > Open Sample > Shardscope > Synthetic EM.

Generates the synthetic EM dataset into the user's cache the first time (a few seconds) and opens
it lazily like any other sharded volume, so the sample exercises the same reader path as real
data.
"""

from __future__ import annotations

from napari_shardscope.core.sample_data import SampleDataset, ensure_sample_dataset
from napari_shardscope.core.volumes import Volume, open_volume
from napari_shardscope.napari_plugin.layers import LayerData, volume_layer_data


def sample_volumes(dataset: SampleDataset | None = None) -> list[Volume]:
    """The sample image and segmentation volumes (generating the dataset if needed)."""
    ds = dataset or ensure_sample_dataset()
    return [open_volume(ds.image), open_volume(ds.segmentation)]


def make_sample_data() -> list[LayerData]:
    """Layer data for the sample: an Image and a Labels layer, both multiscale and lazy."""
    return [volume_layer_data(v) for v in sample_volumes()]
