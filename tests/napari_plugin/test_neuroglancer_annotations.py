"""*Show in Neuroglancer* of a checked-out version includes the version's synapses: an annotation layer
linked to the version's segmentation layer, served by the viewer's loopback server and read back by the
``neuroglancer`` wheel's reader; pasting that state back into napari opens the segmentation and names the
annotation layer as not opened (napari does not show precomputed annotations). The same run is the round
trip of a version (its merges, selected bodies, position and zoom) through the viewer's server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.annotation import create_annotation_instance
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.serve.ngstate import parse_state, state_url
from napari_shardscope.core.versioned import create_repository
from napari_shardscope.napari_plugin.neuroglancer import open_state, server_for, stop_server, view_state
from napari_shardscope.widgets.session import session_for
from tests.core.labelmap.volumes import voronoi_supervoxels, write_precomputed
from tests.napari_plugin.test_neuroglancer import assert_same_view

AnnotationReader = pytest.importorskip("neuroglancer.read_precomputed_annotations").AnnotationReader


@pytest.mark.qt_binding_lane
def test_show_in_neuroglancer_includes_the_versions_synapses(make_napari_viewer: Any, tmp_path: Path) -> None:
    """Also the version round trip (one repository, two viewers, for both): the pasted state opens the version
    through the server with its merge, its selected bodies, the same position (within half a voxel) and zoom."""
    base = voronoi_supervoxels((6, 48, 56), 16, seed=4)
    write_precomputed(tmp_path / "seg", base, ((1, 1, 1), (1, 2, 2)), chunk_xyz=(16, 16, 4), sharded=True)
    repo = create_repository(tmp_path / "repo")
    lm = create_labelmap(repo, "seg", tmp_path / "seg", block=16)
    syn = create_annotation_instance(repo, "synapses", labelmap=lm)
    v = syn.at("main")
    pre, post = v.add("pre", (3, 10, 10)), v.add("post", (3, 10, 40))
    v.relate(pre.id, post.id)
    repo.close()
    viewer = make_napari_viewer()
    try:
        c = session_for(viewer).controller
        lmv = c.connect(tmp_path / "repo")
        a, b = int(base[3, 10, 10]), int(base[3, 10, 40])
        lmv.merge(a, [b])  # made in napari after the annotations: the synapse now joins one body to itself
        point = tuple(viewer.dims.point)
        state = view_state(viewer)
        assert tuple(viewer.dims.point) == point  # the view is untouched
        seg, ann = state["layers"]
        assert (seg["type"], ann["type"], ann["name"]) == ("segmentation", "annotation", "synapses")
        assert ann["linkedSegmentationLayer"] == {"pre_segment": seg["name"], "post_segment": seg["name"]}
        assert lmv.uuid in ann["source"]
        reader = AnnotationReader(ann["source"].removeprefix("precomputed://"))
        line = reader.by_id[post.id]
        np.testing.assert_array_equal(np.asarray(line.point_a), [10.5, 10.5, 3.5])
        assert [[int(s) for s in segs] for segs in line.segments] == [[a], [a]]
        assert "synapses" in {s.layer for s in parse_state(state).not_opened}

        # the version round trip keeps the merges and the selected bodies: the synapse's body and another one
        svs = [int(s) for s in np.unique(base[3]) if s not in (a, b)]
        lmv.merge(svs[0], [svs[1]])
        c.select(a)
        c.add_to_selection(svs[0])
        viewer.dims.point = (3 * 40.0, 20 * 4.0, 30 * 4.0)
        viewer.camera.zoom = 1.5
        state = view_state(viewer)
        seg = [lay for lay in state["layers"] if lay["type"] == "segmentation"]
        assert len(seg) == 1 and lmv.uuid in seg[0]["source"] and seg[0]["segments"] == [str(a), str(svs[0])]

        second = make_napari_viewer()
        op = open_state(second, state_url(server_for(viewer).client_url, state))
        assert op.wait(60), "opening the state did not finish"
        assert op.error is None, op.error
        assert [type(layer).__name__ for layer in second.layers] == ["Labels"]
        (shown,) = second.layers
        assert shown.name == seg[0]["name"] and shown.metadata["shardscope"]["segments"] == [a, svs[0]]
        # the second viewer reads the version's bodies through the server: the merges show
        plane = np.asarray(shown.data[0][3] if shown.multiscale else shown.data[3])
        np.testing.assert_array_equal(plane, lmv.read_bodies(np.s_[3], 0))
        assert_same_view(viewer, second, (40.0, 4.0, 4.0))
    finally:
        stop_server(viewer)
        session_for(viewer).controller.disconnect()
