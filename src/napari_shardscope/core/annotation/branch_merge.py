"""Annotation-aware merge of two branches: a three-way merge of annotations, id by id.

Every key of an annotation carries its id (:mod:`.keys`), so what changed on a side since the
merge base is the set of ids whose *record* it rewrote (the store's per-version change index
lists them; the index keys change with the record). Per id, with ``r0``, ``ra`` and ``rb`` the
records at the merge base, ours and theirs:

* ``ra == rb`` — nothing to do (also when both sides made the same edit);
* ``rb == r0`` — ours stands; ``ra == r0`` — theirs is taken;
* otherwise the id is a **conflict**, named ``"annotation:<id>"`` as the labelmap names
  ``"body:<id>"``: settled per id by ``resolutions`` (``ours`` / ``theirs``) or by ``policy``; with
  ``fail`` (the default) and any left, :class:`AnnotationMergeConflictError` lists them and
  nothing is written.

A relationship rewrites both of its annotations, so linking a synapse on one side and deleting or
moving its partner on the other is a conflict of that partner, never a half-linked pair.

The merge version (parents ours, theirs) holds ours' records plus one mutation, ``merge-branches``,
which writes the records taken from theirs with their index keys: one undo takes the merge back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.editing import AnnotationBackend, Editor, commit_edit, decode, effective
from napari_shardscope.core.annotation.errors import AnnotationArgumentError, AnnotationError
from napari_shardscope.core.annotation.model import Annotation, encode_record
from napari_shardscope.core.annotation.mutations import AnnotationMutation
from napari_shardscope.core.errors import ConflictError
from napari_shardscope.core.labelmap import Labelmap
from napari_shardscope.core.labelmap.branch_merge import BranchMergeResult, merge_branches
from napari_shardscope.core.labelmap.branch_merge import MergePolicy as LabelmapPolicy
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import UncommittedVersionError
from napari_shardscope.core.versioned.view import VersionWriter

Resolution = Literal["ours", "theirs"]
MergePolicy = Literal["fail", "ours", "theirs"]


@dataclass(frozen=True)
class AnnotationConflict:
    """An annotation both sides changed differently since the merge base (None: absent there)."""

    id: int
    base: Annotation | None
    ours: Annotation | None
    theirs: Annotation | None

    @property
    def key(self) -> str:
        """How a resolution names this conflict: ``"annotation:123"``."""
        return f"annotation:{self.id}"

    def to_json(self) -> dict[str, Any]:
        def show(a: Annotation | None) -> dict[str, Any] | None:
            return None if a is None else a.to_json()

        return {"key": self.key, "id": self.id, "base": show(self.base), "ours": show(self.ours),
                "theirs": show(self.theirs)}


@dataclass(frozen=True)
class AnnotationMergePlan:
    """What merging ``theirs`` into ``ours`` involves (read from the store; nothing written).

    ``take`` are the ids only theirs changed, ``keep`` the ids only ours changed.
    """

    instance: str
    ours: str
    theirs: str
    base: str
    take: tuple[int, ...]
    keep: tuple[int, ...]
    conflicts: tuple[AnnotationConflict, ...]
    records: Mapping[int, tuple[bytes | None, bytes | None, bytes | None]]

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "ours": self.ours, "theirs": self.theirs, "base": self.base,
                "take": list(self.take), "keep": list(self.keep), "conflicts": [c.to_json() for c in self.conflicts]}


@dataclass(frozen=True)
class AnnotationMergeResult:
    """The open merge version, the plan, the ``merge-branches`` record and the ids taken from theirs."""

    version: Version
    plan: AnnotationMergePlan
    mutation: AnnotationMutation
    taken: tuple[int, ...]
    resolutions: Mapping[str, str]


class AnnotationMergeConflictError(AnnotationError, ConflictError):
    """Annotations changed differently on both sides, with no resolution; ``unresolved`` lists them."""

    def __init__(self, message: str, plan: AnnotationMergePlan, unresolved: Sequence[AnnotationConflict]) -> None:
        super().__init__(message)
        self.plan = plan
        self.unresolved = tuple(unresolved)


def _committed(backend: AnnotationBackend, ref: str | Version) -> Version:
    v = backend.repo.version(ref)
    if not v.locked:
        raise UncommittedVersionError(f"version {v.short} is open; commit it before merging")
    return v


def _changed_ids(backend: AnnotationBackend, head: Version, base: Version) -> set[int]:
    """Ids whose record a version between ``base`` (excluded) and ``head`` wrote (the change index)."""
    repo = backend.repo
    below = {v.uuid for v in repo.ancestry(base)}
    ids: set[int] = set()
    for v in repo.ancestry(head):
        if v.uuid in below:
            continue
        with repo.read(v) as view:
            for c in view.changes(backend.instance):
                if c.key[:1] == K.RECORD_PREFIX and len(c.key) == 9:
                    ids.add(K.id_of_record_key(c.key))
    return ids


def plan_annotation_merge(backend: AnnotationBackend, ours: str | Version,
                          theirs: str | Version) -> AnnotationMergePlan:
    """Compare ``ours`` and ``theirs`` (both committed) with their merge base, id by id (reads only)."""
    a, b = _committed(backend, ours), _committed(backend, theirs)
    if a.uuid == b.uuid:
        raise AnnotationArgumentError("cannot merge a version with itself")
    base = backend.repo.merge_base(a, b)
    ids = sorted(_changed_ids(backend, a, base) | _changed_ids(backend, b, base))
    keys = [K.record_key(i) for i in ids]
    sides = []
    for v in (base, a, b):
        with backend.repo.read(v) as view:
            sides.append(view.get_many(backend.instance, keys))
    if backend.base is not None:  # a base annotation no version rewrote compares as its base record
        from_base = backend.base.stored(ids)
        sides = [[encode_record(from_base[i]) if r is None and i in from_base else r for i, r in zip(ids, side,
                                                                                                     strict=True)]
                 for side in sides]
    take: list[int] = []
    keep: list[int] = []
    conflicts: list[AnnotationConflict] = []
    records: dict[int, tuple[bytes | None, bytes | None, bytes | None]] = {}
    for i, r0, ra, rb in zip(ids, *sides, strict=True):
        # compared as annotations: a record rewritten to what it was (or a base annotation's copy, whose
        # supervoxel is read at query time) is unchanged
        a0, aa, ab = (None if s is None else s.annotation for s in (decode(i, r) for r in (r0, ra, rb)))
        if aa == ab:
            continue
        records[i] = (r0, ra, rb)
        if ab == a0:
            keep.append(i)
        elif aa == a0:
            take.append(i)
        else:
            conflicts.append(AnnotationConflict(i, a0, aa, ab))
    return AnnotationMergePlan(backend.name, a.uuid, b.uuid, base.uuid, tuple(take), tuple(keep), tuple(conflicts),
                               records)


def resolve_annotation_merge(plan: AnnotationMergePlan, *, resolutions: Mapping[str, str] | None = None,
                             policy: str = "fail") -> tuple[tuple[int, ...], dict[str, str]]:
    """The ids to take from theirs and each conflict's side; raises for unresolved conflicts (writes nothing)."""
    if policy not in ("fail", "ours", "theirs"):
        raise AnnotationArgumentError(f"policy must be fail, ours or theirs, got {policy!r}")
    chosen = dict(resolutions or {})
    known = {c.key for c in plan.conflicts}
    for key, side in chosen.items():
        if key not in known:
            raise AnnotationArgumentError(f"resolution {key!r} names no conflict "
                                          f"(conflicts: {', '.join(sorted(known)) or 'none'})")
        if side not in ("ours", "theirs"):
            raise AnnotationArgumentError(f"resolution of {key} must be 'ours' or 'theirs', got {side!r}")
    unresolved = [c for c in plan.conflicts if c.key not in chosen and policy == "fail"]
    if unresolved:
        shown = ", ".join(str(c.id) for c in unresolved[:5]) + (", …" if len(unresolved) > 5 else "")
        raise AnnotationMergeConflictError(
            f"merging {plan.theirs[:8]} into {plan.ours[:8]}: {len(unresolved)} annotation(s) of {plan.instance!r} "
            f"changed differently on both sides since {plan.base[:8]} ({shown}); choose for each: keep mine (ours) "
            f"or keep theirs (theirs)", plan, unresolved)
    sides = {c.key: chosen.get(c.key, policy) for c in plan.conflicts}
    take = sorted([*plan.take, *(c.id for c in plan.conflicts if sides[c.key] == "theirs")])
    return tuple(take), sides


