"""Opening TensorStore drivers the way every volume here needs them.

Two decisions live here so that no format module can forget them:

* ``recheck_cached_data="open"`` — by default TensorStore revalidates every cached chunk on each
  read (a stat or conditional request per chunk). For data that does not change while it is
  open, that is pure overhead: a warm plane step of a 512³ uint64 volume costs ~18 ms with the
  default and ~0.3 ms with ``"open"`` (measured on this project's CI machine). Volumes opened
  here are read-only and treated as immutable for the life of the open; re-open to see changes.
* specs given together are opened concurrently (futures first, results after). A volume's
  levels are not opened together any more: each opens on its first read (:mod:`.deferred`).

Levels whose format hands out a :class:`~napari_shardscope.core.formats.volume_spec.ChunkSource`
are opened with :func:`open_chunk_source` (TensorStore's ``virtual_chunked`` driver over the
format's own decoder): data no TensorStore driver reads, and data the format decodes faster than
the driver does (precomputed's raw scales on local disk: see
:mod:`~napari_shardscope.core.formats.precomputed.raw_source`). Uncached reads of the latter skip
TensorStore altogether (:mod:`.direct`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy.typing as npt

from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats.volume_spec import ChunkSource, DirectChunkSource

#: Spec fields added to every driver spec we open.
CACHE_POLICY: dict[str, Any] = {"recheck_cached_data": "open", "recheck_cached_metadata": "open"}


def open_stores(specs: Sequence[Mapping[str, Any]], context: Any, *, where: str) -> list[Any]:
    """Open ``specs`` read-only, concurrently, with :data:`CACHE_POLICY` and ``context``.

    Raises
    ------
    FormatError, NotFoundError, UnsupportedError, StoreError
        TensorStore's failure translated by :func:`~..bytestore.tserrors.error_from_tensorstore`
        (names ``where``).
    """
    import tensorstore as ts

    futures = []
    for spec in specs:
        full = {**CACHE_POLICY, **spec}
        futures.append(ts.open(full, read=True, context=context))
    stores = []
    for future in futures:
        try:
            stores.append(future.result())
        except Exception as exc:  # TensorStore raises ValueError for every failure kind
            raise error_from_tensorstore(exc, where=where, opening=True) from exc
    return stores


def reopen_store(store: Any, context: Any) -> Any | None:
    """The same view as ``store`` (domain, transform, cache policy) opened read-only on ``context``.

    ``None`` for a view that cannot be reopened from its spec (``virtual_chunked``: a format decoded
    here, a labelmap's view). Used to read a volume past the shared chunk cache.
    """
    try:
        import tensorstore as ts

        spec = store.spec(retain_context=False)
        return ts.open(spec, read=True, context=context).result()
    except Exception:
        return None


def open_chunk_source(source: ChunkSource, context: Any, *, where: str) -> Any:
    """A read-only TensorStore over ``source``'s chunks (``virtual_chunked``), cached in ``context``'s pool.

    One call of the read function fills one chunk-aligned request; the result is cached like any
    driver's chunk (the source is immutable while open). A
    :class:`~napari_shardscope.core.formats.volume_spec.DirectChunkSource` decodes straight into
    TensorStore's chunk buffer, which is laid out in the source's ``memory_order`` (first axis
    fastest for precomputed, ``inner_order`` reversed; last axis fastest for zarr) so that a
    chunk's bytes land in it as stored; any other source's
    :meth:`~ChunkSource.read_chunk` result is copied in. A chunk the source does not store reads
    as its fill value; a decoded chunk smaller than its place in the array (a damaged or foreign
    writer's edge block) is a :class:`ChunkDecodeError` naming ``where``.
    """
    import tensorstore as ts

    fill = source.fill_value
    chunk_shape = source.chunk_shape
    blank = fill if fill is not None else 0

    if isinstance(source, DirectChunkSource):
        direct = source

        def read_into(domain: Any, array: npt.NDArray[Any], _params: Any) -> None:
            grid = tuple(int(o) // c for o, c in zip(domain.origin, chunk_shape, strict=True))
            if not direct.decode_into(grid, array):
                array[...] = blank

        axes = list(range(len(chunk_shape)))
        layout = ts.ChunkLayout(read_chunk_shape=chunk_shape,
                                inner_order=axes[::-1] if source.memory_order == "F" else axes)
        return ts.virtual_chunked(read_into, dtype=source.dtype, shape=source.shape, chunk_layout=layout,
                                  context=context)

    def read(domain: Any, array: npt.NDArray[Any], _params: Any) -> None:
        grid = tuple(int(o) // c for o, c in zip(domain.origin, chunk_shape, strict=True))
        chunk = source.read_chunk(grid)
        if chunk is None:
            array[...] = blank
            return
        if any(have < want for have, want in zip(chunk.shape, array.shape, strict=True)):
            raise ChunkDecodeError(f"chunk {grid} holds {chunk.shape} voxels where the array needs {array.shape}",
                                   key=where)
        array[...] = chunk[tuple(slice(0, n) for n in array.shape)]

    return ts.virtual_chunked(read, dtype=source.dtype, shape=source.shape,
                              chunk_layout=ts.ChunkLayout(read_chunk_shape=chunk_shape), context=context)
