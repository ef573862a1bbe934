"""The two binary encodings of precomputed annotations, vectorised.

* **Multiple annotation encoding** (a spatial index cell, a relationship index entry): ``count`` as
  uint64le, then ``count`` records (geometry, properties, padding; :mod:`.schema`), then ``count``
  annotation ids as uint64le. Decoded as one numpy structured-array view over the bytes.
* **Single annotation encoding** (the ``by_id`` index, keyed by the annotation id, which it does not
  contain): one record, then per relationship of the ``info``, in order, the number of related ids as
  uint32le and the ids as uint64le (unaligned).

Hostile bytes get a :class:`ChunkDecodeError` naming the key and the byte offset — a count that
claims more records than the bytes hold, a truncated record, a related-id count running past the
end, bytes left over, a polyline of fewer than two points — and nothing is allocated beyond what the
byte length allows: every count is checked against the bytes before an array is made.

Many single encodings (a whole ``by_id`` shard) are decoded at once from one buffer and their
``[start, end)`` ranges: equal-length, back-to-back records (every annotation with the same number
of related ids, the common case) are one structured view; others are gathered in blocks.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from napari_shardscope.core.errors import ChunkDecodeError
from napari_shardscope.core.formats.precomputed.annotations.schema import AnnotationSchema
from napari_shardscope.core.formats.precomputed.annotations.table import I64, U64, Annotations, Related

#: Annotations gathered or scattered per numpy pass on the general (variable-length) paths: bounds the
#: index arrays to a few MB whatever the batch size.
BLOCK = 1 << 15

#: ``where(i) -> (key, offset)``: where annotation ``i`` of a batch of single encodings is stored.
Where = Callable[[int], tuple[str, int]]

_U32 = struct.Struct("<I")


# -- multiple annotation encoding ------------------------------------------------------------------------
def encode_multiple(batch: Annotations) -> bytes:
    """The multiple annotation encoding of ``batch`` (in its order; relationships are not part of it)."""
    schema = batch.schema
    n = len(batch)
    if schema.annotation_type == "polyline":
        body, _ = polyline_records(batch)
        return b"".join((np.uint64(n).astype("<u8").tobytes(), body.tobytes(), batch.ids.astype("<u8").tobytes()))
    record = schema.layout.record_bytes
    assert record is not None
    out = np.empty(8 + n * (record + 8), dtype=np.uint8)  # one buffer, one copy out
    out[:8] = np.frombuffer(np.uint64(n).astype("<u8").tobytes(), dtype=np.uint8)
    record_words(batch, out[8: 8 + n * record].view("<u4").reshape(n, record // 4))
    out[8 + n * record:].view("<u8")[:] = batch.ids
    return out.tobytes()


def record_words(batch: Annotations, out: npt.NDArray[np.uint32] | None = None) -> npt.NDArray[np.uint32]:
    """The records of a fixed-size geometry type as ``(n, record_bytes / 4)`` little-endian words.

    Every field of both encodings is a whole number of 4-byte words (records are padded to 4, counts
    are uint32, ids two words), so building and reading them as word matrices keeps every copy an
    aligned 2-D copy — several times faster than numpy's structured-field assignment. ``out``
    (``(n, record_bytes / 4)`` words) receives them in place of a new array.
    """
    schema = batch.schema
    record = schema.layout.record_bytes
    assert record is not None
    g = schema.geometry_values
    n = len(batch)
    words = np.empty((n, record // 4), dtype="<u4") if out is None else out
    words.view("<f4")[:, :g] = batch.geometry
    if record // 4 > g:
        words[:, g:] = _property_block(batch).view("<u4").reshape(n, record // 4 - g)
    return words


def _property_block(batch: Annotations) -> npt.NDArray[np.uint8]:
    """Each annotation's property bytes (padding included) as ``(n, property_bytes)`` uint8."""
    layout = batch.schema.layout
    block = np.zeros(len(batch), dtype=layout.properties)
    for spec in batch.schema.properties:
        block[spec.id] = batch.properties[spec.id]
    return block.view(np.uint8).reshape(len(batch), layout.property_bytes)


