"""Hand a dataset or a labelmap version to Neuroglancer: mount it on a server, build the link.

:func:`serve` is what ``shardscope serve`` and the notebook API call; :func:`mount_dataset` and
:func:`mount_version` are what napari's "Show in Neuroglancer" calls for each layer it shows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from napari_shardscope.core.errors import ArgumentError, Remedy
from napari_shardscope.core.formats import open_dataset
from napari_shardscope.core.labelmap import TYPE_NAME, Labelmap, open_labelmap
from napari_shardscope.core.serve.annotations import close_annotation_mounts, mount_version_annotations
from napari_shardscope.core.serve.ngstate import LayerView, ViewDescription, build_state
from napari_shardscope.core.serve.server import ShardServer, StoreMount
from napari_shardscope.core.serve.version_source import VersionMount
from napari_shardscope.core.versioned import Repository, open_repository
from napari_shardscope.core.versioned.repository import MARKER_FILE

Zyx = tuple[float, float, float]
#: Neuroglancer's source prefix for each of the project's format names.
NG_PREFIX = {"precomputed": "precomputed", "zarr3": "zarr3", "zarr2": "zarr2", "zarr": "zarr", "n5": "n5"}
#: Neuroglancer draws later layers on top: images, then segmentations, then annotations.
LAYER_ORDER = {"image": 0, "segmentation": 1, "annotation": 2}
#: Width in screen pixels the default zoom fits the volume into.
DEFAULT_VIEW_PIXELS = 800


@dataclass(frozen=True)
class ServedLayer:
    """A mounted layer: how Neuroglancer loads it, and where it lies (z, y, x, nm)."""

    layer: LayerView
    voxel_size: Zyx
    lo: Zyx
    hi: Zyx
    metric: bool = True

    @property
    def center(self) -> Zyx:
        return (0.5 * (self.lo[0] + self.hi[0]), 0.5 * (self.lo[1] + self.hi[1]), 0.5 * (self.lo[2] + self.hi[2]))


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "data"
    return slug[:48]


def _spatial(values: Sequence[float], axes: Sequence[str]) -> Zyx:
    """The z, y, x entries of a per-axis tuple (missing axes: 1)."""
    got = {a: float(v) for a, v in zip(axes, values, strict=True)}
    return (got.get("z", 1.0), got.get("y", 1.0), got.get("x", 1.0))


def mount_dataset(server: ShardServer, url: str | os.PathLike[str], *, name: str | None = None) -> ServedLayer:
    """Serve the dataset at ``url`` as it is stored; the layer Neuroglancer loads it as.

    The bytes go through the dataset's own byte store (local or remote), so the store's guards
    keep every request inside the dataset's root.
    """
    ds = open_dataset(os.fspath(url))
    specs = ds.volume_specs()
    if not specs:
        raise ArgumentError(f"{ds.url}: no volume to show")
    spec = specs[0]
    label = name or spec.name or Path(ds.url.rstrip("/")).name
    existing = [p for p, m in server.mounts().items() if isinstance(m, StoreMount) and m.store.url == ds.store.url]
    if existing:  # shown again (a second "Show in Neuroglancer"): the same URL, so the browser cache holds
        base = f"{server.url}/{existing[0]}/"
    else:  # the last part names the layer in readers that take a name from the URL
        base = server.mount(f"data/{len(server.mounts())}/{_slug(label)}", StoreMount(ds.store))
    prefix = NG_PREFIX.get(ds.format_name, ds.format_name)
    level = spec.levels[0]
    vs = _spatial(level.voxel_size, spec.axes)
    lo = _spatial(level.translate, spec.axes)
    shape = _spatial(level.shape, spec.axes)
    # napari's translate is a voxel centre: the volume spans half a voxel more on each side
    lo = (lo[0] - vs[0] / 2, lo[1] - vs[1] / 2, lo[2] - vs[2] / 2)
    hi = (lo[0] + shape[0] * vs[0], lo[1] + shape[1] * vs[1], lo[2] + shape[2] * vs[2])
    ome = ds.format_name.startswith("zarr") and spec.unit is not None  # a lone zarr array is unitless
    layer = LayerView(label, "segmentation" if spec.kind == "segmentation" else "image", f"{prefix}://{base}",
                      ds.format_name, ome=ome)
    return ServedLayer(layer, vs, lo, hi, metric=spec.unit is not None)


def mount_version(server: ShardServer, labelmap: Labelmap, ref: str, *, name: str | None = None,
                  segments: Sequence[int] = ()) -> ServedLayer:
    """Serve version ``ref`` of ``labelmap`` as a precomputed segmentation computed on request."""
    mount = VersionMount(labelmap, ref)
    repo_slug = _slug(Path(str(labelmap.repo.path or "repo")).name)
    base = server.mount(f"version/{repo_slug}-{_slug(labelmap.name)}/{mount.uuid}", mount)
    g = labelmap.config.scales[0]
    vs = (float(g.voxel_size[0]), float(g.voxel_size[1]), float(g.voxel_size[2]))
    lo = (g.translate[0] - vs[0] / 2, g.translate[1] - vs[1] / 2, g.translate[2] - vs[2] / 2)
    hi = (lo[0] + g.shape[0] * vs[0], lo[1] + g.shape[1] * vs[1], lo[2] + g.shape[2] * vs[2])
    label = name or f"{labelmap.name} {mount.version.short}"
    layer = LayerView(label, "segmentation", f"precomputed://{base}", "precomputed",
                      segments=tuple(int(s) for s in segments))
    return ServedLayer(layer, vs, lo, hi)


def default_view(layers: Sequence[ServedLayer], *, position: Zyx | None = None, zoom: float | None = None,
                 layout: str = "xy") -> ViewDescription:
    """A view of ``layers``: at ``position`` (default: the first layer's centre), fitting it in ~800 px."""
    if not layers:
        raise ArgumentError("nothing to show")
    first = layers[0]
    if zoom is None:
        width = max(first.hi[2] - first.lo[2], first.hi[1] - first.lo[1])
        zoom = DEFAULT_VIEW_PIXELS / width if width > 0 else 1.0
    if position is None:  # a voxel centre near the middle (napari world: centre of voxel i at translate + i·v)
        c = first.center
        position = tuple(first.lo[i] + first.voxel_size[i] * (0.5 + int((c[i] - first.lo[i]) / first.voxel_size[i]))
                         for i in range(3))  # type: ignore[assignment]
    assert position is not None
    return ViewDescription(tuple(s.layer for s in layers), position, first.voxel_size, zoom, layout, first.metric)


def is_repository(path: str | os.PathLike[str]) -> bool:
    text = os.fspath(path)
    return "://" not in text and (Path(text) / MARKER_FILE).is_file()


def labelmap_of(repo: Repository, instance: str | None) -> Labelmap:
    """The repository's labelmap ``instance`` (the only one when ``None``)."""
    names = [i.name for i in repo.instances() if i.type == TYPE_NAME]
    if instance is None:
        if not names:
            raise ArgumentError(f"{repo.path}: the repository has no labelmap")
        if len(names) > 1:
            choose = Remedy("instance", "NAME")
            raise ArgumentError(f"{repo.path}: several labelmaps ({', '.join(names)}); pass {choose}"
                                ).suggesting(choose)
        instance = names[0]
    elif instance not in names:
        raise ArgumentError(f"{repo.path}: no labelmap {instance!r} (labelmaps: {', '.join(names) or 'none'})")
    return open_labelmap(repo, instance)


@dataclass
class Handoff:
    """A running server with what it serves and the link to it (``url``: the client at ``#!<URL of state>``)."""

    server: ShardServer
    layers: list[ServedLayer]
    view: ViewDescription
    state: dict[str, Any]
    url: str
    _closers: list[Any] = field(default_factory=list)

    def stop(self) -> None:
        self.server.stop()
        for close in self._closers:
            close()
        self._closers.clear()

    def __enter__(self) -> Handoff:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(targets: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, version: str | None = None,
          instance: str | None = None, port: int = 0, segments: Sequence[int] = (),
          position: Zyx | None = None, zoom: float | None = None, cors: Sequence[str] = (),
          annotations: Sequence[str] | None = None) -> Handoff:
    """Serve datasets and/or a labelmap repository's version; returns the running hand-off and its URL.

    Each target is a dataset URL/path or a repository directory (its labelmap at ``version``,
    default branch ``main``'s head). The server keeps running until :meth:`Handoff.stop`. The link
    opens the client served by the server itself; ``cors`` names other web origins (a Neuroglancer
    the user runs elsewhere) allowed to read the served data (:mod:`.cors`). A repository's annotation
    instances bound to its labelmap (or those ``annotations`` names; ``()``: none) are served beside
    the version as precomputed annotation layers linked to it (:mod:`.annotations`).
    """
    items = [targets] if isinstance(targets, (str, os.PathLike)) else list(targets)
    if not items:
        raise ArgumentError("nothing to serve")
    server = ShardServer(port, cors=cors)
    closers: list[Any] = [lambda: close_annotation_mounts(server)]
    try:
        server.client_root()  # no neuroglancer package: say so now, not as a 404 in the browser
        layers: list[ServedLayer] = []
        for item in items:
            if is_repository(item):
                repo = open_repository(os.fspath(item))
                closers.append(repo.close)
                lm = labelmap_of(repo, instance)
                seg = mount_version(server, lm, version or "main", segments=segments)
                layers.append(seg)
                layers.extend(replace(seg, layer=view) for view in mount_version_annotations(
                    server, lm, version or "main", segmentation_layer=seg.layer.name, names=annotations))
            else:
                if version is not None and len(items) == 1:
                    raise ArgumentError(f"{os.fspath(item)}: --version applies to a repository, not a dataset")
                layers.append(mount_dataset(server, item))
        if annotations and not any(is_repository(item) for item in items):
            raise ArgumentError("annotations are served beside a repository's version: no target is a repository")
        layers.sort(key=lambda s: LAYER_ORDER[s.layer.kind])
        view = default_view(layers, position=position, zoom=zoom)
        state = build_state(view)
        return Handoff(server, layers, view, state, server.state_link(state), closers)
    except BaseException:
        server.stop()
        for close in closers:
            close()
        raise
