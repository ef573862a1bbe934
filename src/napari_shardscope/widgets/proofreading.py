"""The Proofreading panel: pick bodies with the mouse, merge, cleave, split with painted seeds, undo.

A thin view over the session (:mod:`.session`) and a core
:class:`~napari_shardscope.core.labelmap.LabelmapVersion`; every action is one core call a notebook
can make (``v.merge``, ``v.cleave``, ``v.split_body``, ``v.undo``, ``v.redo``, ``v.size``, …).
What lives here is only what needs a viewer:

* picking: a click on the body layer maps the cursor to a scale-0 voxel and asks the core which
  body (or, in supervoxel mode, which supervoxel) is there — exact whatever level napari shows;
  a drag (pan) selects nothing;
* the selection shown as the body layer's selected label (and, with *isolate*, only that body);
* split seeds painted into a temporary, small, single-scale Labels layer over the body's block
  bounds (multiscale Labels layers are not editable, and napari must never write into the store);
* keybindings bound on the viewer at run time (napari ignores manifest keybindings), chosen not
  to clash with napari's own (Labels keeps M, E, P, F, L, Z, X, B and the digits);
* long operations (creating a repository, which indexes the base; a split) in worker threads with
  napari's progress, so the viewer never freezes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from napari_shardscope.core.errors import ArgumentError, ShardscopeError
from napari_shardscope.core.labelmap import BodySplit, Mutation
from napari_shardscope.widgets.lifecycle import on_removed
from napari_shardscope.widgets.session import ProofreadingSession, session_for
from napari_shardscope.widgets.workers import GuiProgress, start_worker

if TYPE_CHECKING:
    import napari
    from napari.layers import Labels

#: Key of the layer metadata written by our reader (``napari_plugin.layers.METADATA_KEY``).
METADATA_KEY = "shardscope"
SEEDS_NAME = "split seeds"
#: A seeds layer larger than this many voxels covers only the current z plane of the body.
MAX_SEED_VOXELS = 1 << 26
HISTORY_SHOWN = 5
MODES = ("bodies", "supervoxels")

#: (key, method name, what it does): bound on the viewer while the panel is open.
KEYBINDINGS: tuple[tuple[str, str, str], ...] = (
    ("Shift-M", "merge_selected", "merge the selected bodies into the first"),
    ("Shift-C", "cleave_picked", "cleave the picked supervoxels into a new body"),
    ("Shift-S", "toggle_split", "start a split (paint seeds 1, 2, …) / split with the painted seeds"),
    ("Shift-U", "undo", "undo the last edit of this version"),
    ("Shift-R", "redo", "redo the last undone edit"),
    ("Shift-X", "clear_selection", "clear the selection"),
)

HELP = """<b>Proofreading</b> the checked-out version of the labelmap.<br>
<b>Click</b> a body to select it, <b>Shift-click</b> to add one (a drag pans, it selects nothing).
In <i>supervoxels</i> mode, clicks pick supervoxels of the selected body for a cleave.<br>
<b>Split</b>: <i>Start split</i> adds a <i>split seeds</i> layer; paint label 1 on one part and 2 (3, …)
on the others, then <i>Split</i>.<br>Keys: """ + "; ".join(f"<b>{k}</b> {what}" for k, _, what in KEYBINDINGS)


class ProofreadingPanel(QWidget):  # type: ignore[misc]
    """Dock widget: connect a repository, pick bodies, merge / cleave / split / undo / redo."""

    def __init__(self, napari_viewer: napari.viewer.Viewer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.viewer = viewer = napari_viewer
        self.session: ProofreadingSession = session_for(viewer)
        self.selected: list[int] = []
        self.picked: list[int] = []
        self.seeds_layer: Labels | None = None
        self.last_error = ""
        self._workers: list[Any] = []
        self._hooked: Any = None
        self._suggested: dict[QLineEdit, str] = {}  # what _suggest_paths last put in each field
        self._build()
        self.setToolTip(HELP)
        self.session.connected.connect(self._on_version)
        self.session.version_changed.connect(self._on_version)
        self.session.edited.connect(self._on_edited)
        viewer.layers.events.inserted.connect(self._fill_layers)
        viewer.layers.events.removed.connect(self._fill_layers)
        self._bind_keys()
        self.teardown = on_removed(self, self._teardown)
        self._fill_layers()
        self._on_version()

    # -- building ---------------------------------------------------------------------------------------
    def _build(self) -> None:
        vbox = QVBoxLayout(self)
        conn = QGroupBox("Repository")
        form = QFormLayout(conn)
        self.layer_combo = QComboBox()
        self.layer_combo.setToolTip("the segmentation (supervoxel ids) to proofread")
        self.layer_combo.currentTextChanged.connect(self._suggest_paths)
        form.addRow("Segmentation", self.layer_combo)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("repository directory")
        form.addRow("Repository", self.repo_edit)
        self.agglo_edit = QLineEdit()
        self.agglo_edit.setPlaceholderText("optional supervoxel → body JSON (bodies.json)")
        form.addRow("Agglomeration", self.agglo_edit)
        row = QHBoxLayout()
        self.create_button = QPushButton("Create for layer")
        self.create_button.setToolTip("a new repository with a labelmap over the selected segmentation")
        self.create_button.clicked.connect(
            lambda: self._guard(lambda: self.create_repository(self.repo_edit.text().strip() or None)))
        self.open_button = QPushButton("Open…")
        self.open_button.setToolTip("open an existing repository (the directory in the field, or choose one)")
        self.open_button.clicked.connect(self._open_clicked)
        row.addWidget(self.create_button)
        row.addWidget(self.open_button)
        form.addRow(row)
        self.version_label = QLabel("not connected")
        self.version_label.setWordWrap(True)
        form.addRow("Version", self.version_label)
        vbox.addWidget(conn)

        sel = QGroupBox("Selection")
        sv = QVBoxLayout(sel)
        mode_row = QHBoxLayout()
        mode_row.addWidget(QLabel("Click picks"))
        self.mode_combo = QComboBox()
        self.mode_combo.addItems(MODES)
        mode_row.addWidget(self.mode_combo)
        self.isolate_check = QCheckBox("isolate selected")
        self.isolate_check.setToolTip("show only the first selected body")
        self.isolate_check.toggled.connect(lambda _on: self._show_selection())
        mode_row.addWidget(self.isolate_check)
        sv.addLayout(mode_row)
        self.selection_list = QListWidget()
        self.selection_list.setMaximumHeight(90)
        sv.addWidget(self.selection_list)
        self.picked_label = QLabel("picked supervoxels: none")
        self.picked_label.setWordWrap(True)
        sv.addWidget(self.picked_label)
        vbox.addWidget(sel)

        act = QGroupBox("Edit")
        grid = QVBoxLayout(act)
        r1, r2 = QHBoxLayout(), QHBoxLayout()
        self.merge_button = QPushButton("Merge")
        self.merge_button.clicked.connect(lambda: self._guard(self.merge_selected))
        self.cleave_button = QPushButton("Cleave")
        self.cleave_button.clicked.connect(lambda: self._guard(self.cleave_picked))
        self.split_button = QPushButton("Start split")
        self.split_button.clicked.connect(lambda: self._guard(self.toggle_split))
        self.cancel_split_button = QPushButton("Cancel split")
        self.cancel_split_button.clicked.connect(self.cancel_split)
        self.undo_button = QPushButton("Undo")
        self.undo_button.clicked.connect(lambda: self._guard(self.undo))
        self.redo_button = QPushButton("Redo")
        self.redo_button.clicked.connect(lambda: self._guard(self.redo))
        for b in (self.merge_button, self.cleave_button, self.split_button):
            r1.addWidget(b)
        for b in (self.cancel_split_button, self.undo_button, self.redo_button):
            r2.addWidget(b)
        grid.addLayout(r1)
        grid.addLayout(r2)
        vbox.addWidget(act)

        info = QGroupBox("Body")
        iform = QFormLayout(info)
        self.info_labels: dict[str, QLabel] = {}
        for key in ("id", "size", "supervoxels", "bounds", "history"):
            lab = QLabel("")
            lab.setWordWrap(True)
            self.info_labels[key] = lab
            iform.addRow(key, lab)
        vbox.addWidget(info)

        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        vbox.addWidget(self.status_label)
        vbox.addStretch(1)

    def _bind_keys(self) -> None:
        for key, method, _ in KEYBINDINGS:
            func = getattr(self, method)

            def handler(_viewer: Any, func: Callable[[], Any] = func) -> None:
                self._guard(func)

            self.viewer.bind_key(key, handler, overwrite=True)

    def _unbind_keys(self) -> None:
        for key, _, _ in KEYBINDINGS:
            self.viewer.bind_key(key, None, overwrite=True)

    # -- connecting -------------------------------------------------------------------------------------
    def segmentation_layers(self) -> list[Any]:
        """Layers our reader opened as segmentations (their metadata names the source URL)."""
        out = []
        for layer in self.viewer.layers:
            meta = layer.metadata.get(METADATA_KEY) if hasattr(layer, "metadata") else None
            if isinstance(meta, dict) and meta.get("kind") == "segmentation" and meta.get("url"):
                out.append(layer)
        return out

    def _fill_layers(self, *_: Any) -> None:
        current = self.layer_combo.currentText()
        self.layer_combo.clear()
        names = [layer.name for layer in self.segmentation_layers()]
        self.layer_combo.addItems(names)
        if current in names:
            self.layer_combo.setCurrentText(current)
        self._suggest_paths()

    def _suggest_paths(self, *_: Any) -> None:
        """Fill the repository and agglomeration fields for the chosen layer's volume.

        A field the user typed into is kept; one this panel filled for another layer is replaced
        (a bodies.json of one volume must not group another volume's supervoxels).
        """
        layer = self._chosen_layer()
        if layer is None:
            return
        local = Path(str(layer.metadata[METADATA_KEY]["url"]).removeprefix("file://"))
        repo = str(local.parent / f"{local.name}.repo") if local.exists() else ""
        bodies = local.parent / "bodies.json"
        agglo = str(bodies) if local.exists() and bodies.is_file() else ""
        for edit, value in ((self.repo_edit, repo), (self.agglo_edit, agglo)):
            if edit.text() in ("", self._suggested.get(edit, "")):
                edit.setText(value)
            self._suggested[edit] = value

    def _chosen_layer(self) -> Any:
        name = self.layer_combo.currentText()
        return next((lay for lay in self.segmentation_layers() if lay.name == name), None)

    def create_repository(self, path: str | Path | None = None, layer: Any = None,
                          agglomeration: str | Path | None = None, *, name: str = "seg") -> Any:
        """Create a repository with a labelmap over ``layer``'s segmentation (in a worker).

        Indexing the base reads all of scale 0 once, so it runs off the GUI thread with napari's
        progress; returns the worker (tests wait on :attr:`busy`).
        """
        layer = layer if layer is not None else self._chosen_layer()
        if layer is None:
            raise ArgumentError("no segmentation layer: open a segmentation (File › Open, or shardscope open)")
        if path is None:
            raise ArgumentError("give the new repository's directory")
        agg = agglomeration if agglomeration is not None else (self.agglo_edit.text().strip() or None)
        url = str(layer.metadata[METADATA_KEY]["url"])
        self.repo_edit.setText(str(path))
        pbar = GuiProgress("indexing the base segmentation")

        def run() -> None:
            from napari_shardscope.core.labelmap import create_labelmap
            from napari_shardscope.core.versioned import create_repository

            # build here (off the GUI thread); attach the layers on the GUI thread afterwards
            repo = create_repository(path)
            try:
                create_labelmap(repo, name, url, agglomeration=agg, progress=pbar)
            finally:
                repo.close()

        def done(_: Any) -> None:
            pbar.close()
            self.session.connect(path, instance=name)
            self._ok(f"created {path} over {url}")

        self._status(f"creating {path}: indexing {layer.name} …")
        return self._start(run, done, finished=pbar.close)

    def open_repository(self, path: str | Path, instance: str | None = None) -> None:
        """Open an existing repository and check out its ``main`` branch."""
        self.repo_edit.setText(str(path))
        self.session.connect(path, instance=instance)
        self._ok(f"opened {path}")

    def _open_clicked(self) -> None:
        path = self.repo_edit.text().strip()
        if not path or not Path(path).exists():
            path = QFileDialog.getExistingDirectory(self, "Open a shardscope repository", path or str(Path.home()))
        if path:
            self._guard(lambda: self.open_repository(path))

    # -- selection --------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return str(self.mode_combo.currentText())

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ArgumentError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode_combo.setCurrentText(mode)

    def select(self, body: int, add: bool = False) -> list[int]:
        """Select ``body`` (``add``: keep the others, toggling ``body``); returns the selection."""
        if body == 0:
            if not add:
                self.clear_selection()
            return self.selected
        if add:
            if body in self.selected:
                self.selected.remove(body)
            else:
                self.selected.append(body)
        else:
            self.selected = [body]
            self.picked = []
        self._show_selection()
        return self.selected

    def clear_selection(self) -> None:
        self.selected, self.picked = [], []
        self._show_selection()

    def pick_supervoxel(self, sv: int) -> list[int]:
        """Toggle supervoxel ``sv`` (of the first selected body) in the cleave pick list."""
        v = self._version()
        if not self.selected:
            raise ArgumentError("select the body to cleave first, then pick its supervoxels")
        if v.body_of(sv) != self.selected[0]:
            raise ArgumentError(f"supervoxel {sv} is in body {v.body_of(sv)}, not in body {self.selected[0]}")
        if sv in self.picked:
            self.picked.remove(sv)
        else:
            self.picked.append(sv)
        self._show_selection()
        return self.picked

    def pick(self, world: Sequence[float], add: bool = False) -> int:
        """Act on a click at ``world`` (z, y, x): select the body there, or pick the supervoxel."""
        v = self._version()
        voxel = self.voxel_at(world)
        if voxel is None:
            return 0
        if self.mode == "supervoxels":
            sv = v.supervoxel_at(voxel)
            if sv:
                self.pick_supervoxel(sv)
            return sv
        body = v.body_at(voxel)
        self.select(body, add=add)
        return body

    def voxel_at(self, world: Sequence[float]) -> tuple[int, int, int] | None:
        """The scale-0 voxel (z, y, x) under a world position, or None outside the volume."""
        layer = self.session.body_layer
        v = self._version()
        if layer is None:
            return None
        data = np.asarray(layer.world_to_data(list(world)), dtype=float)[-3:]
        voxel = np.floor(data + 0.5).astype(int)
        shape = v.scales[0].shape
        if np.any(voxel < 0) or np.any(voxel >= np.asarray(shape)):
            return None
        return (int(voxel[0]), int(voxel[1]), int(voxel[2]))

    def _on_click(self, layer: Any, event: Any) -> Any:
        """Mouse callback on the body layer: a click selects; a drag (pan) does not."""
        if event.type != "mouse_press" or self.session.version is None:
            return
        if self.viewer.dims.ndisplay != 2:
            self._status("switch to 2D to pick bodies")
            return
        position, add = list(event.position), "Shift" in event.modifiers
        yield
        moved = False
        while event.type == "mouse_move":
            moved = True
            yield
        if not moved:
            self._guard(lambda: self.pick(position, add=add))

    def _hook_layer(self) -> None:
        layer = self.session.body_layer
        if layer is self._hooked:
            return
        if self._hooked is not None and self._on_click in self._hooked.mouse_drag_callbacks:
            self._hooked.mouse_drag_callbacks.remove(self._on_click)
        if layer is not None:
            layer.mouse_drag_callbacks.append(self._on_click)
        self._hooked = layer

    def _show_selection(self) -> None:
        self.selection_list.clear()
        self.selection_list.addItems([str(b) for b in self.selected])
        self.picked_label.setText("picked supervoxels: " + (", ".join(map(str, self.picked)) or "none"))
        layer = self.session.body_layer
        if layer is not None and layer in self.viewer.layers:
            if self.selected:
                layer.selected_label = self.selected[0]
            layer.show_selected_label = bool(self.isolate_check.isChecked() and self.selected)
        self._show_info()
        self._update_actions()

    # -- edits ------------------------------------------------------------------------------------------
    def merge_selected(self) -> Mutation:
        """Merge the other selected bodies into the first selected one."""
        v = self._editable()
        if len(self.selected) < 2:
            raise ArgumentError("select two or more bodies to merge (Shift-click adds one)")
        target, others = self.selected[0], self.selected[1:]
        m = v.merge(target, others)
        self.selected = [target]
        self._done(f"merged {', '.join(map(str, others))} into {target}")
        return m

    def cleave_selected(self, supervoxels: Sequence[int]) -> int:
        """Cleave ``supervoxels`` off the first selected body into a new body; returns its id."""
        v = self._editable()
        if not self.selected:
            raise ArgumentError("select the body to cleave")
        body = self.selected[0]
        new = v.cleave(body, list(supervoxels))
        self.picked = []
        self.selected = [body, new]
        self._done(f"cleaved {len(supervoxels)} supervoxel(s) of {body} into new body {new}")
        return new

    def cleave_picked(self) -> int:
        if not self.picked:
            raise ArgumentError("pick supervoxels first (mode: supervoxels, then click them)")
        return self.cleave_selected(list(self.picked))

    def start_split(self) -> Labels:
        """Add the seeds layer over the first selected body; paint labels 1, 2, … into it."""
        v = self._editable()
        if not self.selected:
            raise ArgumentError("select the body to split")
        if self.seeds_layer is not None and self.seeds_layer in self.viewer.layers:
            return self.seeds_layer
        body = self.selected[0]
        box = v.bbox(body, exact=False).intersect(_full_box(v))
        lo, hi = list(box.lo), list(box.hi)
        g = v.scales[0]
        if int(np.prod(np.subtract(hi, lo))) > MAX_SEED_VOXELS:  # only the shown z plane, in scale-0 voxels
            z = lo[0]
            if self.viewer.dims.ndim >= 3:
                world_z = float(self.viewer.dims.point[self.viewer.dims.ndim - 3])
                z = min(max(round((world_z - g.translate[0]) / g.voxel_size[0]), lo[0]), hi[0] - 1)
            lo[0], hi[0] = z, z + 1
        seeds = np.zeros(tuple(h - low for low, h in zip(lo, hi, strict=True)), dtype=np.uint8)
        translate = tuple(t + low * s for t, low, s in zip(g.translate, lo, g.voxel_size, strict=True))
        units = getattr(self.session.body_layer, "units", None)
        self.seeds_layer = self.viewer.add_labels(
            seeds, name=SEEDS_NAME, scale=g.voxel_size, translate=translate,
            metadata={"split_origin": tuple(lo), "split_body": body, "split_version": v.uuid},
            **({"units": tuple(units)} if units is not None else {}))
        self.seeds_layer.brush_size = 6
        self.seeds_layer.selected_label = 1
        self.seeds_layer.mode = "paint"
        self.viewer.layers.selection.active = self.seeds_layer
        self.split_button.setText("Split")
        self._status(f"paint seed 1 on one part of body {body} and 2 (3, …) on the others, then Split")
        return self.seeds_layer

    def seed_groups(self) -> dict[int, np.ndarray]:
        """The painted seeds inside the body being split: group label → scale-0 voxels (n, 3), z y x.

        A brush spills over the body's boundary; the voxels it painted on other bodies are not
        seeds of this split, so they are left out here rather than refused by the core.
        """
        layer = self.seeds_layer
        if layer is None:
            return {}
        from napari_shardscope.core.labelmap import Box

        data = np.asarray(layer.data)
        origin = np.asarray(layer.metadata["split_origin"])
        lo = tuple(int(c) for c in origin)
        box = Box(lo, tuple(c + n for c, n in zip(lo, data.shape, strict=True)))  # type: ignore[arg-type]
        inside = self._version().mask(int(layer.metadata["split_body"]), box)
        return {int(g): np.argwhere((data == g) & inside) + origin for g in np.unique(data[inside]) if g != 0}

    def finish_split(self) -> Any:
        """Split the body by the painted seeds (in a worker); returns the worker."""
        v = self._editable()
        layer = self.seeds_layer
        if layer is None:
            raise ArgumentError("start a split first")
        if layer.metadata.get("split_version") != v.uuid:
            raise ArgumentError("these seeds were painted on another version: start the split again")
        body = int(layer.metadata["split_body"])
        groups = self.seed_groups()
        if len(groups) < 2:
            raise ArgumentError("paint at least two seed labels (1 and 2) before splitting")
        self._status(f"splitting body {body} …")
        pbar = GuiProgress(f"split body {body}")

        def done(out: BodySplit) -> None:
            pbar.close()
            self._remove_seeds()
            parts = sorted(set(out.bodies.values()))
            self.selected = parts
            self._done(f"split body {body} into {', '.join(map(str, parts))}")

        return self._start(lambda: v.split_body(body, groups), done, finished=pbar.close)

    def toggle_split(self) -> Any:
        return self.start_split() if self.seeds_layer is None else self.finish_split()

    def cancel_split(self) -> None:
        self._remove_seeds()
        self._status("split cancelled")

    def _remove_seeds(self) -> None:
        if self.seeds_layer is not None and self.seeds_layer in self.viewer.layers:
            self.viewer.layers.remove(self.seeds_layer)
        self.seeds_layer = None
        self.split_button.setText("Start split")
        if self.session.body_layer is not None and self.session.body_layer in self.viewer.layers:
            self.viewer.layers.selection.active = self.session.body_layer

    def undo(self) -> Mutation:
        m = self._editable().undo()
        self._done(f"undid mutation {m.target}")
        return m

    def redo(self) -> Mutation:
        m = self._editable().redo()
        self._done(f"redid mutation {m.target}")
        return m

    # -- body info --------------------------------------------------------------------------------------
    def body_info(self, body: int) -> dict[str, Any]:
        """Id, size (voxels), supervoxel count, block bounds (scale 0, z y x) and recent history."""
        v = self._version()
        box = v.bbox(body, exact=False)
        history = v.history(body)[-HISTORY_SHOWN:]
        return {
            "id": body,
            "size": v.size(body),
            "supervoxels": len(v.supervoxels(body)),
            "bounds": (box.lo, box.hi),
            "history": [(h.mutation.operation, h.mutation.user, h.mutation.time, h.version) for h in history],
        }

    def _show_info(self) -> None:
        labels = self.info_labels
        for lab in labels.values():
            lab.setText("")
        if not self.selected or self.session.version is None:
            return
        try:
            info = self.body_info(self.selected[0])
        except ShardscopeError as exc:
            labels["id"].setText(f"{self.selected[0]} ({exc})")
            return
        labels["id"].setText(str(info["id"]))
        labels["size"].setText(f"{info['size']:,} voxels")
        labels["supervoxels"].setText(str(info["supervoxels"]))
        lo, hi = info["bounds"]
        labels["bounds"].setText(f"z {lo[0]}–{hi[0]}, y {lo[1]}–{hi[1]}, x {lo[2]}–{hi[2]} (blocks)")
        labels["history"].setText("<br>".join(
            f"{op} by {user}, {datetime.fromtimestamp(t).strftime('%H:%M:%S')}" for op, user, t, _ in info["history"])
            or "no edits")

    # -- state --------------------------------------------------------------------------------------------
    def _version(self) -> Any:
        if self.session.version is None:
            raise ArgumentError("connect to a repository first (Create for layer, or Open…)")
        return self.session.version

    def _editable(self) -> Any:
        v = self._version()
        why = self.session.why_not_editable()
        if why:
            raise ArgumentError(why)
        return v

    def _on_version(self, *_: Any) -> None:
        v = self.session.version
        if v is None:
            self.version_label.setText("not connected")
        else:
            ver = v.version
            state = "committed (read-only)" if ver.locked else "open"
            self.version_label.setText(f"{ver.short} on branch {ver.branch!r}, {state}")
        seeds = self.seeds_layer
        if seeds is not None and (v is None or seeds.metadata.get("split_version") != v.uuid):
            self._remove_seeds()  # seeds belong to the version they were painted on
            self._status("split cancelled: another version is checked out")
        self._hook_layer()
        if v is not None:
            self.selected = [b for b in self.selected if v.exists(b)]
            self.picked = [s for s in self.picked if self.selected and v.body_of(s) == self.selected[0]]
        self._show_selection()

    def _on_edited(self, _event: Any) -> None:
        self._hook_layer()
        v = self.session.version
        if v is not None:
            self.selected = [b for b in self.selected if v.exists(b)]
        self._show_selection()

    def _update_actions(self) -> None:
        why = self.session.why_not_editable()
        busy = self.busy
        v = self.session.version
        enabled = {
            self.merge_button: len(self.selected) >= 2,
            self.cleave_button: bool(self.picked),
            self.split_button: bool(self.selected) or self.seeds_layer is not None,
            self.undo_button: v is not None and not why and v.can_undo,
            self.redo_button: v is not None and not why and v.can_redo,
        }
        for button, ok in enabled.items():
            button.setEnabled(bool(ok) and not why and not busy)
            button.setToolTip(why or _ACTION_TIPS.get(button.text(), ""))
        self.cancel_split_button.setEnabled(self.seeds_layer is not None and not busy)
        if why and v is not None:
            self.status_label.setStyleSheet("color: #d19a66")
            self.status_label.setText(why)

    def _done(self, message: str) -> None:
        self._ok(message)
        self._show_selection()

    # -- workers and messages ---------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return bool(self._workers)

    def _start(self, func: Callable[[], Any], on_done: Callable[[Any], None], *,
               finished: Callable[[], None] | None = None) -> Any:
        def end() -> None:
            if finished is not None:
                finished()
            self._update_actions()

        worker = start_worker(func, on_done, self._on_worker_error, running=self._workers, finished=end)
        self._update_actions()
        return worker

    def _on_worker_error(self, exc: BaseException) -> None:
        self._error(str(exc))
        if not isinstance(exc, ShardscopeError):
            raise exc

    def _guard(self, action: Callable[[], Any]) -> Any:
        """Run a user action; typed errors become the status line, not a traceback."""
        try:
            return action()
        except ShardscopeError as exc:
            self._error(str(exc))
            return None

    def _status(self, message: str) -> None:
        self.status_label.setStyleSheet("")
        self.status_label.setText(message)

    def _ok(self, message: str) -> None:
        self.last_error = ""
        self._status(f"{message} ({time.strftime('%H:%M:%S')})")

    def _error(self, message: str) -> None:
        self.last_error = message
        self.status_label.setStyleSheet("color: #e06c75")
        self.status_label.setText(message)

    def _teardown(self) -> None:
        """The panel left the viewer: unbind its keys, its click hook and its signals."""
        self._unbind_keys()
        if self._hooked is not None and self._on_click in self._hooked.mouse_drag_callbacks:
            self._hooked.mouse_drag_callbacks.remove(self._on_click)
        self._hooked = None
        self.session.connected.disconnect(self._on_version)
        self.session.version_changed.disconnect(self._on_version)
        self.session.edited.disconnect(self._on_edited)
        self.viewer.layers.events.inserted.disconnect(self._fill_layers)
        self.viewer.layers.events.removed.disconnect(self._fill_layers)


_ACTION_TIPS = {
    "Merge": "merge the selected bodies into the first (Shift-M)",
    "Cleave": "move the picked supervoxels to a new body (Shift-C)",
    "Start split": "paint seeds to split the selected body (Shift-S)",
    "Split": "split the body by the painted seeds (Shift-S)",
    "Undo": "undo the last edit of this version (Shift-U)",
    "Redo": "redo the last undone edit (Shift-R)",
}


def _full_box(v: Any) -> Any:
    from napari_shardscope.core.labelmap import Box

    return Box.of_shape(v.scales[0].shape)
