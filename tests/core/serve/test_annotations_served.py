"""A version's annotation instances served beside its segmentation: the Neuroglancer state links an annotation
layer to the version's layer, and the ``neuroglancer`` wheel's reader (TensorStore over HTTP) reads the served
collection — synapses at their voxels, related to the version's bodies; an open version's layer shows edits
made after it was mounted; ``shardscope serve REPO --json`` hands the same out from a pipe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import AnnotationInstance, create_annotation_instance
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import Labelmap, create_labelmap
from napari_shardscope.core.serve.annotations import close_annotation_mounts, mount_version_annotations
from napari_shardscope.core.serve.handoff import default_view, mount_version, serve
from napari_shardscope.core.serve.ngstate import build_state
from napari_shardscope.core.serve.server import ShardServer
from napari_shardscope.core.versioned import Repository, create_repository
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed

AnnotationReader = pytest.importorskip("neuroglancer.read_precomputed_annotations").AnnotationReader


@pytest.fixture
def made(tmp_path: Path) -> Iterator[tuple[Repository, Labelmap, AnnotationInstance, np.ndarray]]:
    base = voronoi_supervoxels((6, 64, 80), 24, seed=11)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1),), chunk_xyz=(32, 32, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    try:
        lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
        syn = create_annotation_instance(repo, "synapses", labelmap=lm)
        yield repo, lm, syn, base
    finally:
        repo.close()


def add_synapse(syn: AnnotationInstance, ref: str, pre: tuple[int, int, int], post: tuple[int, int, int]) -> int:
    v = syn.at(ref)
    a, b = v.add("pre", pre), v.add("post", post)
    v.relate(a.id, b.id)
    return b.id  # the line's id


def source_root(layer: dict) -> str:  # type: ignore[type-arg]
    return str(layer["source"]).removeprefix("precomputed://")


def test_served_annotations_follow_the_version(made: tuple[Repository, Labelmap, AnnotationInstance, np.ndarray]
                                               ) -> None:
    _, lm, syn, base = made
    first = add_synapse(syn, "main", (3, 10, 10), (3, 10, 60))
    with ShardServer() as server:
        try:
            seg = mount_version(server, lm, "main")
            views = mount_version_annotations(server, lm, "main", segmentation_layer=seg.layer.name)
            assert [v.name for v in views] == ["synapses"]
            state = build_state(default_view([seg, *(replace(seg, layer=v) for v in views)]))
            ann = state["layers"][1]
            assert ann["type"] == "annotation"
            assert ann["linkedSegmentationLayer"] == {"pre_segment": seg.layer.name, "post_segment": seg.layer.name}
            reader = AnnotationReader(source_root(ann))
            got = reader.by_id[first]
            np.testing.assert_array_equal(np.asarray(got.point_a), [10.5, 10.5, 3.5])
            np.testing.assert_array_equal(np.asarray(got.point_b), [60.5, 10.5, 3.5])
            pre_body, post_body = int(base[3, 10, 10]), int(base[3, 10, 60])  # no agglomeration: body = supervoxel
            assert [[int(s) for s in segs] for segs in got.segments] == [[pre_body], [post_body]]

            # an edit of the open version after the layer was mounted: the next load of the layer shows it,
            # and a merge of the labelmap moves the synapse to the merged body
            second = add_synapse(syn, "main", (2, 40, 20), (2, 40, 70))
            lm.at("main").merge(pre_body, [post_body])
            reader = AnnotationReader(source_root(ann))
            assert {int(a.id) for a in reader.get_within_spatial_bounds()} == {first, second}
            assert [[int(s) for s in segs] for segs in reader.by_id[first].segments] == [[pre_body], [pre_body]]
            assert {int(a.id) for a in reader.relationships["post_segment"][pre_body]} >= {first}
        finally:  # the generated collections now, not when a later test's garbage collection finds them
            close_annotation_mounts(server)


def test_serve_hands_out_the_annotation_layer(made: tuple[Repository, Labelmap, AnnotationInstance, np.ndarray],
                                              tmp_path: Path) -> None:
    repo, lm, syn, _ = made
    line = add_synapse(syn, "main", (3, 10, 10), (3, 10, 60))
    head = repo.commit("main", "one synapse")
    create_annotation_instance(repo, "empty", labelmap=lm)
    repo.close()
    with serve(tmp_path / "repo", version=head.uuid) as handoff:
        kinds = [(layer["type"], layer["name"]) for layer in handoff.state["layers"]]
        assert kinds[0][0] == "segmentation" and sorted(kinds[1:]) == [("annotation", "empty"),
                                                                       ("annotation", "synapses")]
        ann = next(layer for layer in handoff.state["layers"] if layer["name"] == "synapses")
        assert {int(a.id) for a in AnnotationReader(source_root(ann)).get_within_spatial_bounds()} == {line}
        with urllib.request.urlopen(source_root(ann) + "info") as answer:
            assert answer.headers["Cache-Control"] == "max-age=86400"  # committed: the browser may keep it
    with serve(tmp_path / "repo", version=head.uuid, annotations=()) as handoff:
        assert [layer["type"] for layer in handoff.state["layers"]] == ["segmentation"]
    with pytest.raises(ArgumentError, match="no target is a repository"):
        serve(tmp_path / "seg", annotations=["synapses"])


def test_serve_cli_annotations_from_a_pipe(made: tuple[Repository, Labelmap, AnnotationInstance, np.ndarray],
                                           tmp_path: Path) -> None:
    from tests.core.cli.test_flush import buffered_env
    from tests.core.serve.test_streaming import read_line

    repo, _, syn, _ = made
    line = add_synapse(syn, "main", (3, 10, 10), (3, 10, 60))
    head = repo.commit("main", "one synapse")
    repo.close()
    cmd = [sys.executable, "-m", "napari_shardscope", "serve", str(tmp_path / "repo"), "--version", head.uuid, "--json"]
    scratch = tmp_path / "scratch"  # the server's temporary directory: where it generates the annotation layers
    scratch.mkdir()
    proc = subprocess.Popen([*cmd, "--annotations", "synapses"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**buffered_env(), "TMPDIR": str(scratch)})
    try:
        record = json.loads(read_line(proc))
        assert record["serving"] and proc.poll() is None
        seg, ann = record["state"]["layers"]
        assert ann["type"] == "annotation" and ann["linkedSegmentationLayer"]["post_segment"] == seg["name"]
        reader = AnnotationReader(source_root(ann))
        assert [int(a.id) for a in reader.get_within_spatial_bounds()] == [line]
        assert list(scratch.iterdir())  # generated while serving
    finally:
        proc.terminate()  # SIGTERM, as `kill` or a service manager stops it: a clean stop, as Ctrl-C is
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode(errors="replace")[-3000:]
    assert list(scratch.iterdir()) == []  # nothing left behind
    done = subprocess.run([*cmd, "--print-url", "--no-annotations"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [layer["type"] for layer in json.loads(done.stdout)["state"]["layers"]] == ["segmentation"]
    bad = subprocess.run([*cmd, "--print-url", "--annotations", "nope"], capture_output=True, timeout=120)
    assert bad.returncode != 0 and b"nope" in bad.stderr and b"Traceback" not in bad.stderr, bad.stderr
