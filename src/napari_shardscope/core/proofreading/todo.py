"""To-do lists: the bodies, supervoxels or points a proofreader was assigned, with a status per item.

Focused proofreading hands out work as a file — a column of body ids, a table of points, a Neu3
task list — and the proofreader walks it: go to the next item, fix it (or skip it), write a note.
Here a list is read with :func:`read_todo` and kept **in the repository**, in a ``keyvalue``
instance named :data:`INSTANCE` (one key per item, ``<list>/<index>``), at the checked-out
version like every other edit: the statuses survive a restart, travel with the version they were
made at, and are read back as they were at any version. No side file.

:class:`Worklist` is the Qt-free walk through one list (the cursor, next/previous, done/skip/note)
that the napari panel and a notebook drive alike.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from napari_shardscope.core.errors import ArgumentError, FormatError
from napari_shardscope.core.labelmap.labelmap import default_user
from napari_shardscope.core.proofreading.navigation import Coord3, TargetKind
from napari_shardscope.core.versioned import Repository
from napari_shardscope.core.versioned.errors import UnknownInstanceError
from napari_shardscope.core.versioned.keyvalue import KeyValue, open_keyvalue

#: The ``keyvalue`` instance holding every to-do list of a repository.
INSTANCE = "todo"
ItemStatus = Literal["open", "done", "skipped"]
STATUSES: tuple[ItemStatus, ...] = ("open", "done", "skipped")

_BODY_KEYS = ("body", "body id", "body_id", "bodyid", "body ids", "id", "body id a", "segment", "segment id")
_SV_KEYS = ("supervoxel", "sv", "supervoxel id", "supervoxel_id", "sv id", "sv_id", "supervoxel id 1")
_ZYX_KEYS = ("point", "zyx", "voxel", "position")
_XYZ_KEYS = ("xyz", "body point", "body point 1", "supervoxel point 1", "point xyz")
_NOTE_KEYS = ("note", "comment", "description", "task type", "text")


@dataclass(frozen=True)
class TodoItem:
    """One assignment: a body, a supervoxel, or a scale-0 voxel (z, y, x); ``text`` from the file."""

    kind: TargetKind
    value: int | Coord3
    text: str = ""

    def describe(self) -> str:
        if self.kind == "point":
            assert isinstance(self.value, tuple)
            z, y, x = self.value
            what = f"point z {z}, y {y}, x {x}"
        else:
            what = f"{self.kind} {self.value}"
        return f"{what} — {self.text}" if self.text else what

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": list(self.value) if isinstance(self.value, tuple) else self.value,
                "text": self.text}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TodoItem:
        kind = str(d["kind"])
        if kind not in ("body", "supervoxel", "point"):
            raise ArgumentError(f"unknown to-do item kind {kind!r}")
        raw = d["value"]
        value: int | Coord3 = (int(raw[0]), int(raw[1]), int(raw[2])) if kind == "point" else int(raw)
        return cls(kind, value, str(d.get("text", "")))  # type: ignore[arg-type]


@dataclass(frozen=True)
class TodoEntry:
    """An item of a stored list with its status, the proofreader's note, who set it and when."""

    index: int
    item: TodoItem
    status: ItemStatus = "open"
    note: str = ""
    user: str = ""
    time: float = 0.0

    def to_bytes(self) -> bytes:
        return json.dumps({**self.item.to_json(), "status": self.status, "note": self.note, "user": self.user,
                           "time": self.time}).encode()

    @classmethod
    def from_bytes(cls, index: int, raw: bytes, key: str) -> TodoEntry:
        try:
            d = json.loads(raw)
            status = str(d.get("status", "open"))
            if status not in STATUSES:
                raise ValueError(f"status {status!r}")
            return cls(index, TodoItem.from_json(d), status, str(d.get("note", "")),
                       str(d.get("user", "")), float(d.get("time", 0.0)))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise FormatError(f"to-do entry {key!r} in the repository cannot be read: {exc}") from exc


# -- reading assignment files ---------------------------------------------------------------------------------


def read_todo(source: str | os.PathLike[str]) -> list[TodoItem]:
    """The items of a to-do file: CSV (a column of ids, or named columns) or JSON (a list, or a Neu3 task list).

    CSV: a header naming ``body`` (or ``id``), ``supervoxel`` (``sv``), ``z``/``y``/``x`` and
    optionally ``note``; without a header one column is body ids and three are z, y, x.
    JSON: a list of ids, or of objects with ``body`` / ``supervoxel`` / ``point`` (z, y, x) /
    ``xyz``; or ``{"task list": [...]}`` as Neu3 writes it (``body ID``, points in x, y, z).
    """
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ArgumentError(f"cannot read the to-do file {path}: {exc.strerror or exc}") from exc
    items = parse_todo(text, name=str(path))
    if not items:
        raise FormatError(f"{path}: no bodies, supervoxels or points in it")
    return items


