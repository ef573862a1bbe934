"""Synapses in napari: the selected bodies' sites as a Points layer, and the partner list of the panel.

Driven as a user drives it in a real viewer (Xvfb): a repository with an annotation instance bound to
the proofread labelmap, bodies selected through the controller the panel shows, a merge by the panel's
Merge button, a partner picked by a click on its row. What is checked is what the user sees: the
Points layer's positions in world coordinates against the synapses the library gives for the body at
the version (read through a fresh handle on the repository), the colours of pre and post sites, the
partner rows and their order, and the dims of the volume (z step, plane) untouched by the layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import Qt

from napari_shardscope.core.annotation import add_many, create_annotation_instance, open_annotation_instance
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.widgets.session import session_for
from napari_shardscope.widgets.synapses import COLOURS, SYNAPSE_KEY
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_dims_kept import assert_dims, dims_of, right_arrow
from tests.widgets.test_proofreading import Proofread, Z, proofread, two_bodies  # noqa: F401  (fixture)

LEFT = Qt.MouseButton.LeftButton


def voxels_of(c: ProofreadingController, body: int, n: int) -> list[tuple[int, int, int]]:
    """``n`` distinct voxels of ``body`` on plane Z (z, y, x), spread over it."""
    v = c.version
    assert v is not None
    where = np.argwhere(v.read_bodies((Z, slice(None), slice(None))) == body)
    picks = where[np.linspace(0, len(where) - 1, n).astype(int)]
    return [(Z, int(y), int(x)) for y, x in picks]


def with_synapses(c: ProofreadingController) -> tuple[int, int, int]:
    """An annotation instance on the connected repository: 3 synapses a→p, 2 b→p, 1 p→a; returns a, b, p."""
    a, b, _, _ = two_bodies(c)
    v = c.version
    assert v is not None
    plane = v.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[(plane != 0) & (plane != a) & (plane != b)], return_counts=True)
    p = int(ids[np.argmax(counts)])
    repo, lm = c.session.repo, c.session.labelmap
    assert repo is not None and lm is not None
    syn = create_annotation_instance(repo, "synapses", labelmap=lm)
    pa, pb, pp = voxels_of(c, a, 4), voxels_of(c, b, 2), voxels_of(c, p, 6)
    pre = pa[:3] + pb + pp[5:]
    post = pp[:5] + pa[3:]
    n = len(pre)
    add_many(syn.at(v.uuid), ["pre"] * n + ["post"] * n, np.asarray(pre + post),
             synapses=np.stack([np.arange(n), n + np.arange(n)], axis=1))
    return a, b, p


def expected_world(repo: Path, c: ProofreadingController, bodies: list[int]) -> np.ndarray:
    """The synapse sites of ``bodies`` at the checked-out version, read through a new repository handle."""
    v = c.version
    assert v is not None
    syn = open_annotation_instance(open_repository(repo), "synapses")
    at = syn.at(v.uuid)
    g = v.scales[0]
    pts = sorted((s.annotation.kind != "pre", s.annotation.id, s.annotation.point)
                 for body in bodies for s in at.synapses(body))
    return np.asarray([np.asarray(g.translate) + np.asarray(p) * np.asarray(g.voxel_size) for *_, p in pts])


def synapse_layer(viewer: Any) -> Any:
    found = [la for la in viewer.layers if SYNAPSE_KEY in la.metadata]
    assert len(found) <= 1
    return found[0] if found else None


def world_points(layer: Any) -> np.ndarray:
    return np.asarray([layer.data_to_world(p) for p in np.asarray(layer.data)])


def settled(viewer: Any) -> bool:
    s = session_for(viewer)
    return not s.synapses.pending and not s.surfaces.busy and not s.surfaces._scheduled


def selected_bodies_synapses_follow_selection_and_merge(proofread: Proofread, qtbot: Any) -> tuple[int, int, int]:  # noqa: F811
    """No layer while the repository has no bound instance; one bound meanwhile (as a notebook does) is found
    at the next selection, and its sites follow the selection, a merge and its undo."""
    viewer, panel, repo, _, c = proofread
    g = c.version.scales[0]  # type: ignore[union-attr]
    base = dims_of(viewer)
    a, _b, _, _ = two_bodies(c)
    c.select(a)  # no bound instance yet: no layer, no partners
    qtbot.waitUntil(lambda: settled(viewer), timeout=60000)
    assert synapse_layer(viewer) is None
    assert panel.partner_rows() == []
    assert panel.partner_box.isHidden()
    c.clear_selection()
    qtbot.waitUntil(lambda: settled(viewer), timeout=60000)
    assert_dims(viewer, base, "selection cleared")

    a, b, p = with_synapses(c)
    # a body without synapses while the instance is bound: an empty layer, no partners (napari's add_points
    # refused the empty colour array: a ValueError in the event loop, which pytest-qt reports as a failure)
    plane = c.version.read_bodies((Z, slice(None), slice(None)))  # type: ignore[union-attr]
    lonely = next(int(i) for i in np.unique(plane) if int(i) not in (0, a, b, p))
    c.select(lonely)
    qtbot.waitUntil(lambda: synapse_layer(viewer) is not None and settled(viewer), timeout=60000)
    assert len(synapse_layer(viewer).data) == 0 and panel.partner_rows() == []
    assert viewer.layers.selection.active is panel.session.body_layer
    c.clear_selection()
    qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is None, timeout=60000)

    c.select(a)
    qtbot.waitUntil(lambda: synapse_layer(viewer) is not None and settled(viewer), timeout=60000)
    layer = synapse_layer(viewer)
    want = expected_world(repo, c, [a])
    assert len(want) == 4  # 3 pre (to p) and 1 post (from p)
    np.testing.assert_allclose(world_points(layer), want)
    kinds = list(layer.features["kind"])
    assert kinds == ["pre"] * 3 + ["post"]
    np.testing.assert_allclose(layer.face_color[:3], [COLOURS["pre"]] * 3)
    np.testing.assert_allclose(layer.face_color[3], COLOURS["post"])
    assert tuple(layer.scale) == pytest.approx(tuple(g.voxel_size))  # on the volume's grid, like the bodies
    assert tuple(layer.translate) == pytest.approx(tuple(g.translate))
    assert viewer.layers.selection.active is panel.session.body_layer  # clicks still go to the bodies
    assert_dims(viewer, base, "synapses shown")
    plane = viewer.dims.current_step[0]
    right_arrow(viewer, qtbot)  # the z step is still one plane
    assert viewer.dims.current_step[0] == plane + 1
    moved = dims_of(viewer)

    # the partner list, most synapses first: p (a sends 3 to p), then p again (p sends 1 to a)
    rows = panel.partner_rows()
    assert rows == [("out", p, 3), ("in", p, 1)]

    c.add_to_selection(b)
    qtbot.waitUntil(lambda: settled(viewer) and len(synapse_layer(viewer).data) == 6, timeout=60000)
    qtbot.mouseClick(panel.merge_button, LEFT)  # the user merges b into a
    qtbot.waitUntil(lambda: settled(viewer) and c.selected == (a,), timeout=60000)
    qtbot.waitUntil(lambda: settled(viewer) and sorted(synapse_layer(viewer).features["body"]) == [a] * 6,
                    timeout=60000)
    np.testing.assert_allclose(world_points(synapse_layer(viewer)), expected_world(repo, c, [a]))
    assert list(synapse_layer(viewer).features["kind"]) == ["pre"] * 5 + ["post"]
    assert panel.partner_rows() == [("out", p, 5), ("in", p, 1)]
    # what the merge did to the wiring, in words: b's 2 synapses onto p now count for a
    assert panel.wiring_label.text() == f"merge of {b} into {a} joined 2 synapses onto partner {p}"
    assert_dims(viewer, moved, "after the merge")

    qtbot.mouseClick(panel.undo_button, LEFT)
    qtbot.waitUntil(lambda: settled(viewer) and panel.partner_rows() == [("out", p, 3), ("in", p, 1)],
                    timeout=60000)
    assert sorted(synapse_layer(viewer).features["body"]) == [a] * 4
    assert panel.wiring_label.text() == f"undid: merge of {b} into {a} moved 2 synapses: 2 with partner {p} to {b}"
    c.clear_selection()
    qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is None, timeout=60000)
    assert panel.partner_rows() == []
    assert_dims(viewer, moved, "synapses gone")
    return a, b, p


def clicking_a_partner_selects_it_and_goes_there(proofread: Proofread, qtbot: Any,  # noqa: F811
                                                 bodies: tuple[int, int, int]) -> None:
    """``bodies``: a, b and p of :func:`with_synapses`, made by an earlier step."""
    viewer, panel, _repo, _, c = proofread
    a, b, p = bodies
    c.select(a)
    qtbot.waitUntil(lambda: settled(viewer) and panel.partner_rows() != [], timeout=60000)
    went: list[Any] = []
    c.on_navigate(went.append)
    tree = panel.partner_tree
    item = tree.topLevelItem(0)
    rect = tree.visualItemRect(item)
    qtbot.mouseClick(tree.viewport(), LEFT, pos=rect.center())
    qtbot.waitUntil(lambda: c.selected == (p,), timeout=10000)
    assert [t.label for t in went] == [p]
    qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is not None
                    and set(synapse_layer(viewer).features["body"]) == {p}, timeout=60000)
    assert panel.partner_rows() == [("in", a, 3), ("in", b, 2), ("out", a, 1)]  # most synapses first


def a_split_in_a_worker_moves_synapses_to_the_new_part(proofread: Proofread, qtbot: Any,  # noqa: F811
                                                       bodies: tuple[int, int, int]) -> None:
    """A split runs in a worker (holding the labelmap's lock): the layer and the list follow when it ends.
    ``bodies``: a, b and p of :func:`with_synapses`, made by an earlier step."""
    viewer, panel, repo, _, c = proofread
    a, _b, p = bodies
    c.select(a)
    qtbot.waitUntil(lambda: settled(viewer) and panel.partner_rows() == [("out", p, 3), ("in", p, 1)],
                    timeout=60000)
    qtbot.mouseClick(panel.split_button, LEFT)  # Start split
    seeds = panel.seeds_layer
    assert seeds is not None
    origin = np.asarray(seeds.metadata["split_origin"])
    sites = voxels_of(c, a, 4)  # where with_synapses put a's sites: 3 pre, then 1 post
    plane = c.version.read_bodies((Z, slice(None), slice(None)))  # type: ignore[union-attr]
    yx = np.argwhere(plane == a)
    far = yx[np.argmax(((yx - np.asarray(sites[0][1:])) ** 2).sum(axis=1))]
    for label, (y, x) in ((1, sites[0][1:]), (2, far)):
        seeds.paint((Z - origin[0], y - origin[1], x - origin[2]), label, refresh=True)
    qtbot.mouseClick(panel.split_button, LEFT)  # Split: in a worker thread
    qtbot.waitUntil(lambda: not panel.busy, timeout=60000)
    assert c.last_error == ""
    parts = sorted(c.selected)
    assert len(parts) == 2
    qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is not None
                    and set(synapse_layer(viewer).features["body"]) <= set(parts), timeout=60000)
    # every site of a before the split is now in one of the parts, shown where the library puts it
    layer = synapse_layer(viewer)
    np.testing.assert_allclose(world_points(layer), expected_world(repo, c, parts))
    assert len(layer.data) == 4
    syn = open_annotation_instance(open_repository(repo), "synapses").at(c.version.uuid)  # type: ignore[union-attr]
    first = c.selected[0]
    conns = syn.connections(first)
    rows = [("out", x.body, x.count) for x in conns.outgoing] + [("in", x.body, x.count) for x in conns.incoming]
    want = sorted(rows, key=lambda r: (-r[2], r[0] != "out", r[1]))
    assert panel.partner_rows() == want
    assert panel.wiring_label.text().startswith("split of ")


@pytest.mark.qt_binding_lane
def test_synapses_follow_selection_merge_a_partner_click_and_a_split(proofread: Proofread,  # noqa: F811
                                                                    qtbot: Any) -> None:
    """One session: the synapses follow the selection, a merge and its undo; a click on a partner row selects
    the partner; back on the plane the split starts from, a split in a worker moves the sites to its parts.

    The steps (each named for what it checks, every assertion kept) share one viewer and one annotation
    instance (made by the first step): building and tearing down the viewer and its layers costs about 1.5 CPU
    s. Each step starts from what the previous left: the merge undone, so a, b and p hold the sites
    :func:`with_synapses` gave them.
    """
    bodies = selected_bodies_synapses_follow_selection_and_merge(proofread, qtbot)
    clicking_a_partner_selects_it_and_goes_there(proofread, qtbot, bodies)
    proofread.viewer.dims.set_current_step(0, Z)  # back to the plane the sites were put on (the fixture's)
    a_split_in_a_worker_moves_synapses_to_the_new_part(proofread, qtbot, bodies)
