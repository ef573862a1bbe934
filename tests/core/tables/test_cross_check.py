"""Tables cross-checked with independent code: what we write, zarr-python, TensorStore and pyarrow read;
what they write (with their default settings), we read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.tables import (
    TableAgglomeration,
    open_sorted_table,
    write_reverse_table,
    write_sorted_table,
)
from napari_shardscope.core.tables.sharded_table import encode_page, table_spec

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def rows(n: int = 20_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 1 << 40, n, dtype=np.uint64))
    return keys, (keys % 977 + 1).astype(np.uint64)


def check_reads(table: object, keys: np.ndarray, bodies: np.ndarray, column: str = "body") -> None:
    rng = np.random.default_rng(1)
    asked = np.concatenate([rng.choice(keys, 500), keys[:3] + 1, [0, (1 << 64) - 1]]).astype(np.uint64)
    got, found = table.lookup(asked, [column])  # type: ignore[attr-defined]
    pos = np.minimum(np.searchsorted(keys, asked), keys.size - 1)
    hit = keys[pos] == asked
    np.testing.assert_array_equal(found, hit)
    np.testing.assert_array_equal(got[column][hit], bodies[pos[hit]])


# -- Zarr v3 --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shard_pages", [0, 8])
def test_zarr_python_and_tensorstore_read_our_zarr_table(tmp_path: Path, shard_pages: int) -> None:
    import tensorstore as ts
    import zarr

    keys, bodies = rows()
    url = tmp_path / "agglo.zarr"
    write_sorted_table(url, keys, {"body": bodies}, key="sv", page_rows=1000, shard_pages=shard_pages)
    group = zarr.open_group(str(url), mode="r")
    np.testing.assert_array_equal(group["sv"][:], keys)
    np.testing.assert_array_equal(group["body"][:], bodies)
    directory = group["page_directory"][:]
    assert directory.shape == (-(-keys.size // 1000), 3)
    np.testing.assert_array_equal(directory[:, 0], keys[::1000])
    assert group.attrs["shardscope_sorted_table"]["num_rows"] == keys.size
    for name, want in (("sv", keys), ("body", bodies)):
        arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(url / name)}}).result()
        np.testing.assert_array_equal(arr.read().result(), want)


@pytest.mark.parametrize("sharded", [False, True])
def test_we_read_a_zarr_python_group_with_its_defaults(tmp_path: Path, sharded: bool) -> None:
    import zarr

    keys, bodies = rows()
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    extra = {"shards": (4000,)} if sharded else {}
    group.create_array("supervoxel", shape=keys.shape, chunks=(1000,), dtype="uint64", **extra)[:] = keys
    group.create_array("body", shape=keys.shape, chunks=(700,), dtype="uint64")[:] = bodies  # other chunking
    cache = tmp_path / "directory.bin"
    table = open_sorted_table(tmp_path / "g.zarr", key="supervoxel", values=["body"], directory_cache=cache)
    assert table.directory.pages == -(-keys.size // 1000)
    check_reads(table, keys, bodies)
    assert cache.exists()  # the scanned directory is kept for the next open
    again = open_sorted_table(tmp_path / "g.zarr", key="supervoxel", values=["body"], directory_cache=cache)
    np.testing.assert_array_equal(again.directory.first, table.directory.first)
    check_reads(again, keys, bodies)


def test_we_read_a_two_column_tensorstore_array(tmp_path: Path) -> None:
    import tensorstore as ts

    keys, bodies = rows()
    both = np.stack([keys, bodies], axis=1)
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "t.zarr")},
                   "metadata": {"shape": list(both.shape), "chunk_grid": {"name": "regular", "configuration": {
                       "chunk_shape": [512, 2]}}, "data_type": "uint64"}}, create=True).result()
    arr.write(both).result()
    table = open_sorted_table(tmp_path / "t.zarr", key="sv", values=["body"])
    check_reads(table, keys, bodies)


# -- the sharded lookup ----------------------------------------------------------------------------------
def test_tensorstore_reads_our_sharded_pages(tmp_path: Path) -> None:
    import tensorstore as ts

    keys, bodies = rows(5000)
    url = tmp_path / "agglo.sharded"
    summary = write_sorted_table(url, keys, {"body": bodies}, format="precomputed", key="sv", page_rows=300,
                                 shard_pages=8, shard_bits=4)
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{url}/",
                          "metadata": table_spec(8, 4, True).to_json()}).result()
    table = open_sorted_table(url)
    for page in range(summary.directory.pages):
        got = kv.read(int(page).to_bytes(8, "big")).result().value
        expect = table.pages([page])[0]
        assert bytes(got) == encode_page(expect.keys, expect.values, table.schema)
    check_reads(table, keys, bodies)


# -- Parquet ---------------------------------------------------------------------------------------------
def test_pyarrow_reads_our_parquet_file_and_directory(tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    keys, bodies = rows()
    write_sorted_table(tmp_path / "a.parquet", keys, {"body": bodies}, key="sv", page_rows=2048)
    t = pq.read_table(tmp_path / "a.parquet")
    np.testing.assert_array_equal(t.column("sv").to_numpy(), keys)
    np.testing.assert_array_equal(t.column("body").to_numpy(), bodies)
    assert pq.ParquetFile(tmp_path / "a.parquet").metadata.num_row_groups == -(-keys.size // 2048)
    write_sorted_table(tmp_path / "parts", keys, {"body": bodies}, format="parquet", key="sv", page_rows=2048,
                       file_rows=6000)
    d = ds.dataset(tmp_path / "parts", format="parquet").to_table()
    order = np.argsort(d.column("sv").to_numpy())
    np.testing.assert_array_equal(d.column("sv").to_numpy()[order], keys)
    np.testing.assert_array_equal(d.column("body").to_numpy()[order], bodies)


def test_we_read_pyarrow_files_written_with_default_settings(tmp_path: Path) -> None:
    keys, bodies = rows(300_000)
    # pandas-style signed ids and CAVE-like column names, one row group (pyarrow's default is 1Mi rows)
    pq.write_table(pa.table({"id": keys.astype(np.int64), "pt_root_id": bodies.astype(np.int64),
                             "score": np.ones(keys.size, np.float32)}), tmp_path / "default.parquet")
    table = open_sorted_table(tmp_path / "default.parquet", key="id", values=["pt_root_id", "score"])
    assert table.directory.pages == 1
    check_reads(table, keys, bodies.astype(np.int64), "pt_root_id")
    # many row groups, no statistics: the directory comes from one read of the key column
    pq.write_table(pa.table({"sv": keys, "body": bodies}), tmp_path / "nostats.parquet", row_group_size=10_000,
                   write_statistics=False)
    table = open_sorted_table(tmp_path / "nostats.parquet")
    assert table.directory.pages == 30
    check_reads(table, keys, bodies)


def test_we_read_a_pyarrow_dataset_directory_in_key_order(tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    keys, bodies = rows(50_000)
    ds.write_dataset(pa.table({"sv": keys, "body": bodies}), tmp_path / "ds", format="parquet",
                     max_rows_per_file=4000, max_rows_per_group=1000)
    names = sorted(p.name for p in (tmp_path / "ds").iterdir())
    assert "part-10.parquet" in names and names.index("part-10.parquet") < names.index("part-2.parquet")
    table = open_sorted_table(tmp_path / "ds")
    check_reads(table, keys, bodies)


# -- the reverse table and the agglomeration adapter through every format -----------------------------
@pytest.mark.parametrize("fmt", ["zarr3", "precomputed", "parquet"])
def test_reverse_table_and_agglomeration(tmp_path: Path, fmt: str) -> None:
    keys, bodies = rows(8000)
    fwd_url = tmp_path / ("fwd.parquet" if fmt == "parquet" else "fwd")
    write_sorted_table(fwd_url, keys, {"body": bodies}, format=fmt, key="supervoxel", page_rows=512)
    forward = open_sorted_table(fwd_url)
    rev_url = tmp_path / ("rev.parquet" if fmt == "parquet" else "rev")
    write_reverse_table(forward, rev_url, format=fmt, page_rows=512)
    reverse = open_sorted_table(rev_url)
    assert reverse.schema.key == "body" and not reverse.schema.unique
    agglo = TableAgglomeration(forward, reverse)
    plain = TableAgglomeration(forward)
    for body in (1, 17, 976, 977, 5000):
        want = np.sort(keys[bodies == body])
        np.testing.assert_array_equal(agglo.members(body), want)
        np.testing.assert_array_equal(plain.members(body), want)
    assert agglo.max_id == plain.max_id == max(int(keys[-1]), int(bodies.max()))
