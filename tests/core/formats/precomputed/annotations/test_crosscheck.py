"""Round trips through independent code, both ways.

* the ``neuroglancer`` wheel's ``write_annotations.AnnotationWriter`` writes, we read (every geometry type,
  numeric, enum, rgb and rgba properties, relationships); its ``read_precomputed_annotations`` reads what
  we write, sharded and unsharded;
* every key of every sharded index we write is read back through TensorStore's
  ``neuroglancer_uint64_sharded`` kvstore and compared with the encoding;
* CloudVolume's annotation reader reads what we write, and we read CloudVolume's H01 sample exactly as it
  and a hand decode do.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.formats import open_annotations
from napari_shardscope.core.formats.precomputed.annotations.encoding import encode_multiple, encode_single
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema, PropertySpec
from napari_shardscope.core.formats.precomputed.annotations.spatial import cell_chunk_id, cell_of_chunk_id
from napari_shardscope.core.formats.precomputed.annotations.table import Annotations
from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations
from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, assert_same, random_batch
from tests.realdata import realdata_path

neuroglancer = pytest.importorskip("neuroglancer")
from neuroglancer import write_annotations as ng_write  # noqa: E402
from neuroglancer.read_precomputed_annotations import AnnotationReader  # noqa: E402

TYPES = ["point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline"]
#: Properties the wheel encodes as the spec does. (Its writer gives uint32 an alignment of 3, so a uint32
#: after another 4-byte property gets two stray padding bytes: tested on its own below.)
PROPS = (PropertySpec("size", "float32", "how big"),
         PropertySpec("cell_type", "uint16", None, (0, 1, 7), ("axon", "dendrite", "soma")),
         PropertySpec("color", "rgb"), PropertySpec("fill", "rgba"), PropertySpec("tilt", "int8"))
RELS = ("pre", "post")


def _schema(kind: str) -> AnnotationSchema:
    return AnnotationSchema(kind, DIMENSIONS, PROPS, RELS)


def _wheel_space() -> Any:
    return neuroglancer.CoordinateSpace(names=["x", "y", "z"], units="nm", scales=[4, 4, 40])


def _wheel_specs() -> list[Any]:
    return [neuroglancer.AnnotationPropertySpec(**{k: v for k, v in p.to_json().items()}) for p in PROPS]


def _write_with_wheel(batch: Annotations, path: Path) -> None:
    writer = ng_write.AnnotationWriter(_wheel_space(), batch.schema.annotation_type, relationships=list(RELS),
                                       properties=_wheel_specs())
    assert batch.relationships is not None
    for i in range(len(batch)):
        props: dict[str, Any] = {p.id: batch.properties[p.id][i].tolist() for p in PROPS}
        rels = {r: [int(v) for v in batch.relationships[r].of(i)] for r in RELS}
        g = batch.points_of(i).tolist()
        kind = batch.schema.annotation_type
        if kind == "point":
            writer.add_point(g[0], id=int(batch.ids[i]), **props, **rels)
        elif kind == "polyline":
            writer.add_polyline(g, id=int(batch.ids[i]), **props, **rels)
        else:
            add = {"line": writer.add_line, "axis_aligned_bounding_box": writer.add_axis_aligned_bounding_box,
                   "ellipsoid": writer.add_ellipsoid}[kind]
            add(g[0], g[1], id=int(batch.ids[i]), **props, **rels)
    writer.write(path)


@pytest.mark.parametrize("kind", TYPES)
def test_we_read_what_the_wheel_writes(kind: str, tmp_path: Path) -> None:
    batch = random_batch(_schema(kind), 200, seed=len(kind))
    _write_with_wheel(batch, tmp_path / "ng")
    source = open_annotations(tmp_path / "ng")
    assert source.schema.annotation_type == kind
    assert_same(source.all(), batch)  # by_id, with the related ids
    assert_same(source.get_many(batch.ids[:17]), batch.take(np.arange(17)))
    assert_same(source.cell(0, (0, 0, 0)), batch, relationships=False)  # the wheel's one spatial cell
    assert batch.relationships is not None
    for rel in RELS:
        segments = np.unique(batch.relationships[rel].values)
        for seg in segments[:10].tolist():
            want = np.flatnonzero([seg in batch.relationships[rel].of(i) for i in range(len(batch))])
            assert_same(source.related(rel, seg), batch.take(want), relationships=False)
    assert list(source.info.schema.properties) == sorted(PROPS, key=lambda p: -p.alignment)


def test_the_wheels_uint32_padding_is_reported_not_misread(tmp_path: Path) -> None:
    writer = ng_write.AnnotationWriter(_wheel_space(), "point", properties=[
        neuroglancer.AnnotationPropertySpec(id="a", type="int32"), neuroglancer.AnnotationPropertySpec(id="b",
                                                                                                    type="uint32")])
    writer.add_point([1, 2, 3], id=5, a=7, b=9)
    writer.write(tmp_path / "ng")
    from napari_shardscope.core.errors import ChunkDecodeError

    with pytest.raises(ChunkDecodeError, match="4 bytes after its last related id"):
        open_annotations(tmp_path / "ng").get(5)


def _wheel_view(annotation: Any, kind: str) -> list[list[float]]:
    if kind == "point":
        return [list(annotation.point)]
    if kind == "ellipsoid":
        return [list(annotation.center), list(annotation.radii)]
    if kind == "polyline":
        return [list(p) for p in annotation.points]
    return [list(annotation.point_a), list(annotation.point_b)]


def _check_wheel_annotation(got: Any, batch: Annotations, i: int, names: list[str]) -> None:
    kind = batch.schema.annotation_type
    np.testing.assert_array_equal(np.asarray(_wheel_view(got, kind), np.float32), batch.points_of(i))
    for name, value in zip(names, got.props, strict=True):
        np.testing.assert_array_equal(np.asarray(value), batch.properties[name][i])


@pytest.mark.parametrize("sharded", [True, False])
@pytest.mark.parametrize("kind", TYPES)
def test_the_wheel_reads_what_we_write(kind: str, sharded: bool, tmp_path: Path) -> None:
    batch = random_batch(_schema(kind), 400, seed=7 + len(kind))
    report = write_annotations(tmp_path / "ours", batch, sharded=sharded, limit=60, shard_bytes=4096)
    assert len(report.level_counts) > 1  # a real multi-level spatial index
    reader = AnnotationReader((tmp_path / "ours").as_uri())
    names = [p["id"] for p in reader.metadata["properties"]]
    position = {int(v): i for i, v in enumerate(batch.ids.tolist())}
    assert batch.relationships is not None
    for i in range(0, len(batch), 7):
        got = reader.by_id[int(batch.ids[i])]
        _check_wheel_annotation(got, batch, i, names)
        for rel, segs in zip(RELS, got.segments, strict=True):
            assert [int(s) for s in segs] == batch.relationships[rel].of(i).tolist()
    seg = int(batch.relationships["pre"].values[0])
    related = reader.relationships["pre"][seg]
    want = {int(batch.ids[i]) for i in range(len(batch)) if seg in batch.relationships["pre"].of(i)}
    assert {int(a.id) for a in related} == want
    everything = list(reader.get_within_spatial_bounds())
    assert sorted({int(a.id) for a in everything}) == sorted(position)
    for a in everything[::13]:
        _check_wheel_annotation(a, batch, position[int(a.id)], names)


@pytest.mark.parametrize("kind", ["point", "ellipsoid", "polyline"])
def test_tensorstore_reads_every_sharded_key_we_write(kind: str, tmp_path: Path) -> None:
    ts = pytest.importorskip("tensorstore")
    batch = random_batch(_schema(kind), 300, seed=3)
    report = write_annotations(tmp_path / "ours", batch, sharded=True, limit=40, shard_bytes=2048)
    info = report.info
    root = (tmp_path / "ours").as_uri()

    def open_kv(key: str, sharding: Any) -> Any:
        return ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"{root}/{key}/",
                                "metadata": sharding.to_json()}).result()

    assert info.by_id.sharding is not None and info.by_id.sharding.num_shards > 1
    kv = open_kv(info.by_id.key, info.by_id.sharding)
    stored = sorted(struct.unpack(">Q", k)[0] for k in kv.list().result())
    assert stored == sorted(batch.ids.tolist())
    schema = report.info.schema
    ordered = Annotations(schema, batch.ids, batch.geometry, batch.properties, batch.relationships,
                          batch.point_offsets)
    for i in range(len(batch)):
        assert kv.read(struct.pack(">Q", int(batch.ids[i]))).result().value == encode_single(ordered, i)
    assert batch.relationships is not None
    for rel in info.relationships:
        kv = open_kv(rel.key, rel.sharding)
        rel_ids = batch.relationships[rel.id or ""]
        for seg in np.unique(rel_ids.values).tolist():
            members = np.flatnonzero([seg in rel_ids.of(i) for i in range(len(batch))])
            members = members[np.argsort(batch.ids[members])]
            assert kv.read(struct.pack(">Q", seg)).result().value == encode_multiple(ordered.take(members))
    seen: set[int] = set()
    source = open_annotations(tmp_path / "ours")
    for level_index, level in enumerate(info.spatial):
        kv = open_kv(level.key, level.sharding)
        for key in kv.list().result():
            code = struct.unpack(">Q", key)[0]
            cell = cell_of_chunk_id(level, code)
            assert cell_chunk_id(level, cell) == code
            value = kv.read(key).result().value
            ours = source.cell(level_index, cell)
            assert value == encode_multiple(ours.without_relationships())
            seen.update(ours.ids.tolist())
    assert seen == set(batch.ids.tolist())


@pytest.mark.parametrize("sharded", [True, False])
def test_cloudvolume_reads_what_we_write(sharded: bool, tmp_path: Path) -> None:
    from cloudvolume.datasource.precomputed.annotation import PrecomputedAnnotationSource

    schema = AnnotationSchema("point", DIMENSIONS, (PropertySpec("score", "float32"),
                                                    PropertySpec("kind", "uint8", None, (0, 1), ("pre", "post"))),
                              ("segment",))
    batch = random_batch(schema, 300, seed=11, max_related=1)
    write_annotations(tmp_path / "ours", batch, sharded=sharded, limit=50, shard_bytes=2048)
    cv = PrecomputedAnnotationSource((tmp_path / "ours").as_uri())
    assert batch.relationships is not None
    for i in range(0, len(batch), 9):
        got = cv.get_by_id(int(batch.ids[i]))
        np.testing.assert_array_equal(got.geometry.reshape(-1), batch.geometry[i])
        assert got.properties["score"][0] == batch.properties["score"][i]
        # (CloudVolume names a related-id list by its index directory, "rel_segment", not by its id)
        assert got.relationships["rel_segment"].tolist() == batch.relationships["segment"].of(i).tolist()
    seg = int(batch.relationships["segment"].values[0])
    related = cv.get_by_relationship("segment", seg)
    assert set(related.ids.tolist()) == {int(batch.ids[i]) for i in range(len(batch))
                                         if seg in batch.relationships["segment"].of(i)}


# -- CloudVolume's H01 sample ------------------------------------------------------------------------------------
@pytest.mark.realdata
def test_cloudvolumes_h01_sample_reads_as_cloudvolume_and_a_hand_decode_read_it() -> None:
    from cloudvolume.datasource.precomputed.annotation import PrecomputedAnnotationSource

    root = realdata_path("cv_annotation")
    source = open_annotations(root)
    cv = PrecomputedAnnotationSource(root.as_uri())
    # by_id: one annotation, its related skeleton
    raw = gzip.decompress((root / "by_id" / "3867588737.gz").read_bytes())
    x, y, z, label = struct.unpack_from("<3fi", raw)
    (count,) = struct.unpack_from("<I", raw, 16)
    related = struct.unpack_from(f"<{count}Q", raw, 20)
    one = source.get(3867588737)
    assert one is not None and one.row(0) == {
        "id": 3867588737, "type": "point", "point": [x, y, z], "properties": {"class_label": label},
        "property_labels": {"class_label": "dendrite"}, "relationships": {"skeleton_id": list(related)}}
    theirs = cv.get_by_id(3867588737)
    np.testing.assert_array_equal(one.geometry, theirs.geometry)
    assert one.relationships is not None
    assert one.relationships["skeleton_id"].of(0).tolist() == theirs.relationships["skeleton_id"].tolist()
    # the relationship index and the spatial cell
    for ours, theirs in ((source.related("skeleton_id", 243895108), cv.get_by_relationship("skeleton_id", 243895108)),
                         (source.cell(0, (0, 0, 0)), cv.get_by_bbox(cv.meta.bounds, mip=0))):
        assert ours.ids.tolist() == theirs.ids.tolist()
        np.testing.assert_array_equal(ours.geometry, theirs.geometry)
        np.testing.assert_array_equal(ours.properties["class_label"], theirs.properties["class_label"])
    cell = gzip.decompress((root / "spatial0" / "0_0_0.gz").read_bytes())
    (n,) = struct.unpack_from("<Q", cell)
    assert len(source.cell(0, (0, 0, 0))) == n == 10043
    assert source.ids().tolist() == [3867588737]
