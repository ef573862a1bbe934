"""``open_sorted_table(url)``: the one door to a sorted table, whatever its format and wherever it lives.

The format is found from what is there — ``zarr.json`` (Zarr v3), ``info`` of type
``shardscope_sorted_table`` (the sharded lookup), a ``.parquet`` file, or a directory of Parquet
files (our manifest, or a listing) — with the metadata documents read together (one round trip on
a bucket). Local paths, ``file://``, ``http(s)://``, ``s3://`` and ``gs://`` all go through the one
byte store (:func:`napari_shardscope.core.bytestore.open_store`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from napari_shardscope.core.bytestore import ByteStore, open_store, parse_url
from napari_shardscope.core.errors import ArgumentError, StoreError
from napari_shardscope.core.tables.errors import NotATableError
from napari_shardscope.core.tables.paged import DEFAULT_BATCH_BYTES, DEFAULT_CACHE_BYTES, PagedTable
from napari_shardscope.core.tables.protocol import PageSource

READ_FORMATS = ("zarr3", "parquet", "precomputed")


def _store(url: str, context: Any) -> ByteStore:
    loc = parse_url(url)
    if loc.is_local:
        return open_store(loc)
    from napari_shardscope.core.bytestore.context import shared_context

    return open_store(loc, context if context is not None else shared_context())


def open_sorted_table(url: str | os.PathLike[str], *, format: str | None = None, key: str | None = None,
                      values: Sequence[str] | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                      batch_bytes: int = DEFAULT_BATCH_BYTES, directory_cache: str | os.PathLike[str] | None = None,
                      context: Any = None) -> PagedTable:
    """Open the sorted table at ``url``; only its metadata and page directory are read.

    Parameters
    ----------
    url
        A table written by :func:`~napari_shardscope.core.tables.write_sorted_table`, or a pipeline's:
        a Zarr v3 group of 1-D arrays or a 2-D ``[rows, columns]`` array, a Parquet file or a
        directory of them.
    format
        ``"zarr3"``, ``"parquet"`` or ``"precomputed"`` to skip detection.
    key, values
        The key column and value columns of a table not written here (ours name their own).
    cache_bytes, batch_bytes
        Decoded pages kept between calls; decoded pages one call holds at once.
    directory_cache
        A local file keeping the page directory of a Zarr table that has none (built by one pass
        over its key column on first open).

    Raises
    ------
    NotATableError
        When nothing there is a table (names the URL).
    """
    text = os.fspath(url)
    if format is not None and format not in READ_FORMATS:
        raise ArgumentError(f"unknown table format {format!r}; use one of {list(READ_FORMATS)}")
    source: PageSource
    if text.rstrip("/").endswith((".parquet", ".pq")) and format in (None, "parquet"):
        from napari_shardscope.core.tables.parquet_table import open_parquet_source, split_file_url

        root, name = split_file_url(text)
        source = open_parquet_source(_store(root, context), text, [name], key=key, values=values)
        return PagedTable(source, cache_bytes=cache_bytes, batch_bytes=batch_bytes)
    store = _store(text, context)
    docs: dict[str, bytes | None] = {"zarr.json": None, "info": None}
    if format is None:
        from napari_shardscope.core.tables.documents import read_documents

        docs = dict(zip(docs, read_documents(store, list(docs)), strict=True))
        format = "zarr3" if docs["zarr.json"] is not None else "precomputed" if docs["info"] is not None \
            else "parquet"
    if format == "zarr3":
        from napari_shardscope.core.tables.zarr_table import open_zarr_source

        source = open_zarr_source(store, text, key=key, values=values, directory_cache=directory_cache,
                                  root_document=docs["zarr.json"])
    elif format == "precomputed":
        from napari_shardscope.core.tables.sharded_table import open_sharded_source

        source = open_sharded_source(store, text, docs["info"])
    else:
        from napari_shardscope.core.tables.parquet_table import open_parquet_source, parquet_files

        try:
            files, manifest = parquet_files(store, text)
        except StoreError as exc:  # a store that cannot list (plain HTTP) and no manifest
            raise NotATableError(f"{text}: no zarr.json, info or Parquet files ({exc})") from exc
        if not files:
            raise NotATableError(f"{text}: no sorted table here (no zarr.json, no info, no .parquet files)")
        source = open_parquet_source(store, text, files, key=key, values=values, manifest=manifest)
    return PagedTable(source, cache_bytes=cache_bytes, batch_bytes=batch_bytes)

