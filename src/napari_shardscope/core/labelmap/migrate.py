"""Migrating labelmaps written in the replay era (format 1) to versioned records (format 2).

Format 1 kept a version's body map as the replay of its ancestry's mutation logs, the base
agglomeration and index summary as single blobs, and one unversioned key per base supervoxel's
index entry. The migration, for every labelmap instance of a repository:

1. re-stores the base agglomeration and label index as paged tables (:mod:`.agglomeration`,
   :mod:`.label_index`), dropping the blobs, and records that a migration started (an unversioned
   marker) — one transaction, whose size is the base's, not the history's;
2. replays every version's own log once, parents first (the legacy reading: :mod:`.legacy`,
   :func:`~.logs.ordered_log`), writing the body-map records each mutation makes at that version
   — committed versions too, the one write the store allows them (:meth:`Repository.rewriting`) —
   with each mutation's previous record values under its undo keys (so a migrated edit undoes like
   a new one), its undo/redo stack records, its history records and the overlay block counts; in
   transactions of at most :data:`BATCH` mutations, each ending by moving the marker on
   (:mod:`.migrate_replay`), so time is linear in the history and memory does not grow with it;
3. below a store merge, starts from the first parent's records and replays the other parents'
   extra records (the format-1 rule); when they do not replay (both sides edited the same labels,
   an error in format 1 too) the version is left unreconciled and stays refused when opened;
4. marks the instance format 2 and drops the marker, in the last transaction.

A run killed at any moment leaves format 1 untouched (killed in step 1), or format 1 with a marker:
every version as the last committed transaction left it, the labelmap refused when opened (it names
``repo migrate``) and the next run continuing from the marker, writing what an uninterrupted run
writes, byte for byte. DVID's rule holds throughout: no committed version is lost or changes meaning.

Logs, overlay blocks, index entries of split-made supervoxels, undo keys and every id are kept
byte for byte. ``shardscope repo migrate REPO`` runs it and then the store's own verification.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap.agglomeration import (
    AgglomerationSource,
    IdentityAgglomeration,
    open_stored_agglomeration,
    stored_items,
)
from napari_shardscope.core.labelmap.config import FORMAT, TYPE_NAME, LabelmapConfig
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.keys import (
    AGGLOMERATION_KEY,
    BASE_INDEX_PREFIX,
    INDEX_META_KEY,
    INDEX_SUMMARY_KEY,
)
from napari_shardscope.core.labelmap.label_index import (
    BaseIndex,
    BaseIndexReader,
    index_items,
    load_index_meta,
)
from napari_shardscope.core.labelmap.legacy import decode_agglomeration, decode_summary, legacy_index, legacy_meta
from napari_shardscope.core.labelmap.migrate_replay import MARKER_KEY, HistoryBatch, Marker, undo_entries
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.instance import Instance
from napari_shardscope.core.versioned.migrate import StepOutcome, register_migration
from napari_shardscope.core.versioned.repository import Repository, Rewriter

#: Mutations (and versions) converted per transaction: what bounds a transaction's size and the
#: process's memory whatever the history's length (10⁶ edits in one transaction took > 2 GB).
BATCH = 2000
#: Keys written per transaction at most (a few edits of huge bodies write many records each).
BATCH_KEYS = 100_000


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


def migrate_labelmap(repo: Repository, name: str, *, progress: Progress | None = None, batch: int | None = None,
                     batch_keys: int | None = None) -> _Stats:
    """Migrate one labelmap instance in transactions of at most ``batch`` mutations (see the module docstring).

    Resumes where an interrupted run committed last (the instance's migration marker); every transaction
    leaves the instance whole: format 1 with a marker (refused when opened, completed by the next run) or,
    after the last one, format 2.
    """
    inst = repo.instance(name)
    if inst.type != TYPE_NAME:
        raise LabelmapStateError(f"instance {name!r} is not a labelmap")
    config = LabelmapConfig.from_json({**inst.config, "format": FORMAT}, name=name)
    if repo.get_unversioned_many(inst, [MARKER_KEY])[0] is None:
        try:
            _, items, _ = _base_tables(repo, inst, config)
        except ShardscopeError:
            # The base tables are read outside a transaction (building them can take long, and a transaction
            # would hold the writers' lock meanwhile). Another ``repo migrate`` may have stored the new tables
            # since this one read no marker: the format-1 tables it read from are then gone, which is no
            # fault; the loop below resumes from that run's marker, or finds the labelmap migrated.
            with repo.rewriting() as rw:
                untouched = _untouched(rw, inst, name)
            if untouched:
                raise
            items = None
        if items is not None:
            with repo.rewriting() as rw:
                if _untouched(rw, inst, name):
                    rw.replace_unversioned(inst, (AGGLOMERATION_KEY, b"index/"), items)
                    rw.put_unversioned(inst, [(MARKER_KEY, Marker().to_bytes())])
            del items
    fallback: dict[int, bytes] | None = None
    deltas: dict[int, dict[int, dict[int, int]]] = {}
    # The base tables never change once stored: one reader of each for the whole run (its pages cached
    # once), reading through whichever transaction is current.
    current: list[Rewriter] = []

    def read(keys: Iterable[bytes]) -> list[bytes | None]:
        return current[0].get_unversioned_many(inst, list(keys))

    index: BaseIndexReader | None = None
    agg: AgglomerationSource | None = None

    def index_of() -> BaseIndexReader:
        if index is None:
            raise LabelmapStateError(f"labelmap {name!r} has edits but no base label index")
        return index

    while True:
        with repo.rewriting() as rw:
            current[:] = [rw]
            raw = rw.get_unversioned_many(inst, [MARKER_KEY])[0]
            if raw is None or not _current(rw, name):  # another process finished it meanwhile
                return _Stats()
            marker = Marker.from_bytes(raw, where=f"labelmap {name!r}: {MARKER_KEY.decode()}")
            if fallback is None:
                fallback = undo_entries(rw, inst)
            if agg is None:
                meta = load_index_meta(read)
                index = BaseIndexReader(read, meta) if meta is not None else None
                agg = IdentityAgglomeration()
                if config.agglomeration:
                    stored = open_stored_agglomeration(read)
                    if stored is None:
                        raise LabelmapStateError(f"labelmap {name!r}: the migrated agglomeration table is missing")
                    agg = stored
            step = HistoryBatch(rw, inst, config, agg, index_of, fallback, marker,
                                limit=BATCH if batch is None else batch,
                                max_keys=BATCH_KEYS if batch_keys is None else batch_keys,
                                deltas=deltas, progress=progress)
            if step.run():
                rw.put_unversioned(inst, [(MARKER_KEY, None)])
                rw.set_instance_config(name, config.to_json())
                return _Stats(marker.versions, marker.mutations, list(marker.unreconciled))
            rw.put_unversioned(inst, [(MARKER_KEY, marker.to_bytes())])


def _untouched(rw: Rewriter, inst: Instance, name: str) -> bool:
    """Whether no run has begun migrating ``name`` (format 1, no marker stored), as this transaction sees it."""
    return _current(rw, name) and rw.get_unversioned_many(inst, [MARKER_KEY])[0] is None


def _current(rw: Rewriter, name: str) -> bool:
    """Whether instance ``name`` still needs migrating, as this transaction sees it."""
    return int(rw.instance(name).config.get("format", 0) or 0) < FORMAT


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
