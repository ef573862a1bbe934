"""Damaged and hostile tables get typed errors naming the file (and the byte offset where it is known).

Each test writes a good table, damages one thing the way a broken pipeline or a hostile file would
(keys out of order, a directory that lies, a truncated page, a wrong data type, a footer length
claiming gigabytes), and checks the error a user gets: its class, and that it names the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import ArgumentError, FormatError, ShardscopeError
from napari_shardscope.core.tables import (
    NotATableError,
    PageDirectoryError,
    TableDtypeError,
    TableError,
    TruncatedPageError,
    UnsortedKeysError,
    UnsortedTableError,
    open_sorted_table,
    write_sorted_table,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

KEYS = np.arange(1, 5001, dtype=np.uint64) * 3
BODIES = KEYS // 7 + 1


def good(tmp_path: Path, fmt: str, **opts: object) -> Path:
    url = tmp_path / ("t.parquet" if fmt == "parquet" else f"t.{fmt}")
    write_sorted_table(url, KEYS, {"body": BODIES}, format=fmt, key="sv", page_rows=500, **opts)  # type: ignore[arg-type]
    return url


# -- what a writer is handed --------------------------------------------------------------------------------
def test_writer_refuses_unsorted_chunks_naming_chunk_and_row(tmp_path: Path) -> None:
    chunks = [(np.array([1, 2, 3]), np.array([1, 1, 1])), (np.array([4, 9, 8]), np.array([1, 1, 1]))]
    with pytest.raises(UnsortedKeysError, match=r"chunk 1, row 2 \(table row 5\): key 8"):
        write_sorted_table(tmp_path / "t", iter(chunks), key="sv", page_rows=2)
    assert not (tmp_path / "t").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary directory left behind
    with pytest.raises(UnsortedKeysError, match="starts at key 3, not above the previous chunk's last key 3"):
        write_sorted_table(tmp_path / "u", iter([(np.array([1, 3]), np.array([1, 1])),
                                                 (np.array([3, 4]), np.array([1, 1]))]), key="sv")


def test_writer_refuses_bad_keys_and_values(tmp_path: Path) -> None:
    with pytest.raises(UnsortedKeysError, match="key 5 appears more than once"):
        write_sorted_table(tmp_path / "a", np.array([5, 1, 5]), np.array([1, 2, 3]))
    with pytest.raises(ArgumentError, match=">= 0"):
        write_sorted_table(tmp_path / "b", np.array([-1, 2]), np.array([1, 2]))
    with pytest.raises(ArgumentError, match="must be integers"):
        write_sorted_table(tmp_path / "c", np.array([1.5, 2.0]), np.array([1, 2]))
    with pytest.raises(ArgumentError, match="shape"):
        write_sorted_table(tmp_path / "d", np.array([1, 2]), np.array([1, 2, 3]))
    with pytest.raises(ArgumentError, match="booleans, integers and floats"):
        write_sorted_table(tmp_path / "e", np.array([1, 2]), np.array(["x", "y"]))
    with pytest.raises(ArgumentError, match="page_rows"):
        write_sorted_table(tmp_path / "f", {1: 1}, page_rows=0)
    chunks = [(np.array([1, 2]), np.array([5, 6], dtype=np.uint64)), (np.array([3, 4]), np.array([7, -1]))]
    with pytest.raises(ArgumentError, match=r"chunk 1: column 'value' holds values outside uint64"):
        write_sorted_table(tmp_path / "g", iter(chunks))


# -- Zarr v3 ------------------------------------------------------------------------------------------------
def _rewrite_directory(url: Path, edit: object) -> None:
    """Rewrite the page directory array through zarr-python (a pipeline bug, not a byte flip)."""
    import zarr

    arr = zarr.open_array(str(url / "page_directory"), mode="r+")
    table = arr[:]
    edit(table)  # type: ignore[operator]
    arr[:] = table


def test_zarr_directory_that_lies_about_a_page(tmp_path: Path) -> None:
    url = good(tmp_path, "zarr3")

    def shift(t: np.ndarray) -> None:
        t[3, 0] += 3  # page 3 claims to start one key later than it does
    _rewrite_directory(url, shift)
    table = open_sorted_table(url)
    lie = r"page 3 holds keys 4503\.\.6000, the directory says 4506\.\.6000"
    with pytest.raises(PageDirectoryError, match=lie) as e:
        table.lookup([int(KEYS[1600])])
    assert "sv" in str(e.value)  # names the key column's shard file


def test_zarr_directory_out_of_order_is_refused_at_open(tmp_path: Path) -> None:
    url = good(tmp_path, "zarr3")

    def swap(t: np.ndarray) -> None:
        t[[2, 3]] = t[[3, 2]]
    _rewrite_directory(url, swap)
    with pytest.raises(UnsortedTableError, match=r"page 3 starts at key .* not after page 2's last key") as e:
        open_sorted_table(url)
    assert "page_directory" in str(e.value)


def test_zarr_truncated_shard(tmp_path: Path) -> None:
    url = good(tmp_path, "zarr3", shard_pages=4)
    shard = url / "sv" / "c" / "1"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 3])
    table = open_sorted_table(url)
    with pytest.raises(FormatError) as e:
        table.lookup(KEYS[2500:2600])
    assert "sv/c/1" in str(e.value)


def test_zarr_truncated_chunk_of_unsharded_table(tmp_path: Path) -> None:
    url = good(tmp_path, "zarr3", shard_pages=0, compression="none")
    chunk = url / "body" / "c" / "2"
    chunk.write_bytes(chunk.read_bytes()[:100])
    with pytest.raises(FormatError) as e:
        open_sorted_table(url).lookup(KEYS[1000:1001])
    assert "body/c/2" in str(e.value)


def test_zarr_wrong_key_dtype(tmp_path: Path) -> None:
    url = good(tmp_path, "zarr3")
    doc = json.loads((url / "sv" / "zarr.json").read_text())
    doc["data_type"] = "float64"
    (url / "sv" / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(TableDtypeError, match="column 'sv' is float64") as e:
        open_sorted_table(url)
    assert "sv/zarr.json" in str(e.value)


def test_foreign_zarr_unsorted_keys(tmp_path: Path) -> None:
    import zarr

    g = zarr.open_group(str(tmp_path / "g"), mode="w")
    keys = KEYS.copy()
    keys[[10, 11]] = keys[[11, 10]]  # out of order inside a page: caught when that page is read
    g.create_array("sv", shape=keys.shape, chunks=(100,), dtype="uint64")[:] = keys
    g.create_array("body", shape=keys.shape, chunks=(100,), dtype="uint64")[:] = BODIES
    table = open_sorted_table(tmp_path / "g", key="sv", values=["body"])
    with pytest.raises(UnsortedTableError, match="page 0, row 11: key 33 goes below key 36"):
        table.lookup([33])
    g["sv"][:] = keys[::-1].copy()  # whole pages backwards: refused at open
    with pytest.raises(UnsortedTableError, match="page 0 goes backwards"):
        open_sorted_table(tmp_path / "g", key="sv", values=["body"])


def test_foreign_zarr_float_keys_and_unnamed_group(tmp_path: Path) -> None:
    import zarr

    g = zarr.open_group(str(tmp_path / "g"), mode="w")
    g.create_array("sv", shape=(10,), chunks=(5,), dtype="float64")[:] = np.arange(10.0)
    g.create_array("body", shape=(10,), chunks=(5,), dtype="uint64")[:] = np.arange(10)
    with pytest.raises(TableDtypeError, match="not an unsigned integer"):
        open_sorted_table(tmp_path / "g", key="sv", values=["body"])
    with pytest.raises(ArgumentError, match="name its key array"):
        open_sorted_table(tmp_path / "g")


# -- the sharded lookup -----------------------------------------------------------------------------------
def test_sharded_directory_truncated(tmp_path: Path) -> None:
    url = good(tmp_path, "precomputed")
    d = url / "page_directory"
    d.write_bytes(d.read_bytes()[:-5])
    with pytest.raises(TruncatedPageError, match="page directory holds 235 bytes, 10 pages need 240") as e:
        open_sorted_table(url)
    assert "page_directory" in str(e.value) and "at byte 235" in str(e.value)


def test_sharded_info_row_count_lies(tmp_path: Path) -> None:
    url = good(tmp_path, "precomputed")
    info = json.loads((url / "info").read_text())
    info["num_rows"] += 1
    (url / "info").write_text(json.dumps(info))
    with pytest.raises(PageDirectoryError, match="do not cut 5001 rows"):
        open_sorted_table(url)


def test_sharded_truncated_shard(tmp_path: Path) -> None:
    url = good(tmp_path, "precomputed", shard_pages=4)
    shard = url / "000000.shard"  # KEYS[:10]'s shard (not the first listed: tmpfs lists it last)
    shard.write_bytes(shard.read_bytes()[:2000])
    with pytest.raises(FormatError) as e:
        open_sorted_table(url).lookup(KEYS[:10])
    assert shard.name in str(e.value)


def test_sharded_page_bytes_swapped(tmp_path: Path) -> None:
    """Two pages' records swapped in the minishard indexes: each page then holds the other's keys."""
    from napari_shardscope.core.formats.precomputed.shard_index import decode_minishard_index, encode_minishard_index
    from napari_shardscope.core.tables.sharded_table import table_spec

    url = good(tmp_path, "precomputed", shard_pages=4, gzip=False)
    spec = table_spec(4, 24, False)
    shard = url / "000000.shard"
    data = bytearray(shard.read_bytes())
    index = np.frombuffer(bytes(data[:16 * 4]), dtype="<u8").reshape(4, 2) + 16 * 4
    m0 = decode_minishard_index(bytes(data[index[0, 0]:index[0, 1]]), spec, key="x", offset=0)
    m1 = decode_minishard_index(bytes(data[index[1, 0]:index[1, 1]]), spec, key="x", offset=0)
    a = encode_minishard_index(spec, m0.chunk_ids, m1.starts, m1.ends)
    b = encode_minishard_index(spec, m1.chunk_ids, m0.starts, m0.ends)
    data[index[0, 0]:index[0, 1]] = a
    data[index[1, 0]:index[1, 1]] = b
    shard.write_bytes(bytes(data))
    with pytest.raises(PageDirectoryError, match=r"page 0 holds keys 1503\.\.3000"):
        open_sorted_table(url).lookup([3])


# -- Parquet ----------------------------------------------------------------------------------------------
def test_not_a_parquet_file(tmp_path: Path) -> None:
    (tmp_path / "x.parquet").write_bytes(b"sv,body\n1,2\n" * 20)
    with pytest.raises(TableError, match="no PAR1 magic") as e:
        open_sorted_table(tmp_path / "x.parquet")
    assert "x.parquet" in str(e.value)


def test_parquet_footer_length_lie_is_refused_before_reading(tmp_path: Path) -> None:
    url = good(tmp_path, "parquet")
    data = bytearray(url.read_bytes())
    data[-8:-4] = (1 << 31).to_bytes(4, "little")
    url.write_bytes(bytes(data))
    with pytest.raises(TableError, match="footer claims 2147483648 bytes"):
        open_sorted_table(url)
    data[-8:-4] = (len(data) + 100).to_bytes(4, "little")
    url.write_bytes(bytes(data))
    with pytest.raises(TruncatedPageError, match="footer claims"):
        open_sorted_table(url)


def test_parquet_truncated_in_the_middle(tmp_path: Path) -> None:
    url = good(tmp_path, "parquet")
    data = url.read_bytes()
    url.write_bytes(data[:1000] + data[-4000:])  # the footer survives; the column chunks do not
    with pytest.raises(ShardscopeError) as e:
        open_sorted_table(url).lookup(KEYS)
    assert isinstance(e.value, FormatError) and "t.parquet" in str(e.value)


def test_parquet_wrong_types_and_nulls(tmp_path: Path) -> None:
    pq.write_table(pa.table({"sv": np.arange(10.0), "body": np.arange(10)}), tmp_path / "f.parquet")
    with pytest.raises(TableDtypeError, match="key column 'sv' is double"):
        open_sorted_table(tmp_path / "f.parquet")
    pq.write_table(pa.table({"sv": np.arange(10), "body": ["a"] * 10}), tmp_path / "s.parquet")
    with pytest.raises(TableDtypeError, match="value column 'body' is string"):
        open_sorted_table(tmp_path / "s.parquet")
    pq.write_table(pa.table({"sv": pa.array([1, 2, None, 4], pa.int64()), "body": [1, 2, 3, 4]}),
                   tmp_path / "n.parquet")
    with pytest.raises(TableDtypeError, match="nulls"):
        open_sorted_table(tmp_path / "n.parquet").lookup([1])
    pq.write_table(pa.table({"sv": np.array([-5, 1, 2]), "body": [1, 2, 3]}), tmp_path / "neg.parquet")
    with pytest.raises(TableDtypeError, match="negative key"):
        open_sorted_table(tmp_path / "neg.parquet")


def test_parquet_row_groups_out_of_order(tmp_path: Path) -> None:
    keys = np.concatenate([np.arange(100, 200), np.arange(0, 100)]).astype(np.uint64)
    pq.write_table(pa.table({"sv": keys, "body": keys}), tmp_path / "u.parquet", row_group_size=100)
    with pytest.raises(UnsortedTableError, match="page 1 starts at key 0"):
        open_sorted_table(tmp_path / "u.parquet")
    inside = np.arange(100, dtype=np.uint64)
    inside[[5, 6]] = inside[[6, 5]]
    pq.write_table(pa.table({"sv": inside, "body": inside}), tmp_path / "w.parquet", row_group_size=50)
    with pytest.raises(UnsortedTableError, match="row 6: key 5 goes below key 6") as e:
        open_sorted_table(tmp_path / "w.parquet").lookup([5])
    assert "w.parquet" in str(e.value)


def test_nothing_there(tmp_path: Path) -> None:
    with pytest.raises(NotATableError):
        open_sorted_table(tmp_path)
    with pytest.raises(TableError, match="not found"):
        open_sorted_table(tmp_path / "missing.parquet")
