"""The base agglomeration behind one small Protocol: the pipeline's supervoxel → body table.

A segmentation pipeline ships, next to the supervoxel volume, a table naming the body of every
supervoxel (FlyWire's is 10⁹ rows). The labelmap asks it three things, always for many ids at once:
the base body of each of a tile's supervoxels (:meth:`AgglomerationSource.lookup`), the supervoxels
of some bodies (:meth:`AgglomerationSource.members_of`, from a reverse, body-sorted table), and its
largest id (new ids start above it). Everything here is vectorised and page-oriented so that a
source may live anywhere — in memory, in the repository (:class:`StoredAgglomeration`), or in the
pipeline's own files on a bucket (zarr v3, Parquet or a sharded lookup, read page by page through
the byte store; an implementation need only provide the methods below).

Rules every source follows:

* ids are ``uint64``; 0 is background and never listed;
* a supervoxel the table does not list is its own body (:meth:`lookup` returns it unchanged);
* :meth:`members_of` lists only what the table lists — the labelmap adds the rule above itself (an
  unlisted id is the one supervoxel of its own body) and asks the label index which supervoxels exist;
* :meth:`iter_pages` yields the whole table sorted by supervoxel, a bounded page at a time (what
  copying a table into the repository and building the per-body label index read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ArgumentError, MetadataError
from napari_shardscope.core.json_document import load_json_object
from napari_shardscope.core.labelmap.paged import PagedTable, ReadMany, write_table
from napari_shardscope.core.tables.reverse import sort_by_ranges

U64 = npt.NDArray[np.uint64]
Bools = npt.NDArray[np.bool_]

#: Unversioned keys of a stored agglomeration: its metadata and two tables.
META_KEY = b"agglomeration/meta"
FORWARD = b"agglomeration/fwd"
REVERSE = b"agglomeration/rev"
FORWARD_DTYPE = np.dtype([("sv", "<u8"), ("body", "<u8")])
REVERSE_DTYPE = np.dtype([("body", "<u8"), ("sv", "<u8")])
#: Rows sorted in memory at once when the reverse table is built; larger tables go through
#: body-range partitions on disk.
SORT_IN_MEMORY = 1 << 24


@runtime_checkable
class AgglomerationSource(Protocol):
    """A supervoxel → body table, read by many ids at once (see the module docstring for the rules)."""

    @property
    def max_id(self) -> int:
        """The largest supervoxel or body id the table names (0 when it names none)."""
        ...

    @property
    def listed(self) -> int:
        """How many supervoxels the table lists."""
        ...

    def lookup(self, svs: npt.ArrayLike) -> U64:
        """The base body of each supervoxel (same shape; an unlisted id maps to itself, 0 to 0)."""
        ...

    def listed_mask(self, svs: npt.ArrayLike) -> Bools:
        """Which of ``svs`` the table lists."""
        ...

    def members_of(self, bodies: npt.ArrayLike) -> U64:
        """The supervoxels the table lists under any of ``bodies``, sorted and distinct."""
        ...

    def iter_pages(self) -> Iterator[tuple[U64, U64]]:
        """``(supervoxels, bodies)`` of the whole table, ascending by supervoxel, page by page."""
        ...


class IdentityAgglomeration:
    """No table: every supervoxel is its own body."""

    max_id = 0
    listed = 0

    def lookup(self, svs: npt.ArrayLike) -> U64:
        return np.array(svs, dtype=np.uint64, copy=True)

    def listed_mask(self, svs: npt.ArrayLike) -> Bools:
        return np.zeros(np.shape(svs), dtype=bool)

    def members_of(self, bodies: npt.ArrayLike) -> U64:
        return np.zeros(0, dtype=np.uint64)

    def iter_pages(self) -> Iterator[tuple[U64, U64]]:
        return iter(())


class StoredAgglomeration:
    """A table copied into the instance's unversioned area as two paged tables (forward and reverse)."""

    def __init__(self, read: ReadMany, meta: Mapping[str, Any]) -> None:
        self._forward = PagedTable(FORWARD, read, what="agglomeration table")
        self._reverse = PagedTable(REVERSE, read, what="agglomeration reverse table")
        self._max_id = int(meta.get("max_id", 0))
        self._listed = int(meta.get("listed", 0))

    @property
    def max_id(self) -> int:
        return self._max_id

    @property
    def listed(self) -> int:
        return self._listed

    def lookup(self, svs: npt.ArrayLike) -> U64:
        arr = np.asarray(svs, dtype=np.uint64)
        flat = arr.reshape(-1)
        out = flat.copy()
        found, rows = self._forward.find(flat)
        out[found] = rows["body"][found]
        return out.reshape(arr.shape)

    def listed_mask(self, svs: npt.ArrayLike) -> Bools:
        arr = np.asarray(svs, dtype=np.uint64)
        return self._forward.find(arr.reshape(-1))[0].reshape(arr.shape)

    def members_of(self, bodies: npt.ArrayLike) -> U64:
        rows = self._reverse.select(bodies)
        return np.unique(rows["sv"]).astype(np.uint64)

    def iter_pages(self) -> Iterator[tuple[U64, U64]]:
        for rows in self._forward.iter_pages():
            yield rows["sv"].astype(np.uint64), rows["body"].astype(np.uint64)


