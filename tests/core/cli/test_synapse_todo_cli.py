"""``shardscope synapses REPO REF [BODY] --todo orphans|weak [--save LIST]`` run as a user runs it.

A subprocess, ``--json`` read line by line from a pipe while the verb runs; the rows must equal what the
library finds through a fresh repository handle, and ``--save`` must leave a to-do list at the version
that the Navigate panel walks (its items the sites, in order, with the notes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.annotation import add_many, create_annotation_instance, open_annotation_instance
from napari_shardscope.core.annotation.synapse_checks import find_orphans, find_weak_partners
from napari_shardscope.core.labelmap import create_labelmap
from napari_shardscope.core.proofreading.todo import TodoStore
from napari_shardscope.core.versioned import create_repository, open_repository
from tests.cli_batch import run_commands
from tests.core.annotation.test_synapse_checks import BLOCK, SHAPE, volume_with_background


def json_rows(*argv: str) -> list[dict[str, object]]:
    """Rows of ``--json`` read from a pipe as the verb writes them (the verb has not ended when the first comes)."""
    proc = subprocess.Popen([sys.executable, "-m", "napari_shardscope", *argv, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    rows = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            rows.append(json.loads(line))
        assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rows


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A repository: synapses on a labelmap with background, some orphaned, one body with weak partners."""
    path = tmp_path_factory.mktemp("syntodo") / "repo"
    with create_repository(path) as repo:
        lm = create_labelmap(repo, "seg", volume_with_background(), block=BLOCK)
        inst = create_annotation_instance(repo, "synapses", labelmap=lm)
        uuid = repo.root.uuid
        rng = np.random.default_rng(4)
        pts = np.stack([rng.integers(0, s, 60) for s in SHAPE], axis=1)
        pairs = [(int(rng.integers(0, 20)), 20 + j) for j in range(35)]
        add_many(inst.at(uuid), ["pre"] * 20 + ["post"] * 40, pts, synapses=pairs)
        vol = lm.at(uuid).read_bodies()
        owners = vol[tuple(pts.T)]
        ids, counts = np.unique(owners[owners != 0], return_counts=True)
        body = int(ids[counts.argmax()])  # the body holding most sites
    return path, body


def test_orphans_of_the_whole_version_as_json_from_a_pipe(world: tuple[Path, int]) -> None:
    path, _ = world
    rows = json_rows("synapses", str(path), "main", "--todo", "orphans")
    with open_repository(path) as repo:
        want = [f.to_json() for f in find_orphans(open_annotation_instance(repo, "synapses").at("main"))]
    assert rows == want
    assert rows and {"background", "no-partner"} <= {r for row in rows for r in str(row["reasons"]).split(",")}
    assert all(row["check"] == "orphans" and str(row["note"]).startswith(f"{row['kind']} site {row['id']} ")
               for row in rows)


def test_weak_partners_of_a_body_saved_as_a_todo_list(world: tuple[Path, int], tmp_path: Path) -> None:
    path, body = world
    rows = json_rows("synapses", str(path), "main", str(body), "--todo", "weak", "--min-synapses", "2",
                     "--save", "weak-check")
    with open_repository(path) as repo:
        v = open_annotation_instance(repo, "synapses").at("main")
        found = find_weak_partners(v, body, min_synapses=2)
        entries = TodoStore(repo).entries(v.uuid, "weak-check")
    assert rows == [f.to_json() for f in found] and rows
    assert all(int(str(r["count"])) < 2 and "weak partner" in str(r["note"]) for r in rows)
    assert [(e.item.kind, e.item.value, e.item.text, e.status) for e in entries] == \
        [("point", f.point, f.note, "open") for f in found]
    # the text form says where it went; the same name again is refused, the list kept (one child process:
    # the output and exit codes are the subject, tests.cli_batch)
    again, text = run_commands([
        ["synapses", str(path), "main", str(body), "--todo", "weak", "--min-synapses", "2", "--save", "weak-check"],
        ["synapses", str(path), "main", str(body), "--todo", "weak", "--save", "weak-3"]])
    assert again.returncode != 0 and "exists already" in again.stderr
    assert text.returncode == 0, text.stderr
    assert "saved" in text.stdout and "to-do list 'weak-3'" in text.stdout


def test_usage_errors_name_the_argument(world: tuple[Path, int]) -> None:
    path, _ = world
    no_body, save_alone, bad = run_commands([["synapses", str(path), "main"],
                                             ["synapses", str(path), "main", "5", "--save", "x"],
                                             ["synapses", str(path), "main", "--todo", "weak", "--min-synapses", "0"]])
    assert no_body.returncode != 0 and "name the BODY" in no_body.stderr
    assert save_alone.returncode != 0 and "--todo" in save_alone.stderr
    assert bad.returncode != 0 and "--min-synapses" in bad.stderr
