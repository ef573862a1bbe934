"""A version's annotations as a Neuroglancer precomputed annotation collection (``neuroglancer_annotations_v1``).

What Neuroglancer users of synapse data expect decides the layout. Published synapse sources
(FlyWire's and the Janelia hemibrain's synapse layers, CAVE's exports) are ``line`` annotations from the
presynaptic to the postsynaptic site with two relationships, ``pre_segment`` and ``post_segment``:
selecting a segment in the linked segmentation layer lists its outputs and its inputs. So
``geometry="lines"`` (the default) writes one line per linked pair (``PreSynTo``) of the version;
``geometry="points"`` writes every annotation (``pre``, ``post`` and plain ``point``) as a point with
an enum property ``kind`` and one relationship, ``segment``.

The related ids are the **version's body ids**: the body owning each point is resolved through the
version's labelmap exactly as :meth:`~.version.AnnotationVersion.by_body` resolves it (the recorded
supervoxel through the version's body map; the voxel under the point when a split retired that
supervoxel). The relationship index of body ``b`` therefore holds the synapses of ``b`` *at that
version*: export after a merge and the merged body lists both bodies' synapses.

Coordinates are the labelmap's scale-0 voxels in x, y, z order (the dimensions' scales are its voxel
size in nm) plus the base's voxel offset, at the voxel's centre (``i + 0.5``: Neuroglancer puts voxel
``i`` of a precomputed volume over ``[i, i + 1)``), so a point sits on the voxel it annotates in the
version's served segmentation.

Properties: the instance's properties become typed properties (numbers as ``int32`` when every
annotation has an integer that fits, else ``float32`` with NaN for "not set"; booleans and strings as
enums whose labels are the values), each tag a ``uint8`` enum (``no``/``yes``) named ``tag_<tag>``.
Lines carry both ends' properties and tags, prefixed ``pre_`` and ``post_``. Property ids are made
to fit the spec's ``[a-z][a-zA-Z0-9_]*`` (the original name is the property's description).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.errors import AnnotationRecordError
from napari_shardscope.core.annotation.model import KINDS, Annotation, Stored, decode_record
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.formats.precomputed.annotations.schema import (
    MAX_ENUM_VALUES,
    AnnotationSchema,
    Dimension,
    PropertySpec,
)
from napari_shardscope.core.formats.precomputed.annotations.table import Annotations, Related, make_annotations
from napari_shardscope.core.formats.precomputed.annotations.writer import DEFAULT_LIMIT, WriteReport, write_annotations
from napari_shardscope.core.labelmap import Labelmap
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.repository import Repository


class _Backend(Protocol):
    """What an export reads of an annotation instance (an :class:`~.instance.AnnotationInstance`)."""

    repo: Repository
    instance: Instance
    labelmap: Labelmap

    @property
    def name(self) -> str: ...


class AnnotationVersion(Protocol):
    """An annotation instance at one version (:class:`~.version.AnnotationVersion`; a protocol here, so that
    :meth:`~.version.AnnotationVersion.export` can call this module without an import cycle)."""

    uuid: str

    @property
    def instance(self) -> _Backend: ...


Geometry = Literal["lines", "points"]
GEOMETRIES: tuple[str, ...] = ("lines", "points")
#: Relationship names of each geometry (the ones published synapse sources use for lines).
RELATIONSHIPS: dict[str, tuple[str, ...]] = {"lines": ("pre_segment", "post_segment"), "points": ("segment",)}
#: At most this many properties (instance properties and tags, both ends for lines) in one export: each is
#: a column of every record and a row of Neuroglancer's selection panel. Choose with ``properties=``/``tags=``.
MAX_EXPORT_PROPERTIES = 256
#: The high bit marks a line id made from its (pre, post) pair (a post site linked to several pre sites).
PAIR_ID_BIT = 1 << 63
_ID_CHARS = re.compile(r"[^a-zA-Z0-9_]")


@dataclass(frozen=True)
class AnnotationExportReport:
    """What :func:`export_annotations` wrote."""

    instance: str
    version: str
    geometry: str
    #: Annotations of the version, and those written (lines: linked pairs).
    annotations: int
    written: int
    #: Lines: annotations in no ``PreSynTo`` pair (not drawn as lines; ``geometry="points"`` shows them).
    unpaired: int
    write: WriteReport

    @property
    def url(self) -> str:
        return self.write.url

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "version": self.version, "geometry": self.geometry,
                "annotations": self.annotations, "written": self.written, "unpaired": self.unpaired,
                **self.write.to_json()}


@dataclass(frozen=True)
class _Owned:
    """Every record of a version with the body owning its point there."""

    records: dict[int, Stored]
    bodies: dict[int, int]


def read_owned(version: AnnotationVersion) -> _Owned:
    """Every annotation of ``version`` and its body there (one scan; voxels read only after splits)."""
    backend = version.instance
    records: dict[int, Stored] = {}
    with backend.repo.read(version.uuid) as view:
        for key, raw in view.scan(backend.instance, prefix=K.RECORD_PREFIX):
            aid = K.id_of_record_key(key)
            records[aid] = decode_record(aid, raw, key=f"annotation {aid}")
    bodies: dict[int, int] = {}
    if records:
        lm = backend.labelmap
        lmv = lm.at(version.uuid)
        ids = list(records)
        svs = np.asarray([records[i].supervoxel for i in ids], dtype=np.uint64)
        exists = lm.exists(lm.state(version.uuid), svs)
        owners = lmv.bodies_of(svs)
        for aid, ok, b in zip(ids, exists.tolist(), owners.tolist(), strict=True):
            s = records[aid]
            bodies[aid] = int(b) if ok and s.supervoxel else lmv.body_at(s.annotation.point)
    return _Owned(records, bodies)


def linked_pairs(records: dict[int, Stored]) -> list[tuple[int, int]]:
    """The version's synapses: (pre id, post id) of every ``PreSynTo`` link (read from either end), sorted."""
    pairs: set[tuple[int, int]] = set()
    for aid, s in records.items():
        for r in s.annotation.relationships:
            pair = (aid, r.to) if r.rel == "PreSynTo" else (r.to, aid) if r.rel == "PostSynTo" else None
            if pair is None:
                continue
            if pair[0] not in records or pair[1] not in records:
                raise AnnotationRecordError(f"annotation {aid} is linked ({r.rel}) to annotation {r.to}, which "
                                            f"does not exist at this version")
            pairs.add(pair)
    return sorted(pairs)


