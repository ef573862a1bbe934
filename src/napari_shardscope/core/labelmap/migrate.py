"""Migrating labelmaps written in the replay era (format 1) to versioned records (format 2).

Format 1 kept a version's body map as the replay of its ancestry's mutation logs, the base
agglomeration and index summary as single blobs, and one unversioned key per base supervoxel's
index entry. The migration, for every labelmap instance of a repository, in one write transaction
per instance (an interrupted migration leaves the instance as it was):

1. re-stores the base agglomeration and label index as paged tables (:mod:`.agglomeration`,
   :mod:`.label_index`), dropping the blobs;
2. replays every version's own log once, parents first (the legacy reading: :mod:`.legacy`,
   :func:`~.logs.ordered_log`), writing the body-map records each mutation makes at that version
   — committed versions too, the one write the store allows them (:meth:`Repository.rewriting`) —
   with each mutation's previous record values under its undo keys (so a migrated edit undoes like
   a new one), its undo/redo stack records, its history records and the overlay block counts;
3. below a store merge, starts from the first parent's records and replays the other parents'
   extra records (the format-1 rule); when they do not replay (both sides edited the same labels,
   an error in format 1 too) the version is left unreconciled and stays refused when opened;
4. marks the instance format 2.

Logs, overlay blocks, index entries of split-made supervoxels, undo keys and every id are kept
byte for byte. ``shardscope repo migrate REPO`` runs it and then the store's own verification.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from napari_shardscope.core.labelmap.agglomeration import (
    AgglomerationSource,
    IdentityAgglomeration,
    stored_items,
)
from napari_shardscope.core.labelmap.config import FORMAT, TYPE_NAME, LabelmapConfig
from napari_shardscope.core.labelmap.edits import read_saved, stack_records
from napari_shardscope.core.labelmap.errors import LabelmapStateError, MappingError
from napari_shardscope.core.labelmap.keys import (
    AGGLOMERATION_KEY,
    BASE_INDEX_PREFIX,
    BLOCK_PREFIX,
    INDEX_META_KEY,
    INDEX_PREFIX,
    INDEX_SUMMARY_KEY,
    UNDO_PREFIX,
    block_prefix,
    decode_previous,
    overlay_count_key,
    undo_prefix,
)
from napari_shardscope.core.labelmap.label_index import (
    BaseIndex,
    BaseIndexReader,
    SvIndex,
    index_items,
    load_index_meta,
)
from napari_shardscope.core.labelmap.legacy import decode_agglomeration, decode_summary, legacy_index, legacy_meta
from napari_shardscope.core.labelmap.logs import ordered_log
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.recordmap import MapTxn
from napari_shardscope.core.labelmap.records import (
    HISTORY_PREFIX,
    MAP_PREFIXES,
    MERGE_MARK_KEY,
    encode_u64,
    encode_where,
    history_key,
)
from napari_shardscope.core.labelmap.undo_records import encode_undo_record
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.migrate import StepOutcome, register_migration
from napari_shardscope.core.versioned.repository import Repository, Rewriter
from napari_shardscope.core.versioned.view import VersionWriter


@dataclass(frozen=True)
class MigrationReport:
    """What a migration did: the labelmaps converted, versions and mutations replayed, and the check after."""

    repository: str
    labelmaps: tuple[str, ...]
    versions: int
    mutations: int
    unreconciled: tuple[str, ...]
    problems: tuple[str, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "labelmaps": list(self.labelmaps), "versions": self.versions,
                "mutations": self.mutations, "unreconciled": list(self.unreconciled),
                "problems": list(self.problems), "verified": not self.problems, "seconds": round(self.seconds, 3)}


def labelmaps_to_migrate(repo: Repository) -> list[str]:
    """The labelmap instances written in an older format."""
    return [i.name for i in repo.instances()
            if i.type == TYPE_NAME and int(i.config.get("format", 0) or 0) < FORMAT]


def migrate_repository(repo: Repository, *, progress: Progress | None = None) -> MigrationReport:
    """Migrate every older-format labelmap of ``repo`` (see the module docstring), then verify the store."""
    started = time.perf_counter()
    names = labelmaps_to_migrate(repo)
    versions = mutations = 0
    unreconciled: list[str] = []
    for name in names:
        stats = migrate_labelmap(repo, name, progress=progress)
        versions += stats.versions
        mutations += stats.mutations
        unreconciled.extend(f"{name}@{u}" for u in stats.unreconciled)
    problems = tuple(repo.verify())
    return MigrationReport(str(repo.path) if repo.path is not None else "<memory>", tuple(names), versions,
                           mutations, tuple(unreconciled), problems, time.perf_counter() - started)


@dataclass
class _Stats:
    versions: int = 0
    mutations: int = 0
    unreconciled: list[str] = field(default_factory=list)


class _WriterRecords:
    """A version's records as the migration's transaction sees them."""

    def __init__(self, w: VersionWriter, instance: Instance) -> None:
        self.w = w
        self.instance = instance

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return self.w.get_many(self.instance, keys)


def _base_tables(repo: Repository, inst: Instance, config: LabelmapConfig
                 ) -> tuple[AgglomerationSource | None, list[tuple[bytes, bytes]], dict[str, Any] | None]:
    """The format-1 base data re-expressed: the agglomeration, every item of the new tables, the index metadata."""

    def read(keys: Iterable[bytes]) -> list[bytes | None]:
        return repo.get_unversioned_many(inst, list(keys))

    blob = read([AGGLOMERATION_KEY])[0] if config.agglomeration else None
    if config.agglomeration and blob is None:
        raise LabelmapStateError(f"labelmap {inst.name!r} has no stored agglomeration (its creation was "
                                 f"interrupted): it cannot be migrated")
    source = decode_agglomeration(blob) if blob is not None else None
    items: list[tuple[bytes, bytes]] = list(stored_items(source)) if source is not None else []
    meta1 = legacy_meta(read([INDEX_META_KEY])[0])
    summary_raw = read([INDEX_SUMMARY_KEY])[0]
    built: BaseIndex | None = None
    if meta1 is not None and summary_raw is not None:
        built = legacy_index(repo.scan_unversioned(inst, BASE_INDEX_PREFIX), meta1, decode_summary(summary_raw))
    if built is None and _has_mutations(repo, inst):
        # edits without a stored index cannot happen in format 1 (each edit built it first); count it now
        from napari_shardscope.core.labelmap.index_build import build_index
        from napari_shardscope.core.labelmap.reading import BaseSource
        from napari_shardscope.core.volumes.opening import open_volume

        built = build_index(config, BaseSource(open_volume(config.base, kind="segmentation")))
    meta: dict[str, Any] | None = None
    if built is not None:
        index = list(index_items([built], source))
        items.extend(index)
        meta = load_index_meta(lambda keys: [dict(index).get(k) for k in keys])
    return source, items, meta


def _has_mutations(repo: Repository, inst: Instance) -> bool:
    for v in repo.versions():
        with repo.read(v) as view:
            if next(view.read_log(inst, own=True), None) is not None:
                return True
    return False


def migrate_labelmap(repo: Repository, name: str, *, progress: Progress | None = None) -> _Stats:
    """Migrate one labelmap instance in one transaction (see the module docstring)."""
    inst = repo.instance(name)
    if inst.type != TYPE_NAME:
        raise LabelmapStateError(f"instance {name!r} is not a labelmap")
    config = LabelmapConfig.from_json({**inst.config, "format": FORMAT}, name=name)
    source, items, meta = _base_tables(repo, inst, config)
    stats = _Stats()
    with repo.rewriting() as rw:
        rw.replace_unversioned(inst, (AGGLOMERATION_KEY, b"index/"), items)

        def read(keys: Iterable[bytes]) -> list[bytes | None]:
            return rw.get_unversioned_many(inst, list(keys))

        index = BaseIndexReader(read, meta) if meta is not None else None

        def index_of() -> BaseIndexReader:
            if index is None:
                raise LabelmapStateError(f"labelmap {name!r} has edits but no base label index")
            return index

        agg: AgglomerationSource = source if source is not None else IdentityAgglomeration()
        migration = _Migration(rw, inst, config, agg, index_of, stats)
        versions = rw.versions()
        for i, v in enumerate(versions):
            migration.version(v)
            stats.versions += 1
            if progress is not None:
                progress(i + 1, len(versions), f"{name}: version {v.short}")
        rw.set_instance_config(name, config.to_json())
    return stats


class _Migration:
    """The state of one instance's migration: what each version wrote, and every split-made entry ever."""

    def __init__(self, rw: Rewriter, inst: Instance, config: LabelmapConfig, agg: AgglomerationSource,
                 index: Callable[[], BaseIndexReader], stats: _Stats) -> None:
        self.rw = rw
        self.inst = inst
        self.config = config
        self.agg = agg
        self.index = index
        self.stats = stats
        self.written: dict[int, set[bytes]] = {}
        self._entries = self._all_entries()

    def _all_entries(self) -> dict[int, bytes]:
        """Every split-made supervoxel's index entry anywhere in the history (an id's entry never changes)."""
        out: dict[int, bytes] = {}
        for key, _vid, tomb, value in self.rw.scan_all(self.inst, INDEX_PREFIX):
            if not tomb and len(key) == 9:
                out.setdefault(int.from_bytes(key[1:], "big"), value)
        for key, _vid, tomb, value in self.rw.scan_all(self.inst, UNDO_PREFIX):
            inner = key[9:]
            if not tomb and len(inner) == 9 and inner[:1] == INDEX_PREFIX:
                prev = decode_previous(value)
                if prev is not None:
                    out.setdefault(int.from_bytes(inner[1:], "big"), prev)
        return out

    def entries(self, svs: list[int]) -> dict[int, SvIndex]:
        return {sv: SvIndex.from_bytes(self._entries[sv], key=f"index entry of supervoxel {sv}")
                for sv in svs if sv in self._entries}

    def txn(self, w: VersionWriter, memo: dict[int, int]) -> MapTxn:
        return MapTxn(_WriterRecords(w, self.inst), self.agg, self.index, memo, self.entries)

    def _put(self, w: VersionWriter, key: bytes, value: bytes | None) -> None:
        if value is None:
            w.delete(self.inst, key)
        else:
            w.put(self.inst, key, value)
        self.written.setdefault(w.version.vid, set()).add(key)

    def version(self, v: Version) -> None:
        w = self.rw.at(v)
        own = [(e.seq, Mutation.from_bytes(e.data, key=f"mutation log of version {v.uuid}"))
               for e in w.read_log(self.inst, own=True)]
        counts = self._counts(w)
        if len(v.parents) > 1:
            counts = self._merge_start(v, w, own)
        memo: dict[int, int] = {}
        saved = {m.mutation_id: read_saved(w, self.inst, m.mutation_id) for _, m in own}
        for i, (seq, m) in enumerate(own):
            txn = self.txn(w, memo)
            if m.operation in ("undo", "redo"):
                if m.target is None:
                    raise LabelmapStateError(f"mutation log: {m.operation} {m.mutation_id} names no record")
                for key, value in read_saved(w, self.inst, m.target).items():
                    if key[:1] in MAP_PREFIXES:  # the map's records are restored exactly, as a new undo does
                        txn.put(key, value)
            else:
                try:
                    txn.apply_delta(m.delta)
                except MappingError as exc:
                    raise LabelmapStateError(f"version {v.short}: mutation {m.mutation_id} does not replay "
                                             f"({exc}); the log is inconsistent") from exc
            if txn.unlinked:
                memo.clear()
            changes = dict(txn.pending)
            for scale, d in self._block_changes(w, own, i, saved).items():
                if d:
                    counts[scale] = counts.get(scale, 0) + d
                    changes[overlay_count_key(scale)] = encode_u64(counts[scale]) if counts[scale] > 0 else None
            previous: dict[bytes, bytes | None] = {}
            for key, new in changes.items():
                if key[:1] == INDEX_PREFIX or key[:1] == BLOCK_PREFIX:
                    continue  # format 1 wrote these already
                previous[key] = w.get(self.inst, key)
                self._put(w, key, new)
            if previous:  # beside format 1's per-key records of its blocks and index entries
                w.put(self.inst, undo_prefix(m.mutation_id), encode_undo_record(previous, changes))
            book = stack_records(w, self.inst, m, seq)
            for body in sorted(set(m.bodies)):
                book[history_key(body, m.mutation_id)] = encode_where(v.uuid, seq)
            for key, record in book.items():
                self._put(w, key, record)
            self.stats.mutations += 1

    def _counts(self, w: VersionWriter) -> dict[int, int]:
        """Overlay block counts as the version inherits them (its parent's, already migrated)."""
        raw = w.get_many(self.inst, [overlay_count_key(s) for s in range(len(self.config.scales))])
        return {s: 0 if r is None else int.from_bytes(r, "little") for s, r in enumerate(raw)}

    def _block_changes(self, w: VersionWriter, own: list[tuple[int, Mutation]], i: int,
                       saved: dict[int, dict[bytes, bytes | None]]) -> dict[int, int]:
        """How many overlay blocks each scale gained with mutation ``i`` of the version's own log."""
        m = own[i][1]
        out: dict[int, int] = {}
        for key, before in saved.get(m.mutation_id, {}).items():
            if key[:1] != BLOCK_PREFIX:
                continue
            after: bool | None = None
            for _, later in own[i + 1:]:
                if key in saved.get(later.mutation_id, {}):
                    after = saved[later.mutation_id][key] is not None
                    break
            if after is None:
                after = w.contains(self.inst, key)
            d = int(after) - int(before is not None)
            if d:
                out[key[1]] = out.get(key[1], 0) + d
        return out

    def _merge_start(self, v: Version, w: VersionWriter, own: list[tuple[int, Mutation]]) -> dict[int, int]:
        """A version with several parents starts as its first parent's records (plus, below a store merge,
        the other parents' extra records replayed); its overlay counts are counted afresh."""
        dag_anc = {a.vid for a in self._ancestry(v)}
        first = self.rw.at(v.parents[0])
        first_anc = {a.vid for a in self._ancestry(first.version)}
        # the map's records (and, below a branch merge, the history: its record stands for theirs) as the
        # first parent has them, where the other side's versions wrote them
        shadowed = (*MAP_PREFIXES, HISTORY_PREFIX) if own and own[0][1].operation == "merge-branches" \
            else MAP_PREFIXES
        keys = sorted({k for vid in dag_anc - first_anc - {v.vid} for k in self.written.get(vid, set())
                       if k[:1] in shadowed})
        if keys:
            ours = first.get_many(self.inst, keys)
            here = w.get_many(self.inst, keys)
            for key, want, have in zip(keys, ours, here, strict=True):
                if want != have:
                    self._put(w, key, want)
        counts = {s: sum(1 for _ in w.keys(self.inst, prefix=block_prefix(s))) for s in range(len(self.config.scales))}
        for s, n in counts.items():
            raw = w.get(self.inst, overlay_count_key(s))
            if (0 if raw is None else int.from_bytes(raw, "little")) != n:
                self._put(w, overlay_count_key(s), encode_u64(n) if n else None)
        if own and own[0][1].operation == "merge-branches":
            return counts
        ids_first = {r.mutation.mutation_id for r in self._log(first.version)}
        extra = [r.mutation for r in self._log(v)
                 if r.version != v.uuid and r.mutation.mutation_id not in ids_first]
        if not extra:
            return counts
        txn = self.txn(w, {})
        try:
            for m in extra:
                txn.apply_delta(m.delta)
        except MappingError:
            self.stats.unreconciled.append(v.uuid)  # format 1 refused this version too; so does format 2
            return counts
        for key, value in txn.pending.items():
            self._put(w, key, value)
        self._put(w, MERGE_MARK_KEY, b"\x01")
        return counts

    def _ancestry(self, v: Version) -> list[Version]:
        by_uuid = {x.uuid: x for x in self.rw.versions()}
        out, todo, seen = [], [v.uuid], set()
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            out.append(by_uuid[u])
            todo.extend(by_uuid[u].parents)
        return out

    def _log(self, v: Version) -> list[Any]:
        by_uuid = {x.uuid: x for x in self.rw.versions()}
        view = self.rw.at(v)
        return ordered_log(view, self.inst, lambda uuid: by_uuid[uuid].parents)


def _labelmap_step(repo: Repository, progress: Progress | None) -> StepOutcome | None:
    """``repo migrate``'s labelmap step: every older-format labelmap rewritten as records."""
    names = labelmaps_to_migrate(repo)
    if not names:
        return None
    versions = mutations = 0
    unreconciled: list[str] = []
    for name in names:
        stats = migrate_labelmap(repo, name, progress=progress)
        versions, mutations = versions + stats.versions, mutations + stats.mutations
        unreconciled += [f"{name}@{u}" for u in stats.unreconciled]
    return StepOutcome(
        f"migrated labelmap(s) {', '.join(names)}: {versions} version(s), {mutations} mutation(s)",
        {"labelmaps": names, "versions": versions, "mutations": mutations, "unreconciled": unreconciled},
        tuple(f"{u}: left unreconciled (a store merge whose sides edited the same labels)" for u in unreconciled))


register_migration("labelmap", _labelmap_step)
