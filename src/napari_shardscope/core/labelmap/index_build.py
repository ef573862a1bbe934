"""Building the base label index in this process and storing it (creation, and first need).

The index counts only the scale-0 blocks that meet a stored chunk (:mod:`.present`); a base whose
store cannot list is counted block by block when it is small, refused when it is not. The Dask job
(:mod:`.index_job`) stores the same tables for bases too large for one process.
"""

from __future__ import annotations

import json
import os
from typing import Any

from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource, IdentityAgglomeration
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.errors import IndexNotBuiltError
from napari_shardscope.core.labelmap.keys import INDEX_META_KEY
from napari_shardscope.core.labelmap.label_index import BaseIndex, build_base_index, index_items, load_index_meta
from napari_shardscope.core.labelmap.present import ON_DEMAND_BLOCKS, UNLISTED_BLOCKS, declared_blocks, present_blocks
from napari_shardscope.core.labelmap.reading import BaseSource
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository

#: Unversioned prefixes the base index and the agglomeration own (replaced whole when rewritten).
INDEX_PREFIXES = (b"index/t/", INDEX_META_KEY)
AGGLOMERATION_PREFIXES = (b"agglomeration/",)


def _fill_value(base: BaseSource) -> Any:
    try:
        return base.stores[0].fill_value
    except Exception:  # a store without a fill value: absent chunks read as 0
        return None


def blocks_to_index(config: LabelmapConfig, base: BaseSource, *, limit: int | None = None,
                    command: str = "shardscope index REPO NAME") -> list[tuple[int, int, int]] | None:
    """The scale-0 blocks the index counts: those meeting a stored chunk (``None``: every declared block).

    ``limit``: refuse (:class:`IndexNotBuiltError` naming ``command``) when more blocks than that must be read.
    """
    present = present_blocks(config.base, config, fill_value=_fill_value(base))
    if present is None:
        n = declared_blocks(config)
        if n > UNLISTED_BLOCKS or (limit is not None and n > limit):
            raise IndexNotBuiltError(
                f"the base {config.base} cannot list its stored chunks and declares {n} blocks: build its label "
                f"index with `{command}` (a Dask job; pass --scheduler for a cluster)")
        return None
    if limit is not None and len(present) > limit:
        raise IndexNotBuiltError(
            f"the base label index was never built and {len(present)} blocks of the base hold data (more than "
            f"the {limit} indexed on first use): build it with `{command}` (a Dask job; --scheduler for a cluster)")
    return present


def build_index(config: LabelmapConfig, base: BaseSource, *, limit: int | None = None,
                progress: Progress | None = None) -> BaseIndex:
    """Count the base's stored blocks (threads): the whole index in memory.

    Each block is read once, past the viewer's chunk cache (:meth:`BaseSource.read_uncached`): through
    it, a base of 2,000 stored chunks grew the create to the cache's limit.
    """
    blocks = blocks_to_index(config, base, limit=limit)
    return build_base_index(lambda box: base.read_uncached(0, box), config.grid(0), blocks=blocks,
                            workers=min(4, os.cpu_count() or 1), progress=progress)


def store_index(repo: Repository, instance: Instance | str, built: BaseIndex,
                agglomeration: AgglomerationSource | None) -> dict[str, Any]:
    """Store a built index (replacing any): its tables, then its metadata. Returns the metadata."""
    items = list(index_items([built], agglomeration))
    repo.replace_unversioned(instance, INDEX_PREFIXES, items)
    return dict(json.loads(items[-1][1]))


def build_and_store_index(repo: Repository, instance: Instance, config: LabelmapConfig, base: BaseSource,
                          agglomeration: AgglomerationSource, *, progress: Progress | None = None,
                          on_demand: bool = False) -> dict[str, Any]:
    """Build and store the base index now (the labelmap's first need of it); its metadata."""
    meta = load_index_meta(lambda keys: repo.get_unversioned_many(instance, keys))
    if meta is not None and int(meta.get("format", 0)) >= 2:
        return meta
    built = build_index(config, base, limit=ON_DEMAND_BLOCKS if on_demand else None, progress=progress)
    agg = None if isinstance(agglomeration, IdentityAgglomeration) else agglomeration
    return store_index(repo, instance, built, agg)


