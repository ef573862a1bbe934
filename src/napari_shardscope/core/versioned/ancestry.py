"""Compact ancestor sets: "is version id X an ancestor of V" in O(1) after reading V's small record.

Reading a key at version V needs, for every stored entry of the key, whether the entry's version id
is an ancestor of V (:mod:`~napari_shardscope.core.versioned.view`). Walking the DAG to find out
would make every read cost the history. Instead each version gets, when it is created (and never
rewritten), the set of ids of itself and all its ancestors, written as a bitmap over version ids.

Stored naively that is n bits per version, 10⁵ × 10⁵ bits = 1.25 GB for 10⁵ versions. So the bitmap
is cut into pages of :data:`PAGE_BITS` ids, and pages are **copy-on-write between versions**, like
the data keys themselves: a version's record (its *page table*) names, for each page, either
``EMPTY`` (no ancestor there), ``FULL`` (every id there is an ancestor) or the version that stored
the page's bits. A child on a chain inherits its parent's table and stores one page: the page of its
own id, with its own bit added. A merge stores the pages where its parents differ (their union).
Pages are encoded as runs of set bits or as a raw bitmap, whichever is shorter, so a chain's page is a
few bytes and the worst interleaving (two busy branches alternating ids) is 512 bytes.

On disk that is, per version, one page (≤ 512 B, typically ~5 B) plus a table of
``(code, repeat)`` runs (≈ 2 B per page that differs in owner from its neighbour; ``n / 4096`` pages):
~70 B per version for a 10⁵-version history, and never O(n) per version. Loading one is one get for
the table and one batched get for its distinct pages, decoded into one flag byte per id (100 KB
for 10⁵ versions), so a membership test in the read loop is a bytes index, no Python call.

The sets rely on *id order being a topological order* (ids are handed out in creation order and a
version is created after its parents): a version's own id is the largest in its set.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.versioned.engines.protocol import ReadTxn, WriteTxn
from napari_shardscope.core.versioned.errors import StoreCorruptError

PAGE_SHIFT = 12
#: Version ids per page of an ancestor bitmap.
PAGE_BITS = 1 << PAGE_SHIFT
PAGE_MASK = PAGE_BITS - 1
#: Page-table codes; a stored page is ``owner vid + 2``.
EMPTY = 0
FULL = 1
_OWNED = 2
_ZEROS = bytes(PAGE_BITS)
_ONES = b"\x01" * PAGE_BITS
_RUNS, _RAW = 0, 1


class AncestorSet:
    """Ids of a version and all its ancestors: one flag byte per id (0 or 1), trailing zeros trimmed.

    ``vid in s`` works as for a set; hot loops read :attr:`flags` directly
    (``vid < len(flags) and flags[vid]``) to avoid a Python call per stored entry.
    """

    __slots__ = ("flags",)

    def __init__(self, flags: bytes) -> None:
        self.flags = flags.rstrip(b"\x00")

    @classmethod
    def of(cls, ids: Iterable[int]) -> AncestorSet:
        """The set of ``ids`` (tests, small sets)."""
        ids = list(ids)
        if not ids:
            return cls(b"")
        arr = np.zeros(max(ids) + 1, dtype=np.uint8)
        arr[np.asarray(ids, dtype=np.int64)] = 1
        return cls(arr.tobytes())

    def _array(self, size: int) -> np.ndarray:
        out = np.zeros(size, dtype=np.uint8)
        out[: len(self.flags)] = np.frombuffer(self.flags, dtype=np.uint8)
        return out

    def __contains__(self, vid: object) -> bool:
        if not isinstance(vid, int) or vid < 0:
            return False
        return vid < len(self.flags) and self.flags[vid] == 1

    def __iter__(self) -> Iterator[int]:
        """Ids ascending."""
        return iter(np.flatnonzero(np.frombuffer(self.flags, dtype=np.uint8)).tolist())

    def descending(self) -> list[int]:
        """Ids, newest (largest) first."""
        out: list[int] = np.flatnonzero(np.frombuffer(self.flags, dtype=np.uint8))[::-1].tolist()
        return out

    def __len__(self) -> int:
        return self.flags.count(1)

    def __bool__(self) -> bool:
        return bool(self.flags)

    def max(self) -> int:
        """The largest id (the version itself); -1 when empty."""
        return len(self.flags) - 1

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AncestorSet):
            return self.flags == other.flags
        if isinstance(other, set | frozenset):
            return set(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.flags)

    def _combine(self, other: AncestorSet | Iterable[int], op: str) -> AncestorSet:
        o = other if isinstance(other, AncestorSet) else AncestorSet.of(other)
        size = max(len(self.flags), len(o.flags))
        a, b = self._array(size), o._array(size)
        if op == "|":
            r = a | b
        elif op == "&":
            r = a & b
        else:
            r = a & (1 - b)
        return AncestorSet(r.astype(np.uint8).tobytes())

    def __or__(self, other: AncestorSet | Iterable[int]) -> AncestorSet:
        return self._combine(other, "|")

    def __and__(self, other: AncestorSet | Iterable[int]) -> AncestorSet:
        return self._combine(other, "&")

    def __sub__(self, other: AncestorSet | Iterable[int]) -> AncestorSet:
        return self._combine(other, "-")

    def __repr__(self) -> str:
        ids = list(self)
        shown = ", ".join(map(str, ids[:8])) + (", …" if len(ids) > 8 else "")
        return f"AncestorSet({{{shown}}}, n={len(ids)})"


# -- encodings ----------------------------------------------------------------------------------


def _varints(values: Iterable[int]) -> bytes:
    out = bytearray()
    for v in values:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def _read_varints(data: bytes, start: int = 0) -> list[int]:
    out: list[int] = []
    value = shift = 0
    for byte in data[start:]:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift > 63:
                raise StoreCorruptError("ancestor record: varint too long")
        else:
            out.append(value)
            value = shift = 0
    if shift:
        raise StoreCorruptError("ancestor record: truncated varint")
    return out


def encode_table(codes: Sequence[int]) -> bytes:
    """A page table as ``(code, repeat)`` varint runs (neighbouring pages often share an owner)."""
    runs: list[int] = []
    i = 0
    while i < len(codes):
        j = i + 1
        while j < len(codes) and codes[j] == codes[i]:
            j += 1
        runs += (codes[i], j - i)
        i = j
    return _varints(runs)


def decode_table(data: bytes) -> list[int]:
    """Inverse of :func:`encode_table`."""
    values = _read_varints(data)
    if len(values) % 2:
        raise StoreCorruptError("ancestor record: odd number of run fields")
    codes: list[int] = []
    for code, repeat in zip(values[::2], values[1::2], strict=True):
        if repeat < 1 or len(codes) + repeat > (K.MAX_ID >> PAGE_SHIFT) + 1:
            raise StoreCorruptError("ancestor record: bad run length")
        codes += [code] * repeat
    return codes


#: Runs :func:`encode_page` finds by byte search before it lets numpy find them all.
_FEW_RUNS = 32


def encode_page(flags: bytes) -> bytes:
    """A page's flag bytes (PAGE_BITS of them) as runs of set ids or a raw bitmap, the shorter.

    A chain's pages are a few runs: found by byte search (a version adopted costs one page, so this
    is per version); past :data:`_FEW_RUNS` runs numpy finds them. Both give the same bytes.
    """
    fields: list[int] = []
    prev = 0
    pos = flags.find(1)
    while pos != -1 and len(fields) < 2 * _FEW_RUNS:
        end = flags.find(0, pos)
        if end == -1:
            end = len(flags)
        fields += (pos - prev, end - pos)
        prev = end
        pos = flags.find(1, end)
    if pos == -1:
        runs = bytes([_RUNS]) + _varints(fields)
        raw_len = 1 + (prev + 7) // 8  # the packed bitmap up to its last set bit
        if len(runs) <= raw_len:
            return runs
    return _encode_page_numpy(flags)


def _encode_page_numpy(flags: bytes) -> bytes:
    arr = np.frombuffer(flags, dtype=np.uint8)
    edges = np.diff(np.concatenate(([0], arr, [0])).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    fields: list[int] = []
    prev = 0
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        fields += (s - prev, e - s)
        prev = e
    runs = bytes([_RUNS]) + _varints(fields)
    raw = bytes([_RAW]) + np.packbits(arr, bitorder="little").tobytes().rstrip(b"\x00")
    return runs if len(runs) <= len(raw) else raw


def decode_page(data: bytes) -> bytes:
    """Inverse of :func:`encode_page`: PAGE_BITS flag bytes."""
    if not data:
        raise StoreCorruptError("ancestor page: empty record")
    if data[0] == _RAW:
        if len(data) - 1 > PAGE_BITS // 8:
            raise StoreCorruptError("ancestor page: bitmap too long")
        bits = np.frombuffer(data[1:], dtype=np.uint8)
        flags = np.unpackbits(bits, bitorder="little").tobytes()
        return flags + _ZEROS[len(flags):]
    if data[0] != _RUNS:
        raise StoreCorruptError(f"ancestor page: unknown encoding {data[0]}")
    out = bytearray(PAGE_BITS)
    fields = _read_varints(data, 1)
    if len(fields) % 2:
        raise StoreCorruptError("ancestor page: odd number of run fields")
    pos = 0
    for gap, length in zip(fields[::2], fields[1::2], strict=True):
        start = pos + gap
        pos = start + length
        if pos > PAGE_BITS:
            raise StoreCorruptError("ancestor page: run past the page end")
        out[start:pos] = _ONES[:length]
    return bytes(out)


# -- reading and writing ------------------------------------------------------------------------


def page_table_key(vid: int) -> bytes:
    """Where version ``vid``'s page table lives."""
    return K.ANCESTOR_PREFIX + K.pack_u32(vid)


