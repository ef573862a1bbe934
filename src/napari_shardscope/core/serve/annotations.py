"""A version's annotation instances served beside its segmentation, as precomputed annotation sources.

Neuroglancer reads a precomputed annotation collection by keys (``info``, ``by_id``, ``spatial0``,
``rel_pre_segment``…), so the server serves one the way ``shardscope export --annotations`` writes it
(:func:`~napari_shardscope.core.annotation.export.export_annotations`: lines pre → post with
``pre_segment``/``post_segment`` related to the version's body ids), generated into a private
temporary directory on the first request and then served by range like a dataset. A committed
version's collection is generated once; an open version's again whenever Neuroglancer asks for the
``info`` (each time it loads the layer), so the layer shows the version as it is at that moment — the
swap is atomic, a request sees the old or the new collection, never a mix.

The layer is linked to the version's segmentation layer (``linkedSegmentationLayer`` for each
relationship), so selecting a body lists its synapses, and the selection panel of a synapse names its
pre and post bodies.
"""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from napari_shardscope.core.annotation.export import RELATIONSHIPS, Geometry, export_annotations
from napari_shardscope.core.annotation.instance import TYPE_NAME, AnnotationInstance, open_annotation_instance
from napari_shardscope.core.bytestore.local import LocalByteStore
from napari_shardscope.core.labelmap import Labelmap
from napari_shardscope.core.serve.bodies import Body
from napari_shardscope.core.serve.ngstate import LayerView
from napari_shardscope.core.serve.server import ShardServer, StoreMount

#: Where a served version's annotations live on the server.
MOUNT_ROOT = "annotations"


def _slug(text: str) -> str:
    return (re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "data")[:48]


class AnnotationMount:
    """One annotation instance at one version, served as a precomputed annotation collection (a server mount)."""

    def __init__(self, instance: AnnotationInstance, ref: str, *, geometry: Geometry = "lines") -> None:
        self.instance = instance
        self.version = instance.repo.version(ref)
        self.uuid = self.version.uuid
        self.geometry: Geometry = geometry
        self.cacheable = bool(self.version.locked)
        self._tmp = tempfile.TemporaryDirectory(prefix="shardscope-annotations-")
        self.root = Path(self._tmp.name) / "collection"
        self._lock = threading.Lock()
        self._store: StoreMount | None = None

    def _generate(self) -> StoreMount:
        export_annotations(self.instance.at(self.uuid), self.root, geometry=self.geometry, overwrite=True)
        return StoreMount(LocalByteStore(self.root, follow_symlinks=False), cacheable=self.cacheable)

    def open(self, key: str) -> Body | None:
        with self._lock:
            if self._store is None or (key == "info" and not self.cacheable):
                self._store = self._generate()
            store = self._store
        return store.open(key)

    def local_roots(self) -> Mapping[str, str]:
        roots = {self._tmp.name: f"<annotations {self.instance.name}>"}
        if self.instance.repo.path is not None:
            roots[str(self.instance.repo.path)] = "<repository>"
        return roots

    def close(self) -> None:
        """Delete the generated collection (also done when the mount is garbage-collected or the process exits)."""
        self._tmp.cleanup()


def bound_instances(labelmap: Labelmap) -> list[str]:
    """Names of the repository's annotation instances bound to ``labelmap``."""
    return [i.name for i in labelmap.repo.instances()
            if i.type == TYPE_NAME and isinstance(i.config, Mapping) and i.config.get("labelmap") == labelmap.name]


def mount_annotations(server: ShardServer, labelmap: Labelmap, ref: str, name: str, *, segmentation_layer: str,
                      geometry: Geometry = "lines") -> LayerView:
    """Serve annotation instance ``name`` (bound to ``labelmap``) at version ``ref``; the layer Neuroglancer loads.

    Shown again (a second "Show in Neuroglancer" of the same version), the mount already there is reused.
    """
    instance = open_annotation_instance(labelmap.repo, name, labelmap=labelmap)
    uuid = labelmap.repo.version(ref).uuid
    repo_slug = _slug(Path(str(labelmap.repo.path or "repo")).name)
    path = f"{MOUNT_ROOT}/{repo_slug}-{_slug(name)}-{geometry}/{uuid}"
    existing = server.mounts().get(path)
    if not isinstance(existing, AnnotationMount):
        server.mount(path, AnnotationMount(instance, uuid, geometry=geometry))
    return LayerView(name, "annotation", f"precomputed://{server.url}/{path}/", "precomputed",
                     linked_segmentation=tuple((rel, segmentation_layer) for rel in RELATIONSHIPS[geometry]))


def mount_version_annotations(server: ShardServer, labelmap: Labelmap, ref: str, *, segmentation_layer: str,
                              names: Sequence[str] | None = None) -> list[LayerView]:
    """Serve the annotation instances bound to ``labelmap`` (or ``names``) at ``ref``, linked to its layer."""
    chosen = bound_instances(labelmap) if names is None else list(names)
    return [mount_annotations(server, labelmap, ref, n, segmentation_layer=segmentation_layer) for n in chosen]


def close_annotation_mounts(server: ShardServer) -> None:
    """Delete the collections generated for ``server``'s annotation mounts (after it stopped)."""
    for mount in server.mounts().values():
        if isinstance(mount, AnnotationMount):
            mount.close()
