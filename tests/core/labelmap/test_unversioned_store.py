"""The store's unversioned area (shared by every version, writable when all are committed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned import Repository, UnknownInstanceError, create_repository, open_repository


@pytest.fixture(params=["memory", "lmdb", "sqlite"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Repository]:
    r = create_repository(None if request.param == "memory" else tmp_path / "repo", engine=request.param)
    yield r
    r.close()


def test_shared_by_every_version_and_writable_after_commit(repo: Repository) -> None:
    a = repo.create_instance("a", "keyvalue")
    b = repo.create_instance("b", "keyvalue")
    repo.commit(repo.root, "frozen")
    child = repo.new_version(repo.root)
    assert repo.put_unversioned(a, {b"k1": b"one", b"k2": b"two", b"z": b""}) == 3
    repo.put_unversioned("b", [(b"k1", b"other instance")])
    assert repo.get_unversioned(a, b"k1") == b"one"
    assert repo.get_unversioned("b", b"k1") == b"other instance"
    assert repo.get_unversioned(a, b"missing") is None
    assert repo.scan_unversioned(a, b"k") == [(b"k1", b"one"), (b"k2", b"two")]
    assert repo.scan_unversioned(a) == [(b"k1", b"one"), (b"k2", b"two"), (b"z", b"")]
    for v in (repo.root, child):
        with repo.read(v) as view:
            assert view.get_unversioned(a, b"k2") == b"two"
            assert list(view.scan_unversioned(b)) == [(b"k1", b"other instance")]
            assert list(view.keys(a)) == []  # no versioned key appeared
    with repo.read(child) as view:
        assert list(view.changes()) == []
    assert repo.verify() == []


def test_in_a_version_transaction(repo: Repository) -> None:
    a = repo.create_instance("a", "keyvalue")
    with repo.write(repo.root) as w:
        w.put(a, b"versioned", b"1")
        w.put_unversioned(a, b"shared", b"2")
        assert w.get_unversioned(a, b"shared") == b"2"
    assert repo.get_unversioned(a, b"shared") == b"2"
    with pytest.raises(RuntimeError), repo.write(repo.root) as w:
        w.put_unversioned(a, b"shared", b"3")
        raise RuntimeError("abort")
    assert repo.get_unversioned(a, b"shared") == b"2"  # rolled back with the transaction


def test_one_transaction_and_bad_input(repo: Repository) -> None:
    a = repo.create_instance("a", "keyvalue")
    with pytest.raises(ArgumentError, match="bytes"):
        repo.put_unversioned(a, [(b"ok", b"1"), (b"bad", "text")])  # type: ignore[list-item]
    assert repo.get_unversioned(a, b"ok") is None  # nothing of the failed batch was written
    with pytest.raises(ArgumentError, match="non-empty"):
        repo.put_unversioned(a, [(b"", b"1")])
    with pytest.raises(UnknownInstanceError):
        repo.get_unversioned("nope", b"k")


def test_persists(tmp_path: Path) -> None:
    with create_repository(tmp_path / "r") as repo:
        repo.put_unversioned(repo.create_instance("a", "keyvalue"), {b"k": b"v"})
    with open_repository(tmp_path / "r") as repo:
        assert repo.get_unversioned("a", b"k") == b"v"
        assert repo.verify() == []
