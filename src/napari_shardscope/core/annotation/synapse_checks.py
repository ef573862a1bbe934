"""Synapses that need a proofreader's look: orphan sites and weak partners, at one version.

Two kinds of finding, each a site (a point to go to) with a reason in words:

* **orphans** — a ``pre`` or ``post`` site whose point lies on background (label 0: no body owns
  it), that has no partner, or whose partner link names an annotation that is missing at this
  version (deleted, or never imported) or does not link back; and a synapse whose pre and post
  sites resolve to the same body (an *autapse*: real ones are rare in the fly connectomes, so a
  proofreader checks for a missed split or a misplaced site; flagged on the pre site);
* **weak partners** — for a body, each partner (outgoing and incoming apart) connected by fewer
  than ``min_synapses`` synapses. The default, 3, follows FlyEM's hemibrain and neuPrint analyses,
  which treat connections of one or two synapses as unreliable (often a false detection or a
  fragment that belongs elsewhere); CAVE users commonly pick a threshold of 3 to 5.

Bodies are read from the voxels under the points at the version (through the labelmap's body
map), so the findings follow merges, cleaves and splits with no annotation rewritten. The
proofreading layer turns findings into to-do items (:mod:`napari_shardscope.core.proofreading.synapse_todo`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from napari_shardscope.core.annotation import keys as K
from napari_shardscope.core.annotation.editing import effective
from napari_shardscope.core.annotation.errors import AnnotationArgumentError
from napari_shardscope.core.annotation.model import Annotation, Point
from napari_shardscope.core.annotation.points import supervoxels_at

if TYPE_CHECKING:
    from napari_shardscope.core.annotation.version import AnnotationVersion

CheckKind = Literal["orphans", "weak"]
CHECKS: tuple[CheckKind, ...] = ("orphans", "weak")
#: Partners with fewer synapses than this are weak (FlyEM's usual threshold: see the module text).
MIN_SYNAPSES = 3
#: With no body named, weak partners are listed for every body with at least this many synapses.
MIN_BODY_SYNAPSES = 10
_LINKS = {"pre": ("PreSynTo", "post", "PostSynTo"), "post": ("PostSynTo", "pre", "PreSynTo")}


@dataclass(frozen=True)
class SynapseFinding:
    """One site to look at: ``check`` (``orphans``/``weak``), the site's annotation, its body and why.

    ``reasons`` are short codes (``background``, ``no-partner``, ``partner-missing``, ``autapse``,
    ``partner-background``, ``weak``); ``note`` says it in words, naming ids and counts.
    """

    check: CheckKind
    annotation: int
    kind: str
    point: Point
    body: int
    reasons: tuple[str, ...]
    note: str
    partner_body: int = 0
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        z, y, x = self.point
        return {"check": self.check, "id": self.annotation, "kind": self.kind, "z": z, "y": y, "x": x,
                "body": self.body, "reasons": ",".join(self.reasons), "partner_body": self.partner_body,
                "count": self.count, "note": self.note}


def _tolerant_records(v: AnnotationVersion, ids: Iterable[int]) -> dict[int, Annotation]:
    """The annotations of ``ids`` that exist at ``v`` (a missing one is simply absent: that is a finding)."""
    ids = sorted(set(ids))
    if not ids:
        return {}
    with v.instance.repo.read(v.uuid) as view:
        raws = view.get_many(v.instance.instance, [K.record_key(i) for i in ids])
    out = {}
    for aid, raw in zip(ids, raws, strict=True):
        s = effective(v.instance.base, aid, raw)
        if s is not None:
            out[aid] = s.annotation
    return out


def bodies_at(v: AnnotationVersion, points: Sequence[Point]) -> list[int]:
    """The body under each point at ``v`` (0: background), read from the voxels."""
    if not points:
        return []
    lmv = v.instance.labelmap.at(v.uuid)
    svs = supervoxels_at(lmv, points, v.instance.block)
    return [int(b) for b in np.asarray(lmv.bodies_of(svs)).tolist()]


def _check_body(body: object) -> int:
    if isinstance(body, bool) or not isinstance(body, int | np.integer) or not 0 < int(body) < 2**64:
        raise AnnotationArgumentError(f"a body id must be a positive integer, got {body!r}")
    return int(body)


def find_orphans(v: AnnotationVersion, body: int | None = None) -> list[SynapseFinding]:
    """Orphan sites at ``v``: of the whole instance (``body`` None: costs every record) or of one body.

    With a body: its own sites without a valid partner, its autapses (pre sites), and the partner
    sites of its synapses that lie on background. Ordered by site id; one finding per site, all
    its reasons together.
    """
    if body is None:
        sites = [a for a in v.all() if a.kind in _LINKS]
    else:
        sites = [a for a in v.by_body(_check_body(body)) if a.kind in _LINKS]
    linked = {r.to for a in sites for r in a.relationships if r.rel in ("PreSynTo", "PostSynTo")}
    known = {a.id: a for a in sites}
    known.update(_tolerant_records(v, linked - set(known)))
    order = sorted(known)
    body_of = dict(zip(order, bodies_at(v, [known[i].point for i in order]), strict=True))
    found: dict[int, tuple[list[str], list[str]]] = {}  # site id -> (codes, words)

    def add(aid: int, code: str, words: str) -> None:
        codes, texts = found.setdefault(aid, ([], []))
        codes.append(code)
        texts.append(words)

    for a in sorted(sites, key=lambda s: s.id):
        own, other_kind, back = _LINKS[a.kind]
        if body is None and body_of[a.id] == 0:
            add(a.id, "background", "on background")
        partners = [r.to for r in a.relationships if r.rel == own]
        if not partners:
            add(a.id, "no-partner", "no partner")
        for pid in partners:
            p = known.get(pid)
            if p is None or p.kind != other_kind or not any(x.rel == back and x.to == a.id for x in p.relationships):
                add(a.id, "partner-missing", f"partner {pid} missing" if p is None
                    else f"partner {pid} ({p.kind}) does not link back")
                continue
            if body is not None and body_of[pid] == 0:
                add(pid, "partner-background", f"on background (partner of {a.kind} site {a.id} in body {body})")
            if a.kind == "pre" and body_of[a.id] != 0 and body_of[a.id] == body_of[pid]:
                add(a.id, "autapse", f"autapse: post site {pid} in the same body {body_of[a.id]}")
    out = []
    for aid in sorted(found):
        a = known[aid]
        codes, texts = found[aid]
        out.append(SynapseFinding("orphans", aid, a.kind, a.point, body_of[aid], tuple(codes),
                                  f"{a.kind} site {aid} " + "; ".join(texts)))
    return out


def find_weak_partners(v: AnnotationVersion, body: int | None = None, *, min_synapses: int = MIN_SYNAPSES,
                       min_body_synapses: int = MIN_BODY_SYNAPSES) -> list[SynapseFinding]:
    """Partners of ``body`` connected by fewer than ``min_synapses`` synapses (each direction apart).

    One finding per weak (direction, partner), at the body's own site of the lowest id on that
    connection, weakest first. ``body`` None: every body with at least ``min_body_synapses``
    synapses (in and out; read from the whole connectome, so it costs the whole index).
    """
    if isinstance(min_synapses, bool) or not isinstance(min_synapses, int) or min_synapses < 1:
        raise AnnotationArgumentError(f"min_synapses is a whole number ≥ 1, got {min_synapses!r}")
    if isinstance(min_body_synapses, bool) or not isinstance(min_body_synapses, int) or min_body_synapses < 1:
        raise AnnotationArgumentError(f"min_body_synapses is a whole number ≥ 1, got {min_body_synapses!r}")
    if body is not None:
        return _weak_of(v, _check_body(body), min_synapses)
    totals: dict[int, int] = {}
    for r in v.connectivity().rows():
        for b in (r["pre"], r["post"]):
            totals[b] = totals.get(b, 0) + r["count"]
    out: list[SynapseFinding] = []
    for b in sorted(x for x, n in totals.items() if n >= min_body_synapses):
        out.extend(_weak_of(v, b, min_synapses))
    return out


def _weak_of(v: AnnotationVersion, body: int, min_synapses: int) -> list[SynapseFinding]:
    conns = v.connections(body)
    weak = [("out", p) for p in conns.outgoing if p.count < min_synapses]
    weak += [("in", p) for p in conns.incoming if p.count < min_synapses]
    if not weak:
        return []
    first: dict[tuple[str, int], Annotation] = {}
    for s in v.synapses(body):
        direction = "out" if s.annotation.kind == "pre" else "in"
        for _pid, pbody in s.partners:
            key = (direction, pbody)
            if key not in first or s.annotation.id < first[key].id:
                first[key] = s.annotation
    out = []
    for direction, p in sorted(weak, key=lambda t: (t[1].count, t[1].body, t[0])):
        site = first.get((direction, p.body))
        if site is None:  # the connection's sites are counted but none is found: should not happen
            continue
        arrow = "to" if direction == "out" else "from"
        note = (f"body {body}: weak partner {p.body} ({p.count} synapse{'s' if p.count != 1 else ''} {arrow} it, "
                f"fewer than {min_synapses}); {site.kind} site {site.id}")
        out.append(SynapseFinding("weak", site.id, site.kind, site.point, body, ("weak",), note, p.body, p.count))
    return out


def find_synapse_issues(v: AnnotationVersion, check: str, body: int | None = None, *,
                        min_synapses: int = MIN_SYNAPSES,
                        min_body_synapses: int = MIN_BODY_SYNAPSES) -> list[SynapseFinding]:
    """:func:`find_orphans` (``check="orphans"``) or :func:`find_weak_partners` (``"weak"``)."""
    if check == "orphans":
        return find_orphans(v, body)
    if check == "weak":
        return find_weak_partners(v, body, min_synapses=min_synapses, min_body_synapses=min_body_synapses)
    raise AnnotationArgumentError(f"a synapse check is one of {', '.join(CHECKS)}, got {check!r}")
