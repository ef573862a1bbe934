"""The formats shardscope reads and writes, each a package behind one registry.

``open_dataset(url)`` is the one door: it detects the format and returns a :class:`Dataset` whose
metadata is parsed once; its volumes are :class:`VolumeSpec` records (pure data) that the viewer,
the CLI, the shard browser and export all read. See :mod:`.api` for what a dataset offers and
:mod:`.registry` for how a format is added.
"""

from napari_shardscope.core.formats.annotations import open_annotations
from napari_shardscope.core.formats.api import Dataset, DatasetInspector, Format
from napari_shardscope.core.formats.problem import Problem
from napari_shardscope.core.formats.registry import FORMATS, format_named, open_dataset
from napari_shardscope.core.formats.volume_spec import LevelSpec, VolumeSpec

__all__ = ["FORMATS", "Dataset", "DatasetInspector", "Format", "LevelSpec", "Problem", "VolumeSpec",
           "format_named", "open_annotations", "open_dataset"]