def pair_id(pre: int, post: int) -> int:
    """The id of a line for a post site's second and later pre sites: a hash of the pair, high bit set."""
    digest = hashlib.blake2b(f"{pre}:{post}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") | PAIR_ID_BIT


def line_ids(pairs: Sequence[tuple[int, int]]) -> list[int]:
    """One id per pair: the post site's id (it has one pre site in a synapse), else :func:`pair_id`."""
    taken: set[int] = set()
    out = []
    for pre, post in sorted(pairs, key=lambda p: (p[1], p[0])):
        lid = post if post not in taken else pair_id(pre, post)
        if lid in taken:
            raise ArgumentError(f"line id {lid} of synapse {pre}->{post} collides with another line's")
        taken.add(lid)
        out.append(lid)
    order = {p: i for i, p in enumerate(sorted(pairs, key=lambda p: (p[1], p[0])))}
    return [out[order[p]] for p in pairs]


def property_id(name: str, taken: set[str]) -> str:
    """``name`` made a spec property id (``[a-z][a-zA-Z0-9_]*``), distinct from ``taken`` (then added to it)."""
    base = _ID_CHARS.sub("_", name)
    if not base or not ("a" <= base[0] <= "z"):
        base = "p_" + base
    pid, n = base, 2
    while pid in taken:
        pid, n = f"{base}_{n}", n + 1
    taken.add(pid)
    return pid


def _column(name: str, pid: str, values: list[Any]) -> tuple[PropertySpec, npt.NDArray[Any]]:
    """A property spec and its column for one instance property (``None``: not set on that annotation)."""
    present = [v for v in values if v is not None]
    missing = len(present) < len(values)
    if present and all(isinstance(v, bool) for v in present):
        labels = ["false", "true", *(["unset"] if missing else [])]
        col = np.asarray([2 if v is None else int(v) for v in values], dtype=np.uint8)
        return PropertySpec(pid, "uint8", name, tuple(range(len(labels))), tuple(labels)), col
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        if not missing and all(isinstance(v, int) and -(2**31) <= v < 2**31 for v in present):
            return PropertySpec(pid, "int32", name), np.asarray(values, dtype=np.int32)
        col = np.asarray([math.nan if v is None else float(v) for v in values], dtype=np.float32)
        return PropertySpec(pid, "float32", name), col
    distinct = sorted({str(v) for v in present})
    if missing:
        distinct.append("")  # "not set"
    if len(distinct) > MAX_ENUM_VALUES:
        raise ArgumentError(f"property {name!r} has {len(distinct)} distinct values: an exported enum holds at most "
                            f"{MAX_ENUM_VALUES}; leave it out with properties=[...] (CLI --properties)")
    code = {label: i for i, label in enumerate(distinct)}
    ptype: Literal["uint8", "uint16", "uint32"] = ("uint8" if len(distinct) <= 256 else
                                                   "uint16" if len(distinct) <= 65536 else "uint32")
    col = np.asarray([code["" if v is None else str(v)] for v in values], dtype=ptype)
    return PropertySpec(pid, ptype, name, tuple(range(len(distinct))), tuple(distinct)), col


