"""An annotation instance: DVID's ``annotation`` data type, bound to a labelmap of the same repository.

The instance holds what every version shares — its name, the labelmap it is bound to (whose
scale-0 voxel space its points live in, and whose body map at each version decides which body
owns each point) and the spatial block shape (the labelmap's block, so a body's label-index
blocks are the spatial index's blocks). ``inst.at(ref)`` gives an
:class:`~napari_shardscope.core.annotation.version.AnnotationVersion`, which reads and edits.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.annotation.base import AnnotationBase, BaseConfig, open_base
from napari_shardscope.core.annotation.errors import AnnotationArgumentError, AnnotationRecordError
from napari_shardscope.core.annotation.keys import DATA_PREFIXES, ids_counter, mutations_counter
from napari_shardscope.core.annotation.version import AnnotationVersion
from napari_shardscope.core.errors import ArgumentError, ShardscopeError, UnsupportedError
from napari_shardscope.core.labelmap import TYPE_NAME as LABELMAP_TYPE
from napari_shardscope.core.labelmap import Labelmap, open_labelmap
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance, register_instance_type
from napari_shardscope.core.versioned.migrate import register_migration
from napari_shardscope.core.versioned.remotes.sync import reserve_ids
from napari_shardscope.core.versioned.repository import Repository

TYPE_NAME = "annotation"
#: The newest instance format this library reads and writes: 2 adds an imported base
#: (:mod:`.base`); an instance without one is still written as format 1, which older readers read.
FORMAT = 2
PLAIN_FORMAT = 1
#: Where a repository on disk keeps the tables of imported bases (``<repo>/annotation-bases/<name>``).
BASES_DIR = "annotation-bases"
#: A clone of a remote reserves more ids before an edit when fewer than this many are left.
ID_LOW_WATER = 256
#: After a failed reservation (offline), edits use the ids left without asking again for this long.
OFFLINE_RETRY_S = 60.0
_log = logging.getLogger(__name__)

register_instance_type(TYPE_NAME)


class AnnotationInstance:
    """One annotation instance (use :func:`create_annotation_instance` / :func:`open_annotation_instance`)."""

    def __init__(self, repo: Repository, instance: Instance, labelmap: Labelmap) -> None:
        self.repo = repo
        self.instance = instance
        self.labelmap = labelmap
        self.block: tuple[int, int, int] = labelmap.config.block
        self.shape: tuple[int, int, int] = labelmap.config.scales[0].shape
        self.edit_lock = threading.RLock()
        self._offline_until = 0.0

    @property
    def name(self) -> str:
        return self.instance.name

    def __repr__(self) -> str:
        return f"AnnotationInstance({self.name!r}, labelmap={self.labelmap.name!r})"

    def top_up_ids(self, low_water: int = ID_LOW_WATER) -> dict[str, int]:
        """In a clone of a remote, reserve more ids when fewer than ``low_water`` are left; ids left per counter.

        A clone hands out ids only from blocks reserved from its remote (so two clones never hand
        out the same annotation or mutation id); offline, a failed reservation is logged and the
        edit that finds none left raises :class:`~napari_shardscope.core.versioned.errors.IdsExhaustedError`.
        """
        left: dict[str, int] = {}
        if self.repo.id_source() is None:
            return left
        above = int(annotation_config(self.instance).get("base", {}).get("max_id", 0)) + 1
        for counter, minimum in ((ids_counter(self.name), above), (mutations_counter(self.name), 1)):
            n = sum(max(0, b - max(a, minimum)) for a, b in self.repo.id_blocks(counter))
            if n < low_water and time.monotonic() >= self._offline_until:
                try:
                    n += len(reserve_ids(self.repo, counter, minimum=minimum))
                except ShardscopeError as exc:
                    self._offline_until = time.monotonic() + OFFLINE_RETRY_S
                    _log.warning("annotation %s: could not reserve more ids of %s (%d left): %s",
                                 self.name, counter, n, exc)
            left[counter] = n
        return left

    @functools.cached_property
    def base(self) -> AnnotationBase | None:
        """The imported annotations every version starts from (None: the instance started empty)."""
        doc = annotation_config(self.instance).get("base")
        return None if doc is None else open_base(BaseConfig.from_json(doc, name=self.name), name=self.name)

    def at(self, ref: str | Version) -> AnnotationVersion:
        """Reads and edits at one version (a branch name means its head *now*)."""
        return AnnotationVersion(self, self.repo.version(ref).uuid)


def _labelmap_name(labelmap: str | Labelmap) -> str:
    return labelmap.name if isinstance(labelmap, Labelmap) else labelmap


def create_annotation_instance(repo: Repository, name: str, *, labelmap: str | Labelmap, base: Any = None,
                               columns: Any = None, voxel_size: Sequence[float] | None = None,
                               base_dir: str | os.PathLike[str] | None = None,
                               base_format: str = "parquet") -> AnnotationInstance:
    """Create an annotation instance bound to labelmap instance ``labelmap`` of ``repo``.

    Repository-wide, like DVID's instances: no version needs to be open. Points are (z, y, x)
    voxels of the labelmap's scale 0, and a point's body at a version is the labelmap's there.

    ``base``: start from imported annotations instead of none — a CSV, Parquet or Feather synapse
    table (CAVE's or neuPrint's columns, or ``columns``: a
    :class:`~napari_shardscope.core.annotation.base_import.SynapseColumns`), or a precomputed
    annotation source (a path or URL). It is converted once into two page-readable tables in
    ``base_dir`` (default ``<repository>/annotation-bases/<name>``; ``base_format`` ``parquet`` or
    ``zarr3``) that every version reads; versions store only edits over them
    (:mod:`napari_shardscope.core.annotation.base`). ``voxel_size`` (nm per voxel, x y z): the
    input's coordinates are nm, not voxels of the labelmap's scale 0.
    """
    lm_name = _labelmap_name(labelmap)
    lm_inst = repo.instance(lm_name)
    if lm_inst.type != LABELMAP_TYPE:
        raise AnnotationArgumentError(f"instance {lm_name!r} is a {lm_inst.type}, not a {LABELMAP_TYPE}")
    lm = labelmap if isinstance(labelmap, Labelmap) else open_labelmap(repo, lm_name)
    config: dict[str, Any] = {"format": PLAIN_FORMAT, "labelmap": lm_name}
    if base is None:
        if columns is not None or voxel_size is not None or base_dir is not None:
            raise AnnotationArgumentError("columns, voxel_size and base_dir describe a base: pass base= as well")
    else:
        from napari_shardscope.core.annotation.base_import import build_base

        if name in {i.name for i in repo.instances()}:
            raise AnnotationArgumentError(f"repository already has an instance named {name!r}")
        if base_dir is None:
            if repo.path is None:
                raise ArgumentError("a repository held in memory has no directory for the base's tables: pass "
                                    "base_dir=")
            base_dir = Path(repo.path) / BASES_DIR / name
        built = build_base(base, base_dir, shape=lm.config.scales[0].shape, block=lm.config.block,
                           columns=columns, voxel_size=voxel_size, format=base_format)
        config = {"format": FORMAT, "labelmap": lm_name, "base": built.to_json()}
    inst = repo.create_instance(name, TYPE_NAME, config)
    made = AnnotationInstance(repo, inst, lm)
    if base is not None:
        # ids handed out later pass every base id (a repository-wide counter: every branch, every clone);
        # reserving the largest base id itself leaves the counter where adding the base would have
        if repo.id_source() is None:
            repo.allocate_ids(ids_counter(name), 1, minimum=max(1, int(config["base"]["max_id"])))
        else:
            made.top_up_ids()  # a clone: blocks above the base from the remote (or at the first add, offline)
    return made


def annotation_config(inst: Instance) -> dict[str, Any]:
    """The checked configuration of an annotation instance record."""
    if inst.type != TYPE_NAME:
        raise AnnotationArgumentError(f"instance {inst.name!r} is a {inst.type}, not an {TYPE_NAME}")
    cfg = dict(inst.config)
    fmt = cfg.get("format")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or not isinstance(cfg.get("labelmap"), str) \
            or ("base" in cfg and not isinstance(cfg["base"], Mapping)):
        raise AnnotationRecordError(f"annotation instance {inst.name!r} has a malformed configuration: {cfg!r}")
    if fmt > FORMAT:
        raise UnsupportedError(f"annotation instance {inst.name!r} was written in format {fmt}; this library "
                               f"reads format {FORMAT}: upgrade napari-shardscope")
    return cfg


def open_annotation_instance(repo: Repository, name: str, *, labelmap: Labelmap | None = None) -> AnnotationInstance:
    """Open annotation instance ``name`` (and its labelmap, unless given open); reads no annotation."""
    inst = repo.instance(name)
    cfg = annotation_config(inst)
    if labelmap is not None and labelmap.name != cfg["labelmap"]:
        raise AnnotationArgumentError(f"annotation instance {name!r} is bound to labelmap {cfg['labelmap']!r}, "
                                      f"not {labelmap.name!r}")
    return AnnotationInstance(repo, inst, labelmap or open_labelmap(repo, str(cfg["labelmap"])))


def _annotation_step(repo: Repository, progress: Progress | None) -> str | None:
    """``repo migrate``'s annotation step: format 1 is the first, so it only checks every configuration."""
    for inst in repo.instances():
        if inst.type == TYPE_NAME:
            annotation_config(inst)
    return None


register_migration(TYPE_NAME, _annotation_step)

__all__ = ["DATA_PREFIXES", "FORMAT", "TYPE_NAME", "AnnotationInstance", "annotation_config",
           "create_annotation_instance", "open_annotation_instance"]
