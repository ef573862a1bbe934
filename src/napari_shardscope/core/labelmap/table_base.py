"""A base agglomeration read where the pipeline wrote it: a sorted table, never copied, never loaded whole.

A labelmap created with a sorted supervoxel → body table (:mod:`napari_shardscope.core.tables`:
Zarr v3, Parquet or the sharded lookup, on a disk or a bucket) records the table's URL in its
configuration (:class:`~napari_shardscope.core.labelmap.config.AgglomerationTable`) and reads it
through :class:`~napari_shardscope.core.tables.TableAgglomeration` on every open: a tile's
supervoxels cost the table pages they fall in, whatever the table's size (the single blob of
format 1 stopped at 67,108,863 supervoxels and was decoded whole into every process).

``members_of`` (a body's supervoxels: cleaves, ``supervoxels``, sizes) needs the table sorted by
body. The pipeline's own reverse table is used when it is named (``agglomeration_reverse=``,
:func:`~napari_shardscope.core.tables.write_reverse_table` writes one); otherwise the labelmap
writes the reverse rows into its repository once at creation (bounded memory: body-range parts
on disk above 2²⁴ rows) — a scan of the forward table per question would cost the whole table.

The table must not change after the labelmap is created (like the base volume): a version's
records name base bodies the table defined. The counts recorded at creation (rows, largest id)
are checked at open, so a table replaced by another one is refused instead of silently remapping
every body.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.agglomeration import (
    META_KEY,
    REVERSE,
    REVERSE_DTYPE,
    AgglomerationSource,
    reverse_rows,
)
from napari_shardscope.core.labelmap.config import AgglomerationTable, normalise_base_url
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.paged import PagedTable, ReadMany, write_table
from napari_shardscope.core.tables import TableAgglomeration, open_sorted_table

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]

#: What a bodies JSON path ends with (any other path or URL given as an agglomeration is a table).
BODIES_JSON_SUFFIX = ".json"


def is_table_location(source: Any) -> bool:
    """Whether ``source`` (an ``agglomeration=`` argument) names a sorted table rather than a bodies JSON."""
    return isinstance(source, str | os.PathLike) and not os.fspath(source).lower().endswith(BODIES_JSON_SUFFIX)


def table_of(source: Any, reverse: str | os.PathLike[str] | None = None) -> TableAgglomeration | None:
    """The :class:`TableAgglomeration` ``source`` names (a table URL/path or one already opened), else None.

    A table held only in memory (``TableAgglomeration.from_mapping``) has no location to record: it is
    None here and copied into the repository like a mapping.
    """
    if is_table_location(source):
        agg = TableAgglomeration.open(normalise_base_url(source))
        if reverse is not None:
            agg = TableAgglomeration(agg.forward, open_sorted_table(normalise_base_url(reverse)), body=agg.body)
        return agg
    if reverse is not None:
        raise ArgumentError("agglomeration_reverse names the reverse of a sorted table: give the forward table's "
                            "URL as agglomeration (a bodies JSON or a mapping has no reverse table)")
    if isinstance(source, TableAgglomeration) and _located(source.forward.url):
        return source
    return None


def _located(url: str) -> bool:
    return not url.startswith("<")  # "<memory>": memory_table's


def describe_table(agg: TableAgglomeration) -> AgglomerationTable:
    """What the labelmap's configuration records of a table (its URLs, body column, counts)."""
    reverse = agg.reverse.url if agg.reverse is not None and _located(agg.reverse.url) else None
    return AgglomerationTable(forward=agg.forward.url, reverse=reverse, body=agg.body,
                              rows=int(agg.listed), max_id=int(agg.max_id))


def stored_reverse_items(agg: TableAgglomeration, *, scratch: str | os.PathLike[str] | None = None
                         ) -> Iterator[tuple[bytes, bytes]]:
    """The repository's copy of the table's body-sorted rows (when the pipeline has no reverse table),
    then the agglomeration metadata."""
    source: AgglomerationSource = agg
    yield from write_table(REVERSE, REVERSE_DTYPE, "body", reverse_rows(source, int(agg.listed), agg.max_body,
                                                                        scratch))
    yield META_KEY, json.dumps({"format": 1, "table": True, "listed": int(agg.listed),
                                "max_id": int(agg.max_id)}).encode()


class TableBase:
    """The :class:`AgglomerationSource` of a labelmap whose agglomeration is a sorted table.

    Forward questions go to the table where it lives; ``members_of`` to the pipeline's reverse table,
    or to the body-sorted copy in the repository.
    """

    def __init__(self, table: TableAgglomeration, recorded: AgglomerationTable, stored_reverse: PagedTable | None
                 ) -> None:
        self.table = table
        self.recorded = recorded
        self._reverse = stored_reverse

    @property
    def max_id(self) -> int:
        return self.recorded.max_id  # recorded at creation: no scan of a foreign table at each open

    @property
    def listed(self) -> int:
        return self.recorded.rows

    def lookup(self, svs: npt.ArrayLike) -> U64:
        return self.table.lookup(svs)

    def listed_mask(self, svs: npt.ArrayLike) -> Bools:
        return self.table.listed_mask(svs)

    def members_of(self, bodies: npt.ArrayLike) -> U64:
        if self.table.reverse is not None or self._reverse is None:
            return self.table.members_of(bodies)
        q = np.unique(np.asarray(bodies, dtype=np.uint64).reshape(-1))
        q = q[q != 0]
        if not q.size:
            return np.zeros(0, dtype=np.uint64)
        rows = self._reverse.select(q)
        return np.unique(rows["sv"]).astype(np.uint64)

    def iter_pages(self) -> Iterator[tuple[U64, U64]]:
        return self.table.iter_pages()


def open_table_base(recorded: AgglomerationTable, read: ReadMany, *, name: str) -> TableBase:
    """Open the table a labelmap's configuration names (metadata and page directories only)."""
    forward = open_sorted_table(recorded.forward)
    reverse = open_sorted_table(recorded.reverse) if recorded.reverse is not None else None
    table = TableAgglomeration(forward, reverse, body=recorded.body)
    if forward.num_rows != recorded.rows:
        raise LabelmapStateError(
            f"labelmap {name!r}: its agglomeration table {recorded.forward} has {forward.num_rows} rows, "
            f"{recorded.rows} when the labelmap was created: the table must not change under a labelmap "
            f"(its versions name the bodies it defined); put the original table back")
    stored: PagedTable | None = None
    if reverse is None:
        stored = PagedTable(REVERSE, read, what="agglomeration reverse table")
        if not stored.exists():
            raise LabelmapStateError(f"labelmap {name!r} has no body-sorted copy of its agglomeration table: its "
                                     f"creation was interrupted; create it again under another name")
    return TableBase(table, recorded, stored)

