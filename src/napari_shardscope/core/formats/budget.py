"""The memory budget of one chunk, checked when metadata is parsed.

TensorStore (and our own decoders) allocate a whole decoded chunk per read: a declared chunk of
2**40 voxels aborts the process inside TensorStore's allocator instead of raising. Every format's
metadata parser refuses such a chunk up front with a :class:`MetadataError` naming the field, so
nothing is allocated or handed to TensorStore. The budget is the decoders' cap
(:data:`~napari_shardscope.core.encoding.MAX_DECODED_BYTES`), so whatever opens also decodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from napari_shardscope.core.encoding import MAX_DECODED_BYTES
from napari_shardscope.core.errors import MetadataError

#: Bytes one decoded chunk (or one shard index) may take.
CHUNK_BUDGET_BYTES = MAX_DECODED_BYTES


def check_chunk_budget(shape: Sequence[int], item_bytes: int, *, field: str, key: str | None) -> None:
    """Refuse a chunk of ``shape`` x ``item_bytes`` bytes larger than :data:`CHUNK_BUDGET_BYTES`."""
    nbytes = math.prod(int(s) for s in shape) * item_bytes
    if nbytes > CHUNK_BUDGET_BYTES:
        raise MetadataError(
            f"{field} {list(shape)} x {item_bytes} bytes is {nbytes} bytes per chunk, over the "
            f"{CHUNK_BUDGET_BYTES}-byte memory budget of one chunk",
            key=key,
        )
