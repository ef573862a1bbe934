"""A committed version as a self-contained node: what a remote stores and a clone adopts.

Inside one repository a version's data is keyed by repository-local integers (version id, instance
id); between repositories only names travel: the version's UUID, its parents' UUIDs, instance
names. :class:`NodeContent` is that portable form — the version record, its notes, its per-instance
log entries and the key-values it itself stored (values and tombstones) — produced by
:meth:`Repository.read_node` and written back, under fresh local ids, by
:meth:`Repository.adopt_node` in one transaction.

Adopting under fresh local ids is exact: local ids are only required to be a topological order,
and a version's value of a key does not depend on which topological order was chosen (a merge
version stores every key its parents disagree on, so below a merge both parents show the same
value whichever ancestor entry the largest-id rule picks).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeEntry:
    """One key-value a version stored itself: ``value`` None is a tombstone."""

    instance: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True)
class NodeLog:
    """One entry of an instance's per-version log (in sequence order)."""

    instance: str
    seq: int
    data: bytes


@dataclass(frozen=True)
class NodeNote:
    """One note of the version's append-only notes."""

    seq: int
    time: float
    text: str


@dataclass(frozen=True)
class NodeContent:
    """A committed version with everything it stored, named without local ids.

    Attributes
    ----------
    uuid, parents, branch, message, created, committed
        The version record (``committed`` is set: only committed versions travel).
    entries
        Its own key-values, sorted by (instance, key).
    logs
        Its per-instance log entries, sorted by (instance, seq).
    notes
        Its notes, by seq.
    """

    uuid: str
    parents: tuple[str, ...]
    branch: str
    message: str
    created: float
    committed: float
    entries: tuple[NodeEntry, ...]
    logs: tuple[NodeLog, ...]
    notes: tuple[NodeNote, ...]

    @property
    def instances(self) -> frozenset[str]:
        """Names of the instances whose data or logs the node holds."""
        return frozenset(e.instance for e in self.entries) | frozenset(g.instance for g in self.logs)
