"""Unversioned data travels as content-addressed pages, and nothing re-reads it when it did not change (issue 28, 4).

* A push stores an instance's unversioned key-values as pages listed by a manifest (no single object of
  all of them); a clone gets exactly the same key-values.
* After a few keys change, a push uploads only the pages the remote lacks and a fetch downloads only the
  pages the local repository lacks (a handful, not all of them).
* A push or fetch with no unversioned change does not read the unversioned area at all (the local
  record of the pages it was synced as stands); a local write to it makes the next push read it again.
* A remote written before pages (one ``unversioned`` object per instance) still clones.
* Requests per push and per fetch of one new version do not grow with the history (moto S3, logged).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.remotes import pack as P
from napari_shardscope.core.versioned.remotes import pages as G
from napari_shardscope.core.versioned.remotes.store import RemoteInstance, RemoteStore
from napari_shardscope.core.versioned.remotes.verify import verify_remote
from tests.moto_s3 import S3Server, serve_moto

KEYS = 6000


def _value(i: int, salt: bytes = b"") -> bytes:
    return salt + i.to_bytes(4, "big") * 64  # 256 bytes: 6000 keys ≈ 1.6 MB, several pages at 64 KiB


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of ~64 KiB (1 MiB by default) so a test-sized area spans many."""
    monkeypatch.setattr(P, "PAGE_TARGET_BYTES", 64 << 10)
    monkeypatch.setattr(P, "PAGE_MIN_BYTES", 16 << 10)
    monkeypatch.setattr(P, "PAGE_MAX_BYTES", 256 << 10)


def _origin(path: Path, url: str) -> Repository:
    repo = create_repository(path)
    kv = repo.create_instance("index", "keyvalue")
    repo.put_unversioned(kv, {b"k%06d" % i: _value(i) for i in range(KEYS)})
    with repo.write(repo.root) as w:
        w.put(kv, b"about", b"root")
    repo.commit(repo.root, "root")
    R.add_remote(repo, "origin", url)
    return repo


def _commit(repo: Repository, text: bytes) -> None:
    v = repo.new_version(repo.head("main"))
    with repo.write(v) as w:
        w.put("index", b"about", text)
    repo.commit(v, text.decode())


def _count_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    original = Repository.scan_unversioned

    def counting(self: Repository, instance: Any, prefix: bytes = b"") -> list[tuple[bytes, bytes]]:
        seen.append(str(getattr(instance, "name", instance)))
        return original(self, instance, prefix)

    monkeypatch.setattr(Repository, "scan_unversioned", counting)
    return seen


def test_unversioned_data_travels_as_pages(small_pages: None, tmp_path: Path) -> None:
    url = str(tmp_path / "remote")
    a = _origin(tmp_path / "a", url)
    R.push(a)
    store = RemoteStore(url)
    refs, _ = store.require_refs()
    inst = refs.instances["index"]
    assert inst.unversioned is None and inst.pages is not None and inst.keys == KEYS
    pages = G.remote_pages(store, inst.pages)
    assert len(pages) >= 8 and sum(p.keys for p in pages) == KEYS
    path, _ = R.clone(url, tmp_path / "b")
    with open_repository(path) as b:
        assert b.scan_unversioned("index") == a.scan_unversioned("index")
    assert verify_remote(url) == []
    a.close()


def test_changed_keys_move_only_their_pages(small_pages: None, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url = str(tmp_path / "remote")
    a = _origin(tmp_path / "a", url)
    R.push(a)
    path, _ = R.clone(url, tmp_path / "b")
    total = len(G.remote_pages(RemoteStore(url), RemoteStore(url).require_refs()[0].instances["index"].pages or ""))
    # three new keys in one key range, and a new version to carry the push
    a.put_unversioned("index", {b"k003000x": b"new", b"k003001x": b"new", b"k003002x": b"new"})
    _commit(a, b"second")
    pushed = R.push(a)
    # the changed page(s), the manifest, the version's node and data objects: not the ~25 pages
    assert pushed.transfer.objects_sent <= 6, pushed.transfer
    assert pushed.transfer.objects_sent < total
    with open_repository(path) as b:
        fetched = R.fetch(b)
        assert fetched.transfer.objects_received <= 6, fetched.transfer
        assert b.scan_unversioned("index") == a.scan_unversioned("index")
        # nothing changed since: neither a fetch nor a push of a new version reads the unversioned area
        scans = _count_scans(monkeypatch)
        R.fetch(b)
        assert scans == []
    _commit(a, b"third")
    scans = _count_scans(monkeypatch)
    R.push(a)
    assert scans == []
    # a local write invalidates the record: the next push reads the area again and sends the change
    a.put_unversioned("index", {b"zzz": b"last"})
    _commit(a, b"fourth")
    R.push(a)
    assert scans == ["index"]
    with open_repository(path) as b:
        R.fetch(b)
        assert b.get_unversioned("index", b"zzz") == b"last"
    a.close()


def test_a_remote_with_one_unversioned_object_still_clones(tmp_path: Path) -> None:
    """Read compatibility: an instance record naming one object of all key-values (remotes before pages)."""
    url = str(tmp_path / "remote")
    a = _origin(tmp_path / "a", url)
    R.push(a)
    store = RemoteStore(url)
    refs, gen = store.require_refs()
    pairs = a.scan_unversioned("index")
    old = store.put_object(P.encode_pairs(pairs))
    inst = refs.instances["index"]
    legacy = RemoteInstance(inst.type, inst.config, old, len(pairs))
    assert "pages" not in legacy.to_json()
    assert store.swap_refs(refs.bumped("old-writer", instances={**refs.instances, "index": legacy}), gen)
    path, _ = R.clone(url, tmp_path / "b")
    with open_repository(path) as b:
        assert b.scan_unversioned("index") == pairs
        # and a push from it converts the record to pages (same keys, no longer one object)
        _commit(b, b"from b")
        R.push(b)
    now = RemoteStore(url).require_refs()[0].instances["index"]
    assert now.pages is not None and now.unversioned is None and now.keys == len(pairs)
    a.close()


def _one_new_version(tmp_path: Path, url: str, history: int, log: list[Any]) -> tuple[int, int]:
    """Requests of a push, then of a fetch into a clone, of one new version on top of ``history`` versions."""
    a = _origin(tmp_path / "a", url)
    for i in range(history):
        _commit(a, b"v%d" % i)
    R.push(a)
    path, _ = R.clone(url, tmp_path / "b")
    _commit(a, b"one more")
    before = len(log)
    R.push(a)
    push_requests = len(log) - before
    with open_repository(path) as b:
        before = len(log)
        R.fetch(b)
        fetch_requests = len(log) - before
    a.close()
    return push_requests, fetch_requests


def test_requests_per_push_and_fetch_do_not_grow_with_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str, str | None]] = []
    with serve_moto(log=log) as endpoint:
        server = S3Server(endpoint, "")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        bucket = server.new_bucket()
        short = _one_new_version(tmp_path / "short", f"s3://{bucket}/short", 2, log)
        long = _one_new_version(tmp_path / "long", f"s3://{bucket}/long", 20, log)
    assert short == long, (short, long)
