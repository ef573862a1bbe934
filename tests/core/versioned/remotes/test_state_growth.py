"""What a push or fetch writes to the remote state stays the size of what it changed (issue 28).

The remote state once was one JSON file holding, among the remote-tracking heads, every version
known to be on the remote (UUID → node object), rewritten whole by every push and fetch: one line
per version ever pushed, so a push of one version into a history of 10⁵ wrote megabytes. These
tests measure the bytes each push and fetch writes under ``remote-state/`` — a file replaced
counts whole, a file appended to counts its growth — and check that it stays flat as the history
grows; and that the record of objects survives a write killed at any byte (the old or the new
state, never a damaged one).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from napari_shardscope.core.versioned import Repository, create_repository, open_repository
from napari_shardscope.core.versioned import remotes as R
from napari_shardscope.core.versioned.errors import StoreCorruptError
from napari_shardscope.core.versioned.keyvalue import open_keyvalue
from napari_shardscope.core.versioned.remotes import config as C

PUSHES = 24


def snapshot(repo_path: Path) -> dict[str, bytes]:
    """File under ``remote-state/`` → its bytes, locks and fetch spools left out."""
    return {p.name: p.read_bytes() for p in sorted((repo_path / "remote-state").rglob("*"))
            if p.is_file() and p.suffix != ".lock" and ".incoming" not in p.parent.name}


def written(before: dict[str, bytes], after: dict[str, bytes]) -> int:
    """Bytes written between two snapshots, at least: a file that only grew (its old bytes a prefix of its
    new ones) its growth, any other changed file whole (an atomic replace writes all of it)."""
    total = 0
    for name, data in after.items():
        old = before.get(name)
        if old == data:
            continue
        total += len(data) - len(old) if old is not None and data.startswith(old) else len(data)
    return total


def commit(repo: Repository, value: bytes) -> str:
    head = repo.head("main")
    v = repo.new_version(head) if head.locked else head
    open_keyvalue(repo, "kv").put(v, "k", value)
    return repo.commit(v, value.decode()).uuid


def make(tmp_path: Path) -> tuple[Repository, str]:
    url = str(tmp_path / "remote")
    a = create_repository(tmp_path / "a")
    open_keyvalue(a, "kv", create=True)
    a.commit(a.root, "base")
    R.add_remote(a, "origin", url)
    return a, url


def assert_flat(sizes: list[int], what: str) -> None:
    # one version more per step: what is written may not grow with the number of versions before it
    early = max(sizes[1:4])
    assert max(sizes[-4:]) <= early + 64, f"{what} wrote {sizes} bytes to the remote state: it grows with history"


def test_bytes_written_per_push_and_fetch_stay_flat_as_history_grows(tmp_path: Path) -> None:
    a, url = make(tmp_path)
    commit(a, b"v0")
    R.push(a, "origin", "main")
    b = open_repository(R.clone(url, tmp_path / "b")[0])
    pushes: list[int] = []
    fetches: list[int] = []
    for i in range(PUSHES):
        commit(a, f"v{i + 1}".encode())
        before = snapshot(a.path)
        result = R.push(a, "origin", "main")
        pushes.append(written(before, snapshot(a.path)))
        assert len(result.sent) == 1
        before = snapshot(b.path)
        fetched = R.fetch(b, "origin")
        fetches.append(written(before, snapshot(b.path)))
        assert len(fetched.adopted) == 1
    assert_flat(pushes, "a push")
    assert_flat(fetches, "a fetch")
    # and the record still says what it said: every version pushed is known, status agrees
    state = C.load_state(a, "origin")
    assert {v.uuid for v in a.versions()} <= set(state.objects)
    assert [(s.branch, s.ahead, s.behind) for s in R.status(a, "origin")] == [("main", 0, 0)]
    assert set(C.load_state(b, "origin").objects) == set(state.objects)
    a.close()
    b.close()


def test_a_write_killed_at_any_byte_leaves_the_old_or_the_new_record(tmp_path: Path) -> None:
    a, _ = make(tmp_path)
    commit(a, b"one")
    R.push(a, "origin", "main")
    old = dict(C.load_state(a, "origin").objects)
    record = sorted(p for p in (a.path / "remote-state").iterdir() if p.is_file() and p.suffix == ".objects")
    assert len(record) == 1, "the objects record is a file of its own, appended to"
    path = record[0]
    kept = path.read_bytes()
    commit(a, b"two")
    R.push(a, "origin", "main")
    new = dict(C.load_state(a, "origin").objects)
    grown = path.read_bytes()
    assert grown.startswith(kept) and len(new) == len(old) + 1
    for cut in range(len(kept), len(grown)):  # a kill -9 mid-append leaves any prefix of the new frame
        path.write_bytes(grown[:cut])
        assert dict(C.load_state(a, "origin").objects) == old, cut
    # the next write after a torn one cuts the torn bytes off first: the record reads whole again
    path.write_bytes(grown[:len(kept) + 3])
    commit(a, b"three")
    R.push(a, "origin", "main")
    after = dict(C.load_state(a, "origin").objects)
    assert set(new) <= set(after) and len(after) == len(new) + 1
    assert R.status(a, "origin")[0].ahead == 0
    a.close()


def test_damage_inside_the_record_is_a_typed_error_naming_file_and_offset(tmp_path: Path) -> None:
    a, _ = make(tmp_path)
    for i in range(3):
        commit(a, f"v{i}".encode())
        R.push(a, "origin", "main")
    path = next(p for p in (a.path / "remote-state").iterdir() if p.suffix == ".objects")
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # inside the first frame's payload, with whole frames after it
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=r"\.objects.*offset 0"):
        C.load_state(a, "origin")
    a.close()


def test_a_state_written_by_an_older_version_is_read_and_moved_to_the_record(tmp_path: Path) -> None:
    a, _ = make(tmp_path)
    commit(a, b"one")
    R.push(a, "origin", "main")
    state = C.load_state(a, "origin")
    legacy = {"tracking": {b: r.to_json() for b, r in state.tracking.items()},
              "objects": dict(state.objects), "cas_checked": True}
    for p in (a.path / "remote-state").iterdir():
        if p.suffix == ".objects":
            p.unlink()
    (a.path / "remote-state" / "origin.json").write_text(json.dumps(legacy))
    assert dict(C.load_state(a, "origin").objects) == legacy["objects"]
    assert R.status(a, "origin")[0].ahead == 0
    commit(a, b"two")
    assert len(R.push(a, "origin", "main").sent) == 1  # the legacy record still spares the rest
    doc = json.loads((a.path / "remote-state" / "origin.json").read_text())
    assert "objects" not in doc and set(legacy["objects"]) < set(C.load_state(a, "origin").objects)
    assert os.path.getsize(a.path / "remote-state" / "origin.json") < 400
    R.remove_remote(a, "origin")
    assert not any(p.is_file() and not p.name.endswith(".lock") for p in (a.path / "remote-state").iterdir())
    a.close()


def test_a_mostly_superseded_record_is_rewritten_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from napari_shardscope.core.versioned.remotes import object_record as O

    monkeypatch.setattr(O, "COMPACT_SLACK", 4)
    path = tmp_path / "origin.objects"
    sizes = []
    for i in range(40):  # two versions, re-recorded under a new object each time (an append each)
        record = O.ObjectRecord.load(path)
        record["a" * 32] = f"{i:064x}"
        record["b" * 32] = f"{i + 1:064x}"
        if i == 39:
            del record["b" * 32]
        record.save()
        sizes.append(path.stat().st_size)
    assert dict(O.ObjectRecord.load(path)) == {"a" * 32: f"{39:064x}"}
    assert max(sizes) <= 3 * sizes[0] + 4 * 100, sizes  # bounded by the live entries, not by the saves
