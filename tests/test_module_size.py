"""No module under ``src/`` holds more than :data:`MAX_LINES` lines (issue 30: one room per module).

A module past a few hundred lines has, in this codebase, always held two or three concepts at once
(a reader and its transaction, a plan and its write, a panel and its tree widget); the split puts each
in a small module named for what it implements. This test keeps it so: a module that grows past the
limit fails here, naming itself and its size, and is split as its contents ask.
"""

from __future__ import annotations

from pathlib import Path

import napari_shardscope

MAX_LINES = 600
SRC = Path(napari_shardscope.__file__).resolve().parent

#: Modules allowed past the limit for now, with their size when listed. Each is waiting for its split;
#: remove its entry in the commit that splits it (an entry for a module now within the limit fails).
ALLOWED: dict[str, str] = {
}


def _line_counts() -> dict[str, int]:
    return {path.relative_to(SRC).as_posix(): len(path.read_bytes().splitlines())
            for path in sorted(SRC.rglob("*.py"))}


def test_no_module_exceeds_the_limit() -> None:
    too_long = {name: n for name, n in _line_counts().items() if n > MAX_LINES and name not in ALLOWED}
    assert not too_long, (
        f"modules over {MAX_LINES} lines (split them by concept, into modules named for what they implement): "
        + ", ".join(f"{name} ({n})" for name, n in sorted(too_long.items(), key=lambda kv: -kv[1])))


def test_the_allow_list_names_only_modules_still_too_long() -> None:
    counts = _line_counts()
    missing = sorted(name for name in ALLOWED if name not in counts)
    assert not missing, f"allow-listed modules that do not exist (moved or removed: drop the entry): {missing}"
    split = sorted(name for name in ALLOWED if counts[name] <= MAX_LINES)
    assert not split, f"allow-listed modules now within {MAX_LINES} lines: remove them from ALLOWED: {split}"
