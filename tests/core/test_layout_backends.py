"""Where the layout tree's parts come from: one dataset, and its own format package's layout backend.

The tree of a dataset takes the dataset's inspector, volume and backend; a tree over a bare
inspector gets the same backend from the format registry. The key parsers the backends rely on
are checked against the format packages' own key writers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats import format_named, open_dataset
from napari_shardscope.core.formats.n5.block import format_block_key, list_blocks, parse_block_key
from napari_shardscope.core.formats.precomputed.info import parse_info
from napari_shardscope.core.layout import LayoutTree, open_layout
from tests.volume_cases import FormatCase, format_cases  # noqa: F401  (fixture)


@pytest.mark.parametrize("name", ["precomputed", "zarr3", "ome-zarr", "n5-multiscale"])
def test_tree_takes_inspector_volume_and_backend_from_one_dataset(
    format_cases: dict[str, FormatCase],  # noqa: F811
    name: str,
) -> None:
    dataset = open_dataset(str(format_cases[name].path))
    tree = LayoutTree.from_dataset(dataset)
    assert tree.inspector is dataset.inspector() and tree.dataset is dataset and tree.url == dataset.url
    assert tree.volume is not None and tree.volume.url == dataset.url
    assert tree.format_name == dataset.format_name
    # a tree over the inspector alone gets the same format's backend from the registry
    backend = format_named(dataset.format_name).layout_backend(dataset.inspector())
    assert type(backend) is type(dataset.layout_backend())
    assert LayoutTree(dataset.inspector()).roots() == tree.roots()
    # validation gets an inspector of its own; a clean dataset has no problems
    assert dataset.new_inspector() is not dataset.inspector()
    assert list(tree.validate()) == []


def test_a_tree_refuses_an_inspector_of_another_dataset(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    path = str(format_cases["zarr3"].path)
    with pytest.raises(ArgumentError, match="from_dataset"):
        LayoutTree(open_dataset(path).inspector(), dataset=open_dataset(path))
    assert open_layout(path).url == open_dataset(path).url


def test_precomputed_chunk_names_and_ids_name_their_grid_positions(
    format_cases: dict[str, FormatCase],  # noqa: F811
) -> None:
    info = parse_info((format_cases["precomputed"].path / "info").read_bytes())
    for sc in info.scales:
        for grid in np.ndindex(sc.grid_shape):
            name = sc.unsharded_chunk_key(grid).rpartition("/")[2]
            assert sc.grid_position_of_chunk_name(name) == grid
            assert sc.grid_position_of_chunk_id(sc.chunk_id(grid)) == grid
            start, stop = sc.chunk_bounds(grid)
            assert int(sc.chunk_voxels(grid)) == math.prod(b - a for a, b in zip(start, stop, strict=True))
        start, stop = sc.chunk_bounds((0, 0, 0))
        shifted = "_".join(f"{a + 1}-{b + 1}" for a, b in zip(start, stop, strict=True))
        for name in (shifted, f"x/{shifted}", "info", "0-1_0-1"):
            assert sc.grid_position_of_chunk_name(name) is None
        with pytest.raises(ArgumentError, match="not a chunk"):
            sc.grid_position_of_chunk_id(1 << 63)
    assert info.bytes_per_voxel == 2  # uint16, one channel


def test_n5_block_keys_round_trip_and_list(format_cases: dict[str, FormatCase]) -> None:  # noqa: F811
    inspector = open_dataset(str(format_cases["n5-multiscale"].path)).inspector()
    for level in inspector.levels:
        attrs = level.attributes
        listed = dict(list_blocks(inspector.store, attrs))
        assert listed and all(parse_block_key(attrs, format_block_key(attrs, g)) == g for g in listed.values())
        assert sorted(listed) == sorted(r["chunk_key"] for r in inspector.list_chunks(level.key))
        assert parse_block_key(attrs, "elsewhere/0/0/0") is None
        assert parse_block_key(attrs, format_block_key(attrs, (0, 0, 0)) + "/1") is None
