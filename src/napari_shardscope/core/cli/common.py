"""What the verb modules share: JSON output, argument types, the options several verbs take, progress.

Kept in one module so a verb module never borrows from another: each imports this and
:mod:`.parser`, and the core library. Imported to build the parser (the options several verbs take
and the argument types are here), so it imports the standard library only, and numpy inside the
functions that need it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_shardscope.core.cli.parser import arg
from napari_shardscope.core.errors import ArgumentError

if TYPE_CHECKING:  # for annotations only: this module is imported to build the parser (see .verbs)
    from napari_shardscope.core.labelmap.branch_merge import Resolution
    from napari_shardscope.core.progress import Progress


# -- output ---------------------------------------------------------------------------------------------
def emit(text: str) -> None:
    """Write one record (a line, or a JSON document) and a newline on stdout, and flush it.

    Every record a verb prints goes through here, so a script reading the output through a pipe gets
    each one as it is made: Python buffers a piped stdout in 8 KiB blocks, and without the flush
    ``serve --json``'s link or ``ls --json``'s first records reach the pipe only when the verb ends.
    """
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (``| head``): the verb stops (main returns 0), quietly
        _discard_stdout()
        raise


def _discard_stdout() -> None:
    """Point stdout's descriptor at ``/dev/null``, so the flush at interpreter exit does not print
    "Exception ignored … BrokenPipeError" for the bytes still buffered (Python's documented remedy)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's StringIO)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (one document, sorted keys for stable diffs), flushed."""
    emit(json.dumps(obj, indent=2, sort_keys=True, default=_json_default))


def print_json_line(obj: Any) -> None:
    """Write ``obj`` as one line of JSON Lines on stdout (a record of a listing, like ``ls --json``), flushed."""
    emit(json.dumps(obj, sort_keys=True, default=_json_default))


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class StderrProgress:
    """The terminal's :class:`~napari_shardscope.core.progress.Progress`: a rewritten line on stderr when it is
    a terminal, a plain line every few seconds (and the last one) when it is a pipe or a file."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, done: int, total: int, what: str, /) -> None:
        now = time.monotonic()
        final = done >= total
        if not final and now - self.last < (0.1 if self.tty else 5.0):
            return
        self.last = now
        text = f"{self.label}: {done}/{total} {what}"
        if self.tty:  # one line redrawn in place, cut to the terminal's width, the rest of the old line cleared
            width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
            sys.stderr.write("\r" + text[:width] + "\x1b[K" + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def progress_unless_quiet(args: argparse.Namespace, label: str) -> Progress | None:
    """The progress reporter of a long verb: ``None`` with ``--quiet``."""
    return None if args.quiet else StderrProgress(label)


# -- argument types (argparse ``type=``: a bad value is a usage error naming it) ---------------------------
def parse_coords(text: str) -> list[int]:
    """``"10,20,30"`` → ``[10, 20, 30]`` (argument errors name the value)."""
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 10,20,30, got {text!r}") from exc


def parse_floats(text: str) -> list[float]:
    """``"10.5,20,3e4"`` → ``[10.5, 20.0, 30000.0]``: finite numbers (a position in a coordinate space)."""
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 10,20.5,30, got {text!r}") from exc
    if not values or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers like 10,20.5,30, got {text!r}")
    return values


def parse_shape(text: str) -> list[int]:
    """``"64,64,32"`` → ``[64, 64, 32]``: exactly three positive integers (a chunk or shard shape)."""
    values = parse_coords(text)
    if len(values) != 3 or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected 3 positive integers like 64,64,64, got {text!r}")
    return values


def parse_positive_int(text: str) -> int:
    """``"4"`` → 4: an argparse type for counts (``--workers``); zero, negatives and non-integers are a
    usage error (exit 2, one line) instead of a traceback further down."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_uint64(text: str) -> int:
    """``"0x2a"`` or ``"42"`` → 42, refusing what does not fit a uint64 (chunk and segment ids)."""
    try:
        value = int(text, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from exc
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"{value} is not a uint64")
    return value


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``"512M"`` → 536870912: a positive byte count with an optional K/M/G/T (binary) suffix."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS else ""
    try:
        number = float(t[: len(t) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a size like 512M or 2G, got {text!r}") from exc
    if not math.isfinite(number):  # "inf", "nan", "1e400": float() accepts them, int() does not
        raise argparse.ArgumentTypeError(f"expected a finite size like 512M or 2G, got {text!r}")
    value = int(number)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return value


_SIDES: dict[str, Resolution] = {"ours": "ours", "theirs": "theirs", "both": "both"}


def parse_resolutions(items: Sequence[str] | None) -> dict[str, Resolution]:
    """``--resolve KIND:ID=SIDE`` (repeatable) → ``{"body:123": "ours"}``: one syntax for every merge verb.

    Raises
    ------
    ArgumentError
        Naming the item and the syntax, for a KIND other than body/supervoxel/annotation, an ID that is not an
        integer, or a SIDE other than ours/theirs/both.
    """
    out: dict[str, Resolution] = {}
    for item in items or ():
        key, sep, side = item.partition("=")
        kind, colon, label = key.partition(":")
        if (not sep or not colon or kind not in ("body", "supervoxel", "annotation") or not label.isdigit()
                or side not in _SIDES):
            raise ArgumentError(f"--resolve takes KIND:ID=SIDE with KIND body, supervoxel or annotation and SIDE "
                                f"ours|theirs|both (e.g. body:123=ours), got {item!r}")
        out[f"{kind}:{int(label)}"] = _SIDES[side]
    return out


def read_argument_file(path: str | Path, what: str) -> bytes:
    """The bytes of a file named on the command line (``--file``, a seeds or voxel list, ``@spec.json``).

    Raises
    ------
    ArgumentError
        Naming ``what`` the file was given as and why it cannot be read: the file is the user's
        argument, not data of ours, so a missing one is a bad argument.
    """
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ArgumentError(f"{what}: cannot read {path}: {exc.strerror or exc}") from exc


# -- options several verbs take ---------------------------------------------------------------------------
REPOSITORY = arg("path", metavar="REPO", help="repository directory")
#: A version: every verb that reads or edits at a version names it right after the repository.
REF = arg("ref", metavar="REF", help="version: branch name (its head) or UUID prefix")
#: The labelmap instance: a positional after the version(s) where it is required (``body merge REPO REF
#: LABELMAP``), ``--labelmap`` where a repository's only labelmap is the default (``export``, ``serve``).
LABELMAP = arg("name", metavar="LABELMAP", help="labelmap instance name")
LABELMAP_HELP = "labelmap instance (default: the repository's only one)"
RESOLVE = arg("--resolve", action="append", metavar="KIND:ID=SIDE",
              help="resolve one conflict: body:123=ours (keep mine), =theirs (keep theirs) or =both (their edits "
                   "after mine); KIND is body, supervoxel or annotation (annotation: ours or theirs; repeatable)")
QUIET = arg("--quiet", action="store_true", help="no progress on stderr")
SCHEDULER = arg("--scheduler", metavar="ADDR",
                help="'threads' (default), 'sync' or a dask.distributed scheduler address like tcp://host:8786")
WORKERS = arg("--workers", type=parse_positive_int, metavar="N", help="threads for the threaded scheduler")


# -- coordinates: one order everywhere ---------------------------------------------------------------------
#: Every command that takes a voxel reads it in the reader's order (what napari and ``open_volume`` show).
COORDS_HELP = ("coordinates: z,y,x as the reader (napari) indexes the volume, from 0 at its first voxel; with "
               "--xyz, x,y,z as Neuroglancer shows them (absolute: a precomputed voxel_offset included)")
XYZ = arg("--xyz", action="store_true",
          help="take voxels in Neuroglancer's x,y,z order and absolute coordinates instead of z,y,x from 0")


def neuroglancer_origin(translate: Sequence[float], voxel_size: Sequence[float]) -> tuple[int, ...]:
    """The absolute voxel coordinate (reader order) of a scale's first voxel: its world offset in voxels.

    A precomputed scale's ``voxel_offset`` (its translate is ``voxel_offset × resolution``); 0 for a
    volume placed at the origin.
    """
    return tuple(round(float(t) / float(v)) if v else 0 for t, v in zip(translate, voxel_size, strict=True))


def reader_voxel(values: Sequence[int], *, xyz: bool, origin: Sequence[int]) -> tuple[int, ...]:
    """A voxel as typed → the reader's index (z, y, x, from 0).

    ``xyz``: the values are Neuroglancer's x, y, z, absolute (``origin`` in reader order subtracted).
    """
    v = [int(x) for x in values]
    if not xyz:
        return tuple(v)
    v.reverse()
    tail = list(origin)[-len(v):] if v else []
    tail = [0] * (len(v) - len(tail)) + tail
    return tuple(a - o for a, o in zip(v, tail, strict=True))


def reader_voxels(voxels: Any, *, xyz: bool, origin: Sequence[int]) -> Any:
    """An (N, 3) voxel list as typed → the reader's z, y, x indices (see :func:`reader_voxel`)."""
    import numpy as np

    arr = np.asarray(voxels, dtype=np.int64).reshape(-1, 3)
    if not xyz:
        return arr
    return arr[:, ::-1] - np.asarray(list(origin)[-3:], dtype=np.int64)