def polyline_records(batch: Annotations) -> tuple[npt.NDArray[np.uint8], I64]:
    """Polyline records back to back, and each one's start in them."""
    assert batch.point_offsets is not None
    rank = batch.schema.rank
    prop_bytes = batch.schema.layout.property_bytes
    n = len(batch)
    k = np.diff(batch.point_offsets)
    lengths = 4 + 4 * rank * k + prop_bytes
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lengths[:-1], out=starts[1:])
    out = np.zeros(int(lengths.sum()), dtype=np.uint8)
    _scatter(out, starts, k.astype("<u4").view(np.uint8).reshape(n, 4))
    owners = np.repeat(np.arange(n, dtype=np.int64), k)
    within = np.arange(owners.size, dtype=np.int64) - np.repeat(batch.point_offsets[:-1], k)
    point_pos = starts[owners] + 4 + within * 4 * rank
    points = np.ascontiguousarray(batch.geometry.astype("<f4")).view(np.uint8).reshape(-1, 4 * rank)
    _scatter(out, point_pos, points)
    if prop_bytes:
        _scatter(out, starts + 4 + 4 * rank * k, _property_block(batch))
    return out, starts


def decode_multiple(data: bytes | memoryview, schema: AnnotationSchema, *, key: str, offset: int = 0) -> Annotations:
    """Decode one multiple annotation encoding (``relationships`` is ``None``: it does not store them).

    ``key``/``offset`` say where ``data`` is stored, for errors.
    """
    size = len(data)
    if size < 8:
        raise ChunkDecodeError(f"annotation list of {size} bytes has no 8-byte count", key=key, offset=offset)
    count = int.from_bytes(bytes(data[:8]), "little")
    rank = schema.rank
    layout = schema.layout
    minimum = (layout.record_bytes if layout.record_bytes is not None else 4 + 8 * rank + layout.property_bytes) + 8
    if count > (size - 8) // minimum:
        raise ChunkDecodeError(f"annotation count {count} needs at least {8 + count * minimum} bytes, the list has "
                               f"{size}", key=key, offset=offset)
    if layout.dtype is None:
        return _decode_multiple_polylines(data, count, schema, key=key, offset=offset)
    record = minimum - 8
    expected = 8 + count * minimum
    if size != expected:
        raise ChunkDecodeError(f"annotation list of {count} has {size - expected} bytes after its ids",
                               key=key, offset=offset + expected)
    words = _words(data, 8, count, record)
    ids = np.frombuffer(data, dtype="<u8", count=count, offset=8 + count * record).astype(np.uint64)
    return _from_words(schema, ids, words, None)


