"""The base of an annotation instance: imported synapses read where the import put them, never copied into versions.

An instance created with ``base=`` (:func:`~.base_import.import_annotation_base`) records in its
configuration two sorted tables (:mod:`napari_shardscope.core.tables`) written once at import:

* the **records** table, keyed by annotation id: ``z``, ``y``, ``x`` (int32 voxels of the labelmap's
  scale 0) and one column per property. A synapse base's kinds and links follow from the ids (``2S + 1``
  is the pre site of synapse ``S``, ``2S + 2`` its post site), so they are not stored; a point base's
  annotations are points;
* the **spatial** table, keyed by block code (:func:`block_code` of the labelmap's block grid, the
  grid of the versioned spatial index) with the ids of the annotations whose point lies in it.

Every version sees the base as if its annotations had been added with ``add`` at the root; the
versioned records hold only edits over it, exactly as the labelmap's versions hold only edits over
its base segmentation and agglomeration table. A record key present in the store wins over the
base: an edited base annotation has its whole record there; a deleted one has a *tombstone* (an
empty value, :data:`TOMBSTONE`); undoing either restores the key's absence and so the base.

A base record reads as :data:`UNKNOWN_SUPERVOXEL`, which exists at no version, so a query by body
reads the voxel under such a point as it does for a supervoxel a split retired. Bases imported with
their synapse index also keep each site's supervoxel at import (records column ``sv``) and a third
table, the **synapse index** (keyed by supervoxel: partner supervoxel, direction, count), which
``connections(body)`` reads for the body's supervoxels only (:mod:`.connectome`); older bases have
neither and are recounted. Bases imported since also have a fourth table, the **sites** (keyed by the
supervoxel at import: the ids of the annotations under it), which ``synapses(body)`` reads for the
body's supervoxels only; bases without it are read through the body's blocks, as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.errors import AnnotationRecordError
from napari_shardscope.core.annotation.model import (
    Annotation,
    PropertyValue,
    Relationship,
    Stored,
)
from napari_shardscope.core.annotation.sv_rows import SvRows
from napari_shardscope.core.tables import SortedTable, open_sorted_table

U64 = npt.NDArray[np.uint64]
#: The value of a record key that deletes a base annotation at a version.
TOMBSTONE = b""
#: The supervoxel a base record reads with: no version has it, so its body is read at its point.
UNKNOWN_SUPERVOXEL = 2**64 - 1
#: Bits per block coordinate in a block code (2²¹ blocks per axis: far beyond any labelmap's grid).
BLOCK_BITS = 21
MAX_BLOCKS = 1 << BLOCK_BITS
#: The records table's fixed columns (properties follow, named ``p0``, ``p1``, ...).
FIXED_COLUMNS = ("z", "y", "x")
#: What a base holds: synapses (pre and post sites, ids 2S+1 and 2S+2) or points.
LAYOUTS = ("synapses", "points")


def block_code(bz: npt.ArrayLike, by: npt.ArrayLike, bx: npt.ArrayLike) -> U64:
    """Block coordinates packed into one u64, ordered as the versioned spatial keys are (z, then y, then x)."""
    z, y, x = (np.asarray(v, dtype=np.uint64) for v in (bz, by, bx))
    return (z << np.uint64(2 * BLOCK_BITS)) | (y << np.uint64(BLOCK_BITS)) | x


@dataclass(frozen=True)
class BaseProperty:
    """One property column of the records table: its name, column, type and which kinds carry it."""

    name: str
    column: str
    type: str  # "int", "float", "bool" or "enum"
    kinds: tuple[str, ...]
    labels: Mapping[str, str] | None = None  # enum: stored value (as str) → label

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "column": self.column, "type": self.type, "kinds": list(self.kinds)}
        if self.labels is not None:
            out["labels"] = dict(self.labels)
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BaseProperty:
        labels = doc.get("labels")
        return cls(str(doc["name"]), str(doc["column"]), str(doc["type"]), tuple(str(k) for k in doc["kinds"]),
                   None if labels is None else {str(k): str(v) for k, v in labels.items()})


@dataclass(frozen=True)
class BaseConfig:
    """What an instance's configuration records of its base (``config["base"]``)."""

    records: str
    spatial: str
    rows: int
    max_id: int
    block: tuple[int, int, int]
    source: str
    layout: str
    properties: tuple[BaseProperty, ...] = ()
    #: The synapse index table (per supervoxel, partners summed), None in bases imported without it.
    synapses: str | None = None
    #: Whether the records table has the ``sv`` column (each site's supervoxel at import).
    supervoxels: bool = False
    synapse_rows: int = 0
    #: The ids by supervoxel at import (key ``sv``, column ``id``), None in bases imported without it.
    sites: str | None = None
    site_rows: int = 0

    def to_json(self) -> dict[str, Any]:
        # the keys added later are written only when set: a base without them reads as before, and code
        # that predates them ignores them (it recounts a base's connections from the records)
        out = {"records": self.records, "spatial": self.spatial, "rows": self.rows, "max_id": self.max_id,
               "block": list(self.block), "source": self.source, "layout": self.layout,
               "properties": [p.to_json() for p in self.properties]}
        if self.supervoxels:
            out["supervoxels"] = True
        if self.synapses is not None:
            out["synapses"] = self.synapses
            out["synapse_rows"] = self.synapse_rows
        if self.sites is not None:
            out["sites"] = self.sites
            out["site_rows"] = self.site_rows
        return out

    @classmethod
    def from_json(cls, doc: Any, *, name: str) -> BaseConfig:
        try:
            block = tuple(int(v) for v in doc["block"])
            if len(block) != 3:
                raise ValueError("block is not three integers")
            if doc["layout"] not in LAYOUTS:
                raise ValueError(f"layout is not one of {LAYOUTS}")
            syn = doc.get("synapses")
            sites = doc.get("sites")
            return cls(str(doc["records"]), str(doc["spatial"]), int(doc["rows"]), int(doc["max_id"]),
                       (block[0], block[1], block[2]), str(doc["source"]), str(doc["layout"]),
                       tuple(BaseProperty.from_json(p) for p in doc.get("properties", [])),
                       None if syn is None else str(syn), bool(doc.get("supervoxels", False)),
                       int(doc.get("synapse_rows", 0)), None if sites is None else str(sites),
                       int(doc.get("site_rows", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AnnotationRecordError(f"annotation instance {name!r} has a malformed base record ({exc}): "
                                        f"{doc!r}") from exc


class AnnotationBase:
    """The imported annotations of an instance, read page by page from its two tables.

    Lookups are vectorised (pass every id or block a query needs at once): each table page they
    fall in is fetched once, and pages are cached by the tables' bounded LRU.
    """

    def __init__(self, config: BaseConfig, records: SortedTable, spatial: SortedTable,
                 synapses: SortedTable | None = None, sites: SortedTable | None = None) -> None:
        self.config = config
        self.records = records
        self.spatial = spatial
        self.synapses = synapses
        self.sites = sites
        self._sv_rows = SvRows(self._read_synapse_rows)

    @property
    def sites_indexed(self) -> bool:
        """Whether the base has its ids by supervoxel (imported with them): ``synapses(body)`` reads those."""
        return self.sites is not None and self.config.supervoxels

    def ids_of_supervoxels(self, svs: npt.ArrayLike) -> U64:
        """Ids of the base annotations whose supervoxel at import is one of ``svs`` (the pages holding them)."""
        assert self.sites is not None
        _, cols = self.sites.select(np.asarray(svs, dtype=np.uint64).reshape(-1), ["id"])
        return np.asarray(cols["id"], dtype=np.uint64)

    @property
    def indexed(self) -> bool:
        """Whether the base has its synapse index and supervoxels (imported with them)."""
        return self.synapses is not None and self.config.supervoxels

    def supervoxels(self, ids: npt.ArrayLike) -> tuple[U64, npt.NDArray[np.bool_]]:
        """The supervoxel each of ``ids`` had at import, and which of them the base holds."""
        cols, found = self.records.lookup(np.asarray(ids, dtype=np.uint64).reshape(-1), ["sv"])
        return np.asarray(cols["sv"], dtype=np.uint64), found

    def synapse_rows(self, svs: npt.ArrayLike) -> tuple[U64, U64, npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The synapse index rows of supervoxels ``svs`` (distinct, sorted): (sv, partner sv, direction 0 out /
        1 in, count), sorted by supervoxel; kept per supervoxel (:mod:`.sv_rows`)."""
        return self._sv_rows.rows(np.unique(np.asarray(svs, dtype=np.uint64).reshape(-1)))

    def _read_synapse_rows(self, svs: U64) -> tuple[U64, U64, npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        assert self.synapses is not None
        keys, cols = self.synapses.select(svs, ["partner", "dir", "n"])
        return (np.asarray(keys, dtype=np.uint64), np.asarray(cols["partner"], dtype=np.uint64),
                np.asarray(cols["dir"], dtype=np.uint8), np.asarray(cols["n"], dtype=np.int64))

    @property
    def max_id(self) -> int:
        return self.config.max_id

    def __len__(self) -> int:
        return self.config.rows

    def stored(self, ids: npt.ArrayLike) -> dict[int, Stored]:
        """The base records of those of ``ids`` the base holds, by id."""
        q = np.unique(np.asarray(ids, dtype=np.uint64).reshape(-1))
        if not q.size:
            return {}
        cols, found = self.records.lookup(q)
        keep = np.flatnonzero(found)
        return self._decode(q[keep], {c: np.asarray(v)[keep] for c, v in cols.items()})

    def _decode(self, ids: U64, cols: Mapping[str, npt.NDArray[Any]]) -> dict[int, Stored]:
        """Records from columns (one Python object per annotation: what a query returns)."""
        zs, ys, xs = cols["z"].tolist(), cols["y"].tolist(), cols["x"].tolist()
        props = [(p, cols[p.column].tolist(), set(p.kinds)) for p in self.config.properties]
        synapses = self.config.layout == "synapses"
        out: dict[int, Stored] = {}
        for i, aid in enumerate(ids.tolist()):
            kind = ("pre" if aid % 2 else "post") if synapses else "point"
            values: dict[str, PropertyValue] = {}
            for p, col, carried in props:
                if kind not in carried:
                    continue
                v = col[i]
                if p.type == "float":
                    if v != v:  # NaN: the table had no value here
                        continue
                    values[p.name] = float(v)
                elif p.type == "bool":
                    values[p.name] = bool(v)
                elif p.type == "enum" and p.labels is not None:
                    values[p.name] = p.labels.get(str(v), v)
                else:
                    values[p.name] = int(v)
            rels: tuple[Relationship, ...] = ()
            if synapses:
                rels = (Relationship("PreSynTo", aid + 1),) if kind == "pre" else (Relationship("PostSynTo", aid - 1),)
            a = Annotation(aid, kind, (zs[i], ys[i], xs[i]), (), dict(sorted(values.items())), rels)
            out[aid] = Stored(a, UNKNOWN_SUPERVOXEL)
        return out

    def ids_in_blocks(self, blocks: npt.ArrayLike) -> U64:
        """Ids of the base annotations in these blocks (``(n, 3)`` block coordinates z, y, x)."""
        b = np.asarray(blocks, dtype=np.int64).reshape(-1, 3)
        b = b[(b >= 0).all(axis=1) & (b < MAX_BLOCKS).all(axis=1)]
        if not b.size:
            return np.zeros(0, dtype=np.uint64)
        _, cols = self.spatial.select(block_code(b[:, 0], b[:, 1], b[:, 2]), ["id"])
        return np.asarray(cols["id"], dtype=np.uint64)

    def ids_in_block_box(self, b0: Sequence[int], b1: Sequence[int]) -> U64:
        """Ids of the base annotations in the blocks ``b0..b1`` (inclusive): one range read per row of blocks."""
        parts: list[U64] = []
        for bz in range(b0[0], b1[0] + 1):
            for by in range(b0[1], b1[1] + 1):
                lo = int(block_code(bz, by, b0[2]))
                hi = int(block_code(bz, by, b1[2])) + 1
                parts.extend(np.asarray(cols["id"], dtype=np.uint64) for _, cols in self.spatial.range(lo, hi, ["id"]))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def iter_stored(self) -> Iterator[dict[int, Stored]]:
        """Every base record, a page at a time, by id."""
        for page in self.records.iter_pages():
            yield self._decode(page.keys, page.values)


def open_base(config: BaseConfig, *, name: str) -> AnnotationBase:
    """Open the tables an instance's base names (metadata and page directories only), checking their counts."""
    records = open_sorted_table(config.records)
    spatial = open_sorted_table(config.spatial)
    if records.num_rows != config.rows or spatial.num_rows != config.rows:
        raise AnnotationRecordError(
            f"annotation instance {name!r}: its base tables hold {records.num_rows} and {spatial.num_rows} rows, "
            f"{config.rows} when they were imported: a base must not change under an instance (its versions "
            f"edit the annotations it defined); put the imported tables back")
    missing = {p.column for p in config.properties} | set(FIXED_COLUMNS)
    missing -= set(records.schema.value_names)
    if missing:
        raise AnnotationRecordError(f"annotation instance {name!r}: its base table {config.records} lacks the "
                                    f"columns {sorted(missing)}")
    synapses = _open_index(name, "synapse index", config.synapses, config.synapse_rows)
    sites = _open_index(name, "supervoxel index", config.sites, config.site_rows)
    if config.supervoxels and "sv" not in records.schema.value_names:
        raise AnnotationRecordError(f"annotation instance {name!r}: its base table {config.records} lacks the "
                                    f"column 'sv'")
    return AnnotationBase(config, records, spatial, synapses, sites)



def _open_index(name: str, what: str, url: str | None, rows: int) -> SortedTable | None:
    """One of a base's optional index tables, refused when its row count is not the imported one."""
    if url is None:
        return None
    table = open_sorted_table(url)
    if table.num_rows != rows:
        raise AnnotationRecordError(
            f"annotation instance {name!r}: its base's {what} {url} holds {table.num_rows} rows, {rows} when it "
            f"was imported: a base must not change under an instance; put the imported tables back")
    return table

__all__ = ["MAX_BLOCKS", "TOMBSTONE", "UNKNOWN_SUPERVOXEL", "AnnotationBase", "BaseConfig", "BaseProperty",
           "block_code", "open_base"]
