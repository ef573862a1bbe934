"""Byte access: one small interface over local files and remote object stores — the door to bytes.

The format layer (shard indexes, minishard indexes, block headers) needs only a few operations:
read a key, read a byte range of a key, know a key's size, list keys, write a key atomically.
Keeping the interface this small is what lets index lookups read only the bytes they need — a
shard index is ``16 * 2**minishard_bits`` bytes at the head of a file that may be gigabytes.

* :mod:`.url` — the one URL grammar (:func:`parse_url`): local paths, ``file://``, ``http(s)://``,
  ``gs://``, ``s3://``, Neuroglancer's format prefixes and pointing at a metadata file;
* :class:`LocalByteStore` — ``os.pread`` on local files; writes go to a temporary file in the
  same directory, are fsynced and renamed over the target, so a crash never leaves a half-written
  file where a good one was;
* :class:`TensorStoreByteStore` — TensorStore's kvstore drivers, which issue real HTTP range
  requests for byte ranges.

Every store counts the bytes it returned (:attr:`ByteStore.stats`), so ``shardscope inspect`` can
report how little it read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from napari_shardscope.core.bytestore.containment import (
    UnreadableEntry,
    check_level_tree,
    follow_symlinks,
    follow_symlinks_enabled,
    set_follow_symlinks,
)
from napari_shardscope.core.bytestore.local import LocalByteStore, write_file_atomic
from napari_shardscope.core.bytestore.protocol import (
    ByteStore,
    ReadStats,
    join_key,
    read_bounded,
    read_bounded_many,
    read_document,
    read_documents,
    read_ranges,
    read_suffixes,
    write_many,
)
from napari_shardscope.core.bytestore.remote import TensorStoreByteStore
from napari_shardscope.core.bytestore.url import Location, is_remote, parse_url

__all__ = [
    "ByteStore",
    "LocalByteStore",
    "Location",
    "ReadStats",
    "TensorStoreByteStore",
    "UnreadableEntry",
    "check_level_tree",
    "follow_symlinks",
    "follow_symlinks_enabled",
    "is_remote",
    "join_key",
    "list_unreadable",
    "open_store",
    "parse_url",
    "read_bounded",
    "read_bounded_many",
    "read_document",
    "read_documents",
    "read_ranges",
    "read_suffixes",
    "set_follow_symlinks",
    "write_file_atomic",
    "write_many",
]


def list_unreadable(store: ByteStore, prefix: str,
                    is_data_key: Callable[[str], bool] | None = None) -> list[UnreadableEntry]:
    """Entries below ``prefix`` that are there but cannot be read as data files: dangling links, link loops,
    links out of the root, FIFOs, sockets, devices, and directories where ``is_data_key`` (given the key
    below ``prefix``) expects a data file. Local stores only (a bucket has none of them): ``[]`` elsewhere.
    """
    scan = getattr(store, "unreadable_entries", None)
    return list(scan(prefix, is_data_key)) if scan is not None else []


def open_store(url: str | os.PathLike[str] | Location, context: Any = None) -> ByteStore:
    """Open the byte store rooted at ``url`` (anything :func:`parse_url` accepts, or a :class:`Location`).

    Local paths and ``file://`` URLs use :class:`LocalByteStore` (``pread``, no TensorStore
    overhead); ``gs://``, ``s3://`` and ``http(s)://`` go through TensorStore's kvstore. A format
    prefix (``precomputed://`` …) is accepted and ignored here: the store is the same.
    """
    loc = url if isinstance(url, Location) else parse_url(url)
    if loc.is_local:
        return LocalByteStore(loc.kvstore["path"])
    return TensorStoreByteStore(loc.kvstore, context=context, url=loc.url)
