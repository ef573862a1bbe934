"""Small documents (``zarr.json``, ``info``, a manifest) read together: one round trip on a bucket, not one each."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from napari_shardscope.core.bytestore import ByteStore, read_document
from napari_shardscope.core.bytestore import read_documents as read_together

#: Documents read at once from a remote store.
DOCUMENT_THREADS = 16


def read_documents(store: ByteStore, keys: Sequence[str]) -> list[bytes | None]:
    """Each key's bytes (``None`` when absent), bounded like every metadata document; concurrent on a remote store.

    A local store reads them in turn (no round trip to save); TensorStore's stores issue the
    requests of all keys together; any other store reads them on threads.
    """
    if store.cheap_size or len(keys) <= 1 or getattr(store, "read_at_most", None) is not None:
        return read_together(store, keys)
    with ThreadPoolExecutor(min(DOCUMENT_THREADS, len(keys))) as pool:
        return list(pool.map(lambda k: read_document(store, k), keys))