def page_key(owner: int, page: int) -> bytes:
    """Where page ``page`` stored by version ``owner`` lives."""
    return K.ANCESTOR_PAGE_PREFIX + K.pack_u32(owner) + K.pack_u32(page)


def read_table(txn: ReadTxn, vid: int) -> list[int]:
    """Version ``vid``'s page codes (a missing record is a damaged store)."""
    raw = txn.get(page_table_key(vid))
    if raw is None:
        raise StoreCorruptError(f"version id {vid} has no ancestor record")
    return decode_table(raw)


class PageReader:
    """Page contents by ``(code, page)``, read once per use (a migration or a verify reuses them).

    A writer's reader also remembers the page tables and pages it wrote (:func:`write_ancestors`),
    so adopting a chain of versions in one transaction reads nothing back: each version's table is
    its parent's with one code changed, and its own page its parent's with one bit more.
    """

    def __init__(self, txn: ReadTxn, limit: int = 4096) -> None:
        self._txn = txn
        self._cache: dict[tuple[int, int], bytes] = {}
        self._tables: dict[int, list[int]] = {}
        #: Run fields (:func:`encode_page`'s) of pages this reader's writer stored as runs: a chain's next
        #: page is its parent's with the last run grown or one run added, encoded without the flag bytes.
        self.fields: dict[tuple[int, int], list[int]] = {}
        self._limit = limit

    def table(self, vid: int) -> list[int]:
        """Version ``vid``'s page codes: remembered if this reader wrote them, else read."""
        hit = self._tables.get(vid)
        return list(hit) if hit is not None else read_table(self._txn, vid)

    def remember(self, vid: int, codes: list[int], pages: dict[int, bytes]) -> None:
        """What :func:`write_ancestors` just wrote for ``vid`` (its table and the pages it owns)."""
        if len(self._tables) >= self._limit:
            self._tables.clear()
        self._tables[vid] = codes
        if len(self._cache) + len(pages) > self._limit:
            self._cache.clear()
        for i, flags in pages.items():
            self._cache[(vid + _OWNED, i)] = flags

    def remember_fields(self, code: int, page: int, fields: list[int]) -> None:
        """The run fields of page ``page`` stored under ``code`` (bounded like the other caches)."""
        if len(self.fields) >= self._limit:
            self.fields.clear()
        self.fields[(code, page)] = fields

    def pages(self, wanted: Sequence[tuple[int, int]]) -> list[bytes]:
        """Flag bytes of each ``(code, page)``, with one batched engine read for the stored ones."""
        found = {w: self._cache[w] for w in wanted if w[0] >= _OWNED and w in self._cache}
        missing = sorted({w for w in wanted if w[0] >= _OWNED and w not in found})
        if missing:
            raws = self._txn.get_many([page_key(code - _OWNED, page) for code, page in missing])
            if len(self._cache) + len(missing) > self._limit:
                self._cache.clear()
            for (code, page), raw in zip(missing, raws, strict=True):
                if raw is None:
                    raise StoreCorruptError(f"ancestor page {page} of version id {code - _OWNED} is missing")
                found[(code, page)] = self._cache[(code, page)] = decode_page(raw)
        return [_ZEROS if code == EMPTY else _ONES if code == FULL else found[(code, page)] for code, page in wanted]


