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

import numpy as np

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
from napari_shardscope.core.versioned.remotes.id_blocks import reserve_ids
from napari_shardscope.core.versioned.repository import Repository

TYPE_NAME = "annotation"
#: The instance format this library writes (the record layout of :mod:`.model` and :mod:`.keys`).
#: 2: the synapse index (:mod:`.synapse_index`) is kept from the instance's creation on, and the
#: instance may have an imported base (:mod:`.base`; its synapses are not in the index, so the
#: connectome of such an instance is recounted). Format-1 instances are read, and their connectome
#: is recounted from the records. 3: every annotation is also filed under its supervoxel (the
#: ``v`` keys of :mod:`.keys`), so ``synapses(body)`` reads the body's supervoxels' annotations only;
#: format-2 instances are read as before (their synapses found through the body's blocks).
FORMAT = 3
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
    config: dict[str, Any] = {"format": FORMAT, "labelmap": lm_name}
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
        # each site's supervoxel is read at the root (every version descends from it; a later split
        # that retires one is found by the connectome, which re-resolves those sites by their point)
        built = build_base(base, base_dir, shape=lm.config.scales[0].shape, block=lm.config.block,
                           columns=columns, voxel_size=voxel_size, format=base_format,
                           labelmap=lm.at(repo.root.uuid))
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


def add_many(v: AnnotationVersion, kinds: Sequence[str] | str, points: Any, *, ids: Sequence[int] | None = None,
             synapses: Any = None, user: str | None = None) -> list[int]:
    """Add ``len(points)`` annotations at open version ``v`` in one transaction; returns their ids.

    ``kinds`` is one kind for all or one per point; ``points`` an (n, 3) array of (z, y, x)
    voxels; ``ids`` explicit ids (default: handed out, one block); ``synapses`` an (m, 2) array of
    row indices ``(pre row, post row)`` linked ``PreSynTo`` / ``PostSynTo``. The supervoxels under
    the points are read once per labelmap block (vectorised), records and index keys written in
    batches. One ``add-many`` mutation is logged *without* its keys (a log record of 10⁷ keys would
    dwarf the data): a bulk add cannot be undone, and it empties the version's undo and redo stacks
    so an undo never reaches past it.
    """
    from napari_shardscope.core.annotation import keys as K
    from napari_shardscope.core.annotation.editing import default_user
    from napari_shardscope.core.annotation.errors import AnnotationExistsError
    from napari_shardscope.core.annotation.model import KINDS, check_id, check_kind
    from napari_shardscope.core.annotation.mutations import AnnotationMutation
    from napari_shardscope.core.annotation.points import supervoxels_at

    backend = v.instance
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] != 3 or not np.issubdtype(pts.dtype, np.integer):
        raise AnnotationArgumentError(f"points must be an (n, 3) integer array of (z, y, x) voxels, "
                                      f"got shape {pts.shape} of {pts.dtype}")
    pts = pts.astype(np.int64)
    n = len(pts)
    shape = np.asarray(backend.shape, dtype=np.int64)
    bad = np.flatnonzero(((pts < 0) | (pts >= shape)).any(axis=1))
    if bad.size:
        raise AnnotationArgumentError(f"point {tuple(int(c) for c in pts[bad[0]])} (row {int(bad[0])}) is outside "
                                      f"the labelmap's scale-0 shape {backend.shape} (z, y, x)")
    kind_list = [check_kind(kinds)] * n if isinstance(kinds, str) else [check_kind(k) for k in kinds]
    if len(kind_list) != n:
        raise AnnotationArgumentError(f"{len(kind_list)} kinds for {n} points")
    pairs = np.zeros((0, 2), dtype=np.int64) if synapses is None else np.asarray(synapses)
    if pairs.size and (pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer)
                       or pairs.min() < 0 or pairs.max() >= n):
        raise AnnotationArgumentError(f"synapses must be an (m, 2) array of row indices in 0..{n - 1}")
    pairs = pairs.reshape(-1, 2).astype(np.int64)
    code_of = {k: i for i, k in enumerate(KINDS)}
    kcode = np.fromiter(map(code_of.__getitem__, kind_list), dtype=np.uint8, count=n)
    wrong = np.flatnonzero((kcode[pairs[:, 0]] != KINDS.index("pre")) | (kcode[pairs[:, 1]] != KINDS.index("post")))
    if wrong.size:
        pi, qi = (int(x) for x in pairs[wrong[0]])
        raise AnnotationArgumentError(f"synapse rows ({pi}, {qi}) link a {kind_list[pi]} to a {kind_list[qi]}; "
                                      f"a synapse links a pre to a post annotation")
    pairs = np.unique(pairs, axis=0) if len(pairs) else pairs
    chosen = None if ids is None else [check_id(int(i)) for i in ids]
    if chosen is not None and (len(chosen) != n or len(set(chosen)) != n):
        raise AnnotationArgumentError(f"ids must be {n} distinct ids, one per point")
    if n == 0:
        return []
    lmv = backend.labelmap.at(v.uuid)
    svs = supervoxels_at(lmv, pts, backend.block)
    inst = backend.instance
    counter = K.ids_counter(backend.name)
    backend.top_up_ids()
    with backend.edit_lock, backend.repo.write(v.uuid) as w:
        if chosen is None:
            got = w.allocate_ids(counter, n, minimum=1)
            out = list(got)
        else:
            out = chosen
            raws = w.get_many(inst, [K.record_key(i) for i in out])
            in_base = backend.base.stored([i for i, raw in zip(out, raws, strict=True) if raw is None]) \
                if backend.base is not None else {}
            # a record (not a tombstone: b"" is a deleted base annotation) or a base annotation not rewritten
            taken = [i for i, raw in zip(out, raws, strict=True) if raw or (raw is None and i in in_base)]
            if taken:
                raise AnnotationExistsError(f"annotation {taken[0]} already exists at version {v.uuid[:8]}")
            if backend.repo.id_source() is None:
                w.allocate_ids(counter, 1, minimum=max(out) + 1)
        ida = np.asarray(out, dtype=np.uint64)
        write_rows(w, inst, ida, kind_list, pts, svs, pairs, backend.block, fresh=chosen is None, codes=kcode)
        for key in (K.undo_top_key(v.uuid), K.redo_top_key(v.uuid)):
            w.delete(inst, key)
        mid = w.allocate_ids(K.mutations_counter(backend.name), 1, minimum=1)[0]
        kinds_count = {k: kind_list.count(k) for k in KINDS if k in kind_list}
        m = AnnotationMutation(mid, "add-many", (), {"count": n, "kinds": kinds_count, "synapses": len(pairs),
                                                    "first": out[0], "last": out[-1]},
                               user or default_user(), time.time())
        w.append_log(inst, m.to_bytes())
    return out


