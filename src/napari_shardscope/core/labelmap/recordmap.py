"""The body map of one version, read and edited as records (:mod:`.records`), never replayed.

:class:`MapReader` answers what views and queries ask — the body of each of a tile's supervoxels,
a body's root, name, size, member supervoxels and blocks — from the records it reads on demand
through a :class:`RecordSource` (a version's cache), the base agglomeration and the base label
index. :class:`MapTxn` is a reader with pending writes: an edit plans on it (each step sees the
previous steps), and its pending records become the edit's keys. Its operations cost the size of
the change:

* :meth:`MapTxn.merge` — per other body two root finds (O(log n) reads: the union-find is joined by
  size), one ring splice, two root records, one logical-parent record;
* :meth:`MapTxn.cleave` — the pages and member corrections of the supervoxels moved, two root records;
* :meth:`MapTxn.split_supervoxel` — three page entries, one root record.

Every operation also returns the :class:`~napari_shardscope.core.labelmap.bodymap.MapDelta` the
mutation log keeps (the logical change: a branch merge re-plays it on another version with
:meth:`MapTxn.apply_delta`, which rebuilds the sets an un-merge splits from the logical forest).

The reader is :mod:`.map_reader`'s and the transaction :mod:`.map_txn`'s; this module is their
common door (the labelmap, its edits and its branch merge import both from here).
"""

from __future__ import annotations

from napari_shardscope.core.labelmap.map_reader import MAX_DEPTH, MapReader, RecordSource, box_of, sum_blocks
from napari_shardscope.core.labelmap.map_txn import MapTxn

__all__ = ["MAX_DEPTH", "MapReader", "MapTxn", "RecordSource", "box_of", "sum_blocks"]