def load_ancestors(txn: ReadTxn, vid: int, pages: PageReader | None = None) -> AncestorSet:
    """The ancestor set of version ``vid``: its table, then its distinct pages in one batched read."""
    codes = read_table(txn, vid)
    reader = pages or PageReader(txn)
    return AncestorSet(b"".join(reader.pages([(c, i) for i, c in enumerate(codes)])))


def _code_of(flags: bytes, owner: int) -> int:
    if flags == _ZEROS:
        return EMPTY
    if flags == _ONES:
        return FULL
    return owner + _OWNED


def write_ancestors(txn: WriteTxn, vid: int, parents: Sequence[int], pages: PageReader | None = None) -> None:
    """Store version ``vid``'s ancestor set: its parents' union plus itself, copy-on-write by page.

    Costs O(pages of the history) for the table and O(pages where the parents differ) page reads,
    whatever the number of ancestors.
    """
    if any(p >= vid for p in parents):
        raise StoreCorruptError(f"version id {vid}: a parent has a larger id (ids must be a topological order)")
    reader = pages or PageReader(txn)
    tables = [reader.table(p) for p in parents]
    own_page = vid >> PAGE_SHIFT
    size = max([own_page + 1, *(len(t) for t in tables)])
    if len(tables) == 1:  # a chain: the parent's table, with the own page changed below
        codes = tables[0] + [EMPTY] * (size - len(tables[0]))
        if _write_chain_page(txn, vid, codes, reader):
            return
        fresh: dict[int, bytes] = {}  # page -> flags this version stores itself
    else:
        codes, fresh = _merged_codes(reader, tables, size, vid)
    current = fresh.get(own_page) or reader.pages([(codes[own_page], own_page)])[0]
    bit = vid & PAGE_MASK
    fresh[own_page] = current[:bit] + b"\x01" + current[bit + 1:]
    owned: dict[int, bytes] = {}
    for i, flags in fresh.items():
        codes[i] = _code_of(flags, vid)
        if codes[i] >= _OWNED:
            encoded = encode_page(flags)
            txn.put(page_key(vid, i), encoded)
            owned[i] = flags
            if encoded[0] == _RUNS:
                reader.remember_fields(codes[i], i, _read_varints(encoded, 1))
    txn.put(page_table_key(vid), encode_table(codes))
    reader.remember(vid, codes, owned)


