"""``validate`` of an annotation collection: every record decodes, and the indexes agree — damage is found
and named with its file and byte offset, in the API, the shard browser's tree and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.formats import open_annotations
from napari_shardscope.core.formats.precomputed.annotations.encoding import decode_multiple, encode_multiple
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema, PropertySpec
from napari_shardscope.core.formats.precomputed.annotations.validate import MAX_REPORTED, validate_annotations
from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations
from napari_shardscope.core.layout import open_layout
from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, random_batch

SYNAPSES = AnnotationSchema("point", DIMENSIONS, (PropertySpec("score", "float32"),), ("pre",))


def _problems(path: Path) -> list[str]:
    return [str(p) for p in validate_annotations(open_annotations(path))]


@pytest.fixture
def written(tmp_path: Path):  # type: ignore[no-untyped-def]
    batch = random_batch(SYNAPSES, 300, 12, max_related=1)
    write_annotations(tmp_path / "syn", batch, sharded=False, limit=30)
    assert _problems(tmp_path / "syn") == []
    return tmp_path / "syn", batch


def test_a_missing_by_id_record_is_found_from_the_other_indexes(written) -> None:  # type: ignore[no-untyped-def]
    root, batch = written
    victim = int(batch.ids[0])
    (root / "by_id" / str(victim)).unlink()
    problems = _problems(root)
    assert any(f"annotation {victim} (spatial level" in p and "has no by_id entry" in p for p in problems)
    if len(batch.relationships["pre"].of(0)):
        assert any(f"annotation {victim} (related to segment" in p for p in problems)


def test_a_spatial_record_that_differs_from_by_id_and_leaves_its_cell_is_named_at_its_offset(written) -> None:  # type: ignore[no-untyped-def]
    root = written[0]
    cell_file = sorted((root / "spatial1").iterdir())[0]
    cell = decode_multiple(cell_file.read_bytes(), SYNAPSES, key="k")
    geometry = cell.geometry.copy()
    geometry[1] = [999.5, 999.5, 999.5]  # another record, and outside every cell but the last
    moved = type(cell)(cell.schema, cell.ids, geometry, cell.properties, None, None)
    cell_file.write_bytes(encode_multiple(moved))
    problems = _problems(root)
    key = f"spatial1/{cell_file.name}"
    assert f"{key}: annotation {int(cell.ids[1])}: its geometry or properties in spatial level 1 differ from its " \
           f"by_id record at byte {8 + 16}" in problems
    if cell_file.name != "1_1_1":
        assert any(p.startswith(f"{key}: annotation {int(cell.ids[1])} lies outside cell") for p in problems)


def test_relationship_lists_must_match_the_by_id_records(written) -> None:  # type: ignore[no-untyped-def]
    root = written[0]
    rel_file = sorted((root / "rel_pre").iterdir())[0]
    listed = decode_multiple(rel_file.read_bytes(), SYNAPSES, key="k")
    rel_file.write_bytes(encode_multiple(listed.take(np.arange(1, len(listed)))))  # drop the first
    problems = _problems(root)
    assert any(f"annotation {int(listed.ids[0])} lists segment {rel_file.name} under 'pre', but that segment's"
               in p for p in problems)


def test_files_that_are_not_keys_and_truncated_records(written) -> None:  # type: ignore[no-untyped-def]
    root, _batch = written
    (root / "by_id" / "0012").write_bytes(b"x")
    (root / "spatial0" / "5_0_0").write_bytes(encode_multiple(
        decode_multiple((root / "spatial0" / "0_0_0").read_bytes(), SYNAPSES, key="k")))
    data = (root / "spatial0" / "0_0_0").read_bytes()
    (root / "spatial0" / "0_0_0").write_bytes(data[:-3])
    problems = _problems(root)
    assert "by_id/0012: file name '0012' is not an annotation id (a decimal uint64)" in problems
    assert "spatial0/5_0_0: file name '5_0_0' is not a cell of grid [1, 1, 1]" in problems
    assert any(p.startswith("spatial0/0_0_0: annotation count") and "needs at least" in p and p.endswith("byte 0")
               for p in problems)


def test_many_cases_of_one_kind_are_counted_after_the_first_ones(written) -> None:  # type: ignore[no-untyped-def]
    root, batch = written
    for i in range(40):
        (root / "by_id" / str(int(batch.ids[i]))).unlink()
    problems = _problems(root)
    spatial = [p for p in problems if "(spatial level" in p]
    assert len(spatial) == MAX_REPORTED
    assert any(p.endswith(f"{40 - MAX_REPORTED} more cases: spatial cells list annotations by_id lacks")
               for p in problems)


def test_one_index_alone_is_decoded_without_cross_checks(written) -> None:  # type: ignore[no-untyped-def]
    root, batch = written
    (root / "by_id" / str(int(batch.ids[0]))).unlink()
    source = open_annotations(root)
    assert list(validate_annotations(source, index="spatial/spatial0")) == []
    assert list(validate_annotations(source, index="by_id")) == []
    with pytest.raises(Exception, match="no index 'spatial/nope'"):
        list(validate_annotations(source, index="spatial/nope"))


def test_a_damaged_chunk_inside_a_shard_is_named_and_found_in_the_tree(tmp_path: Path) -> None:
    batch = random_batch(SYNAPSES, 2000, 13, max_related=1)
    write_annotations(tmp_path / "syn", batch, sharded=True, limit=100, shard_bytes=1 << 16)
    layout = open_layout(tmp_path / "syn")
    spatial = next(r for r in layout.roots() if r.name == "spatial/spatial2")
    shard = layout.children(spatial)[0]
    minishard = layout.children(shard)[0]
    chunk = layout.children(minishard)[0]
    assert chunk.name.startswith("cell [") and chunk.byte_range is not None and chunk.file is not None
    path = tmp_path / "syn" / chunk.file
    data = bytearray(path.read_bytes())
    start = chunk.byte_range[0]
    data[start + 12: start + 20] = b"\xff" * 8  # inside the gzip stream of that cell
    path.write_bytes(bytes(data))
    problems = list(layout.validate())
    hit = [p for p in problems if p.key == chunk.file and f"chunk {chunk.chunk_id}" in p.message]
    assert hit and hit[0].offset == start
    located = layout.locate_problem(hit[0])
    assert located is not None and located.node.chunk_id == chunk.chunk_id


def test_the_cli_reports_problems_as_json_and_exits_1(written) -> None:  # type: ignore[no-untyped-def]
    root, batch = written
    (root / "by_id" / str(int(batch.ids[3]))).unlink()
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "validate", str(root), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    out = json.loads(proc.stdout.read())
    assert proc.wait(120) == 1
    assert not out["ok"]
    assert any(f"annotation {int(batch.ids[3])}" in p["message"] and p["key"].startswith("spatial")
               for p in out["problems"])