def property_columns(ends: Sequence[tuple[str, Sequence[Annotation]]], *, properties: Sequence[str] | None,
                     tags: Sequence[str] | None, taken: set[str]) -> tuple[list[PropertySpec], dict[str, Any]]:
    """Typed property columns of each ``(prefix, annotations)`` end (one annotation per exported row)."""
    specs: list[PropertySpec] = []
    columns: dict[str, Any] = {}
    planned: list[tuple[str, str, Sequence[Annotation], bool]] = []
    for prefix, rows in ends:
        names = sorted({k for a in rows for k in a.properties})
        tag_names = sorted({t for a in rows for t in a.tags})
        if properties is not None:
            names = [n for n in names if n in set(properties)]
        if tags is not None:
            tag_names = [t for t in tag_names if t in set(tags)]
        planned += [(prefix, n, rows, False) for n in names] + [(prefix, t, rows, True) for t in tag_names]
    if len(planned) > MAX_EXPORT_PROPERTIES:
        raise ArgumentError(f"the export would have {len(planned)} properties (instance properties and tags"
                            f"{', both ends of each line' if len(ends) > 1 else ''}), more than "
                            f"{MAX_EXPORT_PROPERTIES}: choose some with properties=[...] and tags=[...] "
                            f"(CLI --properties, --tags)")
    for prefix, name, rows, is_tag in planned:
        if is_tag:
            pid = property_id(f"{prefix}tag_{name}", taken)
            col = np.asarray([name in a.tags for a in rows], dtype=np.uint8)
            spec = PropertySpec(pid, "uint8", f"{prefix}tag {name}", (0, 1), ("no", "yes"))
        else:
            pid = property_id(prefix + name, taken)
            spec, col = _column(prefix + name, pid, [a.properties.get(name) for a in rows])
        specs.append(spec)
        columns[pid] = col
    return specs, columns


def dimensions_of(version: AnnotationVersion) -> tuple[tuple[Dimension, ...], npt.NDArray[np.float64],
                                                        npt.NDArray[np.float64]]:
    """The collection's x, y, z dimensions (the labelmap's scale-0 voxel, nm) and the volume's extent in them."""
    g = version.instance.labelmap.config.scales[0]
    vz, vy, vx = (float(v) for v in g.voxel_size)
    offset = np.asarray([round(t / v) for t, v in zip(g.translate, g.voxel_size, strict=True)][::-1], np.float64)
    dims = (Dimension("x", vx, "nm"), Dimension("y", vy, "nm"), Dimension("z", vz, "nm"))
    return dims, offset, offset + np.asarray(g.shape[::-1], np.float64)


