"""Every real dataset (``../shared/realdata``, written by other software) in a real napari viewer.

For each volume directory: open it in the viewer through the plugin (as napari's File › Open does),
and compare every level of every layer with an independent reader of that format — TensorStore's own
driver (``neuroglancer_precomputed``, ``zarr3``, ``n5``), CloudVolume for CloudVolume's ``.gz`` layout
(TensorStore cannot read it), and for the two N5 datasets no independent library reads (lz4, N5 1.x)
the same image that n5-java wrote again in a readable flavour. The reference is brought to the
reader's order by the rule the README states (axes other than x, y, z first, then z, y, x), from
the names the dataset itself writes. A volume another test here opens anyway (:data:`COMPARED_ELSEWHERE`) is
compared there, so that no volume is opened in napari twice per run. ``inspect``, ``ls`` and ``validate`` on each are in
``tests/core/cli/test_realdata_cli.py``.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from napari_shardscope.core.errors import ChunkDecodeError, UnsupportedFeatureError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.api import Dataset
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


def references(rel: str, dataset: Dataset | None = None) -> list[list[np.ndarray]]:
    """Per volume the dataset opens as, per level, the voxels an independent reader gives (reader's order).

    ``dataset`` is ``rel`` already opened by the caller (only the level list and keys are taken from it);
    for a dataset of :data:`SAME_IMAGE` the readable copy is opened here instead.
    """
    url = REALDATA / SAME_IMAGE.get(rel, rel)
    if dataset is None or rel in SAME_IMAGE:
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


@pytest.fixture
def gc_refrozen() -> Iterator[None]:
    """Freeze again, once the test's viewer is gone, what ``tests/conftest.py`` froze after collection.

    Requested before ``make_napari_viewer``, it is torn down after it: :func:`viewer_objects_frozen` ends
    with ``gc.unfreeze()``, which hands everything frozen (the conftest's objects too) back to the collector,
    so that the viewer's objects can go when the viewer is closed; then what lives on is frozen again.
    """
    yield
    gc.collect()
    gc.freeze()


@contextmanager
def viewer_objects_frozen() -> Iterator[None]:
    """Keep the garbage collector off what already lives (the viewer, the readers' modules) for the block.

    napari runs a full ``gc.collect()`` every time a layer leaves the viewer: about a hundred here (one per
    layer of every dataset), each walking the viewer's own objects again, 13 CPU seconds of the test's
    110 (profiled). Frozen (:func:`gc.freeze`, as ``tests/conftest.py`` freezes what collection built),
    a collection walks only what the block made since, and what the layers leave behind is collected as
    before. The frozen objects go back to the collector when the block ends (see :func:`gc_refrozen`).
    """
    import cloudvolume  # noqa: F401  (imported by references() for one dataset: its modules live on anyway)

    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.realdata
def test_every_real_dataset_in_napari_equals_an_independent_reader(gc_refrozen: None, make_napari_viewer: Any) -> None:
    viewer = make_napari_viewer()
    with viewer_objects_frozen():
        failures = compare_every_dataset(viewer)
    assert failures == []


def widgets_deleted() -> None:
    """Delete the Qt widgets napari let go of (``deleteLater``), as its event loop does between a user's actions.

    Each dataset with another number of dimensions makes napari replace its dims sliders with
    ``deleteLater``; no event loop runs inside this test's loop, so without this the old sliders stayed
    children of the dims widget, whose ``findChildren`` napari calls on every layer change: 80 children
    grew to 5,900 over the datasets, and that search was the single largest cost of the test (about a
    quarter of its CPU, profiled).
    """
    from qtpy.QtCore import QEvent
    from qtpy.QtWidgets import QApplication

    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def frozen_again() -> None:
    """Freeze what the first dataset left living: the modules and caches napari and the readers load on first use.

    napari collects garbage each time the layers are cleared; frozen, those 60,000 objects are not walked again
    at each of the 90 clears that follow (see :func:`viewer_objects_frozen`, which unfreezes them at its end).
    """
    gc.collect()
    gc.freeze()


#: Volumes whose comparison with the independent reader is made by the test that already opens them in a viewer
#: of its own (its screenshot, names, colours or damage report), so that each is opened in napari once per run.
COMPARED_ELSEWHERE = {
    **{f"n5java_zi/n5-java.n5/{c}": "test_n5java_zi_is_an_rgb_image_of_three_channel_layers_whatever_the_compression"
       for c in ("raw", "gzip", "bzip2", "xz", "lz4")},
    "zarrjava_ome05": "test_ome_zarr_channel_labels_colours_and_windows_name_the_layers",
    "ng_ome_zarr/simple_0.5": "test_ome_zarr_channel_labels_colours_and_windows_name_the_layers",
    "ngscripts_sharded/zlib_as_gzip": "test_a_volume_none_of_whose_chunks_decode_says_so_and_is_not_drawn_black",
}


def compare_every_dataset(viewer: Any) -> list[str]:
    """Open every real volume in ``viewer`` and compare its layers with an independent reader: the differences.

    The volumes of :data:`COMPARED_ELSEWHERE` are compared, with :func:`differences`, by the tests named there.
    """
    failures: list[str] = []
    for index, rel in enumerate(rel for rel in VOLUMES if rel not in COMPARED_ELSEWHERE):
        viewer.layers.clear()
        widgets_deleted()
        if index == 1:
            frozen_again()
        dataset = open_dataset(REALDATA / rel)
        if all(len(spec.axes) < 2 for spec in dataset.volume_specs()):
            with pytest.raises(UnsupportedFeatureError, match="1-D array in napari"):
                volume_layer_data(open_volume(REALDATA / rel))
            continue
        layers = viewer.open(str(REALDATA / rel), plugin="napari-shardscope")
        failures.extend(differences(rel, layers, dataset))
    return failures


def differences(rel: str, layers: list[Any], dataset: Dataset | None = None) -> list[str]:
    """How the layers napari opened ``rel`` as differ from the independent reader (:func:`references`): none if equal.

    ``dataset`` is ``rel`` already opened (by the caller), else it is opened here.
    """
    if dataset is None:
        dataset = open_dataset(REALDATA / rel)
    specs = dataset.volume_specs()
    expected = references(rel, dataset)
    # napari shows a volume with a channel axis as one layer per channel
    wanted: list[list[np.ndarray]] = []
    for spec, volume in zip(specs, expected, strict=True):
        if spec.channel_axis is not None and spec.kind == "image":
            n = volume[0].shape[spec.channel_axis]
            wanted.extend([np.take(level, c, axis=spec.channel_axis) for level in volume] for c in range(n))
        else:
            wanted.append(volume)
    got = [[np.asarray(level) for level in (layer.data if layer.multiscale else [layer.data])] for layer in layers]
    if len(got) != len(wanted):
        return [f"{rel}: {len(got)} layers, expected {len(wanted)}"]
    failures = []
    for index, (g, e) in enumerate(zip(got, wanted, strict=True)):
        same = len(g) == len(e) and all(a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
                                        for a, b in zip(g, e, strict=True))
        if not same:
            failures.append(f"{rel}: layer {index} differs from the independent reader "
                            f"({[a.shape for a in g]} vs {[b.shape for b in e]})")
    return failures


# -- what the viewer shows: each case in a real viewer, its pixels checked and a screenshot written ------------
def _shoot(viewer: Any, tmp_path: Path, name: str) -> np.ndarray:
    """The canvas as drawn (show=True), also written to ``tmp_path/name.png`` for a person to look at."""
    import imageio.v3 as iio
    from qtpy.QtWidgets import QApplication

    viewer.reset_view()
    QApplication.processEvents()
    shot = np.asarray(viewer.screenshot(canvas_only=True, flash=False))
    iio.imwrite(tmp_path / f"{name}.png", shot)
    return shot


def _settle() -> None:
    """Let the GUI thread run what slicing threads queued for it (layer marks), a bounded number of times."""
    from qtpy.QtWidgets import QApplication

    for _ in range(20):
        QApplication.processEvents()


def _notes_about(text: str, since: int) -> list[str]:
    from napari.utils.notifications import notification_manager

    return [str(n.message) for n in notification_manager.records[since:] if text in str(n.message)]


@pytest.mark.realdata
def test_a_volume_none_of_whose_chunks_decode_says_so_and_is_not_drawn_black(make_napari_viewer: Any,
                                                                             tmp_path: Path, qtbot: Any) -> None:
    from napari.utils.notifications import notification_manager

    from napari_shardscope.napari_plugin.damage import MARK

    viewer = make_napari_viewer(show=True)
    since = len(notification_manager.records)
    with pytest.warns(DamagedChunkWarning, match="zlib"):
        (layer,) = viewer.open(str(REALDATA / "ngscripts_sharded" / "zlib_as_gzip"), plugin="napari-shardscope")
        for z in range(0, 19, 2):  # browsing: every plane fails again, nothing more is said within the interval
            viewer.dims.set_current_step(0, z)
        _settle()
    notes = _notes_about("zlib_as_gzip", since)
    assert len(notes) == 1 and ".shard" in notes[0] and "gzip" in notes[0] and "drawn hatched" in notes[0]
    qtbot.waitUntil(lambda: layer.name.endswith(MARK), timeout=10000)  # marked once the layer is in the viewer
    record = layer.metadata["shardscope"]["unreadable"]
    assert record["failures"] >= 1 and "zlib" in record["first"]
    assert viewer.dims.nsteps[0] == 19 and viewer.dims.current_step[0] == 18
    shot = _shoot(viewer, tmp_path, "zlib_as_gzip")[..., :3].astype(int)
    bright = (shot.min(axis=2) > 200).mean()
    assert bright > 0.1  # stripes of the high contrast limit: not a black canvas
    row = shot[shot.shape[0] // 2, :, 0]
    assert np.count_nonzero(np.diff((row > 127).astype(int))) > 20  # and stripes, not a uniform fill
    # non-conformant: every reader refuses its chunks; drawn hatched and reported in napari (above), never
    # raised into it, while a strict read (validation, export) still refuses (its part of the comparison with
    # the independent readers, COMPARED_ELSEWHERE)
    with pytest.raises(ChunkDecodeError, match="zlib"):
        np.asarray(layer.data.inner if not layer.multiscale else layer.data[0].inner)


@pytest.mark.realdata
def test_a_damaged_chunk_among_good_ones_is_hatched_and_the_rest_is_drawn(make_napari_viewer: Any,
                                                                          tmp_path: Path) -> None:
    import shutil

    from napari.utils.notifications import notification_manager

    copy = tmp_path / "cloudvolume_jpeg"
    shutil.copytree(REALDATA / "cloudvolume_jpeg", copy)
    (copy / "4_4_40" / "64-128_64-128_0-3").write_bytes(b"\xff\xd8 not a jpeg any more")
    expected = references("cloudvolume_jpeg")[0][0]  # TensorStore on the intact copy: z, y, x
    viewer = make_napari_viewer(show=True)
    since = len(notification_manager.records)
    with pytest.warns(DamagedChunkWarning, match="64-128_64-128_0-3"):
        (layer,) = viewer.open(str(copy), plugin="napari-shardscope")
        viewer.dims.set_current_step(0, 1)
        _settle()
        plane = np.asarray(layer.data[1])
    assert len(_notes_about("cloudvolume_jpeg", since)) == 1
    good = np.ones(plane.shape, bool)
    good[64:128, 64:128] = False
    np.testing.assert_array_equal(plane[good], expected[1][good])
    assert set(np.unique(plane[~good]).tolist()) == {0, 255}
    _shoot(viewer, tmp_path, "cloudvolume_jpeg_damaged")


@pytest.mark.qt_binding_lane
@pytest.mark.realdata
def test_n5java_zi_is_an_rgb_image_of_three_channel_layers_whatever_the_compression(make_napari_viewer: Any,
                                                                                   tmp_path: Path) -> None:
    import imageio.v3 as iio

    png = iio.imread(REALDATA / "n5java_zi" / "reference_image.png")  # y, x, rgb
    viewer = make_napari_viewer(show=True)
    for compression in ("raw", "gzip", "bzip2", "xz", "lz4"):
        viewer.layers.clear()
        layers = viewer.open(str(REALDATA / "n5java_zi" / "n5-java.n5" / compression), plugin="napari-shardscope")
        assert len(layers) == 3 and viewer.dims.ndim == 2 and viewer.dims.nsteps == (512, 512)  # no 512-step slider
        for c, layer in enumerate(layers):
            np.testing.assert_array_equal(np.asarray(layer.data), png[..., c])
        # and the independent reader's voxels (this volume's part of the comparison, COMPARED_ELSEWHERE)
        assert differences(f"n5java_zi/n5-java.n5/{compression}", layers) == []
        # no channel metadata: red, green and blue added up, as napari splits an RGB image
        assert [layer.colormap.name for layer in layers] == ["red", "green", "blue"]
        assert [layer.blending for layer in layers[1:]] == ["additive", "additive"]
        shot = _shoot(viewer, tmp_path, f"n5java_zi_{compression}")
        assert shot[..., :3].std() > 20
        # the canvas shows the picture's colours: the centre of the drawn image against the PNG's centre
        h, w = shot.shape[:2]
        side = min(h, w) // 8  # well inside the image, which reset_view fits to the canvas
        drawn = shot[h // 2 - side:h // 2 + side, w // 2 - side:w // 2 + side, :3].reshape(-1, 3).mean(axis=0)
        want = png[256 - 64:256 + 64, 256 - 64:256 + 64, :3].reshape(-1, 3).mean(axis=0)
        np.testing.assert_allclose(drawn, want, atol=12)


def test_a_float_array_of_0_to_99_is_not_a_white_square(make_napari_viewer: Any, tmp_path: Path) -> None:
    import zarr

    data = np.add.outer(np.arange(100), np.arange(100)).astype(np.float32) / 2  # 0..99 in a gradient
    z = zarr.create(shape=data.shape, chunks=(50, 50), dtype="float32", store=str(tmp_path / "f.zarr"), zarr_format=2)
    z[:] = data
    viewer = make_napari_viewer(show=True)
    (layer,) = viewer.open(str(tmp_path / "f.zarr"), plugin="napari-shardscope")
    assert tuple(layer.contrast_limits) == (0.0, 99.0)
    np.testing.assert_array_equal(np.asarray(layer.data), np.asarray(zarr.open_array(str(tmp_path / "f.zarr"))[:]))
    shot = _shoot(viewer, tmp_path, "float_0_99")[..., 0].astype(int)
    drawn = shot[shot > 0]
    assert drawn.size and drawn.std() > 30 and (drawn > 250).mean() < 0.2  # a gradient, not a white square


@pytest.mark.realdata
def test_ome_zarr_channel_labels_colours_and_windows_name_the_layers(make_napari_viewer: Any, tmp_path: Path) -> None:
    viewer = make_napari_viewer(show=True)
    layers = viewer.open(str(REALDATA / "zarrjava_ome05"), plugin="napari-shardscope")
    images = [layer for layer in layers if layer.__class__.__name__ == "Image"]
    assert [layer.name for layer in images] == ["DAPI", "GFP"]
    assert [tuple(np.round(layer.colormap.colors[-1][:3], 3)) for layer in images] == [(0, 0, 1), (0, 1, 0)]
    assert all(layer.visible for layer in images)
    assert [layer.name for layer in layers if layer not in images] == ["nuclei"]
    assert differences("zarrjava_ome05", layers) == []  # the independent reader's voxels (COMPARED_ELSEWHERE)
    _shoot(viewer, tmp_path, "zarrjava_ome05")
    viewer.layers.clear()
    (image,) = viewer.open(str(REALDATA / "ng_ome_zarr" / "simple_0.5"), plugin="napari-shardscope")
    assert image.name == "image"  # no omero: the multiscale's name, gray, the dtype's range
    assert differences("ng_ome_zarr/simple_0.5", [image]) == []
    _shoot(viewer, tmp_path, "ng_ome_zarr_simple")


#: A path above datasets, and one dataset under it the notification names.
ABOVE = [("wk_simple_n5/color", "1 (N5"), ("wk_simple_n5", "color/1 (N5"), ("wk_zarr3_sharded", "color (OME-Zarr"),
         ("n5java_zi/n5-java.n5", "lz4 (N5")]


@pytest.mark.realdata
def test_a_path_above_a_dataset_names_the_datasets_in_a_notification(make_napari_viewer: Any) -> None:
    """Each path of :data:`ABOVE` opened in turn in one viewer (a viewer's start and close saved per path)."""
    from napari.utils.notifications import notification_manager

    viewer = make_napari_viewer()
    for rel, child in ABOVE:
        since = len(notification_manager.records)
        added = viewer.open(str(REALDATA / rel), plugin="napari-shardscope")
        assert added == [] and len(viewer.layers) == 0, rel
        notes = _notes_about(child, since)
        assert len(notes) == 1 and "not_found" in notes[0], (rel, notes)
