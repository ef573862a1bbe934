"""Neuroglancer states from a small description of a napari view, and back.

Pure functions over frozen dataclasses: the napari glue (``napari_plugin/neuroglancer.py``) fills a
:class:`ViewDescription` from the viewer and applies a :class:`ParsedState` to it, and the CLI and
notebooks use the same functions without napari.

Conventions, both ways:

* napari's world is z, y, x in nanometres; Neuroglancer's ``dimensions`` are x, y, z in metres, one
  unit per voxel of the reference layer (the first layer), and ``position`` is in those units.
* For precomputed sources Neuroglancer places voxel ``i`` over ``[i, i + 1)``, so its centre is
  ``i + 0.5``; napari puts the centre at ``i``. The position is shifted by half a voxel for them,
  and for bare zarr arrays and N5 datasets, which Neuroglancer places the same way (checked in
  the browser test). OME-Zarr's transforms name voxel centres, and Neuroglancer honours that: no
  shift.
* ``crossSectionScale`` is reference voxels per screen pixel; napari's ``camera.zoom`` is screen
  pixels per world unit (nm), so one is ``1 / (zoom * voxel_x)`` of the other.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import quote, unquote

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.units import nm_per_neuroglancer_unit
from napari_shardscope.core.json_document import MAX_JSON_BYTES

LayerKind = Literal["image", "segmentation", "annotation"]
#: napari's 2-D view is Neuroglancer's ``xy`` layout; a 3-D view is ``3d``.
LAYOUTS = ("xy", "yz", "xz", "4panel", "3d", "xy-3d", "xz-3d", "yz-3d")
#: Neuroglancer source prefixes the project reads, and the format they name.
READABLE_PREFIXES = {"precomputed": "precomputed", "zarr": "zarr", "zarr2": "zarr2", "zarr3": "zarr3", "n5": "n5"}
#: Neuroglancer's pipeline names (``URL|neuroglancer-precomputed:``) for the project's formats.
PIPELINE_FORMATS = {"neuroglancer-precomputed": "precomputed"}
NM_PER_M = 1e9
#: A fragment Neuroglancer fetches as a state (its own test: ``^#!([a-z][a-z\d+-.]*)://``).
_STATE_URL = re.compile(r"[a-z][a-z0-9+.-]*://")


@dataclass(frozen=True)
class LayerView:
    """One layer of the view, as Neuroglancer should load it.

    Attributes
    ----------
    name
        Layer name.
    kind
        ``"image"`` or ``"segmentation"``.
    source
        A Neuroglancer data source URL (``precomputed://http://…``, ``zarr3://gs://…``).
    format
        Storage format of the source (``precomputed``, ``zarr3``…): decides the half-voxel shift.
    visible
        Whether the layer is shown.
    segments
        Selected bodies (segmentation layers).
    equivalences
        Groups of ids Neuroglancer shows as one (a merge-only version over a remote base).
    ome
        True for an OME-Zarr source (Neuroglancer puts its voxel centres where napari does).
    linked_segmentation
        Annotation layers: (relationship, segmentation layer name) pairs, Neuroglancer's
        ``linkedSegmentationLayer`` (selecting a segment there lists the annotations related to it).
    """

    name: str
    kind: LayerKind
    source: str
    format: str
    visible: bool = True
    segments: tuple[int, ...] = ()
    equivalences: tuple[tuple[int, ...], ...] = ()
    ome: bool = False
    linked_segmentation: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ViewDescription:
    """What a napari view shows: layers (the first is the reference), where, and how close.

    ``position`` is the world position (z, y, x, nm) at the centre of the view; ``voxel_size`` the
    reference layer's voxel (z, y, x, nm); ``zoom`` napari's ``camera.zoom`` (screen pixels per nm).
    """

    layers: tuple[LayerView, ...]
    position: tuple[float, float, float]
    voxel_size: tuple[float, float, float]
    zoom: float
    layout: str = "xy"
    #: False when the reference layer's voxel size has no length unit (a bare zarr array): its
    #: dimensions are then unitless, as Neuroglancer reads such an array.
    metric: bool = True

    def __post_init__(self) -> None:
        if not self.layers:
            raise ArgumentError("a Neuroglancer state needs at least one layer")
        if min(self.voxel_size) <= 0 or not all(math.isfinite(v) for v in self.voxel_size):
            raise ArgumentError(f"voxel size must be positive and finite, got {self.voxel_size}")
        if not (self.zoom > 0 and math.isfinite(self.zoom)):
            raise ArgumentError(f"zoom must be positive and finite, got {self.zoom}")
        if self.layout not in LAYOUTS:
            raise ArgumentError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")


def half_voxel(fmt: str, ome: bool = False) -> float:
    """The shift (in voxels) of Neuroglancer's position against napari's world for a ``fmt`` source."""
    return 0.0 if ome and fmt.startswith("zarr") else 0.5


def build_state(view: ViewDescription) -> dict[str, Any]:
    """The Neuroglancer state (JSON-ready) showing ``view``."""
    vz, vy, vx = view.voxel_size
    shift = half_voxel(view.layers[0].format, view.layers[0].ome)
    pz, py, px = view.position
    layers: list[dict[str, Any]] = []
    for lay in view.layers:
        entry: dict[str, Any] = {"type": lay.kind, "source": lay.source, "name": lay.name}
        if not lay.visible:
            entry["visible"] = False
        if lay.kind == "segmentation":
            if lay.segments:
                entry["segments"] = [str(int(s)) for s in lay.segments]
            if lay.equivalences:
                entry["equivalences"] = [[str(int(s)) for s in group] for group in lay.equivalences]
        if lay.kind == "annotation" and lay.linked_segmentation:
            entry["linkedSegmentationLayer"] = dict(lay.linked_segmentation)
        layers.append(entry)
    state: dict[str, Any] = {
        "dimensions": ({"x": [vx / NM_PER_M, "m"], "y": [vy / NM_PER_M, "m"], "z": [vz / NM_PER_M, "m"]}
                       if view.metric else {"x": [vx, ""], "y": [vy, ""], "z": [vz, ""]}),
        "position": [px / vx + shift, py / vy + shift, pz / vz + shift],
        "crossSectionScale": 1.0 / (view.zoom * vx),
        "projectionScale": 1.0 / (view.zoom * vx) * 1024,
        "layers": layers,
        "selectedLayer": {"layer": view.layers[-1].name},
        "layout": view.layout,
    }
    return state


def state_url(client_url: str, state: Mapping[str, Any]) -> str:
    """``client_url#!<state>``: a link Neuroglancer opens at ``state``."""
    return client_url + "#!" + quote(json.dumps(state, separators=(",", ":")), safe="")


# -- the other way -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRef:
    """A layer source of a parsed state: what the project can open, or why it cannot."""

    layer: str
    kind: str
    url: str
    open_url: str | None
    reason: str = ""


@dataclass(frozen=True)
class ParsedState:
    """What the project takes from a Neuroglancer state.

    ``position`` is napari's world position (z, y, x, nm), ``zoom`` napari's ``camera.zoom``
    (both ``None`` when the state lacks them); ``segments`` maps layer names to selected ids.
    """

    sources: tuple[SourceRef, ...]
    position: tuple[float, float, float] | None
    zoom: float | None
    #: The state's own position and dimension scales (z, y, x; nm per unit), for :meth:`position_for`.
    ng_position: tuple[float, float, float] | None = None
    unit_nm: tuple[float, float, float] | None = None
    segments: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    layout: str | None = None
    problems: tuple[str, ...] = ()

    def position_for(self, fmt: str, *, ome: bool = False) -> tuple[float, float, float] | None:
        """napari's world position when the reference layer opened as a ``fmt`` (OME or not) source."""
        if self.ng_position is None or self.unit_nm is None:
            return None
        shift = half_voxel(fmt, ome)
        return (
            (self.ng_position[0] - shift) * self.unit_nm[0],
            (self.ng_position[1] - shift) * self.unit_nm[1],
            (self.ng_position[2] - shift) * self.unit_nm[2],
        )

    @property
    def openable(self) -> tuple[SourceRef, ...]:
        return tuple(s for s in self.sources if s.open_url is not None)

    @property
    def not_opened(self) -> tuple[SourceRef, ...]:
        return tuple(s for s in self.sources if s.open_url is None)


def state_from_text(text: str) -> dict[str, Any]:
    """The state in a Neuroglancer link (``…#!{json}``, percent-encoded or not) or a JSON document.

    Raises
    ------
    ArgumentError
        When the text is neither, is too large, or the link points at a state stored elsewhere.
    """
    text = text.strip()
    if len(text) > MAX_JSON_BYTES:
        raise ArgumentError(f"a Neuroglancer state of {len(text)} characters is larger than the "
                            f"{MAX_JSON_BYTES} the project reads")
    if not text.startswith("{"):
        _, sep, frag = text.partition("#!")
        if not sep:
            raise ArgumentError("not a Neuroglancer link (no '#!' followed by a state) nor a state JSON document")
        frag = unquote(frag)
        if not frag.lstrip().startswith("{"):
            raise ArgumentError(f"the link's state lives elsewhere ({frag[:80]!r}); open the link itself "
                                "(shardscope open, Open Neuroglancer link) or paste the state JSON")
        text = frag
    try:
        state = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArgumentError(f"the Neuroglancer state is not valid JSON: {exc.msg} at character {exc.pos}") from exc
    if not isinstance(state, dict):
        raise ArgumentError("a Neuroglancer state is a JSON object")
    return state


def state_document_link(text: str) -> str | None:
    """The URL of the state document a link names (``…#!https://host/state.json``), or ``None``.

    Neuroglancer fetches such a state after it starts (``shardscope serve`` hands out these links;
    CAVE and spelunker links name ``gs://``/``https://`` documents the same way).
    """
    text = text.strip()
    if text.startswith("{") or len(text) > MAX_JSON_BYTES:
        return None
    _, sep, frag = text.partition("#!")
    frag = unquote(frag).strip()
    return frag if sep and _STATE_URL.match(frag) else None


def _source_urls(source: Any) -> list[str]:
    if isinstance(source, str):
        return [source]
    if isinstance(source, Mapping):
        url = source.get("url")
        return [url] if isinstance(url, str) else []
    if isinstance(source, list):
        return [u for item in source for u in _source_urls(item)]
    return []


def openable_url(url: str) -> tuple[str | None, str]:
    """The URL the project opens for Neuroglancer source ``url`` (``None`` and why when it cannot)."""
    text = url.strip()
    if "|" in text:  # Neuroglancer's newer pipeline syntax: gs://bucket/path|zarr3:
        base, _, rest = text.partition("|")
        steps = [step.split(":", 1)[0] for step in rest.split("|") if step]
        fmt = PIPELINE_FORMATS.get(steps[0], steps[0]) if steps else ""
        if len(steps) == 1 and fmt in READABLE_PREFIXES:
            return f"{fmt}://{base}", ""
        return None, f"Neuroglancer pipeline {rest!r} is not one the project reads"
    scheme, sep, rest = text.partition("://")
    if not sep:
        return None, "not a URL"
    if scheme in READABLE_PREFIXES:
        inner, _, _ = rest.partition("://")
        if inner not in ("http", "https", "gs", "s3", "file") or "://" not in rest:
            return None, f"unsupported location {rest!r}"
        return f"{scheme}://{rest}", ""
    if scheme in ("http", "https", "gs", "s3"):
        return text, ""
    return None, f"Neuroglancer data source {scheme!r} is not one the project reads"


def _dims_nm(state: Mapping[str, Any]) -> dict[str, float]:
    dims = state.get("dimensions")
    out: dict[str, float] = {}
    if not isinstance(dims, Mapping):
        return out
    for name, value in dims.items():
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], (int, float))
                and (nm := nm_per_neuroglancer_unit(value[1])) is not None):
            out[str(name)] = float(value[0]) * nm
    return out


