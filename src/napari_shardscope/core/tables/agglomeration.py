"""A pipeline's supervoxel → body table as the labelmap's base agglomeration, read where it lives.

:class:`TableAgglomeration` is the thin adapter between sorted tables and the labelmap: it answers
the labelmap's agglomeration questions (``lookup``, ``members``/``members_of``, ``max_id``,
``is_listed``/``listed_mask``, ``iter_pages``) from a forward table (supervoxel → body) and,
when there is one, its reverse (body → supervoxels). Nothing is copied: a plane's worth of
supervoxels costs the pages they fall in.

The labelmap's rules, kept here:

* ids are ``uint64``; 0 is background: it is never looked up and maps to 0;
* a supervoxel the table does not list is its own body (:meth:`lookup` returns it unchanged);
* :meth:`members_of` lists only what the table lists.

Example::

    from napari_shardscope.core.tables import open_sorted_table, TableAgglomeration
    forward = open_sorted_table("s3://lab/agglo/sv_to_body.zarr")
    reverse = open_sorted_table("s3://lab/agglo/body_to_sv.zarr")
    agglo = TableAgglomeration(forward, reverse)
    agglo.lookup(plane_of_supervoxels)   # same shape, bodies
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.tables.memory import memory_table
from napari_shardscope.core.tables.protocol import SortedTable

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]


class TableAgglomeration:
    """The base agglomeration from a supervoxel → body table (and optionally its body → supervoxel reverse).

    Parameters
    ----------
    forward
        A table keyed by supervoxel with a body column (unique keys).
    reverse
        The same rows keyed by body (:func:`~napari_shardscope.core.tables.write_reverse_table`).
        Without it, :meth:`members_of` scans the forward table (every page, bounded memory).
    body
        The forward table's body column (default: its only value column).
    """

    def __init__(self, forward: SortedTable, reverse: SortedTable | None = None, *, body: str | None = None) -> None:
        names = forward.schema.value_names
        if body is None:
            if len(names) != 1:
                raise ArgumentError(f"name the body column: the table has {list(names)}")
            body = names[0]
        dtype = forward.schema.dtype_of(body)
        if dtype.kind not in "ui":
            raise ArgumentError(f"the body column {body!r} is {dtype}, not an integer")
        if reverse is not None:
            rdt = reverse.schema.value_names
            if forward.schema.key not in rdt and len(rdt) != 1:
                raise ArgumentError(f"the reverse table's value columns {list(rdt)} do not name the supervoxel")
        self.forward = forward
        self.reverse = reverse
        self.body = body
        self._sv_column = (forward.schema.key if reverse is not None and forward.schema.key in
                           reverse.schema.value_names else (reverse.schema.value_names[0] if reverse else ""))
        self._max_body: int | None = None

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, int]) -> TableAgglomeration:
        """The small case: a dict ``{supervoxel: body}`` held in memory (its reverse built in memory too)."""
        bad = [k for k, v in mapping.items() if int(k) <= 0 or int(v) <= 0]
        if bad:
            raise ArgumentError(f"agglomeration ids must be positive (0 is background), got {bad[0]!r}")
        svs = np.fromiter((int(k) for k in mapping), dtype=np.uint64, count=len(mapping))
        bodies = np.fromiter((int(v) for v in mapping.values()), dtype=np.uint64, count=len(mapping))
        forward = memory_table(svs, {"body": bodies}, key="supervoxel")
        reverse = memory_table(bodies, {"supervoxel": svs}, key="body", unique=False)
        return cls(forward, reverse, body="body")

    @classmethod
    def open(cls, forward: str | os.PathLike[str], reverse: str | os.PathLike[str] | None = None,
             **options: Any) -> TableAgglomeration:
        """Open a forward table (and its reverse) by URL (``options`` go to ``open_sorted_table``)."""
        from napari_shardscope.core.tables.opening import open_sorted_table

        fwd = open_sorted_table(forward, **options)
        rev = open_sorted_table(reverse, **{k: v for k, v in options.items() if k not in ("key", "values")}) \
            if reverse is not None else None
        return cls(fwd, rev)

    # -- the labelmap's questions ---------------------------------------------------------------------------
    @property
    def listed(self) -> int:
        """How many supervoxels the table lists."""
        return self.forward.num_rows

    @property
    def max_id(self) -> int:
        """The largest supervoxel or body id the table names (0 when it names none): new ids start above it.

        The largest body comes from the writer's metadata, the reverse table's last key, or (a
        foreign table without either) one pass over the forward table, done once.
        """
        top_sv = self.forward.max_key or 0
        return max(top_sv, self.max_body)

    @property
    def max_body(self) -> int:
        if self._max_body is None:
            self._max_body = self._find_max_body()
        return self._max_body

    def _find_max_body(self) -> int:
        if self.reverse is not None:
            return self.reverse.max_key or 0
        recorded = getattr(self.forward, "value_max", None)
        if isinstance(recorded, Mapping) and recorded.get(self.body) is not None:
            return int(recorded[self.body])
        top = 0
        for page in self.forward.iter_pages([self.body]):
            col = page.values[self.body]
            if col.size:
                top = max(top, int(col.max()))
        return top

    def lookup(self, svs: npt.ArrayLike) -> U64:
        """The base body of each supervoxel (same shape; an unlisted id maps to itself, 0 to 0)."""
        arr = np.asarray(svs)
        flat = np.ascontiguousarray(arr, dtype=np.uint64).reshape(-1) if arr.size else np.zeros(0, np.uint64)
        out = flat.copy()
        nz = flat != 0
        if nz.all():
            values, found = self.forward.lookup(flat, [self.body])
            out[found] = values[self.body][found].astype(np.uint64)
        elif nz.any():
            values, found = self.forward.lookup(flat[nz], [self.body])
            sub = out[nz]
            sub[found] = values[self.body][found].astype(np.uint64)
            out[nz] = sub
        return out.reshape(arr.shape)

    def listed_mask(self, svs: npt.ArrayLike) -> Bools:
        """Which of ``svs`` the table lists (same shape)."""
        arr = np.asarray(svs)
        flat = np.ascontiguousarray(arr, dtype=np.uint64).reshape(-1) if arr.size else np.zeros(0, np.uint64)
        _, found = self.forward.lookup(flat, [])
        found &= flat != 0
        return found.reshape(arr.shape)

    def is_listed(self, svs: npt.ArrayLike) -> Bools:
        """Alias of :meth:`listed_mask` (the name the labelmap's body map uses)."""
        return self.listed_mask(svs)

    def members_of(self, bodies: npt.ArrayLike) -> U64:
        """The supervoxels the table lists under any of ``bodies``, sorted and distinct."""
        q = np.unique(np.asarray(bodies, dtype=np.uint64).reshape(-1))
        q = q[q != 0]
        if not q.size:
            return np.zeros(0, dtype=np.uint64)
        if self.reverse is not None:
            _, cols = self.reverse.select(q, [self._sv_column])
            return np.unique(cols[self._sv_column].astype(np.uint64))
        parts = []
        for page in self.forward.iter_pages([self.body]):
            hit = np.isin(page.values[self.body].astype(np.uint64), q)
            if hit.any():
                parts.append(page.keys[hit])
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)

    def members(self, body: int) -> U64:
        """The supervoxels the table lists under ``body``, sorted."""
        return self.members_of(np.asarray([int(body)], dtype=np.uint64))

    def iter_pages(self) -> Iterator[tuple[U64, U64]]:
        """``(supervoxels, bodies)`` of the whole table, ascending by supervoxel, page by page."""
        for page in self.forward.iter_pages([self.body]):
            yield page.keys, page.values[self.body].astype(np.uint64)
