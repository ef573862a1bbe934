"""Repositories as format 1 stored them, for the upgrade tests.

Format 2 only *added* records (UUID index, branch records, child index, ancestor pages, journal) and
bumped the format number; the version records, data, notes and logs are stored as format 1 stored
them. So removing the added records and writing format 1 back gives exactly the store an older
library made (checked once by hand against the library at 0a4bfea: same keys, same bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.engines import open_engine
from napari_shardscope.core.versioned.repository import MARKER_FILE

FORMAT_2_PREFIXES = (K.UUID_PREFIX, K.BRANCH_PREFIX, K.CHILD_PREFIX, K.ANCESTOR_PREFIX, K.ANCESTOR_PAGE_PREFIX,
                     K.JOURNAL_PREFIX)


def engine_of(path: Path) -> str:
    return str(json.loads((path / MARKER_FILE).read_text())["engine"])


def downgrade_to_format_1(path: Path) -> None:
    """Rewrite the (closed) repository at ``path`` as format 1 stored it."""
    kv = open_engine(engine_of(path), path, create=False, durable=True)
    try:
        with kv.write() as txn:
            for prefix in FORMAT_2_PREFIXES:
                for key in list(txn.scan_keys(prefix, K.next_prefix(prefix))):
                    txn.delete(key)
            fmt = json.loads(txn.get(K.FORMAT_KEY) or b"{}")
            txn.put(K.FORMAT_KEY, json.dumps({**fmt, "version": 1}).encode())
    finally:
        kv.close()
    marker = json.loads((path / MARKER_FILE).read_text())
    (path / MARKER_FILE).write_text(json.dumps({**marker, "version": 1}, indent=2) + "\n")


def stored_format(path: Path) -> tuple[int, int]:
    """(format number, how many format-2 records) in the store at ``path``, read without the repository code."""
    kv = open_engine(engine_of(path), path, create=False, durable=True)
    try:
        with kv.read() as txn:
            version = int(json.loads(txn.get(K.FORMAT_KEY) or b"{}")["version"])
            extra = sum(1 for p in FORMAT_2_PREFIXES for _ in txn.scan_keys(p, K.next_prefix(p)))
    finally:
        kv.close()
    return version, extra
