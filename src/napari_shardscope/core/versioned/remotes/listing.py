"""A version's key listing checked against its data objects: the listing must point where the data is.

A lazy clone reads a value by slicing the data object at the byte range the key listing gives
(:mod:`~napari_shardscope.core.versioned.hollow`); the slice is of an object whose hash is checked, but
nothing at read time says the range is that key's value. A listing written wrong (by another writer, or
a bug) would hand a lazy clone another key's bytes while an eager clone, which reads the data objects
themselves, sees the right ones. ``remote check`` therefore compares every listed range with where the
data objects hold that record.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from napari_shardscope.core.versioned.hollow import STUB
from napari_shardscope.core.versioned.node import NodeEntry, NodeLog
from napari_shardscope.core.versioned.remotes.pack import NodeHeader

#: Disagreements named in full before the rest are counted.
SHOWN = 3

Place = tuple[int, int, int] | None  # (data object index, value offset, value length); None for a tombstone


def _where(record: NodeEntry | NodeLog) -> tuple[str, str, bytes | int]:
    if isinstance(record, NodeEntry):
        return "key", record.instance, record.key
    return "log", record.instance, record.seq


def listing_problems(header: NodeHeader, listed: Iterable[NodeEntry | NodeLog],
                     data: Sequence[Iterable[tuple[NodeEntry | NodeLog, int]]]) -> list[str]:
    """What in ``header``'s key listing (``listed``, as :func:`~.pack.decode_keys` gives it) disagrees with the
    records of its data objects (``data[i]``: :func:`~.pack.data_records_at` of data object ``i``); empty when
    every record is listed once, at the byte range of its value, tombstones as tombstones."""
    held: dict[tuple[str, str, bytes | int], Place] = {}
    for index, records in enumerate(data):
        for record, offset in records:
            value = record.value if isinstance(record, NodeEntry) else record.data
            held[_where(record)] = None if value is None else (index, offset, len(value))
    wrong: list[str] = []
    seen: set[tuple[str, str, bytes | int]] = set()
    for record in listed:
        where = _where(record)
        stub = record.value if isinstance(record, NodeEntry) else record.data
        place: Place = None if stub is None else STUB.unpack(stub)
        seen.add(where)
        if where not in held:
            wrong.append(f"{where[0]} {where[2]!r} of {where[1]} is listed but in no data object")
        elif held[where] != place:
            wrong.append(f"{where[0]} {where[2]!r} of {where[1]} is listed at {_place(place)}, "
                         f"the data holds it at {_place(held[where])}")
    wrong.extend(f"{w[0]} {w[2]!r} of {w[1]} is in the data but not listed" for w in held if w not in seen)
    if not wrong:
        return []
    more = f" (and {len(wrong) - SHOWN} more)" if len(wrong) > SHOWN else ""
    return [f"version {header.uuid}: key listing {header.keys} disagrees with its data objects: "
            + "; ".join(wrong[:SHOWN]) + more + " (a lazy clone would read other bytes than an eager one)"]


def _place(place: Place) -> str:
    if place is None:
        return "a tombstone"
    index, offset, length = place
    return f"data object {index} bytes {offset}…{offset + length}"
