"""Export the meshes of a labelmap version's changed bodies as a sharded ``neuroglancer_multilod_draco`` directory.

The bodies a version changed are those its mutation log (from the root) names and that still exist
there; their meshes are :meth:`Labelmap.mesh` (the union of supervoxel meshes, true to every
edit). The directory is written to a temporary sibling and renamed into place, so a failed export
never leaves half a directory where a good one (or nothing) was. When DEST sits in a precomputed
volume directory (``DEST/../info``), that ``info``'s ``mesh`` is pointed at it, so Neuroglancer
shows the exported segmentation with its meshes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from napari_shardscope.core.bytestore import LocalByteStore, write_file_atomic
from napari_shardscope.core.errors import OVERWRITE, ArgumentError, RefusedDestinationError
from napari_shardscope.core.formats.precomputed.mesh_writer import mesh_info, write_multilod_sharded
from napari_shardscope.core.formats.precomputed.sharding import ShardingSpec, parse_sharding_spec
from napari_shardscope.core.labelmap import Labelmap, LabelmapVersion
from napari_shardscope.core.progress import Progress


@dataclass(frozen=True)
class MeshExportReport:
    dest: str
    version: str
    bodies: tuple[int, ...]
    shard_files: int
    bytes: int
    linked_info: str | None

    def to_json(self) -> dict[str, Any]:
        return {"dest": self.dest, "version": self.version, "bodies": list(self.bodies),
                "shard_files": self.shard_files, "bytes": self.bytes, "linked_info": self.linked_info}


def changed_bodies(version: LabelmapVersion) -> list[int]:
    """Bodies the version's mutation log (from the root) touched that exist at the version, ascending."""
    named: set[int] = set()
    for entry in version.mutations():
        named.update(int(b) for b in entry.mutation.bodies)
    return sorted(b for b in named if b and version.exists(b))


def mesh_sharding(count: int) -> ShardingSpec:
    """Murmurhash sharding with about 64 meshes per minishard and at most 2**(bits) minishards in one shard."""
    minishard_bits = max(0, math.ceil(math.log2(max(1, count) / 64))) if count > 64 else 0
    shard_bits = max(0, minishard_bits - 6)
    return parse_sharding_spec({"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
                                "hash": "murmurhash3_x86_128", "minishard_bits": minishard_bits - shard_bits,
                                "shard_bits": shard_bits, "minishard_index_encoding": "gzip",
                                "data_encoding": "raw"}, key="mesh export")


def export_meshes(labelmap: Labelmap, ref: str, dest: str | os.PathLike[str], *,
                  bodies: Iterable[int] | None = None, overwrite: bool = False, lod: int = 0,
                  link_info: bool = True, progress: Progress | None = None) -> MeshExportReport:
    """Write the meshes of ``bodies`` (default: the bodies ``ref`` changed) to the local directory ``dest``."""
    target = Path(dest).resolve()
    if target.exists() and not overwrite:
        raise RefusedDestinationError(f"{target} exists; pass {OVERWRITE} to replace it").suggesting(OVERWRITE)
    if target.exists() and not (target / "info").is_file():
        raise RefusedDestinationError(f"{target} exists and is not a mesh directory: not replacing it")
    v = labelmap.at(ref)
    chosen = sorted({int(b) for b in bodies}) if bodies is not None else changed_bodies(v)
    for b in chosen:
        if not v.exists(b):
            raise ArgumentError(f"body {b} does not exist at version {v.version.short}")
    mesher = labelmap.mesher(lod)
    meshes = {}
    for i, body in enumerate(chosen):
        meshes[body] = mesher.mesh(body, v)
        if progress is not None:
            progress(i + 1, len(chosen), f"body {body}")
    spec = mesh_sharding(len(meshes))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        store = LocalByteStore(str(tmp))
        keys = write_multilod_sharded(store, "", spec, meshes) if meshes else []
        store.write("info", json.dumps(mesh_info(spec), indent=2).encode())
        size = sum((tmp / k).stat().st_size for k in keys)
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    linked = _link_info(target) if link_info else None
    return MeshExportReport(str(target), v.uuid, tuple(chosen), len(keys), size, linked)


def _link_info(target: Path) -> str | None:
    """Point the enclosing precomputed volume's ``info`` ``mesh`` at ``target`` (atomically); its path or None."""
    info = target.parent / "info"
    if not info.is_file():
        return None
    try:
        doc = json.loads(info.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or "scales" not in doc:
        return None
    doc["mesh"] = target.name
    write_file_atomic(info, json.dumps(doc, indent=2).encode())
    return str(info)
