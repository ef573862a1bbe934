"""Readers of the replay era's labelmap data (format 1), kept for the migration only.

Format 1 stored the base agglomeration and the base label-index summary as single zlib blobs
(``agglomeration``, ``index/summary``), one unversioned key per base supervoxel's index entry
(``index/sv/`` + id), and no body-map records: a version's map was the replay of its ancestry's
mutation logs. :mod:`.migrate` reads all of it once through these functions and writes format 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from napari_shardscope.core.encoding import inflate
from napari_shardscope.core.errors import FormatError
from napari_shardscope.core.labelmap.agglomeration import MappingSource
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.keys import AGGLOMERATION_KEY, BASE_INDEX_PREFIX, INDEX_META_KEY, INDEX_SUMMARY_KEY
from napari_shardscope.core.labelmap.label_index import ENTRY_DTYPE, BaseIndex, IndexSummary

#: The replay era's labelmap format.
LEGACY_FORMAT = 1


def decode_agglomeration(data: bytes) -> MappingSource | None:
    """The format-1 agglomeration blob: u64 count, then the sorted supervoxels and their bodies."""
    try:
        raw = inflate(data, key="agglomeration")
        n = int(np.frombuffer(raw, dtype="<u8", count=1)[0])
        if len(raw) != 8 + 16 * n:
            raise ValueError(f"{len(raw)} bytes for {n} entries")
        svs = np.frombuffer(raw, dtype="<u8", count=n, offset=8).astype(np.uint64)
        bodies = np.frombuffer(raw, dtype="<u8", count=n, offset=8 + 8 * n).astype(np.uint64)
    except (FormatError, ValueError) as exc:
        raise LabelmapStateError(f"stored (format 1) agglomeration is damaged ({exc})") from exc
    return MappingSource(svs, bodies) if n else None


def decode_summary(data: bytes) -> IndexSummary:
    """The format-1 index summary blob: count and max id, then the supervoxels and their totals."""
    try:
        raw = inflate(data, key="index/summary")
        n, max_id = (int(v) for v in np.frombuffer(raw, dtype="<u8", count=2))
        if len(raw) != 16 + 16 * n:
            raise ValueError(f"{len(raw)} bytes for {n} supervoxels")
        svs = np.frombuffer(raw, dtype="<u8", count=n, offset=16).astype(np.uint64)
        totals = np.frombuffer(raw, dtype="<u8", count=n, offset=16 + 8 * n).astype(np.uint64)
    except (FormatError, ValueError) as exc:
        raise LabelmapStateError(f"stored (format 1) label index summary is damaged ({exc})") from exc
    return IndexSummary(svs, totals, max_id)


def legacy_index(entries: Iterable[tuple[bytes, bytes]], meta: dict[str, Any], summary: IndexSummary) -> BaseIndex:
    """The format-1 base index as counted rows (what :func:`~.label_index.index_items` stores as tables).

    Every entry is decoded at once: the values concatenated and read as one record array.
    """
    keys: list[int] = []
    sizes: list[int] = []
    values: list[bytes] = []
    for key, value in entries:
        if len(key) != len(BASE_INDEX_PREFIX) + 8:
            continue
        if len(value) % ENTRY_DTYPE.itemsize:
            raise LabelmapStateError(f"format-1 index entry {key!r} is not a whole number of records")
        keys.append(int.from_bytes(key[len(BASE_INDEX_PREFIX):], "big"))
        sizes.append(len(value) // ENTRY_DTYPE.itemsize)
        values.append(value)
    rec = np.frombuffer(b"".join(values), dtype=ENTRY_DTYPE)
    lab = np.repeat(np.asarray(keys, dtype=np.uint64), sizes)
    blk = np.stack([rec["z"], rec["y"], rec["x"]], axis=1).astype(np.int64).reshape(-1, 3)
    cnt = rec["n"].astype(np.int64)
    order = np.argsort(lab, kind="stable")
    return BaseIndex(summary, lab[order], blk[order].reshape(-1, 3), cnt[order], int(meta.get("voxels", cnt.sum())))


def legacy_meta(raw: bytes | None) -> dict[str, Any] | None:
    """The format-1 index metadata (None when the index was never built)."""
    if raw is None:
        return None
    meta = json.loads(raw)
    return dict(meta) if isinstance(meta, dict) and int(meta.get("format", 1)) < 2 else None


__all__ = ["AGGLOMERATION_KEY", "BASE_INDEX_PREFIX", "INDEX_META_KEY", "INDEX_SUMMARY_KEY", "LEGACY_FORMAT",
           "decode_agglomeration", "decode_summary", "legacy_index", "legacy_meta"]