def merge_annotation_branches(backend: AnnotationBackend, ours: str, theirs: str, *,
                              resolutions: Mapping[str, str] | None = None, policy: str = "fail",
                              branch: str | None = None, user: str | None = None,
                              message: str | None = None) -> AnnotationMergeResult:
    """Merge branch head ``theirs`` into ``ours`` as a new open version (parents ours, theirs).

    Other instances' keys merge by the store's key rule (conflicts there fail); a repository whose
    labelmap was edited on both sides needs the labelmap's branch merge as well (see the pending notes).
    """
    plan = plan_annotation_merge(backend, ours, theirs)
    take, sides = resolve_annotation_merge(plan, resolutions=resolutions, policy=policy)
    written: list[AnnotationMutation] = []

    def write(w: VersionWriter) -> None:
        written.append(write_merge(w, backend, plan, take, sides, user, message))

    result = backend.repo.merge(plan.ours, plan.theirs, branch=branch, keep_ours=[backend.name], then=write)
    return AnnotationMergeResult(result.version, plan, written[0], take, sides)


def write_merge(w: VersionWriter, backend: AnnotationBackend, plan: AnnotationMergePlan, take: Sequence[int],
                sides: Mapping[str, str], user: str | None, message: str | None = None) -> AnnotationMutation:
    """Write the records taken from theirs on the merge version (which holds ours'), as one mutation."""
    ed = Editor(w, backend.instance, backend.block, backend.base)
    for i in take:
        ed.store(i, effective(backend.base, i, plan.records[i][2]))
    args: dict[str, Any] = {"ours": plan.ours, "theirs": plan.theirs, "base": plan.base, "taken": list(take),
                            "resolutions": dict(sides)}
    if message:
        args["message"] = message
    return commit_edit(w, backend, ed, "merge-branches", args, user)


