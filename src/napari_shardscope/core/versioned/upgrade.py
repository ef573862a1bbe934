"""Repository format versions and the in-place upgrade of older ones.

Format 1 kept only one record per version and read all of them at open. Format 2 adds the records
that answer DAG questions on demand (:mod:`~napari_shardscope.core.versioned.dagindex`): the UUID
index, branch records, the child index and every version's ancestor set. They are all derived from
the version records, so the upgrade is a pure function of what format 1 stored, written in *one*
engine transaction together with the new format number: a crash (even SIGKILL) during it leaves
the store in format 1, untouched, or in format 2, complete. Handles of older libraries refuse a
store whose format is newer than theirs (they re-read the format record whenever the generation
moves, which the upgrade bumps), so none of them writes format-1 records into a format-2 store.
"""

from __future__ import annotations

import json
from typing import Any

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.dag import decode_versions
from napari_shardscope.core.versioned.dagcheck import build_index
from napari_shardscope.core.versioned.dagindex import JOURNAL_ALL
from napari_shardscope.core.versioned.engines.protocol import WriteTxn
from napari_shardscope.core.versioned.errors import StoreCorruptError

#: The repository format this library writes; older ones are upgraded when opened writable.
FORMAT_VERSION = 2


def upgrade_format(txn: WriteTxn, fmt: dict[str, Any]) -> None:
    """Bring a format-1 store to the current format inside ``txn`` (the caller holds the writer lock)."""
    found = int(fmt.get("version", 0))
    if found >= FORMAT_VERSION:
        return
    if found != 1:
        raise StoreCorruptError(f"repository format {found} is unknown (this library upgrades format 1)")
    versions = decode_versions([raw for _, raw in txn.scan(K.VERSION_PREFIX, K.next_prefix(K.VERSION_PREFIX))])
    if not versions:
        raise StoreCorruptError("repository has no versions")
    build_index(txn, versions)
    txn.put(K.FORMAT_KEY, json.dumps({**fmt, "version": FORMAT_VERSION}).encode())
    raw = txn.get(K.GENERATION_KEY)
    if raw is None or len(raw) != 8:
        raise StoreCorruptError("repository generation counter is missing")
    generation = K.unpack_u64(raw) + 1
    txn.put(K.GENERATION_KEY, K.pack_u64(generation))
    txn.put(K.journal_key(generation), JOURNAL_ALL)  # a handle that sees this generation forgets everything
