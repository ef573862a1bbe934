"""The orderings and aggregates an import computes over millions of sites, vectorised.

An import sorts its sites by id (to check and store them by id) and by labelmap block (to read each
block's supervoxels once), and counts synapses per (supervoxel, direction, partner supervoxel) for the
synapse index. Each is one pass of NumPy sorts or scatters, never a Python loop per row; they live
apart from the reading and writing of tables so their properties can be tested against ``argsort``
and a per-row count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.annotation.base import block_code

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


def id_order(ids: U64) -> npt.NDArray[np.intp] | None:
    """The permutation that sorts ``ids`` (None: already sorted); duplicates are left adjacent for the caller.

    Ids of a synapse table are usually a dense range in arbitrary order: then one scatter (O(n))
    sorts them, several times faster than an argsort of 10⁷ u64; sparse ids are sorted by :func:`key_order`.
    """
    n = ids.size
    if n < 2 or not bool((ids[1:] < ids[:-1]).any()):
        return None
    lo, hi = int(ids.min()), int(ids.max())
    span = hi - lo + 1
    if span <= 4 * n and n < 2**31:
        slot = np.full(span, -1, dtype=np.int32)
        slot[(ids - np.uint64(lo)).astype(np.intp)] = np.arange(n, dtype=np.int32)
        order = slot[slot >= 0]
        if order.size == n:  # else a duplicate id took another's slot: fall back (it is reported below)
            return order.astype(np.intp)
    return key_order(ids)  # packed with the row number (an argsort where the span does not fit)


def block_linear(cells: npt.NDArray[Any], grid: Sequence[int]) -> npt.NDArray[Any]:
    """Each row's block (z, y, x) as its linear index in a grid of ``grid`` blocks (x fastest), in ``cells``' dtype."""
    gy, gx = cells.dtype.type(grid[1]), cells.dtype.type(grid[2])
    linear: npt.NDArray[Any] = (cells[:, 0] * gy + cells[:, 1]) * gx + cells[:, 2]
    return linear


def block_order(cells: I64, grid: Sequence[int]) -> tuple[npt.NDArray[np.intp], U64]:
    """The permutation ordering rows by block (z, y, x), rows of one block keeping their order (stable),
    and the rows' block codes (:func:`block_code`) in that order.

    The block's linear index and the row number are packed into one u64 and sorted with ``np.sort``
    (SIMD, several times faster than a stable argsort of 10⁷ codes); linear order is
    :func:`block_code` order, since both are lexicographic in (z, y, x).
    """
    n = len(cells)
    linear = block_linear(cells, grid)
    row_bits = max(1, (n - 1).bit_length())
    top = int(grid[0]) * int(grid[1]) * int(grid[2])
    if top.bit_length() + row_bits > 64:
        order = np.argsort(linear, kind="stable")
        lin = linear[order].astype(np.uint64)
    else:
        packed = (linear.astype(np.uint64) << np.uint64(row_bits)) | np.arange(n, dtype=np.uint64)
        del linear
        packed.sort()
        order = (packed & np.uint64((1 << row_bits) - 1)).astype(np.intp)
        lin = packed >> np.uint64(row_bits)  # sorted: the codes follow without gathering the cells
        del packed
    gx, gy = np.uint64(grid[2]), np.uint64(grid[1])
    bx = lin % gx
    lin //= gx
    return order, block_code(lin // gy, lin % gy, bx)


def key_order(keys: npt.NDArray[np.unsignedinteger[Any]]) -> npt.NDArray[np.intp]:
    """The stable permutation sorting ``keys`` (u64 or u32).

    Each key (relative to the smallest) is packed with its row number into one u64 and the packed
    values sorted with ``np.sort`` (SIMD): 5x less CPU than ``np.argsort`` of 10⁶ random u64 here. Keys
    spanning too many values for the packing are stable-argsorted instead.
    """
    n = keys.size
    if n < 2:
        return np.arange(n, dtype=np.intp)
    lo = keys.min()
    row_bits = (n - 1).bit_length()
    if int(keys.max() - lo).bit_length() + row_bits > 64:
        return np.argsort(keys, kind="stable")
    packed = np.subtract(keys, lo, dtype=np.uint64)  # u32 keys (block indexes) widen here, in the same pass
    packed <<= np.uint64(row_bits)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    packed &= np.uint64((1 << row_bits) - 1)
    # the row numbers are below 2⁶³: the sorted array itself, seen as intp, is the permutation (no copy)
    out: npt.NDArray[np.intp] = packed.view(np.intp) if np.dtype(np.intp).itemsize == 8 else packed.astype(np.intp)
    return out


def dense_ranks(values: U64) -> tuple[U64, U64]:
    """The distinct ``values`` ascending and each value's rank among them (``uniq[rank] == values``).

    What ``np.unique(return_inverse=True)`` gives, from one :func:`key_order` and a scatter: NumPy's
    ``unique`` hashes (2 CPU-s for 2·10⁶ distinct u64 here) and a ``searchsorted`` of unsorted
    queries misses the cache at every probe (1.2 CPU-s); this is 0.1.
    """
    n = values.size
    if not n:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    order = key_order(values)
    s = values[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    uniq = s[new]
    ranks = np.empty(n, np.uint64)
    ranks[order] = np.cumsum(new, dtype=np.uint64) - np.uint64(1)
    return uniq, ranks


def synapse_aggregates(pre_sv: U64, post_sv: U64) -> tuple[U64, U64, npt.NDArray[np.uint8], npt.NDArray[np.uint32]]:
    """The base's synapse index: per supervoxel, its synapse ends summed by direction and partner supervoxel.

    Rows ``(sv, partner, direction, n)`` sorted by (sv, direction, partner): direction 0 (``out``:
    ``sv`` holds the pre site, ``partner`` the post site) or 1 (``in``). What
    :func:`~.connectome.aggregate_rows` derives from the versioned keys of one supervoxel, for every
    supervoxel at once: supervoxels are numbered densely (order kept, :func:`dense_ranks`) unless
    their span packs as it is, each end
    packed with its partner and direction into one u64 and sorted once; runs of equal codes are the counts.
    """
    m = pre_sv.size
    empty = (np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint8), np.zeros(0, np.uint32))
    if not m:
        return empty
    both = np.concatenate([pre_sv, post_sv])
    lo = both.min()
    bits = max(1, int(both.max() - lo).bit_length())
    uniq: U64 | None = None
    if 2 * bits + 1 <= 64:  # the supervoxels' span packs as it is: no numbering (a sort and a scatter) first
        ranks = both
        ranks -= lo
    else:
        uniq, ranks = dense_ranks(both)
        bits = max(1, (uniq.size - 1).bit_length())
        if 2 * bits + 1 > 64:  # beyond 2³¹ distinct supervoxels: a (slower) lexsort of the three columns
            return aggregate_by_lexsort(pre_sv, post_sv)
    del both
    dp, dq = ranks[:m], ranks[m:]
    sh, dbit, mask = np.uint64(bits + 1), np.uint64(1 << bits), np.uint64((1 << bits) - 1)
    codes = np.concatenate([(dp << sh) | dq, (dq << sh) | dbit | dp])
    del dp, dq, ranks
    codes.sort()
    new = np.ones(codes.size, dtype=bool)
    np.not_equal(codes[1:], codes[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, codes.size)).astype(np.uint32)
    c = codes[starts]
    if uniq is None:
        return (c >> sh) + lo, (c & mask) + lo, ((c & dbit) != 0).astype(np.uint8), counts
    return (uniq[(c >> sh).astype(np.intp)], uniq[(c & mask).astype(np.intp)],
            ((c & dbit) != 0).astype(np.uint8), counts)


def index_order(sv: U64, direction: npt.NDArray[np.uint8], partner: U64) -> npt.NDArray[np.intp]:
    """The permutation ordering synapse index rows by (sv, direction, partner) (rows of one key: stable).

    Both supervoxel columns are numbered densely together (:func:`dense_ranks`) and packed with the
    direction into one code sorted by :func:`key_order`: a ``lexsort`` of the three columns was 5x the CPU.
    """
    n = sv.size
    if n < 2:
        return np.arange(n, dtype=np.intp)
    ranks = np.concatenate([sv, partner])
    lo = ranks.min()
    bits = max(1, int(ranks.max() - lo).bit_length())
    if 2 * bits + 1 + (n - 1).bit_length() <= 64:  # packs as it is (with the row number, in key_order)
        ranks -= lo
    else:
        _, ranks = dense_ranks(ranks)
        bits = max(1, int(ranks.max()).bit_length())
    if 2 * bits + 1 > 64:
        return np.lexsort((partner, direction, sv))
    codes = ranks[:n] << np.uint64(bits + 1)
    codes |= direction.astype(np.uint64) << np.uint64(bits)
    codes |= ranks[n:]
    return key_order(codes)


def aggregate_by_lexsort(pre_sv: U64, post_sv: U64) -> tuple[U64, U64, npt.NDArray[np.uint8],
                                                               npt.NDArray[np.uint32]]:
    """:func:`synapse_aggregates` without packing (any number of supervoxels): a lexsort of the columns."""
    m = pre_sv.size
    own = np.concatenate([pre_sv, post_sv])
    partner = np.concatenate([post_sv, pre_sv])
    d = np.repeat(np.asarray([0, 1], np.uint8), m)
    order = np.lexsort((partner, d, own))
    own, partner, d = own[order], partner[order], d[order]
    new = np.ones(2 * m, dtype=bool)
    new[1:] = (own[1:] != own[:-1]) | (partner[1:] != partner[:-1]) | (d[1:] != d[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, 2 * m)).astype(np.uint32)
    return own[starts], partner[starts], d[starts], counts


def order_by(primary: U64, secondary: U64) -> npt.NDArray[np.intp]:
    """The permutation ordering rows by ``(primary, secondary)``, both u64.

    Both keys (relative to their minima) and the row number packed into one u64 and sorted with
    ``np.sort`` when they fit (the usual case: a range's block and ids); else a sort of ``secondary``
    (:func:`key_order`), then the rows' ``primary`` packed with their rank and sorted the same way
    (a stable argsort of a u64 is several times slower); a ``primary`` spanning too many values for
    the packing is stable-argsorted instead.
    """
    n = primary.size
    if n < 2:
        return np.arange(n, dtype=np.intp)
    p_lo, s_lo = primary.min(), secondary.min()
    p_bits, s_bits = int(primary.max() - p_lo).bit_length(), int(secondary.max() - s_lo).bit_length()
    if p_bits + s_bits + (n - 1).bit_length() <= 64:  # (primary, secondary, row) in one u64: one SIMD sort
        code = primary - p_lo
        code <<= np.uint64(s_bits)
        code |= secondary - s_lo
        return key_order(code)
    o1 = key_order(secondary)
    return o1[key_order(primary[o1])]
