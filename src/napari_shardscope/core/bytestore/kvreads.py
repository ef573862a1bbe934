"""Reading several small keys at once through TensorStore's kvstore (metadata detection).

Goes through TensorStore's kvstore with the shared context, so local files, HTTP, GCS and S3 behave
the same and share connection pools with the voxel reads; concurrent reads make format detection
on a remote store cost one round-trip, not three.
"""

from __future__ import annotations

from typing import Any

from napari_shardscope.core.bytestore.bounded import BoundedReader, Over, over_limit_message
from napari_shardscope.core.bytestore.local import LocalByteStore
from napari_shardscope.core.bytestore.protocol import read_document
from napari_shardscope.core.bytestore.tserrors import error_from_tensorstore
from napari_shardscope.core.bytestore.url import Location
from napari_shardscope.core.errors import MetadataError
from napari_shardscope.core.json_document import MAX_JSON_BYTES, load_json_object


def read_bytes(loc: Location, key: str, context: Any) -> bytes | None:
    """The bytes of ``key`` under ``loc``, or ``None`` when it does not exist."""
    return read_keys(loc, [key], context)[key]


def read_keys(loc: Location, keys: list[str], context: Any) -> dict[str, bytes | None]:
    """The bytes of each of ``keys`` under ``loc`` (``None`` for missing ones), read concurrently.

    The keys are metadata documents. A local one is read through :class:`LocalByteStore`, so it gets
    the guards every other key gets before a byte is read: no link out of the root (unless links are
    followed on purpose), regular files only (a FIFO would block TensorStore's read forever), and no
    document over :data:`~napari_shardscope.core.json_document.MAX_JSON_BYTES` (TensorStore reads a
    key whole: a 1 TiB sparse ``info`` aborts the process in its allocator).
    """
    if loc.is_local:
        store = LocalByteStore(loc.kvstore["path"])
        # size() is None for a directory too: a zarr child array named "info" is not a precomputed dataset
        return {key: read_document(store, key) if store.size(key) is not None else None for key in keys}
    import tensorstore as ts

    from napari_shardscope.core.bytestore.context import shared_context

    if context is None:  # TensorStore's default context retries a refused connection for minutes
        context = shared_context()
    try:
        kv = ts.KvStore.open(loc.kvstore, context=context).result()
    except Exception as exc:  # TensorStore raises ValueError for bad specs and unreachable stores
        raise error_from_tensorstore(exc, where=loc.url, opening=True) from exc
    def where(key: str) -> str:
        return f"{loc.url.rstrip('/')}/{key}"

    # every document is bounded before it arrives, all in flight together: one ranged GET each on
    # HTTP, a probe and then the read on S3 and GCS (see bounded.py); a hostile server's 5 GiB
    # "info" is refused, not downloaded
    found = BoundedReader(kv, loc.kvstore, context, where).read_many(keys, MAX_JSON_BYTES)
    out: dict[str, bytes | None] = {}
    for key, got in zip(keys, found, strict=True):
        if isinstance(got, Over):
            raise MetadataError(over_limit_message(MAX_JSON_BYTES, "a metadata document", got.size), key=where(key))
        out[key] = got
    return out


def read_json(loc: Location, key: str, context: Any) -> dict[str, Any] | None:
    """``key`` under ``loc`` parsed as a JSON object, ``None`` when absent.

    Raises
    ------
    MetadataError
        When the key exists but is not a JSON object (with the byte offset of a syntax error).
    """
    return parse_json_object(read_bytes(loc, key, context), f"{loc.url.rstrip('/')}/{key}")


def parse_json_object(data: bytes | None, where: str) -> dict[str, Any] | None:
    """``data`` parsed as a JSON object (``None`` passes through); errors name ``where``."""
    if data is None:
        return None
    return load_json_object(data, key=where)
