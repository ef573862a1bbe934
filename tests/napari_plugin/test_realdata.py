"""Every real dataset (``../shared/realdata``, written by other software) in a real napari viewer.

For each volume directory: open it in the viewer through the plugin (as napari's File › Open does),
and compare every level of every layer with an independent reader of that format — TensorStore's own
driver (``neuroglancer_precomputed``, ``zarr3``, ``n5``), CloudVolume for CloudVolume's ``.gz`` layout
(TensorStore cannot read it), and for the two N5 datasets no independent library reads (lz4, N5 1.x)
the same image that n5-java wrote again in a readable flavour. The reference is brought to the
reader's order by the rule the README states (axes other than x, y, z first, then z, y, x), from
the names the dataset itself writes. ``inspect``, ``ls`` and ``validate`` on each are in
``tests/core/cli/test_realdata_cli.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import ChunkDecodeError, UnsupportedFeatureError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.volumes import open_volume
from napari_shardscope.napari_plugin.layers import volume_layer_data
from napari_shardscope.napari_plugin.shown import DamagedChunkWarning
from tests.core.formats.test_consistency import DIRS, NOT_VOLUMES, presented
from tests.realdata import REALDATA

VOLUMES = [d for d in DIRS if d not in NOT_VOLUMES]
#: N5 datasets no independent library reads, and a copy of the same image one does read.
SAME_IMAGE = {"n5java_zi/n5-java.n5/lz4": "n5java_zi/n5-java.n5/gzip",
              "n5java_backward/data-1.5.0.n5/raw": "n5java_backward/data-2.5.1.n5/raw"}


def _read_ts(spec: dict[str, Any]) -> np.ndarray:
    return np.asarray(ts.open(spec, read=True).result().read().result())


def references(rel: str) -> list[list[np.ndarray]]:
    """Per volume the dataset opens as, per level, the voxels an independent reader gives (reader's order)."""
    url = REALDATA / SAME_IMAGE.get(rel, rel)
    dataset = open_dataset(url)
    out = []
    for spec in dataset.volume_specs():
        levels = []
        for i, level in enumerate(spec.levels):
            store_spec = dict(level.tensorstore)
            if dataset.format_name == "precomputed":
                if rel == "cloudvolume_gz":
                    from cloudvolume import CloudVolume

                    data = np.asarray(CloudVolume(f"file://{url}", mip=i, progress=False)[:, :, :])  # x, y, z, c
                else:
                    data = _read_ts({**store_spec, "scale_index": i})
                data = data.transpose(3, 2, 1, 0)  # c, z, y, x
                levels.append(data[0] if data.shape[0] == 1 else data)
            elif dataset.format_name == "n5":
                data = _read_ts(store_spec)
                names = json.loads((Path(str(url)) / level.key / "attributes.json").read_text()).get("axes") \
                    if (Path(str(url)) / level.key / "attributes.json").is_file() else None
                order = presented(names, list(range(data.ndim))) if names else tuple(
                    level.transform.order or range(data.ndim))  # unnamed: the layout rule, checked elsewhere
                levels.append(data.transpose(order))
            else:  # zarr v3, OME-Zarr: names from dimension_names or the OME axes
                data = _read_ts(store_spec)
                doc = json.loads((Path(str(store_spec["kvstore"]["path"])) / "zarr.json").read_text())
                names = doc.get("dimension_names") or list(spec.metadata.get("ome", {}).get("multiscales", [{}])[0]
                                                            .get("axes_names", [])) or None
                if names is None and "ome" in spec.metadata:
                    names = [a["name"] for a in spec.metadata["ome"]["multiscales"][0]["axes"]]
                named = names is not None and all(isinstance(n, str) for n in names)
                levels.append(data.transpose(presented(names if named else None, list(range(data.ndim)))))
        out.append(levels)
    return out


@pytest.mark.realdata
def test_every_real_dataset_in_napari_equals_an_independent_reader(make_napari_viewer: Any) -> None:
    viewer = make_napari_viewer()
    failures = []
    for rel in VOLUMES:
        viewer.layers.clear()
        if all(len(spec.axes) < 2 for spec in open_dataset(REALDATA / rel).volume_specs()):
            with pytest.raises(UnsupportedFeatureError, match="1-D array in napari"):
                volume_layer_data(open_volume(REALDATA / rel))
            continue
        if rel == "ngscripts_sharded/zlib_as_gzip":  # non-conformant: every reader refuses its chunks
            # napari reads a plane at once: the chunks that do not decode are drawn as background and
            # reported (a warning, which napari shows as a notification), not raised into napari's slicing
            with pytest.warns(DamagedChunkWarning, match="zlib"):
                (layer,) = viewer.open(str(REALDATA / rel), plugin="napari-shardscope")
            with pytest.raises(ChunkDecodeError, match="zlib"):  # a strict read (validation, export) still refuses
                np.asarray(layer.data.inner if not layer.multiscale else layer.data[0].inner)
            continue
        layers = viewer.open(str(REALDATA / rel), plugin="napari-shardscope")
        expected = references(rel)
        specs = open_dataset(REALDATA / rel).volume_specs()
        # napari shows a volume with a channel axis as one layer per channel
        wanted: list[list[np.ndarray]] = []
        for spec, volume in zip(specs, expected, strict=True):
            if spec.channel_axis is not None and spec.kind == "image":
                n = volume[0].shape[spec.channel_axis]
                wanted.extend([np.take(level, c, axis=spec.channel_axis) for level in volume] for c in range(n))
            else:
                wanted.append(volume)
        got = [[np.asarray(level) for level in (layer.data if layer.multiscale else [layer.data])]
               for layer in layers]
        if len(got) != len(wanted):
            failures.append(f"{rel}: {len(got)} layers, expected {len(wanted)}")
            continue
        for index, (g, e) in enumerate(zip(got, wanted, strict=True)):
            same = len(g) == len(e) and all(a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
                                            for a, b in zip(g, e, strict=True))
            if not same:
                failures.append(f"{rel}: layer {index} differs from the independent reader "
                                f"({[a.shape for a in g]} vs {[b.shape for b in e]})")
    assert failures == []
