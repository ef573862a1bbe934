"""Creating and opening labelmap instances.

Creation opens the base volume (any format the reader opens), derives the scale geometry, builds
the base label index (one pass over the scale-0 blocks that hold stored chunks, unless the caller
gives ``id_start`` and defers it), and stores the configuration in the instance record and the
agglomeration and index in the instance's unversioned area, page by page: all of it describes the
immutable base, so no version owns it and the root need not be open.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap.agglomeration import (
    AgglomerationSource,
    IdentityAgglomeration,
    agglomeration_source,
    open_stored_agglomeration,
    stored_items,
)
from napari_shardscope.core.labelmap.config import (
    DEFAULT_BLOCK,
    FORMAT,
    TYPE_NAME,
    LabelmapConfig,
    check_block,
    check_geometry,
    normalise_base_url,
    scales_of,
)
from napari_shardscope.core.labelmap.errors import LabelmapFormatError, LabelmapStateError
from napari_shardscope.core.labelmap.index_build import (
    AGGLOMERATION_PREFIXES,
    build_index,
    store_index,
)
from napari_shardscope.core.labelmap.keys import INDEX_META_KEY
from napari_shardscope.core.labelmap.label_index import BaseIndex
from napari_shardscope.core.labelmap.labelmap import Labelmap
from napari_shardscope.core.labelmap.reading import BaseSource
from napari_shardscope.core.labelmap.table_base import describe_table, open_table_base, stored_reverse_items, table_of
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.volumes.opening import open_volume


def create_labelmap(repo: Repository, name: str, base: str | os.PathLike[str], *,
                    agglomeration: Mapping[int, int] | str | os.PathLike[str] | AgglomerationSource | None = None,
                    id_start: int | None = None, block: int | tuple[int, int, int] = DEFAULT_BLOCK,
                    build_index: bool = True, progress: Progress | None = None,
                    agglomeration_reverse: str | os.PathLike[str] | None = None) -> Labelmap:
    """Create a labelmap instance over the base segmentation at ``base`` (which is never modified).

    Parameters
    ----------
    repo
        The repository (the instance is repository-wide, like DVID's; no version needs to be open).
    name
        Instance name.
    base
        Path or URL of a supervoxel volume :func:`~napari_shardscope.core.volumes.open_volume` reads.
    agglomeration
        The base's supervoxel → body grouping: a mapping, a bodies JSON path (``*.json``), the URL or
        path of a sorted table (:mod:`napari_shardscope.core.tables`: Zarr v3, Parquet, the sharded
        lookup; local or on a bucket), a :class:`~napari_shardscope.core.tables.TableAgglomeration`,
        or any :class:`~napari_shardscope.core.labelmap.agglomeration.AgglomerationSource`; default:
        every supervoxel is its own body. A table is read where it lives, page by page, on every
        open (never copied, never loaded whole; it must not change afterwards); any other source is
        copied into the repository page by page.
    agglomeration_reverse
        With a table: the same rows keyed by body
        (:func:`~napari_shardscope.core.tables.write_reverse_table`), read in place too. Without
        one, the repository keeps a body-sorted copy of the table's rows, written now.
    id_start
        First id for new bodies and supervoxels. Default: one above every id in the base and the
        agglomeration, found by building the label index now.
    block
        Overlay block shape (one edge or three), at every scale.
    build_index
        Build the base label index now (one pass over the scale-0 blocks holding stored chunks);
        otherwise on first need (or with ``shardscope index``).
    """
    volume = open_volume(base, kind="segmentation")
    scales = scales_of(volume)
    shape = check_block(block)
    table = table_of(agglomeration, agglomeration_reverse)
    source = table if table is not None else agglomeration_source(agglomeration)
    reader = BaseSource(volume)
    probe = LabelmapConfig(normalise_base_url(base), shape, scales, 1, False, str(volume.dtype))
    built = _build_index(probe, reader, progress) if build_index or id_start is None else None
    floor = max(built.summary.max_id if built is not None else 0, source.max_id if source is not None else 0) + 1
    if id_start is None:
        id_start = floor
    elif isinstance(id_start, bool) or not isinstance(id_start, int) or id_start < floor:
        raise ArgumentError(f"id_start must be an integer >= {floor} (above every id of the base and "
                            f"agglomeration), got {id_start!r}")
    listed = source is not None and source.listed > 0
    config = LabelmapConfig(base=probe.base, block=shape, scales=scales, id_start=id_start,
                            agglomeration=listed, base_dtype=str(volume.dtype),
                            table=describe_table(table) if table is not None and listed else None)
    inst = repo.create_instance(name, TYPE_NAME, config.to_json())
    if config.table is not None and table is not None:
        if table.reverse is None or config.table.reverse is None:  # the body-sorted rows members_of reads
            repo.replace_unversioned(inst, AGGLOMERATION_PREFIXES, stored_reverse_items(table))
    elif config.agglomeration and source is not None:
        repo.replace_unversioned(inst, AGGLOMERATION_PREFIXES, stored_items(source))
    agg = open_agglomeration(repo, inst, config)
    if built is not None:
        store_index(repo, inst, built, source if config.agglomeration else None)
    return Labelmap(repo, inst, config, volume, agg)


def _build_index(config: LabelmapConfig, reader: BaseSource, progress: Progress | None) -> BaseIndex:
    return build_index(config, reader, progress=progress)


def open_agglomeration(repo: Repository, inst: Instance, config: LabelmapConfig) -> AgglomerationSource:
    """The labelmap's base agglomeration: its table where it lives, the stored copy, or none (identity)."""
    def read(keys: Any) -> list[bytes | None]:
        return repo.get_unversioned_many(inst, keys)

    if not config.agglomeration:
        return IdentityAgglomeration()
    if config.table is not None:
        return open_table_base(config.table, read, name=inst.name)
    stored = open_stored_agglomeration(read)
    if stored is None:
        raise LabelmapStateError(f"labelmap {inst.name!r} has no stored agglomeration: its creation was "
                                 f"interrupted; create it again under another name")
    return stored


def labelmap_config(repo: Repository, name: str) -> LabelmapConfig:
    """The stored configuration of labelmap instance ``name`` (:class:`LabelmapFormatError` for an old one)."""
    inst = repo.instance(name)
    if inst.type != TYPE_NAME:
        raise ArgumentError(f"instance {name!r} is a {inst.type}, not a {TYPE_NAME}")
    fmt = int(inst.config.get("format", 0)) if isinstance(inst.config.get("format", 0), int) else 0
    if fmt < FORMAT:
        where = repo.path if repo.path is not None else "REPO"
        raise LabelmapFormatError(
            f"labelmap {name!r} was written in format {fmt} (its body map replayed from its log); this library "
            f"reads format {FORMAT}: migrate the repository once with `shardscope repo migrate {where}`")
    return LabelmapConfig.from_json(inst.config, name=name)


def open_labelmap(repo: Repository, name: str) -> Labelmap:
    """Open an existing labelmap instance (its base volume is opened, no voxel and no record is read).

    The base is read from its local copy when ``clone --prefetch`` made one (offline work).
    """
    from napari_shardscope.core.labelmap.prefetch import local_base

    inst = repo.instance(name)
    config = labelmap_config(repo, name)
    volume = open_volume(local_base(repo, name) or config.base, kind="segmentation")
    check_geometry(config, volume)
    return Labelmap(repo, inst, config, volume, open_agglomeration(repo, inst, config))


def index_meta(repo: Repository, name: str) -> dict[str, Any] | None:
    """The stored base index's metadata (None when not built yet)."""
    raw = repo.get_unversioned(name, INDEX_META_KEY)
    if raw is None:
        return None
    meta = dict(json.loads(raw))
    return meta if int(meta.get("format", 0)) >= 2 else None