@dataclass(frozen=True)
class CombinedMergeResult:
    """A branch merge of a labelmap and the annotation instances bound to it: one merge version."""

    version: Version
    labelmap: BranchMergeResult
    annotations: Mapping[str, AnnotationMergeResult]


def merge_with_labelmap(lm: Labelmap, annotations: Sequence[AnnotationBackend], ours: str, theirs: str, *,
                        resolutions: Mapping[str, str] | None = None, policy: str = "fail",
                        branch: str | None = None, user: str | None = None,
                        message: str | None = None) -> CombinedMergeResult:
    """Merge ``theirs`` into ``ours`` for a labelmap *and* its annotation instances, as one merge version.

    The labelmap merges its edits (:func:`~napari_shardscope.core.labelmap.branch_merge.merge_branches`),
    each annotation instance its records id by id; ``resolutions`` holds both kinds of conflict key
    (``"body:12"``, ``"supervoxel:34"``, ``"annotation:56"``; an annotation key applies to every
    instance with that conflict). The annotations are planned and checked first, so unresolved
    annotation conflicts raise :class:`AnnotationMergeConflictError` before anything is written.
    """
    chosen = dict(resolutions or {})
    ann_keys = {k: v for k, v in chosen.items() if k.startswith("annotation:")}
    lm_keys = {k: v for k, v in chosen.items() if k not in ann_keys}
    decided: list[tuple[AnnotationBackend, AnnotationMergePlan, tuple[int, ...], dict[str, str]]] = []
    named: set[str] = set()
    for backend in annotations:
        if backend.labelmap.name != lm.name:
            raise AnnotationArgumentError(f"annotation instance {backend.name!r} is bound to labelmap "
                                          f"{backend.labelmap.name!r}, not {lm.name!r}")
        plan = plan_annotation_merge(backend, ours, theirs)
        mine = {c.key for c in plan.conflicts}
        named |= mine & set(ann_keys)
        take, sides = resolve_annotation_merge(plan, resolutions={k: v for k, v in ann_keys.items() if k in mine},
                                               policy=policy)
        decided.append((backend, plan, take, sides))
    stray = sorted(set(ann_keys) - named)
    if stray:
        raise AnnotationArgumentError(f"resolution {stray[0]!r} names no annotation conflict")
    for backend, *_ in decided:
        backend.top_up_ids()  # the merge logs a mutation per instance: a clone reserves ids while online
    written: dict[str, AnnotationMutation] = {}

    def write(w: VersionWriter) -> None:
        for backend, plan, take, sides in decided:
            written[backend.name] = write_merge(w, backend, plan, take, sides, user, message)

    lm_policy: LabelmapPolicy = "ours" if policy == "ours" else "theirs" if policy == "theirs" else "fail"
    done = merge_branches(lm, ours, theirs, resolutions=lm_keys, policy=lm_policy,  # type: ignore[arg-type]
                          branch=branch, user=user, message=message, keep_ours=[b.name for b, *_ in decided],
                          then=write)
    results = {b.name: AnnotationMergeResult(done.version, plan, written[b.name], take, sides)
               for b, plan, take, sides in decided}
    return CombinedMergeResult(done.version, done, results)
