"""The "Review branch…" panel in a real napari viewer (Xvfb): a branch reviewed like a pull request.

The branch has one clean body edit (a cleave of a body the target left alone) and one conflicting
body (both sides merged into it); the panel lists both, the conflict first and highlighted with
both edit histories in plain words; "keep theirs" then Accept writes the merge version, and the
store (read through a fresh repository handle) holds their edits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.widgets.review import AFTER_LAYER, KEY_ROLE, ReviewPanel
from tests.volume_cases import sample  # noqa: F401  (fixture)
from tests.widgets.test_proofreading import LEFT, Proofread, Z, dock, fresh, proofread  # noqa: F401


def four_bodies(c: Any) -> list[tuple[int, tuple[int, int, int]]]:
    """The four largest bodies on plane Z, each with a voxel inside it."""
    plane = c.version.read_bodies((Z, slice(None), slice(None)))
    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    out = []
    for body in (int(i) for i in ids[np.argsort(counts)[::-1][:4]]):
        where = np.argwhere(plane == body)
        y, x = (int(v) for v in where[len(where) // 2])
        out.append((body, (Z, y, x)))
    return out


@pytest.mark.qt_binding_lane
def test_review_lists_clean_and_conflicting_bodies_and_keeps_theirs(proofread: Proofread, qtbot: Any,  # noqa: F811
                                                                     tmp_path: Path) -> None:
    viewer, _, repo, _, c = proofread
    (a, va), (b, vb), (d, vd), (e, ve) = four_bodies(c)
    root = c.commit("base")
    c.branch("alice")
    c.version.merge(a, [b])  # conflicting: the target edits a and b too
    c.version.merge(d, [e])  # clean: the target leaves d and e alone
    c.commit("alice: b into a, e into d")
    c.branch(None, root.uuid)  # main continues from the base
    c.version.merge(b, [a])
    c.commit("main: a into b")

    panel = dock(viewer, "Review branch…")
    assert isinstance(panel, ReviewPanel)
    panel.branch_combo.setCurrentText("alice")
    qtbot.mouseClick(panel.review_button, LEFT)
    assert c.last_error == ""
    rows = {r.key: r for r in panel.rows()}
    assert f"body:{a}" in rows and rows[f"body:{a}"].conflict
    clean = [r for r in rows.values() if not r.conflict]
    assert clean, rows  # the clean edit is listed, not highlighted
    assert panel.is_highlighted(f"body:{a}") and not panel.is_highlighted(clean[0].key)
    assert {k for k, r in rows.items() if r.conflict} == {f"body:{a}", f"body:{b}"}
    assert f"body:{d}" in rows and not rows[f"body:{d}"].conflict
    assert rows[str(panel.tree.topLevelItem(0).data(0, KEY_ROLE))].conflict  # conflicts first
    panel.tree.setCurrentItem(panel.item(f"body:{a}"))
    text = panel.history_label.toPlainText()
    assert "theirs (branch): merged " in text and "mutation" not in text and "mine (checked out):" in text

    # jump to the clean body and toggle before/after
    panel.tree.setCurrentItem(panel.item(f"body:{d}"))
    qtbot.mouseClick(panel.go_button, LEFT)
    assert c.last_error == ""
    target = panel.reviewer.target(d)
    z = target.world_focus(c.version.scales[0])[0]
    assert abs(viewer.dims.point[0] - z) <= max(c.version.scales[0].voxel_size[0], 1)
    assert target.label == d and target.box.lo[0] <= target.focus[0] < target.box.hi[0]
    qtbot.mouseClick(panel.toggle_button, LEFT)
    after = [layer for layer in viewer.layers if layer.name == AFTER_LAYER]
    assert after and after[0].visible and panel.toggle_button.text() == "Show before"
    qtbot.mouseClick(panel.toggle_button, LEFT)
    assert not after[0].visible

    # keep theirs for every conflict, accept, commit
    for r in panel.rows():
        if r.conflict:
            panel.keep_box(r.key).setCurrentText("theirs")
    assert c.merge_plan is not None and c.merge_plan.unresolved == ()
    panel.tree.setCurrentItem(panel.item(f"body:{a}"))
    panel.grab().save(str(tmp_path / "review.png"))  # looked at by hand
    qtbot.mouseClick(panel.accept_button, LEFT)
    assert c.last_error == "", c.last_error
    merged = c.version.uuid
    panel.message_edit.setText("merged alice after review")
    qtbot.mouseClick(panel.commit_button, LEFT)
    assert c.last_error == "", c.last_error
    stored = fresh(repo, merged)
    alice = fresh(repo, "alice")
    for voxel in (va, vb, vd, ve):
        assert stored.body_at(voxel) == alice.body_at(voxel)  # theirs kept everywhere they edited
    assert stored.body_at(va) == stored.body_at(vb) == a and stored.body_at(ve) == d
