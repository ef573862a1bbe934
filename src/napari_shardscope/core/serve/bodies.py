"""What the server sends as a response body: a stored key read piece by piece, or bytes computed on request.

The server never holds a whole stored value: it asks a :class:`Body` for its size and then for
:data:`PIECE`-byte ranges, written to the socket one after another, so a 3 GiB shard file costs
one piece of memory per connection however it is asked for. A stored key is read through its byte
store's ``read_range`` (:class:`StoreBody`): every piece passes the store's containment guards
(a key inside the root, links out refused, regular files only). Computed values (a labelmap
version's chunks and meshes, :class:`BytesBody`) are bounded where they are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from napari_shardscope.core.bytestore import ByteStore
from napari_shardscope.core.cache import LruCache
from napari_shardscope.core.errors import NotFoundError, StoreError

#: Bytes read from a store and written to the socket at a time.
PIECE = 1 << 20
#: A remote value's size is probed up to this many bytes (far beyond any object a store holds).
MAX_PROBED_SIZE = 1 << 50


class Body(Protocol):
    """One value to send: its size and its bytes by range."""

    @property
    def cheap_size(self) -> bool:
        """Whether :meth:`size` costs no more than a stat (else a ``bytes=a-b`` range is answered without it)."""
        ...

    def size(self) -> int | None:
        """Length in bytes; ``None`` when the value does not exist."""
        ...

    def read(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` (fewer when the value ends first; ``b""`` past its end); ``None``: no such value."""
        ...


@dataclass(frozen=True)
class BytesBody:
    """A value computed on request (bounded by whoever computed it)."""

    data: bytes

    @property
    def cheap_size(self) -> bool:
        return True

    def size(self) -> int | None:
        return len(self.data)

    def read(self, start: int, end: int) -> bytes | None:
        return self.data[start:end]


class StoreBody:
    """Key ``key`` of a byte store, read by range through the store.

    A local store's size is a stat. A remote store has no stat call: the size is probed with
    range reads (:func:`probe_size`: one read of the first piece for a value shorter than
    :data:`PIECE`, which then serves that piece too; about ``2·log2(size)`` one-byte reads for a
    larger one), never with a whole read, and remembered in ``sizes`` when given.
    """

    def __init__(self, store: ByteStore, key: str, sizes: LruCache[str, int | None] | None = None) -> None:
        self.store = store
        self.key = key
        self._sizes = sizes
        self._size: int | None = None
        self._known = False
        self._head: bytes | None = None  # a remote value's first piece, read while probing its size

    @property
    def cheap_size(self) -> bool:
        return self.store.cheap_size or self._known

    def size(self) -> int | None:
        if not self._known:
            if self.store.cheap_size:
                self._size = self.store.size(self.key)
            elif self._sizes is not None:
                self._size = self._sizes.get_or_load(self.key, self._probe)
            else:
                self._size = self._probe()
            self._known = True
        return self._size

    def _probe(self) -> int | None:
        head = self.store.read_range(self.key, 0, PIECE)
        if head is not None and len(head) < PIECE:
            self._head = head
            return len(head)
        return None if head is None else probe_size(self.store, self.key, PIECE)

    def read(self, start: int, end: int) -> bytes | None:
        if self._head is not None and end <= len(self._head):
            return self._head[start:end]
        return self.store.read_range(self.key, start, end)


def probe_size(store: ByteStore, key: str, at_least: int = 0) -> int:
    """The length of ``key``, known to be at least ``at_least``, from one-byte range reads.

    Doubling finds a length it does not reach, bisection the exact one: ``2·log2(size)`` reads of
    one byte each, where the only other way a remote store offers is reading the whole value.

    Raises
    ------
    NotFoundError
        When the key disappears while it is probed.
    StoreError
        When the store claims more than :data:`MAX_PROBED_SIZE` bytes (a server that answers any range).
    """

    def reaches(n: int) -> bool:  # is the value at least n bytes long?
        got = store.read_range(key, n - 1, n)
        if got is None:
            raise NotFoundError(f"{key!r} disappeared while its size was read")
        return len(got) == 1

    lo = max(0, at_least)
    hi = max(2 * lo, 1)
    while reaches(hi):
        lo, hi = hi, 2 * hi
        if hi > MAX_PROBED_SIZE:
            raise StoreError(f"{key!r} is larger than {MAX_PROBED_SIZE} bytes, more than a store holds")
    while hi - lo > 1:  # lo is reached, hi is not
        mid = (lo + hi) // 2
        if reaches(mid):
            lo = mid
        else:
            hi = mid
    return lo
