"""Go to a body, a supervoxel or a point: where to look, from the label index (no volume scan).

A proofreader types an id (or takes the next item of a to-do list) and expects the view to land
on it: the right z plane, centred, zoomed to its extent. :func:`find_target` answers with a
:class:`NavTarget` — the scale-0 box to fit (the blocks holding the label, from the label index:
no voxel of the volume is read to find them) and one voxel *inside* the label to centre on (one
block is read: the centre of a box may lie outside a curved neurite, and the plane through it may
not show the body at all). Views (napari, a notebook) turn it into a camera move with
:meth:`NavTarget.world_box` and :meth:`NavTarget.world_focus`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.labelmap import Box, LabelmapVersion
from napari_shardscope.core.labelmap.config import ScaleGeometry

TargetKind = Literal["body", "supervoxel", "point"]
TARGET_KINDS: tuple[TargetKind, ...] = ("body", "supervoxel", "point")
#: Half the extent (scale-0 voxels, y and x) shown around a point target.
POINT_MARGIN = 32

Coord3 = tuple[int, int, int]


@dataclass(frozen=True)
class NavTarget:
    """Where to look: a label (or a point), the scale-0 box (z, y, x) to fit, a voxel to centre on.

    Attributes
    ----------
    kind
        ``body``, ``supervoxel`` or ``point``.
    label
        The body or supervoxel id (for a point: the body there, 0 on background).
    box
        Scale-0 voxels to show (block bounds for labels; a margin around a point).
    focus
        A scale-0 voxel inside the label (the point itself for a point target): the plane and
        centre of the view.
    """

    kind: TargetKind
    label: int
    box: Box
    focus: Coord3

    def world_box(self, geometry: ScaleGeometry) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The box in world units (voxel edges: a voxel's centre is at ``translate + index * voxel_size``)."""
        size, origin = np.asarray(geometry.voxel_size), np.asarray(geometry.translate)
        lo = origin + (np.asarray(self.box.lo) - 0.5) * size
        hi = origin + (np.asarray(self.box.hi) - 0.5) * size
        return tuple(float(v) for v in lo), tuple(float(v) for v in hi)

    def world_focus(self, geometry: ScaleGeometry) -> tuple[float, ...]:
        """The focus voxel's centre in world units (z, y, x)."""
        pos = np.asarray(geometry.translate) + np.asarray(self.focus) * np.asarray(geometry.voxel_size)
        return tuple(float(v) for v in pos)

    def describe(self) -> str:
        """"body 12 at z 30, y 140, x 88" — what a message says after going there."""
        z, y, x = self.focus
        what = f"point z {z}, y {y}, x {x}" if self.kind == "point" else f"{self.kind} {self.label}"
        where = "" if self.kind == "point" else f" at z {z}, y {y}, x {x}"
        inside = f" (body {self.label})" if self.kind == "point" and self.label else ""
        return f"{what}{where}{inside}"


def parse_target(text: str, kind: TargetKind = "body") -> tuple[TargetKind, int | Coord3]:
    """Read what a user typed in a go-to box.

    ``"123"`` is a label of ``kind``; ``"body 123"``, ``"sv 45"`` / ``"supervoxel 45"`` name the kind;
    three numbers (``"30, 140, 88"`` or ``"30 140 88"``) are a scale-0 voxel in z, y, x order (the
    reader's axes).
    """
    words = text.strip().lower().replace("#", " ")
    if not words:
        raise ArgumentError("type a body id, 'sv ID' for a supervoxel, or a voxel as z, y, x")
    named = re.fullmatch(r"(body|bodies|b|supervoxel|sv|s|point|p)\s*[:=]?\s*(.*)", words)
    if named is not None:
        head, words = named.group(1), named.group(2)
        kind = "body" if head.startswith("b") else "point" if head.startswith("p") else "supervoxel"
    numbers = [n for n in re.split(r"[\s,;()\[\]]+", words) if n]
    try:
        values = [int(n) for n in numbers]
    except ValueError:
        raise ArgumentError(f"{text!r}: expected a body id, 'sv ID', or a voxel as z, y, x (whole numbers)") from None
    if len(values) == 3:
        return "point", (values[0], values[1], values[2])
    if len(values) == 1 and kind != "point":
        if values[0] <= 0:
            raise ArgumentError(f"{text!r}: ids are positive (0 is background)")
        return kind, values[0]
    raise ArgumentError(f"{text!r}: expected one id or three coordinates (z, y, x), got {len(values)} number(s)")


