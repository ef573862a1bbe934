"""Writing tables: page by page from a generator, atomically in place of an old table, from a CSV."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from napari_shardscope.core.errors import RefusedDestinationError
from napari_shardscope.core.tables import iter_csv_chunks, open_sorted_table, write_sorted_table

pytest.importorskip("pyarrow")
FORMATS = ["zarr3", "precomputed", "parquet"]


def url_for(tmp_path: Path, fmt: str, name: str = "t") -> Path:
    return tmp_path / (f"{name}.parquet" if fmt == "parquet" else name)


def generated(n: int, chunk: int, fail_after: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Chunks of a procedurally generated table (keys = 3·i + 1), never aligned with pages."""
    for i, start in enumerate(range(0, n, chunk)):
        if fail_after is not None and i >= fail_after:
            raise RuntimeError("the pipeline died")
        keys = np.arange(start, min(n, start + chunk), dtype=np.uint64) * 3 + 1
        yield keys, keys // 5


@pytest.mark.parametrize("fmt", FORMATS)
def test_generator_written_page_by_page_equals_arrays(tmp_path: Path, fmt: str) -> None:
    summary = write_sorted_table(url_for(tmp_path, fmt), generated(10_000, 777), format=fmt, key="sv",
                                 value_name="body", page_rows=1000)
    assert summary.num_rows == 10_000 and summary.directory.pages == 10
    assert summary.value_max == {"body": (9_999 * 3 + 1) // 5}
    table = open_sorted_table(url_for(tmp_path, fmt))
    keys = np.arange(10_000, dtype=np.uint64) * 3 + 1
    pages = list(table.iter_pages())
    assert [len(p) for p in pages] == [1000] * 10
    np.testing.assert_array_equal(np.concatenate([p.keys for p in pages]), keys)
    np.testing.assert_array_equal(np.concatenate([p.values["body"] for p in pages]), keys // 5)


@pytest.mark.parametrize("chunk", [1, 999, 1000, 1001, 2345, 4000, 10_000])
def test_pages_are_whole_whatever_the_chunks(tmp_path: Path, chunk: int) -> None:
    """Chunks smaller than a page, of exactly a page, and of several pages with a remainder (the repager
    emits whole pages straight from a chunk and joins only a leftover with the next chunk's head): every
    page but the last holds page_rows rows, in order, each row with its own value."""
    url = url_for(tmp_path, "zarr3")
    summary = write_sorted_table(url, generated(9_500, chunk), format="zarr3", key="sv", value_name="body",
                                 page_rows=1000)
    assert summary.num_rows == 9_500
    pages = list(open_sorted_table(url).iter_pages())
    assert [len(p) for p in pages] == [1000] * 9 + [500]
    keys = np.arange(9_500, dtype=np.uint64) * 3 + 1
    np.testing.assert_array_equal(np.concatenate([p.keys for p in pages]), keys)
    np.testing.assert_array_equal(np.concatenate([p.values["body"] for p in pages]), keys // 5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failed_write_leaves_the_old_table(tmp_path: Path, fmt: str) -> None:
    url = url_for(tmp_path, fmt)
    write_sorted_table(url, {1: 10, 2: 20}, format=fmt, key="sv")
    with pytest.raises(RefusedDestinationError):
        write_sorted_table(url, {1: 11}, format=fmt, key="sv")
    with pytest.raises(RuntimeError, match="the pipeline died"):
        write_sorted_table(url, generated(10_000, 500, fail_after=7), format=fmt, key="sv", page_rows=1000,
                           overwrite=True)
    got, found = open_sorted_table(url).lookup([1, 2, 4])
    assert found.tolist() == [True, True, False] and got["value"].tolist() == [10, 20, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [url.name]  # no temporary file or directory left
    write_sorted_table(url, generated(3000, 500), format=fmt, key="sv", page_rows=1000, overwrite=True)
    assert open_sorted_table(url).num_rows == 3000
    assert sorted(p.name for p in tmp_path.iterdir()) == [url.name]


def test_refuses_a_directory_holding_other_files(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("mine")
    with pytest.raises(RefusedDestinationError, match="is not empty"):
        write_sorted_table(tmp_path / "t", {1: 2})
    assert (tmp_path / "t" / "notes.txt").read_text() == "mine"


def test_empty_table(tmp_path: Path) -> None:
    for fmt in FORMATS:
        url = url_for(tmp_path, fmt, f"empty-{fmt}")
        write_sorted_table(url, {}, format=fmt)
        table = open_sorted_table(url)
        assert table.num_rows == 0 and table.max_key is None
        assert table.lookup([1, 2])[1].tolist() == [False, False]
        assert list(table.range(0, 10)) == []


def test_convert_a_csv(tmp_path: Path) -> None:
    csv = tmp_path / "agglo.csv"
    rows = [(k, k // 4 + 1) for k in range(1, 3001, 2)]
    csv.write_text("sv,body,note\n" + "".join(f"{a},{b},x\n" for a, b in rows))
    write_sorted_table(tmp_path / "agglo", iter_csv_chunks(csv, key="sv", values=["body"], chunk_rows=100),
                       key="sv", value_name="body", page_rows=256)
    table = open_sorted_table(tmp_path / "agglo")
    got, found = table.lookup([1, 2, 2999])
    assert found.tolist() == [True, False, True] and got["body"].tolist() == [1, 0, 750]
    csv.write_text("sv,body\n1,2\nx,3\n")
    from napari_shardscope.core.tables import TableDtypeError

    with pytest.raises(TableDtypeError, match=r"agglo\.csv"):
        list(iter_csv_chunks(csv, key="sv", values=["body"]))


def test_columns_of_several_types(tmp_path: Path) -> None:
    keys = np.arange(100, dtype=np.uint64) * 2
    cols = {"body": keys + 1, "score": np.linspace(0, 1, 100, dtype=np.float32),
            "x": np.arange(100, dtype=np.int32) - 50, "ok": np.arange(100) % 2 == 0}
    for fmt in FORMATS:
        url = url_for(tmp_path, fmt, f"multi-{fmt}")
        write_sorted_table(url, keys, cols, format=fmt, page_rows=16)
        table = open_sorted_table(url)
        got, found = table.lookup([4, 5, 198])
        assert found.tolist() == [True, False, True]
        assert got["x"].tolist() == [-48, 0, 49] and got["ok"].tolist() == [True, False, False]
        assert got["score"].dtype == np.float32 and got["x"].dtype == np.int32
