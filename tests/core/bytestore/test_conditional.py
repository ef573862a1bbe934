"""Compare-and-swap through the byte-store door, checked against a real S3 API (moto) and the local disk.

These pin TensorStore's semantics the remotes rely on: creating needs the "absent" generation
(``b""`` would be unconditional), a lost swap returns None rather than raising, a stale generation
never wins, and two racing writers never both win.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from napari_shardscope.core.bytestore.conditional import ABSENT, ConditionalStore, probe_cas
from napari_shardscope.core.errors import ArgumentError, UnsupportedError
from tests.gcs_emulator import GcsServer, gcs, gcs_server  # noqa: F401  (fixtures)
from tests.moto_s3 import S3Server, s3, s3_server  # noqa: F401  (fixtures)


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ConditionalStore:
    if request.param == "file":
        return ConditionalStore(tmp_path / "cas")
    server: S3Server = request.getfixturevalue("s3")
    return ConditionalStore(server.url("cas"))


def test_create_swap_and_stale(store: ConditionalStore) -> None:
    got = store.read_generation("refs", 1 << 10, "a test value")
    assert got.value is None and got.generation == ABSENT
    g1 = store.write_if("refs", b"A", got.generation)
    assert g1 is not None
    assert store.write_if("refs", b"B", ABSENT) is None  # exists now: create loses
    g2 = store.write_if("refs", b"B", g1)
    assert g2 is not None and g2 != g1
    assert store.write_if("refs", b"C", g1) is None  # stale generation loses, without raising
    now = store.read_generation("refs", 1 << 10, "a test value")
    assert now.value == b"B" and now.generation == g2


def test_empty_generation_is_refused(store: ConditionalStore) -> None:
    with pytest.raises(ArgumentError):
        store.write_if("refs", b"x", b"")


def test_racing_writers_exactly_one_wins(store: ConditionalStore) -> None:
    # Every writer writes a value other than the base's: on S3 a generation is the content's MD5, so
    # a writer rewriting the base's own bytes leaves the generation as it was and a second writer
    # then rightly wins too (the A->A case the remotes' refs object guards with a sequence number).
    base = store.write_if("counter", b"base", ABSENT)
    assert base is not None
    wins: list[int] = []
    barrier = threading.Barrier(6)

    def contend(i: int) -> None:
        barrier.wait(timeout=30)
        if store.write_if("counter", f"writer {i}".encode(), base) is not None:
            wins.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(wins) == 1
    assert store.read_generation("counter", 1 << 10, "a test value").value == f"writer {wins[0]}".encode()


def test_rewriting_the_same_bytes_lets_a_stale_generation_through_on_s3(store: ConditionalStore) -> None:
    """Why the remotes' refs object carries a sequence number: on S3 a generation is the content's MD5."""
    first = store.write_if("refs", b"A", ABSENT)
    assert first is not None
    second = store.write_if("refs", b"B", first)
    assert second is not None
    third = store.write_if("refs", b"A", second)  # back to A's bytes
    assert third is not None
    stale = store.write_if("refs", b"C", first)  # a writer still holding A's first generation
    if store.location.kvstore.get("driver") == "s3":
        assert third == first and stale is not None  # the ABA hole, closed in the refs object itself
    else:
        assert stale is None  # the file driver's generations change on every write


def test_probe_holds_and_cleans_up(store: ConditionalStore, tmp_path: Path) -> None:
    assert probe_cas(store)
    if store.location.is_local:
        assert not list((tmp_path / "cas" / "cas-probe").glob("*"))


def test_http_is_read_only() -> None:
    store = ConditionalStore("https://127.0.0.1:9/remote")
    with pytest.raises(UnsupportedError):
        store.write_if("refs", b"x", ABSENT)


def test_gcs_emulator_reads_and_writes_through_the_gcs_driver(gcs: GcsServer) -> None:  # noqa: F811  (the fixture)
    """gs:// reaches a real GCS JSON API (gcp-storage-emulator on 127.0.0.1) through TensorStore's gcs driver."""
    store = ConditionalStore(gcs.url("cas"))
    assert store.location.kvstore["driver"] == "gcs"
    got = store.read_generation("refs", 1 << 10, "a test value")
    assert got.value is None and got.generation == ABSENT
    g1 = store.write_if("refs", b"A", ABSENT)
    assert g1 is not None
    # The bytes round-trip; the generation a read reports does not match the write's on this emulator
    # (a read answers generation 0), one more reason it cannot serve as a compare-and-swap store.
    assert store.read_generation("refs", 1 << 10, "a test value").value == b"A"


def test_gcs_emulator_ignores_generation_match_and_the_probe_says_so(gcs: GcsServer) -> None:  # noqa: F811  (the fixture)
    """gcp-storage-emulator ignores ``ifGenerationMatch``: real GCS would refuse both writes below.

    So CAS does not hold on it, and :func:`probe_cas` must report that (the remotes then refuse to push).
    """
    store = ConditionalStore(gcs.url("cas"))
    first = store.write_if("refs", b"A", ABSENT)
    assert first is not None
    assert store.write_if("refs", b"B", ABSENT) is not None  # a create over an existing object "wins"
    assert store.write_if("refs", b"C", first) is not None  # and so does a stale generation
    assert store.read_generation("refs", 1 << 10, "a test value").value == b"C"
    assert not probe_cas(store)
    assert store.read_generation("cas-probe/none", 1 << 10, "a test value").value is None
