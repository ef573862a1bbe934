"""The annotation ``info``: parsed strictly, written back exactly, keys kept inside the dataset."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from napari_shardscope.core.errors import MetadataError, UnsafeMetadataPathError
from napari_shardscope.core.formats.precomputed.annotations.info import parse_annotation_info
from napari_shardscope.core.formats.precomputed.annotations.schema import property_order
from tests.realdata import realdata_path

GOOD: dict[str, Any] = {
    "@type": "neuroglancer_annotations_v1",
    "dimensions": {"x": [4, "nm"], "y": [4, "nm"], "z": [40, "nm"]},
    "lower_bound": [0, 0, 0],
    "upper_bound": [100, 80, 10],
    "annotation_type": "LINE",
    "properties": [{"id": "score", "type": "float32", "description": "how sure"},
                   {"id": "kind", "type": "uint8", "enum_values": [0, 1], "enum_labels": ["pre", "post"]},
                   {"id": "color", "type": "rgba"}],
    "relationships": [{"id": "pre_segment", "key": "rel_pre", "sharding": {
        "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "murmurhash3_x86_128",
        "minishard_bits": 2, "shard_bits": 1, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}}],
    "by_id": {"key": "by_id"},
    "spatial": [{"key": "spatial0", "grid_shape": [1, 1, 1], "chunk_size": [100, 80, 10], "limit": 1000}],
}


def test_a_good_info_parses_and_writes_back_as_it_was() -> None:
    info = parse_annotation_info(json.dumps(GOOD).encode())
    assert info.schema.annotation_type == "line"
    assert [p.id for p in info.schema.properties] == ["score", "kind", "color"]
    assert info.schema.properties[1].label_of(1) == "post"
    assert info.relationship("pre_segment").sharding is not None
    assert parse_annotation_info(info.to_json()) == info
    assert info.to_json()["annotation_type"] == "LINE"


def test_annotation_types_are_read_in_any_case() -> None:
    for name in ("point", "POINT", "Polyline", "axis_aligned_bounding_box", "ELLIPSOID"):
        doc = {**GOOD, "annotation_type": name}
        assert parse_annotation_info(doc).schema.annotation_type == name.lower()


def _broken(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    target: Any = doc
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if value is _DELETE:
        del target[int(last) if last.isdigit() else last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(("path", "value", "match"), [
    ("@type", "neuroglancer_skeletons", '"@type" must be'),
    ("dimensions", {}, "dimensions must be a non-empty"),
    ("dimensions.x", [0, "nm"], "positive scale"),
    ("lower_bound", [0, 0], "lower_bound must be a list of 3 finite numbers"),
    ("annotation_type", "SPHERE", "annotation_type must be one of"),
    ("properties.0.id", "Score", "must match"),
    ("properties.0.type", "float64", "type must be one of"),
    ("properties.1.enum_values", [0, 1, 2], "one length"),
    ("properties.1.enum_values", [0, 300], r"enum_values\[1\] 300 is not a uint8 value"),
    ("properties.2.enum_values", [1], "go together"),
    ("properties.2.id", "score", "appears more than once"),
    ("relationships.0.id", "", "non-empty string id"),
    ("relationships.0.sharding.shard_bits", 99, "shard_bits must be in"),
    ("by_id", _DELETE, "by_id must be a JSON object"),
    ("spatial.0.grid_shape", [1, 0, 1], "grid_shape must be 3 positive integers"),
    ("spatial.0.chunk_size", [100, "80", 10], "chunk_size must be 3 positive numbers"),
    ("spatial.0.limit", 0, "limit must be a positive integer"),
    ("spatial.0.key", "by_id", "two indexes share the directory 'by_id'"),
])
def test_every_broken_member_is_named(path: str, value: Any, match: str) -> None:
    with pytest.raises(MetadataError, match=match) as err:
        parse_annotation_info(_broken(path, value), key="ann/info")
    assert err.value.key == "ann/info"


@pytest.mark.parametrize("key", ["../elsewhere", "/abs", "a/../../b", "a\\b", ".", ""])
def test_keys_leading_out_of_the_dataset_are_refused(key: str) -> None:
    error = MetadataError if key == "" else UnsafeMetadataPathError
    with pytest.raises(error):
        parse_annotation_info(_broken("by_id.key", key))


def test_keys_with_dots_inside_the_dataset_are_resolved() -> None:
    assert parse_annotation_info(_broken("by_id.key", "x/../ids/./here")).by_id.key == "ids/here"


def test_a_sharded_level_whose_grid_needs_more_than_64_bits_is_refused() -> None:
    doc = _broken("spatial.0.grid_shape", [2**30, 2**30, 2**10])
    doc["spatial"][0]["sharding"] = GOOD["relationships"][0]["sharding"]
    with pytest.raises(MetadataError, match="needs more than 64 bits"):
        parse_annotation_info(doc)


def test_huge_property_lists_are_refused_without_building_them() -> None:
    doc = {**GOOD, "properties": [{"id": f"p{i}", "type": "uint8"} for i in range(5000)]}
    with pytest.raises(MetadataError, match="more than the 1024 supported"):
        parse_annotation_info(doc)


def test_encoding_order_is_a_stable_sort_by_alignment() -> None:
    info = parse_annotation_info(GOOD)
    assert [info.schema.properties[i].id for i in property_order(info.schema.properties)] == \
        ["score", "kind", "color"]
    assert [p.id for p in info.schema.in_encoding_order().properties] == ["score", "kind", "color"]


@pytest.mark.realdata
def test_cloudvolume_info_parses() -> None:
    info = parse_annotation_info(realdata_path("cv_annotation", "info").read_bytes())
    assert info.schema.annotation_type == "point"
    assert info.schema.relationships == ("skeleton_id",)
    assert len(info.spatial) == 12 and info.spatial[0].sharding is None and info.spatial[1].sharding is not None
    assert info.schema.properties[0].label_of(1004) == "myelinated fragment"
