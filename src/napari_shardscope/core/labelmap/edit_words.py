"""Edits in a proofreader's words: the phrases for one mutation, shared by every layer that shows edits.

They live with the labelmap (not in ``proofreading.wording``, which re-exports them) because the
labelmap's own reports — the branch review's edit histories — need them too and may not import the
proofreading layer. The rules are :mod:`napari_shardscope.core.proofreading.wording`'s: name the
bodies, never a mutation number; counts agree with their noun. A mutation's arguments may come from
a remote's log, so anything that is not an integer is left out of the words rather than raising.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

from napari_shardscope.core.labelmap.mutations import Mutation

#: How many ids a message lists before it says "and N more".
SHOWN_IDS = 6


def plural(n: int, word: str, words: str | None = None) -> str:
    """``"1 body"``, ``"3 bodies"``: a count with its noun in the right number."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def id_list(ids: Iterable[int], limit: int = SHOWN_IDS) -> str:
    """``"12, 34 and 56"``; long lists end ``"… and 9 more"``."""
    items = [str(int(i)) for i in ids]
    if not items:
        return "none"
    if len(items) > limit:
        return f"{', '.join(items[:limit])} and {len(items) - limit} more"
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _bodies(ids: Sequence[int]) -> str:
    """``"body 12"`` or ``"3 bodies (12, 34 and 56)"``."""
    return f"body {int(ids[0])}" if len(ids) == 1 else f"{plural(len(ids), 'body', 'bodies')} ({id_list(ids)})"


def _ints(value: object) -> list[int]:
    """The integers of a list in a mutation's arguments (those arguments may come from a remote's log:
    anything that is not an integer is left out of the words rather than crashing the panel)."""
    if not isinstance(value, (list, tuple)):
        return []
    return [int(v) for v in value if not isinstance(v, bool) and isinstance(v, numbers.Integral)]


def _int(value: object) -> int:
    """An integer argument of a mutation, 0 when the record holds something else (see :func:`_ints`)."""
    return int(value) if not isinstance(value, bool) and isinstance(value, numbers.Integral) else 0


def _group_bodies(value: object) -> list[int]:
    """The bodies a split's seed groups became (``{"1": 12, "2": 34}``), sorted."""
    return sorted(set(_ints(list(value.values())))) if isinstance(value, dict) else []


def edit_phrase(m: Mutation) -> str:
    """What an edit was, as a noun phrase: ``"merge of 12 into 1042"``, ``"split of 977"``.

    Used after "undid:", in histories, and for the two sides of a branch-merge conflict.
    """
    a = m.args
    if m.operation == "merge":
        others = _ints(a.get("others"))
        return f"merge of {id_list(others)} into {a.get('target')}"
    if m.operation == "cleave":
        svs = _ints(a.get("supervoxels"))
        return f"cleave of {plural(len(svs), 'supervoxel')} off {a.get('body')} into {a.get('new_body')}"
    if m.operation == "split-body":
        parts = _group_bodies(a.get("groups"))
        return f"split of {a.get('body')}" + (f" into {id_list(parts)}" if parts else "")
    if m.operation == "split-supervoxel":
        return f"split of supervoxel {a.get('supervoxel')} into {a.get('split')} and {a.get('remainder')}"
    if m.operation == "merge-branches":
        applied = len(_ints(a.get("applied")))
        return f"branch merge ({plural(applied, 'edit')} of the other branch" + (
            f", bodies {id_list(m.bodies)})" if m.bodies else ")")
    what = "undo" if m.operation == "undo" else "redo"
    return f"{what} of an edit of bodies {id_list(m.bodies)}"


def describe_edit(m: Mutation) -> str:
    """The sentence after an edit: ``"merged 3 bodies (12, 34 and 56) into 1042"``."""
    a = m.args
    if m.operation == "merge":
        return f"merged {_bodies(_ints(a.get('others')))} into {a.get('target')}"
    if m.operation == "cleave":
        svs = _ints(a.get("supervoxels"))
        return f"cleaved {plural(len(svs), 'supervoxel')} off {a.get('body')} into new body {a.get('new_body')}"
    if m.operation == "split-body":
        parts = _group_bodies(a.get("groups"))
        return f"split body {a.get('body')} into {id_list(parts)}"
    if m.operation == "split-supervoxel":
        voxels = _int(a.get("voxels"))
        return (f"split supervoxel {a.get('supervoxel')} of body {id_list(m.bodies)}: "
                f"{plural(voxels, 'voxel')} became {a.get('split')}, the rest {a.get('remainder')}")
    return f"{m.operation.replace('-', ' ')}: bodies {id_list(m.bodies)}"
