"""What a repository reads: opening, reading a version, ``log --limit`` and catching up with another
handle's write cost the same number of engine reads with 40 or 400 versions in the history.

Counted, not timed: the engine is wrapped so every key a transaction returns is counted (a get, each
item of a scan). Before format 2 opening read every version record, and a handle that saw another's
commit re-read all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import napari_shardscope.core.versioned.keys as K
import napari_shardscope.core.versioned.opening as opening_module
from napari_shardscope.core.versioned import Repository, create_repository, open_keyvalue, open_repository


class Counter:
    def __init__(self) -> None:
        self.keys = 0
        self.version_records = 0

    def saw(self, key: bytes) -> None:
        self.keys += 1
        if key.startswith(K.VERSION_PREFIX):
            self.version_records += 1


class CountingTxn:
    def __init__(self, txn: Any, counter: Counter) -> None:
        self._txn, self._c = txn, counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def get(self, key: bytes) -> bytes | None:
        self._c.saw(key)
        return self._txn.get(key)  # type: ignore[no-any-return]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        for k in keys:
            self._c.saw(k)
        return self._txn.get_many(keys)  # type: ignore[no-any-return]

    def scan(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self._txn.scan(lo, hi, reverse=reverse):
            self._c.saw(key)
            yield key, value

    def scan_keys(self, lo: bytes, hi: bytes | None, *, reverse: bool = False) -> Iterator[bytes]:
        for key in self._txn.scan_keys(lo, hi, reverse=reverse):
            self._c.saw(key)
            yield key

    def find_last(self, lo: bytes, hi: bytes, accept: Callable[[bytes], bool]) -> tuple[bytes, bytes] | None:
        def counted(key: bytes) -> bool:
            self._c.saw(key)
            return accept(key)
        return self._txn.find_last(lo, hi, counted)  # type: ignore[no-any-return]


class CountingEngine:
    def __init__(self, engine: Any, counter: Counter) -> None:
        self.engine, self._c = engine, counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    @contextmanager
    def read(self) -> Iterator[Any]:
        with self.engine.read() as txn:
            yield CountingTxn(txn, self._c)

    @contextmanager
    def write(self) -> Iterator[Any]:
        with self.engine.write() as txn:
            yield CountingTxn(txn, self._c)


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Every repository opened in the test counts what its engine returns."""
    c = Counter()
    real = opening_module.open_engine

    def counting_open_engine(*args: Any, **kwargs: Any) -> Any:
        return CountingEngine(real(*args, **kwargs), c)

    monkeypatch.setattr(opening_module, "open_engine", counting_open_engine)
    return c


def make_history(path: Path, n: int, engine: str) -> list[str]:
    """``n`` committed versions: a main line with a side branch every 10 versions (merged back), one key each."""
    uuids = []
    with create_repository(path, engine=engine) as repo:
        kv = open_keyvalue(repo, "kv", create=True)
        kv.put("main", "k", b"root")
        repo.commit("main", "root")
        for i in range(n - 1):
            if i % 10 == 5:
                side = repo.new_version(repo.head("main"), f"side{i}")
                repo.commit(side, f"side {i}")
                v = repo.merge("main", side.uuid, policy="ours").version
            else:
                v = repo.new_version("main")
            kv.put(v, "k", f"{i}".encode())
            uuids.append(repo.commit(v, f"v{i}").uuid)
    return uuids


def costs(path: Path, counter: Counter) -> dict[str, tuple[int, int]]:
    """(keys, version records) read by each step a user takes, on a repository at ``path``."""
    out = {}

    def step(name: str, fn: Callable[[], object]) -> object:
        before = (counter.keys, counter.version_records)
        got = fn()
        out[name] = (counter.keys - before[0], counter.version_records - before[1])
        return got

    repo: Repository = step("open", lambda: open_repository(path))  # type: ignore[assignment]
    other = open_repository(path)
    try:
        step("read head", lambda: open_keyvalue(repo, "kv").get("main", "k"))
        step("log 5", lambda: list(repo.log("main", limit=5)))
        step("log first-parent 5", lambda: list(repo.log("main", limit=5, first_parent=True)))
        step("branch head", lambda: repo.head("main"))
        step("prefix", lambda: repo.version(repo.head("main").uuid[:8]))
        child = other.new_version("main")  # another handle writes...
        other.commit(child, "elsewhere")
        step("catch up", lambda: repo.version("main"))  # ...and this one re-reads only what changed
    finally:
        other.close()
        repo.close()
    return out


