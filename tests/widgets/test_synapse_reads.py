"""A body with many synapses does not freeze the viewer: its sites and partners are read off the GUI thread.

20,000 synapses from the largest body of the sample to the second (reading them takes seconds). A
repeating zero-interval timer on the GUI thread records what the user would see at each turn of the
event loop. Read on the GUI thread, every turn would find either the read still scheduled or the layer
already complete; read in a worker, turns pass while the read runs (the viewer paints, keys work). And
a read whose selection changed meanwhile is dropped: the layer never shows the old body's sites after
the new selection, and ends with the new body's sites, as the library gives them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import QTimer

from napari_shardscope.core.annotation import add_many, create_annotation_instance
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.widgets.session import session_for
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_dims_kept import assert_dims, dims_of
from tests.widgets.test_proofreading import Proofread, proofread, two_bodies  # noqa: F401  (fixture)
from tests.widgets.test_synapses import expected_world, settled, synapse_layer, world_points

N = 20_000


def many_synapses(c: ProofreadingController) -> tuple[int, int, int]:
    """N synapses from body a (pre) to body b (post) and 5 from a third body q to b, at random voxels of each."""
    a, b, _, _ = two_bodies(c)
    v = c.version
    assert v is not None and c.session.repo is not None and c.session.labelmap is not None
    vol = v.read_bodies()
    ids, counts = np.unique(vol[(vol != 0) & (vol != a) & (vol != b)], return_counts=True)
    q = int(ids[np.argmax(counts)])
    rng = np.random.default_rng(7)
    wa, wb, wq = np.argwhere(vol == a), np.argwhere(vol == b), np.argwhere(vol == q)
    pre = np.concatenate([wa[rng.integers(0, len(wa), N)], wq[rng.integers(0, len(wq), 5)]])
    post = wb[rng.integers(0, len(wb), N + 5)]
    syn = create_annotation_instance(c.session.repo, "synapses", labelmap=c.session.labelmap)
    n = len(pre)
    add_many(syn.at(v.uuid), ["pre"] * n + ["post"] * n, np.concatenate([pre, post]),
             synapses=np.stack([np.arange(n), n + np.arange(n)], axis=1))
    return a, b, q


class Turns:
    """What each turn of the GUI thread's event loop sees: (selection, sync scheduled, sites in the layer)."""

    def __init__(self, viewer: Any) -> None:
        self.viewer = viewer
        self.seen: list[tuple[tuple[int, ...], bool, int]] = []
        self.timer = QTimer()
        self.timer.setInterval(0)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        s = session_for(self.viewer)
        layer = synapse_layer(self.viewer)
        self.seen.append((s.controller.selected, s.synapses._scheduled, 0 if layer is None else len(layer.data)))

    def stop(self) -> None:
        self.timer.stop()


def a_big_body_loads_while_the_viewer_turns(proofread: Proofread, qtbot: Any,  # noqa: F811
                                            bodies: tuple[int, int, int]) -> None:
    """``bodies``: a, b and q of :func:`many_synapses`, made by an earlier step."""
    viewer, panel, repo, _, c = proofread
    a, b, _q = bodies
    base = dims_of(viewer)
    turns = Turns(viewer)
    try:
        c.select(a)
        qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is not None
                        and len(synapse_layer(viewer).data) == N, timeout=300000)
    finally:
        turns.stop()
    # turns of the event loop passed after the sync started and before the sites were there
    assert any(sel == (a,) and not scheduled and n != N for sel, scheduled, n in turns.seen)
    np.testing.assert_allclose(world_points(synapse_layer(viewer)), expected_world(repo, c, [a]))
    assert panel.partner_rows() == [("out", b, N)]
    assert_dims(viewer, base, "a big body's synapses shown")


def a_read_overtaken_by_a_new_selection_is_dropped(proofread: Proofread, qtbot: Any) -> tuple[int, int, int]:  # noqa: F811
    """Returns a, b and q of :func:`many_synapses` (made here)."""
    viewer, panel, repo, _, c = proofread
    a, b, q = many_synapses(c)
    s = session_for(viewer)
    c.select(a)
    qtbot.waitUntil(lambda: s.synapses.loading, timeout=60000)
    turns = Turns(viewer)
    try:
        c.select(q)  # while a's 20,000 sites are read
        qtbot.waitUntil(lambda: settled(viewer) and synapse_layer(viewer) is not None
                        and set(synapse_layer(viewer).features["body"]) == {q}, timeout=300000)
    finally:
        turns.stop()
    assert all(n != N for sel, _, n in turns.seen if sel == (q,))  # a's sites never shown once q is selected
    assert len(synapse_layer(viewer).data) == 5
    np.testing.assert_allclose(world_points(synapse_layer(viewer)), expected_world(repo, c, [q]))
    assert panel.partner_rows() == [("out", b, 5)]
    return a, b, q


@pytest.mark.qt_binding_lane
def test_an_overtaken_read_is_dropped_then_a_big_body_loads_while_the_viewer_turns(proofread: Proofread,  # noqa: F811
                                                                                  qtbot: Any) -> None:
    """One repository with 20,000 synapses, one viewer: a read overtaken by a new selection is dropped; then the
    big body selected again loads while the event loop turns. In this order, the first step finds no layer
    shown before, as it did alone; the second compares with what the layer shows during the read (the last
    body's 5 sites), never all N. The steps (each named for what it checks, every assertion kept) share the
    viewer and the 20,000 synapses: building both costs about 2.5 CPU s."""
    bodies = a_read_overtaken_by_a_new_selection_is_dropped(proofread, qtbot)
    a_big_body_loads_while_the_viewer_turns(proofread, qtbot, bodies)
