"""What the verb modules share: JSON output, argument types, the options several verbs take, progress.

Kept in one module so a verb module never borrows from another: each imports this and
:mod:`.parser`, and the core library.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from napari_shardscope.core.cli.parser import arg
from napari_shardscope.core.errors import ArgumentError


# -- output ---------------------------------------------------------------------------------------------
def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (one document, sorted keys for stable diffs)."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=_json_default)
    sys.stdout.write("\n")


def print_json_line(obj: Any) -> None:
    """Write ``obj`` as one line of JSON Lines on stdout (a record of a listing, like ``ls --json``)."""
    sys.stdout.write(json.dumps(obj, sort_keys=True, default=_json_default) + "\n")


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
    """Progress on stderr: a rewritten line on a terminal, a line every few seconds otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        final = done >= total
        if not final and now - self.last < (0.1 if self.tty else 5.0):
            return
        self.last = now
        text = f"{self.label}: {done}/{total} {what}"
        if self.tty:
            sys.stderr.write("\r" + text[:120].ljust(120) + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def progress_unless_quiet(args: argparse.Namespace, label: str) -> StderrProgress | None:
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
REPOSITORY = arg("path", help="repository directory")
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
