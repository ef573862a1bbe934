"""Reading a synapse table a piece at a time: Parquet row groups, Feather record batches, CSV blocks.

An import never holds the whole input: each piece (about :data:`PIECE_ROWS` rows) is converted to
sites and spilled before the next is read (:mod:`.base_stream`). Errors name the file and the row
counted from the table's first data row, as the whole-table reader's did; a CSV that breaks in the
middle (a short row, a stray quote, a value that is not of its column's type) is named by its row,
line and byte offset (of the value, for a conversion error), found by reading the text from the
piece that failed.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import queue
import re
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

from napari_shardscope.core.annotation.errors import AnnotationArgumentError, AnnotationTableError
from napari_shardscope.core.errors import UnsupportedFeatureError

TABLE_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq", ".feather", ".arrow", ".ipc")
#: Rows of the input per piece (a Parquet writer's default row group is 1 Mi rows).
PIECE_ROWS = 1 << 20
#: Bytes of CSV text parsed per block (pyarrow's streaming reader infers the types from the first).
CSV_BLOCK_BYTES = 16 << 20


T = TypeVar("T")
_END = object()


def prefetched(items: Iterator[T], depth: int = 1) -> Generator[T, None, None]:
    """``items``, produced by a thread up to ``depth`` ahead of the consumer (errors raised in order).

    An import reads and converts the next piece of the table (pyarrow decodes with the GIL released)
    while the current one is sorted and spilled. The producer stops when the consumer does (closing
    this generator, or an error in the consumer): it never runs ahead unbounded nor outlives the import.
    """
    q: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(depth)
    stop = threading.Event()

    def offer(item: tuple[Any, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for x in items:
                if not offer((x, None)):
                    return
            offer((_END, None))
        except BaseException as exc:  # handed to the consumer, in order
            offer((None, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, daemon=True, name="base-read")
    thread.start()
    try:
        while True:
            x, exc = q.get()
            if exc is not None:
                raise exc
            if x is _END:
                return
            yield x
    finally:
        stop.set()
        thread.join()


def pyarrow_modules() -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.csv
        import pyarrow.feather
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as exc:
        raise UnsupportedFeatureError("synapse tables", detail="install pyarrow: pip install "
                                      "'napari-shardscope[tables]'") from exc
    return pyarrow


def is_table_file(source: Any) -> bool:
    """Whether ``source`` names a table file (by its suffix, or a local directory of Parquet files)."""
    if not isinstance(source, str | os.PathLike):
        return False
    text = os.fspath(source)
    if text.lower().rstrip("/").endswith(TABLE_SUFFIXES):
        return True
    p = Path(text)
    return "://" not in text and p.is_dir() and not (p / "info").exists() and any(p.glob("*.parquet"))


def read_table_file(path: str | os.PathLike[str]) -> Any:
    """The whole table at ``path`` as one pyarrow Table (small tables, tests; an import reads pieces)."""
    pa = pyarrow_modules()
    pieces = [t for t, _ in iter_table_pieces(path)]
    if not pieces:
        return pa.table({})
    return pa.concat_tables(pieces)


def iter_table_pieces(path: str | os.PathLike[str], rows: int | None = None) -> Iterator[tuple[Any, int]]:
    """``(pyarrow Table, its first row's number in the file)`` for each piece of the table at ``path``.

    At least one piece is yielded (of no rows for an empty table), so the caller always sees the columns.
    ``rows``: rows per piece (default :data:`PIECE_ROWS`).
    """
    pa = pyarrow_modules()
    rows = PIECE_ROWS if rows is None else rows
    p = Path(path)
    if not p.exists():
        raise AnnotationArgumentError(f"{p}: no such synapse table")
    name = p.name.lower()
    row0 = 0
    batches: list[Any] = []
    held = 0
    source = _csv_batches(p) if name.endswith((".csv", ".csv.gz")) else \
        _ipc_batches(p) if name.endswith((".feather", ".arrow", ".ipc")) else _parquet_batches(p, rows)
    schema = None
    for batch in source:
        schema = batch.schema
        batches.append(batch)
        held += batch.num_rows
        if held >= rows:
            yield pa.Table.from_batches(batches), row0
            row0 += held
            batches, held = [], 0
    if batches:
        yield pa.Table.from_batches(batches), row0
    elif row0 == 0:
        yield (pa.Table.from_batches([], schema=schema) if schema is not None else _empty_table(p)), row0


def _empty_table(p: Path) -> Any:
    """A table of no rows with the file's columns (a file whose reader yields no batch at all)."""
    pa = pyarrow_modules()
    name = p.name.lower()
    try:
        if name.endswith((".csv", ".csv.gz")):
            return pa.csv.read_csv(p)
        if name.endswith((".feather", ".arrow", ".ipc")):
            return pa.feather.read_table(p)
        if p.is_file():
            return pa.parquet.ParquetFile(p).schema_arrow.empty_table()
        return pa.parquet.read_table(p)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise AnnotationTableError(f"not a readable table ({exc})", key=str(p)) from exc


def _parquet_batches(p: Path, rows: int) -> Iterator[Any]:
    pa = pyarrow_modules()
    files = [p] if p.is_file() else sorted(p.rglob("*.parquet"))
    for f in files:
        try:
            with pa.parquet.ParquetFile(f) as fh:
                for g in range(fh.metadata.num_row_groups):
                    if fh.metadata.row_group(g).num_rows <= 2 * rows:
                        # a row group whole: a third of the CPU of iter_batches over the same rows
                        yield from fh.read_row_group(g).to_batches()
                    else:  # a huge row group: in batches, so a piece stays about ``rows``
                        yield from fh.iter_batches(batch_size=rows, row_groups=[g])
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise AnnotationTableError(f"not a readable table ({exc})", key=str(f)) from exc


def _ipc_batches(p: Path) -> Iterator[Any]:
    pa = pyarrow_modules()
    try:
        try:
            reader = pa.ipc.open_file(pa.memory_map(str(p)))
        except pa.ArrowInvalid:  # Feather version 1 has no record batches: read whole (it is memory-mapped)
            yield from pa.feather.read_table(p).to_batches()
            return
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise AnnotationTableError(f"not a readable table ({exc})", key=str(p)) from exc


def _csv_batches(p: Path) -> Iterator[Any]:
    pa = pyarrow_modules()
    before = 0
    try:
        reader = pa.csv.open_csv(p, read_options=pa.csv.ReadOptions(block_size=CSV_BLOCK_BYTES))
        for batch in reader:
            yield batch
            before += batch.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise AnnotationTableError(_csv_failure(p, before, exc), key=str(p)) from exc


#: pyarrow's words for a value it could not convert; some of its readers add the row ("Row #N: "), some not.
_CONVERSION = re.compile(r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to ([^:]+): invalid value '(.*)'$")


def _csv_failure(p: Path, before: int, exc: BaseException) -> str:
    """What broke a CSV file, found by reading its text from row ``before`` (the failing block's first row).

    The first row whose field count is not the header's, or, for a value pyarrow could not convert
    (it names only the column and the value), the first row holding that value in that column: its
    row, line and the byte where the value starts.
    """
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    conversion = _CONVERSION.search(text)
    try:
        with (gzip.open(p, "rb") if p.name.lower().endswith(".gz") else p.open("rb")) as raw:
            header = raw.readline()
            offset = len(header)
            names = next(csv.reader([header.decode("utf-8", "replace")]), [])
            width = len(names)
            row = 0
            while row < before:  # skip the rows read already, counting bytes
                line = raw.readline()
                if not line:
                    break
                offset += len(line)
                row += 1
            for _ in range(2 * CSV_BLOCK_BYTES // 8):  # bounded: the failing block is within the next two
                line = raw.readline()
                if not line:
                    break
                fields = next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))), [])
                if fields and len(fields) != width:
                    return (f"row {row} (line {row + 2}, byte {offset}): {len(fields)} fields, the header has "
                            f"{width}; the table breaks there ({text})")
                if conversion is not None:
                    col, typ, value = int(conversion.group(1)), conversion.group(2), conversion.group(3)
                    if col < len(fields) and fields[col] == value:
                        name = names[col] if col < len(names) else f"#{col}"
                        return (f"row {row} (line {row + 2}, byte {offset + _field_start(line, col)}), column "
                                f"{name!r}: {value!r} is not a {typ} ({text})")
                offset += len(line)
                row += 1
    except (OSError, EOFError, csv.Error):
        pass
    return f"not a readable CSV table from row {before} on ({text})"


def _field_start(line: bytes, col: int) -> int:
    """The byte in ``line`` where field ``col`` starts (commas inside double quotes are not separators)."""
    quoted = False
    seen = 0
    for i, ch in enumerate(line):
        if seen == col:
            return i
        if ch == 0x22:  # '"': a doubled quote inside a quoted field toggles twice
            quoted = not quoted
        elif ch == 0x2C and not quoted:  # ','
            seen += 1
    return len(line)
