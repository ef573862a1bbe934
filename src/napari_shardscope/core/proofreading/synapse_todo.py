"""Synapse to-do lists: orphan synapses and weak partners as a to-do list the Navigate panel walks.

The findings of :mod:`napari_shardscope.core.annotation.synapse_checks` become to-do items — one
point (the site) with a note saying why ("post site 123 on background", "body 10: weak partner 77
(1 synapse to it, fewer than 3); pre site 5") — stored as a named list at the checked-out version
through the one to-do mechanism (:mod:`.todo`): Next/Previous walk them, Done/Skip save statuses
in the repository. No second list format, no side file.

    items = ss.synapse_todo(syn.at("main"), "orphans", body=12)       # the items, not stored
    c.todo.load_items(items, "orphan-synapses-12")                    # stored at the version, opened
    make_synapse_todo(c.todo, syn.at(v), "weak", body=12)             # both, with the usual name
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from napari_shardscope.core.annotation.synapse_checks import (
    CHECKS,
    MIN_BODY_SYNAPSES,
    MIN_SYNAPSES,
    SynapseFinding,
    find_synapse_issues,
)
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.proofreading.todo import TodoItem, Worklist

if TYPE_CHECKING:
    from napari_shardscope.core.annotation import AnnotationVersion

#: What each check is called in list names and menus.
LIST_STEMS = {"orphans": "orphan-synapses", "weak": "weak-partners"}


def todo_items(findings: Sequence[SynapseFinding]) -> list[TodoItem]:
    """One point item per finding: the site's z, y, x and the finding's note."""
    return [TodoItem("point", f.point, f.note) for f in findings]


def synapse_todo(v: AnnotationVersion, kind: str = "orphans", *, body: int | None = None,
                 min_synapses: int = MIN_SYNAPSES, min_body_synapses: int = MIN_BODY_SYNAPSES) -> list[TodoItem]:
    """The to-do items of synapse check ``kind`` (``"orphans"`` or ``"weak"``) at annotation version ``v``.

    ``body`` None: the whole version (orphans: every site; weak: every body with at least
    ``min_body_synapses`` synapses). See :mod:`~napari_shardscope.core.annotation.synapse_checks`.
    """
    return todo_items(find_synapse_issues(v, kind, body, min_synapses=min_synapses,
                                          min_body_synapses=min_body_synapses))


def list_name(kind: str, body: int | None = None, min_synapses: int = MIN_SYNAPSES) -> str:
    """The usual name of a synapse to-do list: ``orphan-synapses-12``, ``weak-partners-12``, ``…-all``."""
    if kind not in LIST_STEMS:
        raise ArgumentError(f"a synapse to-do list is one of {', '.join(CHECKS)}, got {kind!r}")
    where = "all" if body is None else str(int(body))
    threshold = f"-under{min_synapses}" if kind == "weak" and min_synapses != MIN_SYNAPSES else ""
    return f"{LIST_STEMS[kind]}-{where}{threshold}"


def make_synapse_todo(worklist: Worklist, v: AnnotationVersion, kind: str, *, body: int | None = None,
                      min_synapses: int = MIN_SYNAPSES, name: str | None = None,
                      replace_list: bool = False) -> tuple[str, int]:
    """Compute synapse check ``kind`` at ``v``, store it as to-do list ``name`` in ``worklist``'s repository
    (at its checked-out version) and open it: returns the name and the number of items.

    A list of that name kept at this version is opened as it is (its statuses are the proofreader's
    work) unless ``replace_list``; an empty finding stores no list and raises :class:`ArgumentError`
    saying there is nothing to check.
    """
    name = name or list_name(kind, body, min_synapses)
    if name in worklist.lists() and not replace_list:
        worklist.open(name)
        return name, len(worklist.entries)
    items = synapse_todo(v, kind, body=body, min_synapses=min_synapses)
    if not items:
        what = "orphan synapses" if kind == "orphans" else f"partners with fewer than {min_synapses} synapses"
        scope = f"body {body}" if body is not None else "this version"
        raise ArgumentError(f"no {what} in {scope}: nothing to put on a to-do list")
    worklist.load_items(items, name, replace_list=replace_list)
    return name, len(items)
