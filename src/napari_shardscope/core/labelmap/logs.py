"""Reading a version's mutation log: its whole ancestry's records, in replay order.

The log is history: nothing a view or an edit needs reads it (the body map is records,
:mod:`.records`; undo finds its entry through the stack records). What reads it costs the history,
and only runs when asked: ``LabelmapVersion.mutations``, the diff of two versions, the planning of a
branch merge, and the migration of a repository written when the map *was* the replay of this log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.view import VersionView


@dataclass
class LogRecord:
    """One entry of the ancestry's mutation logs; the header is parsed only when someone asks."""

    version: str
    data: bytes
    _parsed: Mutation | None = field(default=None, repr=False)

    @property
    def mutation(self) -> Mutation:
        if self._parsed is None:
            self._parsed = Mutation.from_bytes(self.data, key=f"mutation log of version {self.version}")
        return self._parsed


def ordered_log(view: VersionView, instance: Instance, parents_of: Callable[[str], tuple[str, ...]]) -> list[LogRecord]:
    """The mutation records whose replay gives ``view``'s version's map, in replay order.

    A version's map is its first parent's map plus its own log. For a labelmap branch merge (a
    version whose own log starts with a ``merge-branches`` record) that is the whole rule: the
    record already holds what it took from the other side. A plain store merge of two parents has
    no such record: its map is the first parent's log, then the other parents' records the first
    lacks, then its own.
    """
    by_version: dict[str, list[LogRecord]] = {}
    for e in view.read_log(instance):
        by_version.setdefault(e.version, []).append(LogRecord(e.version, e.data))
    memo: dict[str, list[LogRecord]] = {}

    def ordered(uuid: str) -> list[LogRecord]:
        hit = memo.get(uuid)
        if hit is not None:
            return hit
        chain: list[str] = []
        prefix: list[LogRecord] = []
        cur = uuid
        while True:  # walk first parents back (iteratively: chains of 10⁴ versions)
            chain.append(cur)
            parents = parents_of(cur)
            if not parents:
                break
            own = by_version.get(cur, [])
            if len(parents) > 1 and not (own and own[0].mutation.operation == "merge-branches"):
                first = ordered(parents[0])
                seen = {id(r) for r in first}
                extra = []
                for p in parents[1:]:
                    for r in ordered(p):
                        if id(r) not in seen:
                            seen.add(id(r))
                            extra.append(r)
                prefix = first + extra
                break
            if parents[0] in memo:
                prefix = memo[parents[0]]
                break
            cur = parents[0]
        out = list(prefix)
        for c in reversed(chain):
            out.extend(by_version.get(c, []))
        memo[uuid] = out
        return out

    return ordered(view.version.uuid)