#: Rows written per bulk put of :func:`add_many` (bounds the memory of the key lists it builds).
ADD_MANY_ROWS = 1 << 17
_HEAD = np.dtype([("fmt", "u1"), ("kind", "u1"), ("z", "<i8"), ("y", "<i8"), ("x", "<i8"), ("sv", "<u8"),
                  ("n", "<u4")])
_SPATIAL = np.dtype([("p", "S1"), ("bz", ">u4"), ("by", ">u4"), ("bx", ">u4"), ("id", ">u8")])
_SUPERVOXEL = np.dtype([("p", "S1"), ("sv", ">u8"), ("id", ">u8")])
_EDGE = np.dtype([("p", "S1"), ("sv", ">u8"), ("d", "S1"), ("own", ">u8"), ("partner", ">u8")])
_EDGE_VALUE = np.dtype([("sv", "<u8"), ("z", "<i8"), ("y", "<i8"), ("x", "<i8")])


_RECORD = np.dtype([("p", "S1"), ("id", ">u8")])


def _rows(records: Any) -> Any:
    """A structured array's records as an ``(n, itemsize)`` uint8 array (each row one key's bytes)."""
    return np.ascontiguousarray(records).view(np.uint8).reshape(len(records), records.dtype.itemsize)


def _split(buf: bytes, width: int) -> list[bytes]:
    return [buf[i:i + width] for i in range(0, len(buf), width)]


