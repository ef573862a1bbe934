"""Rows of a CSV file in bounded chunks, for converting a text table into a paged one.

A pipeline's or a service's export (``sv,body`` lines; CAVE and neuPrint CSVs) is read a chunk
of rows at a time — with pyarrow's streaming CSV reader when it is installed, else with Python's
``csv`` module — and handed to :func:`~napari_shardscope.core.tables.write_sorted_table`, which
writes it page by page if it is sorted, or sorts it in memory if it is small (``sort=True``)::

    write_sorted_table("agglo.zarr", iter_csv_chunks("agglo.csv", key="sv", values=["body"]), key="sv")
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.directory import Columns, as_key_array
from napari_shardscope.core.tables.errors import TableDtypeError

#: Rows per chunk read.
CSV_CHUNK_ROWS = 1 << 20


def iter_csv_chunks(path: str | os.PathLike[str], *, key: str, values: Sequence[str],
                    dtypes: Sequence[str] | None = None, chunk_rows: int = CSV_CHUNK_ROWS
                    ) -> Iterator[tuple[npt.NDArray[np.uint64], Columns]]:
    """``(keys, {value: array})`` chunks of the CSV file at ``path`` (a header line names the columns).

    ``dtypes`` gives each value column's numpy type (default ``uint64``). Errors name the file and line.
    """
    p = Path(path)
    types = [np.dtype(t) for t in (dtypes or ["uint64"] * len(values))]
    if len(types) != len(values):
        raise ArgumentError(f"{len(values)} value columns but {len(types)} dtypes")
    with p.open(newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            return
        names = [h.strip() for h in header]
        try:
            idx = [names.index(n) for n in (key, *values)]
        except ValueError:
            raise ArgumentError(f"{p}: the header {names} does not name {[key, *values]}") from None
        rows: list[list[str]] = []
        line = 1
        for row in reader:
            line += 1
            if not row:
                continue
            rows.append([row[i] if i < len(row) else "" for i in idx])
            if len(rows) >= chunk_rows:
                yield _chunk(rows, values, types, p, line - len(rows) + 1)
                rows = []
        if rows:
            yield _chunk(rows, values, types, p, line - len(rows) + 1)


def _chunk(rows: list[list[str]], values: Sequence[str], types: Sequence[np.dtype[np.generic]], path: Path,
           first_line: int) -> tuple[npt.NDArray[np.uint64], Columns]:
    cols = list(zip(*rows, strict=True))
    try:
        keys = as_key_array(np.asarray([int(x) for x in cols[0]], dtype=object))
        out = {n: np.asarray([t.type(x) for x in c], dtype=t) for n, t, c in zip(values, types, cols[1:], strict=True)}
    except (ValueError, OverflowError, ArgumentError) as exc:
        raise TableDtypeError(f"a row from line {first_line} on is not numeric ({exc})", key=str(path)) from None
    return keys, out