def parse_todo(text: str, *, name: str = "to-do list") -> list[TodoItem]:
    """:func:`read_todo` of a file's text (JSON when it starts with ``[`` or ``{``, else CSV)."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{name}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
        return _from_json(doc, name)
    return _from_csv(text, name)


def _from_json(doc: Any, name: str) -> list[TodoItem]:
    if isinstance(doc, Mapping):
        for key in ("task list", "tasks", "items", "todo", "bodies"):
            if key in doc:
                doc = doc[key]
                break
        else:
            raise FormatError(f"{name}: a JSON object needs a 'task list' (or 'items') array")
    if not isinstance(doc, list):
        raise FormatError(f"{name}: expected a JSON array of ids or objects")
    return [_json_item(entry, f"{name} item {i}") for i, entry in enumerate(doc)]


def _json_item(entry: Any, where: str) -> TodoItem:
    if isinstance(entry, bool):
        raise FormatError(f"{where}: {entry!r} is not an id")
    if isinstance(entry, int):
        return _label("body", entry, "", where)
    if isinstance(entry, str) and entry.strip().isdigit():
        return _label("body", int(entry), "", where)
    if not isinstance(entry, Mapping):
        raise FormatError(f"{where}: expected an id or an object, got {entry!r}")
    low = {str(k).strip().lower(): v for k, v in entry.items()}
    note = next((str(low[k]) for k in _NOTE_KEYS if k in low and low[k] not in (None, "")), "")
    for key in _ZYX_KEYS:
        if key in low:
            return TodoItem("point", _point(low[key], where), note)
    for key in _XYZ_KEYS:
        if key in low:
            x, y, z = _point(low[key], where)
            return TodoItem("point", (z, y, x), note)
    if all(k in low for k in ("z", "y", "x")):
        return TodoItem("point", _point([low["z"], low["y"], low["x"]], where), note)
    for kind, keys in (("body", _BODY_KEYS), ("supervoxel", _SV_KEYS)):
        for key in keys:
            if key in low:
                value = low[key][0] if isinstance(low[key], list) and low[key] else low[key]
                return _label(kind, value, note, where)  # type: ignore[arg-type]
    raise FormatError(f"{where}: no body, supervoxel or point in {sorted(low)}")


def _label(kind: TargetKind, value: Any, note: str, where: str) -> TodoItem:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise FormatError(f"{where}: {kind} id {value!r} is not a whole number") from None
    if n <= 0:
        raise FormatError(f"{where}: {kind} id {n} is not positive (0 is background)")
    return TodoItem(kind, n, note)


def _point(value: Any, where: str) -> Coord3:
    try:
        z, y, x = (round(float(v)) for v in value)
    except (TypeError, ValueError):
        raise FormatError(f"{where}: a point needs three numbers, got {value!r}") from None
    return (z, y, x)


def _from_csv(text: str, name: str) -> list[TodoItem]:
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r) and not r[0].startswith("#")]
    if not rows:
        return []
    header = [c.strip().lower() for c in rows[0]]
    if all(_is_number(c) for c in header if c):
        width = len([c for c in header if c])
        if width == 1:
            return [_label("body", r[0].strip(), "", f"{name} line {i + 1}") for i, r in enumerate(rows)]
        if width in (3, 4):
            return [TodoItem("point", _point([c for c in r[:3]], f"{name} line {i + 1}"),
                             r[3].strip() if len(r) > 3 else "") for i, r in enumerate(rows)]
        raise FormatError(f"{name}: without a header, a CSV holds one column (body ids) or three (z, y, x); "
                          f"this one has {width}")
    out = []
    for i, row in enumerate(rows[1:], start=2):
        record = {h: c.strip() for h, c in zip(header, row, strict=False) if c.strip()}
        out.append(_json_item(record, f"{name} line {i}"))
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- storing lists in the repository --------------------------------------------------------------------------


def _key(name: str, index: int) -> str:
    return f"{name}/{index:06d}"


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or "/" in name:
        raise ArgumentError(f"a to-do list name is a non-empty name without '/', got {name!r}")
    return name


class TodoStore:
    """The to-do lists of a repository (its ``keyvalue`` instance :data:`INSTANCE`), at any version."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    def _kv(self, write_at: str | None = None) -> KeyValue | None:
        try:
            return open_keyvalue(self.repo, INSTANCE, create=write_at is not None, write_at=write_at)
        except UnknownInstanceError:
            return None

    def _writable(self, version: str) -> KeyValue:
        v = self.repo.version(version)
        if v.locked:
            raise ArgumentError(f"version {v.short} is committed: to-do statuses are saved in an open version — "
                                "make a new version (Versions › Branch) and go on there")
        kv = self._kv(write_at=version)
        assert kv is not None
        return kv

    def lists(self, version: str) -> list[str]:
        """Names of the lists stored at ``version``."""
        kv = self._kv()
        if kv is None:
            return []
        return sorted({k.split("/", 1)[0] for k in kv.keys(version)})

    def save(self, version: str, name: str, items: Sequence[TodoItem], *, replace_list: bool = False) -> int:
        """Store ``items`` as list ``name`` at open ``version``, all open (a name in use: refused unless replaced)."""
        name = _check_name(name)
        kv = self._writable(version)
        if name in self.lists(version):
            if not replace_list:
                raise ArgumentError(f"a to-do list named {name!r} exists already: choose another name")
            for key in kv.keys(version, prefix=f"{name}/"):
                kv.delete(version, key)
        return kv.put_many(version, {_key(name, i): TodoEntry(i, item).to_bytes() for i, item in enumerate(items)})

    def entries(self, version: str, name: str) -> list[TodoEntry]:
        """The items of list ``name`` at ``version`` with their statuses, in file order."""
        kv = self._kv()
        if kv is None:
            return []
        out = []
        for key, raw in kv.items(version, prefix=f"{name}/"):
            out.append(TodoEntry.from_bytes(int(key.rsplit("/", 1)[1]), raw, key))
        return out

    def set_status(self, version: str, name: str, entry: TodoEntry, status: ItemStatus, note: str | None = None,
                   user: str = "") -> TodoEntry:
        """Record ``status`` (and ``note``; ``None`` keeps it) of one item at open ``version``."""
        if status not in STATUSES:
            raise ArgumentError(f"a to-do status is one of {STATUSES}, got {status!r}")
        kv = self._writable(version)
        new = replace(entry, status=status, note=entry.note if note is None else note, user=user, time=time.time())
        kv.put(version, _key(name, entry.index), new.to_bytes())
        return new


