"""Unversioned data: an instance's values shared by every version and belonging to none.

For data derived from something immutable (the labelmap's index of its never-modified base volume),
written even when every version is committed; a per-instance generation counts its writes, so a
remote sync can tell the data did not change since it last uploaded it. Split out of the repository
module (issue 30), unchanged: :class:`~.repository.Repository` inherits it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import napari_shardscope.core.versioned.keys as K
from napari_shardscope.core.errors import ArgumentError
from napari_shardscope.core.versioned.engines import ReadTxn, WriteTxn
from napari_shardscope.core.versioned.handle import RepositoryHandle
from napari_shardscope.core.versioned.instance import Instance


class UnversionedData(RepositoryHandle):
    """The unversioned-data part of :class:`~.repository.Repository`."""

    # -- unversioned data -----------------------------------------------------------------------

    def get_unversioned(self, instance: Instance | str, key: bytes) -> bytes | None:
        """An instance's unversioned value of ``key`` (None when absent); see :meth:`put_unversioned`."""
        inst = self.instance(instance)
        with self._engine.read() as txn:
            return txn.get(K.unversioned_key(inst.iid, key))

    def get_unversioned_many(self, instance: Instance | str, keys: Iterable[bytes]) -> list[bytes | None]:
        """Several unversioned values of an instance, in one snapshot (None for absent keys)."""
        inst = self.instance(instance)
        with self._engine.read() as txn:
            return txn.get_many([K.unversioned_key(inst.iid, key) for key in keys])

    def unversioned_generation(self, instance: Instance | str) -> int:
        """How many transactions have written ``instance``'s unversioned data (0: never).

        A remote sync records the value it saw with the pages it synced: while it stays the same, the
        unversioned data is those pages and need not be read again (see ``remotes.pages``).
        """
        inst = self.instance(instance)
        with self._engine.read() as txn:
            return _unversioned_generation(txn, inst.iid)

    def scan_unversioned(self, instance: Instance | str, prefix: bytes = b"") -> list[tuple[bytes, bytes]]:
        """An instance's unversioned ``(key, value)`` pairs whose key starts with ``prefix`` (one snapshot)."""
        inst = self.instance(instance)
        lo = K.unversioned_prefix(inst.iid, prefix)
        cut = len(K.unversioned_prefix(inst.iid))
        with self._engine.read() as txn:
            return [(key[cut:], value) for key, value in txn.scan(lo, K.next_prefix(lo))]

    def put_unversioned(self, instance: Instance | str,
                        items: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]], *,
                        timeout: float | None = None) -> int:
        """Store unversioned values of an instance in one transaction; returns how many.

        Unversioned data is shared by every version and belongs to none, so it may be written
        while every version is committed. It is meant for data derived from something immutable —
        the labelmap keeps the index of its (never modified) base volume here, built on first need
        even when the root is long committed. Versioned data must never go here: nothing records
        who changed it, and no version could be read as it was before.
        """
        return self.replace_unversioned(instance, (), items, timeout=timeout)  # nothing deleted first

    def replace_unversioned(self, instance: Instance | str, prefixes: Iterable[bytes],
                            items: Mapping[bytes, bytes] | Iterable[tuple[bytes, bytes]], *,
                            timeout: float | None = None) -> int:
        """Delete every unversioned key under ``prefixes`` and store ``items``, in one transaction.

        For derived data rebuilt whole (a label index rebuilt, a migration's new layout): readers see
        the old set or the new one, never stale keys of the old beside the new. Returns how many were stored.
        """
        inst = self.instance(instance)
        pairs = items.items() if isinstance(items, Mapping) else items
        n = 0
        with self._writing(timeout) as p:
            for prefix in prefixes:
                lo = K.unversioned_prefix(inst.iid, prefix)
                for key in list(p.txn.scan_keys(lo, K.next_prefix(lo))):
                    p.txn.delete(key)
            for key, value in pairs:
                if not isinstance(value, bytes):
                    raise ArgumentError(f"values must be bytes, got {type(value).__name__}")
                p.txn.put(K.unversioned_key(inst.iid, key), value)
                n += 1
            _bump_unversioned(p.txn, inst.iid)
        return n


def _unversioned_generation(txn: ReadTxn, iid: int) -> int:
    raw = txn.get(K.unversioned_generation_key(iid))
    return 0 if raw is None else K.unpack_u64(raw)


def _bump_unversioned(txn: WriteTxn, iid: int) -> None:
    """Count a write to instance ``iid``'s unversioned data, in the transaction that writes it."""
    txn.put(K.unversioned_generation_key(iid), K.pack_u64(_unversioned_generation(txn, iid) + 1))