def _words(data: bytes | memoryview | npt.NDArray[np.uint8], offset: int, n: int, width: int) -> npt.NDArray[np.uint32]:
    """``n`` items of ``width`` bytes at ``offset`` as an ``(n, width / 4)`` uint32 matrix (copied when unaligned)."""
    u8 = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    part = u8[offset: offset + n * width]
    if part.ctypes.data % 4:
        part = part.copy()
    return part.view("<u4").reshape(n, width // 4)


def _from_words(schema: AnnotationSchema, ids: U64, words: npt.NDArray[np.uint32],
                relationships: dict[str, Related] | None) -> Annotations:
    """Annotations from fixed-size records given as a word matrix (records first in each row)."""
    g = schema.geometry_values
    n = int(ids.size)
    geometry = np.ascontiguousarray(words[:, :g]).view("<f4").astype(np.float32, copy=False)
    block = _property_view(words[:, g: g + schema.layout.property_bytes // 4], schema, n)
    return _columns(schema, ids, block, relationships, None, geometry.reshape(n, g))


def _columns(schema: AnnotationSchema, ids: U64, block: npt.NDArray[Any] | None,
             relationships: dict[str, Related] | None, point_offsets: I64 | None,
             geometry: npt.NDArray[np.float32]) -> Annotations:
    """Annotations from the geometry and a structured array of property blocks (``None``: no properties)."""
    props: dict[str, npt.NDArray[Any]] = {}
    for spec in schema.properties:
        assert block is not None
        props[spec.id] = np.ascontiguousarray(block[spec.id], dtype=spec.dtype.newbyteorder("="))
    return Annotations(schema, ids, geometry, props, relationships, point_offsets)


def _property_view(raw: npt.NDArray[Any], schema: AnnotationSchema, n: int) -> npt.NDArray[Any] | None:
    """Property blocks (``(n, property_bytes)`` bytes or words, contiguous) as the structured property dtype."""
    if not schema.properties:
        return None
    return np.ascontiguousarray(raw).view(schema.layout.properties).reshape(n)


def _decode_multiple_polylines(data: bytes | memoryview, count: int, schema: AnnotationSchema, *, key: str,
                               offset: int) -> Annotations:
    """Polylines vary in length: the records are walked once to find where each starts."""
    rank = schema.rank
    prop_bytes = schema.layout.property_bytes
    size = len(data)
    end = size - 8 * count  # the ids take the last 8 * count bytes
    starts = np.zeros(count, dtype=np.int64)
    ks = np.zeros(count, dtype=np.int64)
    pos = 8
    buf = bytes(data) if isinstance(data, memoryview) else data
    for i in range(count):
        if pos + 4 > end:
            raise ChunkDecodeError(f"polyline {i} of {count} starts past the records", key=key, offset=offset + pos)
        k = _U32.unpack_from(buf, pos)[0]
        if k < 2:
            raise ChunkDecodeError(f"polyline {i} has {k} points; a polyline has at least 2", key=key,
                                   offset=offset + pos)
        length = 4 + 4 * rank * k + prop_bytes
        if pos + length > end:
            raise ChunkDecodeError(f"polyline {i} of {k} points runs past the records (needs {length} bytes)",
                                   key=key, offset=offset + pos)
        starts[i], ks[i] = pos, k
        pos += length
    if pos != end:
        raise ChunkDecodeError(f"annotation list of {count} polylines has {end - pos} bytes between its records "
                               "and its ids", key=key, offset=offset + pos)
    ids = np.frombuffer(buf, dtype="<u8", count=count, offset=end).astype(np.uint64)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    geometry, point_offsets = _gather_points(u8, starts + 4, ks, rank)
    block = _property_view(_gather(u8, starts + 4 + 4 * rank * ks, prop_bytes), schema, count)
    return _columns(schema, ids, block, None, point_offsets, geometry)


def _gather_points(u8: npt.NDArray[np.uint8], starts: I64, ks: I64, rank: int) -> tuple[npt.NDArray[np.float32], I64]:
    point_offsets = np.zeros(ks.size + 1, dtype=np.int64)
    np.cumsum(ks, out=point_offsets[1:])
    within = np.arange(int(point_offsets[-1]), dtype=np.int64) - np.repeat(point_offsets[:-1], ks)
    pos = np.repeat(starts, ks) + within * 4 * rank
    rows = _gather(u8, pos, 4 * rank)
    return rows.view("<f4").astype(np.float32).reshape(-1, rank), point_offsets


# -- single annotation encoding --------------------------------------------------------------------------
def encode_single(batch: Annotations, i: int) -> bytes:
    """The single annotation encoding of annotation ``i`` (what ``by_id/<id>`` holds)."""
    buf, starts, ends = encode_single_many(batch.take([i]))
    return buf[int(starts[0]): int(ends[0])].tobytes()


def encode_single_many(batch: Annotations) -> tuple[npt.NDArray[np.uint8], I64, I64]:
    """Every annotation's single encoding, back to back in batch order: ``(buffer, starts, ends)``.

    Raises ``ArgumentError`` (from :func:`~.table.make_annotations`' checks) only through a batch
    without relationships when the schema has some.
    """
    schema = batch.schema
    n = len(batch)
    rels = _relationships_of(batch)
    if n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    counts = [r.counts for r in rels]
    if schema.annotation_type == "polyline":
        records, rec_starts = polyline_records(batch)
        rec_lengths = np.diff(np.append(rec_starts, records.size))
    else:
        constant = [c for c in counts if c.size and np.all(c == c[0])]
        if len(constant) == len(counts):  # one word matrix holds it all
            return _encode_single_constant(batch, rels)
        records = record_words(batch).view(np.uint8).reshape(-1)
        record = schema.layout.record_bytes
        assert record is not None
        rec_lengths = np.full(n, record, dtype=np.int64)
        rec_starts = np.arange(n, dtype=np.int64) * record
    lengths = rec_lengths + sum((4 + 8 * c for c in counts), np.zeros(n, dtype=np.int64))
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(lengths[:-1], out=starts[1:])
    out = np.zeros(int(lengths.sum()), dtype=np.uint8)
    fixed = records.reshape(n, -1) if schema.annotation_type != "polyline" else None
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        if fixed is not None:
            _scatter(out, starts[a:b], fixed[a:b])
        else:  # variable records: a block's records are contiguous in ``records``
            src0, src1 = int(rec_starts[a]), int(rec_starts[b - 1] + rec_lengths[b - 1])
            rows = _ragged_rows(records[src0:src1], rec_starts[a:b] - src0, rec_lengths[a:b])
            _scatter_ragged(out, starts[a:b], rows, rec_lengths[a:b])
    pos = starts + rec_lengths
    for rel, c in zip(rels, counts, strict=True):
        _scatter(out, pos, c.astype("<u4").view(np.uint8).reshape(n, 4))
        owners = rel.owners()
        within = np.arange(rel.values.size, dtype=np.int64) - np.repeat(rel.offsets[:-1], c)
        _scatter(out, pos[owners] + 4 + 8 * within, rel.values.astype("<u8").view(np.uint8).reshape(-1, 8))
        pos = pos + 4 + 8 * c
    return out, starts, starts + lengths


def _encode_single_constant(batch: Annotations, rels: list[Related]) -> tuple[npt.NDArray[np.uint8], I64, I64]:
    """Every annotation has the same related-id counts: the encodings are rows of one word matrix."""
    n = len(batch)
    rec = record_words(batch)
    widths = [rec.shape[1]] + [1 + 2 * (int(r.counts[0]) if n else 0) for r in rels]
    out = np.empty((n, sum(widths)), dtype="<u4")
    out[:, : widths[0]] = rec
    col = widths[0]
    for rel, width in zip(rels, widths[1:], strict=True):
        out[:, col] = rel.counts
        out[:, col + 1: col + width] = rel.values.astype("<u8", copy=False).view("<u4").reshape(n, width - 1)
        col += width
    length = 4 * col
    starts = np.arange(n, dtype=np.int64) * length
    return out.view(np.uint8).reshape(-1), starts, starts + length


def _relationships_of(batch: Annotations) -> list[Related]:
    from napari_shardscope.core.errors import ArgumentError

    names = batch.schema.relationships
    if not names:
        return []
    if batch.relationships is None:
        raise ArgumentError(f"these annotations carry no related ids, and the schema has relationships "
                            f"{list(names)}: read them from by_id, or give them")
    return [batch.relationships[name] for name in names]


def decode_single(data: bytes | memoryview, schema: AnnotationSchema, annotation_id: int, *, key: str,
                  offset: int = 0) -> Annotations:
    """Decode one single annotation encoding (the annotation's id is the key it was stored under)."""
    return decode_single_many(data, np.zeros(1, np.int64), np.asarray([len(data)], np.int64),
                              np.asarray([annotation_id], np.uint64), schema, where=lambda i: (key, offset))


def decode_single_many(data: bytes | memoryview | npt.NDArray[np.uint8], starts: I64, ends: I64, ids: U64,
                       schema: AnnotationSchema, *, where: Where) -> Annotations:
    """Decode the single encodings at ``data[starts[i]:ends[i]]``, annotation ``ids[i]`` each.

    ``where(i)`` gives the key and offset of encoding ``i``, for errors (the offset in the message is
    that plus the position inside the encoding).
    """
    u8 = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    n = int(ids.size)
    starts = starts.astype(np.int64, copy=False)
    ends = ends.astype(np.int64, copy=False)
    lengths = ends - starts
    rank = schema.rank
    layout = schema.layout
    nrel = len(schema.relationships)

    def fail(i: int, message: str, at: int) -> ChunkDecodeError:
        key, base = where(i)
        return ChunkDecodeError(f"annotation {int(ids[i])}: {message}", key=key, offset=base + at)

    if n and (int(starts.min()) < 0 or int(ends.max()) > u8.size or bool(np.any(lengths < 0))):
        raise ChunkDecodeError("annotation ranges outside the buffer", key=where(0)[0], offset=where(0)[1])
    if layout.dtype is not None:
        record = layout.record_bytes
        assert record is not None
        short = np.flatnonzero(lengths < record + 4 * nrel)
        if short.size:
            i = int(short[0])
            raise fail(i, f"{int(lengths[i])} bytes, less than the {record + 4 * nrel} of a record and its "
                       f"{nrel} related-id counts", int(lengths[i]))
        fast = _decode_single_constant(u8, starts, lengths, ids, schema)
        if fast is not None:
            return fast
        words = _gather(u8, starts, record).view("<u4")
        g = schema.geometry_values
        geometry = np.ascontiguousarray(words[:, :g]).view("<f4").astype(np.float32, copy=False).reshape(n, g)
        rec = _property_view(words[:, g:], schema, n)
        point_offsets = None
        rec_lengths = np.full(n, record, dtype=np.int64)
    else:
        prop_bytes = layout.property_bytes
        short = np.flatnonzero(lengths < 4)
        if short.size:
            raise fail(int(short[0]), "no polyline point count", 0)
        ks = _gather(u8, starts, 4).view("<u4").reshape(n).astype(np.int64)
        few = np.flatnonzero(ks < 2)
        if few.size:
            i = int(few[0])
            raise fail(i, f"polyline of {int(ks[i])} points; a polyline has at least 2", 0)
        rec_lengths = 4 + 4 * rank * ks + prop_bytes
        short = np.flatnonzero(lengths < rec_lengths + 4 * nrel)
        if short.size:
            i = int(short[0])
            raise fail(i, f"{int(lengths[i])} bytes, less than the {int(rec_lengths[i]) + 4 * nrel} its "
                       f"{int(ks[i])}-point polyline and {nrel} related-id counts take", int(lengths[i]))
        geometry, point_offsets = _gather_points(u8, starts + 4, ks, rank)
        rec = _property_view(_gather(u8, starts + 4 + 4 * rank * ks, prop_bytes), schema, n)
    relationships: dict[str, Related] = {}
    pos = starts + rec_lengths
    for name in schema.relationships:
        room = ends - pos
        if bool(np.any(room < 4)):
            i = int(np.flatnonzero(room < 4)[0])
            raise fail(i, f"ends before the related-id count of {name!r}", int(pos[i] - starts[i]))
        counts = _gather(u8, pos, 4).view("<u4").reshape(n).astype(np.int64)
        over = np.flatnonzero(counts * 8 > room - 4)
        if over.size:
            i = int(over[0])
            raise fail(i, f"{int(counts[i])} {name!r} ids need {8 * int(counts[i])} bytes, {int(room[i]) - 4} "
                       "remain", int(pos[i] - starts[i]))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], counts)
        values = _gather(u8, np.repeat(pos + 4, counts) + 8 * within, 8).view("<u8").reshape(-1).astype(np.uint64)
        relationships[name] = Related(offsets, values)
        pos = pos + 4 + 8 * counts
    extra = np.flatnonzero(pos != ends)
    if extra.size:
        i = int(extra[0])
        raise fail(i, f"{int(ends[i] - pos[i])} bytes after its last related id", int(pos[i] - starts[i]))
    return _columns(schema, ids.astype(np.uint64, copy=True), rec, relationships, point_offsets, geometry)


def _decode_single_constant(u8: npt.NDArray[np.uint8], starts: I64, lengths: I64, ids: U64,
                            schema: AnnotationSchema) -> Annotations | None:
    """The fast path: equal-length encodings back to back, each relationship with one count throughout.

    The encodings are then rows of one word matrix; ``None`` when they are not.
    """
    n = int(ids.size)
    record = schema.layout.record_bytes
    if n == 0 or record is None:
        return None
    length = int(lengths[0])
    first = int(starts[0])
    if length % 4 or np.any(lengths != length) or np.any(np.diff(starts) != length) or first + n * length > u8.size:
        return None
    words = _words(u8, first, n, length)
    col = record // 4
    spans: list[tuple[int, int]] = []
    for _name in schema.relationships:
        if col >= words.shape[1]:
            return None
        counts = words[:, col]
        c = int(counts[0])
        if np.any(counts != c) or col + 1 + 2 * c > words.shape[1]:
            return None
        spans.append((col + 1, c))
        col += 1 + 2 * c
    if col != words.shape[1]:
        return None
    relationships: dict[str, Related] = {}
    for name, (at, c) in zip(schema.relationships, spans, strict=True):
        values = np.ascontiguousarray(words[:, at: at + 2 * c]).view("<u8").reshape(-1).astype(np.uint64, copy=False)
        relationships[name] = Related(np.arange(n + 1, dtype=np.int64) * c, values)
    return _from_words(schema, ids.astype(np.uint64, copy=True), words, relationships)


# -- gathers and scatters, a block at a time -------------------------------------------------------------------
def _gather(u8: npt.NDArray[np.uint8], starts: I64, width: int) -> npt.NDArray[np.uint8]:
    """``u8[starts[i]: starts[i] + width]`` for each ``i``, as ``(n, width)`` (ranges checked by the caller)."""
    n = int(starts.size)
    out = np.empty((n, width), dtype=np.uint8)
    if width == 0 or n == 0:
        return out
    cols = np.arange(width, dtype=np.int64)
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        out[a:b] = u8[starts[a:b, None] + cols]
    return out


def _scatter(out: npt.NDArray[np.uint8], starts: I64, rows: npt.NDArray[np.uint8]) -> None:
    """``out[starts[i]: starts[i] + width] = rows[i]`` for each ``i``."""
    n, width = rows.shape
    if width == 0 or n == 0:
        return
    cols = np.arange(width, dtype=np.int64)
    for a in range(0, n, BLOCK):
        b = min(n, a + BLOCK)
        out[starts[a:b, None] + cols] = rows[a:b]


def _ragged_rows(src: npt.NDArray[np.uint8], starts: I64, lengths: I64) -> npt.NDArray[np.uint8]:
    """The bytes of each ``[start, start + length)`` of ``src``, back to back (a flat array)."""
    total = int(lengths.sum())
    offsets = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    index = np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)
    return src[index]


def _scatter_ragged(out: npt.NDArray[np.uint8], starts: I64, flat: npt.NDArray[np.uint8], lengths: I64) -> None:
    offsets = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    index = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    out[index] = flat
