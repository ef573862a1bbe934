"""push, fetch, pull, clone and status through a directory remote and a real S3 API (moto), in one process.

"Bit-identical" means every committed version holds the same record, notes, log entries and
key-values in both repositories (only the local branch name a diverged fetch gets may differ), and
the labelmap reads the same body labels at every scale.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from napari_shardscope.core.cli import run
from napari_shardscope.core.labelmap import open_labelmap
from napari_shardscope.core.labelmap.remote import pull_merger
from napari_shardscope.core.versioned import IdsExhaustedError, Repository, open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes.endpoints import open_remote
from napari_shardscope.core.versioned.remotes.pack import object_key
from napari_shardscope.core.versioned.remotes.verify import remote_versions, verify_remote
from tests.core.versioned.remotes.helpers import bodies_at, edit, made_ids, make_repo, pushed_with_a_merge


def same_node(a: Repository, b: Repository, uuid: str) -> bool:
    x, y = a.read_node(uuid), b.read_node(uuid)
    return dataclasses.replace(x, branch="") == dataclasses.replace(y, branch="")


def test_push_clone_read_identical(base: Path, remote_url: str, tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", base)
    rng = np.random.default_rng(0)
    edit(a, "merge", rng)
    edit(a, "cleave", rng)
    R.add_remote(a, "origin", remote_url)
    pushed = R.push(a, "origin", "main")
    assert len(pushed.sent) == 3 and pushed.transfer.objects_sent > 0
    again = R.push(a, "origin", "main")
    assert again.up_to_date and again.transfer.objects_sent == 0
    path, fetched = R.clone(remote_url, tmp_path / "b")
    assert len(fetched.adopted) == 2  # the root came first, then both edits
    b = open_repository(path)
    assert {v.uuid for v in b.versions()} == {v.uuid for v in a.versions()}
    for v in a.versions():
        assert same_node(a, b, v.uuid)
        assert b.version(v.uuid).branch == v.branch
    for x, y in zip(bodies_at(a, "main"), bodies_at(b, "main"), strict=True):
        assert np.array_equal(x, y)
    with b.read("main") as view:
        assert view.get("notes", b"about") == b"the base"
    assert b.verify() == [] and verify_remote(remote_url) == []
    # the clone reads its labelmap without rebuilding the base index (unversioned data came along)
    assert open_labelmap(b, "seg").repo.get_unversioned("seg", b"index/meta") is not None
    a.close()
    b.close()


def test_diverged_push_refused_then_pull_merge_push(base: Path, remote_url: str, tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", remote_url)
    R.push(a)
    b = open_repository(R.clone(remote_url, tmp_path / "b")[0])
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(2)
    lm = open_labelmap(a, "seg")
    bodies = sorted(int(s) for s in lm.index_summary().supervoxels)
    half = len(bodies) // 2
    edit(a, "merge", rng_a, bodies[:half])
    edit(b, "merge", rng_b, bodies[half:])
    R.push(a)
    with pytest.raises(R.NonFastForwardError, match="fetch and merge first"):
        R.push(b)
    st = {s.branch: s for s in R.status(b)}
    assert st["main"].ahead == 1
    pulled = R.pull(b, merge=pull_merger())
    assert pulled.kind == "merge"
    R.push(b)
    assert R.pull(a, merge=pull_merger()).kind == "fast-forward"
    assert a.head("main").uuid == b.head("main").uuid
    for x, y in zip(bodies_at(a, "main"), bodies_at(b, "main"), strict=True):
        assert np.array_equal(x, y)
    on_remote = remote_versions(remote_url)
    for uuid in on_remote:
        assert same_node(a, b, uuid)
    assert {s.branch: (s.ahead, s.behind) for s in R.status(a)}["main"] == (0, 0)
    assert verify_remote(remote_url) == []
    a.close()
    b.close()


def test_force_with_lease(base: Path, tmp_path: Path) -> None:
    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", url)
    R.push(a)
    b = open_repository(R.clone(url, tmp_path / "b")[0])
    edit(a, "merge", np.random.default_rng(3))
    edit(b, "merge", np.random.default_rng(4))
    R.push(a)
    with pytest.raises(R.NonFastForwardError):
        R.push(b, force_with_lease=True)  # b never saw a's head: the lease does not hold
    R.fetch(b)
    forced = R.push(b, force_with_lease=True)  # now it does, and b's history replaces a's on the remote
    assert forced.forced and verify_remote(url) == []
    assert remote_versions(url).keys() >= {b.head("main").uuid}
    a.close()
    b.close()


def test_damaged_object_is_refused(base: Path, tmp_path: Path) -> None:
    url = tmp_path / "remote"
    a = pushed_with_a_merge(tmp_path / "a", base, url)
    head = remote_versions(str(url))[a.head("main").uuid]
    # the node object, and the history pack a clone reads it from (a pack is an object like any other)
    packs = json.loads((url / "refs.json").read_text())["packs"]
    for name in [head, *(p[0] for p in packs)]:
        path = url / object_key(name)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    with pytest.raises(R.CorruptObjectError, match="does not match its hash"):
        R.clone(str(url), tmp_path / "b")
    assert not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.clone-")]  # nothing half-built left
    assert any("does not match" in p for p in verify_remote(str(url)))
    a.close()


def test_ids_never_collide_and_run_out_offline(base: Path, tmp_path: Path) -> None:
    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", url)
    R.push(a)
    b = open_repository(R.clone(url, tmp_path / "b")[0])
    c = open_repository(R.clone(url, tmp_path / "c")[0])
    rng = np.random.default_rng(6)
    for _ in range(3):
        for repo in (a, b, c):
            edit(repo, "cleave", rng)
    ids = [made_ids(r) for r in (a, b, c)]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not (ids[i][0] & ids[j][0]), "mutation ids collide"
            assert not (ids[i][1] & ids[j][1]), "new body ids collide"
    assert all(ids[i][1] for i in range(3))
    # offline, a clone uses its reserved block; when it is spent the edit is refused, nothing written
    os.replace(tmp_path / "remote", tmp_path / "remote-away")
    counter = "labelmap/seg/labels"
    left = R.remaining_ids(c)[counter]
    assert left > 0
    edit(c, "cleave", rng)  # offline, from the reserved block
    assert R.remaining_ids(c)[counter] == left - 1
    with c._writing() as p:  # spend every reserved id
        import napari_shardscope.core.versioned.keys as K

        for name in (counter, "labelmap/seg/mutations"):  # every edit needs a mutation id
            p.txn.put(K.RESERVATION_PREFIX + name.encode(), b"")
    before = len(c.versions())
    with pytest.raises(IdsExhaustedError, match="ran out"):
        edit(c, "cleave", rng)
    assert c.verify() == [] and len(c.versions()) == before + 1  # the open version, no edit in it
    for repo in (a, b, c):
        repo.close()


def test_http_remote_is_read_only(base: Path, tmp_path: Path) -> None:
    from tests.http_range_server import RangeServer

    url_dir = tmp_path / "remote"
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(7))
    R.add_remote(a, "origin", str(url_dir))
    R.push(a)
    server = RangeServer(tmp_path)
    try:
        path, _ = R.clone(f"{server.url.rstrip('/')}/remote", tmp_path / "b")
        b = open_repository(path)
        assert same_node(a, b, a.head("main").uuid)
        edit(b, "merge", np.random.default_rng(8))
        with pytest.raises(R.ReadOnlyRemoteError):
            R.push(b)
        b.close()
    finally:
        server.close()
    a.close()


def test_cli_round_trip(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(9))
    a.close()
    assert run(["remote", "add", str(tmp_path / "a"), "origin", url]) == 0
    capsys.readouterr()
    assert run(["remote", "list", str(tmp_path / "a"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["remotes"] == {"origin": url}
    assert run(["push", str(tmp_path / "a"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["branch"] == "main" and len(out["versions_sent"]) == 2
    assert run(["clone", url, str(tmp_path / "b"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["branches"] == ["main"]
    # both labelmap counters are reserved at clone time (labels too, though the origin never cleaved)
    assert set(out["ids_left"]) == {"labelmap/seg/labels", "labelmap/seg/mutations"}
    assert all(n > 0 for n in out["ids_left"].values())
    assert run(["status", str(tmp_path / "b"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["branches"]
    assert rows == [{"branch": "main", "local": rows[0]["local"], "remote": rows[0]["local"], "ahead": 0,
                     "behind": 0, "open_version": False}]
    assert run(["push", str(tmp_path / "b"), "nowhere"]) == 3  # unknown remote: not found
    assert run(["fetch", str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["adopted"] == []
    assert run(["ids", str(tmp_path / "b"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ids_from"] == "origin"
    assert run(["remote", "remove", str(tmp_path / "b"), "origin"]) == 0


def test_review_a_fetched_branch(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from napari_shardscope.core.labelmap.review import review_branch

    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", url)
    R.push(a)
    b = open_repository(R.clone(url, tmp_path / "b")[0])
    bodies = sorted(int(s) for s in open_labelmap(a, "seg").index_summary().supervoxels)
    x, y, z, w = bodies[:4]
    va = a.new_version("main")
    lma = open_labelmap(a, "seg").at(va)
    lma.merge(x, [y])  # touches x and y: y conflicts with b's edit below
    lma.merge(z, [w])  # clean
    a.commit(va, "alice")
    vb = b.new_version("main")
    open_labelmap(b, "seg").at(vb).merge(bodies[4], [y])
    b.commit(vb, "bob")
    R.push(a)
    fetched = R.fetch(b)
    (adopted_on,) = set(fetched.renamed.values())  # a branch of its own; origin/main is the tracking name
    assert adopted_on.startswith("main+origin-") and b.version("origin/main").uuid == fetched.tracking["main"]
    review = review_branch(open_labelmap(b, "seg"), "origin/main", "main")
    by_body = {r.body: r for r in review.bodies}
    assert set(by_body) == {x, y, z, w}
    assert by_body[y].conflict and not by_body[z].conflict and not by_body[x].conflict
    assert by_body[y].target_edits and by_body[y].target_edits[0].startswith(f"merged body {y} into {bodies[4]} (")
    assert by_body[z].after == by_body[z].before + by_body[w].before  # type: ignore[operator]
    assert by_body[w].after is None and by_body[z].location is not None
    assert by_body[z].branch_edits[0].startswith(f"merged body {w} into {z} (")
    assert "mutation" not in " ".join(by_body[z].branch_edits + by_body[y].target_edits)
    b.close()
    a.close()
    assert run(["review", str(tmp_path / "b"), "origin/main", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["conflicts"] == 1 and len(doc["bodies"]) == 4
    assert run(["review", str(tmp_path / "b"), "origin/main"]) == 0
    assert "CONFLICT body" in capsys.readouterr().out


def test_region_clone_refuses_edits_outside(base: Path, tmp_path: Path) -> None:
    from napari_shardscope.core.versioned.remotes.errors import RegionError
    from napari_shardscope.core.versioned.remotes.store import RemoteStore

    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", url)
    R.push(a)
    a.close()
    assert run(["clone", url, str(tmp_path / "b"), "--region", "0:8,0:8,0:8"]) == 0
    b = open_repository(tmp_path / "b")
    lm = open_labelmap(b, "seg")
    v = b.new_version("main")
    at = lm.at(v)
    supervoxels = at.read_supervoxels()
    inside = {int(s) for s in np.unique(supervoxels[:8, :8, :8])}
    outside = sorted({int(s) for s in np.unique(supervoxels)} - inside)
    assert len(outside) >= 2 and len(inside) >= 2
    before = at.read_bodies()
    with pytest.raises(RegionError, match="outside it"):
        at.merge(outside[0], [outside[1]])
    assert np.array_equal(at.read_bodies(), before)  # refused: nothing changed
    target, other = sorted(inside)[:2]
    at.merge(target, [other])  # inside: fine
    b.commit(v, "inside the region")
    R.push(b)
    refs, _ = RemoteStore(url).read_refs()
    assert refs is not None and refs.regions["main"] == [[0, 8], [0, 8], [0, 8]]
    b.close()


def test_partial_clone_of_some_instances(base: Path, tmp_path: Path) -> None:
    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    v = a.new_version("main")
    with a.write(v) as w:
        w.put("notes", b"more", b"text")
    a.commit(v, "a note")
    edit(a, "merge", np.random.default_rng(11))
    R.add_remote(a, "origin", url)
    R.push(a)
    b = open_repository(R.clone(url, tmp_path / "b", instances=["notes"])[0])
    assert [i.name for i in b.instances()] == ["notes"]
    with b.read("main") as view:
        assert view.get("notes", b"more") == b"text"
    assert b.verify() == []
    w2 = b.new_version("main")
    with b.write(w2) as w:
        w.put("notes", b"from b", b"partial")
    b.commit(w2, "b's note")
    R.push(b)
    assert R.pull(a).kind == "fast-forward"
    with a.read("main") as view:
        assert view.get("notes", b"from b") == b"partial"
    for x, y in zip(bodies_at(a, "main"), bodies_at(a, a.parents("main")[0]), strict=True):
        assert np.array_equal(x, y)  # the labelmap, which b never had, is untouched
    a.close()
    b.close()


def test_anonymous_clone_of_a_public_bucket(base: Path, s3: Any, tmp_path: Path) -> None:
    url = s3.url("public/repo")
    a = make_repo(tmp_path / "a", base)
    edit(a, "merge", np.random.default_rng(12))
    R.add_remote(a, "origin", url)
    R.push(a)
    assert run(["clone", url, str(tmp_path / "c"), "--anonymous"]) == 8  # private: refused, a storage error
    s3.make_public()
    assert run(["clone", url, str(tmp_path / "b"), "--anonymous", "--json"]) == 0
    b = open_repository(tmp_path / "b")
    assert same_node(a, b, a.head("main").uuid)
    store = open_remote(b, "origin")
    assert store.cas.location.kvstore["aws_credentials"] == {"type": "anonymous"}
    assert b.id_source() is None  # reading a public bucket reserves nothing there
    b.close()
    a.close()


def test_cli_pull_conflict_and_remote_check(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "remote")
    a = make_repo(tmp_path / "a", base)
    R.add_remote(a, "origin", url)
    R.push(a)
    b = open_repository(R.clone(url, tmp_path / "b")[0])
    bodies = sorted(int(s) for s in open_labelmap(a, "seg").index_summary().supervoxels)
    for repo, other in ((a, bodies[1]), (b, bodies[2])):
        v = repo.new_version("main")
        open_labelmap(repo, "seg").at(v).merge(bodies[0], [other])  # both edit body bodies[0]
        repo.commit(v, "edit")
    R.push(a)
    a.close()
    b.close()
    capsys.readouterr()
    assert run(["pull", str(tmp_path / "b"), "--json"]) == 7  # a conflict: nothing written
    doc = json.loads(capsys.readouterr().out)
    assert [c["key"] for c in doc["conflicts"]] == [f"body:{bodies[0]}"]
    assert run(["pull", str(tmp_path / "b"), "--resolve", f"body:{bodies[0]}=theirs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "merge"
    assert run(["push", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert run(["remote", "check", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["problems"] == [] and doc["versions"] == 4  # root, both edits, the merge
    with open_repository(tmp_path / "b") as b:
        (Path(url) / object_key(remote_versions(url)[b.head("main").uuid])).unlink()
    assert run(["remote", "check", url]) == 1
    assert "missing" in capsys.readouterr().out
