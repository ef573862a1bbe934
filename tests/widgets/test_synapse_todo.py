"""The Partners box's *Synapse to-do…* menu in a real viewer: the list is made, Next walks it, Done saves.

A repository with synapses bound to the proofread labelmap (the fixture of tests/widgets/test_synapses.py)
plus orphan sites in the selected body on another plane: one without a partner, one linked to a post
site on background, and an autapse. The menu's action makes the list for the selected body; what is
checked is what the user sees and what the repository keeps: the Navigate panel shows the list (the
items the library finds, read through a fresh repository handle), Next moves the view to the first
site's plane (the dims' range and z step untouched, the arrow key still one plane), Done stores the
status at the version and goes on to the next site.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qtpy.QtCore import Qt

from napari_shardscope.core.annotation import open_annotation_instance
from napari_shardscope.core.annotation.synapse_checks import find_orphans, find_weak_partners
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.todo import TodoStore
from napari_shardscope.core.versioned import open_repository
from napari_shardscope.widgets.navigator import NavigatorPanel
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_dims_kept import assert_dims, assert_range, dims_of, right_arrow
from tests.widgets.test_proofreading import Proofread, Z, proofread  # noqa: F401  (fixture)
from tests.widgets.test_synapses import settled, with_synapses

LEFT = Qt.MouseButton.LeftButton
Z2 = Z + 4  # the orphans' plane: Next must move there


def add_orphans(c: ProofreadingController, a: int) -> bool:
    """Orphan sites of body ``a`` on plane Z2; returns whether one is linked to a post site on background."""
    v = c.version
    assert v is not None and c.session.repo is not None
    plane = v.read_bodies((Z2, slice(None), slice(None)))
    mine = np.argwhere(plane == a)
    assert len(mine) >= 4, "body a reaches plane Z2"
    sites = [(Z2, int(y), int(x)) for y, x in mine[np.linspace(0, len(mine) - 1, 4).astype(int)]]
    syn = open_annotation_instance(c.session.repo, "synapses", labelmap=c.session.labelmap).at(v.uuid)
    syn.add("pre", sites[0])  # no partner
    background = np.argwhere(v.read_bodies((Z2 + 2, slice(None), slice(None))) == 0)
    if len(background):
        pre = syn.add("pre", sites[1])
        post = syn.add("post", (Z2 + 2, int(background[0][0]), int(background[0][1])))
        syn.relate(pre.id, post.id)
    pre, post = syn.add("pre", sites[2]), syn.add("post", sites[3])  # an autapse
    syn.relate(pre.id, post.id)
    return bool(len(background))


def world_z(c: ProofreadingController, z: int) -> float:
    g = c.version.scales[0]  # type: ignore[union-attr]
    return float(g.translate[0] + z * g.voxel_size[0])


def orphan_todo_made_from_the_partner_box_walked_with_next_and_done(proofread: Proofread,  # noqa: F811
                                                                    qtbot: Any, a: int) -> None:
    """``a``: the body :func:`with_synapses` gave synapses, in an earlier step."""
    viewer, panel, repo, _, c = proofread
    on_background = add_orphans(c, a)
    c.select(a)
    qtbot.waitUntil(lambda: settled(viewer) and panel.partner_rows() != [], timeout=60000)
    assert panel.partner_box.todo_button.isVisible()
    base = dims_of(viewer)

    panel.partner_box.orphans_action.trigger()  # the menu item "Orphan synapses …"
    assert c.last_error == ""
    name = f"orphan-synapses-{a}"
    _, nav = viewer.window.add_plugin_dock_widget("napari-shardscope", "Navigate")  # opened by the action
    assert isinstance(nav, NavigatorPanel)
    uuid = c.version.uuid  # type: ignore[union-attr]
    with open_repository(repo) as fresh:
        want = find_orphans(open_annotation_instance(fresh, "synapses").at(uuid), a)
    reasons = [set(f.reasons) for f in want]
    assert reasons[0] == {"no-partner"} and {"autapse"} in reasons
    assert ({"partner-background"} in reasons) == on_background
    assert nav.list_combo.currentText() == name
    assert nav.items_list.count() == len(want)
    assert [nav.items_list.item(i).text() for i in range(len(want))] == \
        [f"○ {i + 1}. point z {f.point[0]}, y {f.point[1]}, x {f.point[2]} — {f.note}" for i, f in enumerate(want)]
    assert_dims(viewer, base, "synapse to-do list made")  # making the list moves nothing

    qtbot.mouseClick(nav.next_button, LEFT)
    assert viewer.dims.point[0] == pytest.approx(world_z(c, want[0].point[0]))  # on the orphan's plane
    assert viewer.dims.point[0] != pytest.approx(base[2][0])
    assert nav.items_list.currentRow() == 0
    assert_range(viewer, base, "Next")
    plane = viewer.dims.current_step[0]
    right_arrow(viewer, qtbot)  # the z step is still one plane
    assert viewer.dims.current_step[0] == plane + 1

    qtbot.mouseClick(nav.done_button, LEFT)  # done, and on to the next site
    assert nav.items_list.currentRow() == 1
    assert viewer.dims.point[0] == pytest.approx(world_z(c, want[1].point[0]))
    with open_repository(repo) as fresh:
        stored = TodoStore(fresh).entries(uuid, name)
    assert [e.status for e in stored] == ["done"] + ["open"] * (len(want) - 1)
    assert [e.item.value for e in stored] == [f.point for f in want]
    assert_range(viewer, base, "Done")

    # made again: the list kept at the version opens as it is (the done item stays done)
    panel.partner_box.orphans_action.trigger()
    assert c.todo.name == name and c.todo.entries[0].status == "done"


def weak_partner_todo_of_the_selected_body(proofread: Proofread, qtbot: Any) -> int:  # noqa: F811
    """Returns a, the body given synapses here (with :func:`with_synapses`)."""
    viewer, panel, repo, _, c = proofread
    a, _b, p = with_synapses(c)  # a sends 3 synapses to p and gets 1 from it: p is a weak partner (in)
    c.select(a)
    qtbot.waitUntil(lambda: settled(viewer) and panel.partner_rows() != [], timeout=60000)
    panel.partner_box.weak_action.trigger()
    assert c.last_error == ""
    uuid = c.version.uuid  # type: ignore[union-attr]
    with open_repository(repo) as fresh:
        want = find_weak_partners(open_annotation_instance(fresh, "synapses").at(uuid), a)
    assert [(f.partner_body, f.count) for f in want] == [(p, 1)]
    assert c.todo.name == f"weak-partners-{a}"
    assert [e.item.text for e in c.todo.entries] == [f.note for f in want]
    assert f"weak partner {p} (1 synapse from it" in want[0].note

    c.clear_selection()  # nothing selected: the status line says what to do, no list is made
    qtbot.waitUntil(lambda: settled(viewer), timeout=60000)
    panel.partner_box.orphans_action.trigger()
    assert "select the body" in c.last_error
    return a


@pytest.mark.qt_binding_lane
def test_weak_partner_then_orphan_synapse_todo_lists(proofread: Proofread, qtbot: Any) -> None:  # noqa: F811
    """The weak-partner list of a body with synapses; then orphan sites of the same body, whose list is walked
    with Next and Done. Weak partners first: the orphans (an autapse among them) would add partners of their
    own. The steps (each named for what it checks, every assertion kept) share one viewer: building and tearing
    down the viewer and its layers costs about 1.5 CPU s."""
    a = weak_partner_todo_of_the_selected_body(proofread, qtbot)
    orphan_todo_made_from_the_partner_box_walked_with_next_and_done(proofread, qtbot, a)
