"""Go-to targets, to-do lists kept in the repository, selection overlays and hover text — without a viewer.

Expectations come from the test volume itself (a dumbbell of known supervoxels) and from a fresh
repository handle, never from the objects under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from napari_shardscope.core.errors import ArgumentError, FormatError
from napari_shardscope.core.proofreading import ProofreadingController
from napari_shardscope.core.proofreading.highlight import FIRST, OTHER, PICKED, HoverCache, ShownSelection
from napari_shardscope.core.proofreading.navigation import parse_target
from napari_shardscope.core.proofreading.todo import INSTANCE, TodoItem, TodoStore, parse_todo
from napari_shardscope.core.versioned import open_repository
from tests.core.proofreading.test_controller import BLOB_A, BLOB_B, base, dumbbell, repo_path  # noqa: F401


@pytest.fixture
def c(repo_path: Path) -> ProofreadingController:  # noqa: F811
    ctl = ProofreadingController()
    ctl.connect(repo_path)
    return ctl


# -- parsing ------------------------------------------------------------------------------------------------


def test_parse_target_forms() -> None:
    assert parse_target("12") == ("body", 12)
    assert parse_target("body 12") == ("body", 12)
    assert parse_target("sv 345") == ("supervoxel", 345)
    assert parse_target("supervoxel: 345") == ("supervoxel", 345)
    assert parse_target("30, 140, 88") == ("point", (30, 140, 88))
    assert parse_target("[30 140 88]") == ("point", (30, 140, 88))
    for bad in ("", "body", "1, 2", "x 3", "0", "1.5"):
        with pytest.raises(ArgumentError):
            parse_target(bad)


@given(st.lists(st.integers(min_value=1, max_value=2**63 - 1), min_size=1, max_size=20))
def test_a_column_of_ids_round_trips(ids: list[int]) -> None:
    text = "\n".join(str(i) for i in ids) + "\n"
    assert [i.value for i in parse_todo(text)] == ids
    assert [i.value for i in parse_todo(json.dumps(ids))] == ids


def test_todo_file_forms() -> None:
    csv = "body,note\n12,check the tip\n13,\n"
    assert parse_todo(csv) == [TodoItem("body", 12, "check the tip"), TodoItem("body", 13)]
    points = "z,y,x,comment\n3,4,5,a merge?\n"
    assert parse_todo(points) == [TodoItem("point", (3, 4, 5), "a merge?")]
    assert parse_todo("3,4,5\n6,7,8\n") == [TodoItem("point", (3, 4, 5)), TodoItem("point", (6, 7, 8))]
    assert parse_todo("sv\n77\n") == [TodoItem("supervoxel", 77)]
    neu3 = {"file type": "Neu3 task list", "task list": [
        {"task type": "body review", "body ID": 12},
        {"task type": "merge review", "supervoxel point 1": [5, 4, 3]}]}  # x, y, z
    assert parse_todo(json.dumps(neu3)) == [TodoItem("body", 12, "body review"),
                                            TodoItem("point", (3, 4, 5), "merge review")]
    assert parse_todo(json.dumps([{"point": [3, 4, 5]}, {"sv": 9}])) == [TodoItem("point", (3, 4, 5)),
                                                                         TodoItem("supervoxel", 9)]


@pytest.mark.parametrize(("text", "where"), [
    ("body\n12\nabc\n", "line 3"),
    ("body\n-4\n", "line 2"),
    ("1,2\n", "one column"),
    ('{"nothing": []}', "task list"),
    ('[1, {"x": 3}]', "item 1"),
    ("[1, 2", "not valid JSON at line 1"),
])
def test_bad_todo_files_name_the_place(text: str, where: str) -> None:
    with pytest.raises(FormatError, match=where):
        parse_todo(text, name="assigned")


# -- go to -----------------------------------------------------------------------------------------------------


def test_go_to_body_supervoxel_point(c: ProofreadingController) -> None:
    seen = []
    c.on_navigate(seen.append)
    v = c.version
    assert v is not None
    body = v.body_at(BLOB_A)
    t = c.go_to(f"body {body}")
    assert t.box == v.bbox(body, exact=False)  # the label index's block bounds
    assert v.body_at(t.focus) == body  # the focus voxel lies in the body
    assert c.selected == (body,) and seen == [t]
    sv = v.supervoxel_at(BLOB_B)
    t = c.go_to("supervoxel", sv)
    assert v.supervoxel_at(t.focus) == sv and c.selected == (v.body_of(sv),)
    t = c.go_to("4, 8, 25")
    assert t.kind == "point" and t.focus == (4, 8, 25) and t.label == v.body_at((4, 8, 25))
    lo, hi = t.world_box(v.scales[0])
    assert all(a < b for a, b in zip(lo, hi, strict=True))
    with pytest.raises(ArgumentError, match="outside the volume"):
        c.go_to("100, 0, 0")
    with pytest.raises(ArgumentError, match="does not exist"):
        c.go_to("body 999999")
    with pytest.raises(ArgumentError, match="does not exist"):
        c.go_to("sv 999999")


# -- to-do lists in the repository ------------------------------------------------------------------------------


def test_todo_statuses_live_in_the_repository(c: ProofreadingController, repo_path: Path,  # noqa: F811
                                              tmp_path: Path) -> None:
    v = c.version
    assert v is not None
    a, b = v.body_at(BLOB_A), v.body_at((4, 14, 5))
    f = tmp_path / "mine.csv"
    f.write_text(f"body\n{a}\n{b}\n")
    assert c.todo.load(f) == "mine"
    with pytest.raises(ArgumentError, match="exists already"):
        c.todo.load(f)
    c.todo.next()
    assert c.selected == (a,)
    c.todo.mark("done", "fixed")
    c.todo.next()
    c.todo.mark("skipped")
    with pytest.raises(ArgumentError, match="done or skipped"):
        c.todo.next()
    uuid = v.uuid
    c.disconnect()
    assert c.todo.name is None
    # a fresh handle reads the same: one keyvalue key per item, at the version the statuses were made
    repo = open_repository(repo_path)
    try:
        store = TodoStore(repo)
        assert store.lists(uuid) == ["mine"]
        assert [(e.status, e.note) for e in store.entries(uuid, "mine")] == [("done", "fixed"), ("skipped", "")]
        assert INSTANCE in [i.name for i in repo.instances()]
    finally:
        repo.close()
    c.connect(repo_path)
    assert c.todo.name == "mine"  # a restart opens the list again, with its statuses (no pick needed)
    assert [e.status for e in c.todo.entries] == ["done", "skipped"]
    c.todo.open("mine")
    assert [e.status for e in c.todo.entries] == ["done", "skipped"]
    # a committed version takes no status (the message says where to go on); its children inherit the list
    c.commit("reviewed")
    with pytest.raises(ArgumentError, match="committed"):
        c.todo.mark("open", index=0)
    c.branch(None)
    c.todo.reload()
    assert [e.status for e in c.todo.entries] == ["done", "skipped"]
    c.todo.mark("open", index=1)
    assert [e.status for e in c.todo.entries] == ["done", "open"]


def test_a_restart_opens_the_list_last_worked_on(c: ProofreadingController, repo_path: Path,  # noqa: F811
                                                 tmp_path: Path) -> None:
    v = c.version
    assert v is not None
    a, b = v.body_at(BLOB_A), v.body_at((4, 14, 5))
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.csv").write_text(f"body\n{a}\n{b}\n")
        c.todo.load(tmp_path / f"{name}.csv")
    c.todo.open("beta")
    c.todo.next()
    c.todo.mark("done")  # beta was worked on last
    c.disconnect()
    c.connect(repo_path)
    assert c.todo.state.lists == ("alpha", "beta")
    assert c.todo.name == "beta" and [e.status for e in c.todo.entries] == ["done", "open"]
    c.todo.open("alpha")
    c.todo.next()
    c.todo.mark("skipped")
    c.disconnect()
    c.connect(repo_path)
    assert c.todo.name == "alpha" and [e.status for e in c.todo.entries] == ["skipped", "open"]


# -- overlays and hover ---------------------------------------------------------------------------------------


def test_overlay_values_and_hover(c: ProofreadingController) -> None:
    v = c.version
    assert v is not None
    vol = dumbbell()
    shown = ShownSelection()
    assert shown.update((10, 30), (5,)) and not shown.update((10, 30), (5,))
    svs = vol.astype(np.uint64)
    painted = shown.paint(v, svs)
    assert np.array_equal(painted == FIRST, vol == 10)
    assert np.array_equal(painted == OTHER, vol == 30)
    assert np.array_equal(painted == PICKED, vol == 5)
    inside = shown.supervoxels_inside(v, svs)
    assert set(np.unique(inside).tolist()) == {0, 10, 30}
    c.select(10)
    c.add_to_selection(30)
    c.merge()
    info = HoverCache().describe(v, BLOB_A, c.session.revision)
    assert info.body == 10 and info.supervoxel == 10 and info.size == int(((vol == 10) | (vol == 30)).sum())
    assert info.last_edit.startswith("merge by ") and "body 10" in info.text()
    assert HoverCache().describe(v, (0, 0, 0)).text() != ""
