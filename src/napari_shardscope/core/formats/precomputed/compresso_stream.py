"""The compresso stream, checked field by field with numpy before the ``compresso`` package decodes it.

The ``compresso`` package's C++ decoder (``compresso.hpp``, format versions 0 and 1) trusts every
field of the stream: a ``location_size`` of 17 instead of 4080 made it write past the windows it
allocated and kill the process with a segmentation fault, and a lying ``id_size``, ``xstep`` or
``value_size`` decoded to thousands of wrong voxels without an error. So the whole stream is
checked here first, against what the format implies, and the C++ code only ever sees a stream
whose every index stays inside what it indexes.

The stream (little-endian; ``README`` "Compresso Stream Format" and ``compresso.hpp``)::

    header     36 bytes: "cpso", format_version u8 (0, or 1 with a z index), data_width u8 (1/2/4/8),
               sx sy sz u16, xstep ystep zstep u8 (0 < product <= 64), id_size u64, value_size u32,
               location_size u64, connectivity u8 (4 or 6)
    ids        id_size x data_width: the label of each connected component of non-boundary voxels
    values     value_size x window width: the distinct boundary bit fields of the step windows
    locations  location_size x data_width: one code per boundary voxel the decoder cannot infer
               (0-5: copy a neighbour, 6: the next entry is the label, >= 7: the label + 7)
    windows    the rest but the z index: run-length coded window numbers (odd: a run of empty
               windows of length v >> 1; even: window values[v >> 1])
    z index    format 1 only: sz component counts, then sz location-offset differences, each of the
               smallest width that holds 2 * sx * sy (1, 2, 4 or 8 bytes)

where the window width is the smallest of 1, 2, 4, 8 bytes holding ``xstep * ystep * zstep`` bits.

Checked here (:func:`check_compresso_stream`), every failure a :class:`ChunkDecodeError` naming the
key and the byte offset of the field or section that is wrong:

* the header: magic, version, data width and size against the chunk, steps, connectivity;
* the sections add up exactly to the stream's length (no byte missing, none left over);
* the windows cover exactly the ``nx * ny * nz`` step windows and every window number is below
  ``value_size``;
* the boundaries those windows describe hold exactly ``id_size`` connected components (counted with
  ``scipy.ndimage.label``, 2-D per slice for connectivity 4, 3-D for 6), so every id the decoder
  looks up exists and none is left over;
* the locations hold exactly one code per boundary voxel the decoder cannot infer (a ``6`` takes
  the entry after it), and every neighbour code points inside the chunk, at a voxel already decoded
  or not on a boundary (the decoder reads the neighbour's label; the ``5`` code on the last slice was
  read past the output by the C++ code);
* format 1: connectivity 4, no cross-slice codes (4, 5), and a z index that agrees with the
  component and location counts of every slice.

A stream that passes decodes to what its writer encoded (each field is pinned by another), which
is what the header-mutation tests in ``tests/fuzz/test_decoder_headers.py`` check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ChunkDecodeError

HEADER_SIZE = 36
MAGIC = b"cpso"
FORMAT_VERSIONS = (0, 1)
DATA_WIDTHS = (1, 2, 4, 8)
CONNECTIVITIES = (4, 6)
#: Most bits a window holds (``xstep * ystep * zstep``): the widest window type is 64-bit.
MAX_WINDOW_BITS = 64

#: Byte offset of each header field (``compresso.hpp``, ``CompressoHeader(unsigned char*)``).
FIELD_OFFSETS = {"magic": 0, "format_version": 4, "data_width": 5, "sx": 6, "sy": 8, "sz": 10, "xstep": 12,
                 "ystep": 13, "zstep": 14, "id_size": 15, "value_size": 23, "location_size": 27,
                 "connectivity": 35}

# Location codes (``encode_indeterminate_locations``): copy the label of a neighbour, or a label follows.
_LEFT, _RIGHT, _UP, _DOWN, _BELOW, _ABOVE, _LABEL_FOLLOWS = range(7)


@dataclass(frozen=True)
class CompressoHeader:
    """The 36-byte header of a compresso stream (sizes are counts of entries, not bytes)."""

    format_version: int
    data_width: int
    size: tuple[int, int, int]
    steps: tuple[int, int, int]
    id_size: int
    value_size: int
    location_size: int
    connectivity: int

    @property
    def window_width(self) -> int:
        """Bytes per window: the smallest of 1, 2, 4, 8 holding ``xstep * ystep * zstep`` bits."""
        bits = math.prod(self.steps)
        return next(w for w in (1, 2, 4, 8) if bits <= 8 * w)

    @property
    def index_width(self) -> int:
        """Bytes per z-index entry (``CompressoHeader::index_byte_width``: ``2 * sx * sy`` below 2⁸-1, …)."""
        worst = 2 * self.size[0] * self.size[1]
        return next((w for w in (1, 2, 4) if worst < (1 << (8 * w)) - 1), 8)

    @property
    def grid(self) -> tuple[int, int, int]:
        """Step windows along x, y, z (rounded up)."""
        (sx, sy, sz), (xs, ys, zs) = self.size, self.steps
        return -(-sx // xs), -(-sy // ys), -(-sz // zs)


def parse_compresso_header(data: bytes, *, key: str) -> CompressoHeader:
    """The header of ``data``, its magic, version, widths, steps and connectivity checked."""
    if len(data) < HEADER_SIZE:
        raise ChunkDecodeError(f"compresso stream of {len(data)} bytes is shorter than its {HEADER_SIZE}-byte "
                               "header", key=key, offset=0)
    if data[:4] != MAGIC:
        raise ChunkDecodeError(f"compresso stream does not start with {MAGIC!r} (found {bytes(data[:4])!r})",
                               key=key, offset=0)

    def le(at: int, width: int) -> int:
        return int.from_bytes(data[at:at + width], "little")

    head = CompressoHeader(format_version=data[4], data_width=data[5], size=(le(6, 2), le(8, 2), le(10, 2)),
                           steps=(data[12], data[13], data[14]), id_size=le(15, 8), value_size=le(23, 4),
                           location_size=le(27, 8), connectivity=data[35])
    if head.format_version not in FORMAT_VERSIONS:
        raise ChunkDecodeError(f"compresso format version {head.format_version} (known: 0, 1)", key=key,
                               offset=FIELD_OFFSETS["format_version"])
    if head.data_width not in DATA_WIDTHS:
        raise ChunkDecodeError(f"compresso data width {head.data_width} is not 1, 2, 4 or 8", key=key,
                               offset=FIELD_OFFSETS["data_width"])
    for axis, step in zip("xyz", head.steps, strict=True):
        if step == 0:
            raise ChunkDecodeError(f"compresso {axis}step is 0", key=key, offset=FIELD_OFFSETS[f"{axis}step"])
    if math.prod(head.steps) > MAX_WINDOW_BITS:
        raise ChunkDecodeError(f"compresso steps {list(head.steps)} make windows of {math.prod(head.steps)} bits, "
                               f"more than {MAX_WINDOW_BITS}", key=key, offset=FIELD_OFFSETS["xstep"])
    if head.connectivity not in CONNECTIVITIES:
        raise ChunkDecodeError(f"compresso connectivity {head.connectivity} is not 4 or 6", key=key,
                               offset=FIELD_OFFSETS["connectivity"])
    if head.format_version == 1 and head.connectivity != 4:
        raise ChunkDecodeError("compresso format version 1 (z index) with connectivity 6: the format allows "
                               "the z index with connectivity 4 only", key=key, offset=FIELD_OFFSETS["connectivity"])
    return head


def check_compresso_stream(data: bytes, extent: tuple[int, int, int], itemsize: int, *,
                           key: str) -> CompressoHeader:
    """Check every field and section of the compresso stream ``data`` of a chunk of ``extent`` voxels (x, y, z).

    Returns the header. Raises :class:`ChunkDecodeError` (key, byte offset) for anything the
    decoder would trust and that does not hold; see the module docstring for the list.
    """
    head = parse_compresso_header(data, key=key)
    if head.size != tuple(extent):
        raise ChunkDecodeError(f"compresso chunk of {list(head.size)} voxels where the scale needs {list(extent)}",
                               key=key, offset=FIELD_OFFSETS["sx"])
    if head.data_width != itemsize:
        raise ChunkDecodeError(f"compresso chunk of {head.data_width}-byte labels where the scale's data type has "
                               f"{itemsize} bytes", key=key, offset=FIELD_OFFSETS["data_width"])
    sections = _sections(data, head, key=key)
    windows = _decode_windows(data, head, sections, key=key)
    boundaries = _boundaries(data, head, sections, windows)
    per_slice = _component_counts(boundaries, head)
    if int(per_slice.sum()) != head.id_size:
        raise ChunkDecodeError(f"compresso id_size {head.id_size}, but its boundaries hold {int(per_slice.sum())} "
                               "connected components", key=key, offset=FIELD_OFFSETS["id_size"])
    starts = _check_locations(data, head, sections, boundaries, key=key)
    if head.format_version == 1:
        _check_z_index(data, head, sections, per_slice, starts, key=key)
    return head


@dataclass(frozen=True)
class _Sections:
    """Byte offsets of the sections (``z_index == len(data)`` for format 0)."""

    ids: int
    values: int
    locations: int
    windows: int
    z_index: int


def _sections(data: bytes, head: CompressoHeader, *, key: str) -> _Sections:
    """Where each section starts; they must add up to ``len(data)`` exactly, the windows in whole entries."""
    dw, ww = head.data_width, head.window_width
    ids = HEADER_SIZE
    values = ids + head.id_size * dw
    locations = values + head.value_size * ww
    windows = locations + head.location_size * dw
    tail = 2 * head.size[2] * head.index_width if head.format_version == 1 else 0
    z_index = len(data) - tail
    for name, start, field in (("ids", values, "id_size"), ("values", locations, "value_size"),
                               ("locations", windows, "location_size")):
        if start > z_index:
            raise ChunkDecodeError(f"compresso {name} ({field} {getattr(head, field)}) end at byte {start}, past the "
                                   f"{z_index} bytes before the {'z index' if tail else 'end'}", key=key,
                                   offset=FIELD_OFFSETS[field])
    if (z_index - windows) % ww:
        raise ChunkDecodeError(f"compresso windows section of {z_index - windows} bytes is not whole {ww}-byte "
                               "windows (a section size in the header is wrong)", key=key, offset=windows)
    return _Sections(ids, values, locations, windows, z_index)


def _uint(width: int) -> np.dtype[Any]:
    return np.dtype(f"<u{width}")


def _decode_windows(data: bytes, head: CompressoHeader, sec: _Sections, *, key: str) -> npt.NDArray[np.intp]:
    """The window number of every step window (x fastest), from the run-length coded section."""
    nblocks = math.prod(head.grid)
    rle = np.frombuffer(data, dtype=_uint(head.window_width), count=(sec.z_index - sec.windows) // head.window_width,
                        offset=sec.windows).astype(np.uint64)
    runs = (rle & np.uint64(1)).astype(bool)
    steps = np.where(runs, rle >> np.uint64(1), np.uint64(1))
    if steps.size and int(steps.max()) > nblocks:
        i = int(np.argmax(steps > nblocks))
        raise ChunkDecodeError(f"compresso window run of {int(steps[i])} is longer than the {nblocks} windows",
                               key=key, offset=sec.windows + i * head.window_width)
    ends = np.cumsum(steps, dtype=np.int64)
    total = int(ends[-1]) if ends.size else 0
    if total != nblocks:
        raise ChunkDecodeError(f"compresso windows cover {total} step windows, the chunk has {nblocks} "
                               f"(steps {list(head.steps)})", key=key, offset=sec.windows)
    literal = ~runs
    numbers = (rle[literal] >> np.uint64(1))
    if numbers.size and int(numbers.max()) >= head.value_size:
        i = int(np.flatnonzero(literal)[int(np.argmax(numbers >= head.value_size))])
        raise ChunkDecodeError(f"compresso window number {int(rle[i] >> np.uint64(1))} is not below value_size "
                               f"{head.value_size}", key=key, offset=sec.windows + i * head.window_width)
    windows = np.zeros(nblocks, dtype=np.intp)
    windows[ends[literal] - 1] = numbers.astype(np.intp)
    return windows


def _boundaries(data: bytes, head: CompressoHeader, sec: _Sections,
                windows: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """The boundary voxels the windows describe, indexed ``[z, y, x]`` (``decode_boundaries``).

    Each distinct window value is unpacked once into its ``zstep x ystep x xstep`` bits (bit
    ``x + xstep * (y + ystep * z)`` of the value), then the windows are tiled and cropped to the chunk.
    """
    sx, sy, sz = head.size
    xs, ys, zs = head.steps
    nx, ny, nz = head.grid
    if head.value_size == 0:
        return np.zeros((sz, sy, sx), dtype=bool)
    values = np.frombuffer(data, dtype=_uint(head.window_width), count=head.value_size,
                           offset=sec.values).astype(np.uint64)
    bits = np.arange(xs * ys * zs, dtype=np.uint64)
    table = ((values[:, None] >> bits[None, :]) & np.uint64(1)).astype(bool)
    tiles = table[windows].reshape(nz, ny, nx, zs, ys, xs).transpose(0, 3, 1, 4, 2, 5)
    return np.ascontiguousarray(tiles.reshape(nz * zs, ny * ys, nx * xs)[:sz, :sy, :sx])


def _component_counts(boundaries: npt.NDArray[np.bool_], head: CompressoHeader) -> npt.NDArray[np.int64]:
    """Connected components of the non-boundary voxels per z slice (all in slice 0's entry for connectivity 6).

    Connectivity 4 labels the slices as one 2-D image, stacked along y with an empty row between
    slices so that no component crosses from one to the next.
    """
    from scipy import ndimage

    sz, sy, sx = boundaries.shape
    counts = np.zeros(sz, dtype=np.int64)
    if head.connectivity == 6:
        _, n = ndimage.label(~boundaries, structure=ndimage.generate_binary_structure(3, 1))
        counts[0] = int(n)
        return counts
    stacked = np.zeros((sz, sy + 1, sx), dtype=bool)
    stacked[:, :sy] = ~boundaries
    labels, n = ndimage.label(stacked.reshape(sz * (sy + 1), sx))
    if n == 0:
        return counts
    flat = labels.reshape(sz, -1)
    top = flat.max(axis=1).astype(np.int64)
    # Labels come in raster order, so slice z's are above every earlier slice's: the running maximum
    # counts them. Checked, and counted label by label if ever not so.
    floor = np.where(flat > 0, flat, np.iinfo(flat.dtype).max).min(axis=1).astype(np.int64)
    running = np.maximum.accumulate(top)
    earlier = np.concatenate(([0], running[:-1]))
    if np.all((top == 0) | (floor > earlier)):
        return np.diff(running, prepend=0)
    slice_of = np.zeros(int(n) + 1, dtype=np.int64)  # pragma: no cover - scipy numbers in raster order
    slice_of[flat.ravel()] = np.repeat(np.arange(sz), flat.shape[1])
    return np.bincount(slice_of[1:], minlength=sz).astype(np.int64)


def _check_locations(data: bytes, head: CompressoHeader, sec: _Sections, boundaries: npt.NDArray[np.bool_], *,
                     key: str) -> npt.NDArray[np.int64]:
    """Check the location codes against the voxels that need one; the first entry of each slice's codes.

    A boundary voxel needs a code unless its left or upper neighbour (or, for connectivity 6, the one
    below it) is not a boundary voxel (``decode_indeterminate_locations``). Codes are consumed one per
    such voxel in x-fastest order; a ``6`` takes the entry after it as the label.
    """
    sx, sy, sz = head.size
    b = boundaries
    copies = np.zeros_like(b)
    copies[:, :, 1:] |= ~b[:, :, :-1]
    copies[:, 1:, :] |= ~b[:, :-1, :]
    if head.connectivity == 6:
        copies[1:, :, :] |= ~b[:-1, :, :]
    needs = b & ~copies
    voxels = np.flatnonzero(needs)  # raster order: z slowest, x fastest (the decoder's loop)
    dw = head.data_width
    codes_all = np.frombuffer(data, dtype=_uint(dw), count=head.location_size, offset=sec.locations)
    six = np.flatnonzero(codes_all == _LABEL_FOLLOWS)
    consumed = np.ones(head.location_size, dtype=bool)  # entries read as codes (the rest: labels after a 6)
    if six.size:
        # In a run of consecutive 6s the first is a code and the second its label, and so on: a 6 is a
        # code unless the entry before it was a code 6 (the entry before a run is not a 6).
        new_run = np.ones(six.size, dtype=bool)
        new_run[1:] = np.diff(six) != 1
        run_start = six[np.maximum.accumulate(np.where(new_run, np.arange(six.size), 0))]
        code_six = six[(six - run_start) % 2 == 0]
        if code_six.size and int(code_six[-1]) + 1 >= head.location_size:
            raise ChunkDecodeError("compresso location code 6 is the last entry: the label it announces is missing",
                                   key=key, offset=sec.locations + int(code_six[-1]) * dw)
        consumed[code_six + 1] = False
    positions = np.flatnonzero(consumed)
    if positions.size != voxels.size:
        raise ChunkDecodeError(f"compresso locations hold {positions.size} codes (location_size "
                               f"{head.location_size}), the boundaries need {voxels.size}", key=key,
                               offset=FIELD_OFFSETS["location_size"])
    codes = codes_all[positions].astype(np.uint64)
    z, rem = np.divmod(voxels, sx * sy)
    y, x = np.divmod(rem, sx)
    flat_b = b.ravel()

    def free(offset: int, ok: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Whether the neighbour at ``voxels + offset`` (where ``ok``) is not a boundary voxel."""
        out = np.zeros(voxels.size, dtype=bool)
        out[ok] = ~flat_b[voxels[ok] + offset]
        return out

    valid = codes > _LABEL_FOLLOWS - 1  # 6 and labels + 7
    valid |= (codes == _LEFT) & (x > 0)
    valid |= (codes == _UP) & (y > 0)
    valid |= (codes == _RIGHT) & free(1, x < sx - 1)
    valid |= (codes == _DOWN) & free(sx, y < sy - 1)
    if head.format_version == 0:  # format 1 decodes slices on their own: no code refers to another slice
        valid |= (codes == _BELOW) & (z > 0)
        valid |= (codes == _ABOVE) & free(sx * sy, z < sz - 1)
    if not valid.all():
        k = int(np.argmin(valid))
        raise ChunkDecodeError(f"compresso location code {int(codes[k])} at voxel ({int(x[k])}, {int(y[k])}, "
                               f"{int(z[k])}) points outside the chunk or at a voxel not decoded yet", key=key,
                               offset=sec.locations + int(positions[k]) * dw)
    # the entry each slice's codes start at (slices without codes: where the next codes start)
    first = np.searchsorted(z, np.arange(sz))
    return np.append(positions, head.location_size)[first].astype(np.int64)


def _check_z_index(data: bytes, head: CompressoHeader, sec: _Sections, per_slice: npt.NDArray[np.int64],
                   starts: npt.NDArray[np.int64], *, key: str) -> None:
    """Format 1's tail: per-slice component counts, then differences of each slice's first location entry."""
    sz = head.size[2]
    iw = head.index_width
    tail = np.frombuffer(data, dtype=_uint(iw), count=2 * sz, offset=sec.z_index).astype(np.uint64)
    counts, offsets = tail[:sz], tail[sz:]
    if not np.array_equal(counts, per_slice.astype(np.uint64)):
        i = int(np.argmax(counts != per_slice.astype(np.uint64)))
        raise ChunkDecodeError(f"compresso z index gives slice {i} {int(counts[i])} components, its boundaries "
                               f"hold {int(per_slice[i])}", key=key, offset=sec.z_index + i * iw)
    diffs = np.diff(starts, prepend=0).astype(np.uint64)
    if not np.array_equal(offsets, diffs):
        i = int(np.argmax(offsets != diffs))
        raise ChunkDecodeError(f"compresso z index says slice {i}'s locations start {int(offsets[i])} entries after "
                               f"the previous slice's, they start {int(diffs[i])} after", key=key,
                               offset=sec.z_index + (sz + i) * iw)