def version_annotations(version: AnnotationVersion, *, geometry: Geometry = "lines",
                        properties: Sequence[str] | None = None, tags: Sequence[str] | None = None
                        ) -> tuple[Annotations, tuple[list[float], list[float]], int, int]:
    """The batch :func:`export_annotations` writes, its bounds, the version's annotations and the unpaired ones."""
    if geometry not in GEOMETRIES:
        raise ArgumentError(f"geometry must be one of {', '.join(GEOMETRIES)}, got {geometry!r}")
    owned = read_owned(version)
    dims, lo, hi = dimensions_of(version)

    def xyz(a: Annotation) -> list[float]:
        z, y, x = a.point
        return [x + lo[0] + 0.5, y + lo[1] + 0.5, z + lo[2] + 0.5]

    taken: set[str] = set()
    specs: list[PropertySpec] = []
    columns: dict[str, Any] = {}
    rels = RELATIONSHIPS[geometry]
    unpaired = 0
    if geometry == "points":
        ids = sorted(owned.records)
        rows = [owned.records[i].annotation for i in ids]
        geo = np.asarray([xyz(a) for a in rows], dtype=np.float64).reshape(-1, 3)
        taken.add("kind")
        specs.append(PropertySpec("kind", "uint8", "pre or post synaptic site, or a plain point",
                                  tuple(range(len(KINDS))), KINDS))
        columns["kind"] = np.asarray([KINDS.index(a.kind) for a in rows], dtype=np.uint8)
        more, more_cols = property_columns([("", rows)], properties=properties, tags=tags, taken=taken)
        related = {"segment": _related([[owned.bodies[i]] for i in ids])}
    else:
        pairs = linked_pairs(owned.records)
        ids = line_ids(pairs)
        paired = {x for p in pairs for x in p}
        unpaired = len(owned.records) - len(paired)
        pres = [owned.records[p].annotation for p, _ in pairs]
        posts = [owned.records[q].annotation for _, q in pairs]
        geo = np.asarray([xyz(a) + xyz(b) for a, b in zip(pres, posts, strict=True)],
                         dtype=np.float64).reshape(-1, 6)
        more, more_cols = property_columns([("pre_", pres), ("post_", posts)], properties=properties, tags=tags,
                                           taken=taken)
        related = {"pre_segment": _related([[owned.bodies[p]] for p, _ in pairs]),
                   "post_segment": _related([[owned.bodies[q]] for _, q in pairs])}
    specs += more
    columns.update(more_cols)
    schema = AnnotationSchema("point" if geometry == "points" else "line", dims, tuple(specs), rels)
    batch = make_annotations(schema, np.asarray(ids, dtype=np.uint64), geo.astype(np.float32), columns, related)
    lower, upper = lo.copy(), hi.copy()
    if geo.size:  # a point outside the volume (an imported base) widens the bounds rather than being lost
        pts = geo.reshape(-1, 3)
        lower = np.minimum(lower, np.floor(pts.min(axis=0)))
        upper = np.maximum(upper, np.floor(pts.max(axis=0)) + 1)
    return batch, (lower.tolist(), upper.tolist()), len(owned.records), unpaired


def _related(lists: list[list[int]]) -> Related:
    """One list of body ids per annotation; body 0 (no body under the point) is no related segment."""
    kept = [[b for b in bodies if b] for bodies in lists]
    counts = np.asarray([len(k) for k in kept], dtype=np.int64)
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = np.asarray([b for k in kept for b in k], dtype=np.uint64)
    return Related(offsets, values)


def export_annotations(version: AnnotationVersion, dest: str | os.PathLike[str], *, geometry: Geometry = "lines",
                       sharded: bool = True, properties: Sequence[str] | None = None,
                       tags: Sequence[str] | None = None, limit: int = DEFAULT_LIMIT, overwrite: bool = False,
                       progress: Progress | None = None) -> AnnotationExportReport:
    """Write ``version``'s annotations at ``dest`` as a precomputed annotation collection Neuroglancer shows.

    Parameters
    ----------
    version
        An annotation instance at one version (``inst.at(ref)``); an open version is written as it is now.
    dest
        A new local directory or writable URL (``gs://``, ``s3://``, ``file://``).
    geometry
        ``"lines"``: one line per synapse (pre site → post site) with relationships ``pre_segment`` and
        ``post_segment``; ``"points"``: every annotation, a ``kind`` enum, relationship ``segment``.
    sharded
        ``neuroglancer_uint64_sharded_v1`` indexes (default), or one file per key.
    properties, tags
        Only these instance properties / tags become exported properties (default: all of them).
    limit, overwrite, progress
        As :func:`~napari_shardscope.core.formats.precomputed.annotations.writer.write_annotations` takes them.

    Raises
    ------
    ArgumentError
        An unknown geometry, more than :data:`MAX_EXPORT_PROPERTIES` properties, a string property with
        more than 65,536 distinct values, or the writer's refusals (``RefusedDestinationError`` for an
        occupied ``dest``).
    """
    batch, (lower, upper), total, unpaired = version_annotations(version, geometry=geometry, properties=properties,
                                                                 tags=tags)
    report = write_annotations(dest, batch, sharded=sharded, lower_bound=lower, upper_bound=upper, limit=limit,
                               overwrite=overwrite, progress=progress)
    return AnnotationExportReport(version.instance.name, version.uuid, geometry, total, len(batch), unpaired, report)


__all__ = ["GEOMETRIES", "MAX_EXPORT_PROPERTIES", "RELATIONSHIPS", "AnnotationExportReport", "export_annotations",
           "linked_pairs", "version_annotations"]