# -- walking a list -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorklistState:
    """What a to-do view draws: the list, its entries, the current item (``-1``: none)."""

    name: str | None
    lists: tuple[str, ...]
    entries: tuple[TodoEntry, ...]
    current: int

    @property
    def done(self) -> int:
        return sum(1 for e in self.entries if e.status != "open")

    @property
    def entry(self) -> TodoEntry | None:
        return self.entries[self.current] if 0 <= self.current < len(self.entries) else None


class Worklist:
    """One to-do list walked item by item; statuses written to the repository at the checked-out version.

    ``repo`` and ``version`` are callables (the session's current ones): the list follows checkouts
    and reconnects. ``go`` is called with each item moved to (a controller's ``go_to_item``).
    """

    def __init__(self, repo: Callable[[], Repository | None], version: Callable[[], str | None],
                 go: Callable[[TodoItem], Any] | None = None) -> None:
        self._repo, self._version, self._go = repo, version, go
        self._name: str | None = None
        self._entries: list[TodoEntry] = []
        self._current = -1
        self._listeners: list[Callable[[WorklistState], None]] = []

    # -- listeners -------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[WorklistState], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _emit(self) -> None:
        state = self.state
        for listener in list(self._listeners):
            listener(state)

    @property
    def state(self) -> WorklistState:
        return WorklistState(self._name, tuple(self.lists()), tuple(self._entries), self._current)

    # -- where ---------------------------------------------------------------------------------------
    def _where(self) -> tuple[TodoStore, str]:
        repo, version = self._repo(), self._version()
        if repo is None or version is None:
            raise ArgumentError("open a repository first: to-do lists are kept in it")
        return TodoStore(repo), version

    def lists(self) -> list[str]:
        repo, version = self._repo(), self._version()
        if repo is None or version is None:
            return []
        return TodoStore(repo).lists(version)

    @property
    def name(self) -> str | None:
        return self._name

    @property
    def entries(self) -> tuple[TodoEntry, ...]:
        return tuple(self._entries)

    @property
    def current(self) -> TodoEntry | None:
        return self._entries[self._current] if 0 <= self._current < len(self._entries) else None

    # -- loading -------------------------------------------------------------------------------------
    def load(self, source: str | os.PathLike[str], name: str | None = None, *, replace_list: bool = False) -> str:
        """Read a to-do file into the repository as list ``name`` (default: the file's stem) and open it."""
        store, version = self._where()
        items = read_todo(source)
        name = _check_name(name or Path(source).stem)
        store.save(version, name, items, replace_list=replace_list)
        return self.open(name)

    def load_items(self, items: Iterable[TodoItem], name: str, *, replace_list: bool = False) -> str:
        """Store items made in code (a notebook) as list ``name`` and open it."""
        store, version = self._where()
        store.save(version, name, list(items), replace_list=replace_list)
        return self.open(name)

    def open(self, name: str) -> str:
        """Show list ``name`` as stored at the checked-out version; :meth:`next` then goes to its first open item."""
        store, version = self._where()
        if name not in store.lists(version):
            raise ArgumentError(f"no to-do list named {name!r} at this version (lists: "
                                f"{', '.join(store.lists(version)) or 'none'})")
        self._name = name
        self._entries = store.entries(version, name)
        self._current = -1
        self._emit()
        return name

    def reload(self) -> None:
        """Re-read the open list (after a connect or a checkout: statuses are those of the version shown).

        With no list open (a repository just opened: a restart) or the open one absent at this version,
        the list last worked on at this version is opened (see :meth:`_last_worked`): a view showing
        this version's lists then shows one with its items, never a name with nothing under it.
        """
        repo, version = self._repo(), self._version()
        if repo is None or version is None:
            if repo is None:
                self._name, self._entries, self._current = None, [], -1
            self._emit()
            return
        store = TodoStore(repo)
        lists = store.lists(version)
        if self._name is not None and self._name in lists:
            self._entries = store.entries(version, self._name)
            self._current = min(self._current, len(self._entries) - 1)
        else:
            self._name, self._entries, self._current = None, [], -1
            if lists:
                self._name, self._entries = self._last_worked(store, version, lists)
        self._emit()

    @staticmethod
    def _last_worked(store: TodoStore, version: str, lists: Sequence[str]) -> tuple[str, list[TodoEntry]]:
        """The list whose item was marked last (ties, or none marked yet: the first list), with its entries."""
        best: tuple[str, list[TodoEntry]] | None = None
        latest = -1.0
        for name in lists:
            entries = store.entries(version, name)
            marked = max((e.time for e in entries), default=0.0)
            if best is None or marked > latest:
                best, latest = (name, entries), marked
        assert best is not None
        return best

    # -- moving -------------------------------------------------------------------------------------
    def _require(self) -> list[TodoEntry]:
        if self._name is None or not self._entries:
            raise ArgumentError("load a to-do list first (a CSV or JSON of body ids or points)")
        return self._entries

    def go(self, index: int) -> TodoEntry:
        """Make item ``index`` current and go there."""
        entries = self._require()
        if not 0 <= index < len(entries):
            raise ArgumentError(f"the list has items 1 to {len(entries)}, not {index + 1}")
        self._current = index
        entry = entries[index]
        self._emit()
        if self._go is not None:
            self._go(entry.item)
        return entry

    def next(self, *, only_open: bool = True) -> TodoEntry:
        """The next item after the current one (still open ones only, by default) — and go there."""
        entries = self._require()
        start = self._current + 1
        for i in range(start, len(entries)):
            if not only_open or entries[i].status == "open":
                return self.go(i)
        left = sum(1 for e in entries if e.status == "open")
        raise ArgumentError(f"no open item after this one ({left} of {len(entries)} still open)" if left
                            else f"all {len(entries)} items of {self._name!r} are done or skipped")

    def previous(self) -> TodoEntry:
        """The item before the current one (any status) — and go there."""
        self._require()
        if self._current <= 0:
            raise ArgumentError("this is the first item")
        return self.go(self._current - 1)

    # -- marking ------------------------------------------------------------------------------------
    def mark(self, status: ItemStatus, note: str | None = None, index: int | None = None) -> TodoEntry:
        """Set the status (and note) of the current item (or item ``index``), saved in the repository."""
        entries = self._require()
        i = self._current if index is None else index
        if not 0 <= i < len(entries):
            raise ArgumentError("no current item: go to one first (Next)")
        store, version = self._where()
        assert self._name is not None
        entries[i] = store.set_status(version, self._name, entries[i], status, note, default_user())
        self._emit()
        return entries[i]

    def set_note(self, note: str, index: int | None = None) -> TodoEntry:
        """Keep the status, replace the note."""
        entries = self._require()
        i = self._current if index is None else index
        if not 0 <= i < len(entries):
            raise ArgumentError("no current item: go to one first (Next)")
        return self.mark(entries[i].status, note, i)