def _write_chain_page(txn: WriteTxn, vid: int, codes: list[int], reader: PageReader) -> bool:
    """Store a chain version's records from its parent's run fields, without its page's flag bytes.

    ``codes`` is the parent's table padded. Every id of the version's set is below its own (ids are a
    topological order), so its own page is the parent's with the last run grown by one (the id right
    after it) or one run of one added: the fields :func:`encode_page` would find in the flags. Taken
    only when :func:`encode_page` would return those runs (at most ``_FEW_RUNS`` of them and no
    longer than the packed bitmap), so the bytes are the same; False (nothing written) otherwise.
    """
    own_page, bit = vid >> PAGE_SHIFT, vid & PAGE_MASK
    code = codes[own_page]
    fields = [] if code == EMPTY else reader.fields.get((code, own_page)) if code >= _OWNED else None
    if fields is None:
        return False
    end = sum(fields)  # where the last run ends
    if bit < end:
        return False
    grown = bool(fields) and bit == end
    new = [*fields[:-1], fields[-1] + 1] if grown else [*fields, bit - end, 1]
    runs = bytes([_RUNS]) + _varints(new)
    if len(new) > 2 * _FEW_RUNS or len(runs) > 1 + (bit + 1 + 7) // 8:
        return False
    if new == [0, PAGE_BITS]:
        codes[own_page] = FULL
    else:
        codes[own_page] = vid + _OWNED
        txn.put(page_key(vid, own_page), runs)
        reader.remember_fields(vid + _OWNED, own_page, new)
    txn.put(page_table_key(vid), encode_table(codes))
    reader.remember(vid, codes, {})
    return True


def _merged_codes(reader: PageReader, tables: list[list[int]], size: int,
                  vid: int) -> tuple[list[int], dict[int, bytes]]:
    """Page codes of the union of several parents' sets, and the pages ``vid`` must store itself."""
    padded = [t + [EMPTY] * (size - len(t)) for t in tables] or [[EMPTY] * size]
    codes = list(padded[0])
    fresh: dict[int, bytes] = {}
    for i in range(size):
        distinct = sorted({t[i] for t in padded})
        if len(distinct) == 1 or FULL in distinct:
            codes[i] = FULL if FULL in distinct else distinct[0]
            continue
        contents = reader.pages([(c, i) for c in distinct])
        union = np.bitwise_or.reduce([np.frombuffer(c, dtype=np.uint8) for c in contents]).tobytes()
        same = [c for c, content in zip(distinct, contents, strict=True) if content == union]
        if same:
            codes[i] = same[0]
        else:
            fresh[i] = union
            codes[i] = _code_of(union, vid)
    return codes, fresh
