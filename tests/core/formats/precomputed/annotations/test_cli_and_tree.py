"""``shardscope inspect | ls | locate | validate`` and the shard browser's tree on annotation collections,
driven as a user drives them: the CLI as a subprocess with its ``--json`` read from the pipe.

Command lines that do not depend on each other's output run in one child process (``tests/cli_batch.py``:
each through the console script's ``main`` on real pipes), as the other CLI tests do: each child spent about
a second of CPU importing the package and TensorStore, most of this file's cost. ``ls`` still streams its
JSON Lines from a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.formats import open_annotations
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema, PropertySpec
from napari_shardscope.core.formats.precomputed.annotations.spatial import cell_of_chunk_id
from napari_shardscope.core.formats.precomputed.annotations.writer import write_annotations
from napari_shardscope.core.layout import open_layout
from tests.cli_batch import run_commands
from tests.core.formats.precomputed.annotations.cases import DIMENSIONS, random_batch

SYNAPSES = AnnotationSchema("point", DIMENSIONS, (PropertySpec("score", "float32"),
                                                  PropertySpec("kind", "uint8", None, (0, 1), ("pre", "post"))),
                            ("pre", "post"))


@pytest.fixture(scope="module")
def collections(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("ann")
    batch = random_batch(SYNAPSES, 1500, 21, max_related=1)
    write_annotations(root / "sharded", batch, sharded=True, limit=100, shard_bytes=8192)
    write_annotations(root / "plain", batch, sharded=False, limit=100)
    return root, batch


def shardscope(*args: str, expect: int = 0) -> tuple[str, str]:
    """Run the CLI as a user does; stdout is read from the pipe while the verb runs."""
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == expect, (args, proc.returncode, err[-2000:])
    return out, err


def shardscope_json(*args: str, expect: int = 0) -> Any:
    return json.loads(shardscope(*args, "--json", expect=expect)[0])


def batch(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Several command lines in one child process (real pipes); each must succeed."""
    done = run_commands(commands)
    for proc in done:
        assert proc.returncode == 0, (proc.args, proc.returncode, proc.stderr[-2000:])
    return done


def batch_json(*commands: list[str]) -> list[Any]:
    return [json.loads(proc.stdout) for proc in batch(*([*c, "--json"] for c in commands))]


@pytest.mark.parametrize("which", ["sharded", "plain"])
def test_inspect_summarises_the_schema_and_every_index(collections, which: str) -> None:  # type: ignore[no-untyped-def]
    root, _batch = collections
    as_json, as_text = batch(["inspect", str(root / which), "--json"], ["inspect", str(root / which)])
    report = json.loads(as_json.stdout)
    summary = report["annotations"]
    assert summary["annotation_type"] == "POINT" and summary["relationships"] == ["pre", "post"]
    assert [p["id"] for p in summary["properties"]] == ["score", "kind"]
    keys = [sc["key"] for sc in report["scales"]]
    assert keys[:3] == ["by_id", "relationships/pre", "relationships/post"]
    assert all(k.startswith("spatial/spatial") for k in keys[3:])
    level = report["scales"][3]
    assert level["level"] == 0 and level["grid_shape"] == [1, 1, 1] and level["limit"] == 100
    if which == "sharded":
        assert sum(sc["chunks"] for sc in report["scales"] if sc["key"] == "by_id") == 1500
    text = as_text.stdout
    assert "annotations POINT in 3 dimensions (x 4 nm, y 4 nm, z 40 nm)" in text
    assert "properties: score float32, kind uint8 (enum of 2); relationships: pre, post" in text


def test_ls_names_cells_annotations_and_segments(collections) -> None:  # type: ignore[no-untyped-def]
    root, batch = collections
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", "ls", str(root / "sharded"), "--scale",
                             "spatial/spatial2", "--json"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    records = [json.loads(line) for line in proc.stdout]  # JSON Lines, read as they come
    assert proc.wait(300) == 0
    source = open_annotations(root / "sharded")
    level = source.info.spatial[2]
    for rec in records:
        assert rec["grid_position"] == list(cell_of_chunk_id(level, rec["chunk_id"]))
        assert rec["byte_range"][1] > rec["byte_range"][0]
    plain = [json.loads(line) for line in shardscope("ls", str(root / "plain"), "--scale", "by_id", "--json")[0]
             .splitlines()]
    assert sorted(r["annotation_id"] for r in plain) == sorted(batch.ids.tolist())


