"""``clone --prefetch``: a local copy of the base segmentation's region, for a laptop with no network.

A clone reads the base segmentation from where it lives (the labelmap records its URL). To work
offline, the stored objects that hold the region's voxels at every scale — chunk files, or the
shard files holding the region's chunks, found through the format's layout backend (the shard
browser's ``locate``) — and the dataset's metadata documents are copied byte for byte into
``<repository>/base-cache/<labelmap>/``, in the base's own format, and the labelmap opens that copy
from then on (``base-cache.json`` in the repository directory says so; delete it to read the
origin again). Outside the region the copy holds nothing and reads as the fill value; a region
clone refuses edits there anyway. The base label index is already local after a clone (it is the
labelmap's unversioned data and comes with it), so the label index needs no extra step.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from napari_shardscope.core.bytestore.containment import check_key
from napari_shardscope.core.bytestore.local import write_file_atomic
from napari_shardscope.core.bytestore.protocol import join_key
from napari_shardscope.core.errors import ArgumentError, NotFoundError
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.labelmap.config import TYPE_NAME, LabelmapConfig
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.instance import check_instance_name
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.tracking import read_json_file

CACHE_FILE = "base-cache.json"
CACHE_DIR = "base-cache"
#: Per-scale metadata documents some formats keep beside each array (tried, skipped when absent).
_SCALE_METADATA = ("zarr.json", ".zarray", ".zattrs", "attributes.json")


@dataclass(frozen=True)
class PrefetchReport:
    """What ``prefetch_base`` copied: the local directory, objects and bytes."""

    labelmap: str
    path: Path
    objects: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"labelmap": self.labelmap, "path": str(self.path), "objects": self.objects, "bytes": self.bytes}


def _read_cache(repo_path: Path) -> dict[str, Any]:
    """``base-cache.json`` (empty when absent); a damaged one is an error, not "no local copy".

    Silently reading the origin instead would fail only later, offline, far from the cause.
    """
    return read_json_file(repo_path / CACHE_FILE, remedy="; delete it to read the base from its origin")


def local_base(repo: Repository, name: str) -> str | None:
    """The local copy of labelmap ``name``'s base, when a prefetch made one (else None: read the origin)."""
    if repo.path is None:
        return None
    path = _read_cache(Path(repo.path)).get(name)
    return str(path) if isinstance(path, str) and Path(path).is_dir() else None


def _region_keys(dataset: Any, config: LabelmapConfig, region: Sequence[Sequence[int]] | None) -> set[str]:
    """The stored objects (chunk or shard files) holding ``region`` at every scale (all of them when None)."""
    backend = dataset.layout_backend()
    keys: set[str] = set()
    for scale in config.scales:
        g = backend.geometry(scale.key)
        if region is None:
            lo, hi = [0, 0, 0], list(scale.shape)
        else:
            lo = [max(0, r[0] // f) for r, f in zip(region, scale.factors, strict=True)]
            hi = [min(s, -(-r[1] // f)) for r, f, s in zip(region, scale.factors, scale.shape, strict=True)]
        if any(b <= a for a, b in zip(lo, hi, strict=True)):
            continue
        first = g.grid_position(g.to_format_order(lo))
        last = g.grid_position(g.to_format_order([b - 1 for b in hi]))
        for grid in itertools.product(*(range(a, b + 1) for a, b in zip(first, last, strict=True))):
            node = backend.locate_grid(scale.key, tuple(grid))
            if node.present and node.file:
                keys.add(node.file)
    return keys


def prefetch_base(repo: Repository, name: str, region: Sequence[Sequence[int]] | None = None,
                  progress: Progress | None = None) -> PrefetchReport:
    """Copy the objects of labelmap ``name``'s base that hold ``region`` (z, y, x scale-0 voxels; None: all).

    Written file by file (temp + rename) and recorded in ``base-cache.json`` only when complete,
    so an interrupted prefetch leaves the labelmap reading the origin; running it again copies
    what is missing.
    """
    if repo.path is None:
        raise ArgumentError("a prefetch needs a repository on disk")
    inst = repo.instance(name)
    if inst.type != TYPE_NAME:
        raise ArgumentError(f"instance {name!r} is a {inst.type}, not a {TYPE_NAME}")
    config = LabelmapConfig.from_json(inst.config, name=name)
    dataset = open_dataset(config.base)
    # metadata documents are tried (each format keeps only some); the region's objects must be there
    optional = {str(getattr(dataset, "metadata_key", "")), ".zattrs", "zarr.json", "attributes.json"} - {""}
    # a bare array's one scale has the key "" (its documents sit at the root): join, never f"{key}/{doc}"
    optional |= {join_key(scale.key, doc) for scale in config.scales for doc in _SCALE_METADATA}
    required = _region_keys(dataset, config, region)
    keys = sorted(required | optional)
    dest = Path(repo.path) / CACHE_DIR / check_instance_name(name)
    doc = _read_cache(Path(repo.path))
    copied = size = 0
    for i, key in enumerate(keys):
        check_key(key, str(dest))  # a key from the base's metadata must not write outside the copy
        target = dest / key
        if not target.exists():
            data = dataset.store.read(key)
            if data is None and key in required:  # located a moment ago: deleted meanwhile
                raise NotFoundError(f"{config.base}: {key} holds part of the region but cannot be read; "
                                    f"the local copy would read it as empty")
            if data is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                write_file_atomic(target, data)
                copied += 1
                size += len(data)
        if progress is not None:
            progress(i + 1, len(keys), key)
    doc[name] = str(dest)
    write_file_atomic(Path(repo.path) / CACHE_FILE, json.dumps(doc, indent=1).encode())
    return PrefetchReport(name, dest, copied, size)


def drop_local_base(repo: Repository, name: str) -> None:
    """Read labelmap ``name``'s base from its origin again (the copy stays on disk until removed)."""
    if repo.path is None:
        return
    doc = _read_cache(Path(repo.path))
    if doc.pop(name, None) is not None:
        write_file_atomic(Path(repo.path) / CACHE_FILE, json.dumps(doc, indent=1).encode())
