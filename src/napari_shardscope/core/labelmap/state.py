"""What a labelmap holds in memory for one version: its body map, overlay blocks, index entries, log.

A version's state is derived entirely from the store: the body map is the replay of the mutation
logs of its ancestry (root first), the overlay and index are the version's visible keys. Committed
versions never change, so their states are cached for good; a child starts from its committed
parent's map and replays only its own log. An open version's state is updated in place after each
edit, and reloaded when another process (or another handle) edited the version meanwhile — a stamp
key, rewritten by every edit, tells in one read.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from napari_shardscope.core.labelmap.bodymap import BaseAgglomeration, BodyMap
from napari_shardscope.core.labelmap.config import LabelmapConfig
from napari_shardscope.core.labelmap.errors import LabelmapStateError, MappingError
from napari_shardscope.core.labelmap.geometry import Coord
from napari_shardscope.core.labelmap.keys import BLOCK_PREFIX, INDEX_PREFIX, parse_block_key, parse_index_key
from napari_shardscope.core.labelmap.label_index import SvIndex
from napari_shardscope.core.labelmap.mutations import Mutation, decode_delta
from napari_shardscope.core.labelmap.reading import Fetch, Overlay
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.view import VersionView
from napari_shardscope.core.volumes.lazy import LazyArray

#: Versioned key holding the id of the last mutation visible at a version (the freshness stamp).
STAMP_KEY = b"s"
_U64 = struct.Struct(">Q")


def encode_stamp(mutation_id: int) -> bytes:
    return _U64.pack(mutation_id)


def decode_stamp(raw: bytes | None) -> int:
    return 0 if raw is None or len(raw) != 8 else int(_U64.unpack(raw)[0])


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


@dataclass(frozen=True)
class UndoStacks:
    """Log entries an undo would invert (last = next) and undo entries a redo would invert."""

    undo: tuple[Mutation, ...]
    redo: tuple[Mutation, ...]


class VersionState:
    """The in-memory state of one version; every change happens under :attr:`lock`.

    Readers (napari's slicing threads through the bodies transform) take the lock too, so a map
    is never seen half-updated.
    """

    def __init__(self, version: Version, body_map: BodyMap, blocks: dict[int, set[Coord]],
                 index: dict[int, bytes], log: list[LogRecord], overlay: Overlay, stamp: int) -> None:
        self.version = version
        #: The store's freshness stamp this state reflects (id of the last mutation written here
        #: or inherited); a different stamp in the store means someone else edited the version.
        self.stamp = stamp
        self.map = body_map
        self.blocks = blocks
        self.index = index
        self.log = log
        self.overlay = overlay
        self.lock = threading.RLock()
        #: Lazy arrays per (overlay snapshot, scale, kind) handed out for this state.
        self.arrays: dict[tuple[int, int, str], LazyArray] = {}
        self._stacks: tuple[int, UndoStacks] | None = None

    def refresh_from(self, other: VersionState) -> None:
        """Take over a freshly loaded state of the same version (another process edited it)."""
        with self.lock:
            self.version, self.stamp, self.map = other.version, other.stamp, other.map
            self.blocks, self.index, self.log = other.blocks, other.index, other.log
            if other.overlay.blocks != self.overlay.blocks:
                self.overlay = other.overlay
                self.arrays.clear()
            self._stacks = None

    def own_records(self) -> list[LogRecord]:
        return [r for r in self.log if r.version == self.version.uuid]

    def sv_index(self, sv: int) -> SvIndex | None:
        """The version's own index entry of a split-made supervoxel (None: look in the base index)."""
        raw = self.index.get(sv)
        return None if raw is None else SvIndex.from_bytes(raw, key=f"index entry of supervoxel {sv}")

    def stacks(self) -> UndoStacks:
        """Undo and redo stacks, derived from the version's own log (so they survive a restart).

        An ordinary edit pushes itself on the undo stack and clears the redo stack; an undo pops
        the entry it inverted and pushes itself on the redo stack; a redo pops that undo entry and
        pushes itself on the undo stack (undoing it again inverts the redo).
        """
        own = self.own_records()
        if self._stacks is not None and self._stacks[0] == len(own):
            return self._stacks[1]
        undo: list[Mutation] = []
        redo: list[Mutation] = []
        for rec in own:
            m = rec.mutation
            if m.operation == "undo":
                if not undo or undo[-1].mutation_id != m.target:
                    raise LabelmapStateError(f"mutation log: undo {m.mutation_id} does not invert the last edit")
                undo.pop()
                redo.append(m)
            elif m.operation == "redo":
                if not redo or redo[-1].mutation_id != m.target:
                    raise LabelmapStateError(f"mutation log: redo {m.mutation_id} does not invert the last undo")
                redo.pop()
                undo.append(m)
            else:
                undo.append(m)
                redo.clear()
        stacks = UndoStacks(tuple(undo), tuple(redo))
        self._stacks = (len(own), stacks)
        return stacks

    def apply(self, mutation: Mutation, data: bytes, keys: dict[bytes, bytes | None], fetch: Fetch,
              config: LabelmapConfig) -> bool:
        """Bring the state up to date after ``mutation`` was committed; True when blocks changed."""
        with self.lock:
            self.map.apply(mutation.delta)
            changed = False
            for key, value in keys.items():
                if key.startswith(BLOCK_PREFIX):
                    scale, c = parse_block_key(key)
                    (self.blocks.setdefault(scale, set()).add if value is not None
                     else self.blocks.setdefault(scale, set()).discard)(c)
                    changed = True
                elif key.startswith(INDEX_PREFIX):
                    sv = parse_index_key(key)
                    if value is None:
                        self.index.pop(sv, None)
                    else:
                        self.index[sv] = value
            self.log.append(LogRecord(self.version.uuid, data, mutation))
            self.stamp = mutation.mutation_id
            if changed:
                self.overlay = Overlay(config, {s: frozenset(c) for s, c in self.blocks.items()}, fetch)
                self.arrays.clear()
            return changed


def replay(records: Iterable[LogRecord], body_map: BodyMap) -> None:
    """Apply the deltas of ``records`` in order to ``body_map``.

    Raises
    ------
    LabelmapStateError
        When a delta does not apply — only possible below a store merge whose sides edited the
        same labels (each side's log is valid alone, not one after the other).
    """
    for rec in records:
        try:
            body_map.apply(decode_delta(rec.data, key=f"mutation log of version {rec.version}"))
        except MappingError as exc:
            raise LabelmapStateError(
                f"the mutation logs of version {rec.version}'s ancestry do not replay ({exc}); a store "
                f"merge combined branches that edited the same labels, which the labelmap cannot reconcile"
            ) from exc


def ordered_log(view: VersionView, instance: Instance, parents_of: Callable[[str], tuple[str, ...]]) -> list[LogRecord]:
    """The mutation records whose replay gives ``view``'s version's map, in replay order.

    A version's map is its first parent's map plus its own log. For a labelmap branch merge (a
    version whose own log starts with a ``merge-branches`` record) that is the whole rule: the
    record already holds what it took from the other side. A plain store merge of two parents has
    no such record: its map is the first parent's log, then the other parents' records the first
    lacks, then its own — valid when the sides edited different labels, a
    :class:`LabelmapStateError` at replay otherwise.
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


def load_state(view: VersionView, instance: Instance, config: LabelmapConfig, base: BaseAgglomeration,
               fetch: Fetch, parent: VersionState | None = None,
               parents_of: Callable[[str], tuple[str, ...]] | None = None) -> VersionState:
    """Build a version's state from one store snapshot (``parent``: a cached state of its only parent).

    ``parents_of(uuid)`` gives a version's parents (the repository's DAG); needed below merges.
    """
    version = view.version
    if parents_of is None:
        log = [LogRecord(e.version, e.data) for e in view.read_log(instance)]
    else:
        log = ordered_log(view, instance, parents_of)
    own_start = next((i for i, r in enumerate(log) if r.version == version.uuid), len(log))
    if (parent is not None and parent.version.locked and len(version.parents) == 1
            and parent.version.uuid == version.parents[0] and own_start == len(parent.log)):
        with parent.lock:
            body_map = parent.map.copy()
        log[:own_start] = parent.log  # share parsed records
        replay(log[own_start:], body_map)
    else:
        body_map = BodyMap(base=base)
        replay(log, body_map)
    blocks: dict[int, set[Coord]] = {}
    for key in view.keys(instance, prefix=BLOCK_PREFIX):
        scale, c = parse_block_key(key)
        blocks.setdefault(scale, set()).add(c)
    index = {parse_index_key(k): v for k, v in view.scan(instance, prefix=INDEX_PREFIX)}
    overlay = Overlay(config, {s: frozenset(c) for s, c in blocks.items()}, fetch)
    stamp = decode_stamp(view.get(instance, STAMP_KEY))
    return VersionState(version, body_map, blocks, index, log, overlay, stamp)