def test_locate_an_annotation_a_cell_a_point_and_a_segment(collections) -> None:  # type: ignore[no-untyped-def]
    root, batch = collections
    target = str(root / "sharded")
    ident = int(batch.ids[5])
    point = batch.geometry[5].tolist()
    seg = int(batch.relationships["pre"].values[0])
    rec, levels, found, plain = batch_json(  # the independent questions in one process
        ["locate", target, "--annotation", str(ident)], ["locate", target, "--point", ",".join(map(str, point))],
        ["locate", target, "--segment", str(seg)],
        ["locate", str(root / "plain"), "--cell", "0,0,0", "--scale", "spatial/spatial0"])
    assert rec["source"] == "by_id" and rec["present"] and rec["sharded"]
    assert rec["shard_file"].startswith("by_id/") and rec["byte_range"][1] - rec["byte_range"][0] > 0
    source = open_annotations(root / "sharded")
    assert [r["level"] for r in levels] == list(range(len(source.info.spatial)))
    holding = [r for r in levels if r["present"] and ident in source.cell(r["level"], r["cell"]).ids.tolist()]
    assert len(holding) == 1  # stored at exactly one level
    cell = shardscope_json("locate", target, "--cell", ",".join(map(str, holding[0]["cell"])), "--scale",
                           holding[0]["source"])
    assert cell["byte_range"] == holding[0]["byte_range"]
    again = shardscope_json("locate", target, "--chunk-id", str(cell["chunk_id"]), "--scale", cell["source"])
    assert again["cell"] == cell["cell"]
    assert any(r["source"] == "relationships/pre" and r["present"] for r in found)
    assert plain == {"source": "spatial/spatial0", "level": 0, "cell": [0, 0, 0], "key": "spatial0/0_0_0",
                     "present": True, "size": plain["size"], "sharded": False}


WRONG_LOCATIONS = [
    (["--cell", "9,9,9", "--scale", "spatial/spatial0"], "is not a cell of grid [1, 1, 1]"),
    (["--point", "1e9,0,0"], "lies outside the collection's bounds"),
    (["--cell", "0,0,0", "--scale", "by_id"], "'by_id' is not a spatial index level"),
    (["--voxel", "1,2,3"], "keyed by id, not by voxel"),
]


def test_wrong_locations_are_argument_errors(collections) -> None:  # type: ignore[no-untyped-def]
    root, _batch = collections
    done = run_commands([["locate", str(root / "sharded"), *args] for args, _ in WRONG_LOCATIONS])
    for proc, (args, message) in zip(done, WRONG_LOCATIONS, strict=True):
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr[-2000:])
        assert message in proc.stderr, (args, proc.stderr[-2000:])


def test_validate_a_clean_collection(collections) -> None:  # type: ignore[no-untyped-def]
    root, _batch = collections
    for report in batch_json(["validate", str(root / "sharded")], ["validate", str(root / "plain")]):
        assert report == {"ok": True, "problems": []}


@pytest.mark.parametrize("which", ["sharded", "plain"])
def test_the_tree_lists_every_index_down_to_its_records(collections, which: str) -> None:  # type: ignore[no-untyped-def]
    root, batch = collections
    tree = open_layout(root / which)
    roots = {r.name: r for r in tree.roots()}
    assert "annotations by id" in roots["by_id"].detail
    assert "spatial index level 1: 2×2×2 cells" in roots["spatial/spatial1"].detail or \
        "spatial index level 1" in roots["spatial/spatial1"].detail
    assert tree.spatial_scales() == []  # no voxel grid: nothing to outline in napari

    def leaves(node: Any) -> list[Any]:
        kids = tree.children(node)
        return [node] if not kids else [leaf for k in kids for leaf in leaves(k)]

    ids = [leaf.chunk_id for leaf in leaves(roots["by_id"])]
    assert sorted(ids) == sorted(batch.ids.tolist())
    names = {leaf.name.split(" ")[0] for leaf in leaves(roots["spatial/spatial1"])}
    assert names == {"cell"}
    segment = int(batch.relationships["pre"].values[0])
    located = [loc for loc in tree.locate_segment(segment) if loc.node.scale == "relationships/pre"]
    assert located and located[0].node.present and located[0].node.name == f"segment {segment}"
    assert np.all([leaf.present for leaf in leaves(roots["relationships/post"])])
