"""The Shard browser panel in a real napari viewer (Xvfb): tree, locate, cursor, shard map, validate.

The panel is opened the way a user opens it (``add_plugin_dock_widget`` through the npe2 manifest,
i.e. the Plugins menu entry) and driven through its public methods and, where it matters, real Qt
mouse and key events. Every expectation is computed independently of the panel: from the core's
inspector records, the sharding hash, or the sample's geometry (8 × 8 × 40 nm voxels, no offset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from napari.layers import Labels
from qtpy.QtCore import QPoint, Qt

from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.formats.precomputed.inspector import PrecomputedInspector
from napari_shardscope.core.formats.precomputed.sharding import assign_chunk_ids
from napari_shardscope.core.layout import LayoutTree, format_bytes, open_layout
from napari_shardscope.core.sample_data import SampleDataset
from napari_shardscope.napari_plugin.sample import sample_volumes
from napari_shardscope.napari_plugin.viewer import add_volumes
from napari_shardscope.widgets.shard_browser import OUTLINE_NAME, PAGE_SIZE, ShardBrowser, camera
from tests.core.test_layout import MemoryStore, many_shards  # noqa: F401  (fixture)
from tests.volume_cases import FormatCase, format_cases, sample  # noqa: F401  (fixtures)
from tests.widgets.damage import damaged_copy

VOXEL_NM_ZYX = np.array([40.0, 8.0, 8.0])


def open_panel(viewer: Any) -> ShardBrowser:
    """The panel as the Plugins menu opens it (through the npe2 widget contribution)."""
    _, widget = viewer.window.add_plugin_dock_widget("napari-shardscope", "Shard browser")
    assert isinstance(widget, ShardBrowser)
    return widget


@pytest.fixture
def sample_viewer(make_napari_viewer: Any, sample: SampleDataset) -> tuple[Any, ShardBrowser]:  # noqa: F811
    viewer = make_napari_viewer()
    add_volumes(viewer, sample_volumes(sample))
    return viewer, open_panel(viewer)


def outline_rectangles(viewer: Any) -> list[np.ndarray]:
    """The outline's rectangles in world coordinates (the layer lives on the volume's voxel grid)."""
    layer = viewer.layers[OUTLINE_NAME]
    assert set(layer.shape_type) == {"rectangle"}
    return [np.asarray(d, dtype=float) * layer.scale + layer.translate for d in layer.data]


def assert_outlines(viewer: Any, world_box: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    """One rectangle per z plane of the chunk, each with the chunk's y/x corners (world, nm), clipped to the
    volume's outermost voxel centres (an outline reaching past them would widen the dims range)."""
    lo, hi = np.asarray(world_box[0]), np.asarray(world_box[1])
    outline = viewer.layers[OUTLINE_NAME]
    (volume, *_) = [la for la in viewer.layers if hasattr(la, "level_shapes") and la is not outline
                    and np.allclose(la.scale, outline.scale) and np.allclose(la.translate, outline.translate)]
    first = np.asarray(volume.translate, dtype=float)
    last = first + (np.asarray(volume.level_shapes[0], dtype=float) - 1) * np.asarray(volume.scale, dtype=float)
    expected_planes = [z for z in np.arange(0, 64 * 40, 40.0) if lo[0] < z < hi[0]]
    lo, hi = np.clip(lo, first, last), np.clip(hi, first, last)
    rects = outline_rectangles(viewer)
    planes = sorted({float(r[0, 0]) for r in rects})
    assert planes == pytest.approx(expected_planes)
    for r in rects:
        assert np.all(r[:, 0] == r[0, 0])
        np.testing.assert_allclose(r[:, 1:].min(axis=0), lo[1:])
        np.testing.assert_allclose(r[:, 1:].max(axis=0), hi[1:])


def plugin_menu_titles() -> list[str]:
    """Command titles in napari's Plugins menu, including a plugin's own submenu (several widgets)."""
    from napari._app_model import get_app_model  # napari's documented accessor (its test fixture patches it)

    menus = get_app_model().menus
    titles: list[str] = []
    todo = ["napari/plugins"]
    while todo:
        for item in menus.get_menu(todo.pop()):
            if getattr(item, "command", None) is not None:
                titles.append(str(item.command.title))
            elif getattr(item, "submenu", None) is not None:
                todo.append(str(item.submenu))
    return titles