def open_stored_agglomeration(read: ReadMany) -> StoredAgglomeration | None:
    """The instance's stored table (None when it has none)."""
    raw = read([META_KEY])[0]
    if raw is None:
        return None
    try:
        meta = load_json_object(raw, key=META_KEY.decode())
    except MetadataError as exc:
        from napari_shardscope.core.labelmap.errors import LabelmapStateError

        raise LabelmapStateError(f"stored agglomeration metadata is damaged ({exc})") from exc
    return StoredAgglomeration(read, meta)


def check_ids(svs: U64, bodies: U64) -> None:
    """Refuse id 0 (background) in a table."""
    if (svs == 0).any() or (bodies == 0).any():
        raise ArgumentError("agglomeration ids must be positive (0 is background)")


def stored_items(source: AgglomerationSource, *, scratch: str | os.PathLike[str] | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
    """The unversioned items storing ``source`` (forward table, reverse table, then the metadata).

    The forward table streams from :meth:`AgglomerationSource.iter_pages`; the reverse one is sorted
    by body in memory up to :data:`SORT_IN_MEMORY` rows, through body-range partitions on disk above.
    """
    listed = 0
    max_sv = max_body = 0
    previous: int | None = None

    def forward() -> Iterator[npt.NDArray[Any]]:
        nonlocal listed, max_sv, max_body, previous
        for svs, bodies in source.iter_pages():
            svs = np.asarray(svs, dtype=np.uint64)
            bodies = np.asarray(bodies, dtype=np.uint64)
            check_ids(svs, bodies)
            rows = np.zeros(svs.size, dtype=FORWARD_DTYPE)
            rows["sv"], rows["body"] = svs, bodies
            listed += int(svs.size)
            if svs.size:
                max_sv = max(max_sv, int(svs.max()))
                max_body = max(max_body, int(bodies.max()))
                previous = int(svs[-1])
            yield rows

    yield from write_table(FORWARD, FORWARD_DTYPE, "sv", forward(), unique=True)
    yield from write_table(REVERSE, REVERSE_DTYPE, "body", reverse_rows(source, listed, max_body, scratch))
    meta = {"format": 1, "listed": listed, "max_id": max(max_sv, max_body), "max_sv": max_sv, "max_body": max_body}
    yield META_KEY, json.dumps(meta).encode()


def reverse_rows(source: AgglomerationSource, listed: int, max_body: int,
                  scratch: str | os.PathLike[str] | None) -> Iterator[npt.NDArray[Any]]:
    """The table's rows sorted by (body, supervoxel), in bounded parts."""
    if listed <= SORT_IN_MEMORY:
        parts = [(s, b) for s, b in source.iter_pages()]
        if not parts:
            return
        svs = np.concatenate([p[0] for p in parts]).astype(np.uint64)
        bodies = np.concatenate([p[1] for p in parts]).astype(np.uint64)
        order = np.lexsort((svs, bodies))
        rows = np.zeros(svs.size, dtype=REVERSE_DTYPE)
        rows["body"], rows["sv"] = bodies[order], svs[order]
        for start in range(0, rows.size, SORT_IN_MEMORY // 4):
            yield rows[start:start + SORT_IN_MEMORY // 4]
        return
    n_parts = -(-listed // (SORT_IN_MEMORY // 2))
    edges = np.linspace(0, max_body + 1, n_parts + 1)[1:-1].astype(np.uint64)

    def page_rows() -> Iterator[np.ndarray[Any, Any]]:
        for svs, bodies in source.iter_pages():
            rows = np.zeros(len(svs), dtype=REVERSE_DTYPE)
            rows["body"], rows["sv"] = bodies, svs
            yield rows

    for part in sort_by_ranges(page_rows(), edges, ("body", "sv"), scratch=scratch,
                               prefix="shardscope-agglomeration-"):
        yield part if part.size else np.zeros(0, dtype=REVERSE_DTYPE)


class MappingSource:
    """An in-memory table from sorted arrays (a dict or a bodies JSON, the small case)."""

    def __init__(self, svs: U64, bodies: U64, page: int = 1 << 20) -> None:
        order = np.argsort(svs, kind="stable")
        self.svs = np.asarray(svs, dtype=np.uint64)[order]
        self.bodies = np.asarray(bodies, dtype=np.uint64)[order]
        if self.svs.size > 1 and (self.svs[1:] == self.svs[:-1]).any():
            raise ArgumentError("agglomeration lists a supervoxel twice")
        check_ids(self.svs, self.bodies)
        self._page = page
        self._by_body: tuple[U64, U64] | None = None

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, int]) -> MappingSource:
        if any(int(k) <= 0 or int(v) <= 0 for k, v in mapping.items()):
            raise ArgumentError("agglomeration ids must be positive (0 is background)")
        svs = np.fromiter((int(k) for k in mapping), dtype=np.uint64, count=len(mapping))
        bodies = np.fromiter((int(v) for v in mapping.values()), dtype=np.uint64, count=len(mapping))
        return cls(svs, bodies)

    @property
    def max_id(self) -> int:
        return int(max(self.svs.max(), self.bodies.max())) if self.svs.size else 0

    @property
    def listed(self) -> int:
        return int(self.svs.size)

    def lookup(self, svs: npt.ArrayLike) -> U64:
        arr = np.asarray(svs, dtype=np.uint64)
        out = arr.astype(np.uint64, copy=True)
        if self.svs.size and arr.size:
            pos = np.minimum(np.searchsorted(self.svs, arr), self.svs.size - 1)
            hit = self.svs[pos] == arr
            out[hit] = self.bodies[pos[hit]]
        return out

    def listed_mask(self, svs: npt.ArrayLike) -> Bools:
        arr = np.asarray(svs, dtype=np.uint64)
        if not self.svs.size:
            return np.zeros(arr.shape, dtype=bool)
        pos = np.minimum(np.searchsorted(self.svs, arr), self.svs.size - 1)
        hit: Bools = self.svs[pos] == arr
        return hit

    def members_of(self, bodies: npt.ArrayLike) -> U64:
        if self._by_body is None:
            order = np.lexsort((self.svs, self.bodies))
            self._by_body = (self.bodies[order], self.svs[order])
        keys, svs = self._by_body
        q = np.unique(np.asarray(bodies, dtype=np.uint64))
        lo = np.searchsorted(keys, q, side="left")
        hi = np.searchsorted(keys, q, side="right")
        if not q.size or not int((hi - lo).sum()):
            return np.zeros(0, dtype=np.uint64)
        return np.unique(np.concatenate([svs[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]))

    def iter_pages(self) -> Iterator[tuple[U64, U64]]:
        for start in range(0, self.svs.size, self._page):
            yield self.svs[start:start + self._page], self.bodies[start:start + self._page]


def agglomeration_source(source: Any) -> AgglomerationSource | None:
    """A source from what ``create_labelmap`` accepts: None, a mapping, a bodies JSON path, or a source."""
    if source is None:
        return None
    if isinstance(source, Mapping):
        mapping = {int(k): int(v) for k, v in source.items()}
        return MappingSource.from_mapping(mapping) if mapping else None
    if isinstance(source, str | os.PathLike):
        from napari_shardscope.core.sample_data import load_body_map

        mapping = load_body_map(Path(source))
        return MappingSource.from_mapping(mapping) if mapping else None
    if isinstance(source, AgglomerationSource):
        return source
    raise ArgumentError(f"an agglomeration must be a mapping, a bodies JSON path or an AgglomerationSource, "
                        f"got {type(source).__name__}")


def sorted_unique(values: Sequence[int] | npt.ArrayLike) -> U64:
    return np.unique(np.asarray(values, dtype=np.uint64))