@pytest.mark.parametrize("engine", ["lmdb", "sqlite"])
def test_costs_do_not_grow_with_the_history(tmp_path: Path, counter: Counter, engine: str) -> None:
    make_history(tmp_path / "small", 40, engine)
    make_history(tmp_path / "large", 400, engine)
    small, large = costs(tmp_path / "small", counter), costs(tmp_path / "large", counter)
    assert small == large, f"read counts grew with the history: {small} vs {large}"
    assert large["open"][1] <= 2 and large["log 5"][1] <= 5 and large["catch up"][1] <= 2, large
    assert all(keys < 60 for keys, _ in large.values()), large


def make_chain_with_merges(path: Path, n: int) -> None:
    """Two merge versions early in the history, then a chain of ``n`` versions on main."""
    with create_repository(path, engine="lmdb") as repo:
        kv = open_keyvalue(repo, "kv", create=True)
        kv.put("main", "k", b"root")
        repo.commit("main", "root")
        for i in range(2):
            side = repo.new_version(repo.head("main"), f"side{i}")
            kv.put(side, "s", f"{i}".encode())
            repo.commit(side, f"side {i}")
            repo.commit(repo.merge("main", side.uuid, policy="ours").version, f"merge {i}")
        with repo.batch() as b:
            v = b.version("main")
            for i in range(n):
                v = b.commit(b.new_version(v), f"v{i}")


def test_merges_in_a_lineage_cost_the_merges_not_the_history(tmp_path: Path, counter: Counter) -> None:
    """A labelmap checks the merges of the version it opens: that reads the merges' records, not every ancestor's."""
    found = {}
    for n in (40, 400):
        make_chain_with_merges(tmp_path / f"h{n}", n)
        with open_repository(tmp_path / f"h{n}") as repo:
            head = repo.head("main")
            want = [v.uuid for v in repo.ancestry(head) if len(v.parents) > 1]
            before = counter.version_records
            got = [v.uuid for v in repo.merges_in(head)]
            found[n] = counter.version_records - before
            assert got == want and len(got) == 2  # newest first, as ancestry orders them
            side = repo.head("side0")
            assert repo.merges_in(side) == []  # a side branch's lineage holds no merge
            assert [v.uuid for v in repo.merges_in(repo.parents(want[0])[0])] == want[1:]
    assert found[40] == found[400] <= 3, found


def test_an_ancestry_longer_than_the_version_cache_reads_only_what_the_cache_cannot_hold(
        tmp_path: Path, counter: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Walking a history longer than a handle's version cache used to evict each record before the next
    walk came back to it (an LRU read in the same order each time): every walk read the whole history.
    The walk reads what is not cached at once and keeps the newest, so a walk again reads the overflow."""
    import functools

    import napari_shardscope.core.versioned.handle as handle_module
    from napari_shardscope.core.versioned.dagcache import DagIndex

    cache = 64
    monkeypatch.setattr(handle_module, "DagIndex", functools.partial(DagIndex, versions=cache))
    make_chain_with_merges(tmp_path / "h", 120)
    with open_repository(tmp_path / "h") as repo:
        head = repo.head("main")
        first = [v.uuid for v in repo.ancestry(head)]
        history = len(first)
        assert history > cache + 40
        reads = []
        for v in (head, repo.parents(head)[0], head):
            before = counter.version_records
            assert [a.uuid for a in repo.ancestry(v)] == first[first.index(v.uuid):]
            reads.append(counter.version_records - before)
    assert all(r <= history - cache + 2 for r in reads), (reads, history)