def panel_is_in_the_plugins_menu_and_shows_the_sample(sample_viewer: tuple[Any, ShardBrowser]) -> None:
    viewer, browser = sample_viewer
    titles = plugin_menu_titles()
    for name in ("Shard browser", "Proofreading", "Versions"):  # the plugin's three main panels
        assert any(t.startswith(name) for t in titles), (name, titles)
    assert browser.layer is viewer.layers["segmentation"]
    tops = [browser.tree_widget.topLevelItem(i).text(0) for i in range(browser.tree_widget.topLevelItemCount())]
    assert tops == ["8_8_40", "16_16_40", "32_32_80", "64_64_160"]
    assert [browser.layer_combo.itemText(i) for i in range(browser.layer_combo.count())] == ["image",
                                                                                               "segmentation"]
    browser.layer_combo.setCurrentIndex(0)
    assert browser.layer is viewer.layers["image"] and browser.tree is not None
    assert browser.tree.url == str(viewer.layers["image"].metadata["shardscope"]["url"])


def expanding_rows_reads_only_their_indexes(sample_viewer: tuple[Any, ShardBrowser], qtbot: Any) -> None:
    viewer, browser = sample_viewer
    assert browser.tree is not None
    stats = browser.tree.inspector.store.stats
    summary = open_layout(browser.tree.url or "").inspector.inspect("8_8_40")["scales"][0]
    opened = stats.requests
    top = browser.tree_widget.topLevelItem(0)
    top.setExpanded(True)
    assert top.childCount() == len(summary["shards"]) == 4
    assert stats.requests == opened  # listing the shard files reads no index
    shard_item = top.child(2)
    expected = summary["shards"][2]
    shard_item.setExpanded(True)
    assert stats.requests == opened + 1 + expected["minishards"]
    assert shard_item.childCount() == expected["minishards"]
    assert shard_item.text(1) == str(expected["chunks"]) and shard_item.text(2) == format_bytes(expected["data_bytes"])
    assert shard_item.text(4).endswith("×")  # compression ratio
    mini = shard_item.child(0)
    mini.setExpanded(True)
    assert stats.requests == opened + 1 + expected["minishards"]  # chunks come from the cached index
    assert mini.childCount() == int(mini.text(1))

    # a real click on a chunk row outlines that chunk
    chunk_item = mini.child(0)
    browser.tree_widget.scrollToItem(chunk_item)
    rect = browser.tree_widget.visualItemRect(chunk_item)
    qtbot.mouseClick(browser.tree_widget.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    node = chunk_item.data(0, Qt.ItemDataRole.UserRole)
    assert browser.last_located is not None and browser.last_located.node == node
    assert_outlines(viewer, browser.tree.geometry("8_8_40").chunk_world_box(node.grid_position))


def locate_outlines_the_chunk_and_moves_the_view(sample_viewer: tuple[Any, ShardBrowser], qtbot: Any) -> None:
    viewer, browser = sample_viewer
    assert browser.tree is not None
    found = browser.locate("20, 30, 100", "voxel", "8_8_40")  # z, y, x from 0, as napari indexes the layer
    # voxel (z=20, y=30, x=100) is in chunk (x 1, y 0, z 2) of the files: x 64-128, y 0-64, z 16-24
    lo = (np.array([16, 0, 64]) - 0.5) * VOXEL_NM_ZYX
    hi = (np.array([24, 64, 128]) - 0.5) * VOXEL_NM_ZYX
    assert found.world_box == (pytest.approx(tuple(lo)), pytest.approx(tuple(hi)))
    assert_outlines(viewer, found.world_box)
    assert lo[0] < viewer.dims.point[0] < hi[0]  # the z step shows the chunk
    np.testing.assert_allclose(camera(viewer).center[-2:], ((lo + hi) / 2)[1:])
    current = browser.tree_widget.currentItem().data(0, Qt.ItemDataRole.UserRole)
    assert current.path == found.path and current.byte_range == found.node.byte_range
    ref = browser.tree.inspector.locate_format_voxel((100, 30, 20), "8_8_40")  # the files' x, y, z
    assert found.voxel_index == (20, 30, 100) and found.voxel == (100, 30, 20)
    assert "voxels z 16–24, y 0–64, x 64–128 (stored as x 64–128, y 0–64, z 16–24)" in browser.locate_label.text()
    assert found.node.chunk_id == ref["chunk_id"] and list(found.node.byte_range or []) == ref["byte_range"]

    # the same through the locate box, by keyboard, at a coarser scale (voxel z 20, y 30, x 40 of 32_32_80)
    browser.scale_combo.setCurrentIndex(2)
    browser.locate_edit.clear()
    assert browser.locate_edit.placeholderText() == "voxel: z, y, x from 0"
    qtbot.keyClicks(browser.locate_edit, "20 30 40")
    qtbot.keyClick(browser.locate_edit, Qt.Key.Key_Return)
    coarse = browser.last_located
    assert coarse is not None and coarse.scale == "32_32_80" and coarse.node.grid_position == (0, 0, 2)
    voxel_nm = np.array([80.0, 32.0, 32.0])
    np.testing.assert_allclose(coarse.world_box[0], (np.array([16, 0, 0]) - 0.5) * voxel_nm)  # type: ignore[index]
    np.testing.assert_allclose(coarse.world_box[1], (np.array([24, 64, 64]) - 0.5) * voxel_nm)  # type: ignore[index]
    assert_outlines(viewer, coarse.world_box)  # type: ignore[arg-type]

    # by chunk id, and a bad entry is reported in the panel rather than raised
    assert browser.locate("5", "chunk id", "8_8_40").node.grid_position == (1, 0, 1)
    assert browser.locate("0, 0, 1", "grid position", "8_8_40").node.chunk_id == 1  # grid z, y, x: x 1
    browser.mode_combo.setCurrentText("voxel")
    browser.locate_edit.setText("999, 0, 0")
    browser.locate_button.click()
    assert "outside" in (browser.last_error or "") and "its shape is z 32, y 64, x 64" in (browser.last_error or "")


@pytest.mark.qt_binding_lane
def test_locate_under_cursor_with_real_mouse_events(make_napari_viewer: Any, sample: SampleDataset,  # noqa: F811
                                                    qtbot: Any) -> None:
    viewer = make_napari_viewer(show=True)
    add_volumes(viewer, sample_volumes(sample))
    browser = open_panel(viewer)
    assert browser.tree is not None and not browser.is_listening()
    viewer.dims.set_point(0, 20 * 40.0)
    qtbot.mouseClick(browser.cursor_check, Qt.MouseButton.LeftButton,
                     pos=QPoint(8, browser.cursor_check.height() // 2))
    assert browser.cursor_mode
    canvas = viewer.window._qt_viewer.canvas.native
    seen = []
    for fx, fy in ((0.3, 0.4), (0.6, 0.55)):
        pos = QPoint(int(canvas.width() * fx), int(canvas.height() * fy))
        qtbot.mouseMove(canvas, pos)
        qtbot.waitUntil(lambda: browser.hover is not None and browser.hover not in seen, timeout=5000)
        hover = browser.hover
        assert hover is not None and hover.world_box is not None
        cursor = np.asarray(viewer.cursor.position)
        lo, hi = np.asarray(hover.world_box[0]), np.asarray(hover.world_box[1])
        assert np.all(lo <= cursor) and np.all(cursor <= hi)  # the chunk under the mouse
        level = browser.layer.data_level  # type: ignore[union-attr]
        assert hover.scale == browser.tree.scale_of_volume_level(level)  # at the level napari shows
        seen.append(hover)
        qtbot.mouseClick(canvas, Qt.MouseButton.LeftButton, pos=pos)
        qtbot.waitUntil(lambda h=hover: browser.last_located is h, timeout=5000)
        rects = outline_rectangles(viewer)
        np.testing.assert_allclose(rects[0][:, 1:].min(axis=0), lo[1:])
        np.testing.assert_allclose(rects[0][:, 1:].max(axis=0), hi[1:])
    assert browser.is_listening()
    browser.set_cursor_mode(False)
    assert not browser.is_listening()


def shard_map_layer_values_are_the_shards(sample_viewer: tuple[Any, ShardBrowser], qtbot: Any) -> None:
    viewer, browser = sample_viewer
    assert browser.tree is not None
    stats = browser.tree.inspector.store.stats
    before = stats.requests
    browser.show_shard_map("8_8_40", "shard")
    qtbot.waitUntil(lambda: browser.shard_map_layer is not None and not browser.busy, timeout=20000)
    layer = browser.shard_map_layer
    volume = viewer.layers["segmentation"]
    # on the volume's own voxels and levels (one value per voxel, that of its chunk), never at chunk scale
    assert isinstance(layer, Labels) and [tuple(d.shape) for d in layer.data] == list(map(tuple, volume.level_shapes))
    np.testing.assert_allclose(layer.scale, volume.scale)
    np.testing.assert_allclose(layer.translate, volume.translate)
    source = browser.tree.inspector.source("8_8_40")  # type: ignore[attr-defined]
    geo = browser.tree.geometry("8_8_40")
    for z, y, x in np.ndindex(8, 4, 4):
        shard = int(assign_chunk_ids(source.sharding, [source.scale.chunk_id((x, y, z))]).shard[0])
        # placed in the world: the voxel at each chunk's centre (and at its first corner) shows that chunk's shard
        box = np.asarray(geo.chunk_world_box((x, y, z)))
        for world in ((box[0] + box[1]) / 2, box[0] + np.asarray(geo.voxel_size) / 2):
            voxel = tuple(int(v) for v in np.round(layer.world_to_data(world)))
            assert int(layer.data[0][voxel]) == shard, ((z, y, x), voxel)
    assert sorted(np.unique(np.asarray(layer.data[-1])).tolist()) == [0, 1, 2, 3]
    assert stats.requests == before  # computed from ids: no reads
    assert "4 of 4 shards used by 128 chunks" in browser.status_label.text()

    assert not browser.map_row.isHidden()  # a sharded scale: the shard map is offered, by shard or minishard
    assert [browser.map_by_combo.itemText(i) for i in range(browser.map_by_combo.count())] == ["shard", "minishard"]
    browser.map_by_combo.setCurrentText("minishard")
    browser.scale_combo.setCurrentIndex(1)
    browser.map_button.click()
    qtbot.waitUntil(lambda: browser.shard_map_layer is not layer and not browser.busy, timeout=20000)
    assert browser.shard_map_layer is not None and browser.shard_map_layer.name == "shard map 16_16_40 (minishard)"
    assert layer not in viewer.layers  # replaced, not stacked


def validate_clean_then_corrupted_copy(sample_viewer: tuple[Any, ShardBrowser], sample: SampleDataset,  # noqa: F811
                                       tmp_path: Path, qtbot: Any) -> None:
    viewer, browser = sample_viewer
    browser.validate(None)
    assert browser.busy and not browser.validate_button.isEnabled()
    qtbot.waitUntil(lambda: not browser.busy, timeout=60000)
    assert browser.problems == [] and browser.problem_list.count() == 0
    assert browser.status_label.text() == "no problems found"
    assert browser.progress_bar.value() == browser.progress_bar.maximum() > 0

    copy, bad = damaged_copy(sample, tmp_path)
    (layer,) = viewer.open(str(copy), plugin="napari-shardscope")
    layer.visible = False  # napari would read (and fail on) the broken chunk when the view moves there
    browser.set_layer(layer)
    browser.validate_scope.setCurrentIndex(1)  # 8_8_40
    browser.validate_button.click()
    qtbot.waitUntil(lambda: not browser.busy, timeout=60000)
    assert browser.problems and browser.problem_list.count() == len(browser.problems)
    assert all(p.key == bad.node.file for p in browser.problems)
    assert "problem" in browser.status_label.text()

    item = browser.problem_list.item(0)
    rect = browser.problem_list.visualItemRect(item)
    qtbot.mouseClick(browser.problem_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    found = browser.last_located
    assert found is not None and found.node.chunk_id == bad.node.chunk_id and found.path == bad.path
    assert_outlines(viewer, bad.world_box)  # type: ignore[arg-type]
    current = browser.tree_widget.currentItem().data(0, Qt.ItemDataRole.UserRole)
    assert current.path == bad.path


def test_the_panel_over_the_sample_rows_locate_shard_map_and_validate(sample_viewer: tuple[Any, ShardBrowser],
                                                                      sample: SampleDataset,  # noqa: F811
                                                                      tmp_path: Path, qtbot: Any) -> None:
    """One session with the panel over the sample, as a user goes on: the panel in the Plugins menu and its
    layers; rows expanded (reading only their indexes) and a chunk row clicked; locating chunks; the shard map;
    validating the sample, then a damaged copy. The steps (each named for what it checks, every assertion kept)
    share one viewer: building and tearing down a viewer with the sample costs about 1 CPU s, most of a step."""
    viewer, browser = sample_viewer
    panel_is_in_the_plugins_menu_and_shows_the_sample(sample_viewer)
    browser.layer_combo.setCurrentText("segmentation")  # back to the segmentation (the first step chose the image)
    assert browser.layer is viewer.layers["segmentation"]
    expanding_rows_reads_only_their_indexes(sample_viewer, qtbot)
    locate_outlines_the_chunk_and_moves_the_view(sample_viewer, qtbot)
    shard_map_layer_values_are_the_shards(sample_viewer, qtbot)
    validate_clean_then_corrupted_copy(sample_viewer, sample, tmp_path, qtbot)


def test_ten_thousand_shards_page_in(make_napari_viewer: Any, qtbot: Any,
                                     many_shards: tuple[MemoryStore, int, dict[int, bytes]]) -> None:  # noqa: F811
    store, real, chunks = many_shards
    viewer = make_napari_viewer()
    browser = ShardBrowser(viewer)
    store.stats.reset()
    browser.set_tree(LayoutTree(PrecomputedInspector(store, parse_info(store.read("info") or b""))))
    top = browser.tree_widget.topLevelItem(0)
    top.setExpanded(True)
    assert top.childCount() == PAGE_SIZE + 1 and "more of" in top.child(PAGE_SIZE).text(0)
    assert store.stats.requests == 1  # info only
    more = top.child(PAGE_SIZE)
    browser.tree_widget.scrollToItem(more)
    qtbot.mouseClick(browser.tree_widget.viewport(), Qt.MouseButton.LeftButton,
                     pos=browser.tree_widget.visualItemRect(more).center())
    assert top.childCount() == 2 * PAGE_SIZE + 1
    # a shard far down the list is reached through the pages; only its indexes are read
    item = browser.select_path((("scale", "s0"), ("shard", real)))
    assert item.text(0) == f"shard {real:04x}"
    item.setExpanded(True)
    assert sum(int(item.child(i).text(1)) for i in range(item.childCount())) == len(chunks)
    assert store.stats.requests == 1 + 1 + item.childCount()
    browser.close()


def test_zarr_and_n5_layers_in_the_panel(make_napari_viewer: Any, qtbot: Any,
                                         format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    viewer = make_napari_viewer()
    browser = open_panel(viewer)
    assert browser.tree is None and "Open a volume" in browser.detail_label.text()
    image, _labels = viewer.open(str(format_cases["ome-zarr"].path), plugin="napari-shardscope")
    browser.set_layer(image)
    assert browser.tree is not None and browser.tree.format_name == "zarr3"
    assert browser.detail_label.text().startswith("zarr v3: ")
    assert browser.map_row.isHidden()  # OME-Zarr arrays without sharding_indexed: no shard map to offer
    assert [browser.scale_combo.itemText(i) for i in range(browser.scale_combo.count())] == ["0", "1", "2"]
    found = browser.locate("5, 20, 3", "voxel", "1")  # zarr v3 voxels are in array order (z, y, x)
    # OME-Zarr level 1: 40 x 16 x 16 nm voxels (µm converted), translation (1400, 80, 80) nm, chunks 4 x 16 x 16
    lo = np.array([1400.0, 80.0, 80.0]) + (np.array([4, 16, 0]) - 0.5) * np.array([40.0, 16.0, 16.0])
    hi = np.array([1400.0, 80.0, 80.0]) + (np.array([8, 32, 16]) - 0.5) * np.array([40.0, 16.0, 16.0])
    np.testing.assert_allclose(found.world_box[0], lo)  # type: ignore[index]
    np.testing.assert_allclose(found.world_box[1], hi)  # type: ignore[index]
    rects = outline_rectangles(viewer)
    planes = sorted({float(r[0, 0]) for r in rects})
    assert planes == pytest.approx([1400.0 + 40 * k for k in range(4, 8)])  # the finest level's z planes
    # the chunk's first x voxel is the volume's: its edge is clipped to that voxel's centre (the dims stay put)
    np.testing.assert_allclose(rects[0][:, 1:].min(axis=0), np.maximum(lo[1:], np.asarray(image.translate)[1:]))
    assert browser.tree_widget.currentItem().data(0, Qt.ItemDataRole.UserRole).path == found.path

    (n5,) = viewer.open(str(format_cases["n5-multiscale"].path), plugin="napari-shardscope")
    browser.set_layer(n5)
    assert browser.detail_label.text().startswith("N5: ") and browser.map_row.isHidden()
    top = browser.tree_widget.topLevelItem(0)
    top.setExpanded(True)
    assert [top.child(i).text(0) for i in range(top.childCount())] == ["z 0–8", "z 8–16"]
    browser.show_shard_map("s0", "shard")
    qtbot.waitUntil(lambda: not browser.busy, timeout=20000)
    assert browser.shard_map_layer is None and "no shards" in (browser.last_error or "")
    browser.validate("s0")
    qtbot.waitUntil(lambda: not browser.busy, timeout=20000)
    assert browser.problems == [] and browser.status_label.text() == "no problems found"


# -- every door agrees ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def door_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Layouts whose stored coordinates differ from the reader's index in each way: x, y, z with a voxel
    offset (sharded precomputed), x, y, z from 0 (N5), the reader's own order (zarr v2, unsharded)."""
    import zarr

    from tests.n5_data import ts_create
    from tests.precomputed_data import SHARDING_MURMUR_GZIP, write_ts_volume

    root = tmp_path_factory.mktemp("doors")
    write_ts_volume(root / "offset", SHARDING_MURMUR_GZIP, scales=1)  # voxel_offset x 3, y 5, z 7
    data = (np.arange(12 * 20 * 18, dtype=np.uint16).reshape(12, 20, 18) % 251).astype(np.uint16)
    ts_create(root / "n5", data.T, (8, 8, 4), {"type": "gzip"})  # N5 order: x, y, z
    z = zarr.create(shape=data.shape, chunks=(4, 8, 8), dtype=data.dtype, store=str(root / "v2.zarr"),
                    zarr_format=2)
    z[:] = data
    return {"precomputed": root / "offset", "n5": root / "n5", "zarr2": root / "v2.zarr"}


@pytest.mark.parametrize("kind", ["precomputed", "n5", "zarr2"])
def test_every_door_locates_the_same_chunk(kind: str, door_datasets: dict[str, Path], make_napari_viewer: Any,
                                           qtbot: Any) -> None:
    """One voxel, typed z, y, x from 0 into the shard browser's Locate field, given to ``shardscope locate
    --voxel`` and to the library (``Dataset.locate_voxel``, ``LayoutTree.locate_voxel``), is one chunk with one
    half-open byte range; ``ls`` lists that chunk with the same range; and it is the voxel napari shows at
    that index of the layer."""
    import json
    import subprocess
    import sys

    from napari_shardscope.core.formats import open_dataset

    path = door_datasets[kind]
    voxel = (5, 11, 9)  # z, y, x from 0
    viewer = make_napari_viewer()
    browser = open_panel(viewer)
    (layer,) = viewer.open(str(path), plugin="napari-shardscope")
    browser.set_layer(layer)
    assert browser.tree is not None and browser.tree.format_name == kind
    assert browser.detail_label.text().startswith(f"{browser.tree.format_title}: ")
    assert browser.map_row.isHidden() == (kind != "precomputed")  # shard-only actions for sharded data only
    browser.mode_combo.setCurrentText("voxel")
    browser.locate_edit.clear()
    qtbot.keyClicks(browser.locate_edit, ", ".join(map(str, voxel)))
    qtbot.keyClick(browser.locate_edit, Qt.Key.Key_Return)
    shown = browser.last_located
    assert shown is not None and browser.last_error is None and shown.voxel_index == voxel

    cli = subprocess.run([sys.executable, "-m", "napari_shardscope", "locate", str(path), "--voxel",
                          ",".join(map(str, voxel)), "--json"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    record = json.loads(cli.stdout)
    library = open_dataset(str(path)).locate_voxel(voxel)
    tree = open_layout(str(path)).locate_voxel(voxel)
    assert record == library and record["voxel"] == list(voxel)
    file = record.get("shard_file") or record.get("chunk_key") or record.get("block_path")
    assert shown.node.file == tree.node.file == file
    assert shown.node.byte_range == tree.node.byte_range
    if record.get("byte_range") is not None:  # N5 and zarr v2 keep a chunk as a whole file: no range
        assert list(shown.node.byte_range or ()) == record["byte_range"]
    assert shown.index_bounds == tree.index_bounds is not None
    lo, hi = shown.index_bounds
    assert all(a <= v < b for a, v, b in zip(lo, voxel, hi, strict=True))
    # the voxel's centre as napari places that index of the layer lies in the located chunk's world box
    world = np.asarray(layer.data_to_world(voxel))
    assert np.all(np.asarray(shown.world_box[0]) <= world) and np.all(world <= np.asarray(shown.world_box[1]))
    # ls names the same chunk with the same range and grid position (z, y, x)
    listed = subprocess.run([sys.executable, "-m", "napari_shardscope", "ls", str(path), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    (same,) = [r for r in rows if r.get("grid_position") == record["grid_position"]]
    assert same.get("byte_range") == record.get("byte_range")