def find_target(version: LabelmapVersion, kind: TargetKind, value: int | Coord3) -> NavTarget:
    """The target of a body, a supervoxel or a scale-0 voxel (z, y, x) at ``version``."""
    if kind == "point":
        if isinstance(value, int):
            raise ArgumentError("a point target needs three coordinates (z, y, x)")
        return point_target(version, value)
    if not isinstance(value, int | np.integer):
        raise ArgumentError(f"a {kind} target needs one id, got {value!r}")
    return body_target(version, int(value)) if kind == "body" else supervoxel_target(version, int(value))


def body_target(version: LabelmapVersion, body: int) -> NavTarget:
    """Fit the blocks holding ``body``; centre on its voxel nearest the middle of their bounds."""
    if not version.exists(body):
        raise ArgumentError(f"body {body} does not exist at version {version.version.short}")
    blocks = version.sparsevol(body)
    members = np.asarray(version.supervoxels(body), dtype=np.uint64)
    return _label_target(version, "body", body, blocks.blocks, blocks.counts, members)


def supervoxel_target(version: LabelmapVersion, sv: int) -> NavTarget:
    """Fit the blocks holding supervoxel ``sv``; centre on one of its voxels."""
    lm = version.labelmap
    entry = lm.entry(lm.state(version.uuid), sv)
    if entry is None:
        raise ArgumentError(f"supervoxel {sv} does not exist at version {version.version.short}")
    blocks = np.asarray(entry.block_set(), dtype=np.int64).reshape(-1, 3)
    return _label_target(version, "supervoxel", sv, blocks, np.asarray(entry.counts, dtype=np.int64),
                         np.asarray([sv], dtype=np.uint64))


def point_target(version: LabelmapVersion, voxel: Coord3) -> NavTarget:
    """A scale-0 voxel (z, y, x): centre on it, show :data:`POINT_MARGIN` voxels around it in y and x."""
    shape = version.scales[0].shape
    z, y, x = (int(v) for v in voxel)
    if not all(0 <= c < n for c, n in zip((z, y, x), shape, strict=True)):
        raise ArgumentError(f"voxel z {z}, y {y}, x {x} is outside the volume (z, y, x < {shape[0]}, "
                            f"{shape[1]}, {shape[2]})")
    box = Box((z, y - POINT_MARGIN, x - POINT_MARGIN), (z + 1, y + POINT_MARGIN + 1, x + POINT_MARGIN + 1))
    return NavTarget("point", version.body_at((z, y, x)), box.intersect(Box.of_shape(shape)), (z, y, x))


def _label_target(version: LabelmapVersion, kind: TargetKind, label: int, blocks: np.ndarray, counts: np.ndarray,
                  members: np.ndarray) -> NavTarget:
    if len(blocks) == 0:
        raise ArgumentError(f"{kind} {label} has no voxels at version {version.version.short}")
    grid = version.labelmap.config.grid(0)
    boxes = [grid.box((int(c[0]), int(c[1]), int(c[2]))) for c in blocks]
    box = boxes[0]
    for b in boxes[1:]:
        box = box.union(b)
    box = box.intersect(Box.of_shape(version.scales[0].shape))
    middle = (np.asarray(box.lo) + np.asarray(box.hi)) / 2
    # the block nearest the middle (ties: the fuller one), read once to find a voxel of the label there
    centres = np.asarray([(np.asarray(b.lo) + np.asarray(b.hi)) / 2 for b in boxes])
    order = np.lexsort((-np.asarray(counts), np.linalg.norm(centres - middle, axis=1)))
    for i in order[:4]:
        block = boxes[int(i)].intersect(Box.of_shape(version.scales[0].shape))
        inside = np.argwhere(np.isin(version.read_supervoxels(block), members))
        if len(inside):
            where = inside + np.asarray(block.lo)
            best = where[int(np.argmin(np.linalg.norm(where - middle, axis=1)))]
            return NavTarget(kind, label, box, (int(best[0]), int(best[1]), int(best[2])))
    c = np.floor(middle).astype(int)
    return NavTarget(kind, label, box, (int(c[0]), int(c[1]), int(c[2])))
