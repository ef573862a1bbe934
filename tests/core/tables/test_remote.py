"""Tables on a bucket: written to and read from a real S3 API (moto on 127.0.0.1), GCS, and plain HTTP.

The server counts the requests: opening reads only metadata and the page directory, a cold lookup
fetches its pages in a few waves, and the same lookup again is served from the page cache with no
request at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import RefusedDestinationError
from napari_shardscope.core.tables import TableAgglomeration, open_sorted_table, write_reverse_table, write_sorted_table
from tests.gcs_emulator import GcsServer, gcs, gcs_server  # noqa: F401  (fixtures)
from tests.moto_s3 import S3Server, serve_moto

pytest.importorskip("pyarrow")
pytest.importorskip("moto")

FORMATS = {
    "zarr3": ("t.zarr", {"format": "zarr3"}),
    "zarr3-unsharded": ("u.zarr", {"format": "zarr3", "shard_pages": 0}),
    "precomputed": ("t.sharded", {"format": "precomputed"}),
    "parquet-file": ("t.parquet", {"format": "parquet"}),
    "parquet-dir": ("parts", {"format": "parquet", "file_rows": 40_000}),
}


@pytest.fixture(scope="module")
def logged_s3() -> Iterator[tuple[S3Server, list[tuple[str, str, str | None]]]]:
    log: list[tuple[str, str, str | None]] = []
    with serve_moto(log=log) as endpoint:
        server = S3Server(endpoint, S3Server(endpoint, "").new_bucket())
        yield server, log


@pytest.fixture
def s3_env(logged_s3: tuple[S3Server, list[tuple[str, str, str | None]]],
           monkeypatch: pytest.MonkeyPatch) -> tuple[S3Server, list[tuple[str, str, str | None]]]:
    server, log = logged_s3
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    return server, log


def _is_probe(rng: str) -> bool:
    """A one-byte range (``bytes=N-N``): the probe sizing a value before it is read whole."""
    first, _, last = rng.removeprefix("bytes=").partition("-")
    return first.isdigit() and first == last


def table_rows() -> tuple[np.ndarray, np.ndarray]:
    keys = np.arange(1, 200_001, dtype=np.uint64) * 5
    return keys, keys // 11 + 1


@pytest.mark.parametrize("kind", list(FORMATS))
def test_lookup_over_s3_twice_second_round_from_cache(kind: str, s3_env: tuple[S3Server, list]) -> None:
    server, log = s3_env
    name, opts = FORMATS[kind]
    url = server.url(f"{kind}/{name}")
    keys, bodies = table_rows()
    write_sorted_table(url, keys, {"body": bodies}, key="sv", page_rows=4096, **opts)
    start = len(log)
    table = open_sorted_table(url)
    opened = log[start:]
    assert all(method in ("GET", "HEAD") for method, _, _ in opened)
    # metadata documents, the directory and Parquet footers (suffix reads; a file smaller than the
    # footer probe is read whole once): never a range of page data. On S3 every whole read is
    # sized first by a one-byte probe at its limit (TensorStore refuses a range past a value's end
    # and its s3 driver sends no header of ours: bytestore/bounded.py), so a document costs two
    # requests here (one over HTTP); no key is probed or read twice.
    files = 6 if kind == "parquet-dir" else 1
    whole = [path for _, path, rng in opened if rng is None]
    probes = [path for _, path, rng in opened if rng is not None and _is_probe(rng)]
    suffixes = [path for _, path, rng in opened if rng is not None and rng.startswith("bytes=-")]
    assert len(whole) == len(set(whole)) and len(probes) == len(set(probes)), opened
    assert set(whole) <= set(probes) | set(suffixes), opened  # a footer read whole after its suffix read
    assert len(set(whole) | set(probes) | set(suffixes)) <= 4 + 2 * files, opened
    assert len(whole) + len(probes) + len(suffixes) == len(opened), opened
    rng = np.random.default_rng(0)
    asked = np.concatenate([rng.choice(keys, 1000), rng.integers(0, 10**6, 200).astype(np.uint64)])
    before = len(log)
    got, found = table.lookup(asked)
    first_round = len(log) - before
    looked = log[before:]
    # a page read whole (an unsharded layout's chunk) is sized by a one-byte probe first on S3 (see above):
    # counted apart, at most one per whole read; the bound below is on the requests that fetch data
    probes = sum(1 for _, _, rng in looked if rng is not None and _is_probe(rng))
    assert probes <= sum(1 for _, _, rng in looked if rng is None)
    first_round -= probes
    pos = np.minimum(np.searchsorted(keys, asked), keys.size - 1)
    hit = keys[pos] == asked
    np.testing.assert_array_equal(found, hit)
    np.testing.assert_array_equal(got["body"][hit], bodies[pos[hit]])
    pages_touched = np.unique(table.directory.page_of(np.unique(asked[hit]))).size
    assert first_round >= 1
    # sharded layouts fetch a shard index wave then one range per page, coalesced when close together
    assert first_round <= 2 * pages_touched + 8
    before = len(log)
    again, found2 = table.lookup(asked)
    assert len(log) == before  # the second round is served from the page cache: no request at all
    np.testing.assert_array_equal(again["body"], got["body"])
    np.testing.assert_array_equal(found2, found)


def test_refuses_to_replace_a_table_on_s3_unless_asked(s3_env: tuple[S3Server, list]) -> None:
    server, _ = s3_env
    url = server.url("replace/t.zarr")
    write_sorted_table(url, {1: 10, 2: 20}, key="sv")
    with pytest.raises(RefusedDestinationError, match="already holds a table"):
        write_sorted_table(url, {1: 11}, key="sv")
    write_sorted_table(url, {1: 11, 5: 50}, key="sv", overwrite=True)
    got, found = open_sorted_table(url).lookup([1, 2, 5])
    assert found.tolist() == [True, False, True] and got["value"].tolist() == [11, 0, 50]


def test_agglomeration_from_s3_tables(s3_env: tuple[S3Server, list]) -> None:
    server, _ = s3_env
    keys, bodies = table_rows()
    fwd = server.url("agglo/fwd.zarr")
    write_sorted_table(fwd, keys, {"body": bodies}, key="supervoxel", page_rows=8192)
    rev = server.url("agglo/rev.zarr")
    write_reverse_table(open_sorted_table(fwd), rev, page_rows=8192)
    agglo = TableAgglomeration.open(fwd, rev)
    plane = keys[:4096].reshape(64, 64)
    np.testing.assert_array_equal(agglo.lookup(plane), bodies[:4096].reshape(64, 64))
    np.testing.assert_array_equal(agglo.members(7), np.sort(keys[bodies == 7]))


def test_gcs(gcs: GcsServer) -> None:  # noqa: F811  (the fixture)
    keys, bodies = table_rows()
    url = gcs.url("t.sharded")
    write_sorted_table(url, keys[:50_000], {"body": bodies[:50_000]}, format="precomputed", key="sv")
    got, found = open_sorted_table(url).lookup(keys[:50_000:97])
    assert found.all()
    np.testing.assert_array_equal(got["body"], bodies[:50_000:97])


def test_plain_http_reads_a_table_and_parquet_directory_without_listing(tmp_path: Path) -> None:
    from tests.http_range_server import RangeServer

    keys, bodies = table_rows()
    write_sorted_table(tmp_path / "t.zarr", keys, {"body": bodies}, key="sv")
    write_sorted_table(tmp_path / "parts", keys, {"body": bodies}, format="parquet", key="sv", file_rows=65536)
    server = RangeServer(tmp_path)
    try:
        for name in ("t.zarr", "parts"):
            table = open_sorted_table(f"{server.url}{name}")
            got, found = table.lookup(keys[::1013])
            assert found.all(), name
            np.testing.assert_array_equal(got["body"], bodies[::1013])
    finally:
        server.close()

