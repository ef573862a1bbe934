"""Repository-wide id counters, and the blocks of ids a clone reserves from its remote.

Label and annotation ids must never be handed out twice, across versions and, in a clone, across
every clone of one remote: a clone set to reserve (:meth:`IdCounters.set_id_source`) allocates only
from blocks reserved from the remote (``remotes.reservation``). These counters are unversioned state
of the whole repository, apart from the data of any version. Split out of the repository module
(issue 30), unchanged: :class:`~.repository.Repository` inherits it.
"""

from __future__ import annotations

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.handle import RepositoryHandle
from napari_shardscope.core.versioned.view import allocate_ids, decode_blocks, encode_blocks


class IdCounters(RepositoryHandle):
    """The id counters and reserved id blocks of :class:`~.repository.Repository`."""

    def allocate_ids(self, counter: str, count: int = 1, *, minimum: int = 1,
                     timeout: float | None = None) -> range:
        """Reserve ``count`` fresh integers from a repository-wide (unversioned) counter.

        See :meth:`VersionWriter.allocate_ids`; this form is its own transaction.
        """
        with self._writing(timeout) as p:
            return allocate_ids(p.txn, counter, count, minimum)

    # -- id reservations (clones of a remote) -----------------------------------------------------

    def id_source(self) -> str | None:
        """The remote this repository reserves ids from (None: it hands out its own)."""
        with self._engine.read() as txn:
            raw = txn.get(K.RESERVATION_MODE_KEY)
        return None if raw is None else raw.decode()

    def set_id_source(self, remote: str, *, timeout: float | None = None) -> None:
        """From now on allocate every counter's ids only from blocks reserved from ``remote``."""
        with self._writing(timeout) as p:
            p.txn.put(K.RESERVATION_MODE_KEY, remote.encode())

    def id_blocks(self, counter: str) -> list[tuple[int, int]]:
        """The unused reserved blocks ``[(start, end), ...]`` of ``counter``."""
        with self._engine.read() as txn:
            return decode_blocks(txn.get(K.RESERVATION_PREFIX + counter.encode("utf-8")))

    def counters(self) -> dict[str, int]:
        """Every local counter and the next id it would hand out (what a first push uploads)."""
        out: dict[str, int] = {}
        with self._engine.read() as txn:
            for key, value in txn.scan(K.COUNTER_PREFIX, K.next_prefix(K.COUNTER_PREFIX)):
                out[key[len(K.COUNTER_PREFIX):].decode("utf-8")] = K.unpack_u64(value)
            for key in txn.scan_keys(K.RESERVATION_PREFIX, K.next_prefix(K.RESERVATION_PREFIX)):
                out.setdefault(key[len(K.RESERVATION_PREFIX):].decode("utf-8"), 0)
        return out

    def add_id_block(self, counter: str, ids: range, *, timeout: float | None = None) -> None:
        """Record a block of ids reserved from the remote for ``counter`` (used after the older blocks)."""
        if ids.step != 1 or not ids:
            raise ArgumentError(f"an id block must be a non-empty contiguous range, got {ids!r}")
        key = K.RESERVATION_PREFIX + counter.encode("utf-8")
        with self._writing(timeout) as p:
            blocks = decode_blocks(p.txn.get(key))
            blocks.append((ids.start, ids.stop))
            p.txn.put(key, encode_blocks(blocks))
