"""Cross-checks with TensorStore's ``n5`` driver, both ways, and the inspector on real datasets.

TensorStore → us: every block TensorStore writes decodes (with our format layer) to what
TensorStore returns for that block's region. Us → TensorStore: datasets whose blocks we encode
read back identically through TensorStore.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.bytestore import LocalByteStore, TensorStoreByteStore
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.formats.n5.attributes import list_scales, read_attributes, write_attributes
from napari_shardscope.core.formats.n5.block import decode_block, decode_block_header
from napari_shardscope.core.formats.n5.inspector import N5Inspector
from tests.http_range_server import RangeServer
from tests.n5_data import (
    TS_COMPRESSIONS,
    compression_id,
    random_array,
    ts_create,
    ts_read,
    write_dataset,
)

DATA_TYPES = ["uint8", "uint16", "int32", "uint64", "float32", "float64", "int8", "int64"]
SHAPE = (13, 10, 7)  # not a multiple of the block size on any axis
BLOCK = (4, 3, 5)


def case_params() -> list[Any]:
    return [pytest.param(comp, DATA_TYPES[i % len(DATA_TYPES)], id=f"{compression_id(comp)}-{DATA_TYPES[i % 8]}")
            for i, comp in enumerate(TS_COMPRESSIONS)]


@pytest.mark.parametrize(("compression", "data_type"), case_params())
def test_tensorstore_blocks_decode_to_tensorstore_values(tmp_path: Path, compression: dict[str, Any],
                                                         data_type: str) -> None:
    array = random_array(SHAPE, data_type, seed=len(compression))
    ts_array = ts_create(tmp_path, array, BLOCK, compression)
    inspector = open_dataset(tmp_path).inspector()
    attrs = inspector.attributes()
    assert attrs.compression.to_json()["type"] == compression["type"]
    records = list(inspector.list_chunks())
    assert len(records) == attrs.num_blocks == 4 * 4 * 2
    for rec in records:
        grid = rec["grid_position"]
        block = inspector.read_block(grid)
        assert block is not None
        origin, inside = attrs.block_origin(grid), attrs.block_shape(grid)
        region = tuple(slice(o, o + s) for o, s in zip(origin, inside, strict=True))
        expected = np.asarray(ts_array[region].read().result())
        # TensorStore writes end blocks full-size; the part inside the dataset must match.
        got = block.data.T[tuple(slice(0, s) for s in inside)]
        assert got.dtype == np.dtype(data_type).newbyteorder(">")
        np.testing.assert_array_equal(got, expected)
        assert rec["size"] == (tmp_path / rec["chunk_key"]).stat().st_size
    assert list(inspector.validate()) == []


@pytest.mark.parametrize(("compression", "data_type"), case_params())
@pytest.mark.parametrize("full_end_blocks", [False, True], ids=["cropped-end", "full-end"])
def test_our_blocks_read_back_through_tensorstore(tmp_path: Path, compression: dict[str, Any], data_type: str,
                                                  full_end_blocks: bool) -> None:
    array = random_array(SHAPE, data_type, seed=7)
    write_dataset(tmp_path, array, BLOCK, compression, full_end_blocks=full_end_blocks)
    np.testing.assert_array_equal(ts_read(tmp_path), array)
    assert list(open_dataset(tmp_path).inspector().validate()) == []


def test_cropped_end_blocks_have_java_headers(tmp_path: Path) -> None:
    array = random_array(SHAPE, "uint16")
    write_dataset(tmp_path, array, BLOCK, {"type": "raw"})
    header = decode_block_header((tmp_path / "3/3/1").read_bytes())
    assert header.shape == (1, 1, 2)  # 13 - 12, 10 - 9, 7 - 5


def test_sparse_dataset(tmp_path: Path) -> None:
    array = random_array(SHAPE, "int16")
    skip = [(0, 0, 0), (3, 3, 1), (1, 2, 0)]
    write_dataset(tmp_path, array, BLOCK, {"type": "gzip"}, skip=skip)
    expected = array.copy()
    for pos in skip:
        expected[tuple(slice(p * b, (p + 1) * b) for p, b in zip(pos, BLOCK, strict=True))] = 0
    np.testing.assert_array_equal(ts_read(tmp_path), expected)
    inspector = open_dataset(tmp_path).inspector()
    summary = inspector.inspect()["scales"][0]
    assert summary["blocks_present"] == 32 - 3 and summary["num_blocks"] == 32
    assert summary["data_bytes"] == sum(p.stat().st_size for p in tmp_path.rglob("*") if p.name[0].isdigit()
                                        and p.is_file())
    located = inspector.locate_format_voxel([0, 0, 0])
    assert located == {"scale": "", "voxel": [0, 0, 0], "grid_position": [0, 0, 0], "block_path": "0/0/0",
                       "chunk_key": "0/0/0", "present": False, "size": None}
    located = inspector.locate_format_voxel([12, 9, 6])
    assert located["present"] is False and located["grid_position"] == [3, 3, 1]
    located = inspector.locate_format_voxel([5, 4, 6])
    assert located["present"] is True and located["block_path"] == "1/1/1"
    assert located["size"] == (tmp_path / "1/1/1").stat().st_size


@pytest.mark.parametrize(("shape", "block"), [((17, 5), (4, 4)), ((5, 4, 3, 6), (2, 3, 3, 4)), ((33,), (8,))],
                         ids=["2d", "4d", "1d"])
def test_other_ranks_both_ways(tmp_path: Path, shape: tuple[int, ...], block: tuple[int, ...]) -> None:
    array = random_array(shape, "uint32", seed=3)
    ts_array = ts_create(tmp_path / "ts", array, block, {"type": "gzip"})
    inspector = open_dataset(tmp_path / "ts").inspector()
    attrs = inspector.attributes()
    for rec in inspector.list_chunks():
        decoded = inspector.read_block(rec["grid_position"])
        assert decoded is not None and decoded.data.shape == tuple(attrs.block_size[::-1])
        origin, inside = attrs.block_origin(rec["grid_position"]), attrs.block_shape(rec["grid_position"])
        region = tuple(slice(o, o + s) for o, s in zip(origin, inside, strict=True))
        np.testing.assert_array_equal(decoded.data.T[tuple(slice(0, s) for s in inside)],
                                      ts_array[region].read().result())
    write_dataset(tmp_path / "ours", array, block, {"type": "xz"})
    np.testing.assert_array_equal(ts_read(tmp_path / "ours"), array)


def test_multiscale_group_written_by_tensorstore(tmp_path: Path) -> None:
    full = random_array((24, 20, 9), "uint8", seed=5)
    levels = [full, full[::2, ::2, :], full[::4, ::4, ::3]]
    for i, level in enumerate(levels):
        ts_create(tmp_path / f"s{i}", level, (8, 8, 4), {"type": "gzip"})
        doc = json.loads((tmp_path / f"s{i}" / "attributes.json").read_text())
        doc["downsamplingFactors"] = [[1, 1, 1], [2, 2, 1], [4, 4, 3]][i]
        (tmp_path / f"s{i}" / "attributes.json").write_text(json.dumps(doc))
    write_attributes(LocalByteStore(tmp_path), {"n5": "4.0.0", "pixelResolution": {"dimensions": [4, 4, 40],
                                                                                      "unit": "nm"}})
    inspector = open_dataset(str(tmp_path)).inspector()
    assert isinstance(inspector, N5Inspector) and inspector.format_name == "n5"
    assert inspector.scale_keys() == ["s0", "s1", "s2"] and inspector.multiscale
    report = inspector.inspect()
    assert [s["key"] for s in report["scales"]] == ["s0", "s1", "s2"]
    assert report["scales"][2]["resolution"] == [16, 16, 120] and report["scales"][2]["unit"] == "nm"
    assert report["scales"][1]["dimensions"] == [12, 10, 9] and report["scales"][1]["grid_shape"] == [2, 2, 3]
    assert report["scales"][1]["blocks_present"] == 12
    assert report["bytes_read"] > 0
    json.dumps(report)  # JSON-able as is
    only = inspector.inspect("s1")
    assert [s["key"] for s in only["scales"]] == ["s1"]
    rec = inspector.locate_format_voxel([11, 9, 8], "s1")
    assert rec["chunk_key"] == "s1/1/1/2" and rec["block_path"] == "1/1/2" and rec["present"]
    block = inspector.read_block([1, 1, 2], "s1")
    assert block is not None
    np.testing.assert_array_equal(block.data.T[:4, :2, :1], levels[1][8:12, 8:10, 8:9])
    assert {r["chunk_key"].split("/")[0] for r in inspector.list_chunks("s2")} == {"s2"}
    assert list(inspector.validate()) == []
    # Any dataset path under the root works as a scale, too.
    assert inspector.level("s2").key == "s2"
    with pytest.raises(Exception, match="no scale 's9'"):
        inspector.level("s9")


def test_inspector_over_http(tmp_path: Path) -> None:
    root = tmp_path / "served"
    array = random_array(SHAPE, "uint16")
    write_dataset(root, array, BLOCK, {"type": "gzip"}, skip=[(0, 0, 0)])
    server = RangeServer(root)
    try:
        inspector = open_dataset(server.url).inspector()
        assert isinstance(inspector, N5Inspector) and isinstance(inspector.store, TensorStoreByteStore)
        present = inspector.locate_format_voxel([5, 4, 6])
        assert present["present"] is True and present["size"] is None
        assert inspector.locate_format_voxel([0, 0, 0])["present"] is False
        block = inspector.read_block([1, 1, 1])
        assert block is not None
        np.testing.assert_array_equal(block.data.T, array[4:8, 3:6, 5:7])
        summary = inspector.inspect()["scales"][0]  # plain HTTP cannot list: counts are unknown
        assert summary["blocks_present"] is None and "listing_error" in summary
    finally:
        server.close()


def test_tensorstore_file_kvstore_store(tmp_path: Path) -> None:
    # The same dataset through TensorStore's kvstore (no cheap sizes): counts known, sizes null.
    write_dataset(tmp_path, random_array(SHAPE, "int32"), BLOCK, {"type": "zstd", "level": 1})
    store = TensorStoreByteStore(f"file://{tmp_path}/")
    inspector = N5Inspector(store, list_scales(store), read_attributes(store) or {})
    summary = inspector.inspect()["scales"][0]
    assert summary["blocks_present"] == 32 and summary["data_bytes"] is None
    assert all(r["size"] is None for r in inspector.list_chunks())
    assert list(inspector.validate()) == []
    data = (tmp_path / "2/1/0").read_bytes()
    assert decode_block(data, inspector.attributes()).data.shape == (5, 3, 4)
