"""A labelmap instance: DVID's ``labelmap`` data type over an immutable base volume, without a server.

Obtained from :func:`~napari_shardscope.core.labelmap.opening.create_labelmap` or
:func:`~napari_shardscope.core.labelmap.opening.open_labelmap`; ``lm.at("main")`` gives a
:class:`~napari_shardscope.core.labelmap.version.LabelmapVersion` (reads and edits at one version).

The :class:`Labelmap` holds what every version shares — configuration, the base volume, the base
agglomeration, the base label index — and a cache of per-version states
(:mod:`~napari_shardscope.core.labelmap.state`). Edits go through :meth:`Labelmap.edit`: one
write transaction in which the version's state is checked fresh, the edit planned and written with
its log record; the in-memory state is updated once the transaction has committed, then
subscribers are told (:meth:`Labelmap.subscribe`).
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import ShardscopeError
from napari_shardscope.core.labelmap.bodymap import BaseAgglomeration
from napari_shardscope.core.labelmap.config import (
    TYPE_NAME,
    LabelmapConfig,
)
from napari_shardscope.core.labelmap.edits import Planner, Workspace, write_plan
from napari_shardscope.core.labelmap.errors import LabelmapStateError
from napari_shardscope.core.labelmap.keys import (
    INDEX_META_KEY,
    INDEX_SUMMARY_KEY,
    base_index_key,
    labels_counter,
    mutations_counter,
)
from napari_shardscope.core.labelmap.label_index import (
    BaseIndex,
    IndexSummary,
    SvIndex,
    build_base_index,
    store_base_index,
)
from napari_shardscope.core.labelmap.mutations import Mutation
from napari_shardscope.core.labelmap.reading import BaseSource, Fetch, PatchedReader
from napari_shardscope.core.labelmap.region import check_edit_in_region, region_box
from napari_shardscope.core.labelmap.state import STAMP_KEY, VersionState, decode_stamp, load_state
from napari_shardscope.core.labelmap.version import LabelmapVersion
from napari_shardscope.core.progress import Progress
from napari_shardscope.core.versioned.dag import Version
from napari_shardscope.core.versioned.errors import IdsExhaustedError
from napari_shardscope.core.versioned.instance import Instance, register_instance_type
from napari_shardscope.core.versioned.remotes.config import region_of
from napari_shardscope.core.versioned.remotes.errors import RegionError
from napari_shardscope.core.versioned.remotes.sync import reserve_ids
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
#: Version states kept in memory (committed ones never change; each holds a body map).
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
                 agglomeration: BaseAgglomeration) -> None:
        self.repo = repo
        self.instance = instance
        self.config = config
        self.base = BaseSource(volume)
        self.agglomeration = agglomeration
        self._states: OrderedDict[str, VersionState] = OrderedDict()
        self._states_lock = threading.RLock()
        self._edit_lock = threading.RLock()
        self._index_lock = threading.Lock()
        self._summary: IndexSummary | None = None
        self._entries: LruCache[int, SvIndex | None] = LruCache(4096)
        self._subscribers: list[Subscriber] = []
        self._meshers: dict[int, Any] = {}
        self._offline_until = 0.0

    @property
    def name(self) -> str:
        return self.instance.name

    def __repr__(self) -> str:
        return f"Labelmap({self.name!r}, base={self.config.base!r}, scales={len(self.config.scales)})"

    # -- versions -------------------------------------------------------------------------------

    def at(self, ref: str | Version) -> LabelmapVersion:
        """Reads and edits at one version (a branch name means its head *now*)."""
        v = self.repo.version(ref)
        self.state(v)  # load (or refresh) now, so errors surface here
        return LabelmapVersion(self, v.uuid)

    def state(self, ref: str | Version) -> VersionState:
        """The current in-memory state of a version (loaded, or refreshed when stale)."""
        v = self.repo.version(ref)
        with self._states_lock:
            cached = self._states.get(v.uuid)
            if cached is not None:
                self._states.move_to_end(v.uuid)
                if cached.version.locked:
                    return cached
        # Under the edit lock: an edit of this object commits first and updates the state after, and
        # a reader comparing stamps in between would reload the edit and see it applied twice.
        with self._edit_lock, self.repo.read(v) as view:
            if cached is not None and decode_stamp(view.get(self.instance, STAMP_KEY)) == cached.stamp:
                cached.version = v
                return cached
            return self._load(view)

    def _load(self, view: VersionView) -> VersionState:
        v = view.version
        parent = None
        if len(v.parents) == 1:
            with self._states_lock:
                parent = self._states.get(v.parents[0])
        state = load_state(view, self.instance, self.config, self.agglomeration, self.fetcher(v), parent,
                           lambda uuid: self.repo.version(uuid).parents)
        with self._states_lock:
            old = self._states.get(v.uuid)
            if old is not None:
                # Someone else edited the version: refresh the object in place, so the body arrays
                # already handed out (their transform holds the state) show the new mapping.
                old.refresh_from(state)
                state = old
            self._states[v.uuid] = state
            self._states.move_to_end(v.uuid)
            # Only committed states are evicted: an open version's state backs arrays a viewer
            # holds, and edits must update that very object.
            committed = [u for u, st in self._states.items() if st.version.locked]
            for uuid in committed[:max(0, len(self._states) - STATE_CACHE)]:
                del self._states[uuid]
        return state

    def fetcher(self, version: Version) -> Fetch:
        """Reads encoded overlay blocks at ``version`` (each call one store snapshot)."""

        def fetch(keys: list[bytes]) -> list[bytes | None]:
            with self.repo.read(version) as view:
                return view.get_many(self.instance, keys)

        return fetch

    # -- the label index ------------------------------------------------------------------------

    def index_summary(self, progress: Progress | None = None) -> IndexSummary:
        """The base index summary, building the base index first if it was never built.

        Building reads all of scale 0 once (threads) and stores the result unversioned, visible to
        every version; ``progress(done, total, what)`` reports blocks.
        """
        if self._summary is not None:
            return self._summary
        with self._index_lock:
            if self._summary is None:
                raw = self.repo.get_unversioned(self.instance, INDEX_SUMMARY_KEY)
                if raw is None or self.repo.get_unversioned(self.instance, INDEX_META_KEY) is None:
                    built = self._build_index(progress)
                    store_base_index(self.repo, self.instance, built)
                    self._summary = built.summary
                else:
                    self._summary = IndexSummary.from_bytes(raw)
        return self._summary

    def _build_index(self, progress: Progress | None) -> BaseIndex:
        return build_base_index(lambda box: self.base.read(0, box), self.config.grid(0),
                                workers=min(4, os.cpu_count() or 1), progress=progress)

    def base_entry(self, sv: int) -> SvIndex | None:
        """The base index entry of supervoxel ``sv`` (None when the base has no such supervoxel)."""
        summary = self.index_summary()
        if not bool(summary.contains(np.asarray([sv], dtype=np.uint64))[0]):
            return None

        def load() -> SvIndex | None:
            raw = self.repo.get_unversioned(self.instance, base_index_key(sv))
            if raw is None:
                raise LabelmapStateError(f"labelmap {self.name!r}: base index has no entry for supervoxel {sv}")
            return SvIndex.from_bytes(raw, key=f"base index entry of supervoxel {sv}")

        return self._entries.get_or_load(sv, load)

    def entry(self, state: VersionState, sv: int) -> SvIndex | None:
        """Where supervoxel ``sv`` is at a version (None: it does not exist there)."""
        with state.lock:
            if sv in state.map.retired:
                return None
            own = state.sv_index(sv)
        return own if own is not None else self.base_entry(sv)

    def exists(self, state: VersionState, svs: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which of ``svs`` exist at a version (vectorised: retired, split-made, base)."""
        arr = np.asarray(svs, dtype=np.uint64)
        summary = self.index_summary()
        with state.lock:
            retired = np.fromiter(state.map.retired, dtype=np.uint64, count=len(state.map.retired))
            own = np.fromiter(state.index.keys(), dtype=np.uint64, count=len(state.index))
        out: npt.NDArray[np.bool_] = (summary.contains(arr) | np.isin(arr, own)) & ~np.isin(arr, retired)
        out &= arr != 0
        return out

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
        self.index_summary()  # built (once) outside the edit's transaction: building has its own
        self.top_up_ids()
        with self._edit_lock:
            try:
                with self.repo.write(version) as w:
                    state = self._fresh(w)

                    def workspace(multi_step: bool) -> Workspace:
                        return self.workspace(w, state, multi_step=multi_step)

                    plan, result = planner(w, state, workspace)
                    with state.lock:
                        state.map.check(plan.delta)
                    region = region_of(self.repo)
                    if region is not None:
                        check_edit_in_region(self.config, state, plan, region_box(region),
                                             lambda sv: self.entry(state, sv))
                    mutation, data = write_plan(w, self.instance, self.name, plan, who)
            except (IdsExhaustedError, RegionError):
                # The transaction was discarded, but the planner may have changed the cached map:
                # reload the version's state (in place, so arrays already handed out stay right).
                with self.repo.read(version) as view:
                    self._load(view)
                raise
            changed = state.apply(mutation, data, plan.keys, self.fetcher(state.version), self.config)
        event = EditEvent(self.name, state.version.uuid, mutation, changed)
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # the edit is committed; a broken listener must not undo that for the caller
                _log.exception("labelmap %s: subscriber %r failed", self.name, callback)
        return mutation, result

    def _fresh(self, w: VersionWriter) -> VersionState:
        """The version's state, reloaded inside the write transaction if someone else edited it."""
        with self._states_lock:
            cached = self._states.get(w.version.uuid)
        if cached is not None and decode_stamp(w.get(self.instance, STAMP_KEY)) == cached.stamp:
            cached.version = w.version
            return cached
        return self._load(w)

    def workspace(self, w: VersionWriter, state: VersionState, *, multi_step: bool) -> Workspace:
        """An edit workspace over ``state`` whose new ids come from ``w``'s transaction."""
        reader = PatchedReader(self.base, state.overlay)
        body_map = state.map.copy() if multi_step else state.map

        return Workspace(self.config, reader, body_map, lambda sv: self.entry(state, sv),
                         lambda n: self.new_ids(w, n), multi_step=multi_step)

    def id_floors(self) -> dict[str, int]:
        """This labelmap's id counters and the smallest id each may hand out."""
        return {labels_counter(self.name): max(self.config.id_start, self.index_summary().max_id + 1),
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
                    block = reserve_ids(self.repo, counter, minimum=floor)
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
        floor = max(self.config.id_start, self.index_summary().max_id + 1)
        return w.allocate_ids(labels_counter(self.name), count, minimum=floor)


# -- creating and opening ---------------------------------------------------------------------------


def default_user() -> str:
    """Who edits, for the mutation log: ``$SHARDSCOPE_USER``, else the login name."""
    env = os.environ.get("SHARDSCOPE_USER")
    if env:
        return env
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "unknown"
