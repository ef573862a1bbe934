"""A labelmap instance: DVID's ``labelmap`` data type over an immutable base volume, without a server.

Obtained from :func:`~napari_shardscope.core.labelmap.opening.create_labelmap` or
:func:`~napari_shardscope.core.labelmap.opening.open_labelmap`; ``lm.at("main")`` gives a
:class:`~napari_shardscope.core.labelmap.version.LabelmapVersion` (reads and edits at one version).

The :class:`Labelmap` holds what every version shares — configuration, the base volume, the base
agglomeration (:mod:`.agglomeration`), the base label index (:mod:`.label_index`), both read page
by page — and a cache of per-version states (:mod:`.state`): the records of each version's body
map read so far (:mod:`.records`), never a replay of its history. Edits go through
:meth:`Labelmap.edit`: one write transaction in which the version's state is checked fresh, the
edit planned on its records (:class:`~napari_shardscope.core.labelmap.recordmap.MapTxn`) and
written with its log record; the cache takes the written records once the transaction has
committed, then subscribers are told (:meth:`Labelmap.subscribe`).
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap.agglomeration import AgglomerationSource
from napari_shardscope.core.labelmap.base_members import BaseMembers
from napari_shardscope.core.labelmap.catch_up import written_since
from napari_shardscope.core.labelmap.config import (
    TYPE_NAME,
    LabelmapConfig,
)
from napari_shardscope.core.labelmap.edits import Planner, Workspace, write_plan
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.explicit_pages import scan_pages
from napari_shardscope.core.labelmap.id_reservation import id_reservation
from napari_shardscope.core.labelmap.index_build import build_and_store_index
from napari_shardscope.core.labelmap.keys import (
    labels_counter,
    mutations_counter,
    overlay_count_key,
)
from napari_shardscope.core.labelmap.label_index import (
    BaseIndexReader,
    IndexSummary,
    SvIndex,
    load_index_meta,
)
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import BaseSource, Fetch, PatchedReader
from napari_shardscope.core.labelmap.recordmap import MapReader, MapTxn
from napari_shardscope.core.labelmap.records import MAP_PREFIXES, MERGE_MARK_KEY, STAMP_KEY
from napari_shardscope.core.labelmap.region import check_edit_in_region, region_box
from napari_shardscope.core.labelmap.state import EditRecords, VersionState, decode_stamp, overlay_counts
from napari_shardscope.core.labelmap.version import LabelmapVersion
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.instance import Instance, register_instance_type
from napari_shardscope.core.versioned.repository import Repository
from napari_shardscope.core.versioned.view import VersionView, VersionWriter
from napari_shardscope.core.volumes.model import Volume

if TYPE_CHECKING:
    from napari_shardscope.core.formats.precomputed.meshes import MeshData
    from napari_shardscope.core.labelmap.meshes import BodyMesher

register_instance_type(TYPE_NAME)

U64 = npt.NDArray[np.uint64]
T = TypeVar("T")
_log = logging.getLogger(__name__)
#: Version states kept in memory (committed ones never change; each holds a bounded record cache).
STATE_CACHE = 16
#: A clone of a remote reserves more ids before an edit when fewer than this many are left.
ID_LOW_WATER = 1024
#: After a failed reservation (offline), edits use the ids left without asking again for this long.
OFFLINE_RETRY_S = 60.0


@dataclass(frozen=True)
class EditEvent:
    """Sent to subscribers after an edit has been committed.

    Attributes
    ----------
    labelmap
        Instance name.
    version
        UUID of the edited version.
    mutation
        The log record written.
    blocks_changed
        True when overlay blocks changed (a supervoxel split, or undo/redo of one): take fresh
        arrays from :meth:`LabelmapVersion.supervoxel_arrays` / :meth:`~LabelmapVersion.body_arrays`.
        False: only the body map changed — the body arrays already show the new mapping, a
        ``layer.refresh()`` re-reads the visible tiles.
    """

    labelmap: str
    version: str
    mutation: Mutation
    blocks_changed: bool


Subscriber = Callable[[EditEvent], None]


class Labelmap:
    """One labelmap instance of a repository (use :func:`create_labelmap` / :func:`open_labelmap`)."""

    def __init__(self, repo: Repository, instance: Instance, config: LabelmapConfig, volume: Volume,
                 agglomeration: AgglomerationSource) -> None:
        self.repo = repo
        self.instance = instance
        self.config = config
        self.base = BaseSource(volume)
        self.agglomeration = agglomeration
        self._states: OrderedDict[str, VersionState] = OrderedDict()
        self._states_lock = threading.RLock()
        self._edit_lock = threading.RLock()
        self._index_lock = threading.Lock()
        self._index: BaseIndexReader | None = None
        self._base_members = BaseMembers(agglomeration, self.base_index)
        self._lineage_ok: dict[str, bool] = {}
        self._subscribers: list[Subscriber] = []
        self._meshers: dict[int, Any] = {}
        self._offline_until = 0.0
        self._region_key: tuple[int, int] | None = None
        self._region_value: list[list[int]] | None = None

    @property
    def name(self) -> str:
        return self.instance.name

    def __repr__(self) -> str:
        return f"Labelmap({self.name!r}, base={self.config.base!r}, scales={len(self.config.scales)})"

    def read_unversioned(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The instance's unversioned values of ``keys`` (one snapshot)."""
        return self.repo.get_unversioned_many(self.instance, keys)

    # -- versions -------------------------------------------------------------------------------

    def at(self, ref: str | Version) -> LabelmapVersion:
        """Reads and edits at one version (a branch name means its head *now*)."""
        v = self.repo.version(ref)
        self.state(v)  # load (or refresh) now, so errors surface here
        return LabelmapVersion(self, v.uuid)

    def state(self, ref: str | Version) -> VersionState:
        """The in-memory state of a version (made, or refreshed when another process edited it)."""
        v = self.repo.version(ref)
        with self._states_lock:
            cached = self._states.get(v.uuid)
            if cached is not None:
                self._states.move_to_end(v.uuid)
                if cached.version.locked:
                    return cached
        # Under the edit lock: an edit of this object commits first and updates the state after, and
        # a reader comparing stamps in between would take the edit's records for someone else's.
        with self._edit_lock, self.repo.read(v) as view:
            return self._state_from(view, cached)

    def _probe(self, view: VersionView) -> tuple[int, dict[int, int]]:
        """The version's stamp and overlay block counts (one snapshot)."""
        keys = [STAMP_KEY, *(overlay_count_key(s) for s in range(len(self.config.scales)))]
        raw = view.get_many(self.instance, keys)
        return decode_stamp(raw[0]), overlay_counts(raw[1:])

    def _stamp(self, view: VersionView) -> int:
        """The version's stamp alone (one read: the overlay counts matter only when it moved)."""
        return decode_stamp(view.get(self.instance, STAMP_KEY))

    def _state_from(self, view: VersionView, cached: VersionState | None) -> VersionState:
        v = view.version
        if cached is not None:
            cached.version = v
            if self._stamp(view) != cached.stamp:
                stamp, counts = self._probe(view)
                self._catch_up(view, cached, stamp, counts)
            return cached
        stamp, counts = self._probe(view)
        self._check_lineage(v)
        state = VersionState(v, stamp, self._loader(v), self.config, self.fetcher(v), counts,
                             None if v.locked else view.log_length(self.instance))
        with self._states_lock:
            old = self._states.get(v.uuid)
            if old is not None:
                return old
            self._states[v.uuid] = state
            self._states.move_to_end(v.uuid)
            # Only committed states are evicted: an open version's state backs arrays a viewer
            # holds, and edits must update that very object.
            committed = [u for u, st in self._states.items() if st.version.locked]
            for uuid in committed[:max(0, len(self._states) - STATE_CACHE)]:
                del self._states[uuid]
        return state

    def _loader(self, version: Version) -> Callable[[list[bytes]], list[bytes | None]]:
        """Reads records of ``version`` for its cache; an open version's reads notice other writers."""
        uuid = version.uuid

        def load(keys: list[bytes]) -> list[bytes | None]:
            if self.repo.closed:
                # the proofreader disconnected and a view still draws: it keeps what it showed (the records
                # read for it are cached); anything never read maps as the base does
                return [None] * len(keys)
            with self.repo.read(version) as view:
                values = view.get_many(self.instance, keys)
                if not version.locked:
                    with self._states_lock:
                        state = self._states.get(uuid)
                    # (an edit holds the writer lock and checked the stamp already: nobody else writes)
                    if state is not None and not state.editing and self._stamp(view) != state.stamp:
                        stamp, counts = self._probe(view)
                        self._catch_up(view, state, stamp, counts)
                return values

        return load

    def _catch_up(self, view: VersionView, state: VersionState, stamp: int, counts: dict[int, int]) -> None:
        """Bring ``state`` to the store's ``stamp`` (another writer edited the version, as ``view`` shows):
        forget only the records their mutations wrote when the log says which (:mod:`.catch_up`), else all."""
        caught = None if state.log_length is None else \
            written_since(view, self.instance, state.log_length, stamp)
        if caught is None:
            state.refresh(stamp, counts, None if view.version.locked else view.log_length(self.instance))
            return
        # the body-map records the state held that the mutations rewrote are read again now, in the snapshot
        # that showed the stamp (one read, not a store read and a stamp probe per later look-up)
        held = [k for k in caught.keys if len(k) == 9 and k[:1] in MAP_PREFIXES and k in state.records]
        fresh = dict(zip(held, view.get_many(self.instance, held), strict=True)) if held else {}
        state.catch_up(stamp, counts, caught, fresh)

    def _check_lineage(self, v: Version) -> None:
        """Refuse a version below a store merge whose two sides both edited this labelmap.

        The store merges keys; two sides' body-map records merged key by key are no body map (a
        page, a root record edited on both). The labelmap's own branch merge writes a
        ``merge-branches`` record and reconciled records; a migration marks the store merges it
        reconciled. Checked once per version (a version's parents never change): the ancestor set is the
        one every read at the version uses; only its merge versions are looked at.
        """
        if v.uuid in self._lineage_ok:
            return
        for cur in self.repo.merges_in(v):  # only merges matter: never a record per ancestor (O(history))
            if cur.uuid not in self._lineage_ok:
                if not self._merge_reconciled(cur):
                    raise LabelmapStateError(
                        f"the mutation logs of version {cur.short}'s ancestry do not replay: a store merge (repo "
                        f"merge) combined branches that both edited labelmap {self.name!r}, and a key merge of "
                        f"their body maps is no body map; merge the branches with `shardscope branch merge` instead")
                self._lineage_ok[cur.uuid] = True
        self._lineage_ok[v.uuid] = True

    def _merge_reconciled(self, v: Version) -> bool:
        with self.repo.read(v) as view:
            if view.get(self.instance, MERGE_MARK_KEY) is not None:
                return True
            own = next(view.read_log(self.instance, own=True), None)
            if own is not None and Mutation.from_bytes(own.data).operation == "merge-branches":
                return True
        base = self._merge_base(v.parents)
        with self.repo.read(base) as view:
            at_base = decode_stamp(view.get(self.instance, STAMP_KEY))
        changed = 0
        for p in v.parents:
            with self.repo.read(p) as view:
                changed += decode_stamp(view.get(self.instance, STAMP_KEY)) != at_base
        return changed <= 1

    def _merge_base(self, parents: Sequence[str]) -> Version:
        anc = {x.uuid for x in self.repo.ancestry(parents[0])}
        for p in parents[1:]:
            anc &= {x.uuid for x in self.repo.ancestry(p)}
        return max((self.repo.version(u) for u in anc), key=lambda x: x.vid)

    def fetcher(self, version: Version) -> Fetch:
        """Reads encoded overlay blocks at ``version`` (each call one store snapshot)."""

        def fetch(keys: list[bytes]) -> list[bytes | None]:
            with self.repo.read(version) as view:
                return view.get_many(self.instance, keys)

        return fetch

    def reader(self, state: VersionState) -> MapReader:
        """Reads of ``state``'s body map through its record cache (hold ``state.lock`` while using it)."""
        return MapReader(state.records, self.agglomeration, self.base_index, state.memo,
                         base_members=self._base_members, pages=lambda: self._explicit_pages(state),
                         bodies=state.bodies)

    def _explicit_pages(self, state: VersionState) -> npt.NDArray[np.uint64] | None:
        """The pages of explicit assignments ``state``'s version holds (a superset; None: not tracked)."""
        tracked = state.pages
        if tracked.known is not None or tracked.untracked or self.repo.closed:
            return tracked.known
        generation = tracked.generation
        with self.repo.read(state.version) as view:
            stamp = decode_stamp(view.get(self.instance, STAMP_KEY))
            pages = scan_pages(view, self.instance)
        if stamp != state.stamp:  # another writer since: the records the state holds are older
            return None
        tracked.install(pages, generation)
        return pages

    def txn(self, state: VersionState,
            entries: Callable[[list[int]], Mapping[int, SvIndex]] | None = None) -> MapTxn:
        """A planning transaction over ``state``'s body map (nothing is written until the edit is).

        ``entries``: where else index entries of split-made supervoxels may be found (a branch merge's sides).
        """
        return MapTxn(state.records, self.agglomeration, self.base_index, state.memo, entries)

    # -- the label index ------------------------------------------------------------------------

    def base_index(self, progress: Progress | None = None) -> BaseIndexReader:
        """The base label index, read page by page; built first when it never was and the base is small.

        A base of at most :data:`~napari_shardscope.core.labelmap.present.ON_DEMAND_BLOCKS` stored
        blocks is counted here (threads, one pass over the blocks that hold chunks) and stored
        unversioned, visible to every version; a larger one raises :class:`IndexNotBuiltError`
        naming ``shardscope index`` (the Dask job).
        """
        if self._index is not None:
            return self._index
        with self._index_lock:
            if self._index is None:
                meta = load_index_meta(self.read_unversioned)
                if meta is None or int(meta.get("format", 0)) < 2:
                    meta = build_and_store_index(self.repo, self.instance, self.config, self.base,
                                                 self.agglomeration, progress=progress, on_demand=True)
                self._index = BaseIndexReader(self.read_unversioned, meta)
        return self._index

    def index_summary(self, progress: Progress | None = None) -> IndexSummary:
        """Every base supervoxel and its voxel count, materialised (O(supervoxels): small bases, tests)."""
        return self.base_index(progress).summary()

    def base_entry(self, sv: int) -> SvIndex | None:
        """The base index entry of supervoxel ``sv`` (None when the base has no such supervoxel)."""
        return self.base_index().entry(sv)

    def entry(self, state: VersionState, sv: int) -> SvIndex | None:
        """Where supervoxel ``sv`` is at a version (None: it does not exist there)."""
        with state.lock:
            return self.reader(state).entry(sv)

    def exists(self, state: VersionState, svs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``svs`` exist at a version (vectorised: retired, split-made, base)."""
        with state.lock:
            return self.reader(state).exists(svs)

    # -- edits ----------------------------------------------------------------------------------

    @contextmanager
    def holding_edits(self) -> Iterator[None]:
        """Edits of this labelmap wait while the block runs (re-entrant).

        For a background reader of many blocks (meshing from the labels): an edit reads blocks
        through TensorStore while holding the repository's writer lock, and read callbacks of a
        concurrent reader that need the store could occupy TensorStore's few executor threads.
        """
        with self._edit_lock:
            yield

    def mesher(self, lod: int = 0) -> BodyMesher:
        """The body mesher of this labelmap for ``lod`` (one per level, sharing nothing but the repository cache)."""
        from napari_shardscope.core.labelmap.meshes import BodyMesher

        with self._states_lock:
            mesher = self._meshers.get(lod)
            if mesher is None:
                mesher = self._meshers[lod] = BodyMesher(self, lod=lod)
            return cast("BodyMesher", mesher)

    def mesh(self, body: int, version: str | Version = "main", *, lod: int = 0) -> MeshData:
        """The mesh of ``body`` at ``version``: vertices float32 (N, 3) x, y, z in nm, faces uint32 (M, 3).

        True to every edit of that version (see :mod:`.meshes`); ``trimesh.Trimesh(m.vertices, m.faces)``.
        """
        return self.mesher(lod).mesh(body, self.at(version))

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(event)`` after every edit made through this object; returns an unsubscribe.

        Called in the editing thread, after the edit is committed and the in-memory state updated;
        a GUI should hand the event to its own thread.
        """
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def edit(self, version: str | Version, planner: Planner[T], user: str | None = None) -> tuple[Mutation, T]:
        """Plan and write one edit at an open version as one transaction; returns the record and result."""
        who = user or default_user()
        self.base_index()  # built (once) outside the edit's transaction: building has its own
        self.top_up_ids()
        with self._edit_lock:
            with self.repo.write(version) as w:
                state = self._fresh(w)
                state.editing = True
                try:
                    ws = self.workspace(w, state)
                    plan, result = planner(w, state, ws)
                    region = self._region()
                    if region is not None:
                        check_edit_in_region(self.config, self.reader(state), plan, region_box(region),
                                             lambda sv: self.entry(state, sv))
                    written = write_plan(w, self.instance, self.name, plan, who)
                    log_length = w.log_length(self.instance)
                finally:
                    state.editing = False
            changed = state.written(written.keys, written.mutation.mutation_id, unlinked=written.unlinked,
                                    log_length=log_length)
        event = EditEvent(self.name, state.version.uuid, written.mutation, changed)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # the edit is committed; a broken listener must not undo that for the caller
                _log.exception("labelmap %s: subscriber %r failed", self.name, callback)
        return written.mutation, result

    def _region(self) -> list[list[int]] | None:
        """The region a region clone may edit (its file re-read only when it changed)."""
        if self.repo.path is None:
            return None
        ids = id_reservation()
        key = ids.region_stamp(self.repo)
        if key != self._region_key:
            self._region_value = ids.region_of(self.repo) if key is not None else None
            self._region_key = key
        return self._region_value

    def _fresh(self, w: VersionWriter) -> VersionState:
        """The version's state, refreshed inside the write transaction if someone else edited it."""
        with self._states_lock:
            cached = self._states.get(w.version.uuid)
        return self._state_from(w, cached)

    def workspace(self, w: VersionWriter, state: VersionState) -> Workspace:
        """An edit workspace over ``state`` whose records and new ids come through ``w``'s transaction."""
        reader = PatchedReader(self.base, state.overlay)
        records = EditRecords(state.records, lambda keys: w.get_many(self.instance, keys))
        txn = MapTxn(records, self.agglomeration, self.base_index, state.memo)
        return Workspace(self.config, reader, txn, lambda n: self.new_ids(w, n))

    def id_floors(self) -> dict[str, int]:
        """This labelmap's id counters and the smallest id each may hand out."""
        return {labels_counter(self.name): max(self.config.id_start, self.base_index().max_id + 1),
                mutations_counter(self.name): 1}

    def top_up_ids(self, low_water: int = ID_LOW_WATER) -> dict[str, int]:
        """In a clone of a remote, reserve more ids when fewer than ``low_water`` are left; ids left per counter.

        Offline, a failed reservation is logged and the clone keeps using what it has; the edit that
        finds none left raises :class:`IdsExhaustedError`.
        """
        left: dict[str, int] = {}
        if self.repo.id_source() is None:
            return left
        for counter, floor in self.id_floors().items():
            n = sum(max(0, b - max(a, floor)) for a, b in self.repo.id_blocks(counter))
            if n < low_water and time.monotonic() >= self._offline_until:
                try:
                    block = id_reservation().reserve_ids(self.repo, counter, minimum=floor)
                    n += len(block)
                except ShardscopeError as exc:
                    # offline: do not make every following edit wait for the network's timeout
                    self._offline_until = time.monotonic() + OFFLINE_RETRY_S
                    _log.warning("labelmap %s: could not reserve more ids of %s (%d left; next try in %.0f s): %s",
                                 self.name, counter, n, OFFLINE_RETRY_S, exc)
            left[counter] = n
        return left

    def new_ids(self, w: VersionWriter, count: int) -> range:
        """``count`` new body/supervoxel ids, reserved in ``w``'s transaction (unique across branches).

        Never at or below the base's largest id, even when the user's ``id_start`` was lower and
        the index (which knows that id) was built only later.
        """
        floor = max(self.config.id_start, self.base_index().max_id + 1)
        return w.allocate_ids(labels_counter(self.name), count, minimum=floor)


# -- creating and opening ---------------------------------------------------------------------------


def default_user() -> str:
    """Who edits, for the mutation log: ``$SHARDSCOPE_USER``, else the login name."""
    env = os.environ.get("SHARDSCOPE_USER")
    if env:
        return env
    return _login()


@functools.cache
def _login() -> str:
    """The login name (looked up once: a password-database read per edit cost more than the edit's records)."""
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "unknown"
