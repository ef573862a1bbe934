"""What changed between two versions of a labelmap: mutations and the labels they touched.

Mutation ids are unique across the repository and every version's state holds the log of its
whole ancestry, so the difference between two versions is a set difference of mutation ids: what
``a`` has that ``b`` lacks, and the reverse. Between a version and its descendant one side is
empty; between two branch heads each side is what its branch did since the merge base (the common
ancestor created last, as for the store's merge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from napari_shardscope.core.labelmap.history import HistoryEntry
from napari_shardscope.core.labelmap.labelmap import Labelmap


@dataclass(frozen=True)
class VersionDiff:
    """The mutations and labels that differ between versions ``a`` and ``b``.

    Attributes
    ----------
    a, b
        Version UUIDs compared.
    base
        UUID of their merge base (the common ancestor created last).
    only_a, only_b
        Mutations in one version's ancestry and not in the other's, oldest first.
    """

    a: str
    b: str
    base: str
    only_a: tuple[HistoryEntry, ...]
    only_b: tuple[HistoryEntry, ...]

    @property
    def bodies_a(self) -> tuple[int, ...]:
        """Bodies the mutations only ``a`` has touched (sorted)."""
        return _labels(self.only_a, "bodies")

    @property
    def bodies_b(self) -> tuple[int, ...]:
        return _labels(self.only_b, "bodies")

    @property
    def supervoxels_a(self) -> tuple[int, ...]:
        return _labels(self.only_a, "supervoxels")

    @property
    def supervoxels_b(self) -> tuple[int, ...]:
        return _labels(self.only_b, "supervoxels")

    @property
    def relation(self) -> str:
        """``"same"``, ``"a is an ancestor of b"``, ``"b is an ancestor of a"`` or ``"diverged"``."""
        if self.a == self.b:
            return "same"
        if self.base == self.a:
            return "a is an ancestor of b"
        if self.base == self.b:
            return "b is an ancestor of a"
        return "diverged"

    def to_json(self) -> dict[str, Any]:
        def side(entries: tuple[HistoryEntry, ...], bodies: tuple[int, ...],
                 svs: tuple[int, ...]) -> dict[str, Any]:
            return {
                "mutations": [{"id": e.mutation.mutation_id, "version": e.version, "operation": e.mutation.operation,
                               "user": e.mutation.user, "time": e.mutation.time, "bodies": list(e.mutation.bodies),
                               "supervoxels": list(e.mutation.supervoxels)} for e in entries],
                "bodies": list(bodies),
                "supervoxels": list(svs),
            }

        return {"a": self.a, "b": self.b, "base": self.base, "relation": self.relation,
                "only_a": side(self.only_a, self.bodies_a, self.supervoxels_a),
                "only_b": side(self.only_b, self.bodies_b, self.supervoxels_b)}


def _labels(entries: tuple[HistoryEntry, ...], what: str) -> tuple[int, ...]:
    return tuple(sorted({int(x) for e in entries for x in getattr(e.mutation, what)}))


def merge_base(lm: Labelmap, a: str, b: str) -> str:
    """UUID of the common ancestor of ``a`` and ``b`` created last (every DAG has the root in common)."""
    repo = lm.repo
    anc_a = {v.uuid: v for v in repo.ancestry(a)}
    common = [v for v in repo.ancestry(b) if v.uuid in anc_a]
    return max(common, key=lambda v: v.vid).uuid


def diff_versions(lm: Labelmap, a: str, b: str) -> VersionDiff:
    """Compare versions ``a`` and ``b`` (refs: branch names mean their heads, or UUID prefixes)."""
    va, vb = lm.at(a), lm.at(b)
    log_a, log_b = va.mutations(), vb.mutations()
    ids_a = {e.mutation.mutation_id for e in log_a}
    ids_b = {e.mutation.mutation_id for e in log_b}
    return VersionDiff(
        a=va.uuid, b=vb.uuid, base=merge_base(lm, va.uuid, vb.uuid),
        only_a=tuple(e for e in log_a if e.mutation.mutation_id not in ids_b),
        only_b=tuple(e for e in log_b if e.mutation.mutation_id not in ids_a),
    )
