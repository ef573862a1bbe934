"""The proofreading session of one viewer: which repository, labelmap and version its layers show.

The Proofreading and Versions panels are two views of one state: the version a proofreader has
checked out. Keeping that state here — one session per viewer, found with :func:`session_for` —
means a commit made in the Versions panel disables the edit buttons of the Proofreading panel at
once, and a checkout switches the layers both panels act on. Everything else is core:
:func:`~napari_shardscope.core.versioned.create_repository`,
:func:`~napari_shardscope.core.labelmap.create_labelmap` / ``open_labelmap`` and a
:class:`~napari_shardscope.core.labelmap.LabelmapVersion` for reads and edits.

The layers: body ids at the checked-out version (the supervoxel array mapped through the live body
map inside the lazy read, so a merge or cleave is shown by ``layer.refresh()`` with no chunk read
again) and, hidden, the supervoxel ids. The base segmentation layer is never written to.

Edits may run in worker threads; the core tells its subscribers in the editing thread, and the
session hands the event to the GUI thread (a queued Qt signal) before it refreshes the layers and
emits :attr:`ProofreadingSession.edited`.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any

from psygnal import Signal
from qtpy.QtCore import QObject
from qtpy.QtCore import Signal as QtSignal  # type: ignore[attr-defined]

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import (
    TYPE_NAME,
    EditEvent,
    Labelmap,
    LabelmapVersion,
    create_labelmap,
    open_labelmap,
)
from napari_shardscope.core.versioned import Repository, Version, create_repository, open_repository

if TYPE_CHECKING:
    import napari
    from napari.layers import Labels

#: Layer metadata key naming the session's layers (not ``"shardscope"``: those are base volumes).
LAYER_KEY = "shardscope_proofreading"


class _ToGuiThread(QObject):  # type: ignore[misc]
    """Carries edit events from any thread to the thread this object lives in (the GUI thread)."""

    event = QtSignal(object)


class ProofreadingSession:
    """Per viewer: which repository / labelmap / version the proofreading layers show."""

    connected = Signal()
    version_changed = Signal(str)
    edited = Signal(object)
    dag_changed = Signal()

    def __init__(self, viewer: napari.Viewer) -> None:
        self._viewer = weakref.ref(viewer)
        self.repo: Repository | None = None
        self.labelmap: Labelmap | None = None
        self.version: LabelmapVersion | None = None
        self.body_layer: Labels | None = None
        self.supervoxel_layer: Labels | None = None
        self._layout: tuple[Any, ...] | None = None  # what the layers show: labelmap and geometry
        self._unsubscribe: Any = None
        self._bridge = _ToGuiThread()
        self._bridge.event.connect(self._on_edit)

    @property
    def viewer(self) -> napari.Viewer:
        viewer = self._viewer()
        if viewer is None:  # pragma: no cover - the session dies with its viewer
            raise RuntimeError("the viewer of this session was closed")
        return viewer

    @property
    def is_connected(self) -> bool:
        return self.labelmap is not None and self.version is not None

    @property
    def editable(self) -> bool:
        """True when the checked-out version accepts edits (open, not committed)."""
        return self.version is not None and not self.version.version.locked

    def why_not_editable(self) -> str:
        """A sentence for disabled edit actions ('' when edits are allowed)."""
        if self.version is None:
            return "connect to a repository first (Proofreading panel: create or open one)"
        v = self.version.version
        if v.locked:
            return (f"version {v.short} (branch {v.branch!r}) is committed and read-only: "
                    f"make a new branch from it in the Versions panel to edit")
        return ""

    # -- connecting -----------------------------------------------------------------------------

    def create(self, path: str | os.PathLike[str], base_url: str, *, name: str = "seg",
               agglomeration: Any = None, engine: str | None = None,
               progress: Any = None) -> None:
        """A new repository at ``path`` with a labelmap over ``base_url``; checks out ``main``.

        ``agglomeration`` is the base's supervoxel → body grouping (a bodies JSON path or a mapping).
        Building the base label index reads all of scale 0 once (``progress(done, total)``).
        """
        repo = create_repository(path, engine=engine)
        try:
            lm = create_labelmap(repo, name, base_url, agglomeration=agglomeration, progress=progress)
        except BaseException:
            repo.close()
            raise
        self._attach(repo, lm)

    def connect(self, path: str | os.PathLike[str], *, instance: str | None = None) -> None:
        """Open an existing repository and its labelmap (the only one, or ``instance``); checks out ``main``."""
        repo = open_repository(path)
        try:
            names = [i.name for i in repo.instances() if i.type == TYPE_NAME]
            if instance is None:
                if len(names) != 1:
                    raise ArgumentError(f"{path}: {len(names)} labelmap instances ({', '.join(names) or 'none'}); "
                                        f"name the one to open")
                instance = names[0]
            lm = open_labelmap(repo, instance)
        except BaseException:
            repo.close()
            raise
        self._attach(repo, lm)

    def _attach(self, repo: Repository, lm: Labelmap) -> None:
        self.disconnect()
        self.repo, self.labelmap = repo, lm
        self._unsubscribe = lm.subscribe(self._bridge.event.emit)
        branches = {b.name for b in repo.branches()}
        self.checkout("main" if "main" in branches else repo.root.uuid, emit=False)
        self.connected.emit()
        self.version_changed.emit(self.version.uuid if self.version else "")

    def disconnect(self) -> None:
        """Forget the repository (its layers stay until the user removes them)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.repo is not None:
            self.repo.close()
        self.repo = self.labelmap = self.version = None

    # -- versions -------------------------------------------------------------------------------

    def _require(self) -> tuple[Repository, Labelmap]:
        if self.repo is None or self.labelmap is None:
            raise ArgumentError("no repository: create or open one in the Proofreading panel")
        return self.repo, self.labelmap

    def checkout(self, ref: str, *, emit: bool = True) -> LabelmapVersion:
        """Show any version (a branch name means its head): the layers switch to its arrays."""
        _, lm = self._require()
        self.version = lm.at(ref)
        self._show(self.version)
        if emit:
            self.version_changed.emit(self.version.uuid)
        return self.version

    def commit(self, message: str) -> Version:
        """Commit the checked-out (open) version: it becomes read-only, and may have children."""
        repo, _ = self._require()
        if self.version is None:  # pragma: no cover - _require checked the labelmap
            raise ArgumentError("no version checked out")
        done = repo.commit(self.version.uuid, message)
        self.dag_changed.emit()
        self.version_changed.emit(done.uuid)
        return done

    def branch(self, name: str | None = None, parent: str | None = None) -> Version:
        """A new open child of a committed version (default: the checked-out one), checked out.

        ``name`` starts a new branch; ``None`` continues the parent's branch.
        """
        repo, _ = self._require()
        if parent is None:
            if self.version is None:  # pragma: no cover
                raise ArgumentError("no version checked out")
            parent = self.version.uuid
        child = repo.new_version(parent, name)
        self.dag_changed.emit()
        self.checkout(child.uuid)
        return child

    # -- layers ---------------------------------------------------------------------------------

    def _layer_alive(self, layer: Labels | None) -> bool:
        return layer is not None and layer in self.viewer.layers

    def _show(self, v: LabelmapVersion) -> None:
        """Point the body and supervoxel layers at ``v``'s arrays (adding them when needed).

        A checkout of another version of the same labelmap swaps the layers' data, which keeps
        the user's layer settings. Anything else — the first version shown, another repository or
        labelmap (other geometry), or one of the two layers removed by the user — replaces both
        layers, so a layer never shows one volume placed with another's scale and translate.
        """
        bodies, svs = v.body_arrays(), v.supervoxel_arrays()
        meta = {LAYER_KEY: {"repository": str(self.repo.path) if self.repo and self.repo.path else None,
                            "labelmap": v.labelmap.name, "version": v.uuid}}
        geometry = v.scales[0]
        layout = (meta[LAYER_KEY]["repository"], v.labelmap.name, tuple(geometry.voxel_size),
                  tuple(geometry.translate), len(bodies))
        alive = self._layer_alive(self.body_layer) and self._layer_alive(self.supervoxel_layer)
        if alive and layout == self._layout:
            assert self.body_layer is not None and self.supervoxel_layer is not None
            self.supervoxel_layer.data = _data(svs)
            self.body_layer.data = _data(bodies)
            for layer in (self.supervoxel_layer, self.body_layer):  # keep_read_only undoes napari's editable
                layer.metadata.update(meta)
            return
        for old in (self.supervoxel_layer, self.body_layer):
            if self._layer_alive(old):
                self.viewer.layers.remove(old)
        common = {"scale": geometry.voxel_size, "translate": geometry.translate, "multiscale": len(bodies) > 1,
                  "axis_labels": ("z", "y", "x")}
        name = v.labelmap.name
        base = self._hide_base_layers(v)
        if base is not None and getattr(base, "units", None) is not None:
            common["units"] = tuple(base.units)[-3:]  # the same world units as the base's layer
        self.supervoxel_layer = self.viewer.add_labels(_data(svs), name=f"{name} supervoxels", visible=False,
                                                       metadata=dict(meta), **common)
        self.body_layer = self.viewer.add_labels(_data(bodies), name=f"{name} bodies", metadata=dict(meta),
                                                 **common)
        for layer in (self.supervoxel_layer, self.body_layer):
            keep_read_only(layer)  # napari must never write into a lazy view of the store
        self._layout = layout
        self.viewer.layers.selection.active = self.body_layer

    def _hide_base_layers(self, v: LabelmapVersion) -> Any:
        """Hide the base segmentation's own layer (the body layer shows the same voxels, edited); return it."""
        base = v.labelmap.config.base.rstrip("/")
        found = None
        for layer in self.viewer.layers:
            meta = layer.metadata.get("shardscope") if hasattr(layer, "metadata") else None
            if isinstance(meta, dict) and str(meta.get("url", "")).rstrip("/") in (base, base.removeprefix("file://")):
                layer.visible = False
                found = layer
        return found

    def refresh(self, event: EditEvent | None = None) -> None:
        """Show the checked-out version's current state after an edit.

        Merges and cleaves change only the body map, which the body arrays apply at read time: a
        ``refresh()`` re-slices the visible tiles, whose supervoxel chunks come from the cache.
        Splits rewrite overlay blocks: the layers get the version's new arrays (chunks the split
        did not touch are still served from the cache).
        """
        if self.version is None:
            return
        if event is None or event.blocks_changed:
            self._show(self.version)
        elif self._layer_alive(self.body_layer):
            assert self.body_layer is not None
            self.body_layer.refresh()

    def _on_edit(self, event: EditEvent) -> None:
        if self.version is not None and event.version == self.version.uuid:
            self.refresh(event)
        self.edited.emit(event)


def keep_read_only(layer: Any) -> None:
    """Make a Labels layer over a lazy store view read-only for good.

    napari re-derives ``editable`` (``not multiscale``) whenever a layer's data is set, so a
    single-scale layer would become paintable again after a checkout; the paint stroke would then
    fail inside napari. Re-assert it on every change.
    """
    layer.editable = False

    def again(_: Any = None) -> None:
        if layer.editable:
            layer.editable = False

    layer.events.editable.connect(again)


def _data(arrays: list[Any]) -> Any:
    return arrays if len(arrays) > 1 else arrays[0]


_SESSIONS: weakref.WeakKeyDictionary[Any, ProofreadingSession] = weakref.WeakKeyDictionary()


def session_for(viewer: napari.Viewer) -> ProofreadingSession:
    """The proofreading session of ``viewer`` (made on first call; both panels share it)."""
    session = _SESSIONS.get(viewer)
    if session is None:
        session = _SESSIONS[viewer] = ProofreadingSession(viewer)
    return session
