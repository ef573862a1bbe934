"""Creating and opening labelmap instances.

Creation opens the base volume (any format the reader opens), derives the scale geometry, builds
the base label index (one pass over scale 0, unless the caller gives ``id_start`` and defers it),
and stores the configuration in the instance record and the agglomeration and index in the
instance's unversioned area: all of it describes the immutable base, so no version owns it and
the root need not be open.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from napari_shardscope.core.encoding import inflate, zlib_compress
from napari_shardscope.core.errors import ArgumentError, FormatError
from napari_shardscope.core.labelmap.bodymap import BaseAgglomeration
from napari_shardscope.core.labelmap.config import (
    DEFAULT_BLOCK,
    TYPE_NAME,
    LabelmapConfig,
    check_block,
    check_geometry,
    normalise_base_url,
    scales_of,
)
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.keys import AGGLOMERATION_KEY, INDEX_META_KEY
from napari_shardscope.core.labelmap.label_index import BaseIndex, build_base_index, store_base_index
from napari_shardscope.core.labelmap.labelmap import Labelmap
from napari_shardscope.core.labelmap.reading import BaseSource
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.volumes.opening import open_volume


def encode_agglomeration(agg: BaseAgglomeration) -> bytes:
    n = np.array([agg.supervoxels.size], dtype="<u8").tobytes()
    return zlib_compress(n + agg.supervoxels.astype("<u8").tobytes() + agg.bodies.astype("<u8").tobytes(), 1)


def decode_agglomeration(data: bytes) -> BaseAgglomeration:
    try:
        raw = inflate(data, key="agglomeration")  # bounded by the memory budget
        n = int(np.frombuffer(raw, dtype="<u8", count=1)[0])
        if len(raw) != 8 + 16 * n:
            raise ValueError(f"{len(raw)} bytes for {n} entries")
        svs = np.frombuffer(raw, dtype="<u8", count=n, offset=8).astype(np.uint64)
        bodies = np.frombuffer(raw, dtype="<u8", count=n, offset=8 + 8 * n).astype(np.uint64)
    except (FormatError, ValueError) as exc:
        raise LabelmapStateError(f"stored agglomeration is damaged ({exc})") from exc
    return BaseAgglomeration(svs, bodies)


def load_agglomeration(source: Mapping[int, int] | str | os.PathLike[str] | None) -> BaseAgglomeration:
    """A base agglomeration from a mapping, a bodies JSON file (the sample's ``bodies.json``), or None."""
    if source is None:
        return BaseAgglomeration.identity()
    if isinstance(source, Mapping):
        mapping = {int(k): int(v) for k, v in source.items()}
    else:
        from napari_shardscope.core.sample_data import load_body_map

        mapping = load_body_map(Path(source))
    if any(k <= 0 or v <= 0 for k, v in mapping.items()):
        raise ArgumentError("agglomeration ids must be positive (0 is background)")
    return BaseAgglomeration.from_mapping(mapping)


def create_labelmap(repo: Repository, name: str, base: str | os.PathLike[str], *,
                    agglomeration: Mapping[int, int] | str | os.PathLike[str] | None = None,
                    id_start: int | None = None, block: int | tuple[int, int, int] = DEFAULT_BLOCK,
                    build_index: bool = True, progress: Progress | None = None) -> Labelmap:
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
        The base's supervoxel → body grouping (mapping or bodies JSON path); default: every
        supervoxel is its own body.
    id_start
        First id for new bodies and supervoxels. Default: one above every id in the base and the
        agglomeration, found by building the label index now.
    block
        Overlay block shape (one edge or three), at every scale.
    build_index
        Build the base label index now (one pass over scale 0); otherwise on first need.
    """
    volume = open_volume(base, kind="segmentation")
    scales = scales_of(volume)
    shape = check_block(block)
    agg = load_agglomeration(agglomeration)
    built: BaseIndex | None = None
    if build_index or id_start is None:
        reader = BaseSource(volume)
        grid = LabelmapConfig("", shape, scales, 1, False, "").grid(0)
        built = build_base_index(lambda box: reader.read(0, box), grid, workers=min(4, os.cpu_count() or 1),
                                 progress=progress)
    floor = max(built.summary.max_id if built is not None else 0,
                int(agg.supervoxels.max()) if agg.supervoxels.size else 0,
                int(agg.bodies.max()) if agg.bodies.size else 0) + 1
    if id_start is None:
        id_start = floor
    elif isinstance(id_start, bool) or not isinstance(id_start, int) or id_start < floor:
        raise ArgumentError(f"id_start must be an integer >= {floor} (above every id of the base and "
                            f"agglomeration), got {id_start!r}")
    config = LabelmapConfig(base=normalise_base_url(base), block=shape, scales=scales, id_start=id_start,
                            agglomeration=bool(agg.supervoxels.size), base_dtype=str(volume.dtype))
    inst = repo.create_instance(name, TYPE_NAME, config.to_json())
    if config.agglomeration:
        repo.put_unversioned(inst, [(AGGLOMERATION_KEY, encode_agglomeration(agg))])
    if built is not None:
        store_base_index(repo, inst, built)
    lm = Labelmap(repo, inst, config, volume, agg)
    if built is not None:
        lm._summary = built.summary
    return lm


def labelmap_config(repo: Repository, name: str) -> LabelmapConfig:
    """The stored configuration of labelmap instance ``name``."""
    inst = repo.instance(name)
    if inst.type != TYPE_NAME:
        raise ArgumentError(f"instance {name!r} is a {inst.type}, not a {TYPE_NAME}")
    return LabelmapConfig.from_json(inst.config, name=name)


def open_labelmap(repo: Repository, name: str) -> Labelmap:
    """Open an existing labelmap instance (its base volume is opened, no voxel is read).

    The base is read from its local copy when ``clone --prefetch`` made one (offline work).
    """
    from napari_shardscope.core.labelmap.prefetch import local_base

    inst = repo.instance(name)
    config = labelmap_config(repo, name)
    volume = open_volume(local_base(repo, name) or config.base, kind="segmentation")
    check_geometry(config, volume)
    agg = BaseAgglomeration.identity()
    if config.agglomeration:
        raw = repo.get_unversioned(inst, AGGLOMERATION_KEY)
        if raw is None:
            raise LabelmapStateError(
                f"labelmap {name!r} has no stored agglomeration: its creation was interrupted; "
                f"create it again under another name")
        agg = decode_agglomeration(raw)
    return Labelmap(repo, inst, config, volume, agg)


def index_meta(repo: Repository, name: str) -> dict[str, Any] | None:
    """The stored base index's metadata (None when not built yet)."""
    raw = repo.get_unversioned(name, INDEX_META_KEY)
    return None if raw is None else dict(json.loads(raw))