def parse_state(state: Mapping[str, Any]) -> ParsedState:
    """What the project can take from Neuroglancer ``state``: sources, position, zoom, segments.

    Layers of kinds other than image and segmentation, and sources the project cannot read, are
    listed in :attr:`ParsedState.not_opened` with the reason, never dropped silently.
    """
    problems: list[str] = []
    raw_layers = state.get("layers", [])
    if isinstance(raw_layers, Mapping):  # the old form: {name: layer}
        raw_layers = [dict(v, name=k) for k, v in raw_layers.items() if isinstance(v, Mapping)]
    if not isinstance(raw_layers, list):
        raise ArgumentError("the state's 'layers' is neither a list nor an object")
    sources: list[SourceRef] = []
    segments: dict[str, tuple[int, ...]] = {}
    first_format: str | None = None
    for i, layer in enumerate(raw_layers):
        if not isinstance(layer, Mapping):
            problems.append(f"layer {i} is not an object")
            continue
        name = str(layer.get("name", f"layer {i}"))
        kind = str(layer.get("type", ""))
        urls = _source_urls(layer.get("source"))
        if not urls:
            sources.append(SourceRef(name, kind, "", None, "no data source"))
            continue
        for url in urls:
            if kind not in ("image", "segmentation"):
                sources.append(SourceRef(name, kind, url, None, f"a {kind or 'untyped'} layer"))
                continue
            got, why = openable_url(url)
            sources.append(SourceRef(name, kind, url, got, why))
            if got is not None and first_format is None:
                first_format = _format_of(got)
        if kind == "segmentation":
            ids = []
            for s in layer.get("segments", []) or []:
                text = str(s)
                if text.startswith("!"):
                    continue  # listed but hidden
                try:
                    ids.append(int(text))
                except ValueError:
                    problems.append(f"layer {name!r}: segment {text!r} is not an id")
            segments[name] = tuple(ids)
    dims = _dims_nm(state)
    ng_position: tuple[float, float, float] | None = None
    unit_nm: tuple[float, float, float] | None = None
    pos = state.get("position")
    order = list(state.get("dimensions", {}) or {})
    if (isinstance(pos, list) and all(a in dims for a in "xyz") and len(pos) == len(order)
            and all(isinstance(p, (int, float)) for p in pos)):
        ng_position = (float(pos[order.index("z")]), float(pos[order.index("y")]), float(pos[order.index("x")]))
        unit_nm = (dims["z"], dims["y"], dims["x"])
    elif pos is not None:
        problems.append("the position has no x, y, z dimensions in length units: not applied")
    zoom: float | None = None
    css = state.get("crossSectionScale")
    if isinstance(css, (int, float)) and css > 0 and "x" in dims:
        zoom = 1.0 / (float(css) * dims["x"])
    layout = state.get("layout")
    parsed = ParsedState(tuple(sources), None, zoom, ng_position=ng_position, unit_nm=unit_nm, segments=segments,
                         layout=layout if isinstance(layout, str) else None, problems=tuple(problems))
    # until a source is opened, assume OME for zarr (the common case of a shared link)
    fmt = first_format or "precomputed"
    return replace(parsed, position=parsed.position_for(fmt, ome=fmt.startswith("zarr")))


def _format_of(url: str) -> str:
    if "|" in url:
        return url.rsplit("|", 1)[1].rstrip(":")
    scheme = url.split("://", 1)[0]
    return scheme if scheme in READABLE_PREFIXES else ""


def source_url(url: str, fmt: str) -> str:
    """A Neuroglancer source URL for a dataset at ``url`` stored as ``fmt`` (the prefix names the format)."""
    prefix = {"zarr": "zarr", "zarr2": "zarr2", "zarr3": "zarr3", "n5": "n5"}.get(fmt, "precomputed")
    if url.startswith("/"):
        raise ArgumentError(f"{url}: Neuroglancer cannot read a local path; serve it (shardscope serve)")
    return f"{prefix}://{url}"


def segment_ids(values: Sequence[Any]) -> tuple[int, ...]:
    """Body ids as ints (from a controller's selection, a CLI list…)."""
    return tuple(int(v) for v in values)
