"""Coalescing byte-range reads: nearby ranges of one key fetched as one request, sliced back apart.

Why: on a remote store every range read is a request, and requests are what cost — a round trip
once the store's concurrency limit is reached, CPU on both ends, and on a bucket an operation
billed per request — while the bytes between two close ranges cost little. A precomputed shard
written by TensorStore keeps each minishard index right after that minishard's chunk data, so the
16 indexes of a 350 KB shard lie 20-30 KB apart: read one by one they are 16 requests, coalesced
they are one.

The rule is a gap threshold, as TensorStore's and Apache Arrow ``object_store``'s batch readers use:
two ranges of the same key whose gap is at most ``max_gap`` bytes are fetched together, while the
fetch spans at most ``max_span`` bytes (a single range longer than that is fetched as it is). The
threshold is the number of bytes worth one request; it depends on the store (see
:data:`~napari_shardscope.core.bytestore.remote.REMOTE_COALESCE_GAP`; local files never coalesce).

Each answer is the slice of its fetch, so coalesced reads return exactly what separate reads
return: ``None`` for a missing key, and a shorter (possibly empty) answer where the key ends first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from napari_shardscope.core.errors import ArgumentError

#: A ``(key, start, end)`` byte-range request, ``end`` exclusive.
RangeRequest = tuple[str, int, int]


@dataclass(frozen=True)
class CoalescedPlan:
    """The fetches that cover a list of requests, and where each request's bytes lie in them.

    Attributes
    ----------
    fetches
        The ``(key, start, end)`` ranges to read, one request each.
    members
        Per request (in the caller's order): the index of the fetch holding it and the request's
        offset inside that fetch.
    """

    fetches: tuple[RangeRequest, ...]
    members: tuple[tuple[int, int], ...]


def check_range(key: str, start: int, end: int) -> None:
    """Refuse a range that is not ``0 <= start <= end`` (an :class:`ArgumentError` naming the key)."""
    if start < 0 or end < start:
        raise ArgumentError(f"byte range [{start}, {end}) of {key!r} is not a valid range")


def plan_coalesced_reads(requests: Sequence[RangeRequest], max_gap: int | None, max_span: int) -> CoalescedPlan:
    """Group ``requests`` into fetches: same key, gaps of at most ``max_gap`` bytes, spans of at most ``max_span``.

    ``max_gap=None`` never coalesces (each non-empty request is its own fetch); ``0`` merges only
    ranges that touch or overlap. Empty ranges (``start == end``) stay their own fetch: they ask
    only whether the key exists. Fetches come in the order of their first request.
    """
    for key, start, end in requests:
        check_range(key, start, end)
    if max_gap is not None and max_gap < 0:
        raise ArgumentError(f"the coalescing gap must be >= 0 bytes or None, got {max_gap}")
    if max_span <= 0:
        raise ArgumentError(f"the coalescing span must be > 0 bytes, got {max_span}")
    order = sorted(range(len(requests)), key=lambda i: (requests[i][0], requests[i][1], requests[i][2]))
    group_of = [0] * len(requests)
    bounds: list[tuple[str, int, int]] = []  # per fetch: key, lo, hi
    current = -1  # the fetch the next range may join (the last non-empty one)
    for i in order:
        key, start, end = requests[i]
        if current >= 0 and max_gap is not None and end > start:
            k, lo, hi = bounds[current]
            if k == key and start - hi <= max_gap and max(hi, end) - lo <= max_span:
                bounds[current] = (k, lo, max(hi, end))
                group_of[i] = current
                continue
        bounds.append((key, start, end))
        group_of[i] = len(bounds) - 1
        if end > start:
            current = len(bounds) - 1
    # Renumber the fetches by their first request in the caller's order.
    first_seen: dict[int, int] = {}
    for i in range(len(requests)):
        first_seen.setdefault(group_of[i], len(first_seen))
    fetches: list[RangeRequest] = [("", 0, 0)] * len(bounds)
    for g, new in first_seen.items():
        fetches[new] = bounds[g]
    members = tuple((first_seen[group_of[i]], requests[i][1] - bounds[group_of[i]][1]) for i in range(len(requests)))
    return CoalescedPlan(tuple(fetches), members)


def read_coalesced(
    fetch: Callable[[Sequence[RangeRequest]], list[bytes | None]],
    requests: Sequence[RangeRequest],
    max_gap: int | None,
    max_span: int,
) -> list[bytes | None]:
    """The bytes of each request, read through ``fetch`` as :func:`plan_coalesced_reads` groups them.

    ``fetch`` reads a list of ranges (concurrently, on a remote store) with ``read_range``'s
    meaning: ``None`` for a missing key, short where the key ends first. Each answer is sliced out
    of its fetch, so it equals what ``read_range`` of the request alone returns.
    """
    plan = plan_coalesced_reads(requests, max_gap, max_span)
    data = fetch(plan.fetches)
    out: list[bytes | None] = []
    for (_key, start, end), (f, offset) in zip(requests, plan.members, strict=True):
        got = data[f]
        if got is None:
            out.append(None)
        elif offset == 0 and len(got) <= end - start:
            out.append(got)  # the fetch is this request (or the key ended inside it): no copy
        else:
            out.append(got[offset : offset + end - start])
    return out