def write_rows(w: Any, inst: Instance, ids: Any, kinds: Sequence[str], pts: Any, svs: Any, pairs: Any,
               block: tuple[int, int, int], *, fresh: bool, codes: Any) -> None:
    """Records, spatial keys and synapse index keys of a bulk add, built as NumPy records and put in bulk.

    Byte for byte what :meth:`~.version.AnnotationVersion.add` and :meth:`relate` write per annotation
    (the model test compares the index with a recount): the record's fixed head is one structured
    array, its JSON tail (the relationships) formatted only for annotations that have one.
    """
    from napari_shardscope.core.annotation import keys as K
    from napari_shardscope.core.annotation import synapse_index as S
    from napari_shardscope.core.annotation.model import Annotation, Relationship, Stored, encode_record

    n = len(ids)
    idl = ids.tolist()
    tails: list[bytes] = [b""] * n
    links: dict[int, list[tuple[int, str]]] = {}
    for pi, qi in pairs.tolist():
        links.setdefault(pi, []).append((idl[qi], "PreSynTo"))
        links.setdefault(qi, []).append((idl[pi], "PostSynTo"))
    for row, ls in links.items():
        if len(ls) == 1:
            tails[row] = b'{"rels":[["%s",%d]]}' % (ls[0][1].encode(), ls[0][0])
        else:
            rels = tuple(Relationship(rel, to) for to, rel in sorted(set(ls)))
            p = pts[row]
            full = encode_record(Stored(Annotation(idl[row], kinds[row], (int(p[0]), int(p[1]), int(p[2])), (), {},
                                                   rels), int(svs[row])))
            tails[row] = full[_HEAD.itemsize:]
    head = np.zeros(n, dtype=_HEAD)
    head["fmt"] = 1
    head["kind"] = codes  # the kinds' indexes in KINDS
    head["z"], head["y"], head["x"] = pts[:, 0], pts[:, 1], pts[:, 2]
    head["sv"] = svs
    head["n"] = [len(t) for t in tails]
    spatial = np.zeros(n, dtype=_SPATIAL)
    spatial["p"] = K.SPATIAL_PREFIX
    cells = pts // np.asarray(block, dtype=np.int64)
    spatial["bz"], spatial["by"], spatial["bx"] = cells[:, 0], cells[:, 1], cells[:, 2]
    spatial["id"] = ids
    by_sv = np.zeros(n, dtype=_SUPERVOXEL)
    by_sv["p"] = K.SUPERVOXEL_PREFIX
    by_sv["sv"], by_sv["id"] = svs, ids
    rec = np.zeros(n, dtype=_RECORD)
    rec["p"] = K.RECORD_PREFIX
    rec["id"] = ids
    for lo in range(0, n, ADD_MANY_ROWS):
        hi = min(n, lo + ADD_MANY_ROWS)
        heads = _split(head[lo:hi].tobytes(), _HEAD.itemsize)
        values = [h + t for h, t in zip(heads, tails[lo:hi], strict=True)]
        # the keys as byte rows: the engine keys are built as arrays (put_new_rows), not one bytes at a time
        w.put_new_rows(inst, _rows(rec[lo:hi]), values, fresh=fresh)
        w.put_new_rows(inst, _rows(spatial[lo:hi]), None, fresh=fresh)
        w.put_new_rows(inst, _rows(by_sv[lo:hi]), None, fresh=fresh)
    for lo in range(0, len(pairs), ADD_MANY_ROWS // 2):
        part = pairs[lo:lo + ADD_MANY_ROWS // 2]
        pre, post = part[:, 0], part[:, 1]
        m = len(part)
        keys = np.zeros(2 * m, dtype=_EDGE)
        vals = np.zeros(2 * m, dtype=_EDGE_VALUE)
        keys["p"] = S.EDGE_PREFIX
        for j, (own, other, d) in enumerate(((pre, post, S.OUT), (post, pre, S.IN))):
            sl = slice(j * m, (j + 1) * m)
            keys["sv"][sl], keys["d"][sl] = svs[own], d
            keys["own"][sl], keys["partner"][sl] = ids[own], ids[other]
            vals["sv"][sl] = svs[other]
            vals["z"][sl], vals["y"][sl], vals["x"][sl] = pts[other, 0], pts[other, 1], pts[other, 2]
        w.put_new_rows(inst, _rows(keys), _split(vals.tobytes(), _EDGE_VALUE.itemsize), fresh=fresh)


def _annotation_step(repo: Repository, progress: Progress | None) -> str | None:
    """``repo migrate``'s annotation step: it checks every configuration (formats 1 and 2 are read as they are:
    their queries fall back to the paths that do not need the indexes added later)."""
    for inst in repo.instances():
        if inst.type == TYPE_NAME:
            annotation_config(inst)
    return None


register_migration(TYPE_NAME, _annotation_step)

__all__ = ["DATA_PREFIXES", "FORMAT", "TYPE_NAME", "AnnotationInstance", "add_many", "annotation_config",
           "create_annotation_instance", "open_annotation_instance"]
