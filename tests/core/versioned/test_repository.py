"""Rules of the version DAG, typed errors (with the store left unchanged), and the repository API."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from napari_shardscope.core.errors import ArgumentError, NotADatasetError, ShardscopeError, VersionError
from napari_shardscope.core.versioned import (
    AmbiguousVersionError,
    BranchExistsError,
    CommittedVersionError,
    InstanceExistsError,
    LockTimeoutError,
    MergeConflictError,
    NestedTransactionError,
    NotARepositoryError,
    Repository,
    StoreCorruptError,
    UncommittedVersionError,
    UnknownBranchError,
    UnknownInstanceError,
    UnknownVersionError,
    create_repository,
    open_keyvalue,
    open_repository,
)


@pytest.fixture(params=["memory", "lmdb", "sqlite"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repository]:
    path = None if request.param == "memory" else tmp_path / "repo"
    r = create_repository(path, engine=request.param)
    yield r
    r.close()


def snapshot(repo: Repository) -> list[object]:
    """Everything observable about a repository, to check that a refused operation changed nothing."""
    out: list[object] = [repo.versions(), repo.branches(), repo.instances()]
    for v in repo.versions():
        out.append(repo.notes(v))
        with repo.read(v) as view:
            for inst in repo.instances():
                out.append(list(view.scan(inst)))
    return out


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and p.name != "lock.mdb"}


def test_root_and_basic_flow(repo: Repository) -> None:
    root = repo.root
    assert root.branch == "main" and not root.locked and root.parents == ()
    assert len(root.uuid) == 32 and int(root.uuid, 16) >= 0
    kv = open_keyvalue(repo, "notes", create=True)
    kv.put(root, "k", b"root")
    done = repo.commit(root, "ingest")
    assert done.locked and done.message == "ingest" and done.committed is not None
    child = repo.new_version(root)
    assert child.branch == "main" and child.parents == (root.uuid,)
    assert repo.version("main") == child and repo.head("main") == child
    assert kv.get(child, "k") == b"root"
    kv.put(child, "k", b"child")
    assert kv.get(root, "k") == b"root" and kv.get(child, "k") == b"child"
    assert repo.ancestry(child) == [child, repo.version(root)]
    assert repo.children(root) == [child] and repo.parents(child) == [repo.version(root)]
    assert repo.verify() == []


def test_writes_to_committed_versions_are_refused(repo: Repository) -> None:
    kv = open_keyvalue(repo, "kv", create=True)
    kv.put("main", "a", b"1")
    repo.commit("main", "c")
    before = snapshot(repo)
    with pytest.raises(CommittedVersionError, match="committed"):
        kv.put("main", "a", b"2")
    with pytest.raises(CommittedVersionError):
        kv.delete("main", "a")
    with pytest.raises(CommittedVersionError):
        repo.commit("main", "again")
    with pytest.raises(CommittedVersionError), repo.write(repo.root) as w:
        w.append_log("kv", b"x")
    with pytest.raises(CommittedVersionError):
        repo.checkout("main", write=True)
    assert isinstance(CommittedVersionError("x"), VersionError)
    assert snapshot(repo) == before


def test_unknown_and_ambiguous_versions(repo: Repository) -> None:
    repo.commit(repo.root, "r")
    for _ in range(20):
        repo.commit(repo.new_version("main"), "next")
    with pytest.raises(UnknownVersionError, match="nope"):
        repo.version("nope")
    missing = next(c for c in "0123456789abcdef" * 2
                   if not any(v.uuid.startswith(c * 6) for v in repo.versions())) * 6
    with pytest.raises(UnknownVersionError, match=missing):
        repo.version(missing)
    firsts = [v.uuid[0] for v in repo.versions()]
    shared = next(c for c in firsts if firsts.count(c) > 1)  # 21 versions, 16 hex digits
    with pytest.raises(AmbiguousVersionError, match="several"):
        repo.version(shared)
    for v in repo.versions():  # every full UUID and every unique short prefix resolves
        assert repo.version(v.uuid) == v and repo.version(v.uuid[:12].upper()) == v
    with pytest.raises(UnknownBranchError, match="nobranch"):
        repo.head("nobranch")
    with pytest.raises(LookupError):
        repo.version("nope")


def test_branch_rules(repo: Repository) -> None:
    root = repo.root
    with pytest.raises(UncommittedVersionError, match="commit it"):
        repo.new_version(root)
    repo.commit(root, "r")
    repo.new_version(root)
    trial = repo.new_version(root, "trial")
    assert trial.branch == "trial"
    before = snapshot(repo)
    with pytest.raises(BranchExistsError, match="continuing"):
        repo.new_version(root)
    with pytest.raises(BranchExistsError, match="trial"):
        repo.new_version(root, "trial")
    with pytest.raises(BranchExistsError, match="main"):
        repo.new_version(root, "main")
    for bad in ["", "has space", "-dash", "x" * 200, "tab\t"]:
        with pytest.raises(ArgumentError):
            repo.new_version(root, bad)
    assert snapshot(repo) == before
    assert {b.name: b.head for b in repo.branches()} == {"main": repo.head("main").uuid, "trial": trial.uuid}


def test_checkout_modes(repo: Repository) -> None:
    kv = open_keyvalue(repo, "kv", create=True)
    co = repo.checkout("main", write=True)
    co.put("kv", b"a", b"1")
    assert co.get("kv", b"a") == b"1" and co.delete("kv", b"a") and co.get("kv", b"a") is None
    co.put("kv", b"b", b"2")
    done = co.commit("first")
    assert done.locked and not co.writable
    with pytest.raises(CommittedVersionError):
        co.put("kv", b"c", b"3")
    ro = repo.checkout(done.uuid[:6])
    assert ro.scan("kv") == [(b"b", b"2")] and ro.get_many("kv", [b"a", b"b"]) == [None, b"2"]
    assert kv.keys(done) == ["b"]


def test_notes_logs_and_changes(repo: Repository) -> None:
    inst = repo.create_instance("seg", "keyvalue")
    root = repo.root
    with repo.write(root) as w:
        assert [w.append_log(inst, b"r%d" % i) for i in range(3)] == [0, 1, 2]
        w.put(inst, b"x", b"1")
        w.put(inst, b"y", b"1")
    repo.add_note(root, "first note")
    repo.commit(root, "r")
    repo.add_note(root, "after commit: notes change no data")
    a = repo.new_version(root, "a")
    b = repo.new_version(root, "b")
    with repo.write(a) as w:
        w.append_log(inst, b"a0")
        w.delete(inst, b"x")
        w.put(inst, b"z", b"2")
    with repo.write(b) as w:
        w.append_log(inst, b"b0")
    assert [n.text for n in repo.notes(root)] == ["first note", "after commit: notes change no data"]
    with repo.read(a) as view:
        assert [e.data for e in view.read_log(inst)] == [b"r0", b"r1", b"r2", b"a0"]
        assert [e.data for e in view.read_log(inst, own=True)] == [b"a0"]
        assert {(c.key, c.deleted) for c in view.changes()} == {(b"x", True), (b"z", False)}
    with repo.read(root) as view:
        assert [(e.version, e.seq) for e in view.read_log(inst)] == [(root.uuid, i) for i in range(3)]


def test_delete_without_ancestor_value_leaves_no_tombstone(repo: Repository) -> None:
    inst = repo.create_instance("kv", "keyvalue")
    with repo.write(repo.root) as w:
        w.put(inst, b"k", b"v")
        assert w.delete(inst, b"k") is True
        assert w.delete(inst, b"k") is False
        assert w.delete(inst, b"never") is False
    with repo.read(repo.root) as view:
        assert list(view.changes()) == []
    assert repo.verify() == []


def test_instances(repo: Repository) -> None:
    repo.create_instance("kv", "keyvalue", {"purpose": "bookmarks"})
    assert repo.instance("kv").config == {"purpose": "bookmarks"}
    with pytest.raises(InstanceExistsError):
        repo.create_instance("kv", "keyvalue")
    with pytest.raises(UnknownInstanceError, match="nope"):
        repo.instance("nope")
    with pytest.raises(ArgumentError, match="type"):
        repo.create_instance("x", "nonsense")
    with pytest.raises(ArgumentError):
        repo.create_instance("bad name", "keyvalue")
    with pytest.raises(UnknownInstanceError):
        open_keyvalue(repo, "other")
    with pytest.raises(ArgumentError):
        open_keyvalue(repo, "kv").put("main", "", b"x")


def test_merge_policies_and_conflicts(repo: Repository) -> None:
    kv = open_keyvalue(repo, "kv", create=True)
    kv.put_many("main", {"same": b"0", "both": b"0", "ours": b"0", "theirs": b"0", "gone": b"0"})
    repo.commit("main", "base")
    o = repo.new_version("main", "o")
    t = repo.new_version("main", "t")
    kv.put_many(o, {"both": b"o", "ours": b"o"})
    kv.put_many(t, {"both": b"t", "theirs": b"t", "new": b"t"})
    kv.delete(t, "gone")
    repo.commit(o, "o")
    repo.commit(t, "t")
    before = snapshot(repo)
    with pytest.raises(MergeConflictError, match="both") as info:
        repo.merge(o, t)
    assert [(c.instance, c.key) for c in info.value.conflicts] == [("kv", b"both")]
    assert snapshot(repo) == before
    result = repo.merge(o, t, policy="ours")
    assert result.base == repo.root.uuid and result.version.branch == "o"
    assert result.version.parents == (o.uuid, t.uuid) and not result.version.locked
    assert dict(kv.items(result.version)) == {"same": b"0", "both": b"o", "ours": b"o", "theirs": b"t", "new": b"t"}
    theirs = repo.merge(o, t, policy="theirs", branch="m2")
    assert kv.get(theirs.version, "both") == b"t" and theirs.version.branch == "m2"
    assert "merge of" in repo.notes(result.version)[0].text
    with pytest.raises(ArgumentError):
        repo.merge(o, o)
    with pytest.raises(UncommittedVersionError):
        repo.merge(o, theirs.version, branch="m3")
    with pytest.raises(ArgumentError, match="policy"):
        repo.merge(o, t, policy="both", branch="m4")  # type: ignore[arg-type]
    assert repo.verify() == []


def test_merge_takes_theirs_when_ours_restored_the_base_value(repo: Repository) -> None:
    """Ours rewrote a key to its base value *after* theirs changed it: theirs must win.

    This is the case where "largest ancestor id wins" alone would be wrong; the merge version
    must store the key explicitly.
    """
    kv = open_keyvalue(repo, "kv", create=True)
    kv.put("main", "k", b"base")
    repo.commit("main", "base")
    t = repo.new_version("main", "t")
    kv.put(t, "k", b"theirs")
    repo.commit(t, "t")
    o = repo.new_version("main", "o")  # created after t: larger id
    kv.put(o, "k", b"base")
    repo.commit(o, "o")
    result = repo.merge(o, t)
    assert result.conflicts == ()
    assert kv.get(result.version, "k") == b"theirs"
    back = repo.merge(t, o, branch="back")
    assert kv.get(back.version, "k") == b"theirs"


def test_nested_write_is_an_error(repo: Repository) -> None:
    inst = repo.create_instance("kv", "keyvalue")
    with pytest.raises(NestedTransactionError), repo.write("main") as w:
        w.put(inst, b"a", b"1")
        with repo.write("main"):
            pass
    assert open_keyvalue(repo, "kv").get("main", "a") is None  # the outer transaction rolled back


def test_second_writer_times_out_with_a_clear_error(tmp_path: Path) -> None:
    first = create_repository(tmp_path / "r")
    second = open_repository(tmp_path / "r", lock_timeout=0.2)
    inst = first.create_instance("kv", "keyvalue")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with first.write("main") as w:
            w.put(inst, b"a", b"1")
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        with pytest.raises(LockTimeoutError, match="write lock"), second.write("main") as w:
            w.put(inst, b"b", b"2")
    finally:
        release.set()
        thread.join()
    assert open_keyvalue(second, "kv").get("main", "a") == b"1"  # the first writer's data arrived
    with second.write("main") as w:  # and the lock is free again
        w.put(inst, b"b", b"2")
    assert open_keyvalue(first, "kv").keys("main") == ["a", "b"]
    first.close()
    second.close()


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_reopen_and_two_handles_stay_in_sync(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "r"
    with create_repository(path, engine=engine) as a, open_repository(path) as b:
        kv = open_keyvalue(a, "kv", create=True)
        kv.put("main", "x", b"1")
        a.commit("main", "one")
        v = b.new_version("main", "side")  # b sees a's instance and commit
        open_keyvalue(b, "kv").put(v, "x", b"2")
        assert kv.get("side", "x") == b"2"  # a sees b's branch
        expected = snapshot(a)
    with open_repository(path) as again:
        assert again.engine == engine
        assert snapshot(again) == expected
        assert again.verify() == []


def test_create_refuses_non_empty_directories(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(ArgumentError, match="not an empty directory"):
        create_repository(tmp_path / "busy")
    with pytest.raises(ArgumentError):
        create_repository(tmp_path / "x", engine="rocksdb")


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_corrupt_and_foreign_files_are_refused_unchanged(tmp_path: Path, engine: str) -> None:
    png = tmp_path / "image.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    foreign_dir = tmp_path / "foreign"
    foreign_dir.mkdir()
    (foreign_dir / "data.mdb").write_bytes(b"hello")
    for target, error in [(png, NotARepositoryError), (foreign_dir, NotARepositoryError),
                          (tmp_path / "missing", NotARepositoryError)]:
        before = png.read_bytes(), tree_digest(foreign_dir)
        with pytest.raises(error):
            open_repository(target)
        assert (png.read_bytes(), tree_digest(foreign_dir)) == before
    assert issubclass(NotARepositoryError, NotADatasetError)

    path = tmp_path / "repo"
    with create_repository(path, engine=engine) as repo:
        open_keyvalue(repo, "kv", create=True).put("main", "k", b"v")
    data_file = path / ("data.mdb" if engine == "lmdb" else "store.sqlite")
    good = data_file.read_bytes()
    for bad in [b"", b"garbage" * 3000, bytes(len(good))]:
        data_file.write_bytes(bad)
        before = tree_digest(path)
        with pytest.raises(StoreCorruptError):
            open_repository(path)
        assert tree_digest(path) == before
    data_file.write_bytes(good)
    marker = path / "shardscope-repository.json"
    marker_text = marker.read_text()
    marker.write_text("{not json")
    with pytest.raises(StoreCorruptError, match="marker"):
        open_repository(path)
    marker.write_text(marker_text.replace('"root": "', '"root": "0'))
    with pytest.raises(StoreCorruptError, match="another repository"):
        open_repository(path)
    marker.write_text(marker_text)
    with open_repository(path) as repo:  # intact again
        assert open_keyvalue(repo, "kv").get("main", "k") == b"v"


def test_foreign_lmdb_environment_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    create_repository(path).close()
    marker = (path / "shardscope-repository.json").read_text()
    other = tmp_path / "other"
    env = lmdb.open(str(other), map_size=2**20)
    with env.begin(write=True) as txn:
        txn.put(b"somebody", b"else")
    env.close()
    (other / "shardscope-repository.json").write_text(marker)
    before = tree_digest(other)
    with pytest.raises(StoreCorruptError) as info:
        open_repository(other)
    assert isinstance(info.value, ShardscopeError)
    assert tree_digest(other) == before


def test_labelmap_like_workload(repo: Repository) -> None:
    """28 KB blocks in batches, a 1,000-key scan at a child that overrides some of them."""
    repo.create_instance("seg", "keyvalue")
    block = bytes(range(256)) * 112
    with repo.write("main") as w:
        assert w.put_many("seg", ((b"blk%06d" % i, block[:100] + b"%06d" % i) for i in range(1000))) == 1000
    repo.commit("main", "ingest")
    child = repo.new_version("main")
    with repo.write(child) as w:
        for i in range(0, 1000, 7):
            w.put("seg", b"blk%06d" % i, block)
        w.delete("seg", b"blk000001")
    with repo.read(child) as view:
        items = list(view.scan("seg"))
        assert len(items) == 999
        for key, value in items:
            i = int(key[3:])
            assert value == (block if i % 7 == 0 else block[:100] + b"%06d" % i)
        assert view.get_many("seg", [b"blk000001", b"blk000007"]) == [None, block]
    with repo.read(repo.root) as view:  # "main" now names the child, the branch's head
        assert sum(1 for _ in view.keys("seg")) == 1000


def test_id_counters_never_collide_across_branches(repo: Repository) -> None:
    repo.commit(repo.root, "r")
    a = repo.new_version(repo.root, "a")
    b = repo.new_version(repo.root, "b")
    with repo.write(a) as w:
        first = w.allocate_ids("label", 3, minimum=1000)
    with repo.write(b) as w:
        second = w.allocate_ids("label", 2)
    assert list(first) == [1000, 1001, 1002] and list(second) == [1003, 1004]
    assert repo.allocate_ids("label") == range(1005, 1006)
    assert repo.allocate_ids("other") == range(1, 2)
    with pytest.raises(ArgumentError):
        repo.allocate_ids("label", 0)
    with pytest.raises(ValueError), repo.write(a) as w:  # a failed transaction reserves nothing
        w.allocate_ids("label", 10)
        raise ValueError("boom")
    assert repo.allocate_ids("label") == range(1006, 1007)
    assert repo.verify() == []


def test_recreated_repository_never_reuses_the_deleted_ones_environment(tmp_path: Path) -> None:
    # Issue 14: LMDB environments were cached by path, so a repository deleted and created again at
    # the same path in one process (while a handle on the old one was still open) wrote into the
    # deleted file's environment, and its committed version was gone when the repository reopened.
    import shutil

    path = tmp_path / "r"
    old = create_repository(path, engine="lmdb")
    shutil.rmtree(path)
    new = create_repository(path, engine="lmdb")
    new.create_instance("kv", "keyvalue")
    with new.write("main") as w:
        w.put("kv", b"k", b"v")
    committed = new.commit("main", "after re-creation")
    new.close()
    old.close()
    again = open_repository(path)
    try:
        assert again.version(committed.uuid).committed
        with again.read(committed.uuid) as view:
            assert view.get("kv", b"k") == b"v"
    finally:
        again.close()


def test_a_refused_keyvalue_write_creates_no_instance(repo: Repository) -> None:
    # The committed version refuses the write before the instance is created, not after.
    repo.commit("main", "c")
    before = snapshot(repo)
    with pytest.raises(CommittedVersionError):
        open_keyvalue(repo, "fresh", create=True, write_at="main")
    assert snapshot(repo) == before
    open_keyvalue(repo, "fresh", create=True)  # creating alone (no version named) still works


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_verify_finds_a_change_index_out_of_step_with_the_data(tmp_path: Path, engine: str) -> None:
    """``verify`` compares the data keys and the change index one by one (it keeps no set of either, so a
    store of 10⁷ keys is checked in flat memory): a missing change entry, a stray one, and a version holding
    both a value and a tombstone of one key are each reported."""
    import napari_shardscope.core.versioned.keys as K
    from napari_shardscope.core.versioned.engines import open_engine
    from tests.core.versioned.format1 import engine_of

    path = tmp_path / "repo"
    with create_repository(path, engine=engine) as repo:
        kv = open_keyvalue(repo, "kv", create=True)
        for i in range(50):
            kv.put("main", f"k{i}", b"v")
        vid, iid = repo.version("main").vid, kv.instance.iid
        assert repo.verify() == []
    stem = K.key_stem(iid, b"k7")
    for damage, want in ((lambda t: t.delete(K.change_key(vid, stem)), "0 extra, 1 missing"),
                         (lambda t: t.put(K.change_key(vid, K.key_stem(iid, b"nothing")), b""), "1 extra, 1 missing"),
                         (lambda t: t.put(K.entry_key(stem, vid, True), b""), "both a value and a tombstone")):
        store = open_engine(engine_of(path), path, create=False, durable=True)
        try:
            with store.write() as txn:
                damage(txn)
        finally:
            store.close()
        with open_repository(path) as repo:
            assert any(want in p for p in repo.verify()), (want, repo.verify())
