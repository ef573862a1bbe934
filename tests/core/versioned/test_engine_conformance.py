"""One conformance suite every ordered key-value engine must pass (memory, LMDB, SQLite).

The repository relies on exactly these behaviours: byte order, half-open ranges in both
directions, reads of one's own writes inside a write transaction, snapshot reads, all-or-nothing
commits, and durability across reopening.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.engines import ENGINE_NAMES, ENGINES, OrderedKV, open_engine

KEYS = [b"\x00", b"\x00\x00", b"\x00\xff", b"a", b"a\x00", b"a\x01", b"ab", b"b", b"\xff", b"\xff\xff"]


class Boom(Exception):
    pass


@pytest.fixture(params=ENGINE_NAMES)  # every registered engine
def engine_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    yield request.param, tmp_path


def make(name: str, tmp: Path, *, create: bool = True) -> OrderedKV:
    return open_engine(name, tmp, create=create)


@pytest.fixture
def kv(engine_factory: tuple[str, Path]) -> Iterator[OrderedKV]:
    engine = make(*engine_factory)
    yield engine
    engine.close()


def fill(kv: OrderedKV, keys: list[bytes] = KEYS) -> None:
    with kv.write() as txn:
        for i, k in enumerate(keys):
            txn.put(k, b"v%d" % i)


class TestEngineConformance:
    def test_get_put_delete(self, kv: OrderedKV) -> None:
        with kv.write() as txn:
            txn.put(b"k", b"1")
            assert txn.get(b"k") == b"1"
            txn.put(b"k", b"2")
            txn.put(b"empty", b"")
        with kv.read() as r:
            assert r.get(b"k") == b"2"
            assert r.get(b"empty") == b""
            assert r.get(b"missing") is None
        with kv.write() as txn:
            assert txn.delete(b"k") is True
            assert txn.delete(b"k") is False
            assert txn.get(b"k") is None
        with kv.read() as r:
            assert r.get(b"k") is None

    def test_put_many_is_put_per_pair_and_refuses_bad_pairs_whole(self, kv: OrderedKV) -> None:
        from napari_shardscope.core.errors import ArgumentError

        with kv.write() as txn:
            txn.put(b"b", b"old")
            txn.put_many([(b"c", b"3"), (b"a", b"1"), (b"b", b"2"), (b"\x00z", b"")])
            assert txn.get(b"b") == b"2"
        with kv.read() as r:
            assert list(r.scan(b"\x00", None)) == [(b"\x00z", b""), (b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
        for bad in ([(b"d", b"4"), (b"", b"x")], [(b"d", b"4"), ("e", b"5")], [(b"d", b"4"), (b"e", "5")]):
            with pytest.raises(ArgumentError), kv.write() as txn:
                txn.put_many(bad)  # type: ignore[arg-type]
            with kv.read() as r:
                assert r.get(b"d") is None  # checked before anything is written; the transaction rolled back

    def test_large_values(self, kv: OrderedKV) -> None:
        big = bytes(range(256)) * 112  # 28 KB, a compressed 64^3 label block
        with kv.write() as txn:
            for i in range(20):
                txn.put(b"blk%03d" % i, big[i:] + big[:i])
        with kv.read() as r:
            assert all(r.get(b"blk%03d" % i) == big[i:] + big[:i] for i in range(20))
            assert [k for k, _ in r.scan(b"blk", b"blm")] == [b"blk%03d" % i for i in range(20)]

    def test_byte_order_and_ranges(self, kv: OrderedKV) -> None:
        fill(kv, list(reversed(KEYS)))
        ordered = sorted(KEYS)
        with kv.read() as r:
            assert list(r.scan_keys(b"\x00", None)) == ordered
            assert list(r.scan_keys(b"\x00", None, reverse=True)) == ordered[::-1]
            assert list(r.scan_keys(b"a", b"b")) == [b"a", b"a\x00", b"a\x01", b"ab"]
            assert list(r.scan_keys(b"a", b"b", reverse=True)) == [b"ab", b"a\x01", b"a\x00", b"a"]
            assert list(r.scan_keys(b"a\x00", b"a\x01")) == [b"a\x00"]
            assert list(r.scan_keys(b"c", b"d")) == []
            assert list(r.scan_keys(b"c", b"d", reverse=True)) == []
            assert list(r.scan_keys(b"\xff\xff\xff", None, reverse=True)) == []
            assert list(r.scan_keys(b"\xff", None, reverse=True)) == [b"\xff\xff", b"\xff"]
            pairs = list(r.scan(b"a", b"ab"))
            assert [k for k, _ in pairs] == [b"a", b"a\x00", b"a\x01"]
            assert all(v == r.get(k) for k, v in pairs)
            assert list(r.scan(b"a", b"ab", reverse=True)) == pairs[::-1]
            assert r.get_many([b"b", b"nope", b"a"]) == [r.get(b"b"), None, r.get(b"a")]
            assert r.get_many([]) == []

    def test_write_sees_own_writes_in_scans(self, kv: OrderedKV) -> None:
        fill(kv)
        with kv.write() as txn:
            txn.delete(b"a\x00")
            txn.put(b"aa", b"new")
            assert list(txn.scan_keys(b"a", b"b")) == [b"a", b"a\x01", b"aa", b"ab"]
            assert list(txn.scan_keys(b"a", b"b", reverse=True)) == [b"ab", b"aa", b"a\x01", b"a"]
            assert txn.get_many([b"aa", b"a\x00"]) == [b"new", None]

    def test_exception_rolls_back_everything(self, kv: OrderedKV) -> None:
        fill(kv)
        with pytest.raises(Boom), kv.write() as txn:
            txn.put(b"a", b"changed")
            txn.delete(b"b")
            txn.put(b"zz", b"added")
            raise Boom
        with kv.read() as r:
            assert r.get(b"a") == b"v3"
            assert r.get(b"b") == b"v7"
            assert r.get(b"zz") is None
        with kv.write() as txn:  # the engine is usable after a rollback
            txn.put(b"zz", b"ok")
        with kv.read() as r:
            assert r.get(b"zz") == b"ok"

    def test_snapshot_isolation(self, kv: OrderedKV) -> None:
        fill(kv)
        with kv.read() as before:
            assert before.get(b"a") == b"v3"
            with kv.write() as txn:
                txn.put(b"a", b"later")
                txn.put(b"new", b"x")
            assert before.get(b"a") == b"v3"
            assert before.get(b"new") is None
            assert b"new" not in list(before.scan_keys(b"\x00", None))
        with kv.read() as after:
            assert after.get(b"a") == b"later"

    def test_bad_arguments(self, kv: OrderedKV) -> None:
        with kv.write() as txn:
            with pytest.raises(ArgumentError):
                txn.put(b"", b"x")
            with pytest.raises(ArgumentError):
                txn.put("str", b"x")  # type: ignore[arg-type]
        with kv.read() as r, pytest.raises(ArgumentError):
            list(r.scan_keys("a", None))  # type: ignore[arg-type]

    def test_reopen_keeps_data(self, engine_factory: tuple[str, Path]) -> None:
        name, tmp = engine_factory
        if not ENGINES[name].keeps_files:
            pytest.skip(f"the {name} engine keeps nothing")
        kv = make(name, tmp)
        fill(kv)
        kv.close()
        kv = make(name, tmp, create=False)
        with kv.read() as r:
            assert list(r.scan_keys(b"\x00", None)) == sorted(KEYS)
        kv.close()

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops=st.lists(st.tuples(st.binary(min_size=1, max_size=3), st.none() | st.binary(max_size=3)), max_size=30),
           lo=st.binary(max_size=2), hi=st.none() | st.binary(max_size=2))
    def test_matches_a_dict(self, kv: OrderedKV, ops: list[tuple[bytes, bytes | None]], lo: bytes,
                            hi: bytes | None) -> None:
        with kv.write() as txn:
            for k in list(txn.scan_keys(b"", None)):
                txn.delete(k)
        model: dict[bytes, bytes] = {}
        with kv.write() as txn:
            for k, v in ops:
                if v is None:
                    assert txn.delete(k) == (k in model)
                    model.pop(k, None)
                else:
                    txn.put(k, v)
                    model[k] = v
        expect = sorted((k, v) for k, v in model.items() if k >= lo and (hi is None or k < hi))
        with kv.read() as r:
            assert list(r.scan(lo, hi)) == expect
            assert list(r.scan(lo, hi, reverse=True)) == expect[::-1]
            assert list(r.scan_keys(lo, hi)) == [k for k, _ in expect]


def test_a_closed_engine_refuses_reads_and_writes_with_a_typed_error(engine_factory: tuple[str, Path]) -> None:
    name, _ = engine_factory
    kv = make(*engine_factory)
    fill(kv)
    if name == "memory":  # its snapshots are immutable dicts: one being read stays readable
        with kv.read() as txn:
            kv.close()
            assert txn.get(b"a") == b"v3"
    else:
        with pytest.raises(ArgumentError, match="the repository is closed"), kv.read() as txn:
            assert txn.get(b"a") == b"v3"
            kv.close()  # closed during the read, as a disconnect on the GUI thread closes it under a mesh load
            txn.get(b"b")
    for use in (kv.read, kv.write):
        with pytest.raises(ArgumentError, match="the repository is closed"), use() as later:
            later.get(b"a")


def test_registry_names_every_engine_and_refuses_others(tmp_path: Path) -> None:
    assert ENGINE_NAMES[0] == "lmdb"  # the default (bench/versioned.py measures why)
    assert set(ENGINE_NAMES) == {"lmdb", "sqlite", "memory"}
    for name in ENGINE_NAMES:
        directory = tmp_path / name
        directory.mkdir()
        kv = open_engine(name, directory if ENGINES[name].keeps_files else None, create=True)
        assert kv.name == name
        kv.close()
    with pytest.raises(ArgumentError, match="unknown engine 'rocksdb'; choose one of lmdb, sqlite, memory"):
        open_engine("rocksdb", tmp_path, create=True)
    with pytest.raises(ArgumentError, match="the sqlite engine needs a directory"):
        open_engine("sqlite", None, create=True)
